"""The process's CPU thread policy, chosen by measurement (bench/longform.py).

Three settings, each measured on this project's 2-core CPU, quiet and next to a competing load:

- OpenMP workers wait passively (``OMP_WAIT_POLICY=PASSIVE``). torch's OpenMP runtime spins its idle
  workers by default; next to another busy process each of the thousands of small operations of a
  decode then waits for a spinning thread that has lost its core. GNU OpenMP reads the policy once,
  when torch is first imported, so ``set_wait_policy`` runs when the ``specwhisper`` package is imported,
  before any module of ours imports torch (a user's own setting wins).
  Measured against the alternatives (a 3-minute file, 2 threads, interleaved): GNU OpenMP's own 3 ms spin
  was 10% faster quiet (24.7-26.6 s wall against 28.2-28.7) and 2.5x slower next to 4 busy
  processes (183 s against 68-74); shorter spins (GOMP_SPINCOUNT 2000-10000) 5-8% faster quiet and
  15-20% slower loaded. Spinning with the thread count dropped to the free cores before each batch
  (a governor reading ``/proc/stat``) kept the loaded run from collapsing but took 97 s against
  passive's 72: one thread gets a smaller share of a contended CPU than two passive ones. A 10% gain
  on a quiet machine did not pay for that.
- The VAD runs on one thread (``one_thread``): its operations are too small to share.
- numpy's OpenBLAS runs on one thread (feature extraction, alignment): its workers spin as well.

``configure(threads)`` applies the count every entry point takes as ``--threads`` (default: torch's
own, one per core).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def set_wait_policy() -> None:
    """Passive OpenMP waiting unless the user chose a policy; only effective before torch is imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def check_threads(threads: int | None) -> None:
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")


def blas_one_thread() -> None:
    """Run numpy's OpenBLAS on one thread, unless the user chose a count.

    Why: OpenBLAS worker threads spin-wait after each call, beside torch's own threads. When the
    output heads still ran through numpy, a 30-matrix product took 233 ms instead of 5.8 ms with
    another job on this 2-core CPU; feature extraction and alignment still call it. OpenBLAS's
    thread count is per process, so this is too."""
    if os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def configure(threads: int | None = None) -> int:
    """Use ``threads`` torch threads (None: torch's default) and one OpenBLAS thread; returns the count."""
    import torch

    check_threads(threads)
    if threads is not None:
        torch.set_num_threads(threads)
    blas_one_thread()
    return torch.get_num_threads()


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one torch thread, then restore the count (torch's setting is per process)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
