"""Choosing the post-edit's drafter per ``--postedit-drafter`` (the parallel of ``specwhisper.asr.drafters.choice``).

``none``               plain greedy decoding
``copy``               prompt lookup in the text being edited (``specwhisper.speculative.lookup.CopyDrafter``)
``layers:N``           the target's own first N layers (also spelled ``early-exit:N``, Whisper's name)
MODEL                  a causal LM id/path/alias; universal assisted generation when its tokenizer differs
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from specwhisper.postedit.drafters import CausalLMDrafter, UniversalDrafter, early_exit_drafter
from specwhisper.speculative.drafter import Drafter
from specwhisper.speculative.lookahead import Lookahead
from specwhisper.speculative.lookup import CopyDrafter

# copy drafts cost nothing to make and a verify pass grows slowly with its width on CPU; misses are
# local (an inserted comma, a capital), so stay wide after one
COPY_LOOKAHEAD = Lookahead(initial=12, minimum=6, maximum=32, grow=4, shrink=2)
MODEL_LOOKAHEAD = Lookahead(initial=4, minimum=1, maximum=8, grow=2, shrink=1)  # transformers' "heuristic" schedule


@dataclass
class DraftSpec:
    """What a drafter string means (see :func:`parse_drafter`)."""

    kind: str  # none | copy | layers | model
    layers: int = 0
    model: str | None = None
    extra: dict = field(default_factory=dict)


def parse_drafter(spec: str | None) -> DraftSpec:
    """'none'/None, 'copy', 'layers:N' or 'early-exit:N' (target's first N layers), or a model id/path/alias."""
    if spec is None or spec.strip().lower() in ("", "none", "off", "no"):
        return DraftSpec("none")
    s = spec.strip()
    if s.lower() in ("copy", "prompt-lookup", "ngram"):
        return DraftSpec("copy")
    m = re.fullmatch(r"(?i)(?:layers|early-exit):(\d+)", s)
    if m:
        return DraftSpec("layers", layers=int(m.group(1)))
    return DraftSpec("model", model=s)


_PUNCTUATION = ". , ? ! ; : ' \" - ( ) ... .\" ,\" 's n't"


def draft_vocabulary(tokenizer, source: str, extra_ids: Sequence[int | None] = ()) -> list[int]:
    """Token ids a model drafter may propose for an edit of ``source``: its words in the casings an
    edit uses, punctuation, and end-of-turn ids. Only the drafter is restricted; the output stays exact."""
    words = source.split()
    variants = [source, source.lower(), " ".join(w[:1].upper() + w[1:] for w in words), _PUNCTUATION]
    ids = {int(t) for t in extra_ids if t is not None}
    for v in variants:
        ids.update(int(t) for t in tokenizer.encode(v, add_special_tokens=False))
        ids.update(int(t) for t in tokenizer.encode(" " + v, add_special_tokens=False))
    return sorted(ids)


@dataclass
class DrafterFactory:
    """Builds the drafter of one window (drafters hold per-sequence state)."""

    spec: DraftSpec
    name: str  # as the user spelled it
    tokenizer: object  # the target's
    end_ids: list[int]  # what ends a turn (the copy drafter proposes it after the source)
    eos_ids: list[int]
    drafter_model: object | None = None
    drafter_tokenizer: object | None = None
    universal: bool = False  # the drafter's tokenizer differs from the target's
    prune_vocab: bool = True

    def lookahead(self) -> Lookahead:
        return COPY_LOOKAHEAD if self.spec.kind == "copy" else MODEL_LOOKAHEAD

    def build(self, prompt: list[int], source: str) -> Drafter | None:
        kind = self.spec.kind
        if kind == "none":
            return None
        if kind == "copy":
            # the edit usually starts with a capital letter
            return CopyDrafter(self.tokenizer, source[:1].upper() + source[1:], self.end_ids)
        if self.drafter_model is None:
            raise ValueError(f"drafter {self.name!r} has no model")
        if self.universal:
            dtok = self.drafter_tokenizer
            vocab = draft_vocabulary(dtok, source, [dtok.eos_token_id]) if self.prune_vocab else None
            return UniversalDrafter(self.drafter_model, dtok, self.tokenizer, prompt, vocab=vocab)
        vocab = draft_vocabulary(self.tokenizer, source, self.eos_ids) if self.prune_vocab else None
        if kind == "layers":
            return early_exit_drafter(self.drafter_model, prompt, vocab)
        return CausalLMDrafter(self.drafter_model, prompt, vocab=vocab)
