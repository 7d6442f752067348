"""Train the early-exit adapters (specwhisper/asr/drafters/early_exit.py) by self-distillation from the target itself.

    python -m train.exit_adapter [--model base] [--windows 160] [--ks 1,2,3,4,5] [--work build/exit-adapter]

1. ``collect``: synthesises speech windows with espeak-ng (``train/synth.py``: many voices, rates,
   pitches, generated English text) and takes the public eval clips (../shared/eval, public split
   only), decodes every window with the target's plain greedy decoder (Whisper's rules, timestamps
   on), then runs the target once teacher-forced over its own greedy tokens and caches, for every
   decoded position, the residual stream after each decoder layer and the target's greedy next
   token. This is the slow part (encoder + decoding, a few minutes); it is cached in ``--work``.
2. ``fit``: for each exit layer k, fits the adapter on the cached layer-k states: cross-entropy to the
   target's greedy token plus KL to the target's distribution, both over the drafter's (pruned) head
   vocabulary; the target's own head and final norm stay frozen (tied embedding). Seconds per k.
3. Reports top-1 agreement with the target (after Whisper's logit rules, as the drafter applies them)
   on held-out windows, with and without the adapter, and writes ``<out>/<model>-k<k>.safetensors``
   plus ``<out>/<model>.json`` (how they were made, losses, agreement). ``<out>``: ``specwhisper/asr/drafters/adapters/``
   for the embedded models, ``~/.cache/specwhisper/adapters/`` for any other target (a hub id or a
   folder). The drafter finds an adapter by the target's fingerprint in the file's metadata
   (``specwhisper.asr.drafters.exit_adapters.model_fingerprint``), whatever the target's name or path.

Everything runs on one thread (``torch.set_num_threads(1)``): other work shares this CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SEED = 0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------ collect


def windows(n_synth: int, seed: int, public: bool):
    """(name, language, audio) of every training window: synthetic ones, then the public eval clips."""
    from train.synth import synth_window
    from train.text import TextGenerator

    r, text = random.Random(seed), TextGenerator(seed)
    for i in range(n_synth):
        audio, _ = synth_window(r, text)
        yield f"synth-{i:04d}", "en", audio
    if public:
        from specwhisper.audio.loading import load_audio
        from specwhisper.evaluation.transcripts import load_manifest  # the public split only

        for item in load_manifest():
            yield f"public:{item.file}", item.language or "en", load_audio(item.path)[: 30 * 16000]


@torch.inference_mode()
def teacher_forced_states(rt, enc: torch.Tensor, seqs: list[list[int]]) -> list[torch.Tensor]:
    """Residual stream after each layer, and the final-norm hidden state, at every position of each row:
    per row a tensor [len, layers + 1, d] (the last slot is the final-norm state)."""
    b, width = len(seqs), max(len(s) for s in seqs)
    tokens = torch.zeros((b, width), dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.tensor(s)
        tokens[i, len(s) :] = s[-1]
    positions = torch.arange(width).expand(b, -1)
    cache = rt.new_cache(enc)
    x = rt.embed_at(tokens, positions)
    per_layer = []
    for i in range(len(rt.layers)):
        x = rt.layer_range(x, positions, cache, i, i + 1)
        per_layer.append(x)
    per_layer.append(rt.final_norm(x))
    stacked = torch.stack(per_layer, dim=2)  # [B, width, layers+1, d]
    return [stacked[i, : len(s)] for i, s in enumerate(seqs)]


def collect(model: str, n_synth: int, seed: int, work: Path, batch_size: int = 8) -> Path:
    """Decode every window with the target and cache the per-layer states of its greedy tokens."""
    from specwhisper.asr.decoding.greedy import GreedyDecoder
    from specwhisper.asr.drafters.exit_adapters import adapter_label
    from specwhisper.asr.engine import AsrEngine

    out = work / f"{adapter_label(model)}-states.pt"
    if out.exists():
        log(f"cached states: {out}")
        return out
    engine = AsrEngine(model)
    rt, sp = engine.runtime, engine.special
    decoder = GreedyDecoder(rt, sp, engine.rules)
    fe = engine.bundle.feature_extractor
    records = dict(states=[], labels=[], window=[], index=[], encoder=[])
    meta = []  # per window: name, language, prompt, tokens
    pending: dict[str, list] = {}
    t0 = time.perf_counter()

    def flush(lang: str) -> None:
        group = pending.pop(lang, [])
        if not group:
            return
        feats = fe([a for _, a in group], sampling_rate=16000, return_tensors="pt").input_features
        enc = engine.encoder.encode(feats)
        prompt = sp.prompt(lang if sp.multilingual else None, "transcribe", timestamps=True)
        seqs = decoder.decode(enc, prompt).sequences
        full = [prompt + s.tokens for s in seqs]
        states = teacher_forced_states(rt, enc, full)
        for (name, _), s, st, e in zip(group, seqs, states, enc):
            w = len(meta)
            meta.append(dict(name=name, language=lang, prompt=prompt, tokens=s.tokens))
            records["encoder"].append(e.to(torch.float16))
            # input token at position j (j >= len(prompt): the sampled tokens) -> the target's next token
            targets = s.tokens[1:] + ([] if s.hit_max_length else [sp.eot])
            n = len(targets)
            if n == 0:
                continue
            lo = len(prompt)
            records["states"].append(st[lo : lo + n].to(torch.float16))  # after layers 1..L, final norm
            records["labels"].append(torch.tensor(targets))
            records["window"].append(torch.full((n,), w))
            records["index"].append(torch.arange(1, n + 1))  # tokens of the window before the predicted one
        log(f"{len(meta)} windows, {sum(len(x) for x in records['labels'])} positions, {time.perf_counter() - t0:.0f} s")

    for name, lang, audio in windows(n_synth, seed, public=True):
        lang = lang if sp.multilingual else "en"
        if not sp.multilingual and lang != "en":
            continue
        pending.setdefault(lang, []).append((name, audio))
        if len(pending[lang]) == batch_size:
            flush(lang)
    for lang in list(pending):
        flush(lang)
    work.mkdir(parents=True, exist_ok=True)
    torch.save(dict(model=model, seed=seed, n_synth=n_synth, meta=meta,
                    states=torch.cat(records["states"]), labels=torch.cat(records["labels"]),
                    window=torch.cat(records["window"]), index=torch.cat(records["index"]),
                    encoder=torch.stack(records["encoder"]),
                    seconds=time.perf_counter() - t0), out)
    log(f"wrote {out}")
    return out


# ------------------------------------------------------------------------------ fit


class Data:
    """The cached states, split into training and held-out positions, with the compact vocabulary."""

    def __init__(self, path: Path, engine, heldout_synth: float = 0.1, head_text_tokens: int | None = None):
        from specwhisper.asr.drafters.vocab import CompactVocab, HEAD_TEXT_TOKENS
        from specwhisper.evaluation.transcripts import english_set

        d = torch.load(path, weights_only=False)
        self.meta = d["meta"]
        self.model = d["model"]
        self.states, self.labels, self.window, self.index = d["states"], d["labels"], d["window"], d["index"]
        self.encoder = d["encoder"]
        self.collect_seconds = d["seconds"]
        self.rt = engine.runtime
        self.vocab = CompactVocab(engine.runtime, engine.special, engine.rules, head_text_tokens or HEAD_TEXT_TOKENS)
        names = [m["name"] for m in self.meta]
        synth = [i for i, n in enumerate(names) if n.startswith("synth")]
        # the public clips of the English WER set (the benchmark's files) are never trained on;
        # the other public clips (meetings, two-speaker stereo, other languages) are
        bench = {f"public:{i.file}" for i in english_set()}
        public_bench = [i for i, n in enumerate(names) if n in bench]
        public_rest = [i for i, n in enumerate(names) if n.startswith("public:") and n not in bench]
        n_hold = max(1, int(len(synth) * heldout_synth))
        self.heldout_windows = {"synthetic": synth[-n_hold:], "public-english-set": public_bench}
        self.train_windows = sorted(synth[:-n_hold] + public_rest)
        # compact labels (-1: outside the drafter's vocabulary, left out of the loss)
        remap = torch.full((self.rt.vocab_size,), -1, dtype=torch.long)
        remap[self.vocab.ids] = torch.arange(len(self.vocab.ids))
        self.clabels = remap[self.labels]
        self.by_window = [torch.empty(0, dtype=torch.long)] * len(self.meta)
        order = torch.argsort(self.window, stable=True)
        counts = torch.bincount(self.window, minlength=len(self.meta))
        for w, idx in enumerate(torch.split(order, counts.tolist())):
            self.by_window[w] = idx
        self.head = self.rt.proj.detach()[self.vocab.ids].T.contiguous()  # [d, V']: the tied head's compact rows
        self.teacher = self._teacher_topk()
        self._kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @torch.inference_mode()
    def _teacher_topk(self, k: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's top-k compact ids and log-probabilities (over the compact vocabulary) per position."""
        ids, lps = [], []
        for s in range(0, len(self.labels), 1024):
            lg = self.states[s : s + 1024, -1].float() @ self.head
            lp = lg.log_softmax(-1)
            v, i = lp.topk(k, dim=-1)
            ids.append(i)
            lps.append(v)
        return torch.cat(ids), torch.cat(lps)

    def cross_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's layer-``layer`` cross-attention keys/values of every window [W, heads, frames, hd] (fp16)."""
        if layer not in self._kv:
            self._kv[layer] = self._cross_kv(layer)
        return self._kv[layer]

    def _cross_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        att = self.rt.layers[layer].encoder_attn
        ks, vs = [], []
        with torch.inference_mode():
            for w in range(len(self.encoder)):
                e = self.encoder[w : w + 1].float()
                ks.append(self.rt._split(att.k_proj(e)).to(torch.float16))
                vs.append(self.rt._split(att.v_proj(e)).to(torch.float16))
        return torch.cat(ks), torch.cat(vs)


