"""Which chunks decode together, and what their decodes give each file (``AsrEngine.transcribe_many``).

``WorkQueues`` hands out batches: the chunks of all files that share a prompt batch together, those
with the most speech first (a batch steps until its longest text ends: on an hour of talk and
conversation, tiny.en at batch 32 without the fallback, 696 decoder steps instead of 942 in the
file's order, the same tokens), a file conditioned on its own text decodes alone and in order, and multilingual chunks wait
for their language.
``FileResults`` takes each decoded chunk: its segments, the stretches it skipped (queued again; a thin
segment is replaced by a re-decode that finds more words) and, when conditioning, the text the file's
next chunk follows."""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import replace
from typing import Callable, Hashable

from specwhisper.asr import redecode
from specwhisper.asr.redecode import Standing
from specwhisper.asr.decoding.quality import Attempt
from specwhisper.asr.decoding.segments import dated, repeats, stitch
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.audio.chunking import Chunk
from specwhisper.results.transcript import Segment

log = logging.getLogger(__name__)
Item = tuple[int, Chunk]  # (file, chunk)


class WorkQueues:
    """The chunks left to decode: one queue per ``key`` (a prompt, or a file when conditioning), each
    emptied before the next one starts, handed out ``batch_size`` at a time, the most VAD speech first
    (but ``in_order``).

    Chunks given to ``wait`` (multilingual) get their language from ``detect`` (which may cut a chunk
    into several, each with its own), in order and a batch at a time, only while no queue holds a full
    batch; meanwhile only full batches are handed out."""

    def __init__(
        self,
        batch_size: int,
        key: Callable[[Item, str | None], Hashable],
        detect: Callable[[list[Item]], list[tuple[Item, str | None]]] | None = None,
        in_order: bool = False,
    ):
        self.batch_size = batch_size
        self._key, self._detect = key, detect
        self._in_order = in_order  # a stretch queued again goes first, so a conditioned file keeps its order
        self._queues: dict[Hashable, deque[Item]] = {}
        self._waiting: deque[Item] = deque()
        self._current: Hashable | None = None
        self.language_of: dict[Item, str | None] = {}

    def add(self, item: Item, language: str | None) -> None:
        self.language_of[item] = language
        self._queues.setdefault(self._key(item, language), deque()).append(item)

    def wait(self, item: Item) -> None:
        """A chunk whose language is not known yet (``detect`` gives it)."""
        self._waiting.append(item)

    def next_batch(self) -> list[Item] | None:
        """The next batch (all from one queue), or None when no work is left."""
        full = lambda: any(len(q) >= self.batch_size for q in self._queues.values())  # noqa: E731
        while self._waiting and not full():
            items = [self._waiting.popleft() for _ in range(min(self.batch_size, len(self._waiting)))]
            for item, language in self._detect(items):
                self.add(item, language)
        if self._waiting:
            if self._current is None or len(self._queues[self._current]) < self.batch_size:
                self._current = next(k for k, q in self._queues.items() if len(q) >= self.batch_size)
        elif self._current is None or not self._queues[self._current]:
            self._current = next((k for k, q in self._queues.items() if q), None)
            if self._current is None:
                return None
        queue = self._queues[self._current]
        if self._in_order or len(queue) <= self.batch_size:
            return [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]
        # the chunks with the most speech first: a batch takes as many steps as its longest text, and a
        # chunk's text follows its speech, so chunks of alike lengths decode together
        items = list(queue)
        most = set(sorted(range(len(items)), key=lambda j: -_speech(items[j][1]))[: self.batch_size])
        queue.clear()
        queue.extend(item for j, item in enumerate(items) if j not in most)
        return [item for j, item in enumerate(items) if j in most]

    def pending(self) -> list[Item]:
        """Every chunk still to decode (queued, or waiting for its language)."""
        return [item for q in self._queues.values() for item in q] + list(self._waiting)

    def again(self, items: list[Item], language: str | None) -> None:
        """Stretches of a batch to decode again, with its language, into its queue (first, ``in_order``)."""
        for item in reversed(items) if self._in_order else items:
            self.language_of[item] = language
            queue = self._queues.setdefault(self._key(item, language), deque())
            queue.appendleft(item) if self._in_order else queue.append(item)


def _speech(chunk: Chunk) -> int:
    """Samples of VAD speech in ``chunk``."""
    return sum(e - s for s, e in chunk.voiced)


