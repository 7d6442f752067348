"""Every transcription option, declared once.

Each :class:`~specwhisper.pipeline.option.Option` says its name, type, default, valid range, help text, the
peers' spellings of it and which entry points take it. From this one table are built: the ``transcribe`` argument parser
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

from pathlib import Path
from typing import Any

from specwhisper.pipeline.option import Option, OptionError, short_text
from specwhisper.results.words import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS
from specwhisper.messages import printable

MAX_KNOWN_SPEAKERS = 8
MAX_ALIGN_CHARS = 1_000_000  # about 20 hours of speech
# an initial prompt is taken whole and its last 223 tokens kept (SpecialTokens.MAX_CONTEXT), as openai-whisper and
# faster-whisper keep them: apps pass the transcript so far (OpenAI advises the previous chunk's; 25 MB of
# compressed audio, its upload limit, is about half an hour of speech, 25 000 characters)
MAX_PROMPT_CHARS = 50_000
WINDOW_TOKENS = 448  # specwhisper.asr.options.WINDOW_TOKENS (test_options checks they agree)
DEFAULT_MAX_SECONDS = 12 * 3600.0  # specwhisper.audio.loading.DEFAULT_MAX_SECONDS (test_options checks they agree)

DEPLOYMENT = "a deployment setting (the server's SPECWHISPER_* variables, app.py's flags), not a request's"
LOADED_ONCE = "chosen when the models load: the server's SPECWHISPER_* variables, app.py's flags"


def _folder(option: Option, value: Path) -> Path:
    """A folder the models are kept in: made when missing, so only a file in its place is refused."""
    if value.exists() and not value.is_dir():
        raise OptionError(option, f"must be a folder, and {printable(str(value))} is a file")
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
            raise OptionError(option, f"give NAME=FILE,NAME=FILE (got '{short_text(value)}')")
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


NOT_HTTP_LOAD = {"http": LOADED_ONCE, "ui": LOADED_ONCE}
# the models of the stages after the ASR a deployment chooses (SPECWHISPER_<NAME> on a server, app.py's flags)
STAGE_SETTINGS = ("diarization_model", "postedit_model", "postedit_drafter", "postedit_max_change")
SUPPRESS_WHERE = "built into the decoder when the model loads: the command line and the Python API take it"
NOT_HTTP_SUPPRESS = {"http": SUPPRESS_WHERE, "ui": SUPPRESS_WHERE}
# decoding rules (and a GPU's captured calls) are made per set of tokens and kept: not a request's to grow
TOKENS_WHERE = "a set per request would make and keep decoding rules per set: the command line and the Python API take it"
NOT_HTTP_SUPPRESS_TOKENS = {"http": TOKENS_WHERE, "ui": TOKENS_WHERE}

# where transformers' ASR pipeline's own request fields are not taken
TRANSFORMERS_ONLY = {"cli": "a field of transformers' ASR pipeline's requests", "api": "a field of transformers' ASR "
                     "pipeline's requests", "ui": "a field of transformers' ASR pipeline's requests"}

OPTIONS: tuple[Option, ...] = (
    # ---------------------------------------------------------------- models (what loads)
    Option("model", str, "base", "Whisper model: the embedded 'base' or 'tiny.en', an openai or distil-whisper name "
           "(large-v3, large-v3-turbo, medium.en, distil-large-v3, ...: its Hugging Face id), a Hugging Face id or a local folder (faster-whisper's CTranslate2 ones too); MODEL:int8 runs its decoder products in int8 on the "
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
    Option("threads", int, None, "CPU threads for torch (default, or 0 as openai-whisper's and WhisperX's: one per core)",
           scope="load", group="models", nullable=True, low=0, not_in=NOT_HTTP_LOAD, parse=lambda option, n: n or None),
    Option("cache_dir", Path, None, "where converted models are kept (default: ~/.cache/specwhisper)", scope="load",
           group="models", nullable=True, peer_flags=("--model_dir",), not_in=NOT_HTTP_LOAD, parse=_folder),
    Option("diarization_model", str, None, "pyannote pipeline id or folder (default: the embedded offline pipeline)",
           scope="load", group="speakers", nullable=True, peer_flags=("--diarize_model",), not_in=NOT_HTTP_LOAD),
    Option("hf_token", str, None, "Hugging Face token for gated hub models (default: $HF_TOKEN; the embedded models "
           "need none)", scope="load", group="models", nullable=True,
           not_in={"http": "the server's $HF_TOKEN, which the hub reads", "ui": LOADED_ONCE}),
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
    Option("prepend_punctuations", str, PREPEND_PUNCTUATIONS, "word timestamps: these marks join the word after them "
           "(openai-whisper's and faster-whisper's prepend_punctuations; empty: each mark is a word of its own)",
           max_chars=100),
    Option("append_punctuations", str, APPEND_PUNCTUATIONS, "word timestamps: these marks join the word before them "
           "(openai-whisper's and faster-whisper's append_punctuations; empty: each mark is a word of its own)",
           max_chars=100),
    Option("segment_resolution", str, "chunk", "segments as Whisper writes them (chunk) or one per sentence "
           "(sentence: each segment cut at its sentence ends, WhisperX's default; turns word timestamps on)",
           choices=("chunk", "sentence"), live=True),
    Option("initial_prompt", str, None, "text to put before every chunk (before the first with "
           "--condition-on-previous-text): spellings, names, style; its last 223 tokens are kept", nullable=True,
           max_chars=MAX_PROMPT_CHARS, live=True),
    Option("hotwords", str, None, "words or phrases to favour, put in every chunk's prompt (with "
           "--condition-on-previous-text, before the text that precedes the chunk, as openai-whisper's "
           "carry_initial_prompt)", nullable=True,
           max_chars=2000, live=True),
    Option("carry_initial_prompt", bool, False, "with --condition-on-previous-text: --initial-prompt opens every "
           "chunk's prompt, however long the text before the chunk grows, as --hotwords do (openai-whisper's "
           "carry_initial_prompt; without conditioning it precedes every chunk already)"),
    Option("prefix", str, None, "text the transcript starts with: each file's first window is decoded on from it, "
           "and keeps it (faster-whisper's prefix)", nullable=True, max_chars=1000),
    Option("condition_on_previous_text", bool, False, "decode each chunk after the text of the one before, one chunk "
           "at a time (off: chunks decode in batches, as faster-whisper's and WhisperX's batched pipelines)",
           generate_names=("condition_on_prev_tokens",), live=True),
    Option("prompt_reset_on_temperature", float, 0.5, "with --condition-on-previous-text: the text before a chunk is "
           "dropped after a decode kept at a temperature above this (openai-whisper's 0.5; faster-whisper's "
           "prompt_reset_on_temperature)", low=0.0, high=1.0),
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
           "sentences and lines; of a subtitle file, SRT or WebVTT, its cues, re-timed). The command line takes a text "
           "file, - for standard input, or, with a folder of audio, the folder of their texts (talk.wav: talk.lab, talk.txt, talk.srt or talk.vtt)", nullable=True,
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
    Option("length_exponent", float, 1.0, "without --length-penalty, the ranking of beams and best-of samples: their "
           "log-probability over length ** this (faster-whisper's and WhisperX's length_penalty, as CTranslate2 ranks; "
           "1: over the length; 0: the plain log-probability)", group="quality", low=0.0, high=10.0),
    Option("repetition_penalty", float, 1.0, "the score of every token already written in a window is divided by this "
           "(multiplied, when it is negative): above 1, Whisper is less inclined to repeat itself, below 1 more "
           "(faster-whisper's repetition_penalty, as CTranslate2 applies it; 1: off)", group="quality", low=0.0,
           high=10.0, low_open=True, generate_names=("repetition_penalty",)),
    Option("no_repeat_ngram_size", int, 0, "a window never writes the same n tokens twice (faster-whisper's "
           "no_repeat_ngram_size; 0: off)", group="quality", low=0, high=WINDOW_TOKENS,
           generate_names=("no_repeat_ngram_size",)),
    Option("suppress_blank", bool, True, "a window's first token is never a blank or end-of-text (openai-whisper's "
           "and faster-whisper's suppress_blank)", group="quality"),
    Option("max_initial_timestamp", float, 1.0, "a window's first timestamp is at most this many seconds (openai-"
           "whisper's and faster-whisper's max_initial_timestamp; None: any)", group="quality", nullable=True,
           low=0.0, high=30.0),
    Option("max_new_tokens", int, None, "the most tokens a window's decode writes, timestamps included (faster-"
           "whisper's max_new_tokens, openai-whisper's sample_len; default: up to Whisper's 448 less the prompt); "
           "a window's text after its last timestamp pair is decoded again, as a stretch it skipped",
           group="quality", nullable=True, low=1, high=WINDOW_TOKENS, generate_names=("max_new_tokens",)),
    Option("best_of", int, 5, "samples per fallback temperature (None: one, as openai-whisper's DecodingOptions)",
           group="quality", nullable=True, low=1, high=10),
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
           "diarization on)", group="speakers", peer_flags=("--return_embeddings",)),
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
    Option("return_language", bool, False, "transformers' ASR pipeline field: each of its 'chunks' names its "
           "language ('english'); alone, 'chunks' of text and language", scope="output", group="outputs",
           not_in=TRANSFORMERS_ONLY),
    # transformers' pipeline's own settings, taken as it takes them for Whisper: checked, no effect
    Option("stride_length_s", str, None, "transformers' ASR pipeline field: the overlap of its chunks (seconds, or "
           "[left, right]); no effect: chunks here are cut at pauses and do not overlap", nullable=True,
           scope="output", group="outputs", not_in=TRANSFORMERS_ONLY),
    Option("ignore_warning", bool, False, "transformers' ASR pipeline field: silences its chunking warning; no effect "
           "(none here)", scope="output", group="outputs", not_in=TRANSFORMERS_ONLY),
    Option("decoder_kwargs", str, None, "transformers' ASR pipeline field: a CTC model's language-model decoder's "
           "settings; no effect for Whisper, as there", nullable=True, scope="output", group="outputs",
           not_in=TRANSFORMERS_ONLY),
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
            raise ValueError(f"unknown option '{short_text(name)}'")
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
                           best_of=v["best_of"] or 1, length_penalty=v["length_penalty"], length_exponent=v["length_exponent"])
    known = known_speaker_pairs(v["known_speakers"])
    diarize = v["diarize"] or bool(known) or v["speaker_embeddings"]
    word_ts = diarize if v["word_timestamps"] is None else v["word_timestamps"]
    subtitles = subtitle_options(v)
    if v["word_timestamps"] is False and (subtitles.active or v["segment_resolution"] == "sentence"):
        # as WhisperX's CLI refuses --no_align with them, rather than turn the words back on unasked
        raise ValueError("the subtitle layout (highlight words, line width and count, words per line) and sentence "
                         "segments are cut at words: they need the word timestamps that were turned off")
    initial, hotwords = v["initial_prompt"], v["hotwords"]
    if v["carry_initial_prompt"] and initial:  # before every chunk however long the text grows: the hotwords' place
        initial, hotwords = None, " ".join(t for t in (hotwords, initial) if t)
    decode = DecodeOptions(language=v["language"], task=v["task"], batch_size=v["batch_size"],
                           vad_threshold=v["vad_threshold"], vad_min_silence_ms=v["vad_min_silence_ms"],
                           vad_speech_pad_ms=v["vad_speech_pad_ms"], vad_max_speech_s=v["vad_max_speech_s"],
                           max_chunk_s=v["chunk_length"], word_timestamps=word_ts,
                           prepend_punctuations=v["prepend_punctuations"], append_punctuations=v["append_punctuations"],
                           beam_size=v["beam_size"], patience=v["patience"], quality=quality,
                           repetition_penalty=v["repetition_penalty"], no_repeat_ngram_size=v["no_repeat_ngram_size"],
                           max_new_tokens=v["max_new_tokens"], suppress_tokens=v["suppress_tokens"],
                           suppress_blank=v["suppress_blank"], max_initial_timestamp=v["max_initial_timestamp"],
                           initial_prompt=initial, hotwords=hotwords,
                           prefix=v["prefix"],
                           condition_on_previous_text=v["condition_on_previous_text"],
                           prompt_reset_on_temperature=v["prompt_reset_on_temperature"],
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
    "--align_model": "word times come from Whisper's own cross-attention, not a wav2vec2 model",
    "--interpolate_method": "every word gets a time from Whisper's cross-attention",
    "--return_char_alignments": "there is no character alignment",
    "--vad_offset": "silero-vad takes one threshold (--vad-threshold)",
}
