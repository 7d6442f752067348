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

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specwhisper.asr.runtime.kv_cache import KVCache

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
        # a warm-up outside the capture (kernel loading, library handles), on a side stream as torch asks;
        # the keys and values it writes are those of these very positions, which the replay rewrites
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.run(sx, sp, cache, start, stop)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.run(sx, sp, cache, start, stop)
        return _Graph(graph, sx, sp, out)
