"""`transcribe` command line: a thin layer over specwhisper.pipeline.core.Pipeline."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from specwhisper.audio.loading import AudioError, check_length
from specwhisper.asr.engine import DecodeOptions
from specwhisper.asr.models import ModelError
from specwhisper.batch.runner import BatchError
from specwhisper.batch.inputs import output_stems
from specwhisper.serving.params import one_line
from specwhisper.batch.ray_engine import RayEngineError
from specwhisper.pipeline.writers import ALL_FORMATS, check_output_dir, parse_formats, render, write_outputs

PROG = "transcribe"


class CliError(Exception):
    """A problem with what the user asked for; printed as one line."""


def _share(text: str) -> float:
    """argparse type: a share between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got '{text}'") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line ('transcribe: error: ...'), not usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Speaker-attributed transcripts with exact speculative Whisper decoding.",
    )
    p.add_argument("inputs", nargs="+", help="audio or video files, or one folder (a resumable batch; see 'folder input')")
    p.add_argument("-o", "--output-dir", type=Path, help="folder for output files (default: current folder)")
    p.add_argument("-f", "--formats", help=f"comma-separated formats: {', '.join(ALL_FORMATS)}, all (default: all)")
    p.add_argument("-m", "--model", default="base", help="embedded 'base' or 'tiny.en', a Hugging Face id, or a local folder")
    p.add_argument("--draft", default="auto", help="speculative drafter: auto, none, ngram, or a model (default: auto)")
    p.add_argument("-l", "--language", help="language code (default: detect)")
    p.add_argument("--task", default="transcribe", choices=["transcribe", "translate"])
    p.add_argument("--batch-size", type=int, default=8, help="chunks decoded together (default: 8)")
    p.add_argument("--vad-threshold", type=float, default=0.5,
                   help="silero-vad speech threshold, 0-1: where chunks are cut; audio below it is still decoded and "
                   "dropped only when Whisper finds no speech in it (default: 0.5)")
    p.add_argument("--word-timestamps", action=argparse.BooleanOptionalAction, default=None,
                   help="per-word times in json/tsv (default: on with --diarize)")
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
    p.add_argument("--num-speakers", type=int)
    p.add_argument("--min-speakers", type=int)
    p.add_argument("--max-speakers", type=int)
    p.add_argument("--diarization-model", help="pyannote pipeline id or folder (default: embedded offline pipeline)")
    p.add_argument("--hf-token", default=os.environ.get("HF_TOKEN"), help="Hugging Face token for gated models")
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
    return p


BATCH_FLAGS = ("recursive", "glob", "retry_failed", "summary", "ray_address", "workers")
BATCH_DEFAULTS = {"engine": "local", "group_files": 16}


