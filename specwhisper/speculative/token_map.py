"""Token maps between a drafter's vocabulary and the target's.

A drafter with the target's tokenizer passes ids through (:class:`SameVocab`). One with another
tokenizer sees the target's tokens as text re-encoded with its own tokenizer, and its draft comes
back as text re-encoded with the target's (:class:`TextRetokenizer`); a draft that continues an
open run of text is re-encoded together with that run, so word pieces split as the target would
split them. Whisper's map adds timestamps on top (``specwhisper.asr.drafters.model.Retokenize``); the
post-edit's universal drafter uses the text map as is.
"""

from __future__ import annotations

from typing import Protocol


class TokenMap(Protocol):
    def to_draft(self, context: list[int]) -> list[int]:
        """The drafter's tokens for the target's ``context``."""
        ...

    def to_target(self, context: list[int], draft: list[int]) -> list[int]:
        """The target's tokens for the drafter's ``draft`` continuing the target's ``context``."""
        ...


class SameVocab:
    """The drafter shares the target's tokenizer: ids pass through unchanged."""

    def to_draft(self, context: list[int]) -> list[int]:
        return context

    def to_target(self, context: list[int], draft: list[int]) -> list[int]:
        return draft


class TextRetokenizer:
    """Text re-encoding between the target's tokenizer and a drafter's (Hugging Face tokenizers).

    ``lead_text``: text the drafter sees before the target's tokens (the post-edit's prompt, which the
    target holds as ids of its own chat template); ``lead_ids``: drafter ids before everything (BOS).
    ``stop_ids``: drafter ids that end a draft (its end of text)."""

    def __init__(self, target_tokenizer, drafter_tokenizer, lead_text: str = "", lead_ids: list[int] | None = None,
                 stop_ids: set[int] | None = None):
        self.target_tokenizer = target_tokenizer
        self.drafter_tokenizer = drafter_tokenizer
        self.lead_text = lead_text
        self.lead_ids = list(lead_ids or [])
        self.stop_ids = set(stop_ids or ())

    @staticmethod
    def encode(tokenizer, text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    @classmethod
    def continuation(cls, tokenizer, context: list[int], text: str) -> list[int]:
        """``text`` encoded as it continues ``context`` (ids of the same tokenizer): the joined text
        re-encoded, minus the context, when the context's ids survive; else ``text`` alone."""
        if context:
            joined = cls.encode(tokenizer, tokenizer.decode(context, skip_special_tokens=False) + text)
            if joined[: len(context)] == context:
                return joined[len(context) :]
        return cls.encode(tokenizer, text)

    def to_draft(self, context: list[int]) -> list[int]:
        text = self.target_tokenizer.decode(context, skip_special_tokens=False)
        return self.lead_ids + self.encode(self.drafter_tokenizer, self.lead_text + text)

    def to_target(self, context: list[int], draft: list[int]) -> list[int]:
        cut = next((i for i, t in enumerate(draft) if t in self.stop_ids), None)
        draft = draft if cut is None else draft[:cut]
        if not draft:
            return []
        text = self.drafter_tokenizer.decode(draft, skip_special_tokens=False)
        return self.continuation(self.target_tokenizer, context, text)
