"""The proposer interface shared by every drafter of both speculative loops."""

from __future__ import annotations

from specwhisper.speculative.draft_steps import Drafts


class Drafter:
    """Proposes draft tokens (target vocabulary) for each active row of a batch.

    A drafter only proposes: the target verifies every token, so a drafter can be as crude as it
    likes without changing the output; only speed depends on it. The LLM post-edit decodes one
    sequence at a time: a batch of one.
    """

    name = "drafter"
    # True: the verify pass feeds [pending, d1..dk], so a fully accepted draft also earns the target's
    # next token. False: it feeds [pending, d1..dk-1] and only checks dk (a fully accepted draft leaves dk
    # pending for the next round): for drafters whose draft steps already run part of the target, so
    # that the last draft token's layers are never computed for nothing when it is rejected.
    bonus = True
    # True: each draft token is a pass of a model (a drafter model's, or the target's first layers); False: a
    # lookup on the host. A batch's round drafts as many passes as its longest draft
    # (``SpeculativeDecoder.lookahead_for``).
    drafts_by_passes = False

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        """Up to ``ks[i]`` tokens following ``contexts[i]`` (the row's generated tokens, prompt excluded)."""
        raise NotImplementedError

    def draft(self, contexts: list[list[int]], ks: list[int]) -> Drafts:
        """:meth:`propose`'s drafts as the verify pass takes them: a drafter model's stay on the device,
        to be read with the verify pass's verdict (``specwhisper.speculative.draft_steps``)."""
        return Drafts(self.propose(contexts, ks), ks)

    def select(self, keep: list[int]) -> None:
        """Keep only these active rows (the others finished)."""

    def end(self) -> None:
        """The batch is decoded: drop what refers to it (caches hold megabytes per row)."""


def early_exit_name(layers: int) -> str:
    """The name of a drafter made of the target's own first ``layers`` layers, for either model
    (Whisper's ``--draft early-exit:k``, the post-edit's ``layers:N``/``early-exit:N``)."""
    return f"early-exit:{layers}"


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (cache synchronisation)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
