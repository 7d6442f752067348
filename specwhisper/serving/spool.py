"""The server's folder for uploads in flight: each request body is written to its own file there
and removed when the request ends, whatever its outcome.

A killed server cannot remove its files, so every file's name carries its owner (process id and
start time); a server starting up removes the files of owners that are no longer running.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".upload"


def default_spool_dir() -> Path:
    return Path(tempfile.gettempdir()) / "specwhisper-uploads"


def _owner_tag(pid: int) -> str | None:
    """``pid.start-time`` of a running process (the start time tells a reused pid apart); None when
    no such process runs. Without /proc, the pid alone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None if Path("/proc/self").exists() else _pid_alive(pid)
    except OSError:
        return str(pid)
    fields = stat.rsplit(")", 1)[-1].split()
    return f"{pid}.{fields[19]}" if len(fields) > 19 else str(pid)


def _pid_alive(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return str(pid)


@dataclass(frozen=True)
class Spool:
    folder: Path

    @classmethod
    def open(cls, folder: Path) -> Spool:
        """Create ``folder`` if needed and remove what dead servers left in it."""
        folder.mkdir(parents=True, exist_ok=True)
        spool = cls(folder)
        spool.sweep()
        return spool

    def sweep(self) -> list[Path]:
        """Remove upload files whose owner process is gone; returns them."""
        removed = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            tag = path.name.split("-", 1)[0]
            pid = tag.split(".", 1)[0]
            if pid.isdigit() and _owner_tag(int(pid)) != tag:
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def new_path(self) -> Path:
        """A fresh, unique file name owned by this process (created empty, readable by us only)."""
        tag = _owner_tag(os.getpid()) or str(os.getpid())
        path = self.folder / f"{tag}-{secrets.token_hex(8)}{SUFFIX}"
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return path

    def files(self) -> list[Path]:
        return sorted(self.folder.glob(f"*{SUFFIX}"))
