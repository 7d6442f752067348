"""Shared by the browser tests (test_app*.py): `python app.py` in a subprocess, as a user starts it,
and Debian's chromium driven through Playwright (no browser download).

Screenshots are kept as test artifacts in $SPECWHISPER_ARTIFACTS (default: tests/artifacts/).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("SPECWHISPER_ARTIFACTS", ROOT / "tests" / "artifacts"))
START_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppUrl(str):
    """The running app's URL; ``log`` is the file its output goes to (quoted when a wait times out)."""
    log: Path


@contextmanager
def running_app(workdir: Path, *args: str) -> Iterator[AppUrl]:
    """The app's URL once it answers; its log (in ``workdir``) is shown if it dies or never answers."""
    port = free_port()
    log_path = workdir / "app.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), *args], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    url = AppUrl(f"http://127.0.0.1:{port}/")
    url.log = log_path
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"app.py exited:\n{log_path.read_text()}"
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"app.py did not answer in {START_TIMEOUT_S} s:\n{log_path.read_text()}"
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def chromium() -> Iterator[Callable]:
    """``launch(*flags)``: Debian's chromium with extra command-line flags."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed (make system-packages installs it)")
    with sync_playwright() as pw:
        yield lambda *flags: pw.chromium.launch(executable_path=executable, args=["--no-sandbox", *flags])


def fake_microphone_flags(wav: Path, loop: bool = True) -> list[str]:
    """Chromium's fake capture device playing ``wav`` (16-bit PCM) into the microphone, permission
    granted; without ``loop`` it plays once and then gives silence (Chromium's ``%noloop``)."""
    return ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}{'' if loop else '%noloop'}"]


def screenshot(pg, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    return path


def wait_for_text(pg, selector: str, text: str, timeout_ms: float, log: Path | None = None) -> None:
    """Wait for ``text`` in ``selector``; a timeout fails with what the page showed instead (its toasts,
    the element's text), a screenshot, and the tail of the app's ``log``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        # polled on a timer: the default polls on animation frames, which a page not in front may not paint
        pg.wait_for_function("([sel, text]) => (document.querySelector(sel)?.innerText || '').includes(text)",
                             arg=[selector, text], timeout=timeout_ms, polling=250)
    except PlaywrightTimeout:
        toasts = pg.locator(".toast-body").all_inner_texts()
        shown = pg.evaluate("sel => document.querySelector(sel)?.innerText ?? null", selector)
        try:
            shot = screenshot(pg, "timeout-" + re.sub(r"\W+", "-", selector).strip("-"))
        except PlaywrightTimeout as e:  # a page that paints no frame takes no screenshot either
            shot = f"(none: {str(e).splitlines()[0]})"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log and log.exists() else "(no log)"
        pytest.fail(f"{text!r} not in {selector} after {timeout_ms / 1000:.0f} s; it showed {shown!r}; "
                    f"toasts {toasts}; screenshot {shot}; app log tail:\n{tail}")
