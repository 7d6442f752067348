"""Typed results shared by every stage: words, segments, transcripts, speed facts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from specwhisper.speculative.stats import SpeculativeCounts


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


@dataclass
class DecodeStats(SpeculativeCounts):
    """Counters of one decode (the speculative core's counts first: tokens emitted after the prompt,
    target passes, drafted and accepted tokens; these stay zero for plain decoding), then Whisper's."""

    encoder_seconds: float = 0.0
    decoder_seconds: float = 0.0
    alignment_seconds: float = 0.0
    fallback_passes: int = 0  # target passes of temperature-fallback decodes (plain sampling, no drafter)
    fallback_seconds: float = 0.0  # their time, also counted in decoder_seconds
    redecoded_chunks: int = 0  # chunk tails decoded again because a decode stopped before the speech did
    resumed_chunks: int = 0  # chunks an interrupted run finished, read from its checkpoint (specwhisper.pipeline.checkpoint)

    def merge(self, other: DecodeStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def drafted(self) -> bool:
        """Whether any drafter proposed a token (``--draft none``, or ``auto`` deciding on plain decoding: not)."""
        return self.drafted_tokens > 0

    def to_dict(self) -> dict:
        """The counters; the two speculative ratios are null when no drafter ran, since an acceptance of 0
        and 0.99 tokens per pass would read as a drafter that failed."""
        d = asdict(self)
        d["drafter_ran"] = self.drafted
        d["acceptance_rate"] = round(self.acceptance_rate, 4) if self.drafted else None
        d["tokens_per_target_pass"] = round(self.tokens_per_target_pass, 4) if self.drafted else None
        return d


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

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments if s.text.strip())

    @property
    def speakers(self) -> list[str]:
        if self.turns is not None:
            return sorted({t.speaker for t in self.turns} | {s.speaker for s in self.segments if s.speaker})
        return sorted({s.speaker for s in self.segments if s.speaker})

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "text": self.text,
            "language": self.language,
            "duration": round(self.duration, 3),
            "speakers": self.speakers,
            "segments": segments_to_dicts(self.segments),
            "speaker_turns": None if self.turns is None else [
                {"start": round(t.start, 3), "end": round(t.end, 3), "speaker": t.speaker} for t in self.turns],
            "model": self.model,
            "timings": self.timings,
            "speculative": self.stats.to_dict(),
        }


def word_to_dict(w: Word) -> dict:
    """openai-whisper's word (``word`` with its leading space, ``start``, ``end``, ``probability``), plus
    WhisperX's ``speaker`` where one was assigned and our ``overlap``."""
    d = {"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3),
         "probability": None if w.probability is None else round(w.probability, 3)}
    if w.speaker is not None:
        d["speaker"] = w.speaker
    d["overlap"] = w.overlap
    return d


def segments_to_dicts(segments: list[Segment]) -> list[dict]:
    """openai-whisper's verbose segments (``id, seek, start, end, text, tokens, temperature, avg_logprob,
    compression_ratio, no_speech_prob``, ``words`` when word timestamps ran) with WhisperX's ``speaker``.

    Keys follow the peers' readers: ``words`` is absent, not empty, without word timestamps (openai's
    subtitle writers switch to word cues on its presence, and an empty list writes an empty file), and
    ``speaker`` is absent where none was assigned (WhisperX's writers test ``"speaker" in segment``, and a
    null would print ``[None]:``)."""
    with_words = any(s.words for s in segments)
    out = []
    for i, s in enumerate(segments):
        d = {"id": i, "seek": s.seek, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text.strip(),
             "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": round(s.avg_logprob, 4),
             "compression_ratio": round(s.compression_ratio, 4), "no_speech_prob": round(s.no_speech_prob, 4)}
        if s.speaker is not None:
            d["speaker"] = s.speaker
        d["overlap"] = s.overlap
        if with_words:
            d["words"] = [word_to_dict(w) for w in s.words]
        out.append(d)
    return out
