"""What the ASR engine is asked for: openai-whisper's decoding and transcribe options (and
faster-whisper's additions) in one dataclass, checked with one-line errors, and the stages the engine
reports progress in. Apart from the engine so that every entry point builds and checks its options before
torch is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specwhisper.asr.decoding.language import normalize_language
from specwhisper.asr.decoding.quality import QualityRules
from specwhisper.asr.decoding.suppress import check_vocabulary, parse_suppress_tokens
from specwhisper.audio.clips import Clip, check_clips
from specwhisper.results.words import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS

if TYPE_CHECKING:
    from specwhisper.asr.decoding.tokens import SpecialTokens

TASKS = ("transcribe", "translate")
# The engine's progress stages: "vad", then "transcribe" (or "resume" for a batch a checkpoint replays) after
# each batch, when nothing of the run is on the model, and this one inside a batch, as each failing window's
# samples at a temperature end (its fraction is the transcription's so far). The model is in use there: a caller
# may stop the run (raise) but not run other work on it. Repeated speech, whose every window fails the
# compression-ratio check, samples for tens of seconds between two batches.
SAMPLING = "sampling"


MAX_VAD_MS = 10_000  # the longest VAD silence or padding setting, ms
MAX_DEFAULT_PAD_MS = 400  # the larger of the VAD's default speech pads (audio.vad: 200, FILTER_SETTINGS' 400 with vad_filter)
WINDOW_TOKENS = 448  # Whisper's most tokens in a window: the longest n-gram no_repeat_ngram_size may name, the most max_new_tokens


@dataclass
class DecodeOptions:
    language: str | None = None  # None: detect
    task: str = "transcribe"
    batch_size: int | None = 8  # None: the device's (specwhisper.asr.batch_memory: 8 on a CPU, a GPU's free memory)
    vad_threshold: float = 0.5
    # silero's silence that ends a speech span and speech kept around one, ms (None: the VAD's own, or
    # audio.vad.FILTER_SETTINGS' with vad_filter)
    vad_min_silence_ms: int | None = None
    vad_speech_pad_ms: int | None = None
    vad_max_speech_s: float | None = None  # the longest VAD span (cut at its longest pause); None: max_chunk_s
    max_chunk_s: float = 30.0
    word_timestamps: bool = False
    # word timestamps: the marks joined to the word after them / the word before them (openai-whisper's)
    prepend_punctuations: str = PREPEND_PUNCTUATIONS
    append_punctuations: str = APPEND_PUNCTUATIONS
    beam_size: int | None = None  # None: greedy (speculative when a drafter runs)
    patience: float = 1.0
    # faster-whisper's penalties on repetition within a window (asr.decoding.rules): 1.0 and 0 are off
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    # token ids never written, openai-whisper's spec ("-1": the model's own set; asr.decoding.suppress), with
    # the numerals when the engine loaded with suppress_numerals; None: the engine's own set
    suppress_tokens: str | None = None
    # a decode's first token: never a blank or end-of-text, never a timestamp past this many seconds (None: any);
    # openai-whisper's and faster-whisper's suppress_blank and max_initial_timestamp
    suppress_blank: bool = True
    max_initial_timestamp: float | None = 1.0
    # the most tokens a window's decode writes, timestamps included (faster-whisper's max_new_tokens,
    # openai-whisper's sample_len); None: up to Whisper's 448 less the prompt
    max_new_tokens: int | None = None
    quality: QualityRules = field(default_factory=QualityRules)
    initial_prompt: str | None = None  # text before every chunk (before the first one only when conditioning)
    hotwords: str | None = None  # words to favour: put in the prompt of every chunk
    prefix: str | None = None  # the text each file's first chunk starts with, forced (faster-whisper's prefix)
    condition_on_previous_text: bool = False  # True: chunks decode one at a time, each after the text before it
    prompt_reset_on_temperature: float = 0.5  # conditioning: no text carried past a decode kept above this temperature
    multilingual: bool = False  # detect the language of every chunk, not once per file
    # a file's detection below this hears its next chunk with speech too (asr.languages.file_detections);
    # multilingual: a chunk detected below this keeps the language before it
    language_threshold: float = 0.5
    language_detection_segments: int = 4  # the most chunks with speech a file's language is detected on
    vad_filter: bool = False  # drop what the VAD rejects unheard: the speech alone, joined (audio.chunking.join_spans)
    without_timestamps: bool = False  # decode with <|notimestamps|>: one segment per chunk
    # seconds of silence around a likely hallucination for it to be dropped (specwhisper.asr.hallucination);
    # None: off. Word timings are computed when it is set.
    hallucination_silence_threshold: float | None = None
    # the stretches of each file to transcribe, (start, end) seconds, end None: to the file's end
    # (specwhisper.audio.clips: openai-whisper's clip_timestamps); None: all of it
    clips: tuple[Clip, ...] | None = None

    @property
    def prompt_text(self) -> str | None:
        """The text before every chunk's decode: the hotwords, then the initial prompt."""
        return " ".join(t for t in (self.hotwords, self.initial_prompt) if t) or None

    @property
    def max_span_s(self) -> float:
        """The longest VAD speech span: ``vad_max_speech_s``, at most a chunk."""
        return min(self.max_chunk_s, self.vad_max_speech_s or self.max_chunk_s)

    @property
    def needs_words(self) -> bool:
        """Whether the decode aligns words: asked for, or needed by the hallucination rules."""
        return self.word_timestamps or self.hallucination_silence_threshold is not None

    @property
    def redecodes(self) -> bool:
        """Whether stretches a decode skipped are decoded again (``specwhisper.asr.redecode``): only in
        the lossless mode, where the segments' times say what was skipped."""
        return not (self.vad_filter or self.without_timestamps)

    def validate(self, special: SpecialTokens | None = None) -> None:
        """Raises ValueError with a one-line message; ``special`` adds the checks that need the model.
        A language name ("english", "German") becomes its code here, so every entry point takes names."""
        self.language = normalize_language(self.language)
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got '{self.task}'")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if not 1.0 <= self.max_chunk_s <= 30.0:
            raise ValueError(f"chunk length must be between 1 and 30 s, got {self.max_chunk_s}")
        if not 0.0 < self.vad_threshold < 1.0:
            raise ValueError(f"VAD threshold must be between 0 and 1 (exclusive), got {self.vad_threshold}")
        for name in ("vad_min_silence_ms", "vad_speech_pad_ms"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and 0 <= value <= MAX_VAD_MS):
                raise ValueError(f"{name.replace('_', ' ')} must be a whole number of ms from 0 to {MAX_VAD_MS}, got {value}")
        if self.vad_max_speech_s is not None:
            pad_s = (self.vad_speech_pad_ms if self.vad_speech_pad_ms is not None else MAX_DEFAULT_PAD_MS) / 1000
            if not self.vad_max_speech_s >= 2 * pad_s + 1.0:
                raise ValueError(f"vad max speech must be at least 1 s more than twice the speech pad ({pad_s:g} s), "
                                 f"got {self.vad_max_speech_s}")
        if self.beam_size is not None and self.beam_size < 1:
            raise ValueError(f"beam size must be >= 1, got {self.beam_size}")
        if self.patience <= 0:
            raise ValueError(f"patience must be > 0, got {self.patience}")
        penalty = self.repetition_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 < penalty <= 10:
            raise ValueError(f"repetition penalty must be a number above 0 and at most 10, got {penalty!r}")
        if self.suppress_tokens is not None:
            try:
                ids = parse_suppress_tokens(self.suppress_tokens)[1]
            except (ValueError, AttributeError) as exc:
                raise ValueError(f"suppress-tokens: {exc}") from None
            if special is not None:
                check_vocabulary(ids, special.vocab_size)
        if not 0.0 <= self.prompt_reset_on_temperature <= 1.0:
            raise ValueError(f"prompt reset on temperature must be between 0 and 1, got {self.prompt_reset_on_temperature}")
        initial = self.max_initial_timestamp
        if initial is not None and (isinstance(initial, bool) or not isinstance(initial, (int, float))
                                    or not 0 <= initial <= 30):
            raise ValueError(f"max initial timestamp must be a number of seconds from 0 to 30, got {initial!r}")
        cap = self.max_new_tokens
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= WINDOW_TOKENS):
            raise ValueError(f"max new tokens must be a whole number from 1 to {WINDOW_TOKENS}, got {cap!r}")
        size = self.no_repeat_ngram_size
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= WINDOW_TOKENS:
            raise ValueError(f"no repeat ngram size must be a whole number from 0 to {WINDOW_TOKENS}, got {size!r}")
        if not 0.0 <= self.language_threshold <= 1.0:
            raise ValueError(f"language threshold must be between 0 and 1, got {self.language_threshold}")
        if self.language_detection_segments < 1:
            raise ValueError(f"language detection segments must be >= 1, got {self.language_detection_segments}")
        threshold = self.hallucination_silence_threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not 0 < threshold < float("inf")):
            raise ValueError(f"hallucination silence threshold must be a number of seconds > 0, got {threshold}")
        if threshold is not None and self.vad_filter:
            raise ValueError("hallucination silence threshold does not apply with vad filter: the silence it looks for is dropped before decoding")
        if self.clips is not None:
            self.clips = check_clips(self.clips)
        if self.prefix is not None and not isinstance(self.prefix, str):
            raise ValueError(f"prefix must be text, got {self.prefix!r}")
        self.quality.validate()
        if special is None:
            return
        if self.language is not None:
            if special.multilingual and self.language not in special.languages:
                raise ValueError(f"unknown language code '{self.language}'")
            if not special.multilingual and self.language != "en":
                raise ValueError(f"this model is English-only; cannot use language '{self.language}'")
        if self.task == "translate" and not special.multilingual:
            raise ValueError("this model is English-only and cannot translate")
        if self.multilingual and not special.multilingual:
            raise ValueError("this model is English-only: --multilingual needs a multilingual model")
