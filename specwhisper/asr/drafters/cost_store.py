"""``--draft auto``'s measured costs kept on disk, so that a process does not time the passes again.

Measuring costs a process some 0.5 s at batch size 1 and 1.5 s at batch 8 for base on a 2-core CPU (a
third of an 11-second clip's transcription, 3 s of a 3-minute file's 17). The costs depend on the
device, the model and how it is run, not on the audio: they are kept in ``auto-costs.json`` in the cache
folder, per setting (device, threads, model, dtype, candidates) and batch size, and timed again once they
are a week old. The choice stays exact whatever the costs say; only its speed follows them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from specwhisper.asr.drafters.auto import Costs

MAX_AGE_S = 7 * 86400


class CostStore:
    """The costs of one setting (``key``: what they depend on, in words) by batch size, in ``path``."""

    def __init__(self, path: Path, key: str, max_age_s: float = MAX_AGE_S):
        self.path, self.key, self.max_age_s = Path(path), key, max_age_s

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):  # absent, or damaged: measured again and rewritten
            return {}

    def _setting(self, data: dict) -> dict:
        setting = data.get(self.key)
        return setting if isinstance(setting, dict) else {}

    def _fresh(self, entry, now: float) -> bool:
        try:
            return 0 <= now - float(entry["measured_at"]) <= self.max_age_s
        except (KeyError, TypeError, ValueError):
            return False

    def get(self, batch: int) -> Costs | None:
        entry = self._setting(self._read()).get(str(batch))
        try:
            if not self._fresh(entry, time.time()):
                return None
            width = entry.get("width")
            if not (width is None or (isinstance(width, int) and width > 1)):
                return None
            return Costs(step=float(entry["step"]), verify={int(w): float(s) for w, s in entry["verify"].items()},
                         draft={n: float(s) for n, s in entry["draft"].items()}, width=width)
        except (KeyError, TypeError, ValueError, AttributeError):  # not what put() writes: timed again
            return None

    def put(self, batch: int, costs: Costs) -> None:
        """Add ``costs`` (beside what other processes wrote); a cache that cannot be written is left alone."""
        data, now = self._read(), time.time()
        data[self.key] = {**self._setting(data), str(batch): {**asdict(costs), "measured_at": now}}
        data = {key: kept for key, setting in data.items() if isinstance(setting, dict)  # what is timed again anyway goes
                if (kept := {b: e for b, e in setting.items() if self._fresh(e, now)})}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".auto-costs.", suffix=".partial")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)  # readers see the old file or the new one, never half of one
        except OSError:
            Path(tmp).unlink(missing_ok=True)
