"""The `transcribe` argument parser: the transcription options of ``specwhisper.pipeline.options`` (with
openai-whisper's and WhisperX's spellings of them, hidden from --help) and the command's own (inputs,
outputs, live playback, batch folders); the peers' options we have no meaning for are refused by name
in one line, so that a command line written for either tool runs here or says why it cannot."""

from __future__ import annotations

import argparse
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from specwhisper.pipeline.options import REFUSED, options_for
from specwhisper.serving.arguments import OneLineParser, add_options, positive

PROG = "transcribe"
BATCH_FLAGS = ("recursive", "glob", "retry_failed", "summary", "ray_address", "workers", "watch")
BATCH_DEFAULTS = {"engine": "local", "group_files": 16}


def batch_flags_used(args: argparse.Namespace) -> list[str]:
    """The folder-only flags given (as --flags), for inputs that are not a folder."""
    used = [f for f in BATCH_FLAGS if getattr(args, f)] + [f for f, v in BATCH_DEFAULTS.items() if getattr(args, f) != v]
    return [f"--{f.replace('_', '-')}" for f in used]


def str2bool(text: str) -> bool:
    """openai-whisper's boolean values: ``--verbose False``."""
    values = {"true": True, "false": False}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected True or False, got '{text}'")
    return values[text.lower()]


def _silero(text: str) -> str:
    """WhisperX's ``--vad_method``: silero is the VAD here; pyannote's is not."""
    if text != "silero":
        raise argparse.ArgumentTypeError(f"the VAD here is silero-vad ('silero'), not '{text}'; --vad-threshold sets it")
    return text


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# the peers' options whose meaning here is not one of our options' (``apply_peer_meanings``, ``main``):
# (their option, its dest, argparse's keywords, what it is here in docs/cli.md)
PEER_MEANINGS: list[tuple[str, str, dict, str]] = [
    ("--output_dir", "output_dir", {"type": Path}, "`--output-dir`"),
    ("--no_align", "word_timestamps", {"action": "store_const", "const": False}, "`--no-word-timestamps`"),
    ("--fp16", "fp16", {"type": str2bool}, "`--fp16 False` is `--dtype float32`"),
    ("--compute_type", "compute_type", {"choices": ["default", "float16", "float32", "int8"]},
     "`--dtype` (int8: `-m MODEL:int8` on the CPU; on a GPU, where int8 weights do not run, float16 with a warning)"),
    ("--device_index", "device_index", {"type": int}, "`--device cuda:N` (0 with `--device auto`: auto's own GPU, or the CPU)"),
    ("--print_progress", "print_progress", {"type": str2bool}, "progress bars are on a terminal unless `--quiet`; "
     "`True` where stderr is no terminal (a log): a line per stage and tenth, `talk.wav transcribe: 40%`"),
    ("--log-level", "log_level", {"choices": LOG_LEVELS},
     "the level of the package's messages on stderr (default: warning)"),
    ("--model_cache_only", "model_cache_only", {"type": str2bool},
     "`True`: models from the local cache only, nothing downloaded (`HF_HUB_OFFLINE=1`)"),
    ("--vad_method", "vad_method", {"type": _silero}, "`silero` is taken (the VAD here); `pyannote` is refused"),
]


