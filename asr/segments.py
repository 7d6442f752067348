"""Turning decoded Whisper tokens (with timestamp tokens) into timed segments."""

from __future__ import annotations

from asr.decoding import SpecialTokens
from asr.types import Segment

TIME_PRECISION = 0.02  # seconds per timestamp token


def tokens_to_segments(
    tokens: list[int], special: SpecialTokens, tokenizer, offset: float, duration: float
) -> list[Segment]:
    """Split ``tokens`` at timestamp pairs (openai/whisper's rule); times become absolute via ``offset``.

    A final run of text without a closing timestamp ends at the chunk's end.
    """
    tb = special.timestamp_begin
    segments: list[Segment] = []
    start_ts: float | None = None
    text_tokens: list[int] = []

    def flush(end: float) -> None:
        nonlocal text_tokens, start_ts
        text = tokenizer.decode(text_tokens)
        if text.strip():
            s = min(start_ts if start_ts is not None else 0.0, duration)
            e = min(max(end, s), duration)
            segments.append(Segment(start=offset + s, end=offset + e, text=text, tokens=list(text_tokens)))
        text_tokens = []
        start_ts = None

    for tok in tokens:
        if tok >= tb:
            t = (tok - tb) * TIME_PRECISION
            if start_ts is None:
                start_ts = t
            elif text_tokens:
                flush(t)
            else:
                start_ts = t
        elif tok < special.eot:
            text_tokens.append(tok)
    if text_tokens:
        flush(duration)
    return segments
