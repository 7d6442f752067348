"""The greedy steps of one draft round, kept on the device until the round ends.

A drafter decides after each step which rows go on: a row ends at its draft budget, at end-of-text, or
when its own confidence falls. Reading each step's tokens to decide would make the host wait for the
device once per draft token (k waits a round, where the verify pass needs one). So the tokens stay on
the device, each step feeding the next; the host learns which rows ended as soon as the step's
end flags arrive (on the CPU at once; on a GPU when their non-blocking copy has landed, while later
steps run) and stops stepping those rows. The verify pass takes every row's picks as they are on the
device (:class:`StepDrafts`) and reads them with its verdict: one wait a round. A row the host learned
of late drafted a few tokens past its end: they are verified for nothing and cut off when read, so
the drafts are the same whenever the flags arrive.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specwhisper.hardware.device import HostCopy, on_device


def batch_column(tokens: torch.Tensor, rows: list[int], size: int) -> torch.Tensor:
    """The [size, 1] column of a step's input for a whole batch: ``tokens`` [n] (device) at ``rows``,
    zeros for the rows that do not draft (their step writes past their length, overwritten later);
    ``tokens`` of every row of the batch [size] are the column as they are."""
    if len(rows) == size or tokens.shape[0] == size:
        return tokens[:, None]
    column = torch.zeros((size, 1), dtype=tokens.dtype, device=tokens.device)
    column[on_device(rows, tokens.device), 0] = tokens
    return column


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
        ``rows`` and whether that row's draft ends with it; or of every row of the batch, the others'
        ignored). Returns the indices into ``rows`` of the rows that draft on: budget left, and not known
        to have ended."""
        self.steps.append((rows, tokens, ends))
        if self.watch:
            self.pending.append((rows, HostCopy(ends)))
            waiting = []
            for r, copy in self.pending:
                if copy.ready():
                    flags = copy.value.tolist()
                    self.ended.update(i for i, at in zip(r, self._places(r, len(flags))) if flags[at])
                else:
                    waiting.append((r, copy))
            self.pending = waiting
        n = len(self.steps)
        return [j for j, i in enumerate(rows) if n < self.budgets[i] and i not in self.ended]

    def _places(self, rows: list[int], size: int) -> list[int] | range:
        """Where each of ``rows`` sits in a step's ``size`` tokens: in order, or at its own index in a
        column of the whole batch."""
        return rows if size == len(self.budgets) else range(len(rows))

    def _flat(self) -> list[tuple[int, int]]:
        """Per pick, in the order of the steps: (row, its index in :meth:`values`'s tokens)."""
        out, offset = [], 0
        for rows, tokens, _ in self.steps:
            size = tokens.shape[0]
            out += [(i, offset + at) for i, at in zip(rows, self._places(rows, size))]
            offset += size
        return out

    def counts(self) -> list[int]:
        """Per row, how many tokens it picked (its draft has at most as many): known without a read."""
        n = [0] * len(self.budgets)
        for rows, _, _ in self.steps:
            for i in rows:
                n[i] += 1
        return n

    def matrix(self, device: torch.device | str) -> torch.Tensor:
        """Every row's picks in order on the device [rows, most picked] (zeros past a row's own)."""
        rows = len(self.budgets)
        if not self.steps:
            return torch.zeros((rows, 0), dtype=torch.long, device=device)
        tokens = torch.cat([t for _, t, _ in self.steps]).long()
        at, n = [], [0] * rows
        for i, flat in self._flat():
            at.append((i, n[i], flat))
            n[i] += 1
        out = tokens.new_zeros((rows, max(n)))
        where = on_device(at, tokens.device).reshape(-1, 3)
        out[where[:, 0], where[:, 1]] = tokens[where[:, 2]]
        return out

    def values(self) -> torch.Tensor | None:
        """What the host reads to know the round's drafts: every step's tokens, then its end flags
        (float32 [2 * picks]; token ids are exact in float32, below 2^24). None: no step ran."""
        if not self.steps:
            return None
        return torch.cat([torch.stack([t.float(), e.float()]) for _, t, e in self.steps], dim=1).flatten()

    def unpack(self, values: list[float]) -> tuple[list[list[int]], list[list[int]]]:
        """From what :meth:`values` held: per row, every token it picked, and its draft (those up to and
        with the first that ends it, at most its budget)."""
        rows = len(self.budgets)
        picks: list[list[int]] = [[] for _ in range(rows)]
        drafts: list[list[int]] = [[] for _ in range(rows)]
        half = len(values) // 2
        done = set()
        for i, at in self._flat():
            token = int(values[at])
            picks[i].append(token)
            if i not in done:
                drafts[i].append(token)
                if values[half + at] or len(drafts[i]) >= self.budgets[i]:
                    done.add(i)
        return picks, drafts


class Drafts:
    """A round's drafts, per row of the batch, as the verify pass takes them: known on the host (a
    lookup's, or a drafter's already read), or still on the device (:class:`StepDrafts`), read
    together with the verify pass's verdict: one wait a round."""

    def __init__(self, known: list[list[int]], most: list[int] | None = None):
        # ``most``: each row's budget; a draft re-tokenised into the target's vocabulary may come back longer
        self.known = known if most is None else [d[: max(0, k)] for d, k in zip(known, most)]

    def counts(self) -> list[int]:
        """Per row, the most tokens its draft may hold (exactly as many, when known)."""
        return [len(d) for d in self.known]

    def matrix(self, device: torch.device | str) -> torch.Tensor:
        """The drafts as target ids on ``device`` [rows, max(counts)] (any token past a row's draft)."""
        width = max(self.counts(), default=0)
        return on_device([d + [0] * (width - len(d)) for d in self.known], device, dtype=torch.long).reshape(len(self.known), width)

    def values(self) -> torch.Tensor | None:
        """What the host must read to know the drafts (None: nothing)."""
        return None

    def resolve(self, values: list[float] | None) -> list[list[int]]:
        """The drafts, from what :meth:`values` held."""
        return self.known

    def read(self) -> list[list[int]]:
        """The drafts, read now."""
        v = self.values()
        return self.resolve(None if v is None else v.tolist())


class StepDrafts(Drafts):
    """Drafts still on the device as a round's draft steps, in target ids. ``finish(picks, drafts)``
    (:meth:`DraftSteps.unpack`'s) brings the drafter's own bookkeeping up to date once they are read and
    returns the drafts."""

    def __init__(self, steps: DraftSteps, finish: Callable[[list[list[int]], list[list[int]]], list[list[int]]]):
        self.steps = steps
        self.finish = finish

    def counts(self) -> list[int]:
        return self.steps.counts()

    def matrix(self, device: torch.device | str) -> torch.Tensor:
        return self.steps.matrix(device)

    def values(self) -> torch.Tensor | None:
        return self.steps.values()

    def resolve(self, values: list[float] | None) -> list[list[int]]:
        return self.finish(*self.steps.unpack(values or []))
