"""The Whisper decoder runtime's KV cache: static, per-row positioned, rows dropped, reordered or taken again in place.

Speculative decoding rolls a row back by moving its length back (rejected entries are overwritten
later); see ``specwhisper.asr.runtime.decoder`` for the runtime that writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specwhisper.hardware.device import on_device

GROW_POSITIONS = 64  # the step the self-attention K/V grow by (``KVCache.reserve``)
# The fixed-shape mode's pass (``specwhisper.asr.runtime.decoder``): every pass over a cache of R rows has R x W
# token slots, W = ``fixed_width_for(R)``, for plain steps and verify passes alike (so both give a token
# the same numbers), and a verify pass holds at most W tokens. W halves from ``FIXED_WIDTH`` until
# R x W is within ``FIXED_COLUMNS`` (not below ``MIN_FIXED_WIDTH``): one row's 16 slots cost a GPU
# step nothing (it is bound by launches and reading the weights: an H200's large-v3 pass of 2-8
# tokens took what a step took), 32 rows x 16 would make every plain step compute 512 tokens.
FIXED_WIDTH = 16
FIXED_COLUMNS = 256
MIN_FIXED_WIDTH = 4


def fixed_width_for(rows: int, most: int = FIXED_WIDTH, columns: int = FIXED_COLUMNS) -> int:
    """The columns W of every fixed-shape pass over a cache of ``rows`` rows (see above); ``most``
    caps it (1: plain one-token passes only)."""
    w = most
    while w > MIN_FIXED_WIDTH and rows * w > columns:
        w //= 2
    return w


@dataclass
class KVCache:
    """Self-attention keys/values [layers, batch, heads, max_len, head_dim] and cross-attention K/V
    [layers, batch, heads, frames, head_dim]."""

    k: torch.Tensor
    v: torch.Tensor
    cross_k: torch.Tensor
    cross_v: torch.Tensor
    limit: int = 0  # the most positions the self-attention K/V may grow to (``reserve``)
    rows: list[int] | None = None  # fixed-shape mode: the physical row of each live row (None: all, in order)
    width: int | None = None  # fixed-shape mode: the columns of every pass over this cache (``WhisperDecoderRuntime.width_for``)
    cross_rows: list[int] | None = None  # the cross-attention row each live row reads (None: its own; ``repeated``)

    @property
    def batch_size(self) -> int:
        return self.k.shape[1] if self.rows is None else len(self.rows)

    def physical(self, rows: list[int] | None = None) -> list[int]:
        """Physical rows of live rows ``rows`` (all live rows when None)."""
        live = list(range(self.k.shape[1])) if self.rows is None else self.rows
        return live if rows is None else [live[r] for r in rows]

    @torch.inference_mode()
    def reserve(self, positions: int) -> None:
        """Room for ``positions`` self-attention positions: the K/V grow by ``GROW_POSITIONS`` slots (up
        to ``limit``) when full. A 30 s window rarely holds 200 tokens, and 448 slots from the start
        cost base 88 MB at batch 8. A position's numbers do not depend on the room after it (each
        query reads its own keys)."""
        room = self.k.shape[3]
        if positions <= room:
            return
        if positions > max(self.limit, room):
            raise ValueError(f"position {positions - 1} is past the cache's limit of {max(self.limit, room)}")
        grown = min(-(-positions // GROW_POSITIONS) * GROW_POSITIONS, self.limit)
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:3], grown, old.shape[4])
            new[:, :, :, :room] = old
            setattr(self, name, new)

    @torch.inference_mode()
    def repeated(self, times: int) -> KVCache:
        """Each live row ``times`` times in a row (beam search's start), the copies of a row reading its one
        cross-attention K/V (``cross_rows``) where ``select`` gives each a copy of its own. Consumes this one.

        The copies cost more than they saved: base's 8 audio rows x 5 beams gathered 737 MB of
        cross-attention K/V per batch (0.39 s), and each step's 40 one-row cross-attention calls took 64 ms
        over 40 copies against 34 ms over the 8 rows they copy (this CPU, 2 threads; a row's K/V stays in
        the cache while its beams read it). Each call is the same call on the same numbers, so a beam's
        tokens are those of the copies, to the bit. Natural shapes only (the fixed-shape mode gathers)."""
        if self.rows is not None or self.cross_rows is not None:
            raise ValueError("a fixed-shape cache, or one whose rows share cross-attention K/V, is not repeated")
        keep = [r for r in range(self.batch_size) for _ in range(times)]
        idx = on_device(keep, self.k.device)
        return KVCache(self.k[:, idx].contiguous(), self.v[:, idx].contiguous(), self.cross_k, self.cross_v,
                       limit=self.limit, cross_rows=keep)

    @torch.inference_mode()
    def select(self, rows: list[int]) -> KVCache:
        """A cache of only ``rows`` (e.g. finished sequences dropped from a batch). Consumes this one.
        Rows may repeat (beam search's start): each copy gets a physical row of its own.

        Ascending rows (every caller's case) are moved down in place and the tensors viewed to their
        first ``len(rows)`` rows: nothing is allocated. Copying each tensor to a new, smaller one
        (as before) made glibc keep the freed memory: the cross-attention K/V of 8 rows of base are
        295 MB, and a 10-minute file peaked 670 MB above the memory before its first batch, 390 MB
        more than the cache itself. A row's layout is unchanged (a layer's rows stay contiguous), so
        is every number computed from it."""
        keep = list(rows)
        if self.cross_rows is not None:  # rows sharing cross-attention K/V (``repeated``): those stay as they are
            shared = [self.cross_rows[r] for r in keep]
            own = KVCache(self.k, self.v, self.k[:0], self.v[:0], limit=self.limit).select(keep)  # self-attention only
            return KVCache(own.k, own.v, self.cross_k, self.cross_v, limit=self.limit, cross_rows=shared)
        if self.rows is not None:  # fixed-shape mode: rows stay where they are, the dropped ones idle
            if len(set(keep)) == len(keep):
                return KVCache(self.k, self.v, self.cross_k, self.cross_v, limit=self.limit, rows=self.physical(keep),
                               width=self.width)
            keep = self.physical(keep)  # repeated rows (beams) need physical rows of their own: gathered below
        if self.rows is None and len(keep) > 1 and len(set(keep)) == 1:
            # copies of one row (sampling's best-of draws): the cross-attention K/V, read only, stay that
            # row, viewed once per copy. Gathered, five draws of two chunks took 370 MB (base), the
            # peak of a 10-minute file; a row's numbers are the same (attention reads one row at a time).
            r, idx = keep[0], on_device(keep, self.k.device)
            cross = (t[:, r : r + 1].expand(-1, len(keep), *t.shape[2:]) for t in (self.cross_k, self.cross_v))
            return KVCache(self.k[:, idx].contiguous(), self.v[:, idx].contiguous(), *cross, limit=self.limit)
        tensors = (self.k, self.v, self.cross_k, self.cross_v)
        if any(b <= a for a, b in zip(keep, keep[1:])):  # not ascending: gather into new tensors
            idx = on_device(keep, self.k.device)
            rows = None if self.rows is None else list(range(len(keep)))
            return KVCache(*(t[:, idx].contiguous() for t in tensors), limit=self.limit, rows=rows, width=self.width)
        for to, r in enumerate(keep):
            if to != r:
                for t in tensors:
                    if t.stride(1):  # rows viewed from one (copies: above) are the same already
                        t[:, to].copy_(t[:, r])
        return KVCache(*(t[:, : len(keep)] for t in tensors), limit=self.limit)

    @torch.inference_mode()
    def grow(self, rows: int, capacity: int, width: int | None) -> tuple[KVCache, list[int]]:
        """This cache with ``rows`` more live rows after its own, and the physical rows they take (their
        contents are whatever those rows held: the caller writes them). Consumes this one.

        The new rows are rows the storage already has where it holds them (physical rows ``select``
        left idle); otherwise a tensor is made again with ``capacity`` rows, the live rows copied first
        (``reserve`` makes the self-attention K/V again with the live rows only; a fixed-shape cache
        made again gets ``width``, its new row count's). Copies of one row that share its
        cross-attention K/V are given rows of their own."""
        if self.cross_rows is not None:
            raise ValueError("a cache whose rows share cross-attention K/V (beams) does not grow")
        live, want = self.batch_size, self.batch_size + rows
        if want > capacity:
            raise ValueError(f"{want} rows for a cache of {capacity}")
        tensors = (self.k, self.v, self.cross_k, self.cross_v)
        if self.rows is not None:
            taken = set(self.rows)
            free = [p for p in range(self.k.shape[1]) if p not in taken]
            if len(free) >= rows:
                return KVCache(*tensors, limit=self.limit, rows=self.rows + free[:rows], width=self.width), free[:rows]
            idx = on_device(self.physical(), self.k.device, dtype=torch.long)
            made = (self._made_again(t, idx, capacity) for t in tensors)
            return KVCache(*made, limit=self.limit, rows=list(range(want)), width=width), list(range(live, want))
        idx = on_device(list(range(live)), self.k.device, dtype=torch.long)
        grown = []
        for t in tensors:
            if t.stride(1) and t.stride(0) // t.stride(1) >= want:  # rows [layers, rows, ...] as select keeps them
                grown.append(t.as_strided((t.shape[0], want, *t.shape[2:]), t.stride(), t.storage_offset()))
            else:
                grown.append(self._made_again(t, idx, capacity)[:, :want])
        return KVCache(*grown, limit=self.limit), list(range(live, want))

    @staticmethod
    def _made_again(t: torch.Tensor, live: torch.Tensor, capacity: int) -> torch.Tensor:
        """``t`` with ``capacity`` rows, its rows ``live`` first."""
        new = t.new_zeros(t.shape[0], capacity, *t.shape[2:])
        if len(live):
            new[:, : len(live)] = t[:, live]
        return new

    @torch.inference_mode()
    def reorder(self, sources: list[int], length: int | None = None) -> None:
        """Live row i takes the self-attention K/V of live row ``sources[i]`` (in place; sources may
        repeat): beam search's rearrangement. The cross-attention K/V stay: beams of one audio row share
        them, and copying them (37 MB a row for base) each step cost more than the step. The caller
        keeps each source within its own audio row. ``length``: the positions written so far (None: the
        whole room); only those, of the rows whose source is another, are copied. Copying every row's
        whole room was a fifth of a beam search's time (8 windows x 5 beams of base: 0.81 of 3.95 s, this
        CPU); a position past ``length`` is written before any query reads it."""
        if len(sources) != self.batch_size:
            raise ValueError(f"{len(sources)} sources for {self.batch_size} rows")
        moved = [i for i, s in enumerate(sources) if s != i]
        if not moved:
            return
        phys = self.physical()
        dst = on_device([phys[i] for i in moved], self.k.device)
        src = on_device([phys[sources[i]] for i in moved], self.k.device)
        n = self.k.shape[3] if length is None else length
        for t in (self.k, self.v):
            t[:, dst, :, :n] = t[:, src, :, :n]  # the right side is gathered into a new tensor first: overlaps are safe