def batch_of(data: Data, windows: list[int], adapter, kv):
    """The adapter's inputs for all positions of these windows: padded layer-k states [B, n, d] and the
    cross K/V; the positions' ids [B, n] and which are real."""
    idx = [data.by_window[w] for w in windows]
    n = max(len(i) for i in idx)
    pos = torch.full((len(windows), n), -1, dtype=torch.long)
    for r, i in enumerate(idx):
        pos[r, : len(i)] = i
    mask = pos >= 0
    h = data.states[pos.clamp(min=0), adapter.config.exit_layer - 1].float()
    extra = {} if kv is None else dict(cross_k=kv[0][windows].float(), cross_v=kv[1][windows].float())
    return h, extra, pos, mask


def fit_adapter(data: Data, exit_layer: int, cross_layer: int | None, rank: int, steps: int, windows_per_step: int = 4,
                lr: float = 2e-3, negatives: int = 2048, kl_weight: float = 1.0, seed: int = SEED, log_every: int = 100):
    """Self-distillation of one exit adapter; returns it and the loss curve."""
    import torch.nn.functional as F

    from specwhisper.asr.drafters.exit_adapters import AdapterConfig, ExitAdapter, model_fingerprint

    rt = data.rt
    cfg = AdapterConfig(model=data.model, exit_layer=exit_layer, cross_layer=cross_layer, rank=rank,
                        d_model=rt.d_model, n_head=rt.n_head, fingerprint=model_fingerprint(rt.model))
    adapter = ExitAdapter.from_target(cfg, rt)
    kv = data.cross_kv(cross_layer) if cross_layer is not None else None
    rt.model.requires_grad_(False)  # the target stays frozen (its layer-j projections are bound, not owned)
    opt = torch.optim.AdamW(adapter.parameters(), lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    t_ids, t_lps = data.teacher
    vsize = data.head.shape[1]
    losses = []
    train = torch.tensor(data.train_windows)
    for step in range(steps):
        ws = train[torch.randperm(len(train), generator=g)[:windows_per_step]].tolist()
        h, extra, pos, mask = batch_of(data, ws, adapter, kv)
        x = adapter(h, **extra)[mask]  # [P, d]
        p = pos[mask]
        y, tid, tlp = data.clabels[p], t_ids[p], t_lps[p]
        # candidates: the labels, the teacher's top ids, random negatives
        cand = torch.unique(torch.cat([y[y >= 0], tid.flatten(), torch.randint(vsize, (negatives,), generator=g)]))
        where = torch.full((vsize,), -1, dtype=torch.long)
        where[cand] = torch.arange(len(cand))
        logits = x @ data.head[:, cand]
        logp = logits.log_softmax(-1)
        ok = y >= 0
        loss = F.nll_loss(logp[ok], where[y[ok]])
        if kl_weight:
            tp = tlp.exp()
            tp = tp / tp.sum(-1, keepdim=True)
            loss = loss + kl_weight * (tp * (tp.clamp_min(1e-9).log() - logp.gather(1, where[tid]))).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        for group in opt.param_groups:  # linear decay
            group["lr"] = lr * (1 - (step + 1) / steps)
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            log(f"  k={exit_layer} j={cross_layer} r={rank} step {step + 1}/{steps} loss {np.mean(losses[-log_every:]):.3f}")
    return adapter.eval().requires_grad_(False), losses


@torch.inference_mode()
def draft_outcomes(data: Data, adapter, exit_layer: int, windows: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per window, along the target's greedy tokens: does the drafter (compact vocabulary, Whisper's
    rules as the drafter applies them) guess the target's next token, and its probability for the guess."""
    from specwhisper.asr.drafters.exit_adapters import AdapterConfig, ExitAdapter

    if adapter is None:  # no adapter: the final norm on the layer-k state
        adapter = ExitAdapter.from_target(AdapterConfig(data.model, exit_layer, None, 0, data.rt.d_model,
                                                        data.rt.n_head), data.rt)
    kv = data.cross_kv(adapter.config.cross_layer) if adapter.config.cross_layer is not None else None
    out = []
    for s in range(0, len(windows), 8):
        ws = windows[s : s + 8]
        h, extra, pos, mask = batch_of(data, ws, adapter, kv)
        x = adapter(h, **extra)
        for r in range(len(ws)):
            p = pos[r][mask[r]]
            prefixes = [data.meta[int(data.window[t])]["tokens"][: int(data.index[t])] for t in p]
            picks, lps = data.vocab.select(data.vocab.logits(x[r][mask[r]]), prefixes)
            out.append((torch.tensor(picks) == data.labels[p], torch.tensor(lps).exp()))
    return out


def agreement(outcomes) -> float:
    hits = sum(int(c.sum()) for c, _ in outcomes)
    return hits / max(1, sum(len(c) for c, _ in outcomes))


@dataclass
class CostModel:
    """Costs relative to one plain decoding step of the target (batch 1), measured on this CPU:
    a decoder layer on one token, the full head on one row and on 2-8 rows, the drafter's extras
    (adapter, compact head, rules) per draft step, and the rules/bookkeeping of a verify pass."""

    layer: float = 0.13
    layers: int = 6
    head_1: float = 0.19
    head_8: float = 0.40
    extras: float = 0.10
    verify_fixed: float = 0.05
    upper_per_token: float = 0.08  # extra cost of each further token in the verify pass, per layer share

    def plain(self) -> float:
        return self.layer * self.layers + self.head_1 + 0.03


def simulate(outcomes, exit_layer: int, min_confidence: float, cost: CostModel, lookahead=None) -> dict:
    """Replay the speculative loop (no bonus token, dynamic lookahead, confidence stop) over the
    target's greedy sequences with the drafter's per-position outcomes: acceptance rate, tokens per
    verify pass and the decoder speedup the cost model predicts."""
    from specwhisper.speculative.lookahead import Lookahead

    look = lookahead or Lookahead()
    drafted = accepted = passes = tokens = 0
    spent = 0.0
    for correct, conf in outcomes:
        c, q = correct.tolist(), conf.tolist()
        n = len(c)  # predictions along the sequence (the first token comes from the prefill)
        i, k = 0, look.initial
        while i < n:
            d = 0
            while i + d < n:  # draft: the token at i + d is proposed (a low-confidence one is the last)
                d += 1
                if d >= k or q[i + d - 1] < min_confidence:
                    break
            a = 0
            while a < d and c[i + a]:
                a += 1
            emitted = min(a if a == d else a + 1, n - i)
            drafted += d
            accepted += a
            passes += 1
            tokens += emitted
            spent += d * (cost.layer * exit_layer + cost.extras)  # the drafter feeds d tokens
            upper = cost.layer * (cost.layers - exit_layer) * (1 + cost.upper_per_token * (d - 1))
            spent += upper + (cost.head_1 if d == 1 else cost.head_8) + cost.verify_fixed
            i += emitted
            k = look.update(k, d, a)
    return dict(acceptance=accepted / max(drafted, 1), tokens_per_pass=tokens / max(passes, 1),
                predicted_decoder_speedup=tokens * cost.plain() / max(spent, 1e-9))


def fit_all(model: str, states: Path, ks: list[int], cross_layer: int, rank: int, steps: int, out_dir: Path) -> dict:
    """Fit, evaluate and save one adapter per exit layer; returns the report written next to them."""
    from specwhisper.asr.drafters.exit_adapters import adapter_label, adapter_path, save_adapter
    from specwhisper.asr.engine import AsrEngine

    engine = AsrEngine(model)
    data = Data(states, engine)
    log(f"{len(data.train_windows)} training windows, held out: " + ", ".join(f"{n} {len(w)}" for n, w in data.heldout_windows.items()))
    cost = CostModel()
    report = dict(
        model=model, cross_layer=cross_layer, rank=rank, steps=steps, seed=SEED,
        data=dict(synthetic_windows=sum(m["name"].startswith("synth") for m in data.meta),
                  public_windows_trained=[data.meta[w]["name"].removeprefix("public:") for w in data.train_windows
                                          if data.meta[w]["name"].startswith("public:")],
                  training_positions=int(sum(len(data.by_window[w]) for w in data.train_windows)),
                  heldout_windows={n: len(w) for n, w in data.heldout_windows.items()},
                  heldout_positions={n: int(sum(len(data.by_window[x]) for x in w)) for n, w in data.heldout_windows.items()},
                  collect_seconds=round(data.collect_seconds)),
        cost_model=cost.__dict__, adapters={})
    for k in ks:
        t = time.perf_counter()
        j = max(cross_layer, k)
        adapter, losses = fit_adapter(data, k, j if j < len(engine.runtime.layers) else None, rank, steps)
        fit_s = time.perf_counter() - t
        # the confidence below which drafting stops: best predicted speedup on held-out SYNTHETIC windows
        synth = draft_outcomes(data, adapter, k, data.heldout_windows["synthetic"])
        taus = [0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
        tau = max(taus, key=lambda x: simulate(synth, k, x, cost)["predicted_decoder_speedup"])
        row = dict(fit_seconds=round(fit_s, 1), loss_first=round(float(np.mean(losses[:20])), 3),
                   loss_last=round(float(np.mean(losses[-20:])), 3), min_confidence=tau,
                   bytes_fp32=adapter.num_bytes(), heldout={})
        for name, ws in data.heldout_windows.items():
            with_a = synth if name == "synthetic" else draft_outcomes(data, adapter, k, ws)
            raw = draft_outcomes(data, None, k, ws)
            sim = simulate(with_a, k, tau, cost)
            row["heldout"][name] = dict(agreement=round(agreement(with_a), 4), agreement_without_adapter=round(agreement(raw), 4),
                                        **{f"simulated_{x}": round(v, 3) for x, v in sim.items()})
        path = adapter_path(model, k, out_dir)
        save_adapter(adapter, path, min_confidence=tau)
        row["file"] = path.name
        row["file_bytes"] = path.stat().st_size
        report["adapters"][str(k)] = row
        log(f"k={k}: " + json.dumps(row))
    (out_dir / f"{adapter_label(model)}.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="base")
    ap.add_argument("--windows", type=int, default=200, help="synthetic espeak-ng windows")
    ap.add_argument("--ks", default="1,2,3,4,5", help="exit layers to fit adapters for")
    ap.add_argument("--cross-layer", type=int, default=5, help="the target layer whose cross-attention the adapter borrows")
    ap.add_argument("--rank", type=int, default=256, help="low-rank MLP width")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "exit-adapter", help="cache of the collected states")
    ap.add_argument("--out", type=Path, default=None,
                    help="adapter folder (default: specwhisper/asr/drafters/adapters for embedded models, ~/.cache/specwhisper/adapters otherwise)")
    ap.add_argument("--stage", choices=("collect", "fit", "all"), default="all")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    states = collect(args.model, args.windows, SEED, args.work)
    if args.stage in ("fit", "all"):
        from specwhisper.asr.drafters.exit_adapters import ADAPTER_DIR, user_adapter_dir
        from specwhisper.asr.weights.loader import EMBEDDED_MODELS

        out = args.out or (ADAPTER_DIR if args.model in EMBEDDED_MODELS else user_adapter_dir())
        fit_all(args.model, states, [int(k) for k in args.ks.split(",")], args.cross_layer, args.rank, args.steps, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
