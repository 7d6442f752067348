"""The post-edit's model drafters: a causal LM's ``DraftRuntime`` under the shared model-drafter loop.

``specwhisper.speculative.model_drafter`` does what every model drafter does (cache sync by longest
common prefix, k greedy steps, map back); this module adds the causal-LM calls (a ``DynamicCache``
cropped to the common prefix, an optional pruned output head) and the three drafters built on them:
- :class:`CausalLMDrafter`: a smaller causal LM with the target's tokenizer;
- :class:`UniversalDrafter`: a causal LM with a DIFFERENT tokenizer, text re-encoded both ways
  (universal assisted generation);
- :func:`early_exit_drafter`: the target's own first N layers (``layers:N``), named like Whisper's
  early-exit drafter.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch

from specwhisper.hardware.device import on_device
from specwhisper.postedit.lm_cache import crop, forward, input_ids, new_cache
from specwhisper.speculative import model_drafter
from specwhisper.speculative.drafter import early_exit_name
from specwhisper.speculative.token_map import SameVocab, TextRetokenizer

__all__ = ["CausalLMDrafter", "UniversalDrafter", "early_exit_model", "early_exit_drafter", "same_tokenizer"]


class PrunedHead:
    """Greedy next tokens of a causal LM scored over a few vocabulary rows only.

    Why not the model's own head: on this CPU the full output projection is the single largest matrix
    (SmolLM2: 49k x 576, ~11 ms of a ~60 ms step; Gemma 3 270M: 262k x 640, more than its whole body).
    A drafter may guess from a restricted vocabulary (the verify pass keeps the output exact), and a
    post-edit draws nearly all its tokens from the source text. Final-logit soft-capping is monotonic,
    so the argmax needs no other post-processing.
    """

    def __init__(self, model, rows: Sequence[int]):
        self.body = getattr(model, model.base_model_prefix)
        full = model.get_output_embeddings().weight.detach()
        self.ids = on_device(sorted({int(r) for r in rows}), full.device, dtype=torch.long)  # where the head's argmax is
        self.weight = full[self.ids].contiguous()

    @torch.inference_mode()
    def last_hidden(self, ids: Sequence[int] | torch.Tensor, cache) -> torch.Tensor:
        x = input_ids(ids, self.weight.device)
        return self.body(input_ids=x, past_key_values=cache, use_cache=True).last_hidden_state[0, -1:]

    def next_token(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.ids[(hidden @ self.weight.T).argmax(-1)][-1]


class CausalLMDraftRuntime:
    """The ``DraftRuntime`` of a causal LM drafting for one sequence (row 0) with a ``DynamicCache``.

    ``vocab``: token ids the drafter may propose (None: all); see :class:`PrunedHead`. Drafts run the
    full ``k`` (no confidence stop): a draft step is cheap next to a verify pass."""

    def __init__(self, model, vocab: Sequence[int] | None = None):
        self.model = model
        self.cache = new_cache(model)
        self.head = PrunedHead(model, vocab) if vocab is not None else None
        self.state: torch.Tensor | None = None  # last position's hidden state (pruned head) or logits

    def _run(self, ids: list[int] | torch.Tensor) -> None:
        if self.head is not None:
            self.state = self.head.last_hidden(ids, self.cache)
        else:
            self.state = forward(self.model, ids, self.cache, keep=1)[-1]

    def feed(self, feeds: list[list[int]], starts: list[int]) -> None:
        crop(self.cache, starts[0])
        self._run(feeds[0])

    def start(self, rows: list[int], prefixes: list[list[int]]) -> None:
        pass  # no logit rules

    def pick(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        token = self.head.next_token(self.state) if self.head is not None else self.state.argmax()
        return token.reshape(1), torch.zeros(1, dtype=torch.bool, device=token.device)

    def step(self, rows: list[int], tokens: torch.Tensor, positions: list[int]) -> None:
        self._run(tokens)  # one row: a draft step's token stays on the device

    def space(self, length: int) -> int:
        return 1 << 30


class CausalLMDrafter(model_drafter.ModelDrafter):
    """A smaller causal LM with the target's tokenizer, seeing the target's prompt; its KV cache keeps
    the longest valid prefix. ``vocab``: token ids the drafter may propose (None: all)."""

    def __init__(self, model, prompt_ids: Sequence[int], vocab: Sequence[int] | None = None, name: str = "model"):
        super().__init__(CausalLMDraftRuntime(model, vocab), SameVocab(), [int(t) for t in prompt_ids])
        self.name = name


class UniversalDrafter(model_drafter.ModelDrafter):
    """A causal LM with a different tokenizer (universal assisted generation).

    Each round the target's text (prompt + generated) is re-encoded with the drafter's tokenizer, the
    drafter's cache is cropped to the longest common prefix with what it had seen, the drafter decodes
    ``k`` of its own tokens greedily (cut at its end of text), and their text is re-encoded with the
    target tokenizer, continuing the generated text (``TextRetokenizer``).
    ``vocab``: ids of the DRAFTER's tokenizer it may propose (None: all).
    """

    name = "universal"

    def __init__(self, model, tokenizer, target_tokenizer, prompt_ids: Sequence[int], add_bos: bool | None = None,
                 vocab: Sequence[int] | None = None):
        bos = getattr(tokenizer, "bos_token_id", None)
        if add_bos is None:
            add_bos = bos is not None and bool(getattr(tokenizer, "add_bos_token", True))
        token_map = TextRetokenizer(
            target_tokenizer, tokenizer,
            lead_text=target_tokenizer.decode(list(prompt_ids), skip_special_tokens=False),
            lead_ids=[bos] if (add_bos and bos is not None) else [],
            stop_ids={t for t in [getattr(tokenizer, "eos_token_id", None)] if t is not None},
        )
        super().__init__(CausalLMDraftRuntime(model, vocab), token_map)


def same_tokenizer(a, b) -> bool:
    """True when two tokenizers map text to the same ids (same vocabulary and specials)."""
    if a is b:
        return True
    try:
        return a.get_vocab() == b.get_vocab() and a.all_special_ids == b.all_special_ids
    except Exception:
        return False


def early_exit_model(target, num_layers: int):
    """A causal LM made of the target's first ``num_layers`` decoder layers (for ``layers:N``).

    Weights are shared with the target (no copy); the final norm and LM head are the target's.
    """
    inner = target.model
    n_all = len(inner.layers)
    if not 0 < num_layers < n_all:
        raise ValueError(f"num_layers must be in 1..{n_all - 1}, got {num_layers}")

    def shallow(module):
        # shares parameters and submodules, but not the registries (_modules, hooks, ...): a hook on
        # the target must not fire for the drafter
        new = copy.copy(module)
        for key, value in module.__dict__.items():
            if isinstance(value, dict):
                setattr(new, key, type(value)(value))
        return new

    drafter = shallow(target)
    body = shallow(inner)
    body.layers = torch.nn.ModuleList(list(inner.layers)[:num_layers])
    drafter._modules["model"] = body
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:num_layers]
    drafter.config = cfg
    body.config = cfg
    if getattr(target, "generation_config", None) is not None:  # generate() mutates an assistant's
        drafter.generation_config = copy.deepcopy(target.generation_config)
    return drafter



def early_exit_drafter(early_model, prompt_ids: Sequence[int], vocab: Sequence[int] | None = None) -> CausalLMDrafter:
    """A drafter over :func:`early_exit_model`'s layers, named like Whisper's early-exit drafter."""
    layers = early_model.config.num_hidden_layers
    return CausalLMDrafter(early_model, prompt_ids, vocab, name=early_exit_name(layers))
