"""Every transcription option, declared once.

Each :class:`Option` says its name, type, default, valid range, help text, the peers' spellings of it
and which entry points take it. From this one table are built: the ``transcribe`` argument parser
(``specwhisper.serving.arguments``), the HTTP / Inference Endpoint request model
(``specwhisper.serving.params``), the Python API's keyword arguments and their docstring
(``specwhisper.pipeline.api``), the web UI's controls (``specwhisper.serving.ui.app``) and the CLI
reference (``docs/cli.md``). An option missing from an entry point says why (``not_in``); the checks of
a value (:meth:`Option.check`) are the same everywhere, and so are their one-line messages.

Scopes: ``load`` options choose what loads (``PipelineConfig``), ``run`` options shape one
transcription (``RunOptions``), ``output`` options shape the files written from it.

This module imports neither torch nor transformers (``import specwhisper`` stays cheap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ENTRY_POINTS = ("cli", "http", "api", "ui")
SCOPES = ("load", "run", "output")
MAX_KNOWN_SPEAKERS = 8
MAX_ALIGN_CHARS = 1_000_000  # about 20 hours of speech
WINDOW_TOKENS = 448  # specwhisper.asr.options.WINDOW_TOKENS (test_options checks they agree)
DEFAULT_MAX_SECONDS = 12 * 3600.0  # specwhisper.audio.loading.DEFAULT_MAX_SECONDS (test_options checks they agree)

DEPLOYMENT = "a deployment setting (the server's SPECWHISPER_* variables, app.py's flags), not a request's"
LOADED_ONCE = "chosen when the models load: the server's SPECWHISPER_* variables, app.py's flags"


class OptionError(ValueError):
    """A value an option does not take; ``problem`` is the part every entry point words the same."""

    def __init__(self, option: Option, problem: str):
        super().__init__(f"{option.name}: {problem}")
        self.option = option
        self.problem = problem


@dataclass(frozen=True)
class Option:
    name: str  # the Python / JSON name (keyword argument, HTTP field); the CLI flag is --name-with-dashes
    kind: type  # bool, int, float, str or Path
    default: Any
    help: str
    scope: str = "run"
    group: str = "transcription"
    nullable: bool = False  # None is a value (detect, switched off, ...)
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the bound itself is not allowed
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    max_chars: int | None = None
    flags: tuple[str, ...] = ()  # CLI flags when not just --name-with-dashes (e.g. ("-l", "--language"))
    peer_flags: tuple[str, ...] = ()  # openai-whisper's / WhisperX's / faster-whisper's spellings (hidden)
    peer_names: tuple[str, ...] = ()  # request names of transformers' ASR pipeline (chunk_length_s)
    generate_names: tuple[str, ...] = ()  # names in transformers' generate_kwargs (num_beams)
    not_in: dict[str, str] = field(default_factory=dict)  # entry point -> why it does not take this option
    # the option's own reading of a value that passed the checks above (a language name to its code)
    parse: Callable[[Option, Any], Any] | None = None
    takes_list: bool = False  # a list, tuple or dict goes to ``parse`` as it is (the Python API's clip_timestamps=[0, 30])
    # a run option the live engine applies (``specwhisper.live``); one it does not is refused by the live
    # entry points when set to anything but its default (``live_refusal``)
    live: bool = False

    def __post_init__(self):
        assert self.scope in SCOPES and set(self.not_in) <= set(ENTRY_POINTS), self.name  # noqa: S101

    @property
    def entry_points(self) -> tuple[str, ...]:
        return tuple(e for e in ENTRY_POINTS if e not in self.not_in)

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    def range_text(self) -> str:
        """The valid values in words ('' when any value of the type goes)."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            left, right = ("(" if self.low_open else "["), (")" if self.high_open else "]")
            return f"{left}{_num(lo)}, {_num(hi)}{right}"
        if lo is not None:
            return (">" if self.low_open else ">=") + f" {_num(lo)}"
        if hi is not None:
            return ("<" if self.high_open else "<=") + f" {_num(hi)}"
        return ""

    def describe(self) -> str:
        """The help with the valid values and the default, as --help, the API docstring and docs/cli.md show it."""
        extra = []
        if self.choices:
            extra.append(", ".join(self.choices))
        elif self.range_text():
            extra.append(self.range_text())
        if self.kind is bool and self.default is not None:
            extra.append(f"default: {'on' if self.default else 'off'}")
        elif self.default is not None and "(default" not in self.help:
            extra.append(f"default: {_num(self.default)}")
        return self.help + (f" ({'; '.join(extra)})" if extra else "")

    def check(self, value: Any) -> Any:
        """``value`` converted to this option's type and checked; OptionError (one line) otherwise.
        Text is taken too ("5", "0.2", "true", "None"), as command lines and query strings send it."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null") and self.kind is not str):
            if self.nullable or self.default is None:
                return None
            raise OptionError(self, "needs a value")
        if self.takes_list and isinstance(value, (list, tuple, dict)):
            return self.parse(self, value)
        value = self._convert(value)
        if self.choices and value not in self.choices:
            raise OptionError(self, f"must be one of {', '.join(self.choices)}, got '{_short(value)}'")
        if self.kind in (int, float):
            if (self.low is not None and (value < self.low or (self.low_open and value == self.low))) or (
                    self.high is not None and (value > self.high or (self.high_open and value == self.high))):
                raise OptionError(self, f"must be {self._bounds()}, got {_num(value)}")
        if self.max_chars is not None and isinstance(value, str) and len(value) > self.max_chars:
            raise OptionError(self, f"must be at most {self.max_chars} characters, got {len(value)}")
        return self.parse(self, value) if self.parse else value

    def _bounds(self) -> str:
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            if not (self.low_open or self.high_open):
                return f"between {_num(lo)} and {_num(hi)}"
            if self.low_open and self.high_open:
                return f"between {_num(lo)} and {_num(hi)}, exclusive"
            return f"{'>' if self.low_open else '>='} {_num(lo)} and {'<' if self.high_open else '<='} {_num(hi)}"
        return self.range_text()

    def _convert(self, value: Any) -> Any:
        kind = self.kind
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "1", "false", "0"):
                return value.strip().lower() in ("true", "1")
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise OptionError(self, f"must be true or false, got '{_short(value)}'")
        if kind in (int, float):
            if isinstance(value, bool):
                raise OptionError(self, f"must be a number, got {value}")
            try:
                number = float(value) if kind is float else _whole(value)
            except (TypeError, ValueError):
                raise OptionError(self, f"must be {'a whole number' if kind is int else 'a number'}, got '{_short(value)}'") from None
            if kind is float and not math.isfinite(number):
                raise OptionError(self, f"must be a finite number, got {value}")
            return number
        if kind is Path:
            return Path(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # ?initial_prompt=1961 arrives as a number
        if not isinstance(value, str):
            raise OptionError(self, f"must be text, got {type(value).__name__}")
        return value


def _language_code(option: Option, value: str) -> str | None:
    """A language name ("English", "german") as its code; None for "auto" (detect)."""
    from specwhisper.asr.decoding.language import normalize_language  # transformers' tables: loaded on use

    try:
        return normalize_language(value)
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None


def _clips(option: Option, value: Any) -> str:
    """``clip_timestamps`` checked (``specwhisper.audio.clips.parse_clips``), written as it reads."""
    from specwhisper.audio.clips import clips_text, parse_clips

    if isinstance(value, str) and value.strip().lower() in ("none", "null"):
        return None
    try:
        return clips_text(parse_clips(value))
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None


def _known_speakers(option: Option, value: Any) -> str | None:
    """``known_speakers`` checked and written as JSON, ``[["name", "path or data URL"], ...]``. Taken as a
    mapping or a list of pairs (Python, JSON bodies, the OpenAI route's fields) or as text, ``NAME=FILE,NAME=FILE``
    (the command line) or that JSON."""
    import json

    from specwhisper.diarize.known import check_name

    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise OptionError(option, "is not valid JSON (give NAME=FILE,NAME=FILE or [[name, file], ...])") from None
    if isinstance(value, str):
        pairs = [part.partition("=")[::2] for part in value.split(",") if part.strip()]
        if any(not source.strip() for _, source in pairs):
            raise OptionError(option, f"give NAME=FILE,NAME=FILE (got '{_short(value)}')")
    elif isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise OptionError(option, f"give NAME=FILE,NAME=FILE, a mapping of names to clips or (name, clip) pairs "
                                  f"(got {type(value).__name__})")
    if not pairs:
        return None
    out = []
    for name, source in pairs:
        try:
            name = check_name(name)
        except ValueError as exc:
            raise OptionError(option, str(exc)) from None
        if not isinstance(source, str) or not source.strip():
            raise OptionError(option, f"'{name}': give a clip's file or data URL")
        if name in (n for n, _ in out):
            raise OptionError(option, f"'{name}' is named twice")
        out.append((name, source.strip()))
    if len(out) > MAX_KNOWN_SPEAKERS:
        raise OptionError(option, f"at most {MAX_KNOWN_SPEAKERS} known speakers, got {len(out)}")
    return json.dumps(out, ensure_ascii=False)


def _suppress_tokens(option: Option, value: str) -> str:
    """The ids as the engine reads them (``asr.decoding.suppress``), checked here for a one-line error."""
    from specwhisper.asr.decoding.suppress import parse_suppress_tokens

    try:
        with_model, ids = parse_suppress_tokens(value)
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None
    return ",".join(["-1"] * with_model + [str(i) for i in ids])


def _align_text(option: Option, value: str) -> str:
    """The text to align, with at least one word."""
    if not value.strip():
        raise OptionError(option, "the text to align is empty")
    return value


def read_align_text(path: Path) -> str:
    """A text file to align, read and checked as the option's value; a ValueError of one line naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as UTF-8 text ({type(exc).__name__})") from None
    try:
        return BY_NAME["align_text"].check(text)
    except OptionError as exc:
        raise ValueError(f"{path}: {exc.problem}") from None


def known_speaker_pairs(text: str | None) -> tuple[tuple[str, str], ...]:
    """``known_speakers``' checked value as (name, path or data URL) pairs."""
    import json

    return tuple((name, source) for name, source in json.loads(text)) if text else ()


def _whole(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(str(value).strip())


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _short(value: Any, limit: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


NOT_HTTP_LOAD = {"http": LOADED_ONCE, "ui": LOADED_ONCE}
SUPPRESS_WHERE = "built into the decoder when the model loads: the command line and the Python API take it"
NOT_HTTP_SUPPRESS = {"http": SUPPRESS_WHERE, "ui": SUPPRESS_WHERE}
# decoding rules (and a GPU's captured calls) are made per set of tokens and kept: not a request's to grow
TOKENS_WHERE = "a set per request would make and keep decoding rules per set: the command line and the Python API take it"
NOT_HTTP_SUPPRESS_TOKENS = {"http": TOKENS_WHERE, "ui": TOKENS_WHERE}

OPTIONS: tuple[Option, ...] = (
    # ---------------------------------------------------------------- models (what loads)
    Option("model", str, "base", "Whisper model: the embedded 'base' or 'tiny.en', an openai or distil-whisper name "
           "(large-v3, large-v3-turbo, medium.en, distil-large-v3, ...: its Hugging Face id), a Hugging Face id or a local folder; MODEL:int8 runs its decoder products in int8 on the "
           "CPU. Servers offer the models their deployment lists", scope="load", group="models", flags=("-m", "--model")),
    Option("draft", str, "auto", "speculative drafter: auto (measured per batch size: a drafter runs only where it "
           "beats plain decoding), none (the target alone), ngram (prompt lookup), early-exit[:k] (the target's first k "
           "decoder layers with a trained exit adapter; early-exit:k:raw without it), or a Whisper model drafting "
           "(tiny.en, distil-large-v3 or another distil-whisper name, a Hugging Face id, a folder; MODEL:int8). auto also weighs the target's "
           "distil-whisper drafter where this machine has it or the hub answers. Every choice gives the same tokens",
           scope="load", group="models"),
    Option("device", str, "auto", "torch device: auto (cuda when a GPU is usable), cpu, cuda or cuda:N", scope="load",
           group="models", not_in=NOT_HTTP_LOAD),
    Option("dtype", str, "auto", "weights and activations: auto (float16 on a GPU, float32 on the CPU), float32, "
           "float16 (GPU only) or bfloat16", scope="load", group="models",
           choices=("auto", "float32", "float16", "bfloat16"), not_in=NOT_HTTP_LOAD),
    Option("threads", int, None, "CPU threads for torch (default: one per core)", scope="load", group="models",
           nullable=True, low=1, not_in=NOT_HTTP_LOAD),
    Option("cache_dir", Path, None, "where converted models are kept (default: ~/.cache/specwhisper)", scope="load",
           group="models", nullable=True, peer_flags=("--model_dir",), not_in=NOT_HTTP_LOAD),
    Option("diarization_model", str, None, "pyannote pipeline id or folder (default: the embedded offline pipeline)",
           scope="load", group="speakers", nullable=True, peer_flags=("--diarize_model",), not_in=NOT_HTTP_LOAD),
    Option("hf_token", str, None, "Hugging Face token for gated hub models (default: $HF_TOKEN; the embedded models "
           "need none)", scope="load", group="models", nullable=True, not_in=NOT_HTTP_LOAD),
    Option("postedit_model", str, None, "causal LM id or folder for --postedit (default: the embedded "
           "SmolLM2-135M-Instruct)", scope="load", group="post-edit", nullable=True, not_in=NOT_HTTP_LOAD),
    Option("postedit_drafter", str, "copy", "post-edit drafter: copy, none, layers:N, or a causal LM", scope="load",
           group="post-edit", not_in=NOT_HTTP_LOAD),
    Option("postedit_max_change", float, 0.3, "reject an edit that changes more than this share of words", scope="load",
           group="post-edit", low=0.0, high=1.0, not_in=NOT_HTTP_LOAD),
    Option("suppress_tokens", str, "-1", "token ids the decoder never writes, separated by commas; -1: the model's "
           "own set of symbols (openai-whisper's and faster-whisper's suppress_tokens)",
           group="transcription", max_chars=20000, parse=_suppress_tokens, not_in=NOT_HTTP_SUPPRESS_TOKENS, live=True),
    Option("suppress_numerals", bool, False, "never write a token holding a digit or a percent, dollar or pound "
           "sign: numbers and amounts come out spelled, as speech corpora want them (WhisperX's; chosen when the "
           "model loads)", scope="load",
           group="transcription", not_in=NOT_HTTP_SUPPRESS),
    # ---------------------------------------------------------------- transcription
    Option("language", str, None, "language code or name: en, English (default: detect)", nullable=True,
           flags=("-l", "--language"), parse=_language_code, live=True),
    Option("task", str, "transcribe", "transcribe, or translate to English", choices=("transcribe", "translate"), live=True),
    Option("batch_size", int, None, "chunks decoded together (default: 8 on the CPU; on a GPU as many as its free "
           "memory holds, up to 32; a larger value shrinks to what the memory holds, with a warning)", nullable=True,
           low=1, high=64),
    Option("vad_threshold", float, 0.5, "silero-vad speech threshold: where chunks are cut; audio below it is still "
           "decoded and dropped only when Whisper finds no speech in it (with --vad-filter: dropped unheard)", low=0.0, high=1.0, low_open=True,
           high_open=True, peer_flags=("--vad_onset",), live=True),
    Option("vad_min_silence_ms", int, None, "silero-vad: the silence in ms that ends a speech span (default: 300; 160 "
           "with --vad-filter, as faster-whisper's batched pipeline; faster-whisper's vad_parameters "
           "min_silence_duration_ms, OpenAI's chunking_strategy silence_duration_ms)", nullable=True, low=0,
           high=10_000),  # asr.options.MAX_VAD_MS
    Option("vad_speech_pad_ms", int, None, "silero-vad: the audio in ms kept on each side of a speech span (default: "
           "200; 400 with --vad-filter; faster-whisper's speech_pad_ms, OpenAI's prefix_padding_ms)", nullable=True,
           low=0, high=10_000),
    Option("vad_max_speech_s", float, None, "silero-vad: the longest speech span in seconds, cut at its longest inner "
           "pause (default: --chunk-length; faster-whisper's vad_parameters max_speech_duration_s)", nullable=True,
           low=1.0, high=30.0),
    Option("chunk_length", float, 30.0, "longest chunk in seconds (chunks are cut in the VAD's pauses)", low=1.0,
           high=30.0, peer_flags=("--chunk_size",), peer_names=("chunk_length_s",)),
    Option("word_timestamps", bool, None, "per-word times and probabilities in the json, as a 'words' list in each "
           "segment, and each segment from its first word's start to its last word's end, as openai-whisper "
           "dates it (without: Whisper's times narrowed to the VAD's speech; default: on with --diarize)", nullable=True, live=True),
    Option("segment_resolution", str, "chunk", "segments as Whisper writes them (chunk) or one per sentence "
           "(sentence: each segment cut at its sentence ends, WhisperX's default; turns word timestamps on)",
           choices=("chunk", "sentence"), live=True),
    Option("initial_prompt", str, None, "text to put before every chunk (before the first with "
           "--condition-on-previous-text): spellings, names, style", nullable=True, max_chars=2000, live=True),
    Option("hotwords", str, None, "words or phrases to favour, put in every chunk's prompt (with "
           "--condition-on-previous-text, before the text that precedes the chunk, as openai-whisper's "
           "carry_initial_prompt)", nullable=True,
           max_chars=2000, live=True),
    Option("prefix", str, None, "text the transcript starts with: each file's first window is decoded on from it, "
           "and keeps it (faster-whisper's prefix)", nullable=True, max_chars=1000),
    Option("condition_on_previous_text", bool, False, "decode each chunk after the text of the one before, one chunk "
           "at a time (off: chunks decode in batches, as faster-whisper's and WhisperX's batched pipelines)",
           generate_names=("condition_on_prev_tokens",), live=True),
    Option("multilingual", bool, False, "detect the language of every chunk (a window of up to 30 s, cut in a pause), "
           "not once per file, for audio that changes language; a window whose turns speak two languages is cut "
           "between them; each segment's language is in the json"),
    Option("language_threshold", float, 0.5, "a file's language detected below this probability is heard on its "
           "next window with speech too (up to --language-detection-segments); with --multilingual, a chunk whose "
           "detected language has a lower probability keeps the language before it (the file's, at first)", low=0.0, high=1.0,
           peer_flags=("--language_detection_threshold",), live=True),
    Option("language_detection_segments", int, 4, "without --language: the most windows with speech a file's "
           "language is detected on, while it is below --language-threshold, their probabilities weighed by their "
           "seconds of speech (1: the first window with speech alone; faster-whisper's language_detection_segments)",
           low=1),
    Option("vad_filter", bool, False, "drop the audio silero-vad rejects, unheard, and decode the speech alone, joined "
           "into windows of up to --chunk-length (faster-whisper's vad_filter, WhisperX): faster, but a word the VAD "
           "misses is lost (off: every sample is decoded and skipped stretches are decoded again)"),
    Option("without_timestamps", bool, False, "decode without timestamp tokens: one segment per chunk (faster-whisper's "
           "batched pipeline's default); fewer tokens to decode, coarser subtitles, no re-decoding of skipped stretches"),
    Option("clip_timestamps", str, None, "transcribe only these stretches of each file: start,end,start,end,... "
           "seconds (a last start alone runs to the end); the rest is not heard, and times stay the file's "
           "(openai-whisper's and faster-whisper's clip_timestamps)", nullable=True, max_chars=2000, parse=_clips,
           takes_list=True),  # [0, 30, 60, 90] from Python, as faster-whisper takes it
    Option("align_text", str, None, "the words spoken, when you have them: the transcript is this text, word for "
           "word, and Whisper gives each word its time (forced alignment, as stable-ts's align; segments are its "
           "sentences and lines). The command line takes a text file, - for standard input, or, with a folder of audio, "
           "the folder of their texts (talk.wav: talk.lab or talk.txt)", nullable=True,
           max_chars=MAX_ALIGN_CHARS, parse=_align_text, peer_flags=("--align",)),
    # ---------------------------------------------------------------- decoding quality (openai-whisper's safeguards)
    Option("beam_size", int, None, "beam search with this many beams (default: greedy, speculative when a drafter "
           "runs; openai-whisper's CLI and faster-whisper use 5)", group="quality", nullable=True, low=1, high=16,
           generate_names=("num_beams",)),
    Option("patience", float, 1.0, "beam search patience", group="quality", low=0.0, high=10.0, low_open=True),
    Option("length_penalty", float, None, "the ranking of beams and best-of samples: their log-probability over "
           "((5 + length) / 6) ** this (Google NMT's; 0: the plain log-probability, higher favours longer texts); "
           "default: over their length (openai-whisper's length_penalty)", group="quality", nullable=True,
           low=0.0, high=10.0),
    Option("repetition_penalty", float, 1.0, "the score of every token already written in a window is divided by this "
           "(multiplied, when it is negative): above 1, Whisper is less inclined to repeat itself, below 1 more "
           "(faster-whisper's repetition_penalty, as CTranslate2 applies it; 1: off)", group="quality", low=0.0,
           high=10.0, low_open=True, generate_names=("repetition_penalty",)),
    Option("no_repeat_ngram_size", int, 0, "a window never writes the same n tokens twice (faster-whisper's "
           "no_repeat_ngram_size; 0: off)", group="quality", low=0, high=WINDOW_TOKENS,
           generate_names=("no_repeat_ngram_size",)),
    Option("max_new_tokens", int, None, "the most tokens a window's decode writes, timestamps included (faster-"
           "whisper's max_new_tokens, openai-whisper's sample_len; default: up to Whisper's 448 less the prompt); "
           "a window's text after its last timestamp pair is decoded again, as a stretch it skipped",
           group="quality", nullable=True, low=1, high=WINDOW_TOKENS, generate_names=("max_new_tokens",)),
    Option("best_of", int, 5, "samples per fallback temperature", group="quality", low=1, high=10),
    Option("temperature", float, 0.0, "first decoding temperature", group="quality", low=0.0, high=1.0),
    Option("temperature_increment_on_fallback", float, 0.2, "temperature step when a decode fails the checks below; "
           "0 or None: no fallback", group="quality", nullable=True, low=0.0, high=1.0),
    Option("compression_ratio_threshold", float, 2.4, "decode again when the text's gzip ratio is above this "
           "or it ends in a loop (one phrase repeated over 64+ characters); None: no check", group="quality",
           nullable=True, low=0.0, low_open=True),
    Option("logprob_threshold", float, -1.0, "decode again when the average log-probability is below this; None: no "
           "check", group="quality", nullable=True, high=0.0, live=True),
    Option("no_speech_threshold", float, 0.6, "a chunk is silence when Whisper's no-speech probability is above this "
           "and the log-probability is below --logprob-threshold (lower bars for a text of Whisper's stock sign-offs "
           "alone, such as 'Thank you.'); None: no check", group="quality", nullable=True,
           low=0.0, high=1.0, live=True),
    Option("hallucination_silence_threshold", float, None, "drop text Whisper probably invented over silence or "
           "music: a segment whose words look unlikely (improbable, too short or too long) with more than this many "
           "seconds of silence around it is dropped and the audio after it decoded again (openai-whisper's rule; "
           "turns word timestamps on; 2 is a common value)", group="quality", nullable=True, low=0.0, low_open=True),
    # ---------------------------------------------------------------- subtitle layout (srt, vtt)
    Option("max_line_width", int, None, "subtitles: break a line before a word that would make it longer than this "
           "many characters (42 is the usual broadcast width; turns word timestamps on)", group="subtitles",
           nullable=True, low=1, live=True),
    Option("max_line_count", int, None, "subtitles: at most this many lines per cue (needs --max-line-width; a pause "
           "of more than 3 s also starts a new cue)", group="subtitles", nullable=True, low=1, live=True),
    Option("max_words_per_line", int, None, "subtitles: cut each segment into cues of at most this many words",
           group="subtitles", nullable=True, low=1, live=True),
    Option("highlight_words", bool, False, "subtitles: one cue per word as it is spoken, the word underlined",
           group="subtitles", live=True),
    # ---------------------------------------------------------------- speakers and post-edit
    Option("diarize", bool, False, "attribute speech to speakers", group="speakers"),
    Option("num_speakers", int, None, "the number of speakers, when known", group="speakers", nullable=True, low=1,
           high=32),
    Option("min_speakers", int, None, "at least this many speakers", group="speakers", nullable=True, low=1, high=32),
    Option("max_speakers", int, None, "at most this many speakers", group="speakers", nullable=True, low=1, high=32),
    Option("known_speakers", str, None, "name speakers after clips of their voices: NAME=FILE,NAME=FILE (2 to 30 s of "
           "one voice each; turns diarization on); a speaker whose voice matches no clip keeps its SPEAKER_NN label",
           group="speakers", nullable=True, parse=_known_speakers, takes_list=True),
    Option("speaker_embeddings", bool, False, "each speaker's voice embedding in the json, as 'speaker_embeddings' "
           "(WhisperX's; unit vectors of the diarizer's embedding model, comparable by cosine across files; turns "
           "diarization on)", group="speakers"),
    Option("multichannel", bool, False, "transcribe each channel on its own, its words attributed to it (speakers "
           "CHANNEL_1, CHANNEL_2, ...; up to 8 channels): a call or an interview recorded one speaker per channel. Talk "
           "that overlaps is kept, which a downmix loses; each channel's bleed of the others (crosstalk, a line's "
           "echo) is muted first (Deepgram's and AssemblyAI's multichannel)", group="speakers"),
    Option("postedit", bool, False, "fix casing and punctuation with a text LLM (speculatively decoded)",
           group="post-edit"),
    # ---------------------------------------------------------------- limits and outputs
    Option("max_duration", float, DEFAULT_MAX_SECONDS, "refuse audio longer than this many seconds", group="limits",
           low=0.0, low_open=True, not_in={"http": DEPLOYMENT, "ui": DEPLOYMENT}, live=True),
    Option("formats", str, "all", "comma-separated output formats: txt, srt, vtt, json, tsv, rttm, aud (Audacity "
           "labels), textgrid (Praat's TextGrid: segments and words), or all (every one but aud and textgrid; rttm "
           "only with diarization)", scope="output", group="outputs", flags=("-f", "--formats"),
           peer_flags=("--output_format",),
           not_in={"api": "a Transcription renders any format: .to('srt'), .write(folder, 'srt,json')",
                   "ui": "the page offers every format as a download"}),
    Option("return_timestamps", str, "false", "transformers' ASR pipeline field: add its 'chunks' (true: segments, "
           "word: words) to the answer", scope="output", group="outputs", choices=("false", "true", "word"),
           not_in={"cli": "the transformers pipeline's answer shape; the CLI writes segments and words to json",
                   "api": "the transformers pipeline's answer shape; a Transcription has segments and words",
                   "ui": "the transformers pipeline's answer shape; the page shows segments"}),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


def options_for(entry: str, scope: str | None = None) -> list[Option]:
    """The options ``entry`` takes (of ``scope``, when given), in table order."""
    return [o for o in OPTIONS if entry in o.entry_points and (scope is None or o.scope == scope)]


def defaults(entry: str | None = None) -> dict[str, Any]:
    return {o.name: o.default for o in OPTIONS if entry is None or entry in o.entry_points}


def check_values(values: dict[str, Any], entry: str) -> dict[str, Any]:
    """Every option ``entry`` takes: its checked value in ``values``, else its default. A name that is
    no option, or one this entry point does not take, is an OptionError-like ValueError."""
    out = defaults(entry)
    for name, value in values.items():
        option = BY_NAME.get(name)
        if option is None:
            raise ValueError(f"unknown option '{_short(name)}'")
        if entry not in option.entry_points:
            raise ValueError(f"{name} is not taken here: {option.not_in[entry]}")
        out[name] = option.check(value)
    return out


LIVE_TAKES = "live decoding is greedy re-decodes of a buffer; docs/live.md lists the options it takes"


def live_refusal(values: dict[str, Any]) -> Option | None:
    """The first run option in ``values`` set to something but its default that the live engine does not
    apply (``Option.live``): the live entry points refuse it with one line rather than ignore it."""
    return next((BY_NAME[name] for name, value in values.items()
                 if name in BY_NAME and BY_NAME[name].scope == "run" and not BY_NAME[name].live
                 and value != BY_NAME[name].default), None)


def run_options(values: dict[str, Any]):
    """The pipeline's ``RunOptions`` of checked run-scope values (``check_values``). ``word_timestamps``
    None means on with diarization; the fallback schedule is openai-whisper's from ``temperature`` and
    its increment. Cross-option rules (min above max speakers, a bad language for the model) are the
    pipeline's: ``RunOptions.validate``."""
    from specwhisper.asr.decoding.quality import QualityRules, temperature_schedule
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.clips import parse_clips
    from specwhisper.pipeline.config import RunOptions

    v = {**defaults(), **values}
    quality = QualityRules(temperatures=temperature_schedule(v["temperature"], v["temperature_increment_on_fallback"]),
                           compression_ratio_threshold=v["compression_ratio_threshold"],
                           logprob_threshold=v["logprob_threshold"], no_speech_threshold=v["no_speech_threshold"],
                           best_of=v["best_of"], length_penalty=v["length_penalty"])
    known = known_speaker_pairs(v["known_speakers"])
    diarize = v["diarize"] or bool(known) or v["speaker_embeddings"]
    word_ts = diarize if v["word_timestamps"] is None else v["word_timestamps"]
    subtitles = subtitle_options(v)
    decode = DecodeOptions(language=v["language"], task=v["task"], batch_size=v["batch_size"],
                           vad_threshold=v["vad_threshold"], vad_min_silence_ms=v["vad_min_silence_ms"],
                           vad_speech_pad_ms=v["vad_speech_pad_ms"], vad_max_speech_s=v["vad_max_speech_s"],
                           max_chunk_s=v["chunk_length"], word_timestamps=word_ts,
                           beam_size=v["beam_size"], patience=v["patience"], quality=quality,
                           repetition_penalty=v["repetition_penalty"], no_repeat_ngram_size=v["no_repeat_ngram_size"],
                           max_new_tokens=v["max_new_tokens"], suppress_tokens=v["suppress_tokens"], initial_prompt=v["initial_prompt"], hotwords=v["hotwords"],
                           prefix=v["prefix"],
                           condition_on_previous_text=v["condition_on_previous_text"],
                           hallucination_silence_threshold=v["hallucination_silence_threshold"],
                           multilingual=v["multilingual"], language_threshold=v["language_threshold"],
                           language_detection_segments=v["language_detection_segments"],
                           vad_filter=v["vad_filter"], without_timestamps=v["without_timestamps"],
                           clips=None if v["clip_timestamps"] is None else parse_clips(v["clip_timestamps"]))
    opts = RunOptions(decode=decode, diarize=diarize, known_speakers=known, speaker_embeddings=v["speaker_embeddings"],
                      num_speakers=v["num_speakers"],
                      min_speakers=v["min_speakers"], max_speakers=v["max_speakers"], postedit=v["postedit"],
                      max_audio_s=v["max_duration"], subtitles=subtitles, align_text=v["align_text"],
                      segment_resolution=v["segment_resolution"], multichannel=v["multichannel"])
    opts.validate()
    return opts


def subtitle_options(values: dict[str, Any]):
    """The writers' ``SubtitleOptions`` (srt and vtt layout) of checked values."""
    from specwhisper.pipeline.subtitles import SubtitleOptions

    v = {**defaults(), **values}
    return SubtitleOptions(max_line_width=v["max_line_width"], max_line_count=v["max_line_count"],
                           max_words_per_line=v["max_words_per_line"], highlight_words=v["highlight_words"])


def pipeline_config(values: dict[str, Any], base=None):
    """The pipeline's ``PipelineConfig`` of checked load-scope values, over ``base`` (a deployment's)."""
    from dataclasses import replace

    from specwhisper.pipeline.config import PipelineConfig

    names = {o.name for o in OPTIONS if o.scope == "load"}
    return replace(base or PipelineConfig(), **{k: v for k, v in values.items() if k in names})


# Peer options with no meaning here, and why: the CLI refuses them by name (one line each).
REFUSED: dict[str, str] = {
    "--carry_initial_prompt": "--initial-prompt already precedes every chunk; with --condition-on-previous-text, give the "
                              "text as --hotwords, which precedes every chunk's text",
    "--prepend_punctuations": "word timestamps use openai-whisper's default punctuation merging",
    "--append_punctuations": "word timestamps use openai-whisper's default punctuation merging",
    "--align_model": "word times come from Whisper's own cross-attention, not a wav2vec2 model",
    "--interpolate_method": "every word gets a time from Whisper's cross-attention",
    "--return_char_alignments": "there is no character alignment",
    "--vad_offset": "silero-vad takes one threshold (--vad-threshold)",
}
