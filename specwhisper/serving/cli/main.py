"""`transcribe` command line: a thin layer over specwhisper.pipeline.core.Pipeline."""

from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from specwhisper.asr.options import SAMPLING
from specwhisper.asr.weights.errors import ModelError
from specwhisper.audio.loading import AudioError, check_length
from specwhisper.batch.inputs import output_stems
from specwhisper.diarize.known import load_known_speakers
from specwhisper.hardware.threads import check_threads
from specwhisper.pipeline.options import options_for, pipeline_config, run_options
from specwhisper.pipeline.writers import check_output_dir, overwrites_text, parse_formats, read_only_output, render, timed_line
from specwhisper.serving.arguments import option_values
from specwhisper.serving.cli.args import PROG, batch_flags_used, parse_args
from specwhisper.serving.cli.rerender import is_json, rerender
from specwhisper.serving.cli.stdio import STDIN_NAME, STDIN_STEM, check_stdin, check_stdout, reads_stdin, stdin_file, write_transcript, writes_stdout
from specwhisper.messages import clip, one_line, printable


class CliError(Exception):
    """A problem with what the user asked for; printed as one line."""


class _Progress:
    """One tqdm bar per stage, on stderr: seconds of audio done out of the file's ``seconds`` (percent
    when its length is unknown) and the time left. The time left is the average rate since the stage's
    bar appeared (tqdm's, with no smoothing: the engine reports after each batch, and batches of a long
    file take about equal time per second of audio). Chunks taken from a checkpoint report the stage
    ``resume``, so the ``transcribe`` bar starts where they ended and its rate counts decoding only.

    ``lines`` (WhisperX's ``--print_progress True`` where stderr is no terminal: a log): a line per stage and
    per tenth of it, ``talk.wav transcribe: 40%``, in place of the bar."""

    def __init__(self, label: str, enabled: bool, seconds: float | None = None, lines: bool = False):
        self.label = label
        self.enabled = enabled
        self.lines = lines
        self.printed: tuple[str, int] | None = None
        self.bar = None
        self.stage = None
        self.total = round(seconds) if seconds else 100
        self.done = "{n}/{total} s audio " if seconds else ""

    def __call__(self, stage: str, fraction: float) -> None:
        if stage == SAMPLING:  # inside a batch: nothing new to show
            return
        if self.lines:
            tenth = int(min(max(fraction, 0.0), 1.0) * 10)
            if self.printed is None or self.printed[0] != stage or self.printed[1] < tenth:
                self.printed = (stage, tenth)
                print(f"{self.label} {stage}: {tenth * 10}%", file=sys.stderr, flush=True)
            return
        if not self.enabled:
            return
        from tqdm import tqdm

        n = int(round(min(max(fraction, 0.0), 1.0) * self.total))
        if stage != self.stage:
            self.close()
            self.stage = stage
            # A terminal that reports a 0 x 0 size (e.g. a pty without a window size) makes tqdm
            # draw nothing at all; fall back to 80 x 24.
            size = shutil.get_terminal_size((80, 24))
            self.bar = tqdm(total=self.total, initial=n, desc=f"{self.label} {stage}", file=sys.stderr, leave=False,
                            ncols=size.columns, nrows=size.lines, bar_format=self.format)
        self.bar.n = n
        self.bar.refresh()

    @property
    def format(self) -> str:
        return "{desc}: {percentage:3.0f}%|{bar}| " + self.done + "[{elapsed}<{remaining}]"

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


def _options(args):
    """The run options of the parsed arguments (``specwhisper.pipeline.options``)."""
    values = option_values(args, options_for("cli", "run"))
    if values["align_text"] is not None:  # a folder of texts (a corpus) goes to the batch, file by file
        values["align_text"] = None if _text_folder(args) else _text_to_align(values["align_text"])
    return run_options(values)


def _text_folder(args) -> Path | None:
    """--align-text's folder of texts named after the audio files, when it names a folder."""
    return Path(args.align_text) if args.align_text not in (None, "-") and Path(args.align_text).is_dir() else None