class FileResults:
    """What the decoded chunks have given each of ``n`` files so far."""

    def __init__(self, n: int, context: list[int], conditioning: bool, carried: list[int] | None = None,
                 reset_temperature: float = 0.5):
        """``context``: the text before each file's first chunk (before every chunk, without
        ``conditioning``); ``carried``: conditioning, text before every chunk's, however long the text
        before it grows and after a reset (faster-whisper's hotwords, openai-whisper's
        carry_initial_prompt); ``reset_temperature``: conditioning, the text before a chunk is dropped after a
        decode kept at a temperature above it (openai-whisper's 0.5, faster-whisper's prompt_reset_on_temperature)."""
        self.segments: list[list[Segment]] = [[] for _ in range(n)]
        self.decoded: list[list[Chunk]] = [[] for _ in range(n)]
        self.contexts = [list(context) for _ in range(n)]  # conditioning: the text each file's next chunk follows
        self.carried = list(carried or [])[: SpecialTokens.MAX_CONTEXT]
        self.redecoded: set[int] = set()  # ids of the segments of re-decoded stretches
        self._conditioning = conditioning
        self._reset_temperature = reset_temperature
        self._replaces: dict[Item, Standing] = {}  # a stretch queued again -> the text it may replace

    def context(self, i: int) -> list[int]:
        """The text file ``i``'s next chunk is decoded after: the carried text, then as much of the text
        before the chunk as the prompt holds (openai-whisper's ``MAX_CONTEXT`` tokens in all)."""
        room = SpecialTokens.MAX_CONTEXT - len(self.carried)
        return self.carried + (self.contexts[i][-room:] if room else [])

    def standing(self, item: Item) -> Standing | None:
        """The text a stretch still to decode may replace."""
        return self._replaces.get(item)

    def take(self, item: Item, segments: list[Segment], skipped: list[tuple[Chunk, Standing | None]],
             attempt: Attempt) -> list[Item]:
        """One decoded chunk: its segments and the stretches to decode again, each with the text its
        new decode may replace (``redecode.Standing``) or None; returns the stretches to decode again."""
        i, chunk = item
        standing = self._replaces.pop(item, None)
        depth = chunk.depth  # of the decode the segments come from
        kind = None if standing is None else standing.kind
        if kind == "repeated":  # a thin text the speech after its pause repeats was that speech's
            if repeats(segments, standing.segments[0]):
                self.segments[i] = [s for s in self.segments[i] if s is not standing.segments[0]]
                skipped = skipped or redecode.thin_repeat(chunk, segments)
            else:  # or the speech after this text's
                skipped = skipped or redecode.after_new_text(chunk, segments, standing.segments[0])
        elif kind == "thin":  # the new text replaces a thin segment when it has more words
            thin = standing.segments[0]
            if sum(len(s.text.split()) for s in segments) > len(thin.text.split()):
                self.segments[i] = [s for s in self.segments[i] if s is not thin]
            else:  # discarded, and so are the stretches it skipped, but the speech after a pause
                segments, skipped = [], redecode.after_first_pause(chunk, thin)
        elif kind == "earlier":  # text its window dated before it may be this stretch's
            gone, again = redecode.dated_early(chunk, segments, standing)
            gone_ids = {id(g) for g in gone}
            self.segments[i] = [s for s in self.segments[i] if id(s) not in gone_ids]
            skipped = skipped + again
        elif kind == "after hallucination" and not attempt.passed:  # the text after a dropped hallucination stays
            segments, skipped, depth = standing.segments, [], chunk.depth - 1
        self.segments[i].extend(segments)
        if depth:
            self.redecoded.update(id(s) for s in segments)
        self.decoded[i].append(chunk)
        self._replaces.update({(i, c): standing for c, standing in skipped if standing is not None})
        if self._conditioning:
            reset = attempt.temperature > self._reset_temperature
            following = self.contexts[i] + [t for s in segments for t in s.tokens]
            self.contexts[i] = [] if reset else following[-SpecialTokens.MAX_CONTEXT :]
        return [(i, c) for c, _ in skipped]


class FinalSegments:
    """Each file's segments handed to ``show(file, segments)`` as they become final while the rest
    decodes (a streamed answer). A segment is final once no work left on its file can change it: every
    chunk or stretch still to decode starts after it ends (a decode's segments start in its chunk), and
    so do the segments that work may replace (its ``Standing``); a re-decoded segment also waits for the
    segment after it, which ``stitch`` trims it against. What ``show`` gets is the start of the final
    transcript, in order; ``finish`` gives the rest (and logs a warning if the start differs)."""

    def __init__(self, n: int, tokenizer, speech: list[list[tuple[float, float]]], show: Callable[[int, list[Segment]], None]):
        self._tokenizer, self._speech, self._show = tokenizer, speech, show
        self.shown: list[list[Segment]] = [[] for _ in range(n)]

    def update(self, files: FileResults, pending: list[Item]) -> None:
        bound: dict[int, float] = {}  # file -> seconds from which work left may write or remove text
        for item in pending:
            standing = files.standing(item)
            starts = [item[1].start_s] + ([s.start for s in standing.segments] if standing else [])
            bound[item[0]] = min(bound.get(item[0], math.inf), *starts)
        for i, until in bound.items():
            ordered = sorted(files.segments[i], key=lambda s: s.start)
            safe = next((k for k, s in enumerate(ordered) if s.end >= until), len(ordered))
            for k, seg in enumerate(ordered[:safe]):  # a re-decoded segment is trimmed against the next one
                if id(seg) in files.redecoded:
                    nxt = next((j for j in range(k + 1, len(ordered)) if id(ordered[j]) not in files.redecoded), len(ordered))
                    if nxt >= safe:
                        safe = k
                        break
            final = stitch(ordered[:safe], files.redecoded, self._tokenizer)
            self._give(i, final)

    def finish(self, i: int, segments: list[Segment]) -> None:
        """File ``i``'s final segments: those not shown yet are shown."""
        shown = self.shown[i]
        if [(s.tokens, s.start, s.end) for s in segments[: len(shown)]] != [(s.tokens, s.start, s.end) for s in shown]:
            log.warning("file %d: the segments streamed differ from the final transcript's", i)
        self._give(i, segments, timed=True)

    def _give(self, i: int, segments: list[Segment], timed: bool = False) -> None:
        new = [replace(s) for s in segments[len(self.shown[i]) :]]  # copies: the rules read the originals' times
        if not new:
            return
        if not timed:
            new = dated(new, self._speech[i])
        self.shown[i] += new
        self._show(i, new)
