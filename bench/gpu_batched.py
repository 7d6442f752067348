"""Batched exact speculation at the batch sizes long-form work uses: decoder tokens per second of plain
decoding and of each drafter at batch 1-32, and what ``--draft auto`` picks at each batch size.

    python bench/gpu_batched.py [--device cuda] [--models large-v3,medium] [--batches 1,4,8,16,32]
                                [--acceptances 0.6,0.7,0.8,0.9] [--tokens 100] [--budget-s 150]
    python bench/gpu_batched.py --device cpu --dtype bfloat16 --d-model 128 --batches 1,4 ...   (rehearsal)

RANDOM WEIGHTS with the layer structure of whisper-large-v3 and medium (bench/large_target_probe.py;
``--d-model`` narrows them for a rehearsal), run by the product's runtime and decoders. Each batch
holds B different 30 s windows of the public English clips; each row may write its own number of
tokens (0.6x to 1.4x ``--tokens``, so rows end at different tokens, as a long file's chunks do).
Drafters: the distil-shaped model (2 decoder layers over the target's own encoder output), early
exit (the target's first k layers, no adapter) and the n-gram lookup (no model). Their draft steps
run for real, but their choices replay the plain decode's own tokens, each right with probability
a: rows named PROJECTION give what a drafter of that per-token acceptance gets; random weights give
no real acceptance. Per model and batch size:

- ``plain, 1 column``: one-token passes, the fastest plain decoding here (the baseline of
  ``speedup_vs_fastest_plain``). Not what speculation is exact against on a GPU;
- ``plain``: the fixed-shape passes of the batch's width W (``specwhisper.asr.runtime.kv_cache.fixed_width_for``)
  that plain and speculative decoding share on a GPU: speculation is token-identical to it
  (``token_identical``, every row), ``decoder_speedup`` is against it;
- ``costs``: ``--draft auto``'s own measurement at this batch size (``AutoDecoder.measure``) and its
  choice at each acceptance, with the plain step's cost at widths 1-16 (what W costs) and auto's step
  over this bench's own timing of it (``auto_step_vs_bench``, about 1 where auto's clock is right);
- each drafter at each acceptance (in a batch a drafter model's rows keep the initial k of 4,
  ``SpeculativeDecoder.lookahead_for``; the n-gram lookup's rows grow their own);
- at batch 1 and 16, each drafter model at acceptance 0.8 again, the same replay (so the same drafts)
  with the round made to wait more: at each draft step (``waits_each_draft_step``), and for its drafts
  before the verify pass (``reads_drafts_first``). ``speedup`` is what the round's one read (its draft
  tokens kept on the device and read with the verdict, ``specwhisper.speculative.draft_steps``) gains
  over each; about 1 on the CPU;
- at every batch above 1, each drafter model at acceptance 0.8 again, the same replay, its rows held to
  the k that auto's cost model chose (``auto_draft_length``), as ``--draft auto`` decodes a batch;
  ``speedup`` is what that gains over the row's initial k of 4.

Writes bench/results/gpu_batched.json (``--out``) after every row.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import machine  # noqa: E402
from bench.large_target import EXIT_LAYERS, target_and_drafter  # noqa: E402
from bench.large_target_probe import DRAFTERS, timed  # noqa: E402
from specwhisper.asr.drafters.auto import AutoDecoder, Costs, choose  # noqa: E402
from specwhisper.asr.decoding.greedy import GreedyDecoder  # noqa: E402
from specwhisper.asr.drafters.ngram import WhisperNgramDrafter  # noqa: E402
from specwhisper.asr.drafters.choice import model_drafter  # noqa: E402
from specwhisper.asr.drafters.early_exit import EarlyExitDrafter  # noqa: E402
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder  # noqa: E402
from specwhisper.audio.chunking import Chunk  # noqa: E402
from specwhisper.hardware.device import HostCopy, resolve_device, resolve_dtype  # noqa: E402
from specwhisper.speculative.draft_steps import Drafts  # noqa: E402
from tests.replay_drafter import Replay, ReplayLookup, replaying  # noqa: E402

ACCEPTANCES = (0.6, 0.7, 0.8, 0.9)
BATCHES = (1, 4, 8, 16, 32)
WINDOW = 30 * 16000


def windows(rows: int, seed: int = 0) -> list[np.ndarray]:
    """``rows`` different 30 s windows cut from the public English clips laid end to end (noise where
    the eval files are missing)."""
    try:
        from specwhisper.audio.loading import load_audio
        from specwhisper.evaluation.transcripts import english_set

        audio = np.concatenate([load_audio(i.path) for i in english_set()])
    except Exception:  # no eval files: the weights are random anyway
        audio = np.random.default_rng(seed).standard_normal(200 * 16000).astype(np.float32) * 0.1
    audio = np.concatenate([audio] * (1 + WINDOW // len(audio)))
    step = 7 * 16000 + 1237  # windows start 7.08 s apart, wrapping round
    return [np.roll(audio, -(i * step) % len(audio))[:WINDOW] for i in range(rows)]


@contextmanager
def width(rt, columns: int):
    """Every fixed-shape pass of the block ``columns`` wide, whatever the row count (nothing changes on a
    runtime of natural shapes: the CPU's row-exact float32)."""
    if rt.fixed_width is None:
        yield
        return
    saved = rt.fixed_width, rt.fixed_columns
    rt.fixed_width, rt.fixed_columns = columns, 1 << 30
    try:
        yield
    finally:
        rt.fixed_width, rt.fixed_columns = saved


def limits_for(rows: int, tokens: int) -> list[int]:
    """Per-row token counts spread over 0.6-1.4x ``tokens`` (mean ``tokens``), in a fixed shuffled order."""
    spread = np.linspace(0.6, 1.4, rows) if rows > 1 else np.ones(1)
    order = np.random.default_rng(rows).permutation(rows)
    return [max(1, int(round(tokens * spread[i]))) for i in order]


def step_costs(rt, enc: torch.Tensor, prompt: list[int], widths=(1, 4, 8, 16), context: int = 100, reps: int = 5) -> dict:
    """Milliseconds of a plain one-token step of every row at ``context`` tokens, per pass width."""
    out, b, dev = {}, enc.shape[0], rt.device
    seq = prompt + [220 + i for i in range(context - len(prompt))]
    for w in widths:
        with width(rt, w):
            cache = rt.new_cache(enc)
            rt.step(torch.tensor([seq] * b, device=dev), torch.arange(len(seq), device=dev).expand(b, -1), cache)
            tok, pos = torch.full((b, 1), 220, device=dev), torch.full((b, 1), context, device=dev)
            out[w] = round(timed(lambda: rt.step(tok, pos, cache), dev, reps), 3)
            cache = None  # freed before the next width
    return out


# batch sizes at which a drafter model's row at acceptance 0.8 is run again waiting at each draft step
WAIT_BATCHES = (1, 16)


@contextmanager
def waiting_each_draft_step(drafter):
    """Each draft step's end flags waited for, as a loop that reads every step's token does: what a
    draft round that keeps its tokens on the device saves (``specwhisper.speculative.draft_steps``)."""
    ready = HostCopy.ready
    HostCopy.ready = lambda self: self._event is None or (self._event.synchronize() or True)
    try:
        yield
    finally:
        HostCopy.ready = ready


@contextmanager
def reading_drafts_first(drafter):
    """A round's drafts read before its verify pass (a second wait a round), as a verify pass that takes
    its tokens from the host does: what reading them with the verdict saves."""
    draft = drafter.draft
    drafter.draft = lambda contexts, ks: Drafts(draft(contexts, ks).read())
    try:
        yield
    finally:
        del drafter.draft


# the rounds a drafter model's row at acceptance 0.8 is run again with, beside its one read a round:
# (what the row is called, its flag in the json, how the round is made to wait)
WAITING = (("waiting at each draft step", "waits_each_draft_step", waiting_each_draft_step),
           ("reading its drafts before the verify pass", "reads_drafts_first", reading_drafts_first))


def again(spec: SpeculativeDecoder, refs, enc, prompt, feats, limits, lookahead: Lookahead,
          context=nullcontext) -> tuple:
    """A drafter row's decode again with the same replay (so the same drafts) under ``lookahead``, its
    drafter inside ``context`` (``WAITING``): (the output, decoder tokens per second)."""
    replay = Replay(refs, 0.8, spec.sp.eot, seed=8)
    spec = SpeculativeDecoder(spec.rt, spec.sp, spec.rules, replaying(spec.drafter, replay), lookahead)
    with context(spec.drafter):
        out = spec.decode(enc, prompt, feats, limits=limits)
    return out, out.stats.generated_tokens / out.stats.decoder_seconds


class Bench:
    def __init__(self, args, device: str, dtype: torch.dtype, folder: Path):
        self.args, self.device, self.dtype, self.folder = args, device, dtype, folder
        self.t0 = time.perf_counter()
        self.runs: list[dict] = []
        self.skipped: list[str] = []
        self.last_row_s = 0.0  # the last drafter row's seconds, for guessing what a batch size will take
        dev = torch.cuda.get_device_name() if device.startswith("cuda") else machine(torch.get_num_threads())
        self.machine = f"{dev}; torch {torch.__version__}, {str(dtype).removeprefix('torch.')}"

    def over_budget(self, what: str, ahead: float = 0.0) -> bool:
        """True (and ``what`` noted as skipped) once the budget is spent, or would be ``ahead`` seconds on."""
        if time.perf_counter() - self.t0 + ahead <= self.args.budget_s:
            return False
        self.skipped.append(what)
        print(f"budget of {self.args.budget_s:.0f} s spent: {what} skipped", flush=True)
        return True

    def add(self, row: dict) -> None:
        self.runs.append(row)
        print(json.dumps(row), flush=True)
        self.save()

    def save(self) -> None:
        self.args.out.write_text(json.dumps({
            "machine": self.machine,
            "note": "RANDOM WEIGHTS with the layer structure of the named models"
                    + (f" at d_model {self.args.d_model}" if self.args.d_model else "")
                    + "; rows named PROJECTION draft with real draft steps but choose a replay of the plain decode's "
                    "tokens, right with the given per-token probability; each row of a batch is a different 30 s "
                    "window with its own token limit (0.6-1.4x the mean); decoder_speedup is against plain decoding "
                    "in the batch's fixed-shape width (what speculation is token-identical to), "
                    "speedup_vs_fastest_plain against one-token passes; times are decoder seconds (encoder excluded)",
            "skipped": self.skipped,
            "runs": self.runs}, indent=1) + "\n")

    def model(self, name: str) -> None:
        args = self.args
        t = time.perf_counter()
        engine, d_bundle = target_and_drafter(name, self.device, self.dtype, self.folder, args.d_model)
        rt, sp, rules = engine.runtime, engine.special, engine.rules
        print(f"{name}: built in {time.perf_counter() - t:.0f} s; fixed-shape mode: {rt.fixed_width is not None}", flush=True)
        prompt = sp.prompt("en", "transcribe", timestamps=True)
        exit_layer = EXIT_LAYERS[name][0]
        if args.d_model:
            exit_layer = min(exit_layer, len(rt.layers) - 1)
        clips = windows(max(args.batches))
        kinds = [DRAFTERS[name], f"early-exit:{exit_layer}", "ngram"]

        def drafter(kind: str):
            if kind == "ngram":
                return WhisperNgramDrafter()
            return EarlyExitDrafter(rt, sp, rules, exit_layer) if kind.startswith("early-exit") else \
                model_drafter(engine, kind, bundle=d_bundle)

        # one drafter of each kind for the whole run, its choices re-pointed at each replay: a model
        # drafter's runtime keeps its CUDA graphs, captured in the untimed warm-up
        projected = {k: drafter(k) for k in kinds if k != "ngram"}

        def replayed(kind: str, replay: Replay):
            return ReplayLookup(replay) if kind == "ngram" else replaying(projected[kind], replay)

        for b in args.batches:
            # a batch size's plain decodes and auto's measurement take about what its first drafter row does
            if self.over_budget(f"{name} batch {b}", ahead=self.last_row_s * 6):
                return
            feats = engine.features(np.concatenate(clips[:b]), [Chunk(i * WINDOW, (i + 1) * WINDOW) for i in range(b)])
            enc = engine.encoder.encode(feats)
            limits = limits_for(b, args.tokens)
            label = f"{name} batch {b}"
            w = rt.width_for(b)
            plain = GreedyDecoder(rt, sp, rules)
            with width(rt, 1):
                plain.decode(enc, prompt, limits=limits)  # warm-up: graphs captured, kernels loaded
                fast = plain.decode(enc, prompt, limits=limits)
            plain.decode(enc, prompt, limits=limits)
            ref = plain.decode(enc, prompt, limits=limits)
            refs = [s.tokens for s in ref.sequences]
            n = ref.stats.generated_tokens
            fast_tps = fast.stats.generated_tokens / fast.stats.decoder_seconds
            plain_tps = n / ref.stats.decoder_seconds
            self.add(dict(name=f"{label}, plain, 1 column", model=name, batch=b, width=1, tokens=fast.stats.generated_tokens,
                          decoder_s=round(fast.stats.decoder_seconds, 4), decoder_tokens_per_s=round(fast_tps, 1),
                          same_tokens_as_fixed_width=[s.tokens for s in fast.sequences] == refs))
            self.add(dict(name=f"{label}, plain", model=name, batch=b, width=w, tokens=n,
                          row_tokens=[len(r) for r in refs], decoder_s=round(ref.stats.decoder_seconds, 4),
                          decoder_tokens_per_s=round(plain_tps, 1), speedup_vs_fastest_plain=round(plain_tps / fast_tps, 3)))
            # --draft auto's own measurement at this batch size, and its pick at each acceptance
            auto = AutoDecoder(rt, sp, rules, {k: SpeculativeDecoder(rt, sp, rules, drafter(k)) for k in kinds})
            auto.acceptance = {k: max(args.acceptances) for k in kinds}  # every wide pass timed
            costs = auto.measure(enc, prompt)
            # what auto's cost model expects of each drafter at each acceptance (its best k), beside what is measured
            expected = {str(a): {k: choose(Costs(costs.step, costs.verify, {k: costs.draft[k]}, costs.width), {k: a},
                                           auto.bonus, margin=0.0)[1:] for k in kinds} for a in args.acceptances}
            picks = {str(a): choose(costs, {k: a for k in kinds}, auto.bonus) for a in args.acceptances}
            by_width = step_costs(rt, enc, prompt) if w is not None else None
            self.add(dict(name=f"{label}, costs", model=name, batch=b, width=costs.width, step_ms_by_width=by_width,
                          auto_step_ms=round(costs.step * 1000, 3),
                          # auto's step against this bench's own timing of the same width (about 1: auto's clock is right)
                          auto_step_vs_bench=round(costs.step * 1000 / by_width[w], 3) if by_width and w in by_width else None,
                          auto_verify_ms={k: round(v * 1000, 3) for k, v in costs.verify.items()},
                          auto_draft_step_ms={k: round(v * 1000, 3) for k, v in costs.draft.items()},
                          auto_choice={a: dict(drafter=p[0] or "none", k=p[1], expected_speedup=round(p[2], 3))
                                       for a, p in picks.items()},
                          auto_expected={a: {k: dict(k=e[0], speedup=round(e[1], 3)) for k, e in per.items()}
                                         for a, per in expected.items()}))
            for kind in kinds:
                warm = SpeculativeDecoder(rt, sp, rules, replayed(kind, Replay(refs, 0.8, sp.eot)), Lookahead())
                warm.decode(enc, prompt, feats, limits=limits)  # graphs of this drafter's passes
                for a in args.acceptances:
                    if self.over_budget(f"{label} {kind} at {a}", ahead=self.last_row_s):
                        return
                    t_row = time.perf_counter()
                    spec = SpeculativeDecoder(rt, sp, rules, replayed(kind, Replay(refs, a, sp.eot, seed=int(a * 10))), Lookahead())
                    out = spec.decode(enc, prompt, feats, limits=limits)
                    st = out.stats
                    tps = st.generated_tokens / st.decoder_seconds
                    self.add(dict(
                        name=f"{label} + {kind}, PROJECTION at per-token acceptance {a}", model=name, batch=b, width=w,
                        drafter=kind, projected_acceptance=a,
                        token_identical=[s.tokens for s in out.sequences] == refs,
                        acceptance_rate=round(st.acceptance_rate, 3), tokens_per_target_pass=round(st.tokens_per_target_pass, 2),
                        decoder_s=round(st.decoder_seconds, 4), decoder_tokens_per_s=round(tps, 1),
                        decoder_speedup=round(tps / plain_tps, 3), speedup_vs_fastest_plain=round(tps / fast_tps, 3),
                        expected_speedup=round(expected[str(a)][kind][1], 3)))
                    self.last_row_s = time.perf_counter() - t_row
                    if a == 0.8 and kind != "ngram" and b in WAIT_BATCHES:
                        for waiting in WAITING:
                            self.waiting_row(name, b, kind, spec, out, tps, plain_tps, refs, enc, prompt, feats, limits, waiting)
                    if a == 0.8 and kind != "ngram" and b > 1:
                        self.auto_length_row(name, b, kind, spec, tps, plain_tps, refs, enc, prompt, feats, limits,
                                             expected[str(a)][kind][0])
            del enc, feats
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
        engine = d_bundle = None  # freed before the next model


    def waiting_row(self, model, b, kind, spec, round_out, round_tps, plain_tps, refs, enc, prompt, feats, limits,
                    waiting) -> None:
        """The same decode (the same replay) with the round made to wait as ``waiting`` says (``WAITING``),
        beside its row."""
        how, flag, context = waiting
        label = f"{model} batch {b}"
        if self.over_budget(f"{label} {kind} {how}", ahead=self.last_row_s):
            return
        out, tps = again(spec, refs, enc, prompt, feats, limits, Lookahead(), context)
        st = out.stats
        self.add({
            "name": f"{label} + {kind}, PROJECTION at per-token acceptance 0.8, {how}",
            "model": model, "batch": b, "drafter": kind, flag: True,
            "token_identical": [s.tokens for s in out.sequences] == refs, "drafted": st.drafted_tokens,
            "drafted_as_in_its_row": st.drafted_tokens == round_out.stats.drafted_tokens,
            "decoder_s": round(st.decoder_seconds, 4), "decoder_tokens_per_s": round(tps, 1),
            "decoder_speedup": round(tps / plain_tps, 3),
            # above 1: the row's one read a round pays
            "speedup": round(round_tps / tps, 3)})


    def auto_length_row(self, model, b, kind, spec, row_tps, plain_tps, refs, enc, prompt, feats, limits, k) -> None:
        """The same decode (the same replay) with the rounds at auto's ``k``, as ``--draft auto`` decodes a
        batch (``specwhisper.asr.drafters.auto``), beside its row's initial k of 4."""
        label = f"{model} batch {b}"
        if self.over_budget(f"{label} {kind} at auto's draft length", ahead=self.last_row_s):
            return
        out, tps = again(spec, refs, enc, prompt, feats, limits, Lookahead(initial=k))
        st = out.stats
        self.add({
            "name": f"{label} + {kind}, PROJECTION at per-token acceptance 0.8, at auto's draft length {k}",
            "model": model, "batch": b, "drafter": kind, "auto_draft_length": k,
            "token_identical": [s.tokens for s in out.sequences] == refs,
            "tokens_per_target_pass": round(st.tokens_per_target_pass, 2),
            "decoder_s": round(st.decoder_seconds, 4), "decoder_tokens_per_s": round(tps, 1),
            "decoder_speedup": round(tps / plain_tps, 3),
            # above 1: auto's draft length pays over the initial one
            "speedup": round(tps / row_tps, 3)})


def summary(runs: list[dict], acceptance: float) -> None:
    print(f"\ndecoder tokens/s, plain (1 column | batch width) and each drafter at acceptance {acceptance} "
          "(speedup against the batch-width plain / the fastest plain):")
    for r in runs:
        if r["name"].endswith(", plain"):
            key = (r["model"], r["batch"])
            fast = next((x for x in runs if (x["model"], x["batch"]) == key and x.get("width") == 1 and "plain" in x["name"]), None)
            line = f"  {r['model']:9s} batch {r['batch']:2d}  plain {fast['decoder_tokens_per_s'] if fast else '?':>8} | " \
                   f"{r['decoder_tokens_per_s']:>8} (W {r['width']})"
            for x in runs:
                if (x["model"], x["batch"]) == key and x.get("projected_acceptance") == acceptance:
                    line += f"  {x['drafter']} {x['decoder_speedup']:.2f}x/{x['speedup_vs_fastest_plain']:.2f}x" \
                            f"{'' if x['token_identical'] else ' NOT IDENTICAL'}"
                for how, flag, _ in WAITING:
                    if (x["model"], x["batch"]) == key and x.get(flag):
                        line += f"  [{x['drafter']} {how} {x['decoder_speedup']:.2f}x" \
                                f"{'' if x['token_identical'] else ' NOT IDENTICAL'}]"
                if (x["model"], x["batch"]) == key and x.get("auto_draft_length"):
                    line += f"  [{x['drafter']} at auto's draft length {x['auto_draft_length']} {x['decoder_speedup']:.2f}x" \
                            f"{'' if x['token_identical'] else ' NOT IDENTICAL'}]"
            print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="large-v3,medium")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto", help="float16 on a GPU; bfloat16 on the CPU takes the GPU's exact path")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--acceptances", default=",".join(map(str, ACCEPTANCES)))
    ap.add_argument("--tokens", type=int, default=100, help="mean tokens per window (default: 100)")
    ap.add_argument("--d-model", type=int, help="a narrower model of the same layer structure (a rehearsal)")
    ap.add_argument("--threads", type=int, help="CPU threads")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new rows after this many seconds")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_batched.json")
    args = ap.parse_args(argv)
    args.batches = sorted(int(b) for b in args.batches.split(","))
    args.acceptances = [float(a) for a in args.acceptances.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args, device, dtype, Path(tmp))
        for name in args.models.split(","):
            if not bench.over_budget(name):
                bench.model(name)
    bench.save()
    summary(bench.runs, 0.8 if 0.8 in args.acceptances else args.acceptances[-1])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
