"""Finding a batch's input files in a folder and naming their outputs."""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from specwhisper.pipeline.writers import file_name

# What a folder walk picks up when no --glob is given: what specwhisper.audio.loading reads (soundfile or ffmpeg).
AUDIO_EXTENSIONS = frozenset(
    ".wav .flac .ogg .oga .opus .mp3 .m4a .aac .wma .aif .aiff .webm .mp4 .m4v .mkv .mov .avi".split()
)


class InputError(Exception):
    """The input folder cannot be used; the message is one line."""


@dataclass(frozen=True)
class Job:
    """One input file of a batch and where its outputs go."""

    path: Path  # absolute
    rel: Path  # under the input folder
    out_dir: Path  # folder of its outputs (the input's subfolder mirrored under the output folder)
    stem: str  # outputs are out_dir/stem.<format>
    size: int
    mtime_ns: int
    text: Path | None = None  # the text to align to it (a corpus: ``with_texts``)

    @property
    def key(self) -> str:
        return str(self.path)


def _matches(rel: Path, globs: list[str]) -> bool:
    if not globs:
        return rel.suffix.lower() in AUDIO_EXTENSIONS
    return any(fnmatch.fnmatch(rel.name, g) or fnmatch.fnmatch(rel.as_posix(), g) for g in globs)


def find_inputs(root: Path, recursive: bool = False, globs: list[str] | None = None) -> list[Path]:
    """Files under ``root`` (its subfolders too when ``recursive``) that match ``globs``, or have an audio
    or video extension when none are given; hidden files and folders are skipped. Sorted by path."""
    if not root.is_dir():
        raise InputError(f"{root}: not a folder")
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        raise InputError(f"{exc.filename or root}: cannot read the folder ({exc.strerror or exc})")

    for folder, dirs, files in os.walk(root, onerror=fail):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        for name in files:
            path = Path(folder) / name
            if not name.startswith(".") and path.is_file() and _matches(path.relative_to(root), globs or []):
                found.append(path)
    return sorted(found)


def output_stems(files: list[Path]) -> list[str]:
    """Names for the outputs of files written to one folder: the stem when no other file has it
    (talk.wav -> talk.srt); else the whole name, so talk.wav and talk.mp3 give talk.wav.srt and
    talk.mp3.srt; and a name that still repeats (a/talk.wav, b/talk.wav) is numbered from its second
    file on (talk.wav-2.srt). None overwrites another."""
    stems = Counter(f.stem for f in files)
    seen: Counter[str] = Counter()
    out = []
    for f in files:
        name = f.stem if stems[f.stem] == 1 else f.name
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def recorded_outputs(written: dict[str, list[str]]) -> dict[str, str]:
    """Each output the job database records (``written``: each input path's outputs), its folder resolved
    (once per folder: a big batch has tens of thousands of outputs) -> the input it is the output of."""
    folders: dict[str, str] = {}
    out: dict[str, str] = {}
    for path, outputs in written.items():
        for output in outputs:
            folder, name = os.path.split(output)
            if folder not in folders:
                folders[folder] = os.path.realpath(folder)
            out[os.path.join(folders[folder], name)] = path
    return out


def settle_stems(jobs: list[Job], outputs: dict[str, str], formats: list[str] = ()) -> list[Job]:
    """The jobs with output names that hold across runs; ``outputs``: ``recorded_outputs``. A job whose
    outputs were written keeps their name (a file added beside it later does not rename it); another takes
    ``output_stems``' name unless another input's outputs, or another job here, have it in that folder
    already, or a file the database does not know holds one of its ``formats``' names there, then ``-2``,
    ``-3``, ...: two folders transcribed into one output folder (two recorders' ZOOM0001.WAV), a talk.mp3
    added beside a done talk.mp3.wav, or interview.mp3 transcribed into the folder that holds the user's own
    interview.txt never overwrite a finished transcript or someone's file. A job's own text to align is left
    to ``overwrites_text`` (refused, not renamed)."""
    owner: dict[tuple[str, str], str] = {}  # (folder, stem) -> the input whose outputs have it
    for output, path in outputs.items():
        folder, name = os.path.split(output)
        owner[folder, name.rsplit(".", 1)[0]] = path
    owned = {(path, folder): stem for (folder, stem), path in owner.items()}
    folders: dict[Path, str] = {}  # each job folder resolved once
    out: list[Job] = []
    for job in jobs:
        if job.out_dir not in folders:
            folders[job.out_dir] = os.path.realpath(job.out_dir)
        folder = folders[job.out_dir]
        stem = owned.get((job.key, folder))
        if stem is None:
            stem, n = job.stem, 1
            while owner.setdefault((folder, stem), job.key) != job.key or _someone_elses(job, folder, stem, formats):
                n += 1
                stem = f"{job.stem}-{n}"
        out.append(replace(job, stem=stem))
    return out


def _someone_elses(job: Job, folder: str, stem: str, formats: list[str]) -> bool:
    """Whether a file (or link) in ``folder`` has one of ``stem``'s output names, other than the job's text."""
    for fmt in formats:
        path = os.path.join(folder, file_name(stem, fmt))
        if os.path.lexists(path) and not (job.text is not None and os.path.realpath(path) == os.path.realpath(job.text)):
            return True
    return False


# the Montreal Forced Aligner's corpus layout (talk.wav beside talk.lab), and subtitles to bring in sync
TEXT_EXTENSIONS = (".lab", ".txt", ".srt", ".vtt")


def with_texts(jobs: list[Job], text_root: Path) -> list[Job]:
    """Each job with its text to align: under ``text_root``, in the audio's subfolder, its stem with the first
    of ``TEXT_EXTENSIONS`` there (the .lab, which its loader will not find, when none is)."""
    out = []
    for job in jobs:
        candidates = [text_root / job.rel.parent / (job.rel.stem + ext) for ext in TEXT_EXTENSIONS]
        found = next((c for c in candidates if c.is_file()), candidates[0])
        out.append(replace(job, text=Path(os.path.abspath(found))))
    return out


def make_jobs(root: Path, files: list[Path], out_root: Path) -> list[Job]:
    """A Job per file; outputs mirror the input's subfolders, named by ``output_stems`` per folder."""
    rels = [f.relative_to(root) for f in files]
    # absolute and resolved, as the job database keeps them: a rerun from another working directory, or through
    # another path to the same folders (a link to them), finds its outputs done
    root, out_root = Path(os.path.realpath(root)), Path(os.path.realpath(out_root))
    folders: dict[Path, list[Path]] = {}
    for rel in rels:
        folders.setdefault(rel.parent, []).append(rel)
    stems = {rel: stem for group in folders.values() for rel, stem in zip(group, output_stems(group))}
    jobs = []
    for rel in rels:
        path = root / rel
        try:
            st = path.stat()
        except FileNotFoundError:  # moved away since the folder was read (a watched folder's files come and go)
            continue
        jobs.append(Job(path, rel, out_root / rel.parent, stems[rel], st.st_size, st.st_mtime_ns))
    return jobs
