"""What a post-edit did: per window of segments and in total (the decode counters included)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specwhisper.postedit.speculative import SpecStats


@dataclass
class TurnEdit:
    """What happened to one window of segments."""

    segments: list[int]  # indices into the transcript's segments
    speaker: str | None
    original: str
    proposed: str  # the LLM's output ('' when the window was skipped)
    accepted: bool
    reason: str  # why accepted/rejected
    change: float  # share of original words changed by the proposal
    tokens: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {
            "segments": self.segments,
            "speaker": self.speaker,
            "accepted": self.accepted,
            "reason": self.reason,
            "change": round(self.change, 4),
            "original": self.original,
            "proposed": self.proposed,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class PostEditReport:
    model: str
    drafter: str
    max_change: float
    turns: list[TurnEdit] = field(default_factory=list)
    stats: SpecStats = field(default_factory=SpecStats)
    seconds: float = 0.0

    @property
    def accepted(self) -> int:
        return sum(t.accepted for t in self.turns)

    @property
    def rejected(self) -> int:
        return sum(not t.accepted for t in self.turns)

    @property
    def tokens_generated(self) -> int:
        return self.stats.generated_tokens

    @property
    def target_passes(self) -> int:
        return self.stats.target_passes

    @property
    def acceptance_rate(self) -> float:
        return self.stats.acceptance_rate

    @property
    def tokens_per_target_pass(self) -> float:
        return self.stats.tokens_per_target_pass

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "drafter": self.drafter,
            "max_change": self.max_change,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "tokens_generated": self.tokens_generated,
            "target_passes": self.target_passes,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "tokens_per_target_pass": round(self.tokens_per_target_pass, 4),
            "seconds": round(self.seconds, 3),
            "speculative": self.stats.to_dict(),
            "turns": [t.to_dict() for t in self.turns],
        }
