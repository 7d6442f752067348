"""Large-class targets through this project's exact decoder: what speculation gives at batch 1.

    python bench/large_target.py [--models large-v3,medium] [--tokens 100] [--dtype auto]

RANDOM WEIGHTS with the full-width layer structure of whisper-large-v3 and medium (no download;
bench/large_target_probe.py's shapes), a distil-large-v3-shaped drafter (2 decoder layers over the
target's own encoder output) and early-exit drafters (the target's first k layers, no adapter), all
run by the product's runtime (specwhisper.asr.runtime.decoder: packed kernels and per-query attention on a float32 CPU, the
fixed-shape mode elsewhere) and decoders (specwhisper.asr.decoding.greedy, specwhisper.asr.decoding.speculative). It measures:

1. costs at a 100-token context: a target step, verify passes of 2-8 tokens, a draft step of each
   drafter; from them, what ``--draft auto``'s cost model (``specwhisper.asr.drafters.auto``) expects of
   each drafter at its best k, per acceptance (rows "PROJECTION from the costs"; ``--project FILE`` adds
   them to an earlier run's results);
2. end-to-end decoding of a real 30 s window (encoder included) for ``--tokens`` tokens: the target
   alone, then speculative decoding whose drafters run their real steps but propose a REPLAY of the
   target's own continuation, each token right with probability a = 0.6 / 0.7 / 0.8 / 0.9. These rows
   are PROJECTIONS AT THAT ACCEPTANCE: random weights give no real acceptance. The output is checked
   token-identical to the target alone (the mismatches make the verify pass reject).

Plain and speculative runs alternate per acceptance (this machine's speed drifts). Writes
bench/results/large_target_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import GenerationConfig, WhisperFeatureExtractor, WhisperTokenizer  # noqa: E402

from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.asr.decoding.greedy import GreedyDecoder  # noqa: E402
from specwhisper.hardware.device import resolve_device, resolve_dtype, synchronize  # noqa: E402
from specwhisper.asr.drafters.auto import Costs, choose  # noqa: E402
from specwhisper.asr.drafters.choice import model_drafter  # noqa: E402
from specwhisper.asr.drafters.early_exit import EarlyExitDrafter  # noqa: E402
from specwhisper.asr.engine import AsrEngine  # noqa: E402
from specwhisper.asr.weights.loader import WhisperBundle  # noqa: E402
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder  # noqa: E402
from specwhisper.audio.chunking import Chunk  # noqa: E402
from bench.common import machine  # noqa: E402
from bench.large_target_probe import DRAFTERS, SHAPES, build, timed  # noqa: E402
from specwhisper.evaluation.transcripts import english_set  # noqa: E402
from tests.random_whisper import processor_files  # noqa: E402
from tests.replay_drafter import Replay, replaying  # noqa: E402

ACCEPTANCES = (0.6, 0.7, 0.8, 0.9)
EXIT_LAYERS = {"large-v3": (4, 8), "medium": (3, 6)}


def bundle_of(name: str, model, folder: Path) -> WhisperBundle:
    _, _, _, _, _, mels, vocab = SHAPES[name]
    folder.mkdir(parents=True, exist_ok=True)
    processor_files(folder, vocab == 51866, mels)
    gc = GenerationConfig(decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257, bos_token_id=50257,
                          no_timestamps_token_id=50364 if vocab == 51866 else 50363)
    return WhisperBundle(name=name, path=str(folder), model=model, tokenizer=WhisperTokenizer.from_pretrained(folder),
                         feature_extractor=WhisperFeatureExtractor.from_pretrained(folder),
                         generation_config=gc)


def copy_bandwidth() -> float:
    """Bytes per second of a 2 GB device-to-device copy (read plus written): the device's practical bound."""
    src = torch.randn(2**29, device="cuda")
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), src.device, 10)
    return 2 * src.numel() * 4 / (ms / 1000)


