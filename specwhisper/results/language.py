"""The language of a file, as ``Transcriber.detect_language`` finds it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class LanguageDetection:
    """The language a file's transcription is decoded in, found as ``transcribe`` finds it: on the
    file's first window with speech, and on the next ones while the likeliest language is below the
    language threshold (up to ``language_detection_segments`` windows, pooled by their seconds of
    speech); on its first window when the VAD hears none (``speech`` is False, and the guess is a
    guess about silence or noise).

    ``probabilities``: every language the model knows, most likely first (an English-only model
    knows one, ``{"en": 1.0}``); ``start``/``end``: the place in the file, in seconds, from the first
    window's start to the last one's end; ``chunks``: how many windows were heard."""

    language: str
    probability: float
    probabilities: dict[str, float] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    speech: bool = True
    source: str | None = None
    chunks: int = 1

    def to_dict(self) -> dict:
        return asdict(self)
