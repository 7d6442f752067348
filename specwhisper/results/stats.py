"""Speed facts of a decode: the speculative core's counters and Whisper's timings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


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


@dataclass
class DecodeStats(SpeculativeCounts):
    """Counters of one decode (the speculative core's counts first: tokens emitted after the prompt,
    target passes, drafted and accepted tokens; these stay zero for plain decoding), then Whisper's."""

    encoder_seconds: float = 0.0
    decoder_seconds: float = 0.0
    alignment_seconds: float = 0.0
    fallback_passes: int = 0  # target passes of temperature-fallback decodes (plain sampling, no drafter)
    fallback_seconds: float = 0.0  # their time, also counted in decoder_seconds
    # passes as the device runs them: a batch's step, verify pass or prompt pass counts once, whatever its rows
    # (on a GPU a step of many rows costs about what a step of one does, so these price a decode there)
    decoder_steps: int = 0
    fallback_steps: int = 0  # of the temperature-fallback decodes, not in decoder_steps
    loops_cut: int = 0  # fallback draws stopped where their text had begun to loop
    redecoded_chunks: int = 0  # chunk tails decoded again because a decode stopped before the speech did
    resumed_chunks: int = 0  # chunks an interrupted run finished, read from its checkpoint (specwhisper.pipeline.checkpoint)

    def merge(self, other: DecodeStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def scaled(self, share: float) -> DecodeStats:
        """A ``share`` of these counters (counts rounded): the part of a shared decode one batch or file is charged."""
        return DecodeStats(**{f.name: (round if f.type in ("int", int) else float)(getattr(self, f.name) * share)
                              for f in fields(self)})

    @property
    def drafted(self) -> bool:
        """Whether any drafter proposed a token (``--draft none``, or ``auto`` deciding on plain decoding: not)."""
        return self.drafted_tokens > 0

    def to_dict(self) -> dict:
        """The counters; the two speculative ratios are null when no drafter ran, since an acceptance of 0
        and 0.99 tokens per pass would read as a drafter that failed."""
        d = asdict(self)
        d["drafter_ran"] = self.drafted
        d["acceptance_rate"] = round(self.acceptance_rate, 4) if self.drafted else None
        d["tokens_per_target_pass"] = round(self.tokens_per_target_pass, 4) if self.drafted else None
        return d


def share_stats(batch: DecodeStats, files: list[int], generated: list[int], into: list[DecodeStats]) -> None:
    """Split a shared batch's counters over its files by their generated tokens (rows when none)."""
    weights: dict[int, float] = {}
    for i, g in zip(files, generated):
        weights[i] = weights.get(i, 0.0) + g + 1  # +1: end of text, so a silent row still counts
    total = sum(weights.values())
    for i, w in weights.items():
        share = w / total
        into[i].generated_tokens += sum(g for f, g in zip(files, generated) if f == i)
        into[i].target_passes += round(batch.target_passes * share)
        into[i].drafted_tokens += round(batch.drafted_tokens * share)
        into[i].accepted_tokens += round(batch.accepted_tokens * share)
        into[i].decoder_seconds += batch.decoder_seconds * share
        into[i].alignment_seconds += batch.alignment_seconds * share
        into[i].fallback_passes += round(batch.fallback_passes * share)
        into[i].decoder_steps += round(batch.decoder_steps * share)
        into[i].fallback_steps += round(batch.fallback_steps * share)
        into[i].loops_cut += round(batch.loops_cut * share)
        into[i].fallback_seconds += batch.fallback_seconds * share
