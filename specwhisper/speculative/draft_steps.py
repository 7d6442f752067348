"""The greedy steps of one draft round, kept on the device until the round ends.

A drafter decides after each step which rows go on: a row ends at its draft budget, at end-of-text, or
when its own confidence falls. Reading each step's tokens to decide would make the host wait for the
device once per draft token (k waits a round, where the verify pass needs one). So the tokens stay on
the device, each step feeding the next; the host learns which rows ended as soon as the step's
end flags arrive (on the CPU at once; on a GPU when their non-blocking copy has landed, while later
steps run), stops stepping those rows, and reads every step's tokens once, when no row goes on. A row
the host learned of late drafted a few tokens past its end: they are cut off here, so the drafts are
the same whenever the flags arrive.
"""

from __future__ import annotations

import torch

from specwhisper.hardware.device import HostCopy


class DraftSteps:
    """One round's draft steps. ``budgets``: per row of the batch, the most tokens it may draft.
    ``watch``: learn of ended rows while drafting (False: only from the budgets, as on a device whose
    copies never arrive in time)."""

    def __init__(self, budgets: list[int], watch: bool = True):
        self.budgets = budgets
        self.watch = watch
        self.steps: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []  # (rows, tokens, ends)
        self.pending: list[tuple[list[int], HostCopy]] = []
        self.ended: set[int] = set()

    def first(self) -> list[int]:
        """The rows that draft at all."""
        return [i for i, n in enumerate(self.budgets) if n > 0]

    def add(self, rows: list[int], tokens: torch.Tensor, ends: torch.Tensor) -> list[int]:
        """Record a step: ``tokens`` and ``ends`` (device tensors: the step's greedy token of each of
        ``rows`` and whether that row's draft ends with it). Returns the indices into ``rows`` of the rows
        that draft on: budget left, and not known to have ended."""
        self.steps.append((rows, tokens, ends))
        if self.watch:
            self.pending.append((rows, HostCopy(ends)))
            waiting = []
            for r, copy in self.pending:
                if copy.ready():
                    self.ended.update(i for i, e in zip(r, copy.value.tolist()) if e)
                else:
                    waiting.append((r, copy))
            self.pending = waiting
        n = len(self.steps)
        return [j for j, i in enumerate(rows) if n < self.budgets[i] and i not in self.ended]

    def read(self) -> tuple[list[list[int]], list[list[int]]]:
        """The round's one host read: per row, every token it picked, and its draft (those up to and with
        the first that ends it, at most its budget)."""
        rows = len(self.budgets)
        picks: list[list[int]] = [[] for _ in range(rows)]
        drafts: list[list[int]] = [[] for _ in range(rows)]
        if not self.steps:
            return picks, drafts
        # token ids are exact in float32 (below 2^24)
        tokens, ends = torch.cat([torch.stack([t.float(), e.float()]) for _, t, e in self.steps], dim=1).tolist()
        at, done = 0, set()
        for step_rows, _, _ in self.steps:
            for i in step_rows:
                token = int(tokens[at])
                picks[i].append(token)
                if i not in done:
                    drafts[i].append(token)
                    if ends[at] or len(drafts[i]) >= self.budgets[i]:
                        done.add(i)
                at += 1
        return picks, drafts
