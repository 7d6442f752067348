"""A lean Whisper decoder runtime over a transformers model's weights.

Why not call the transformers decoder directly: each of its steps builds masks,
cache objects and position ids in Python, and its ``DynamicCache`` grows by
concatenation and can only be cropped for the whole batch. Speculative decoding
needs many small steps, a cache that rolls back per row, and rows that advance
by different amounts. This module keeps one pre-allocated KV cache per batch,
writes new keys/values in place at per-row positions, and masks by position, so
rolling back a row is just moving its length back. The weights (and so the
numbers) are the transformers model's own.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specwhisper.asr.runtime.attention import attend_per_query, attend_per_row
from specwhisper.asr.runtime.encoder import ENCODER_ROWS
from specwhisper.asr.runtime.graphs import PassGraphs
from specwhisper.asr.runtime.kv_cache import FIXED_COLUMNS, FIXED_WIDTH, KVCache, fixed_width_for
from specwhisper.asr.weights.net import WhisperNet
from specwhisper.asr.runtime.output_head import OutputHead
from specwhisper.hardware.kernels import Int8Module, Linear, float_sources, product_of
from specwhisper.hardware.memory import release_file_pages
from specwhisper.hardware.threads import blas_one_thread
from specwhisper.hardware.device import on_device

INITIAL_POSITIONS = 128  # self-attention K/V slots a new cache starts with (``KVCache.reserve`` grows it)


@dataclass
class LayerProducts:
    """One decoder layer's matrix products (``specwhisper.hardware.kernels.Linear``): self-attention query, key and
    value in one product, its output, cross-attention query and output, and the MLP."""

    qkv: Callable[[torch.Tensor], torch.Tensor]
    out: Callable[[torch.Tensor], torch.Tensor]
    cross_q: Callable[[torch.Tensor], torch.Tensor]
    cross_out: Callable[[torch.Tensor], torch.Tensor]
    fc1: Callable[[torch.Tensor], torch.Tensor]
    fc2: Callable[[torch.Tensor], torch.Tensor]

    @staticmethod
    def modules(layer: torch.nn.Module) -> list[torch.nn.Module]:
        att, catt = layer.self_attn, layer.encoder_attn
        return [att.q_proj, att.k_proj, att.v_proj, att.out_proj, catt.q_proj, catt.out_proj, layer.fc1, layer.fc2]

    @property
    def packed(self) -> bool:
        """Packed float32 copies of the layer's weights (which then serve nothing else)."""
        return isinstance(self.fc1, Linear) and self.fc1.packed

    @classmethod
    def of(cls, layer: torch.nn.Module) -> LayerProducts:
        lin = cls.modules(layer)  # int8 for a MODEL:int8 target (specwhisper.asr.weights.loader)
        return cls(product_of(*lin[:3]), *(product_of(m) for m in lin[3:]))


