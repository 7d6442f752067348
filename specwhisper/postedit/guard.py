"""The guard of a post-edit: accept an LLM's edit only when it keeps the transcript's content."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

from specwhisper.results.words import word_key


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of a longest common subsequence of two word lists (dynamic programming, O(len a * len b):
    a window has at most a few dozen words)."""
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0  # row[j - 1] of the previous line
        for j, y in enumerate(b, 1):
            cur = row[j]
            row[j] = prev + 1 if x == y else max(row[j], row[j - 1])
            prev = cur
    return row[-1]


def _keys(words: Sequence[str]) -> list[str]:
    return [k for k in (word_key(w) for w in words)]


@dataclass
class GuardResult:
    ok: bool
    reason: str
    change: float


def check_edit(
    original: str, edited: str, max_change: float = 0.3, max_run: int = 2, min_similarity: float = 0.5
) -> GuardResult:
    """Accept an edit only if it keeps the content: few changed words, no long inserted/dropped runs.

    ``change`` = edited words (substituted, inserted or deleted, compared without case/punctuation)
    / original words. A run of more than ``max_run`` inserted (invented) or deleted (dropped) words
    is rejected whatever the share, and so is a replaced block that does not look like the words it
    replaces (character similarity below ``min_similarity``): recognition fixes sound alike.
    """
    o_words, e_words = original.split(), edited.split()
    if not e_words:
        return GuardResult(False, "empty edit", 1.0)
    if "\n" in edited.strip():
        return GuardResult(False, "edit is not a single transcript line", 1.0)
    ok_, ek = [k for k in _keys(o_words) if k], [k for k in _keys(e_words) if k]
    if not ok_:
        return GuardResult(edited.strip() == original.strip(), "nothing to edit", 0.0)
    sm = difflib.SequenceMatcher(a=ok_, b=ek, autojunk=False)
    changed = 0
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        changed += max(i2 - i1, j2 - j1)
        if op == "insert" and j2 - j1 > max_run:
            return GuardResult(False, f"invents content: {' '.join(e_words[j1:j2])!r}", changed / len(ok_))
        if op == "delete" and i2 - i1 > max_run:
            return GuardResult(False, f"drops content: {' '.join(ok_[i1:i2])!r}", changed / len(ok_))
        if op == "replace":
            if abs((j2 - j1) - (i2 - i1)) > max_run:
                return GuardResult(False, f"rewrites {i2 - i1} words as {j2 - j1}", changed / len(ok_))
            a, b = "".join(ok_[i1:i2]), "".join(ek[j1:j2])
            if difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio() < min_similarity:
                # a recognition fix looks like what was heard ("there" -> "their"); this is new content
                return GuardResult(
                    False, f"replaces {' '.join(ok_[i1:i2])!r} with {' '.join(ek[j1:j2])!r}", changed / len(ok_)
                )
    share = changed / len(ok_)
    if share > max_change:
        return GuardResult(False, f"changes {share:.0%} of words (limit {max_change:.0%})", share)
    if edited.strip() == original.strip():
        return GuardResult(True, "unchanged", 0.0)
    if changed == 0:
        return GuardResult(True, "casing/punctuation", 0.0)
    return GuardResult(True, f"changes {share:.0%} of words", share)
