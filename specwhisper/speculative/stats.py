"""Counting a speculative round, for the Whisper and the post-edit loops (their counters extend
``specwhisper.results.stats.SpeculativeCounts``)."""

from __future__ import annotations

from typing import Protocol


class Counts(Protocol):
    """What both loops count (``specwhisper.results.stats.DecodeStats`` and the post-edit's ``SpecStats`` extend ``SpeculativeCounts``)."""

    generated_tokens: int
    target_passes: int
    drafted_tokens: int
    accepted_tokens: int


def count_round(stats: Counts, drafted: int, accepted: int) -> None:
    """One row's verified draft."""
    stats.drafted_tokens += drafted
    stats.accepted_tokens += accepted