def _text_to_align(path: str) -> str:
    """--align-text's file (- for standard input), read and checked as the option's text."""
    from specwhisper.pipeline.option import OptionError
    from specwhisper.pipeline.options import BY_NAME, read_align_text

    try:
        return BY_NAME["align_text"].check(sys.stdin.read()) if path == "-" else read_align_text(Path(path))
    except OptionError as exc:
        raise CliError(f"--align-text: {path}: {exc.problem}") from None
    except ValueError as exc:
        raise CliError(f"--align-text: {exc}") from None


def _pipeline_config(args):
    return pipeline_config(option_values(args, options_for("cli", "load")))


def _pipeline(args):
    """The models loaded (torch and transformers are imported here)."""
    from specwhisper.pipeline.core import Pipeline

    return Pipeline(_pipeline_config(args))


def run_folder(args, formats: list[str], opts) -> int:
    """`transcribe DIR -o OUT`: a resumable batch (specwhisper/batch/runner.py)."""
    from specwhisper.batch.engine import GroupLimits
    from specwhisper.batch.ray_engine import RayEngineError
    from specwhisper.batch.runner import BatchConfig, BatchError, print_summary, run_batch

    for flag in ("workers", "ray_address"):
        if getattr(args, flag) is not None and args.engine != "ray":
            raise CliError(f"--{flag.replace('_', '-')} goes with --engine ray")
    if args.group_files < 1:
        raise CliError(f"--group-files must be >= 1, got {args.group_files}")
    if args.watch is not None and not args.watch < 86400:
        raise CliError(f"--watch: seconds between looks at the folder, under a day, got {args.watch:g}")
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
        text_dir=_text_folder(args),
        watch=args.watch,
    )
    _quiet_libraries()

    def said(report) -> None:  # after each look at a watched folder that transcribed something
        if not args.quiet:
            print(f"{PROG}: {report.line(cfg.input_dir)}; watching (Ctrl-C stops)", file=sys.stderr, flush=True)

    if args.watch is not None and not args.quiet:
        print(f"{PROG}: watching {cfg.input_dir} every {args.watch:g} s (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        report = run_batch(cfg, _pipeline_config(args), opts, show_progress=not args.quiet and sys.stderr.isatty(),
                           on_round=said)
    except (BatchError, RayEngineError) as exc:
        raise CliError(one_line(exc)) from None
    if args.summary:
        print_summary(report.records)
    if not args.quiet or report.interrupted:
        print(f"{PROG}: {report.line(cfg.input_dir)}", file=sys.stderr)
    if report.interrupted:
        print(f"{PROG}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 1 if report.failed else 0


def output_formats(spec: str | None, speakers: bool) -> list[str]:
    """The formats to write: ``all`` (the default) means every format that applies, so rttm only with
    ``speakers`` (diarization, or channels as speakers); rttm asked for by name without them is refused,
    before any model loads, rather than written empty."""
    formats = parse_formats(spec or "all")
    if speakers:
        return formats
    if "rttm" in [n.strip().lower() for n in (spec or "").split(",")]:
        raise CliError("-f rttm needs --diarize (or --known-speakers, --multichannel): rttm holds the speakers' turns")
    return [f for f in formats if f != "rttm"]


def _check_combination(args) -> None:
    """Options that ask for opposite things, or for what another option they lack would do."""
    speakers = [f"--{n.replace('_', '-')}" for n in ("num_speakers", "min_speakers", "max_speakers") if getattr(args, n) is not None]
    if speakers and not (args.diarize or args.known_speakers or args.speaker_embeddings):  # each turns diarization on
        raise CliError(f"{speakers[0]} needs --diarize (the number of speakers is the diarizer's)")
    if args.verbose and args.quiet:
        raise CliError("--verbose prints every segment and --quiet prints nothing: give one of them")
    if args.verbose and args.live:
        raise CliError("--live prints the confirmed text as it comes; --verbose is for transcribing files")
    if args.detect_language:
        clash = next((flag for flag, on in (("--live", args.live), ("--language", args.language is not None),
                                            ("--verbose", args.verbose), ("--align-text", args.align_text is not None),
                                            ("--diarize", args.diarize), ("--postedit", args.postedit))
                      if on), None)
        if clash:
            raise CliError(f"--detect-language prints the language transcription would find: {clash} does not go with it")
    if args.align_text is not None:
        folder = Path(args.inputs[0]).is_dir()
        if args.live or len(args.inputs) > 1:
            raise CliError("--align-text gives its text the times of one audio file (a folder of texts, those of a "
                           "folder of audio files): give that file or folder alone")
        if folder and _text_folder(args) is None:
            raise CliError("--align-text with a folder of audio takes the folder of their texts, named after them "
                           "(talk.wav: talk.lab, .txt, .srt or .vtt; it may be the audio's own folder)")
        if not folder and _text_folder(args) is not None:
            raise CliError(f"--align-text: {args.align_text} is a folder: give the text of this file, or a folder of "
                           "audio files")


def _check_device(args) -> None:
    """A GPU that is not there, or int8 where it cannot run: one line, before any model loads. WhisperX's
    ``--compute_type int8`` on a GPU becomes float16 weights there (``args`` changed), with a warning, as
    ``WhisperModel(compute_type="int8")`` takes it (``compute_weights``)."""
    from specwhisper.asr.weights.loader import check_int8
    from specwhisper.hardware.device import resolve_device, resolve_dtype
    from specwhisper.pipeline.faster_whisper import compute_weights

    device = resolve_device(args.device)
    if args.compute_type == "int8" and args.model.endswith(":int8"):
        dtype, _, warning = compute_weights(args.compute_type, device)
        if warning:
            args.model, args.dtype = args.model.removesuffix(":int8"), dtype
            logging.getLogger("specwhisper").warning(warning.replace("compute_type ", "--compute_type ", 1))
    check_int8(args.model, device, resolve_dtype(args.dtype, device))


def run(args) -> int:
    # torch is imported once the arguments, the options' values and the inputs have passed their checks
    # (``_check_device``): a mistake in any of them is told in a third of a second, not five
    check_threads(args.threads)
    if any(is_json(p) for p in args.inputs):  # a transcript written again, no model run
        return rerender(args, PROG)
    _check_combination(args)
    check_stdin(args)
    opts = _options(args)
    formats = output_formats(args.formats, opts.diarize or opts.multichannel)  # known speakers turn diarization on
    check_stdout(args, formats)
    load_known_speakers(opts.known_speakers)  # a bad reference clip: one line, before any model loads
    if args.live:
        from specwhisper.serving.cli.live import run_live

        _check_device(args)
        _quiet_libraries()
        return run_live(args, formats, opts, lambda: _pipeline(args))
    folders = [p for p in args.inputs if Path(p).is_dir()]
    if folders and args.detect_language:
        raise CliError(f"{folders[0]}: --detect-language takes audio files, not a folder")
    if folders:
        if len(args.inputs) > 1:
            raise CliError(f"{folders[0]}: a folder must be the only input")
        if args.verbose:
            raise CliError("--verbose prints files' segments as they come; a folder's transcripts go to its output folder")
        _check_device(args)
        return run_folder(args, formats, opts)
    if used := batch_flags_used(args):
        raise CliError(f"{used[0]} applies to a folder input")
    out_dir = None if writes_stdout(args) else args.output_dir or Path(".")
    if out_dir is not None:
        check_output_dir(out_dir)  # before any model loads or any file is decoded
    if reads_stdin(args):
        with stdin_file() as path:
            return _run_files(args, [Input(str(path), STDIN_STEM, STDIN_NAME)], out_dir, formats, opts)
    inputs = list(dict.fromkeys(args.inputs))  # a file named twice is transcribed once
    stems = output_stems([Path(p) for p in inputs])
    for stem in stems if out_dir is not None else ():  # before any model loads, as the output folder's check
        if refusal := read_only_output(out_dir, stem, formats):
            raise CliError(refusal)
    if args.align_text not in (None, "-") and out_dir is not None:  # talk.srt brought in sync is not written over
        if refusal := overwrites_text(Path(args.align_text), out_dir, stems[0], formats):
            raise CliError(refusal)
    return _run_files(args, [Input(path, stem, printable(path)) for path, stem in zip(inputs, stems)], out_dir, formats, opts)


@dataclass(frozen=True)
class Input:
    path: str  # the file read
    stem: str  # its outputs' name
    name: str  # its name in messages (<stdin> for standard input)


def _run_files(args, inputs: list[Input], out_dir: Path | None, formats: list[str], opts) -> int:
    """Transcribe audio files (or detect their languages); ``out_dir`` None: the one format to stdout."""
    failures = 0
    todo = []
    for item in inputs:
        try:
            check_length(item.path, opts.max_audio_s, name=item.name)  # missing, or longer than its header says: before any model loads
        except AudioError as exc:
            _error(exc)
            failures += 1
        else:
            todo.append(item)
    if not todo:
        return 1
    _check_device(args)
    _quiet_libraries()
    pipeline = _pipeline(args)
    pipeline.asr.check(opts.decode_options())  # what the model decides (a language, translation): exit 2
    if args.detect_language:
        return max(_detect_languages(pipeline, todo, opts), 1 if failures else 0)
    for i, item in enumerate(todo):
        # which transcript is which on stdout, as `tail` labels files: printed with its first line (none if it fails)
        header = f"{'' if i == 0 else chr(10)}==> {item.name} <==" if not args.quiet and len(inputs) > 1 else None
        failures += not _transcribe_one(pipeline, item, out_dir, formats, opts, args.quiet, bool(args.verbose), header,
                                        progress_lines=bool(getattr(args, "print_progress", False)))
    return 1 if failures else 0


def _detect_languages(pipeline, inputs: list[Input], opts) -> int:
    """``--detect-language``: a line per file on stdout, ``FILE<tab>CODE<tab>PROBABILITY`` (and ``no speech``
    when the VAD heard none), the language transcription would find (``AsrEngine.detect_language``); a
    file that cannot be read, or with no clip of ``--clip-timestamps`` in it, is one line on stderr."""
    from specwhisper.audio.loading import load_audio

    failures = 0
    for item in inputs:
        try:
            audio = load_audio(item.path, max_seconds=opts.max_audio_s, name=item.name)
            found = pipeline.asr.detect_language(audio, opts.decode_options())
        except AudioError as exc:  # names the file
            _error(exc)
            failures += 1
            continue
        except ValueError as exc:
            _error(CliError(f"{item.name}: {exc}"))
            failures += 1
            continue
        print(f"{item.name}\t{found.language}\t{found.probability:.3f}" + ("" if found.speech else "\tno speech"), flush=True)
    return 1 if failures else 0


def _error(exc: Exception) -> None:
    print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)


