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
import time
from pathlib import Path
from typing import Callable, Sequence

from specwhisper.results.transcript import Segment, Transcript
from specwhisper.postedit.drafting import DrafterFactory, parse_drafter
from specwhisper.postedit.drafters import early_exit_model, same_tokenizer
from specwhisper.postedit.guard import GuardResult, check_edit, lcs_length
from specwhisper.results.words import word_key
from specwhisper.postedit.lm_cache import forward, new_cache
from specwhisper.postedit.models import DEFAULT_LLM, load_llm
from specwhisper.postedit.realign import alignment_problem, apply_units, realign, word_units
from specwhisper.postedit.report import PostEditReport, TurnEdit
from specwhisper.postedit.speculative import Lookahead, SpecStats, speculative_generate

Progress = Callable[[str, float], None]

INSTRUCTION = "Rewrite with proper punctuation and capitalization:\n"
# One worked example (not from the eval set) in the shared, KV-cached prefix: measured on the public
# English set it doubles how often SmolLM2-135M copies faithfully (12 of 24 windows pass the guard
# instead of 9 with the bare instruction; two examples or a system prompt did worse).
EXAMPLE = (
    "so we met on tuesday and um the budget was approved i think by the board",
    "So we met on Tuesday and, um, the budget was approved, I think, by the board.",
)


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
        self.tokenizer = tokenizer
        self.max_change = max_change
        self.model_name = model_name
        self.max_window_words = max_window_words
        self.drafter_name = drafter or "none"
        self.lookahead = lookahead  # None: the drafter's own schedule (specwhisper.postedit.drafting)
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        self.eos_ids = [t for t in {end, tokenizer.eos_token_id} if t is not None]
        self.end_ids = [end if end is not None else tokenizer.eos_token_id]
        universal = drafter_model is not None and not same_tokenizer(tokenizer, drafter_tokenizer or tokenizer)
        self.drafters = DrafterFactory(parse_drafter(drafter), self.drafter_name, tokenizer, self.end_ids, self.eos_ids,
                                       drafter_model, drafter_tokenizer, universal, prune_drafter_vocab)
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
            self._prefix_cache = new_cache(self.model)
            forward(self.model, self._prefix_ids, self._prefix_cache, keep=1)
        return copy.deepcopy(self._prefix_cache), p

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
            return len(out) - lcs_length(keys, out) > limit

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
            self.drafters.build(prompt, src),
            max_new_tokens=max_new_tokens,
            eos_token_ids=self.eos_ids,
            lookahead=self.lookahead or self.drafters.lookahead(),
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
                units = realign(word_units(segs, idx), proposed)
                why = alignment_problem(segs, idx, units)
                if why:
                    accepted, reason = False, f"breaks alignment: {why}"
                else:
                    apply_units(segs, idx, units)
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


def load_post_editor(
    model: str | None = None,
    drafter: str | None = "copy",
    max_change: float = 0.3,
    device: str = "cpu",
    cache_dir: Path | None = None,
    token: str | None = None,
) -> PostEditor:
    """A post-editor. ``model``: None (embedded SmolLM2-135M-Instruct), an HF id, a folder or a .gguf.

    ``drafter``: "none", "copy" (default: copies from the transcript), "layers:N" (the target's first N
    layers, same tokenizer), or a model id/path/embedded alias ("gemma3-270m"); a drafter whose
    tokenizer differs from the target's is used through universal assisted generation. ``token``: for a
    gated or private hub model (default: the hub's own, $HF_TOKEN).
    """
    if not 0.0 <= max_change <= 1.0:
        raise ValueError(f"max_change must be in [0, 1], got {max_change}")
    target, tok = load_llm(model, device=device, cache_dir=cache_dir, token=token)
    spec = parse_drafter(drafter)
    d_model = d_tok = None
    if spec.kind == "layers":
        d_model, d_tok = early_exit_model(target, spec.layers), tok
    elif spec.kind == "model":
        d_model, d_tok = load_llm(spec.model, device=device, cache_dir=cache_dir, token=token)
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
