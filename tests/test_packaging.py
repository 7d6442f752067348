"""Building the project gives one wheel with one top-level package, `specwhisper`, its data files,
the `transcribe` command, and no warning from the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_wheel_holds_one_package_and_builds_without_warnings(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "specwhisper", src / "specwhisper", ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    log = (run.stdout + run.stderr).splitlines()
    # pip's own environment may disable byte-compiling: that line is about this machine, not the project
    warnings = [line for line in log if ("warning" in line.lower() or "!!" in line) and "byte-compiling" not in line]
    assert not warnings, "\n".join(warnings)
    (wheel,) = (tmp_path / "dist").glob("specwhisper-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"specwhisper"}
    for data in ("specwhisper/diarize/params.json", "specwhisper/asr/drafters/adapters/base.json", "specwhisper/asr/drafters/adapters/base-k3.safetensors"):
        assert data in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "transcribe = specwhisper.serving.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()