class _Progress:
    """One tqdm bar per stage, on stderr."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled
        self.bar = None
        self.stage = None

    def __call__(self, stage: str, fraction: float) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if stage != self.stage:
            self.close()
            self.stage = stage
            # A terminal that reports a 0 x 0 size (e.g. a pty without a window size) makes tqdm
            # draw nothing at all; fall back to 80 x 24.
            size = shutil.get_terminal_size((80, 24))
            self.bar = tqdm(total=100, desc=f"{self.label} {stage}", unit="%", file=sys.stderr, leave=False, ncols=size.columns, nrows=size.lines,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}")
        self.bar.n = int(round(min(max(fraction, 0.0), 1.0) * 100))
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _quiet_libraries() -> None:
    import warnings

    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")


def _quality(args):
    from specwhisper.asr.fallback import QualityRules, temperature_schedule

    return QualityRules(
        temperatures=temperature_schedule(args.temperature, args.temperature_increment_on_fallback),
        compression_ratio_threshold=args.compression_ratio_threshold,
        logprob_threshold=args.logprob_threshold,
        no_speech_threshold=args.no_speech_threshold,
        best_of=args.best_of,
    )


def _options(args):
    from specwhisper.pipeline.core import RunOptions

    opts = RunOptions(
        decode=DecodeOptions(language=args.language, task=args.task, batch_size=args.batch_size, vad_threshold=args.vad_threshold,
                            word_timestamps=args.diarize if args.word_timestamps is None else args.word_timestamps,
                            beam_size=args.beam_size, patience=args.patience, quality=_quality(args),
                            initial_prompt=args.initial_prompt, hotwords=args.hotwords,
                            condition_on_previous_text=args.condition_on_previous_text),
        diarize=args.diarize,
        num_speakers=args.num_speakers,
        min_speakers=args.min_speakers,
        max_speakers=args.max_speakers,
        postedit=args.postedit,
        max_audio_s=args.max_duration,
    )
    opts.validate()
    if args.max_duration <= 0:
        raise CliError(f"--max-duration must be positive, got {args.max_duration}")
    return opts


def _pipeline_config(args):
    from specwhisper.pipeline.core import PipelineConfig

    return PipelineConfig(
        model=args.model,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        cache_dir=args.cache_dir,
        diarization_model=args.diarization_model,
        hf_token=args.hf_token,
        postedit_model=args.postedit_model,
        postedit_drafter=args.postedit_drafter,
        postedit_max_change=args.postedit_max_change,
    )


def run_folder(args, formats: list[str], opts) -> int:
    """`transcribe DIR -o OUT`: a resumable batch (specwhisper/batch/runner.py)."""
    from specwhisper.batch.runner import BatchConfig, print_summary, run_batch

    from specwhisper.batch.engine import GroupLimits

    for flag in ("workers", "ray_address"):
        if getattr(args, flag) is not None and args.engine != "ray":
            raise CliError(f"--{flag.replace('_', '-')} goes with --engine ray")
    if args.group_files < 1:
        raise CliError(f"--group-files must be >= 1, got {args.group_files}")
    cfg = BatchConfig(
        input_dir=Path(args.inputs[0]),
        output_dir=args.output_dir or Path("."),
        formats=formats,
        recursive=args.recursive,
        globs=args.glob or [],
        retry_failed=args.retry_failed,
        engine=args.engine,
        ray_address=args.ray_address,
        workers=args.workers,
        limits=GroupLimits(max_files=args.group_files),
    )
    _quiet_libraries()
    report = run_batch(cfg, _pipeline_config(args), opts, show_progress=not args.quiet and sys.stderr.isatty())
    if args.summary:
        print_summary(report.records)
    if not args.quiet or report.interrupted:
        print(f"{PROG}: {report.line(cfg.input_dir)}", file=sys.stderr)
    if report.interrupted:
        print(f"{PROG}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 1 if report.failed else 0


def run(args) -> int:
    from specwhisper.runtime.device import resolve_device, resolve_dtype
    from specwhisper.asr.models import check_int8
    from specwhisper.runtime.threads import check_threads
    from specwhisper.pipeline.core import Pipeline

    check_threads(args.threads)
    device = resolve_device(args.device)  # a GPU that is not there: one line, before any model loads
    check_int8(args.model, device, resolve_dtype(args.dtype, device))
    formats = parse_formats(args.formats or "all")
    if args.formats is None and not args.diarize:
        formats = [f for f in formats if f != "rttm"]
    opts = _options(args)
    folders = [p for p in args.inputs if Path(p).is_dir()]
    if folders:
        if len(args.inputs) > 1:
            raise CliError(f"{folders[0]}: a folder must be the only input")
        return run_folder(args, formats, opts)
    used = [f for f in BATCH_FLAGS if getattr(args, f)] + [f for f, v in BATCH_DEFAULTS.items() if getattr(args, f) != v]
    used = [f"--{f.replace('_', '-')}" for f in used]
    if used:
        raise CliError(f"{used[0]} applies to a folder input")
    out_dir = args.output_dir or Path(".")
    check_output_dir(out_dir)  # before any model loads or any file is decoded
    inputs = list(dict.fromkeys(args.inputs))  # a file named twice is transcribed once
    failures = 0
    todo = []
    for path, stem in zip(inputs, output_stems([Path(p) for p in inputs])):
        try:
            check_length(path, opts.max_audio_s)  # missing, or longer than its header says: before any model loads
        except AudioError as exc:
            _error(exc)
            failures += 1
        else:
            todo.append((path, stem))
    if not todo:
        return 1
    _quiet_libraries()
    pipeline = Pipeline(_pipeline_config(args))
    for path, stem in todo:
        failures += not _transcribe_one(pipeline, path, stem, out_dir, formats, opts, args.quiet)
    return 1 if failures else 0


def _error(exc: Exception) -> None:
    print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)


def _transcribe_one(pipeline, path: str, stem: str, out_dir: Path, formats: list[str], opts, quiet: bool) -> bool:
    """Transcribe one input and write its outputs; a failure is one line on stderr and False."""
    progress = _Progress(Path(path).name, enabled=not quiet and sys.stderr.isatty())
    try:
        transcript = pipeline.run_file(path, opts, progress)
    except (AudioError, ValueError) as exc:
        _error(exc)
        return False
    finally:
        progress.close()
    try:
        written = write_outputs(transcript, out_dir, stem, formats)
    except OSError as exc:
        _error(OSError(f"{path}: cannot write outputs to {out_dir} ({exc.strerror or exc})"))
        return False
    if not quiet:
        print(render(transcript, "txt"), end="" if transcript.segments else "(no speech found)\n")
        t = transcript.timings
        s = transcript.stats
        print(
            f"{PROG}: {path}: {transcript.duration:.1f} s audio, RTF {t.get('rtf', 0):.3f}, "
            f"language {transcript.language}, acceptance {s.acceptance_rate:.0%}, "
            f"{s.tokens_per_target_pass:.2f} tokens/target pass; wrote {', '.join(p.name for p in written)}",
            file=sys.stderr,
        )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (AudioError, ModelError, ValueError, CliError, OSError, BatchError, RayEngineError) as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
