"""The dynamic draft length of both speculative loops."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lookahead:
    """Draft length policy: grows after a fully accepted draft, shrinks after a rejection
    (transformers' "heuristic" schedule for assisted generation). Stateless: each loop keeps its
    rows' current ``k`` and asks :meth:`update` after every round."""

    initial: int = 4
    minimum: int = 1
    maximum: int = 12
    grow: int = 2
    shrink: int = 1

    def update(self, k: int, drafted: int, accepted: int) -> int:
        if drafted == 0:
            return k
        if accepted == drafted:
            return min(self.maximum, k + self.grow)
        return max(self.minimum, k - self.shrink)
