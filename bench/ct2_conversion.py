"""Converting a faster-whisper (CTranslate2) model folder: peak memory and time of ours against the
transformers route.

    python bench/ct2_conversion.py [--shape large-v3] [--reps 2]

Ours (``specwhisper.asr.weights.convert.convert_ct2_whisper``) writes the mapped tensors to
``model.safetensors`` a layer at a time; the transformers route builds ``WhisperForConditionalGeneration``, loads the same
float32 state into it and calls ``save_pretrained`` (what the converter did before). Each conversion runs
in a fresh process (its peak resident set is its own), the two alternating; the folders written hold the
same tensors (checked).

The model: the embedded base (its CTranslate2 float16 file) by default; ``--shape large-v3`` a CTranslate2
float16 folder of RANDOM WEIGHTS with whisper-large-v3's layer structure (base's tokenizer, so a vocabulary
of 51865), written by CTranslate2's own converter: the size of Systran/faster-whisper-large-v3.
Writes bench/results/ct2_conversion.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, peak_rss_mb, run_isolated  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "ct2_conversion.json"


def ct2_folder(shape: str, root: Path) -> Path:
    """A CTranslate2 float16 Whisper folder: the embedded base's, or random weights of ``shape``."""
    from specwhisper.asr.weights.loader import ensure_embedded, write_ct2_folder

    if shape == "base":
        return write_ct2_folder("base", root)
    import torch
    from ctranslate2.converters import TransformersConverter
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from bench.large_target_probe import SHAPES

    d, enc, dec, heads, ffn, mels, _ = SHAPES[shape]
    base = ensure_embedded("base")
    config = WhisperConfig.from_pretrained(base)
    config.update(dict(d_model=d, encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=heads,
                       decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, num_mel_bins=mels))
    torch.manual_seed(0)
    hf = root / f"{shape}-hf"
    WhisperForConditionalGeneration(config).to(torch.float16).save_pretrained(hf)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "processor_config.json"):
        shutil.copy(base / name, hf / name)
    out = TransformersConverter(str(hf), copy_files=["tokenizer.json"], load_as_float16=True).convert(
        str(root / f"{shape}-ct2"), quantization="float16")
    shutil.rmtree(hf)
    return Path(out)


def convert(way: str, folder: str, out: str, q) -> None:
    """One conversion in this (fresh) process: its seconds and peak resident set."""
    import numpy as np
    import torch

    from specwhisper.asr.weights import convert as c

    start = peak_rss_mb()
    t0 = time.perf_counter()
    if way == "ours":
        c.convert_ct2_whisper([Path(folder) / "model.bin"], Path(folder), Path(out), dtype=None)
    else:
        from transformers import WhisperForConditionalGeneration

        ct2 = c.read_ct2_model(Path(folder) / "model.bin")
        tokenizer_json = json.loads((Path(folder) / "tokenizer.json").read_text())
        config = c._whisper_config(ct2, c._special_ids(tokenizer_json), [], [])
        state = {k: torch.from_numpy(np.ascontiguousarray(v).astype(np.float32)) for k, v in c.ct2_tensors(ct2)}
        model = WhisperForConditionalGeneration(config)
        model.load_state_dict(state, strict=False)
        model.tie_weights()
        model.save_pretrained(out)
    q.put({"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": start})


def same_tensors(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return sorted(x) == sorted(y) and all(torch.equal(x[k].float(), y[k].float()) for k in x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="base", choices=["base", "large-v3", "medium"])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = ct2_folder(args.shape, root)
        size_mb = (folder / "model.bin").stat().st_size / 2**20
        rows: dict[str, list[dict]] = {"ours": [], "transformers": []}
        for rep in range(args.reps):
            for way in rows:  # alternating: the machine's speed drifts
                out = root / f"{way}-{rep}"
                rows[way].append(run_isolated(convert, way, str(folder), str(out)))
        identical = same_tensors(root / "ours-0", root / "transformers-0")
    runs = []
    for way, got in rows.items():
        runs.append({"name": f"{args.shape} ({'random weights, ' if args.shape != 'base' else ''}CTranslate2 float16, "
                             f"{size_mb:.0f} MB), {way}", "model_mb": round(size_mb),
                     "peak_rss_mb": round(min(r["peak_rss_mb"] for r in got)),
                     "added_rss_mb": round(min(r["peak_rss_mb"] - r["rss_before_mb"] for r in got)),
                     "seconds": round(min(r["seconds"] for r in got), 2), "same_tensors": identical})
        print(f"{runs[-1]['name']:70s} peak {runs[-1]['peak_rss_mb']:6d} MB (+{runs[-1]['added_rss_mb']} MB over the "
              f"imports)  {runs[-1]['seconds']:6.2f} s")
    ours, theirs = runs[-2], runs[-1]
    print(f"ours / transformers: peak memory {ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}x, "
          f"time {ours['seconds'] / theirs['seconds']:.2f}x; same tensors: {identical}")
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    kept = [r for r in old["runs"] if not r["name"].startswith(args.shape + " ")]
    RESULTS.write_text(json.dumps({"machine": machine(1), "runs": kept + runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
