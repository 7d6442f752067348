"""Typed results shared by every stage: words, segments, speaker turns, transcripts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from specwhisper.results.stats import DecodeStats


@dataclass
class Word:
    start: float
    end: float
    text: str
    probability: float | None = None
    speaker: str | None = None
    overlap: bool = False  # another speaker's diarization turn covers this word too


@dataclass
class SpeakerTurn:
    """One diarization turn: ``speaker`` talks from ``start`` to ``end`` (turns of different speakers may overlap)."""

    start: float
    end: float
    speaker: str

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Segment:
    start: float
    end: float
    text: str
    words: list[Word] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    speaker: str | None = None
    overlap: bool = False  # more than one speaker talks during this segment
    # openai-whisper's per-window facts of the decode this segment came from
    seek: int = 0  # the window's start in 10 ms mel frames
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    language: str | None = None  # the language the window was decoded in (each window's own with --multilingual)


@dataclass
class Transcript:
    segments: list[Segment]
    language: str | None
    duration: float  # seconds of audio
    model: dict = field(default_factory=dict)  # model name, drafter, settings
    timings: dict = field(default_factory=dict)  # seconds per stage, rtf
    stats: DecodeStats = field(default_factory=DecodeStats)
    source: str | None = None
    # the diarizer's turns, overlaps included: the source of speakers (RTTM, speaker list);
    # None when diarization did not run, [] when it ran and found nobody
    turns: list[SpeakerTurn] | None = None
    # each speaker's voice embedding (the diarizer's model, unit length), when asked for: WhisperX's speaker_embeddings
    speaker_embeddings: dict[str, list[float]] | None = None

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments if s.text.strip())

    @property
    def speakers(self) -> list[str]:
        if self.turns is not None:
            return sorted({t.speaker for t in self.turns} | {s.speaker for s in self.segments if s.speaker})
        return sorted({s.speaker for s in self.segments if s.speaker})

    def to_dict(self) -> dict:
        embeddings = {} if self.speaker_embeddings is None else {"speaker_embeddings": self.speaker_embeddings}
        return {
            "source": self.source,
            "text": self.text,
            "language": self.language,
            "duration": round(self.duration, 3),
            "speakers": self.speakers,
            "segments": segments_to_dicts(self.segments),
            "speaker_turns": None if self.turns is None else [
                {"start": round(t.start, 3), "end": round(t.end, 3), "speaker": t.speaker} for t in self.turns],
            **embeddings,
            "model": self.model,
            "timings": self.timings,
            "speculative": self.stats.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Transcript:
        """A transcript read back from its json (``to_dict``), or from openai-whisper's or WhisperX's json
        (WhisperX's word ``score`` read as the probability; without a ``duration``, the last end). Raises
        ValueError, one line, for what is not a transcript."""
        if not isinstance(d, dict) or not isinstance(d.get("segments"), list):
            raise ValueError("not a transcript: no 'segments' list (openai-whisper's, WhisperX's or ours)")
        for k, s in enumerate(d["segments"]):
            if not isinstance(s, dict) or not all(isinstance(w, dict) for w in s.get("words") or []):
                raise ValueError(f"not a transcript: segment {k + 1} or one of its words is not an object")
        try:
            segments = [_segment_from_dict(s) for s in d["segments"]]
            turns = d.get("speaker_turns")
            stats = DecodeStats(**{f.name: d["speculative"][f.name] for f in fields(DecodeStats)
                                   if isinstance(d.get("speculative"), dict) and f.name in d["speculative"]})
            return cls(segments=segments, language=d.get("language"),
                       duration=float(d.get("duration") or max([0.0, *(s.end for s in segments)])),
                       model=dict(d.get("model") or {}), timings=dict(d.get("timings") or {}), stats=stats,
                       source=d.get("source"), speaker_embeddings=d.get("speaker_embeddings"),
                       turns=None if turns is None else [SpeakerTurn(_time(t["start"]), _time(t["end"]), t["speaker"])
                                                         for t in turns])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a transcript: a segment, word or turn lacks {exc}" if isinstance(exc, KeyError)
                             else f"not a transcript: {exc}") from None


def _time(value) -> float:
    """A time read back: seconds, finite and not negative (json allows NaN and Infinity)."""
    t = float(value)
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"a time must be seconds >= 0, got {value}")
    return t


def _segment_from_dict(d: dict) -> Segment:
    words, at = [], _time(d["start"])
    for w in d.get("words") or []:  # WhisperX leaves a word it could not align (a number) without times: kept at the last end
        start = _time(w["start"]) if w.get("start") is not None else at
        at = _time(w["end"]) if w.get("end") is not None else start
        words.append(Word(start=start, end=at, text=w["word"], probability=w.get("probability", w.get("score")),
                          speaker=w.get("speaker"), overlap=bool(w.get("overlap"))))
    if words and not any(w.text.startswith(" ") for w in words) and " " in str(d["text"]).strip():
        for w in words:  # WhisperX's words have no leading space (openai-whisper's and ours do): the text has spaces
            w.text = " " + w.text
    return Segment(start=_time(d["start"]), end=_time(d["end"]), text=" " + str(d["text"]).strip(), words=words,
                   tokens=list(d.get("tokens") or []), speaker=d.get("speaker"), overlap=bool(d.get("overlap")),
                   seek=int(d.get("seek") or 0), temperature=float(d.get("temperature") or 0.0),
                   avg_logprob=float(d.get("avg_logprob") or 0.0), compression_ratio=float(d.get("compression_ratio") or 0.0),
                   no_speech_prob=float(d.get("no_speech_prob") or 0.0), language=d.get("language"))


def word_to_dict(w: Word) -> dict:
    """openai-whisper's word (``word`` with its leading space, ``start``, ``end``, ``probability``), plus
    WhisperX's ``speaker`` where one was assigned and our ``overlap``."""
    d = {"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3),
         "probability": None if w.probability is None else round(w.probability, 3)}
    if w.speaker is not None:
        d["speaker"] = w.speaker
    d["overlap"] = w.overlap
    return d


def segments_to_dicts(segments: list[Segment], strip_text: bool = True) -> list[dict]:
    """openai-whisper's verbose segments (``id, seek, start, end, text, tokens, temperature, avg_logprob,
    compression_ratio, no_speech_prob``, ``words`` when word timestamps ran) with WhisperX's ``speaker``
    and the ``language`` the segment was decoded in.

    Keys follow the peers' readers: ``words`` is absent, not empty, without word timestamps (openai's
    subtitle writers switch to word cues on its presence, and an empty list writes an empty file), and
    ``speaker`` is absent where none was assigned (WhisperX's writers test ``"speaker" in segment``, and a
    null would print ``[None]:``). ``strip_text=False``: each text as decoded, its leading space kept, as
    openai-whisper's own result holds it."""
    with_words = any(s.words for s in segments)
    out = []
    for i, s in enumerate(segments):
        d = {"id": i, "seek": s.seek, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text.strip() if strip_text else s.text,
             "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": round(s.avg_logprob, 4),
             "compression_ratio": round(s.compression_ratio, 4), "no_speech_prob": round(s.no_speech_prob, 4)}
        if s.language is not None:
            d["language"] = s.language
        if s.speaker is not None:
            d["speaker"] = s.speaker
        d["overlap"] = s.overlap
        if with_words:
            d["words"] = [word_to_dict(w) for w in s.words]
        out.append(d)
    return out