class WhisperDecoderRuntime:
    """Incremental decoder forward with a static, per-row positioned KV cache."""

    def __init__(self, model: WhisperNet, num_layers: int | None = None, row_exact: bool = True, cuda_graphs: bool = True):
        """``row_exact``: attention gives every query the very numbers a plain decoding step would give it,
        however many queries a pass holds and wherever their rows stand (see ``layer_range``); a
        drafter's own runtime, whose numbers only shape guesses, can do without. It applies where the
        matrix products are row-independent too (packed on CPU, ``specwhisper.hardware.kernels``): on a GPU neither
        cuBLAS nor the attention kernels promise that, and a query-by-query loop would cost a kernel
        launch per query and layer. There (unpacked products: a GPU, or a dtype other than float32)
        ``row_exact`` takes the fixed-shape mode instead (``layer_range``). ``cuda_graphs``: there, on a
        GPU, replay each pass from a CUDA graph (``specwhisper.asr.runtime.graphs``)."""
        dec = model.model.decoder
        cfg = model.config
        self.model = model
        self.layers = list(dec.layers)[: num_layers or len(dec.layers)]
        blas_one_thread()
        self.products = [LayerProducts.of(layer) for layer in self.layers]
        self.cross_products = [product_of(layer.encoder_attn.k_proj, layer.encoder_attn.v_proj, rows=ENCODER_ROWS)
                               for layer in self.layers]
        self.n_head = cfg.decoder_attention_heads
        self.d_model = cfg.d_model
        self.head_dim = self.d_model // self.n_head
        self.max_len = cfg.max_target_positions
        self.embed = dec.embed_tokens.weight
        self.pos = dec.embed_positions.weight
        self.final_norm = dec.layer_norm
        self.proj = model.proj_out.weight
        self.vocab_size = self.proj.shape[0]
        self.int8 = isinstance(self.layers[0].fc1, Int8Module)
        self.head = OutputHead(self.proj, int8=self.int8)
        self.row_exact = row_exact and self.head.main.packed
        # the fixed-shape mode when not None: the most columns of a pass (``width_for``)
        self.fixed_width = FIXED_WIDTH if row_exact and not self.row_exact else None
        self.fixed_columns = FIXED_COLUMNS  # rows x columns a fixed-shape pass aims to stay within
        # read a pass's positions on the host (``layer_range``): free on the CPU, a wait on a GPU
        self.host_positions = self.device.type == "cpu" and self.fixed_width is None
        # on a GPU passes of up to FIXED_WIDTH tokens replay CUDA graphs (``specwhisper.asr.runtime.graphs``: a
        # large-v3 step 3x faster); positions are never read on the host there, so their shapes are fixed
        use_graphs = cuda_graphs and self.device.type == "cuda"
        self.graphs = PassGraphs(lambda x, p, c, a, b: self._layers(x, p, c, a, b, None)) if use_graphs else None
        self._shared_cross: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # ``sharing_cross_kv``
        self._release_packed_sources()

    @property
    def device(self) -> torch.device:
        """Where the weights are: every tensor a decoder makes to meet them is made here."""
        return self.embed.device

    def _release_packed_sources(self) -> None:
        """The file pages of the weights that only served to make packed copies go back to the kernel
        (``specwhisper.hardware.memory``: 181 MB for base; the head's rows are read again, a few at a time, as
        embeddings)."""
        sources = [m.weight for layer, lin in zip(self.layers, self.products) if lin.packed for m in LayerProducts.modules(layer)]
        cross = float_sources([m for layer, kv in zip(self.layers, self.cross_products) if kv.packed
                               for m in (layer.encoder_attn.k_proj, layer.encoder_attn.v_proj)])
        release_file_pages(sources + cross + ([self.proj] if self.head.main.packed else []))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_head, self.head_dim).transpose(1, 2)

    @torch.inference_mode()
    def cross_kv(self, encoder_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention keys and values of every layer [layers, B, heads, frames, hd]."""
        b, frames, _ = encoder_out.shape
        cross_k = encoder_out.new_empty(len(self.layers), b, self.n_head, frames, self.head_dim)
        cross_v = torch.empty_like(cross_k)
        # Row by row: one row's projection is a 3 MB temporary (base); all rows at once left ~160 MB
        # of freed 25 MB temporaries that glibc kept (measured) and tied a row's numbers to its batch.
        # Key and value in one packed product (``specwhisper.hardware.kernels``): 40 ms a row for base's six
        # layers against 92 ms through ``nn.Linear`` (MKL's AVX2 code on this AVX-512 CPU), measured.
        d = self.d_model
        for i, kv in enumerate(self.cross_products):
            for r in range(b):
                both = kv(encoder_out[r : r + 1])
                cross_k[i, r] = self._split(both[..., :d])[0]
                cross_v[i, r] = self._split(both[..., d:])[0]
        return cross_k, cross_v

    @contextmanager
    def sharing_cross_kv(self, encoder_out: torch.Tensor):
        """Within the block, every cache made for this very ``encoder_out`` reuses one projection of
        its cross-attention K/V (read only by the passes). The live engine decodes and then aligns
        the same encoder output: the projection over a 30 s window cost 0.17 s of each, a tenth of an
        update. Not for offline batches: held across a batch's decode it would keep the batch's whole
        block (295 MB at 8 rows) alive while the decoder's shrinking caches copy theirs."""
        self._shared_cross = (encoder_out, *self.cross_kv(encoder_out))
        try:
            yield
        finally:
            self._shared_cross = None

    @torch.inference_mode()
    def new_cache(self, encoder_out: torch.Tensor, slack: int = 0) -> KVCache:
        """``slack`` extra slots past the last position take the padding of ragged speculative passes.
        The cross-attention K/V of all layers share one block (``KVCache.select``)."""
        b = encoder_out.shape[0]
        shared = self._shared_cross
        cross_k, cross_v = shared[1:] if shared is not None and shared[0] is encoder_out else self.cross_kv(encoder_out)
        width = self.width_for(b)
        if width is not None:  # every cache of b rows the same room, whatever the decoder's slack
            slack = width
        limit = self.max_len + slack
        # room that grows needs the positions on the host (``layer_range``)
        room = min(INITIAL_POSITIONS, limit) if self.host_positions else limit
        z = encoder_out.new_zeros(len(self.layers), b, self.n_head, room, self.head_dim)
        rows = list(range(b)) if width is not None else None
        return KVCache(z, torch.zeros_like(z), cross_k, cross_v, limit=limit, rows=rows, width=width)

    def width_for(self, rows: int) -> int | None:
        """The columns of every fixed-shape pass over a cache of ``rows`` rows (None: natural shapes).
        Plain and speculative decoding of a batch share it; a verify pass holds at most that many tokens."""
        return None if self.fixed_width is None else fixed_width_for(rows, self.fixed_width, self.fixed_columns)

    @torch.inference_mode()
    def hidden(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache, cross_qk: dict[int, torch.Tensor] | None = None,
        whole_rows: bool = False,
    ) -> torch.Tensor:
        """Run the decoder layers on ``tokens`` [B, n] at ``positions`` [B, n].

        Writes their keys/values into ``cache`` at those positions and attends to
        every cached position <= the query's own. Returns the final-norm hidden
        states [B, n, d]. For each layer index present in ``cross_qk`` the
        cross-attention logits [B, heads, n, frames] are stored there (word timing).
        """
        x = self.layer_range(self.embed_at(tokens, positions), positions, cache, cross_qk=cross_qk, whole_rows=whole_rows)
        return self.final_norm(x)

    def embed_at(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token + position embeddings [B, n, d] (the input of the first layer)."""
        # padding past the last real position (ragged speculative rows) reuses the last embedding
        return F.embedding(tokens, self.embed) + F.embedding(positions.clamp(max=self.max_len - 1), self.pos)

    @torch.inference_mode()
    def layer_range(
        self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache, start: int = 0, stop: int | None = None,
        cross_qk: dict[int, torch.Tensor] | None = None, whole_rows: bool = False,
    ) -> torch.Tensor:
        """Layers ``start`` .. ``stop - 1`` on the residual stream ``x`` [B, n, d] at ``positions``:
        ``hidden`` without the embeddings and the final norm, so a pass may enter or leave the stack
        at any layer (the early-exit drafter runs the first layers, the verify pass the rest).

        ``whole_rows``: the pass is each row's first, positions 0..n-1 (a prompt; the alignment's
        sequences). Its tokens are never compared with a decoding step's, so in the row-exact mode a
        row's queries attend in one call (``attend_per_row``): still a row's numbers whatever its
        batch-mates, and 2.3-2.7x faster than query by query (a 55-token prompt 0.187 -> 0.070 s, 8
        alignment rows of 150 tokens 3.4 -> 1.3 s, one thread). Plain and speculative decoding share
        the prompt's pass, so they stay token-identical."""
        if cache.width is not None and positions.shape[1] <= cache.width:
            return self._fixed_shape_pass(x, positions, cache, start, stop, cross_qk)
        if cache.rows is not None and cache.rows != list(range(cache.k.shape[1])):
            raise ValueError("a pass wider than the fixed-shape mode's width needs every row of its cache")
        if self.graphs is not None and cross_qk is None and positions.shape[1] <= FIXED_WIDTH:
            return self.graphs(x, positions, cache, start, stop)  # a drafter's steps (its bits only shape guesses)
        return self._layers(x, positions, cache, start, stop, cross_qk, whole_rows)

    def _slots(self, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Fixed-shape mode: the physical row and the column of the tokens of live rows ``rows`` at
        ``positions`` (broadcast together)."""
        phys = on_device(cache.physical(), positions.device)[rows]
        return phys, positions % cache.width

    def _fixed_shape_pass(
        self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache, start: int, stop: int | None,
        cross_qk: dict[int, torch.Tensor] | None,
    ) -> torch.Tensor:
        """The fixed-shape mode, where a pass's numbers for a token may depend on the shapes of the call
        and on where the token sits in it (cuBLAS picks kernels by shape, and split- or stream-K
        kernels reduce each output tile in an order of their own), but not on the values in other
        rows (no operation of a decoder layer mixes rows). Every pass then has the same shapes: all
        the cache's rows (finished ones idle in place), W = ``cache.width`` columns (the row count's,
        ``specwhisper.asr.runtime.kv_cache.fixed_width_for``), attention over the cache's whole room, and a token
        at position p of physical row r sits at row r, column p mod W, whichever pass computes it: a
        plain step, a verify pass or a draft step. So each token gets the numbers plain decoding of
        the batch gives it, on any device, at the price of W columns per pass. Unused slots hold the
        last slot of the room, which no real position reaches.
        Finished rows are not dropped: a smaller row count is another shape, and a row that keeps
        decoding would get other numbers for its next tokens than in a plain decode whose rows ended
        at other passes (speculation ends rows at other passes than plain decoding does)."""
        b, n = positions.shape
        rows, width = cache.k.shape[1], cache.width
        phys, col = self._slots(torch.arange(b, device=positions.device)[:, None], positions, cache)
        full_pos = positions.new_full((rows, width), cache.k.shape[3] - 1)
        full_pos[phys, col] = positions
        full_x = x.new_zeros(rows, width, x.shape[-1])
        full_x[phys, col] = x
        qk = {i: None for i in cross_qk} if cross_qk is not None else None
        if self.graphs is not None and qk is None:
            y = self.graphs(full_x, full_pos, cache, start, stop)
        else:
            y = self._layers(full_x, full_pos, cache, start, stop, qk)
        for i in qk or {}:
            cross_qk[i] = qk[i].transpose(1, 2)[phys, col].transpose(1, 2)  # [b, heads, n, frames]
        return y[phys, col]

    def _layers(
        self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache, start: int, stop: int | None,
        cross_qk: dict[int, torch.Tensor] | None, whole_rows: bool = False,
    ) -> torch.Tensor:
        b, n = positions.shape
        rows = torch.arange(b, device=positions.device)[:, None].expand(b, n)
        d = self.d_model
        # Attention goes query by query, each alone with the keys and shapes of a one-row plain step at
        # its position: torch's attention does not give a query the same bits when it shares a call with
        # other queries or rows (measured here: cross-attention of 1-3 queries vs 8 differs in the last
        # bits, the self-attention again with the key count, and a row in a batch of 2 from the row
        # alone), and such bits can turn a near-tie of two tokens, which long audio meets now and then,
        # into a different transcript. So a verify pass of any width, ragged rows and batches all give
        # every token the numbers of the target decoding that chunk alone.
        # (A lone query, a batch-1 step, makes the very call the loop makes for it.)
        # On a GPU (``host_positions`` off) the pass attends over the cache's whole room with a mask:
        # its shapes then need no host read of the positions, which would make each pass wait for the
        # last. On the CPU reading them costs nothing, and the keys stop at the last position.
        per_query = self.row_exact
        if self.host_positions:
            pos_list = positions.tolist()
            used = max(max(row) for row in pos_list) + 1
            cache.reserve(used)
        else:  # the whole room (and so the same shapes for every pass)
            used = cache.k.shape[3]
        if not per_query:
            key_pos = torch.arange(used, device=positions.device)
            mask = (key_pos[None, None, None, :] <= positions[:, None, :, None])  # [B,1,n,used]
        for i in range(start, len(self.layers) if stop is None else stop):
            layer, lin = self.layers[i], self.products[i]
            att = layer.self_attn
            qkv = lin.qkv(layer.self_attn_layer_norm(x))
            q = self._split(qkv[..., :d] * att.scaling)
            k = qkv[..., d : 2 * d].view(b, n, self.n_head, self.head_dim)
            v = qkv[..., 2 * d :].view(b, n, self.n_head, self.head_dim)
            cache.k[i][rows, :, positions] = k
            cache.v[i][rows, :, positions] = v
            if per_query and whole_rows:
                a = attend_per_row(q, cache.k[i, :, :, :n], cache.v[i, :, :, :n], causal=True)
            elif per_query:
                a = attend_per_query(q, cache.k[i], cache.v[i], pos_list, causal=True)
            else:
                a = F.scaled_dot_product_attention(
                    q, cache.k[i, :, :, :used], cache.v[i, :, :, :used], attn_mask=mask, scale=1.0
                )
            x = x + lin.out(a.transpose(1, 2).reshape(b, n, d))

            q = self._split(lin.cross_q(layer.encoder_attn_layer_norm(x)) * layer.encoder_attn.scaling)
            ck, cv, shared = cache.cross_k[i], cache.cross_v[i], cache.cross_rows
            if shared is not None and not per_query:  # rows reading one row's K/V (beams): gathered here
                ck, cv, shared = ck[on_device(shared, ck.device)], cv[on_device(shared, cv.device)], None
            if cross_qk is not None and i in cross_qk:
                cross_qk[i] = q @ (ck if shared is None else ck[on_device(shared, ck.device)]).transpose(-1, -2)
            if per_query and whole_rows:
                a = attend_per_row(q, ck, cv, causal=False, kv_rows=shared)
            elif per_query:
                a = attend_per_query(q, ck, cv, pos_list, causal=False, kv_rows=shared)
            else:
                a = F.scaled_dot_product_attention(q, ck, cv, scale=1.0)
            x = x + lin.cross_out(a.transpose(1, 2).reshape(b, n, d))

            x = x + lin.fc2(layer.activation_fn(lin.fc1(layer.final_layer_norm(x))))
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)

    def logits_at(self, hidden: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits of the states ``hidden`` [..., d] of the tokens of live rows ``rows`` at ``positions``
        (both [...]) of a pass over ``cache``. In the fixed-shape mode the head, too, runs on the whole
        block of slots, each token in its own (``_fixed_shape_pass``)."""
        if cache.width is None:
            return self.head(hidden)
        block, phys, col = self.logits_block(hidden, rows, positions, cache)
        return block[phys, col]

    def logits_block(self, hidden: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fixed-shape mode's head over the whole block of slots [physical rows, width, V], each token
        of ``hidden`` in its own (``logits_at``), and the physical row and column of each token."""
        phys, col = self._slots(rows, positions, cache)
        block = hidden.new_zeros(cache.k.shape[1], cache.width, hidden.shape[-1])
        block[phys, col] = hidden
        return self.head(block), phys, col

    def compact_head(self, text_tokens: int, first_special: int) -> OutputHead:
        """The output head re-packed with a compact drafting vocabulary (``OutputHead``)."""
        return self._packed_head((text_tokens, first_special))

    def whole_head(self) -> OutputHead:
        """The output head packed whole again after ``compact_head``: one product per step. Split, plain
        decoding paid two products and a concat (the same 8 windows of base: 6.33-6.84 s whole,
        6.75-7.10 s split, same tokens), so ``--draft auto`` puts it back while it decodes plainly."""
        return self._packed_head(None)

    def _packed_head(self, split: tuple[int, int] | None) -> OutputHead:
        """The head packed with ``split`` (``OutputHead``'s ``compact``), re-packed only when it changes."""
        if self.head.compact_split != split:
            self.head = None  # release the old packing (106 MB for base) before making the new one
            self.head = OutputHead(self.proj, compact=split, int8=self.int8)
            release_file_pages([self.proj])
        return self.head

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache, only: list[int] | None = None,
             whole_rows: bool = False) -> torch.Tensor:
        """Logits [B, n, V] of a pass over ``tokens``; with ``only``, of those columns alone (the head's
        product is row-exact, ``specwhisper.hardware.kernels``: a column's logits do not depend on the
        others). The prompt's pass wants 2 of its up to 227 columns: the head is 51865 x 512, so the
        other columns cost 53 MFLOP each (about 0.1 s for a 60-token prompt on this 2-core CPU)."""
        h = self.hidden(tokens, positions, cache, whole_rows=whole_rows)
        if only is not None:
            h, positions = h[:, only], positions[:, only]
        with torch.inference_mode():
            if cache.width is None or positions.shape[1] > cache.width:
                return self.logits(h)
            return self.logits_at(h, torch.arange(h.shape[0], device=h.device)[:, None], positions, cache)
