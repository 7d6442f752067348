"""The `transcribe` argument parser: our options, openai-whisper's and WhisperX's spellings of them
(accepted, hidden from --help, listed in the README), and a one-line refusal of their options we have
no meaning for, so that a command line written for either tool runs here or says why it cannot."""

from __future__ import annotations

import argparse
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from specwhisper.pipeline.writers import ALL_FORMATS

PROG = "transcribe"

DRAFT_HELP = ("speculative drafter (default: auto): auto (measured per batch size: a drafter runs only where it beats "
              "plain decoding), none (the target alone), ngram (prompt lookup), early-exit[:k] (the target's first k "
              "decoder layers with a trained exit adapter, k = 1..5, default 3; early-exit:k:raw without it), MODEL "
              "(a Whisper drafter: tiny.en, a Hugging Face id or a folder) or MODEL:int8 (that drafter with int8 weights)")


def _share(text: str) -> float:
    """argparse type: a share between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got '{text}'") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {value}")
    return value


def str2bool(text: str) -> bool:
    """openai-whisper's boolean values: ``--word_timestamps True``."""
    values = {"true": True, "false": False}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected True or False, got '{text}'")
    return values[text.lower()]


def optional_float(text: str) -> float | None:
    """openai-whisper's thresholds: a number, or None to switch the check off."""
    return None if text == "None" else float(text)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line ('transcribe: error: ...'), not usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# openai-whisper's and WhisperX's spellings with a meaning here: (option, dest, argparse keywords)
PEER_ALIASES: list[tuple[str, str, dict]] = [
    ("--output_dir", "output_dir", {"type": Path}),
    ("--output_format", "formats", {}),
    ("--model_dir", "cache_dir", {"type": Path}),
    ("--word_timestamps", "word_timestamps", {"type": str2bool}),
    ("--no_align", "word_timestamps", {"action": "store_const", "const": False}),
    ("--initial_prompt", "initial_prompt", {}),
    ("--condition_on_previous_text", "condition_on_previous_text", {"type": str2bool}),
    ("--beam_size", "beam_size", {"type": int}),
    ("--best_of", "best_of", {"type": int}),
    ("--temperature_increment_on_fallback", "temperature_increment_on_fallback", {"type": optional_float}),
    ("--compression_ratio_threshold", "compression_ratio_threshold", {"type": optional_float}),
    ("--logprob_threshold", "logprob_threshold", {"type": optional_float}),
    ("--no_speech_threshold", "no_speech_threshold", {"type": optional_float}),
    ("--verbose", "verbose", {"type": str2bool}),
    ("--fp16", "fp16", {"type": str2bool}),
    ("--batch_size", "batch_size", {"type": int}),
    ("--compute_type", "compute_type", {"choices": ["default", "float16", "float32", "int8"]}),
    ("--device_index", "device_index", {"type": int}),
    ("--vad_onset", "vad_threshold", {"type": float}),
    ("--min_speakers", "min_speakers", {"type": int}),
    ("--max_speakers", "max_speakers", {"type": int}),
    ("--diarize_model", "diarization_model", {}),
    ("--hf_token", "hf_token", {}),
]

# their options with no meaning here, and why
PEER_UNSUPPORTED: dict[str, str] = {
    "--length_penalty": "beam hypotheses are ranked by length-normalised log-probability, openai-whisper's default",
    "--suppress_tokens": "the model's generation config chooses the suppressed tokens",
    "--carry_initial_prompt": "--initial-prompt already precedes every chunk unless --condition-on-previous-text is on",
    "--prepend_punctuations": "word timestamps use openai-whisper's default punctuation merging",
    "--append_punctuations": "word timestamps use openai-whisper's default punctuation merging",
    "--highlight_words": "subtitles have one cue per segment",
    "--max_line_width": "subtitles have one cue per segment",
    "--max_line_count": "subtitles have one cue per segment",
    "--max_words_per_line": "subtitles have one cue per segment",
    "--clip_timestamps": "the whole file is transcribed; cut it first (ffmpeg -ss/-to)",
    "--hallucination_silence_threshold": "skipped stretches are decoded again instead (README 'Chunks: nothing is lost')",
    "--align_model": "word times come from Whisper's own cross-attention, not a wav2vec2 model",
    "--interpolate_method": "every word gets a time from Whisper's cross-attention",
    "--return_char_alignments": "there is no character alignment",
    "--vad_method": "the VAD is silero-vad; --vad-threshold sets it",
    "--vad_offset": "silero-vad takes one threshold (--vad-threshold)",
    "--chunk_size": "chunks are at most 30 s, cut in pauses",
    "--speaker_embeddings": "the json does not carry speaker embeddings",
    "--suppress_numerals": "numerals are not suppressed",
    "--segment_resolution": "segments are Whisper's own",
}


