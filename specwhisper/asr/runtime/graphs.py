"""CUDA graphs of the decoder's fixed-shape passes (``specwhisper.asr.runtime.decoder``): on a GPU a decoding step
of a large model is bound by launching its kernels, not by reading its weights.

Measured on an H200 (random weights, float16, batch 1, 16 columns): a whole-stack pass of
large-v3 took 11.7 ms eager and 3.4 ms replayed from a graph (its weights and cross-attention K/V,
2.19 GB, need 0.51 ms at 4.3 TB/s); medium 9.1 -> 2.7 ms. Capturing one took 13-20 ms.

The fixed-shape mode gives every pass the same shapes, which is what a graph needs; what changes
between passes (the residual stream in, the positions) is copied into the graph's own input
buffers. A replayed pass does not give the bits of the same pass run eagerly (cuBLAS picks other
kernels under capture), so every pass that decoding compares (plain steps, verify passes,
early-exit draft steps) goes through a graph; a pass that also returns cross-attention logits (word
alignment, its own cache) runs eagerly.

A graph reads and writes the cache's tensors at the addresses it was captured with, so graphs are
keyed by those addresses (and shapes): a later cache that lands on the same memory reuses them."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from specwhisper.asr.runtime.kv_cache import KVCache
from specwhisper.hardware.kernels import empty_host_cache
from specwhisper.messages import one_line

log = logging.getLogger(__name__)

Pass = Callable[[torch.Tensor, torch.Tensor, KVCache, int, "int | None"], torch.Tensor]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    x: torch.Tensor  # the captured pass's inputs: copy a pass's own into these, then replay
    positions: torch.Tensor
    out: torch.Tensor  # its output, overwritten by the next replay


class PassGraphs:
    """``run(x, positions, cache, start, stop)`` (layers ``start`` .. ``stop - 1``), each distinct call
    shape captured once as a CUDA graph and replayed after; at most ``capacity`` graphs are kept."""

    def __init__(self, run: Pass, capacity: int = 16):
        self.run = run
        self.capacity = capacity
        self.graphs: OrderedDict[tuple, _Graph] = OrderedDict()

    @staticmethod
    def key(x: torch.Tensor, positions: torch.Tensor, cache: KVCache, start: int, stop: int | None) -> tuple:
        memory = tuple((t.data_ptr(), tuple(t.shape), t.stride()) for t in (cache.k, cache.v, cache.cross_k, cache.cross_v))
        return (start, stop, x.dtype, tuple(x.shape), tuple(positions.shape)) + memory

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache, start: int, stop: int | None) -> torch.Tensor:
        key = self.key(x, positions, cache, start, stop)
        g = self.graphs.pop(key, None) or self._capture(x, positions, cache, start, stop)
        self.graphs[key] = g
        while len(self.graphs) > self.capacity:
            self.graphs.popitem(last=False)
        g.x.copy_(x)
        g.positions.copy_(positions)
        g.graph.replay()
        return g.out

    def _capture(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache, start: int, stop: int | None) -> _Graph:
        sx, sp = x.clone(), positions.clone()
        run = partial(self.run, sx, sp, cache, start, stop)
        warm_up(run)  # the keys and values it writes are those of these very positions, which the replay rewrites
        graph = torch.cuda.CUDAGraph()
        out = capture(graph, run)
        return _Graph(graph, sx, sp, out)


def warm_up(fn: Callable[[], object], updates: tuple[torch.Tensor, ...] = ()) -> None:
    """``fn()`` run once before its capture (kernel loading, library handles), on a side stream as torch
    asks; ``updates``, the buffers it changes in place, are put back as they were."""
    before = [t.clone() for t in updates]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        for t, b in zip(updates, before):
            t.copy_(b)
    torch.cuda.current_stream().wait_stream(side)


def capture(graph: torch.cuda.CUDAGraph, fn: Callable[[], object], pool=None):
    """``fn()`` captured into ``graph`` on a side stream (``pool``: a shared memory pool), its result
    returned. What ``torch.cuda.graph`` does, less the ``torch.cuda.empty_cache()`` it runs before every
    capture: a long file's decode makes a KV cache for each batch and each fallback sampling (27 on the
    10-minute talk, tiny.en at batch 32: counted in the fixed-shape mode on the CPU), passes are keyed
    by their cache's addresses, and a cache that lands where the last one of its size was reuses its
    graphs, where an emptied allocator may hand the next cache other memory, and its passes are
    captured again. The pinned host cache is emptied as torch does: its allocator queries events, which
    a capture forbids (the capture fails with cudaErrorStreamCaptureInvalidated)."""
    torch.cuda.synchronize()
    empty_host_cache()
    with torch.cuda.stream(torch.cuda.Stream()):
        graph.capture_begin(*(() if pool is None else (pool,)))
        try:
            out = fn()
        finally:
            graph.capture_end()
    return out


def graph_pool(device: torch.device):
    """A memory pool for the ``CapturedCall``s of one decoder or drafter (``pool``), which never run at the
    same time: their intermediates share memory. None off CUDA, where nothing is captured."""
    return torch.cuda.graph_pool_handle() if device.type == "cuda" else None


class CapturedCall:
    """``fn()`` over fixed buffers (it reads its inputs from tensors the caller fills in place and returns
    tensors), captured once as a CUDA graph on ``device`` and replayed by each call: a drafter's
    work between two layer passes (its output head, the logit rules, the pick) is some seventy small
    kernels, each launched by the host for a few microseconds of device work. The outputs are the
    capture's own tensors, overwritten by the next call: copy what must outlive it. Elsewhere (no
    graphs) each call runs ``fn`` and copies its results into the first call's tensors, so code
    written against a replay's semantics runs, and is tested, the same on the CPU. ``updates``: the
    buffers ``fn`` changes in place (the warm-up run before the capture must leave them as they were:
    a capture records, it does not run). ``pool``: a memory pool shared with other calls that never run
    at the same time and never read each other's outputs (``torch.cuda.graph_pool_handle``): their
    intermediates then share memory. Where a capture fails (a driver or an op that refuses it), the
    call runs op by op, as elsewhere, with one warning; :attr:`captured` tells which."""

    def __init__(self, fn: Callable[[], tuple[torch.Tensor, ...]], device: torch.device,
                 updates: tuple[torch.Tensor, ...] = (), pool=None):
        self.fn = fn
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: tuple[torch.Tensor, ...] | None = None
        if device.type == "cuda":
            warm_up(fn, updates)
            graph = torch.cuda.CUDAGraph()
            try:
                out = capture(graph, fn, pool)
            except RuntimeError as e:  # a capture records and runs nothing: the buffers are as they were
                name = getattr(fn, "__qualname__", repr(fn))
                log.warning("%s runs op by op: its CUDA graph capture failed (%s)", name, one_line(e))
            else:
                self.graph, self.out = graph, out

    @property
    def captured(self) -> bool:
        """Whether calls replay a CUDA graph."""
        return self.graph is not None

    def __call__(self) -> tuple[torch.Tensor, ...]:
        if self.graph is not None:
            self.graph.replay()
        elif self.out is None:
            self.out = self.fn()
        else:
            for o, n in zip(self.out, self.fn()):
                o.copy_(n)
        return self.out
