"""The acceptance rule of exact greedy speculative decoding, for both loops.

The target scores the pending token and the draft in one pass; ``greedy[j]`` is its own greedy token
after ``draft[:j]``. The draft is kept while it equals those tokens, and the target's token at the
first difference (or after the whole draft) comes for free: the kept tokens are exactly what plain
greedy decoding would have produced.
"""

from __future__ import annotations

from collections.abc import Sequence


def accepted_length(draft: Sequence[int], greedy: Sequence[int]) -> int:
    """How many leading draft tokens equal the target's greedy tokens."""
    n = 0
    limit = min(len(draft), len(greedy))
    while n < limit and draft[n] == greedy[n]:
        n += 1
    return n


def accept(draft: Sequence[int], greedy: Sequence[int]) -> tuple[int, list[int]]:
    """(accepted draft tokens, the tokens to emit: the accepted ones and the target's next).

    ``greedy`` may be one shorter than ``draft + 1`` when the last draft token was only checked, not
    fed (a drafter without the bonus token): a fully accepted draft then emits just the draft."""
    n = accepted_length(draft, greedy)
    return n, list(greedy[: n + 1])
