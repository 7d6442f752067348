"""LLM post-editing of transcripts: casing, punctuation, obvious recognition errors.

Each speaker turn is edited in windows of whole segments by an instruction-tuned LLM decoded greedily
and speculatively (see :mod:`specwhisper.postedit.speculative`; every drafter gives the target's own greedy
output). A guard keeps the original text when the edit changes too many words, drops or invents
content, or cannot be mapped back onto the segments; accepted edits get word timings re-aligned from
the original words.

Public API (used by the CLI and UI)::

    editor = load_post_editor(model=None, drafter="copy", max_change=0.3, device="cpu")
    new_transcript, report = editor.edit_transcript(transcript, progress=None)
"""

from __future__ import annotations

import copy
import difflib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from specwhisper.asr.types import Segment, Transcript, Word
from specwhisper.postedit.models import DEFAULT_LLM, load_llm
from specwhisper.postedit.speculative import (
    CopyDrafter,
    Lookahead,
    ModelDrafter,
    SpecStats,
    UniversalDrafter,
    _new_cache,
    _forward,
    parse_drafter,
    same_tokenizer,
    speculative_generate,
    truncated_drafter,
)

Progress = Callable[[str, float], None]

INSTRUCTION = "Rewrite with proper punctuation and capitalization:\n"
# One worked example (not from the eval set) in the shared, KV-cached prefix: measured on the public
# English set it doubles how often SmolLM2-135M copies faithfully (12 of 24 windows pass the guard
# instead of 9 with the bare instruction; two examples or a system prompt did worse).
EXAMPLE = (
    "so we met on tuesday and um the budget was approved i think by the board",
    "So we met on Tuesday and, um, the budget was approved, I think, by the board.",
)


# ------------------------------------------------------------------------------------------ report


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


# ------------------------------------------------------------------------------------------ guard


def word_key(w: str) -> str:
    """Comparison form of a word: lower case, letters and digits only."""
    return re.sub(r"[\W_]+", "", w.lower())


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
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


# ------------------------------------------------------------------------------------ re-alignment


@dataclass
class _Unit:
    """One original word with its segment and timing (synthetic when a segment has no words)."""

    seg: int
    start: float
    end: float
    text: str
    probability: float | None
    speaker: str | None


def _units(segments: Sequence[Segment], idx: Sequence[int]) -> list[_Unit]:
    out = []
    for i in idx:
        s = segments[i]
        if s.words:
            out += [_Unit(i, w.start, w.end, w.text, w.probability, w.speaker or s.speaker) for w in s.words]
        else:  # spread the segment's words evenly (only used to assign edited words to segments)
            ws = s.text.split()
            step = (s.end - s.start) / max(1, len(ws))
            out += [_Unit(i, s.start + k * step, s.start + (k + 1) * step, w, None, s.speaker) for k, w in enumerate(ws)]
    return out