class _Unsupported(argparse.Action):
    """A peer's option we have no meaning for: one line saying so, before anything runs."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} (openai-whisper/WhisperX) is not supported: {PEER_UNSUPPORTED[option_string]}")


def _version() -> str:
    try:
        return version("specwhisper")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _add_peer_spellings(p: argparse.ArgumentParser) -> None:
    for option, dest, kwargs in PEER_ALIASES:
        p.add_argument(option, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)
    for option in PEER_UNSUPPORTED:
        p.add_argument(option, nargs="?", action=_Unsupported, help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    p.set_defaults(verbose=None, fp16=None, compute_type=None, device_index=None)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Speaker-attributed transcripts with exact speculative Whisper decoding. "
                "openai-whisper's and WhisperX's option spellings (--output_format, --word_timestamps True, ...) "
                "are accepted too: see the README's CLI section.")
    p.add_argument("inputs", nargs="+", help="audio or video files, or one folder (a resumable batch; see 'folder input')")
    p.add_argument("-V", "--version", action="version", version=f"%(prog)s {_version()}", help="print the version and exit")
    p.add_argument("-o", "--output-dir", type=Path, help="folder for output files (default: current folder)")
    p.add_argument("-f", "--formats", help=f"comma-separated formats: {', '.join(ALL_FORMATS)}, all (default: all; "
                   "rttm only with --diarize)")
    p.add_argument("-m", "--model", default="base", help="embedded 'base' or 'tiny.en', an openai name (large-v3, large-v3-turbo, "
                   "medium.en, ...: its Hugging Face id), a Hugging Face id, or a local "
                   "folder; MODEL:int8 runs its decoder products in int8 on the CPU (default: base)")
    p.add_argument("--draft", default="auto", help=DRAFT_HELP)
    p.add_argument("-l", "--language", help="language code or name: en, English (default: detect)")
    p.add_argument("--task", default="transcribe", choices=["transcribe", "translate"],
                   help="transcribe, or translate to English (default: transcribe)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="chunks decoded together (default: 8 on the CPU; on a GPU as many as its free memory holds, up to 32)")
    p.add_argument("--vad-threshold", type=float, default=0.5,
                   help="silero-vad speech threshold, 0-1: where chunks are cut; audio below it is still decoded and "
                   "dropped only when Whisper finds no speech in it (default: 0.5)")
    p.add_argument("--word-timestamps", action=argparse.BooleanOptionalAction, default=None,
                   help="per-word times and probabilities in the json, as a 'words' list in each segment "
                   "(default: on with --diarize)")
    q = p.add_argument_group("decoding quality", "openai-whisper's safeguards; greedy passes are speculative, "
                             "beam-search and fallback passes are plain (the json counts them)")
    q.add_argument("--beam-size", type=int, help="beam search with this many beams (default: greedy, as "
                   "openai-whisper's transcribe(); its CLI and faster-whisper use 5)")
    q.add_argument("--patience", type=float, default=1.0, help="beam search patience (default: 1.0)")
    q.add_argument("--best-of", type=int, default=5, help="samples per fallback temperature (default: 5)")
    q.add_argument("--temperature", type=float, default=0.0, help="first decoding temperature, 0-1 (default: 0)")
    q.add_argument("--temperature-increment-on-fallback", type=float, default=0.2,
                   help="temperature step when a decode fails the checks below; 0: no fallback (default: 0.2)")
    q.add_argument("--compression-ratio-threshold", type=float, default=2.4,
                   help="decode again when the text's gzip ratio is above this: repetition loops (default: 2.4)")
    q.add_argument("--logprob-threshold", type=float, default=-1.0,
                   help="decode again when the average log-probability is below this (default: -1.0)")
    q.add_argument("--no-speech-threshold", type=float, default=0.6,
                   help="a chunk is silence when Whisper's no-speech probability is above this and the log-probability "
                   "is below --logprob-threshold (default: 0.6)")
    q.add_argument("--condition-on-previous-text", action=argparse.BooleanOptionalAction, default=False,
                   help="decode each chunk after the text of the one before, one chunk at a time (default: off, as "
                   "faster-whisper's and WhisperX's batched pipelines; openai-whisper: on)")
    q.add_argument("--initial-prompt", help="text to put before every chunk (before the first with "
                   "--condition-on-previous-text): spellings, names, style")
    q.add_argument("--hotwords", help="words or phrases to favour, put in every chunk's prompt")
    p.add_argument("--diarize", action="store_true", help="attribute speech to speakers")
    p.add_argument("--num-speakers", type=int, help="the number of speakers, when known")
    p.add_argument("--min-speakers", type=int, help="at least this many speakers")
    p.add_argument("--max-speakers", type=int, help="at most this many speakers")
    p.add_argument("--diarization-model", help="pyannote pipeline id or folder (default: embedded offline pipeline)")
    p.add_argument("--hf-token", default=os.environ.get("HF_TOKEN"),
                   help="Hugging Face token for gated hub models (default: $HF_TOKEN; the embedded models need none)")
    p.add_argument("--postedit", action="store_true", help="fix casing/punctuation with a text LLM (speculatively decoded)")
    p.add_argument("--postedit-model", help="causal LM id or folder (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--postedit-drafter", default="copy",
                   help="post-edit drafter: copy, none, layers:N, or a causal LM (default: copy)")
    p.add_argument("--postedit-max-change", type=_share, default=0.3, metavar="SHARE",
                   help="reject an edit that changes more than this share of words, 0-1 (default: 0.3)")
    p.add_argument("--max-duration", type=float, default=12 * 3600, help="refuse audio longer than this many seconds (default: 43200)")
    p.add_argument("--device", default="auto", help="torch device: auto (cuda when a GPU is usable), cpu, cuda or cuda:N "
                   "(default: auto)")
    p.add_argument("--dtype", default="auto", help="weights and activations: auto (float16 on a GPU, float32 on the CPU), "
                   "float32, float16 (GPU only) or bfloat16 (default: auto)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: one per core; Ray workers: 1 each)")
    p.add_argument("--cache-dir", type=Path, help="where converted models are kept (default: ~/.cache/specwhisper)")
    p.add_argument("--live", action="store_true", help="play the file in real time through the live engine, "
                   "printing confirmed text as it comes (previous hypothesis as the draft; --draft none: plain)")
    p.add_argument("--live-chunk", type=float, default=1.0, metavar="SECONDS", help="--live audio piece length (default: 1.0)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars and no transcript on stdout")
    b = p.add_argument_group("folder input", "a job database in the output folder lets an interrupted batch resume")
    b.add_argument("-r", "--recursive", action="store_true", help="also transcribe files in subfolders")
    b.add_argument("--glob", action="append", metavar="PATTERN",
                   help="only files matching this pattern (name or path under the folder; repeatable; default: audio/video extensions)")
    b.add_argument("--retry-failed", action="store_true", help="run files that failed in an earlier run again")
    b.add_argument("--summary", action="store_true", help="print a table of the files, durations, RTF and errors")
    b.add_argument("--group-files", type=int, default=16,
                   help="files whose chunks are decoded in shared batches (default: 16)")
    b.add_argument("--engine", choices=["local", "ray"], default="local", help="local process or a Ray cluster (default: local)")
    b.add_argument("--ray-address", help="Ray cluster address (default: start a local Ray instance)")
    b.add_argument("--workers", type=int, help="Ray workers, one loaded pipeline each (default: one per CPU)")
    _add_peer_spellings(p)
    return p


def _language_code(name: str) -> str:
    """openai-whisper also takes a language's English name (``--language English``)."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    return TO_LANGUAGE_CODE.get(name.lower(), name)


def apply_peer_meanings(args: argparse.Namespace) -> argparse.Namespace:
    """The peer options that are not a plain alias of one of ours, in our terms."""
    if args.verbose is False:  # openai-whisper's --verbose False: no transcript on stdout
        args.quiet = True
    if args.fp16 is False and args.dtype == "auto":  # --fp16 True is openai-whisper's default: float16 on a GPU
        args.dtype = "float32"
    if args.compute_type in ("float16", "float32"):
        args.dtype = args.compute_type
    elif args.compute_type == "int8" and not args.model.endswith(":int8"):
        args.model += ":int8"
    if args.device_index is not None and args.device in ("auto", "cuda"):  # WhisperX: the GPU's index
        args.device = f"cuda:{args.device_index}"
    if args.language and len(args.language) > 3:
        args.language = _language_code(args.language)
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return apply_peer_meanings(build_parser().parse_args(argv))
