"""The n-gram (prompt lookup) drafter with the Whisper decoder's hooks."""

from __future__ import annotations

from specwhisper.asr.decoding.speculative import WhisperDrafter
from specwhisper.speculative import lookup


class WhisperNgramDrafter(lookup.NgramDrafter, WhisperDrafter):
    """Prompt lookup in the row's own tokens and the batch's other rows (neighbouring chunks of the
    same audio): ``specwhisper.speculative.lookup.NgramDrafter`` with the decoder's hooks."""