def realign(units: Sequence[_Unit], edited: str) -> list[_Unit]:
    """Edited words with timings/segments taken from the original words they align to.

    Equal words keep their timing; a replaced block shares the original block's span in proportion
    to character length; an inserted word sits at the end of the word before it (zero length).
    """
    e_words = edited.split()
    ok = [word_key(u.text) for u in units]
    ek = [word_key(w) for w in e_words]
    out: list[_Unit] = []
    sm = difflib.SequenceMatcher(a=ok, b=ek, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            for a, b in zip(range(i1, i2), range(j1, j2)):
                u = units[a]
                out.append(_Unit(u.seg, u.start, u.end, e_words[b], u.probability, u.speaker))
        elif op == "replace":
            block = units[i1:i2]
            t0, t1 = block[0].start, block[-1].end
            lens = [max(1, len(w)) for w in e_words[j1:j2]]
            total, acc = sum(lens), 0
            probs = [u.probability for u in block if u.probability is not None]
            for b, n in zip(range(j1, j2), lens):
                s = t0 + (t1 - t0) * acc / total
                acc += n
                e = t0 + (t1 - t0) * acc / total
                mid = (acc - n / 2) / total  # which original word this one overlaps most
                u = block[min(len(block) - 1, int(mid * len(block)))]
                out.append(_Unit(u.seg, s, e, e_words[b], min(probs) if probs else None, u.speaker))
        elif op == "insert":
            u = units[i1 - 1] if i1 > 0 else units[0]
            t = u.end if i1 > 0 else u.start
            for b in range(j1, j2):
                out.append(_Unit(u.seg, t, t, e_words[b], None, u.speaker))
        # delete: the words are gone
    return out


def _alignment_ok(segments: Sequence[Segment], idx: Sequence[int], units: Sequence[_Unit]) -> str | None:
    """None if the re-aligned words still fit their segments, else why not."""
    by_seg: dict[int, list[_Unit]] = {i: [] for i in idx}
    for u in units:
        by_seg[u.seg].append(u)
    allowed = {i: {w.speaker or segments[i].speaker for w in segments[i].words} | {segments[i].speaker} for i in idx}
    prev = -1.0
    for i in idx:
        s, us = segments[i], by_seg[i]
        if s.text.strip() and not us:
            return f"segment {i} would lose all its words"
        for u in us:
            if u.start < prev - 1e-6 or u.end < u.start - 1e-6:
                return f"timings out of order in segment {i}"
            if s.words and (u.start < s.words[0].start - 1e-3 or u.end > s.words[-1].end + 1e-3):
                return f"word outside segment {i}"
            if u.speaker not in allowed[i]:
                return f"speaker changed in segment {i}"
            prev = u.start
    return None


# ------------------------------------------------------------------------------------------ editor


def _is_upper(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(c.isupper() for c in letters) / len(letters) > 0.8


def _windows(segments: Sequence[Segment], max_words: int) -> list[list[int]]:
    """Consecutive segments of one speaker, cut into windows of at most ``max_words`` words."""
    out: list[list[int]] = []
    cur: list[int] = []
    n = 0
    for i, s in enumerate(segments):
        w = len(s.text.split())
        if w == 0:
            continue
        if cur and (segments[cur[-1]].speaker != s.speaker or n + w > max_words):
            out.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += w
    if cur:
        out.append(cur)
    return out


_PUNCTUATION = ". , ? ! ; : ' \" - ( ) ... .\" ,\" 's n't"


def draft_vocabulary(tokenizer, source: str, extra_ids: Sequence[int | None] = ()) -> list[int]:
    """Token ids a model drafter may propose for an edit of ``source``: its words in the casings an
    edit uses, punctuation, and end-of-turn ids. Only the drafter is restricted; the output stays exact."""
    words = source.split()
    variants = [source, source.lower(), " ".join(w[:1].upper() + w[1:] for w in words), _PUNCTUATION]
    ids = {int(t) for t in extra_ids if t is not None}
    for v in variants:
        ids.update(int(t) for t in tokenizer.encode(v, add_special_tokens=False))
        ids.update(int(t) for t in tokenizer.encode(" " + v, add_special_tokens=False))
    return sorted(ids)


class PostEditor:
    """Post-edits transcripts with a causal LM; decoding is greedy, exact and speculative."""

    def __init__(
        self,
        model,
        tokenizer,
        drafter: str | None = "copy",
        drafter_model=None,
        drafter_tokenizer=None,
        max_change: float = 0.3,
        model_name: str = DEFAULT_LLM,
        max_window_words: int = 40,
        lookahead: Lookahead | None = None,
        prune_drafter_vocab: bool = True,
        stop_when_rejected: bool = True,
    ):
        self.model = model
        self.stop_when_rejected = stop_when_rejected
        self.prune_drafter_vocab = prune_drafter_vocab
        self.tokenizer = tokenizer
        self.max_change = max_change
        self.model_name = model_name
        self.max_window_words = max_window_words
        self.drafter_spec = parse_drafter(drafter)
        self.drafter_name = drafter or "none"
        self.drafter_model = drafter_model
        self.drafter_tokenizer = drafter_tokenizer
        self.universal = drafter_model is not None and not same_tokenizer(tokenizer, drafter_tokenizer or tokenizer)
        self._lookahead = lookahead
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        self.eos_ids = [t for t in {end, tokenizer.eos_token_id} if t is not None]
        self.end_ids = [end if end is not None else tokenizer.eos_token_id]
        # KV cache of the instruction prefix shared by every window
        self._prefix_ids = self._prompt_ids("alpha")[: self._prefix_len()]
        self._prefix_cache = None

    # ---- prompts
    def _prompt_ids(self, text: str) -> list[int]:
        msgs = [
            {"role": "user", "content": INSTRUCTION + EXAMPLE[0]},
            {"role": "assistant", "content": EXAMPLE[1]},
            {"role": "user", "content": INSTRUCTION + text},
        ]
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(t) for t in ids]
        shot = f"{INSTRUCTION}{EXAMPLE[0]}\n{EXAMPLE[1]}\n\n"
        return list(self.tokenizer.encode(shot + INSTRUCTION + text + "\n", add_special_tokens=True))

    def _prefix_len(self) -> int:
        a, b = self._prompt_ids("alpha"), self._prompt_ids("omega")
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return max(0, n - 1)  # keep a margin: the text's first token may merge with the last prefix token

    def _cache_for(self, prompt: list[int]):
        """(cache, prefix_len) holding the instruction prefix's KV when the prompt starts with it."""
        p = len(self._prefix_ids)
        if p < 2 or prompt[:p] != self._prefix_ids:
            return None, 0
        if self._prefix_cache is None:
            self._prefix_cache = _new_cache(self.model)
            _forward(self.model, self._prefix_ids, self._prefix_cache, keep=1)
        return copy.deepcopy(self._prefix_cache), p

    def _make_drafter(self, prompt: list[int], source: str):
        kind = self.drafter_spec.kind
        if kind == "none":
            return None
        if kind == "copy":
            # the edit usually starts with a capital letter
            return CopyDrafter(self.tokenizer, source[:1].upper() + source[1:], self.end_ids)
        if self.drafter_model is None:
            raise ValueError(f"drafter {self.drafter_name!r} has no model")
        if self.universal:
            dtok = self.drafter_tokenizer
            vocab = draft_vocabulary(dtok, source, [dtok.eos_token_id]) if self.prune_drafter_vocab else None
            return UniversalDrafter(self.drafter_model, dtok, self.tokenizer, prompt, vocab=vocab)
        vocab = draft_vocabulary(self.tokenizer, source, self.eos_ids) if self.prune_drafter_vocab else None
        return ModelDrafter(self.drafter_model, prompt, vocab=vocab)

    def _lookahead_for(self) -> Lookahead:
        if self._lookahead is not None:
            return copy.copy(self._lookahead)
        if self.drafter_spec.kind == "copy":
            # copy drafts cost nothing to make and a verify pass grows slowly with its width on CPU;
            # misses are local (an inserted comma, a capital), so stay wide after one
            return Lookahead(k=12, k_min=6, k_max=32, grow=4, shrink=2)
        return Lookahead(k=4, k_min=1, k_max=8, grow=2, shrink=1)  # transformers' "heuristic" schedule

    # ---- text
    def prepare(self, text: str) -> tuple[str, list[int], int]:
        """(source text, prompt ids, token budget) for an edit of ``text``; upper-case input is lower-cased."""
        src = text.strip()
        if _is_upper(src):
            src = src.lower()
        budget = int(1.4 * len(self.tokenizer.encode(src, add_special_tokens=False))) + 8
        return src, self._prompt_ids(src), budget

    def _doomed(self, src: str) -> Callable[[list[int]], bool]:
        """A stop rule: True once the output provably fails the guard's changed-share limit.

        ``check_edit`` counts as changed at least every output word outside its matched blocks, and
        what it matches is a common subsequence of source and output words. A finished word of the
        output that is in no longest common subsequence of the source and the output so far cannot be
        matched by any later output either: the output words minus that LCS bound the changed count
        from below, and later tokens cannot lower it. Once the bound exceeds what ``max_change``
        allows, the edit will be rejected whatever follows: decoding on would only spend time
        (hallucinating windows are also the longest). The bound covers invented words (in no common
        subsequence at all) and loops over source words (a word is matched at most once).
        """
        keys = [k for k in (word_key(w) for w in src.split()) if k]
        limit = self.max_change * max(1, len(keys))  # check_edit's share is over the same word count
        eos = set(self.eos_ids)

        def doomed(ids: list[int]) -> bool:
            words = self.tokenizer.decode([t for t in ids if t not in eos], skip_special_tokens=True).split()[:-1]
            out = [k for k in (word_key(w) for w in words) if k]
            return len(out) - _lcs_length(keys, out) > limit

        return doomed

    def generate(
        self, text: str, max_new_tokens: int | None = None, stop_when_rejected: bool = False
    ) -> tuple[str, list[int], SpecStats]:
        """The model's greedy edit of ``text``: (decoded text, token ids incl. the end id, stats).

        ``stop_when_rejected``: end the decode as soon as the guard is sure to reject the edit.
        """
        src, prompt, budget = self.prepare(text)
        max_new_tokens = budget if max_new_tokens is None else max_new_tokens
        cache, plen = self._cache_for(prompt)
        ids, stats = speculative_generate(
            self.model,
            prompt,
            self._make_drafter(prompt, src),
            max_new_tokens=max_new_tokens,
            eos_token_ids=self.eos_ids,
            lookahead=self._lookahead_for(),
            cache=cache,
            cache_prefix_len=plen,
            stop=self._doomed(src) if stop_when_rejected else None,
        )
        out = self.tokenizer.decode([t for t in ids if t not in self.eos_ids], skip_special_tokens=True)
        return out.strip(), ids, stats

    def edit_text(self, text: str) -> tuple[str, GuardResult, SpecStats]:
        """(text to keep, guard verdict, decode stats) for one piece of text."""
        proposed, _, stats = self.generate(text, stop_when_rejected=self.stop_when_rejected)
        verdict = check_edit(text, proposed, self.max_change)
        return (proposed if verdict.ok else text.strip()), verdict, stats

    # ---- transcripts
    def edit_transcript(self, transcript: Transcript, progress: Progress | None = None) -> tuple[Transcript, PostEditReport]:
        """A NEW transcript with accepted edits (original untouched) and what was done."""
        t_start = time.perf_counter()
        out = copy.deepcopy(transcript)
        report = PostEditReport(self.model_name, self.drafter_name, self.max_change)
        segs = out.segments
        windows = _windows(segs, self.max_window_words)
        for wi, idx in enumerate(windows):
            if progress:
                progress("postedit", wi / max(1, len(windows)))
            original = " ".join(segs[i].text.strip() for i in idx)
            t0 = time.perf_counter()
            proposed, ids, stats = self.generate(original, stop_when_rejected=self.stop_when_rejected)
            report.stats.merge(stats)
            verdict = check_edit(original, proposed, self.max_change)
            if stats.stopped:
                verdict = GuardResult(False, f"stopped early: changes over {self.max_change:.0%} of words", verdict.change)
            accepted, reason = verdict.ok, verdict.reason
            if accepted and proposed != original:
                units = realign(_units(segs, idx), proposed)
                why = _alignment_ok(segs, idx, units)
                if why:
                    accepted, reason = False, f"breaks alignment: {why}"
                else:
                    self._apply(segs, idx, units)
            report.turns.append(
                TurnEdit(
                    segments=list(idx),
                    speaker=segs[idx[0]].speaker,
                    original=original,
                    proposed=proposed,
                    accepted=accepted,
                    reason=reason,
                    change=verdict.change,
                    tokens=stats.generated_tokens,
                    seconds=time.perf_counter() - t0,
                )
            )
        if progress:
            progress("postedit", 1.0)
        report.seconds = time.perf_counter() - t_start
        return out, report

    @staticmethod
    def _apply(segs: list[Segment], idx: Sequence[int], units: Sequence[_Unit]) -> None:
        for i in idx:
            s = segs[i]
            mine = [u for u in units if u.seg == i]
            lead = " " if s.text.startswith(" ") else ""
            new_text = lead + " ".join(u.text for u in mine)
            if new_text == s.text:
                continue
            if s.words:
                wlead = " " if s.words[0].text.startswith(" ") else ""
                s.words = [Word(u.start, u.end, wlead + u.text, u.probability, u.speaker) for u in mine]
            s.text = new_text
            s.tokens = []  # the ASR token ids no longer spell the edited text


def load_post_editor(
    model: str | None = None,
    drafter: str | None = "copy",
    max_change: float = 0.3,
    device: str = "cpu",
    cache_dir: Path | None = None,
) -> PostEditor:
    """A post-editor. ``model``: None (embedded SmolLM2-135M-Instruct), an HF id, a folder or a .gguf.

    ``drafter``: "none", "copy" (default: copies from the transcript), "layers:N" (the target's first N
    layers, same tokenizer), or a model id/path/embedded alias ("gemma3-270m"); a drafter whose
    tokenizer differs from the target's is used through universal assisted generation.
    """
    if not 0.0 <= max_change <= 1.0:
        raise ValueError(f"max_change must be in [0, 1], got {max_change}")
    target, tok = load_llm(model, device=device, cache_dir=cache_dir)
    spec = parse_drafter(drafter)
    d_model = d_tok = None
    if spec.kind == "layers":
        d_model, d_tok = truncated_drafter(target, spec.layers), tok
    elif spec.kind == "model":
        d_model, d_tok = load_llm(spec.model, device=device, cache_dir=cache_dir)
    return PostEditor(
        target,
        tok,
        drafter=drafter,
        drafter_model=d_model,
        drafter_tokenizer=d_tok,
        max_change=max_change,
        model_name=model or DEFAULT_LLM,
    )


__all__ = ["load_post_editor", "PostEditor", "PostEditReport", "TurnEdit", "check_edit", "realign", "GuardResult"]
