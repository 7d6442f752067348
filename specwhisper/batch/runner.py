"""Batch folders: `transcribe DIR -o OUT`.

Walks the folder, plans against the job database in OUT (done files with unchanged content and
settings are skipped, changed ones redone, failed ones kept failed unless retried), runs the
pending files through an engine (local: one process, cross-file chunk batching, audio decoded
ahead; ray: actors on a cluster) and, as the only writer, writes each file's outputs and then
marks it done. SIGINT/SIGTERM stop the run: files in the models go back to pending, and a file
whose outputs are being written finishes first, so no half-written file is ever marked done.

With ``watch`` seconds the folder is looked at again every ``watch`` seconds, the models staying
loaded, and a file is taken once it has not changed for that long (one being copied in waits until it
is whole); a stop while it waits ends the run with nothing cut short.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specwhisper.batch.engine import Finished, GroupLimits, LocalEngine, Started
from specwhisper.batch.inputs import InputError, Job, find_inputs, make_jobs, recorded_outputs, settle_stems, with_texts
from specwhisper.pipeline.config import PipelineConfig, RunOptions
from specwhisper.batch.jobs import JobDB, JobDBError, JobRecord, file_sha256
from specwhisper.pipeline.writers import OutputDirError, check_output_dir, overwrites_text, write_outputs
from specwhisper.pipeline.subtitles import SubtitleOptions
from specwhisper.messages import printable

ENGINES = ("local", "ray")
# Settings that cannot change a transcript (or are secrets), left out of a file's settings key.
SPEED_SETTINGS = frozenset({"draft", "device", "threads", "cache_dir", "hf_token", "batch_size", "max_audio_s"})


class BatchError(Exception):
    """The batch cannot start; the message is one line."""


@dataclass
class BatchConfig:
    input_dir: Path
    output_dir: Path
    formats: list[str]
    recursive: bool = False
    globs: list[str] = field(default_factory=list)
    retry_failed: bool = False
    engine: str = "local"
    ray_address: str | None = None
    workers: int | None = None  # ray actors (default: one per CPU of the cluster)
    limits: GroupLimits = field(default_factory=GroupLimits)
    # a corpus: each audio file's text to align, named after it in this folder (batch.inputs.with_texts)
    text_dir: Path | None = None
    watch: float | None = None  # seconds between looks at the folder (None: one look, then the run ends)


@dataclass
class BatchReport:
    """A run's files by their latest outcome: a watched file that changed and was done again counts once."""

    files: int = 0
    # input -> "done", "failed" (this run), "done before", "failed before" (an earlier run's, not retried)
    outcomes: dict[str, str] = field(default_factory=dict)
    finished: int = 0  # files transcribed or failed by this run, each time
    interrupted: bool = False
    records: list[JobRecord] = field(default_factory=list)

    def _count(self, outcome: str) -> int:
        return sum(o == outcome for o in self.outcomes.values())

    @property
    def done_now(self) -> int:
        return self._count("done")

    @property
    def done_before(self) -> int:
        return self._count("done before")

    @property
    def failed_now(self) -> int:
        return self._count("failed")

    @property
    def failed_before(self) -> int:
        return self._count("failed before")

    @property
    def failed(self) -> int:
        return self.failed_now + self.failed_before

    @property
    def pending(self) -> int:
        return self.files - self.done_now - self.done_before - self.failed

    def line(self, root: Path) -> str:
        parts = [f"{self.done_now} done", f"{self.done_before} already done"]
        if self.failed:
            parts.append(f"{self.failed} failed" + (f" ({self.failed_before} in an earlier run, not tried again: --retry-failed "
                                                     "tries them)" if self.failed_before else ""))
        if self.pending:
            parts.append(f"{self.pending} left")
        return f"{root}: {self.files} files: " + ", ".join(parts)


class StopSignals:
    """SIGINT and SIGTERM become KeyboardInterrupt, except inside ``shielded()`` blocks (writing a
    file's outputs and its done mark), which finish first."""

    def __init__(self):
        self.requested = False
        self._depth = 0
        self._old: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum, frame) -> None:
        self.requested = True
        if self._depth == 0:
            raise KeyboardInterrupt

    @contextmanager
    def shielded(self, interrupt_after: bool = True):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if interrupt_after and self.requested and self._depth == 0:
            raise KeyboardInterrupt


