"""How many chunks a decode batch may hold on this device: ``--batch-size`` past the free memory shrinks
with one warning line (or, when not even one row fits, is one error line before any work) instead of
ending in an out-of-memory traceback; no ``--batch-size`` on a GPU takes as many rows as its free
memory holds, up to ``GPU_DEFAULT_BATCH``.

A row's memory is counted from the runtime's shapes: the cross-attention keys and values of every
decoder layer (1500 frames: large-v3 in float16, 246 MB a row, the bulk), the self-attention cache
over the whole room, the encoder output (on a GPU, of each batch whose failing rows the fallback pools:
``specwhisper.asr.decoding.fallback.FallbackPool``) and the input features, the output head's block of logits,
times ``ROW_MARGIN`` for what a drafter keeps per row (a distil-shaped drafter's own cache: 2 layers
of the target's 32) and the decode's temporaries. The free memory: the CPU's ``MemAvailable``; on a
GPU the driver's free bytes plus what torch's allocator holds unused.
"""

from __future__ import annotations

import logging

import torch

from specwhisper.asr.decoding.fallback import POOL_BATCHES
from specwhisper.asr.runtime.kv_cache import FIXED_WIDTH

log = logging.getLogger(__name__)

CPU_DEFAULT_BATCH = 8
GPU_DEFAULT_BATCH = 32  # rows enough to keep a GPU step busy; long-form files rarely give more windows at once
ROW_MARGIN = 1.5
USABLE = 0.85  # of the free memory: the rest for the allocator's fragments, CUDA graphs' pools, other stages
FRAMES = 1500


def row_bytes(runtime) -> int:
    """The memory one row of a decode batch takes on ``runtime``'s device (see the module doc)."""
    size = runtime.embed.element_size()
    layers, d = len(runtime.layers), runtime.d_model
    room = runtime.max_len + FIXED_WIDTH
    cfg = runtime.model.config
    per = 2 * layers * (FRAMES + room) * d  # cross- and self-attention keys and values
    outputs = POOL_BATCHES if runtime.device.type == "cuda" else 1  # batches whose encoder output waits for the fallback
    per += outputs * FRAMES * d + cfg.num_mel_bins * 2 * FRAMES  # encoder output, features
    per += FIXED_WIDTH * runtime.vocab_size  # the head's block of logits
    return int(per * size * ROW_MARGIN)


def free_bytes(device: torch.device) -> int:
    """Free memory on ``device`` (the CPU's ``MemAvailable``; a GPU's free bytes and torch's unused cache)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) * 1024


def fit_batch_size(requested: int | None, runtime, free: int | None = None, warn: bool = True) -> int:
    """The batch to decode with: ``requested`` when it fits, else as many rows as fit (one warning line,
    unless not ``warn``); None: the device's default (the CPU's 8; a GPU's free memory, up to 32). A
    ``ValueError`` (one line) when not even one row fits. ``free``: the free bytes (default: measured now)."""
    device = runtime.device
    per = row_bytes(runtime)
    free = free_bytes(device) if free is None else free
    fits = int(free * USABLE // per)
    where = "GPU" if device.type == "cuda" else "CPU"
    if fits < 1:
        raise ValueError(f"one 30 s chunk needs about {per / 2**20:.0f} MB on the {where} and only "
                         f"{free / 2**20:.0f} MB are free: free some memory or use a smaller model")
    if requested is None:
        return min(fits, GPU_DEFAULT_BATCH if device.type == "cuda" else CPU_DEFAULT_BATCH)
    if requested > fits:
        if warn:
            log.warning(f"batch size {requested} needs about {requested * per / 2**30:.1f} GB and the {where} has "
                        f"{free / 2**30:.1f} GB free: decoding {fits} chunks at a time")
        return fits
    return requested
