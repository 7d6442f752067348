"""The counters of speculative decoding, shared by the Whisper and the post-edit stats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Counts(Protocol):
    """What both loops count (``specwhisper.asr.types.DecodeStats`` and the post-edit's ``SpecStats`` extend ``SpeculativeCounts``)."""

    generated_tokens: int
    target_passes: int
    drafted_tokens: int
    accepted_tokens: int


@dataclass
class SpeculativeCounts:
    """Tokens generated, target passes, drafted and accepted tokens, and the ratios that matter."""

    generated_tokens: int = 0
    target_passes: int = 0  # forward passes of the target (a batched pass counts once per row)
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def tokens_per_target_pass(self) -> float:
        return self.generated_tokens / self.target_passes if self.target_passes else 0.0


def count_round(stats: Counts, drafted: int, accepted: int) -> None:
    """One row's verified draft."""
    stats.drafted_tokens += drafted
    stats.accepted_tokens += accepted