def settings_key(config: PipelineConfig, options: RunOptions, formats: list[str]) -> str:
    """What shapes a file's outputs. Speed settings (drafter, batch size, device) are left out:
    decoding is exact, so changing them redoes nothing; so is the length limit (--retry-failed
    runs the files it refused again)."""
    models = {k: v for k, v in asdict(config).items() if k not in SPEED_SETTINGS}
    decode = {k: v for k, v in asdict(options.decode).items() if k not in SPEED_SETTINGS}
    opts = {k: v for k, v in asdict(options).items() if k != "decode" and k not in SPEED_SETTINGS}
    return json.dumps({"models": models, "decode": decode, "options": opts, "formats": sorted(formats)},
                      sort_keys=True, default=str)


def same_settings(stored: str, now: str) -> bool:
    """Whether a file's stored settings key holds the same settings as ``now``. A setting at its
    default on one side and absent on the other is the same, so a release that adds an option (at
    its default: what the release before it did) does not make every done file decode again."""
    if stored == now:
        return True
    try:
        old = json.loads(stored)
    except ValueError:
        return False
    defaults = json.loads(settings_key(PipelineConfig(), RunOptions(), []))
    return _set_apart(old, defaults) == _set_apart(json.loads(now), defaults)


def _set_apart(settings: dict, defaults: dict) -> dict:
    """``settings`` without the entries at their default (nested groups likewise; emptied ones go)."""
    kept = {}
    for name, value in settings.items():
        default = defaults.get(name)
        if isinstance(value, dict) and isinstance(default, dict):
            value = _set_apart(value, default)
            if value:
                kept[name] = value
        elif name not in defaults or value != default:
            kept[name] = value
    return kept


@dataclass
class Plan:
    todo: list[Job]
    done_before: list[Job]
    failed_before: list[Job]


def _sha256_or_none(path: Path) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None  # unreadable now: queued, and its loader records the error


def with_text(settings: str, job: Job) -> str:
    """A file's settings key with its text to align's digest (an edited text aligns the file again)."""
    if job.text is None:
        return settings
    return json.dumps({**json.loads(settings), "align_text_sha256": _sha256_or_none(job.text)}, sort_keys=True)


def plan_jobs(db: JobDB, jobs: list[Job], settings: str, retry_failed: bool) -> Plan:
    """Decide per file: skip (done, same content and settings, outputs present), keep failed, or queue."""
    plan = Plan([], [], [])
    batch_settings = settings
    for job in jobs:
        settings = with_text(batch_settings, job)
        rec = db.get(job.key)
        same = rec is not None and same_settings(rec.settings, settings)
        if same and (rec.size, rec.mtime_ns) != (job.size, job.mtime_ns):
            same = rec.sha256 is not None and rec.sha256 == _sha256_or_none(job.path)  # touched, or changed?
            if same:
                db.touch(job.key, job.size, job.mtime_ns)
        if same and rec.state == "done" and all(Path(p).is_file() for p in rec.outputs):
            plan.done_before.append(job)
        elif same and rec.state == "failed" and not retry_failed:
            plan.failed_before.append(job)
        else:
            db.queue(job.key, str(job.rel), job.size, job.mtime_ns, rec.sha256 if same else None, settings, new_job=not same)
            plan.todo.append(job)
    return plan


def _make_engine(cfg: BatchConfig, pipeline_config: PipelineConfig, options: RunOptions):
    if cfg.engine == "ray":
        from specwhisper.batch.ray_engine import RayEngine

        return RayEngine(pipeline_config, options, cfg.ray_address, cfg.workers, cfg.limits.max_files)
    if cfg.engine != "local":
        raise BatchError(f"unknown engine '{cfg.engine}' (choose from {', '.join(ENGINES)})")
    return LocalEngine(pipeline_config, options, cfg.limits)


def _not_ours(jobs: list[Job], outputs: dict[str, str]) -> list[Job]:
    """The jobs less the files this batch wrote (``recorded_outputs``: in a folder transcribed into itself with
    ``--glob '*'``, its outputs are no inputs; each rerun failed them as unreadable audio)."""
    return [j for j in jobs if str(j.path) not in outputs]


def check_texts(jobs: list[Job], formats: list[str]) -> None:
    """A corpus whose outputs would overwrite a text to align is refused before anything runs."""
    for job in jobs:
        if job.text is not None and (refusal := overwrites_text(job.text, job.out_dir, job.stem, formats)):
            raise BatchError(refusal)


