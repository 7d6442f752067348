"""The batch job database: one SQLite file in the output folder records every input file's job.

A row per input file: its state (pending, running, done, failed), content hash, the settings its
outputs were made with, the written output paths, duration/RTF, the last error, and how often it
was started (attempts) and finished (completions) since its content or settings last changed.
One process writes it at a time (an exclusive lock file beside it); readers may look at any time.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

DB_NAME = ".transcribe-jobs.sqlite3"
STATES = ("pending", "running", "done", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    rel TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT,
    settings TEXT NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    outputs TEXT NOT NULL DEFAULT '[]',
    duration REAL,
    seconds REAL,
    rtf REAL,
    language TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    completions INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL
)
"""


class JobDBError(Exception):
    """The job database cannot be opened or used; the message is one line."""


@dataclass
class JobRecord:
    path: str  # absolute input path (the key)
    rel: str  # path under the input folder
    size: int
    mtime_ns: int
    sha256: str | None
    settings: str  # canonical JSON of what shapes the outputs
    state: str
    error: str | None = None
    outputs: list[str] = field(default_factory=list)
    duration: float | None = None
    seconds: float | None = None
    rtf: float | None = None
    language: str | None = None
    attempts: int = 0
    completions: int = 0
    updated: float = 0.0

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> JobRecord:
        d = dict(row)
        d["outputs"] = json.loads(d["outputs"] or "[]")
        return cls(**d)


class JobDB:
    """Opens (creating) ``folder/.transcribe-jobs.sqlite3`` and holds its writer lock until closed."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / DB_NAME
        try:
            self._lock = open(self.path.with_name(DB_NAME + ".lock"), "a")
        except OSError as exc:
            raise JobDBError(f"{folder}: cannot write the job database there ({exc.strerror or exc})") from exc
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.close()
            raise JobDBError(f"{self.path}: another batch is running on this output folder") from exc
        try:
            self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            self._lock.close()
            raise JobDBError(f"{self.path}: cannot open the job database ({exc})") from exc

    def close(self) -> None:
        self._conn.close()
        self._lock.close()

    def __enter__(self) -> JobDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write(self, sql: str, params: tuple | list = ()) -> None:
        self._write_many(sql, [params])

    def _write_many(self, sql: str, rows: list[tuple | list]) -> None:
        try:
            with self._conn:  # one transaction; committed when the block ends, rolled back on error
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def _read(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: sqlite3.Error) -> JobDBError:
        """A database that opened and then failed (a full disk, a corrupt page, another program's lock held
        past the 30 s timeout), as one line."""
        return JobDBError(f"{self.path}: the job database failed ({exc}); the files done so far are recorded")

    def get(self, path: str) -> JobRecord | None:
        rows = self._read("SELECT * FROM files WHERE path = ?", (path,))
        return JobRecord.from_row(rows[0]) if rows else None

    def records(self, paths: list[str] | None = None) -> list[JobRecord]:
        rows = self._read("SELECT * FROM files ORDER BY rel")
        records = [JobRecord.from_row(r) for r in rows]
        if paths is None:
            return records
        wanted = set(paths)
        return [r for r in records if r.path in wanted]

    def recover(self) -> int:
        """Rows left 'running' by a process that died go back to 'pending'; returns how many."""
        n = self._read("SELECT COUNT(*) FROM files WHERE state = 'running'")[0][0]
        if n:
            self._write("UPDATE files SET state = 'pending', updated = ? WHERE state = 'running'", (time.time(),))
        return n

    def queue(self, path: str, rel: str, size: int, mtime_ns: int, sha256: str | None, settings: str, new_job: bool) -> None:
        """Make ``path`` pending; ``new_job`` (new or changed content/settings) resets its counters."""
        now = time.time()
        if new_job:
            self._write(
                "INSERT OR REPLACE INTO files (path, rel, size, mtime_ns, sha256, settings, state, updated) "
                "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)",
                (path, rel, size, mtime_ns, sha256, settings, now),
            )
        else:
            self._write(
                "UPDATE files SET rel = ?, size = ?, mtime_ns = ?, state = 'pending', updated = ? WHERE path = ?",
                (rel, size, mtime_ns, now, path),
            )

    def touch(self, path: str, size: int, mtime_ns: int) -> None:
        """Same content under a new size/mtime stamp: keep the row, remember the stamp."""
        self._write("UPDATE files SET size = ?, mtime_ns = ?, updated = ? WHERE path = ?", (size, mtime_ns, time.time(), path))

    def start(self, paths: list[str]) -> None:
        now = time.time()
        self._write_many("UPDATE files SET state = 'running', attempts = attempts + 1, updated = ? WHERE path = ?",
                         [(now, p) for p in paths])

    def release(self, paths: list[str]) -> None:
        """Interrupted: running rows among ``paths`` go back to pending (their work is redone)."""
        now = time.time()
        self._write_many("UPDATE files SET state = 'pending', updated = ? WHERE path = ? AND state = 'running'",
                         [(now, p) for p in paths])

    def done(self, path: str, sha256: str | None, outputs: list[str], duration: float, seconds: float, rtf: float,
             language: str | None) -> None:
        self._write(
            "UPDATE files SET state = 'done', error = NULL, sha256 = COALESCE(?, sha256), outputs = ?, duration = ?, "
            "seconds = ?, rtf = ?, language = ?, completions = completions + 1, updated = ? WHERE path = ?",
            (sha256, json.dumps(outputs), duration, seconds, rtf, language, time.time(), path),
        )

    def failed(self, path: str, sha256: str | None, error: str) -> None:
        self._write(
            "UPDATE files SET state = 'failed', error = ?, sha256 = COALESCE(?, sha256), outputs = '[]', updated = ? "
            "WHERE path = ?",
            (error, sha256, time.time(), path),
        )


def file_sha256(path: str | os.PathLike, block: int = 1 << 20) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()
