"""Log-mel windows: transformers' ``WhisperFeatureExtractor`` as the engine used it, against ``LogMel``.

    python bench/features.py [--device cpu|cuda] [--windows 32] [--reps 5] [--threads 2]

The windows are pieces (20-30 s, as the VAD cuts them) of the 10-minute talk built from the public
clips (``build_long_file``). ``transformers``: the extractor on the device (its torch path), its numpy
result copied to the device in the model's dtype, what ``AsrEngine._features`` did; ``ours``:
``specwhisper.asr.features.LogMel``, the same operations on the device from the pieces' own samples.
The two alternate rep by rep (the machine's speed drifts) and each is waited for; ``speedup`` is the
median of transformers' seconds over the median of ours; ``bitwise_identical``: the two give the same
windows bit for bit.

Writes bench/results/features.json (``--device cuda``: gpu_features.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from transformers import WhisperFeatureExtractor

    from specwhisper.asr.features import LogMel
    from specwhisper.audio.loading import SAMPLE_RATE, load_audio
    from specwhisper.evaluation.transcripts import build_long_file
    from specwhisper.hardware.device import synchronize

    torch.set_num_threads(args.threads)
    device = args.device
    audio = load_audio(build_long_file("dense", ROOT / "bench" / ".cache").path)
    rng = np.random.default_rng(0)
    pieces, at = [], 0
    for _ in range(args.windows):
        n = int(rng.uniform(20, 30) * SAMPLE_RATE)
        pieces.append(audio[at : at + n])
        at = (at + n) % (len(audio) - 30 * SAMPLE_RATE)
    fe = WhisperFeatureExtractor()
    ours = LogMel(fe, device)

    def transformers():
        feats = fe(pieces, sampling_rate=SAMPLE_RATE, return_tensors="np", device=device).input_features
        return torch.from_numpy(feats).to(device, torch.float16 if device.startswith("cuda") else torch.float32)

    def mine():
        return ours(pieces, [False] * len(pieces)).to(torch.float16 if device.startswith("cuda") else torch.float32)

    identical = torch.equal(transformers(), mine())  # also the warm-up
    seconds = {"transformers": [], "ours": []}
    for rep in range(args.reps):
        for name, fn in (("transformers", transformers), ("ours", mine))[:: 1 if rep % 2 == 0 else -1]:
            synchronize(device)
            t = time.perf_counter()
            fn()
            synchronize(device)
            seconds[name].append(time.perf_counter() - t)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    runs = [dict(name=f"{name}, {args.windows} windows, {device}", seconds=round(median[name], 4),
                 ms_per_window=round(1000 * median[name] / args.windows, 2)) for name in seconds]
    runs[1].update(speedup=round(median["transformers"] / median["ours"], 2), bitwise_identical=identical)
    for r in runs:
        print(json.dumps(r))
    out = args.out or ROOT / "bench" / "results" / ("gpu_features.json" if device.startswith("cuda") else "features.json")
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    out.write_text(json.dumps({"machine": f"{machine(args.threads)}; device {name}", "runs": runs}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
