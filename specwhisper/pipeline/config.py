"""What a :class:`~specwhisper.pipeline.core.Pipeline` loads (:class:`PipelineConfig`) and what one
run of it is asked (:class:`RunOptions`). Plain dataclasses, filled from every entry point's values by
``specwhisper.pipeline.options`` and checked with one-line errors before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import DEFAULT_MAX_SECONDS
from specwhisper.pipeline.subtitles import SubtitleOptions
from specwhisper.results.words import split_sentences

if TYPE_CHECKING:
    from specwhisper.results.transcript import Segment


@dataclass
class PipelineConfig:
    """What to load. Models load once per Pipeline."""

    model: str = "base"
    draft: str = "auto"  # auto | none | ngram | a model name/id/path
    device: str = "auto"  # auto (cuda when a GPU is usable) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (float16 on a GPU, float32 on the CPU) | float32 | float16 | bfloat16
    threads: int | None = None  # torch CPU threads for the process (None: one per core); specwhisper.hardware.threads
    cache_dir: Path | None = None
    diarization_model: str | None = None  # None: the embedded offline pipeline
    hf_token: str | None = None
    postedit_model: str | None = None  # None: the embedded SmolLM2
    postedit_drafter: str | None = "copy"
    postedit_max_change: float = 0.3  # an edit changing a larger share of words is rejected
    suppress_numerals: bool = False  # nor any token with a digit, %, $ or £: numbers come out spelled


@dataclass
class RunOptions:
    """Per-request settings."""

    decode: DecodeOptions = field(default_factory=DecodeOptions)
    diarize: bool = False
    known_speakers: tuple[tuple[str, str], ...] = ()  # (name, reference clip: a path or a data URL); diarize.known
    speaker_embeddings: bool = False  # each speaker's voice embedding in the transcript
    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None
    postedit: bool = False
    max_audio_s: float = DEFAULT_MAX_SECONDS
    subtitles: SubtitleOptions = field(default_factory=SubtitleOptions)  # srt/vtt layout, for the writers
    align_text: str | None = None  # the words spoken: the transcript is this text, dated (asr.text_alignment)
    segment_resolution: str = "chunk"  # chunk: Whisper's segments; sentence: one per sentence (results.words)
    multichannel: bool = False  # each channel transcribed on its own, its words its speaker's (pipeline.channels)

    def validate(self) -> None:
        self.decode.validate()
        self.subtitles.validate()
        for name in ("num_speakers", "min_speakers", "max_speakers"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1, got {v}")
        if (self.known_speakers or self.speaker_embeddings) and not self.diarize:
            raise ValueError("known speakers and speaker embeddings come from the diarizer: turn diarization on")
        if self.align_text is not None:
            self.check_alignment()
        if self.multichannel and (self.diarize or self.align_text is not None):
            clash = "diarize (or known speakers)" if self.diarize else "align-text"
            raise ValueError(f"multichannel gives each channel its own speaker: it does not go with {clash}, which "
                             "hears one mix")
        if self.segment_resolution not in ("chunk", "sentence"):
            raise ValueError(f"segment-resolution must be one of chunk, sentence, got {self.segment_resolution!r}")
        if self.min_speakers and self.max_speakers and self.min_speakers > self.max_speakers:
            raise ValueError(f"min-speakers ({self.min_speakers}) is larger than max-speakers ({self.max_speakers})")
        if self.num_speakers and not (self.min_speakers or 1) <= self.num_speakers <= (self.max_speakers or self.num_speakers):
            raise ValueError(f"num-speakers ({self.num_speakers}) is outside min-speakers..max-speakers "
                             f"({self.min_speakers or 1}..{self.max_speakers or 'any'})")

    def check_alignment(self) -> None:
        """What an alignment of a text cannot go with (one line)."""
        clash = {"postedit": self.postedit, "task translate": self.decode.task == "translate",
                 "vad-filter": self.decode.vad_filter, "without-timestamps": self.decode.without_timestamps,
                 "clip-timestamps": self.decode.clips is not None}
        for name, on in clash.items():
            if on:
                raise ValueError(f"align-text keeps the text given, word for word, in the audio's language, and dates "
                                 f"every word of the file: it does not go with {name}")

    def decode_options(self) -> DecodeOptions:
        """The ASR's options: ``decode``, with word timestamps on when the subtitle layout, the sentences or
        the channels' turns (``pipeline.channels``) need them."""
        needed = self.subtitles.active or self.segment_resolution == "sentence" or self.multichannel
        return replace(self.decode, word_timestamps=True) if needed else self.decode

    def resolved(self, segments: list[Segment]) -> list[Segment]:
        """The ASR's segments at the asked resolution: as they are, or one per sentence."""
        return split_sentences(segments) if self.segment_resolution == "sentence" else segments