def _open_output(folder: Path) -> JobDB:
    try:
        check_output_dir(folder)
    except OutputDirError as exc:
        raise BatchError(str(exc)) from exc
    try:
        return JobDB(folder)
    except JobDBError as exc:
        raise BatchError(str(exc)) from exc


class _Bar:
    """Overall progress over files, with the audio time done and an ETA (tqdm, on stderr)."""

    def __init__(self, total: int, enabled: bool):
        from tqdm import tqdm

        size = shutil.get_terminal_size((100, 24))  # a pty reporting 0 x 0 would make tqdm draw nothing
        self.bar = tqdm(total=total, unit="file", desc="batch", file=sys.stderr, disable=not enabled,
                        ncols=size.columns, nrows=size.lines,
                        bar_format="{desc}: {n_fmt}/{total_fmt} files |{bar}| {elapsed}<{remaining}{postfix}")
        self.audio_s = 0.0
        self.failed = 0

    def advance(self, event: Finished) -> None:
        if event.transcript is not None:
            self.audio_s += event.transcript.duration
        else:
            self.failed += 1
        audio = self.bar.format_interval(self.audio_s)
        self.bar.set_postfix_str(f"{audio} of audio" + (f", {self.failed} failed" if self.failed else ""), refresh=False)
        self.bar.update(1)

    def write(self, line: str) -> None:
        self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def _record(db: JobDB, event: Finished, formats: list[str], layout: SubtitleOptions) -> str | None:
    """Write a finished file's outputs (srt and vtt laid out by ``layout``), then its done mark; or its
    failure. Returns the error, if any."""
    from specwhisper.pipeline.checkpoint import checkpoint_path  # its module imports torch: not for the batch's start

    job, error = event.job, event.error
    if event.transcript is not None:
        try:
            written = write_outputs(event.transcript, job.out_dir, job.stem, formats, layout)
        except OSError as exc:
            error = f"{printable(str(job.path))}: cannot write outputs to {printable(str(job.out_dir))} ({exc.strerror or exc})"
        else:
            t = event.transcript
            db.done(job.key, event.sha256, [str(p) for p in written], t.duration, t.timings.get("total", 0.0),
                    t.timings.get("rtf", 0.0), t.language)
            checkpoint_path(job.out_dir, job.stem).unlink(missing_ok=True)  # its finished batches: no longer needed
            return None
    db.failed(job.key, event.sha256, error or f"{printable(str(job.path))}: failed")
    return error