@torch.inference_mode()
def costs(engine: AsrEngine, drafts: dict, enc: torch.Tensor, prompt: list[int], reps: int, context: int = 100) -> dict:
    """Milliseconds of a target step, verify passes of 2-8 tokens and each drafter's step at ``context``."""
    rt, dev = engine.runtime, engine.runtime.device
    cache = rt.new_cache(enc, slack=13)
    seq = prompt + [220 + i for i in range(context - len(prompt))]
    rt.step(torch.tensor([seq], device=dev), torch.arange(len(seq), device=dev)[None], cache)

    def verify(w):
        return lambda: rt.step(torch.tensor([[220] * w], device=dev), torch.arange(context, context + w, device=dev)[None], cache)

    out = dict(step_ms=round(timed(verify(1), dev, reps), 2), verify_ms={w: round(timed(verify(w), dev, reps), 2) for w in range(2, 9)})
    if dev.type == "cuda":  # what a step must read (decoder weights, output head, cross-attention K/V) at copy speed
        weights = {p.data_ptr(): p.numel() * p.element_size() for layer in rt.layers for p in layer.parameters()}
        read = sum(weights.values()) + rt.proj.numel() * rt.proj.element_size() + \
            sum(t.numel() * t.element_size() for t in (cache.cross_k, cache.cross_v))
        bound = read / copy_bandwidth() * 1000
        graphs, rt.graphs = rt.graphs, None  # the same step run eagerly, kernel by kernel
        out["step_ms_without_cuda_graphs"] = round(timed(verify(1), dev, reps), 2)
        rt.graphs = graphs
        out.update(step_bytes_gb=round(read / 1e9, 3), step_bound_ms=round(bound, 3), step_over_bound=round(out["step_ms"] / bound, 2))
    tok, pos = torch.tensor([[220]], device=dev), torch.tensor([[context]], device=dev)
    for name, drafter in drafts.items():
        if isinstance(drafter, EarlyExitDrafter):
            def step(d=drafter):
                h = rt.layer_range(rt.embed_at(tok, pos), pos, cache, 0, d.k)[:, 0]
                d.vocab.logits(rt.final_norm(h))
        else:
            drt = drafter.m.runtime
            dcache = drt.new_cache(enc, slack=1)
            drt.step(torch.tensor([seq], device=dev), torch.arange(len(seq), device=dev)[None], dcache)

            def step(drt=drt, dcache=dcache):
                drt.step(tok, pos, dcache)
        out[f"draft_step_ms[{name}]"] = round(timed(step, dev, reps), 2)
    return out


def cost_projections(row: dict, acceptances, tokens: int) -> list[dict]:
    """From a costs row: each drafter's best k and the speedups ``--draft auto``'s cost model expects at each
    acceptance (decoder; end to end with the window's encoder and ``tokens`` plain steps)."""
    target = row["name"].removesuffix(" costs")
    costs = Costs(step=row["step_ms"], verify={int(w): ms for w, ms in row["verify_ms"].items()})
    encoder_ms, plain_ms = 1000 * row["encoder_s_per_window"], tokens * row["step_ms"]
    out = []
    for key, draft_ms in row.items():
        if not key.startswith("draft_step_ms["):
            continue
        kind = key[len("draft_step_ms["):-1]
        for a in acceptances:
            _, k, speedup = choose(Costs(costs.step, costs.verify, {kind: draft_ms}), {kind: a}, {kind: True}, margin=0.0)
            drafter = DRAFTERS[target] if kind == "distil" else kind
            out.append(dict(name=f"{target} + {drafter}, PROJECTION from the costs at per-token acceptance {a}",
                            projected_acceptance=a, k=k, decoder_speedup=round(speedup, 3),
                            end_to_end_speedup=round((encoder_ms + plain_ms) / (encoder_ms + plain_ms / speedup), 3)))
    return out


def target_and_drafter(name: str, device: str, dtype: torch.dtype, folder: Path, d_model: int | None = None):
    """The random-weight target ``name`` as an engine, and the bundle of its distil-shaped drafter: 2
    decoder layers over the target's own encoder (built on the meta device, so its own encoder layers
    never take memory). ``d_model``: a narrower model of the same layer structure (rehearsals)."""
    target = build(name, device, dtype, d_model)
    drafter_model = build(DRAFTERS[name], "meta", dtype, d_model).to_empty(device=device)
    drafter_model.model.encoder = target.model.encoder
    torch.manual_seed(1)
    for p in list(drafter_model.model.decoder.parameters()) + list(drafter_model.proj_out.parameters()):
        torch.nn.init.normal_(p, std=0.02)
    engine = AsrEngine(bundle=bundle_of(name, target, folder / name), device=device)
    return engine, bundle_of(DRAFTERS[name], drafter_model, folder / DRAFTERS[name])