class _Refused(argparse.Action):
    """A peer's option we have no meaning for: one line saying so, before anything runs."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} (openai-whisper/WhisperX) is not supported: {REFUSED[option_string]}")


def _version() -> str:
    try:
        return version("specwhisper")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Speaker-attributed transcripts with exact speculative Whisper decoding. "
                      "openai-whisper's and WhisperX's option spellings (--output_format, --word_timestamps True, ...) "
                      "are accepted too (docs/cli.md).")
    p.add_argument("inputs", nargs="+", help="audio or video files, or one folder (a resumable batch; see 'folder input'); - reads the audio from "
                   "standard input")
    p.add_argument("-V", "--version", action="version", version=f"%(prog)s {_version()}", help="print the version and exit")
    p.add_argument("-o", "--output-dir", type=Path, help="folder for output files (default: current folder); - writes the one format -f names to standard output")
    add_options(p, options_for("cli"))
    p.add_argument("--live", action="store_true", help="play the file in real time through the live engine, "
                   "printing confirmed text as it comes (previous hypothesis as the draft; --draft none: plain)")
    p.add_argument("--live-chunk", type=positive(float), default=1.0, metavar="SECONDS",
                   help="--live: the file played in pieces of this many seconds (default: 1.0; standard input is "
                        "taken as it arrives)")
    p.add_argument("--detect-language", action="store_true", help="print each file's language and its probability "
                   "(found as transcription finds it, on the first windows with speech) and exit, writing nothing")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars and no transcript on stdout")
    p.add_argument("--verbose", nargs="?", const=True, type=str2bool, metavar="True|False",
                   help="print each segment with its times on stdout as soon as nothing left to decode can change it "
                        "(the chunks then decode in the file's order; with --diarize, --postedit or --align-text, once the file is done); "
                        "openai-whisper's --verbose True; --verbose False is --quiet")
    b = p.add_argument_group("folder input", "a job database in the output folder lets an interrupted batch resume")
    b.add_argument("-r", "--recursive", action="store_true", help="also transcribe files in subfolders")
    b.add_argument("--glob", action="append", metavar="PATTERN",
                   help="only files matching this pattern (name or path under the folder; repeatable; default: audio/video extensions)")
    b.add_argument("--retry-failed", action="store_true", help="run files that failed in an earlier run again")
    b.add_argument("--summary", action="store_true", help="print a table of the files, durations, RTF and errors")
    b.add_argument("--watch", type=positive(float), metavar="SECONDS",
                   help="keep watching the folder, the models loaded: every SECONDS, transcribe the files that are new "
                        "or changed, each once it has not changed for SECONDS (a file being copied in waits until it "
                        "is whole); Ctrl-C stops")
    b.add_argument("--group-files", type=int, default=16,
                   help="files whose chunks are decoded in shared batches (default: 16)")
    b.add_argument("--engine", choices=["local", "ray"], default="local", help="local process or a Ray cluster (default: local)")
    b.add_argument("--ray-address", help="Ray cluster address (default: start a local Ray instance)")
    b.add_argument("--workers", type=int, help="Ray workers, one loaded pipeline each (default: one per CPU)")
    for option, dest, kwargs, _ in PEER_MEANINGS:
        p.add_argument(option, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)
    for option in REFUSED:
        p.add_argument(option, nargs="?", action=_Refused, help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    p.set_defaults(verbose=None, fp16=None, compute_type=None, device_index=None, log_level="warning",
                   model_cache_only=False)
    return p


def apply_peer_meanings(args: argparse.Namespace) -> argparse.Namespace:
    """The peer options that are not a plain alias of one of ours, in our terms; $HF_TOKEN."""
    if args.verbose is False:  # openai-whisper's --verbose False: no transcript on stdout
        args.quiet = True
    if args.fp16 is False and args.dtype == "auto":  # --fp16 True is openai-whisper's default: float16 on a GPU
        args.dtype = "float32"
    if args.compute_type in ("float16", "float32"):
        args.dtype = args.compute_type
    elif args.compute_type == "int8" and not args.model.endswith(":int8"):
        args.model += ":int8"
    # WhisperX: the GPU's index, where its --device (cuda when one is usable) is a GPU: index 0 is auto's own
    if args.device_index is not None and (args.device == "cuda" or (args.device == "auto" and args.device_index != 0)):
        args.device = f"cuda:{args.device_index}"
    if args.hf_token is None:
        args.hf_token = os.environ.get("HF_TOKEN")
    if args.model_cache_only:  # read by huggingface_hub when it loads, with the models
        os.environ["HF_HUB_OFFLINE"] = "1"
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return apply_peer_meanings(build_parser().parse_args(argv))