class Settled:
    """The files that have not changed (size and modification time) for ``seconds``: those a watched
    folder's run takes, so a file still being copied in is not read half-written."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.since: dict[Path, tuple[tuple[int, int], float]] = {}  # file -> (its state, when first seen so)

    def of(self, files: list[Path]) -> list[Path]:
        now, seen, out = time.time(), {}, []
        for f in files:
            try:
                st = f.stat()
            except OSError:  # gone since the folder was read
                continue
            state = (st.st_size, st.st_mtime_ns)
            old = self.since.get(f)
            first = old[1] if old is not None and old[0] == state else min(now, st.st_mtime_ns / 1e9)
            seen[f] = (state, first)
            if now - first >= self.seconds:
                out.append(f)
        self.since = seen
        return out


def run_batch(
    cfg: BatchConfig,
    pipeline_config: PipelineConfig,
    options: RunOptions,
    show_progress: bool = False,
    on_round: Callable[[BatchReport], None] | None = None,
) -> BatchReport:
    """Transcribe every input file of ``cfg.input_dir`` that is not done yet; see the module doc.
    Per-file errors are printed as they happen (one line each) and recorded in the job database.
    ``on_round``: called after each look at a watched folder that transcribed something."""
    options.validate()
    if cfg.text_dir is not None:
        try:
            options.check_alignment()
        except ValueError as exc:
            raise BatchError(str(exc)) from None
        if cfg.engine != "local":
            raise BatchError("a corpus of texts to align runs on the local engine (leave --engine ray out)")
        if not cfg.text_dir.is_dir():
            raise BatchError(f"{cfg.text_dir}: not a folder (the texts to align, named after the audio files)")
    files = _inputs(cfg)
    if not files and cfg.watch is None:
        what = ", ".join(cfg.globs) if cfg.globs else "audio or video files"
        hint = "" if cfg.recursive else " (--recursive to look in subfolders)"
        raise BatchError(f"{cfg.input_dir}: no input files found ({what}){hint}")
    engine = _make_engine(cfg, pipeline_config, options)
    report = BatchReport()
    settings = settings_key(pipeline_config, options, cfg.formats)
    settled = Settled(cfg.watch) if cfg.watch is not None else None
    try:
        with _open_output(cfg.output_dir) as db, closing(engine):  # a watched folder's looks share the engine
            db.recover()
            retry, seen = cfg.retry_failed, set()
            while True:
                outputs = recorded_outputs({r.path: r.outputs for r in db.records()})
                jobs = _not_ours(make_jobs(cfg.input_dir, settled.of(files) if settled else files, cfg.output_dir), outputs)
                if cfg.text_dir is not None:
                    jobs = with_texts(jobs, cfg.text_dir)
                jobs = settle_stems(jobs, outputs, cfg.formats)
                if cfg.text_dir is not None:
                    check_texts(jobs, cfg.formats)
                plan = plan_jobs(db, jobs, settings, retry)
                retry = False  # a watched folder's failed file is tried again once it changes, not at every look
                for outcome, earlier in (("done before", plan.done_before), ("failed before", plan.failed_before)):
                    report.outcomes.update((j.key, outcome) for j in earlier if j.key not in seen)
                seen.update(j.key for j in jobs)
                report.files = len(seen)
                before = report.finished
                if plan.todo:
                    _run_jobs(db, engine, plan.todo, cfg.formats, options.subtitles, report, show_progress)
                if settled is None or report.interrupted:
                    break
                if on_round is not None and report.finished > before:
                    on_round(report)
                if not _wait(cfg.watch):
                    break
                files = _inputs(cfg)
            report.records = db.records(sorted(seen))
    except JobDBError as exc:  # it failed after it opened: one line, what was done stays recorded
        raise BatchError(str(exc)) from None
    return report


def _inputs(cfg: BatchConfig) -> list[Path]:
    try:
        return find_inputs(cfg.input_dir, cfg.recursive, cfg.globs)
    except InputError as exc:
        raise BatchError(str(exc)) from exc


def _wait(seconds: float) -> bool:
    """Sleep between two looks at a watched folder; False when a stop (Ctrl-C, SIGTERM) came meanwhile."""
    try:
        with StopSignals():
            time.sleep(seconds)
    except KeyboardInterrupt:
        return False
    return True


def _run_jobs(db: JobDB, engine, todo: list[Job], formats: list[str], layout: SubtitleOptions, report: BatchReport,
              show_progress: bool) -> None:
    engine.start()  # before our signal handlers: Ray installs its own while starting (once: later looks find it started)
    running: set[str] = set()
    bar = _Bar(len(todo), show_progress)
    try:
        with StopSignals() as stop, closing(engine.run(todo)) as events:
            try:
                for event in events:
                    with stop.shielded():
                        if isinstance(event, Started):
                            db.start([j.key for j in event.jobs])
                            running.update(j.key for j in event.jobs)
                            continue
                        error = _record(db, event, formats, layout)
                        running.discard(event.job.key)
                    report.outcomes[event.job.key] = "failed" if error else "done"
                    report.finished += 1
                    if error:
                        bar.write(f"transcribe: error: {error}")
                    bar.advance(event)
            except KeyboardInterrupt:
                report.interrupted = True
            finally:
                with stop.shielded(interrupt_after=False):
                    db.release(sorted(running))
    finally:
        bar.close()


def print_summary(records: list[JobRecord], file=None) -> None:
    """A table of the batch's files: state, audio duration, RTF, language, attempts, error."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="batch summary")
    for col in ("file", "state", "audio s", "RTF", "lang", "attempts", "error"):
        table.add_column(col, justify="right" if col in ("audio s", "RTF", "attempts") else "left", overflow="fold")
    for r in records:
        table.add_row(
            printable(r.rel),
            r.state,
            f"{r.duration:.1f}" if r.duration is not None and r.state == "done" else "",
            f"{r.rtf:.3f}" if r.rtf is not None and r.state == "done" else "",
            r.language or "",
            str(r.attempts),
            r.error or "",
        )
    Console(file=file or sys.stdout, width=160).print(table)