def run_target(name: str, device: str, dtype: torch.dtype, tokens: int, reps: int, folder: Path,
               acceptances=ACCEPTANCES, exit_layers: tuple[int, ...] | None = None, d_model: int | None = None,
               on_row=lambda row: None) -> list[dict]:
    """The target's rows (costs, then each drafter at each acceptance); ``on_row`` sees each as it comes."""
    t0 = time.perf_counter()
    engine, d_bundle = target_and_drafter(name, device, dtype, folder, d_model)
    print(f"{name}: built and packed in {time.perf_counter() - t0:.0f} s", flush=True)

    sp, rt = engine.special, engine.runtime
    prompt = sp.prompt("en", "transcribe", timestamps=True)
    item = english_set()[0]
    audio = load_audio(item.path)[: 30 * 16000]
    feats = engine.features(audio, [Chunk(0, len(audio))])
    engine.encoder.encode(feats)  # warm-up: the first pass on a GPU loads its kernels
    synchronize(device)
    t = time.perf_counter()
    enc = engine.encoder.encode(feats)
    synchronize(device)
    enc_s = time.perf_counter() - t

    def make(kind: str, replay: Replay | None):
        if kind == "distil":
            d = model_drafter(engine, DRAFTERS[name], bundle=d_bundle)
        else:
            d = EarlyExitDrafter(rt, sp, engine.rules, int(kind.split(":")[1]))
        return replaying(d, replay) if replay else d

    kinds = ["distil"] + [f"early-exit:{k}" for k in (exit_layers or EXIT_LAYERS[name])]
    row = dict(name=f"{name} costs", encoder_s_per_window=round(enc_s, 2),
               **costs(engine, {k: make(k, None) for k in kinds}, enc, prompt, reps))
    print(json.dumps(row), flush=True)
    on_row(row)
    runs = [row]
    for r in cost_projections(row, acceptances, tokens):
        runs.append(r)
        on_row(r)
        print(json.dumps(r), flush=True)
    rt.max_len = len(prompt) + tokens  # a window of `tokens` tokens: random weights rarely end one
    plain_dec = GreedyDecoder(rt, sp, engine.rules)
    reference = plain_dec.decode(enc, prompt).sequences[0].tokens
    text = sp.eot
    for a in acceptances:
        plain = plain_dec.decode(enc, prompt)
        assert plain.sequences[0].tokens == reference
        base_s = plain.stats.decoder_seconds
        for kind in kinds:
            spec = SpeculativeDecoder(rt, sp, engine.rules, make(kind, Replay([reference], a, text, seed=int(a * 10))), Lookahead())
            out = spec.decode(enc, prompt)
            st = out.stats
            r = dict(name=f"{name} + {DRAFTERS[name] if kind == 'distil' else kind}, PROJECTION at per-token acceptance {a}",
                     projected_acceptance=a, token_identical=out.sequences[0].tokens == reference,
                     acceptance_rate=round(st.acceptance_rate, 3), tokens_per_target_pass=round(st.tokens_per_target_pass, 2),
                     tokens=len(reference), plain_decoder_s=round(base_s, 2), decoder_s=round(st.decoder_seconds, 2),
                     decoder_speedup=round(base_s / st.decoder_seconds, 3),
                     end_to_end_speedup=round((enc_s + base_s) / (enc_s + st.decoder_seconds), 3))
            runs.append(r)
            on_row(r)
            print(json.dumps(r), flush=True)
    engine = d_bundle = None  # freed
    return runs


def project(path: Path, acceptances, tokens: int) -> int:
    """``cost_projections`` of every costs row in ``path``, in place of the projections it had; ``tokens``
    where no row of it decoded a window (else the window's own token count)."""
    data = json.loads(path.read_text())
    tokens = next((row["tokens"] for row in data["runs"] if "tokens" in row), tokens)
    runs = []
    for row in data["runs"]:
        if "PROJECTION from the costs" in row["name"]:
            continue
        runs.append(row)
        if row["name"].endswith(" costs"):
            runs += cost_projections(row, acceptances, tokens)
    data["runs"] = runs
    path.write_text(json.dumps(data, indent=2) + "\n")
    for row in runs:
        if "PROJECTION from the costs" in row["name"]:
            print(f"{row['name']}: k {row['k']}, decoder {row['decoder_speedup']}x, end to end {row['end_to_end_speedup']}x")
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="large-v3,medium")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per window (default: 100)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, help="CPU threads (default: the process's; a server CPU: its cores)")
    ap.add_argument("--acceptances", default=",".join(map(str, ACCEPTANCES)), help="projected per-token acceptances")
    ap.add_argument("--exit-layers", help="early-exit drafters' exit layers (default: 4,8 for large-v3, 3,6 for medium)")
    ap.add_argument("--d-model", type=int, help="a narrower model of the same layer structure (a rehearsal)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--project", type=Path, metavar="FILE",
                    help="add the cost projections to FILE, an earlier run's results, and measure nothing")
    args = ap.parse_args(argv)
    acceptances = tuple(float(a) for a in args.acceptances.split(","))
    if args.project:
        return project(args.project, acceptances, args.tokens)
    if args.threads is not None:
        if args.threads < 1:
            ap.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    exits = tuple(int(k) for k in args.exit_layers.split(",")) if args.exit_layers else None
    dev = torch.cuda.get_device_name() if device.startswith("cuda") else machine(torch.get_num_threads())
    out = args.out or ROOT / "bench" / "results" / f"large_target_{device.split(':')[0]}.json"
    runs = []

    def save(row: dict) -> None:  # after each row: a run stopped by a time limit keeps what it measured
        runs.append(row)
        out.write_text(json.dumps({
            "machine": f"{dev}; torch {torch.__version__}, {dtype}, batch 1" + (f"; d_model {args.d_model}" if args.d_model else ""),
            "note": "RANDOM WEIGHTS with the full-width structure of the named models; rows named PROJECTION decode "
                    "with real drafter steps but a replay of the target's own tokens, right with the given per-token "
                    "probability (acceptance_rate is the measured share of drafted tokens accepted); end_to_end_speedup "
                    "counts the encoder of the window; decoding stops after `tokens` tokens",
            "runs": runs}, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            run_target(name, device, dtype, args.tokens, args.reps, Path(tmp), acceptances, exits, args.d_model, on_row=save)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