def _print_timed(segments) -> None:
    """openai-whisper's verbose lines on stdout, above the progress bar (tqdm clears and redraws it)."""
    from tqdm import tqdm

    for s in segments:
        tqdm.write(timed_line(s), file=sys.stdout)
    sys.stdout.flush()


def _transcribe_one(pipeline, item: Input, out_dir: Path | None, formats: list[str], opts, quiet: bool,
                    verbose: bool = False, header: str | None = None, progress_lines: bool = False) -> bool:
    """Transcribe one input and write its outputs (``out_dir`` None: its one format to stdout); a failure is
    one line on stderr and False. ``verbose``: each segment with its times on stdout as soon as it is final
    (the ASR's; with diarization or the post-edit, which change them, the finished transcript's), in place
    of the text at the end.

    The ASR's finished chunks are kept in ``<out_dir>/.<stem>.partial.jsonl`` until the outputs are
    written, so an interrupted run of a long file resumes there (specwhisper.pipeline.checkpoint)."""
    from specwhisper.audio.probe import probe_duration
    from specwhisper.pipeline.checkpoint import checkpoint_path

    path = item.name
    enabled = not quiet and sys.stderr.isatty()
    lines = not quiet and not enabled and progress_lines  # --print_progress True into a log
    progress = _Progress(Path(item.name).name, enabled, probe_duration(item.path) if enabled else None, lines)
    checkpoint = None if out_dir is None else checkpoint_path(out_dir, item.stem)
    streamed = verbose and not quiet and not (opts.diarize or opts.postedit or opts.align_text)
    pending_header = [header] if header else []

    def stdout_begins() -> None:
        if pending_header:
            print(pending_header.pop())

    def timed(segments) -> None:
        stdout_begins()
        _print_timed(segments)

    try:
        transcript = pipeline.run_file(item.path, opts, progress, checkpoint=checkpoint, on_segments=timed if streamed else None,
                                       name=item.name)
    except (AudioError, ValueError) as exc:
        _error(exc)
        return False
    except KeyboardInterrupt:
        progress.close()  # the bar first: the line below starts a line of its own
        if checkpoint is not None and checkpoint.is_file():
            print(f"{PROG}: {path}: finished chunks kept in {checkpoint}; run the same command again to resume", file=sys.stderr)
        raise
    finally:
        progress.close()
    try:
        written = write_transcript(transcript, out_dir, item.stem, formats, opts.subtitles)
    except OSError as exc:
        where = "standard output" if out_dir is None else printable(str(out_dir))
        _error(OSError(f"{path}: cannot write outputs to {where} ({exc.strerror or exc})"))
        return False
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    if not quiet:
        stdout_begins()
        if out_dir is None:
            pass  # stdout holds the transcript as written
        elif not transcript.segments:
            print("(no speech found)")
        elif verbose and not streamed:
            _print_timed(transcript.segments)
        elif not verbose:
            print(render(transcript, "txt"), end="")
        s = transcript.stats
        speculative = (f"acceptance {s.acceptance_rate:.0%}, {s.tokens_per_target_pass:.2f} tokens/target pass"
                       if s.drafted else "no drafter")
        if getattr(pipeline.asr.decoder, "describe", None) and (chosen := pipeline.asr.decoder.describe()):
            speculative += f" (auto: {chosen})"  # --draft auto: what it chose and why (nothing when it never ran)
        resumed = f", {s.resumed_chunks} chunk{'s' * (s.resumed_chunks > 1)} resumed" if s.resumed_chunks else ""
        if aligned := transcript.model.get("aligned_text"):  # how far the text and what Whisper heard agree
            resumed += f", text aligned ({aligned['matched_words']} of its {aligned['text_words']} words heard the same)"
        print(f"{PROG}: {path}: {transcript.duration:.1f} s audio{resumed}, RTF {transcript.timings.get('rtf', 0):.3f}, "
              f"language {transcript.language or 'not detected'}, {speculative}; wrote {', '.join(map(printable, written))}", file=sys.stderr)
    return True


class _WarningLines(logging.Handler):
    """The package's messages as ``transcribe: warning: ...`` lines on the stderr of the moment (warnings
    and above; ``--log-level`` moves the bar)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"{PROG}: {record.levelname.lower()}: {clip(record.getMessage())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    package = logging.getLogger("specwhisper")
    lines = next((h for h in package.handlers if isinstance(h, _WarningLines)), None)
    if lines is None:
        lines = _WarningLines(logging.WARNING)
        package.addHandler(lines)
    args = parse_args(argv)
    level = getattr(logging, args.log_level.upper())
    lines.setLevel(level)
    package.setLevel(level if level < logging.WARNING else logging.NOTSET)  # NOTSET: the root's (warning)
    try:
        return run(args)
    except (AudioError, ModelError, ValueError, CliError, OSError) as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
