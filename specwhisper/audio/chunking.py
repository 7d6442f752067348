"""Cutting a file into <=30 s chunks that cover all of it, with the cuts in the pauses the VAD found.

The VAD only chooses where to cut. Speech spans are packed into chunks (a chunk starts at a span's
start and ends at a span's end), then every chunk grows into the pauses on both sides up to where
each pause is cut, its quietest point (or its 30 s limit), and whatever a long pause still leaves
uncovered becomes chunks of its own, marked ``speech=False``; so does the sound in a pause (a voice too
quiet for the VAD), never packed beside loud speech. So every sample of the file is in exactly one
chunk and Whisper hears all of it (but a piece of a pause under a second: ``to_decode``): audio the
VAD rejected is dropped only when Whisper itself says it holds no speech (the no-speech rule in
``specwhisper.asr.decoding.fallback``), and a file in which the VAD found nothing is still decoded
(otherwise a falsetto clip and quiet stretches of a German file are lost: silero scores them below
its threshold).

``join_spans`` is the other way, asked for with ``--vad-filter`` (faster-whisper's ``vad_filter`` and
its batched pipeline, WhisperX): the speech spans alone, back to back, packed into windows of up to
30 s; the audio between them is dropped unheard. Fewer windows for the same speech, and a word the VAD
missed is lost.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE

WHISPER_WINDOW_S = 30.0
LEVEL_HOP = 160  # samples (10 ms) per level of ``frame_levels``
LEVEL_SPAN = 1600  # samples (100 ms) each level is the mean power over
QUIET_TOLERANCE_DB = 1.0  # levels this close to a pause's quietest count as quietest
SOUNDING_DB = 20.0  # a pause's stretch this far above its quietest level holds sound
SOUNDING_S = 1.0  # for this long: a voice too quiet for the VAD, decoded as a chunk of its own
SOUNDING_HOLE_S = 0.15  # quieter gaps this short inside a sound are part of it
LEVEL_STEP_DB = 20.0  # a span this much quieter or louder than the one before starts a new chunk (``merge_spans``)
TOUCH_S = 0.1  # speech heard alone in a pause that ends (starts) this close to a span reaches it (``join_heard``)
MIN_PIECE_S = 1.0  # a piece of a pause shorter than this, beside other chunks, is not decoded (``to_decode``)
TURN_PAUSE_S = 0.5  # a pause this long inside a chunk may part two languages (``turns``)
MIN_TURN_S = 2.0  # a turn shorter than this joins the one before it: Whisper's detection on less is unsure
Span = tuple[int, int]


@dataclass(frozen=True)
class Chunk:
    """A window of the input, in samples, that Whisper decodes in one go.

    ``voiced`` are the VAD's speech spans inside it (absolute samples); ``speech`` is False for a
    chunk made only of audio the VAD rejected. A ``joined`` chunk (``join_spans``) is its voiced
    spans alone, back to back: its audio, length and times are those of the joined spans."""

    start: int
    end: int
    voiced: tuple[Span, ...] = ()
    depth: int = 0  # 0: planned; n: a stretch of a depth n-1 chunk that its decode skipped
    joined: bool = False

    @property
    def speech(self) -> bool:
        return bool(self.voiced)

    @property
    def key(self) -> int:
        """The chunk's name among its file's: its samples and its depth (the temperature fallback's
        draws are a function of it, ``specwhisper.asr.decoding.greedy.Draws``)."""
        return (self.start << 40) ^ (self.end << 4) ^ self.depth

    @property
    def start_s(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def duration_s(self) -> float:
        """Seconds of audio the decoder hears."""
        if self.joined:
            return sum(e - s for s, e in self.voiced) / SAMPLE_RATE
        return (self.end - self.start) / SAMPLE_RATE

    def shifted(self, offset: int) -> "Chunk":
        """This chunk ``offset`` samples later (a chunk of a piece of a file, in the file)."""
        return Chunk(self.start + offset, self.end + offset, tuple((s + offset, e + offset) for s, e in self.voiced),
                     self.depth, self.joined)

    def samples(self, audio: np.ndarray) -> np.ndarray:
        """The chunk's audio out of the file's ``audio``."""
        if self.joined:
            return np.concatenate([audio[s:e] for s, e in self.voiced])
        return audio[self.start : self.end]

    def time_at(self, t: float, end: bool = False) -> float:
        """The file's time (seconds) of ``t`` seconds into a joined chunk's audio (faster-whisper's
        ``SpeechTimestampsMap``): a time where two spans meet is the first span's end when ``end``,
        else the next span's start."""
        lengths = [e - s for s, e in self.voiced]
        ends = np.cumsum(lengths).tolist()
        x = min(max(0, round(t * SAMPLE_RATE)), ends[-1])
        k = min(bisect.bisect_left(ends, x) if end else bisect.bisect_right(ends, x), len(ends) - 1)
        return (self.voiced[k][0] + x - (ends[k] - lengths[k])) / SAMPLE_RATE

    def voiced_in(self, start: int, end: int) -> int:
        """Samples of VAD speech in this chunk between ``start`` and ``end``."""
        return sum(max(0, min(e, end) - max(s, start)) for s, e in self.voiced)

    def part(self, start: int, end: int) -> Chunk:
        """The stretch ``[start, end)`` of this chunk, to decode on its own."""
        voiced = tuple((max(s, start), min(e, end)) for s, e in self.voiced if e > start and s < end)
        return Chunk(start, end, voiced, self.depth + 1)

    def cut(self, at: list[int]) -> list[Chunk]:
        """This chunk cut at the samples ``at`` (in its pauses, increasing) into chunks of the same depth;
        a joined chunk's parts are joined too, each from its first span's start to its last's end."""
        bounds = [self.start, *at, self.end]
        parts = []
        for a, b in zip(bounds, bounds[1:]):
            voiced = tuple((s, e) for s, e in self.voiced if a <= s < b)
            if self.joined:
                a, b = voiced[0][0], voiced[-1][1]
            parts.append(Chunk(a, b, voiced, self.depth, self.joined))
        return parts

    def heard_at(self, sample: int) -> int:
        """Where the file's ``sample`` is in the audio the decoder hears: ``sample - start``, or for a
        joined chunk its place in the spans back to back (a sample in a dropped pause: the next span's start)."""
        if not self.joined:
            return sample - self.start
        before = 0
        for s, e in self.voiced:
            if sample < e:
                return before + max(0, sample - s)
            before += e - s
        return before


def turns(chunk: Chunk) -> list[Span]:
    """A chunk's speech as turns that may each be in a language of their own (``--multilingual``): its VAD
    spans joined across pauses under ``TURN_PAUSE_S``; a turn under ``MIN_TURN_S`` joins the one before
    it (the first joins the next)."""
    out: list[list[int]] = []
    for s, e in sorted(chunk.voiced):
        if out and s - out[-1][1] < TURN_PAUSE_S * SAMPLE_RATE:
            out[-1][1] = e
        else:
            out.append([s, e])
    short = lambda t: t[1] - t[0] < MIN_TURN_S * SAMPLE_RATE  # noqa: E731
    k = 0
    while len(out) > 1 and k < len(out):
        if short(out[k]):
            if k == 0:
                out[1][0] = out[0][0]
            else:
                out[k - 1][1] = out[k][1]
            del out[k]
        else:
            k += 1
    return [(s, e) for s, e in out]


def merge_spans(spans: list[Span], max_chunk_s: float = WHISPER_WINDOW_S, levels: np.ndarray | None = None) -> list[Chunk]:
    """Group consecutive speech spans into chunks no longer than ``max_chunk_s``, and (``levels``:
    ``frame_levels``) none with a span ``LEVEL_STEP_DB`` quieter or louder than the one before it: in one
    window with loud speech Whisper skips a quiet voice it reads alone (on the built talk, seed 1, at
    383.7 s, FLEURS en-004, -67 dB RMS, in a window with JFK's clip: none of its 15 words; alone, 12 right).

    Chunks only ever end at a span's end and start at a span's start, so every
    cut falls in a pause the VAD found (or inside a span silero already split)."""
    limit = int(max_chunk_s * SAMPLE_RATE)
    chunks: list[Chunk] = []
    loud = [_loudness(a, b, levels) for a, b in spans] if levels is not None else [0.0] * len(spans)
    for k, (start, end) in enumerate(spans):
        if chunks and end - chunks[-1].start <= limit and abs(loud[k] - loud[k - 1]) < LEVEL_STEP_DB:
            last = chunks[-1]
            chunks[-1] = Chunk(last.start, end, last.voiced + ((start, end),))
        else:
            end = min(end, start + limit)
            chunks.append(Chunk(start, end, ((start, end),)))
    return chunks


def _pieces(start: int, end: int, limit: int) -> list[Chunk]:
    """``[start, end)`` in equal pieces of at most ``limit`` samples (VAD-rejected audio)."""
    if end <= start:
        return []
    n = -(-(end - start) // limit)
    cuts = [start + (end - start) * i // n for i in range(n + 1)]
    return [Chunk(a, b) for a, b in zip(cuts, cuts[1:])]


def frame_levels(audio: np.ndarray) -> np.ndarray:
    """The audio's level in dB per ``LEVEL_HOP`` samples, each over ``LEVEL_SPAN`` samples around it
    (where ``plan_chunks`` cuts a pause)."""
    n = len(audio) // LEVEL_HOP
    frames = np.asarray(audio[: n * LEVEL_HOP], dtype=np.float32).reshape(n, LEVEL_HOP)
    power = np.einsum("ij,ij->i", frames, frames) / LEVEL_HOP  # without a squared copy of the audio
    k = LEVEL_SPAN // LEVEL_HOP
    smooth = np.convolve(power, np.ones(k) / k, mode="same") if n >= k else power
    return 10 * np.log10(smooth + 1e-12)


def _quietest(a: int, b: int, levels: np.ndarray | None) -> int:
    """Where to cut the pause ``[a, b)``: its quietest point (``levels``: ``frame_levels``), the
    middle where it is uniform or unknown."""
    mid = (a + b) // 2
    lo, hi = -(-a // LEVEL_HOP), b // LEVEL_HOP
    if levels is None or hi - lo < 2 or hi > len(levels):
        return mid
    part = levels[lo:hi]
    quiet = np.flatnonzero(part <= part.min() + QUIET_TOLERANCE_DB)  # the quietest frames; of them, the nearest the middle
    return (lo + int(quiet[np.argmin(np.abs(quiet * LEVEL_HOP + lo * LEVEL_HOP - mid))])) * LEVEL_HOP


def _sounding(a: int, b: int, levels: np.ndarray | None) -> Span | None:
    """The stretch of the pause ``[a, b)`` that holds sound, or None: where runs of levels ``SOUNDING_DB``
    over the pause's quietest (holes under ``SOUNDING_HOLE_S`` closed) that do not reach the pause's ends
    span ``SOUNDING_S`` or more. A run that reaches an end is the room of the recording beside it
    (heard when the pause is digital silence) or a voice close to the speech: then the stretch starts
    (or ends) at that end, else at the quietest point before (after) the sound; but a run there
    ``SOUNDING_DB`` louder than the sound is the speech itself, heard late (or left early) by the VAD,
    and the stretch stops at the quietest point between (as ``_onset`` cuts a piece of a pause): on the
    built talk (seed 4) the next clip's loud first second (-13 dB, silero under 0.5) carried the
    stretch over it, and Whisper read the -65 dB voice before it as other words. Pauses shorter than
    twice ``SOUNDING_S`` are not searched. A steady noise floor has no such run; a voice the VAD does not
    hear, between quieter stretches, has."""
    lo, hi = -(-a // LEVEL_HOP), b // LEVEL_HOP
    if levels is None or hi - lo < 2 * SOUNDING_S * SAMPLE_RATE // LEVEL_HOP or hi > len(levels):
        return None
    part = levels[lo:hi]
    loud = np.flatnonzero(part >= part.min() + SOUNDING_DB)
    if len(loud) == 0:
        return None
    breaks = np.flatnonzero(np.diff(loud) > SOUNDING_HOLE_S * SAMPLE_RATE // LEVEL_HOP)
    runs = [(int(loud[i]), int(loud[j])) for i, j in zip(np.r_[0, breaks + 1], np.r_[breaks, len(loud) - 1])]
    inner = [n for n, (x, y) in enumerate(runs) if x > 0 and y < len(part) - 1]
    if not inner or (runs[inner[-1]][1] - runs[inner[0]][0]) * LEVEL_HOP < SOUNDING_S * SAMPLE_RATE:
        return None
    first, last = inner[0], inner[-1]
    peak = part[runs[first][0] : runs[last][1] + 1].max()

    def beside(run: tuple[int, int]) -> bool:  # a run at an end no louder than the sound's SOUNDING_DB over it
        return part[run[0] : run[1] + 1].max() < peak + SOUNDING_DB

    # from the pause's end where sound reaches it (a hole there may be a stop inside a word), else
    # from the quietest point before the sound; a run at the end far louder than the sound is the
    # speech's own tail or start the VAD did not hear: the stretch starts (ends) at the quietest
    # point between it and the sound
    if first == 0:
        start = _quietest(a, (lo + runs[first][0]) * LEVEL_HOP, levels)
    else:
        start = a if beside(runs[0]) else _quietest((lo + runs[0][1] + 1) * LEVEL_HOP, (lo + runs[first][0]) * LEVEL_HOP, levels)
    if last + 1 == len(runs):
        end = _quietest((lo + runs[last][1] + 1) * LEVEL_HOP, b, levels)
    else:
        end = b if beside(runs[-1]) else _quietest((lo + runs[last][1] + 1) * LEVEL_HOP, (lo + runs[-1][0]) * LEVEL_HOP, levels)
    return start, end


def _onset(a: int, b: int, levels: np.ndarray | None) -> int:
    """Where a piece of a pause ``[a, b)`` before a speech chunk is cut from the loud sound at its end: the
    quietest point before a run of levels ``SOUNDING_DB`` over the piece's median that reaches ``b``
    (the speech's start, which the VAD heard late and the chunk, full, could not take); ``b`` when
    there is none. Decoded with that sound, a quiet voice in the piece was read as other words: on the
    built conversation (seed 4), FLEURS en-004 (-65 dB) at 153.6-158.0 s, then 0.5 s of the next clip's
    first second (-8 to -20 dB, silero's probability under 0.5); alone it reads as the clip. The
    rest of the piece, under a second, is not decoded (``to_decode``); the speech chunk writes its words."""
    lo, hi = -(-a // LEVEL_HOP), b // LEVEL_HOP
    if levels is None or hi - lo < 2 or hi > len(levels):
        return b
    part = levels[lo:hi]
    loud = part >= np.median(part) + SOUNDING_DB
    if not loud[-1] or loud.all():
        return b
    first = len(part) - int(np.argmin(loud[::-1]))  # the run reaching b starts here
    return _quietest(a, (lo + first) * LEVEL_HOP, levels)


def _loudness(a: int, b: int, levels: np.ndarray) -> float:
    """The level of ``[a, b)``'s loud part: the 90th percentile of its ``frame_levels``."""
    part = levels[a // LEVEL_HOP : max(a // LEVEL_HOP + 1, b // LEVEL_HOP)]
    return float(np.percentile(part, 90)) if len(part) else -120.0


def join_heard(spans: list[Span], heard: list[Span], levels: np.ndarray, max_chunk_s: float = WHISPER_WINDOW_S) -> list[Span]:
    """``spans`` (the VAD's, of the whole file) and ``heard`` (speech it heard in a pause alone:
    ``VoiceActivityDetector.rehear``) as one list of spans: a heard span that reaches a span (within
    ``TOUCH_S``) at its level (less than ``LEVEL_STEP_DB`` apart) is part of it, the voice's start heard
    late or its end left early (within ``max_chunk_s``); the others are spans of their own, which
    ``merge_spans`` keeps apart from louder speech. On the built talk (seed 5) the VAD heard the Sintra
    clip (-63 dB) 2.8 s late, and the chunk from there, full at 30 s, left its first words to a
    piece of the pause."""
    touch, limit = int(TOUCH_S * SAMPLE_RATE), int(max_chunk_s * SAMPLE_RATE)
    out = [list(s) for s in spans]
    starts = [s for s, _ in spans]
    alone = []
    for q in sorted(heard):
        k = bisect.bisect_left(starts, q[1])  # the span after q
        level = _loudness(*q, levels)

        def alike(span: list[int]) -> bool:
            return abs(level - _loudness(*span, levels)) < LEVEL_STEP_DB

        if k < len(out) and out[k][0] - q[1] <= touch and out[k][1] - q[0] <= limit and alike(out[k]):
            out[k][0] = min(out[k][0], q[0])
        elif k and q[0] - out[k - 1][1] <= touch and q[1] - out[k - 1][0] <= limit and alike(out[k - 1]):
            out[k - 1][1] = max(out[k - 1][1], q[1])
        else:
            alone.append(q)
    return sorted([(a, b) for a, b in out] + alone)


def plan_chunks(spans: list[Span], num_samples: int, max_chunk_s: float = WHISPER_WINDOW_S,
                levels: np.ndarray | None = None) -> list[Chunk]:
    """Chunks covering ``[0, num_samples)`` without gaps or overlaps, none over ``max_chunk_s``.

    Speech chunks come from ``merge_spans``; each then takes the pauses on both sides up to where
    they are cut, as far as its length limit allows (half the room on each side when both are long);
    what is left of a pause is cut into ``speech=False`` chunks. A pause is cut at its quietest point
    (``levels``: ``frame_levels`` of the audio; else its middle): a voice too quiet for the VAD may
    fill a "pause", and cut in its middle its sentence was lost (the 10-minute conversation of
    bench/longform.py, 286-299 s: a -65 dB voice under a VAD pause of 12.5 s, cut at 292.6 s in a
    sentence, where the quietest stretch, -92 dB at 297.8-298.3 s, is the pause before the next
    speaker). That point is kept where a chunk cannot grow to it: the audio between is a chunk of its
    own, in which a quiet voice is decoded at its own level. A pause with sound in it (``_sounding``:
    ``SOUNDING_DB`` over its quietest level for ``SOUNDING_S`` or more) is never inside a speech chunk:
    the sound is a ``speech=False`` chunk of its own. In a window with loud speech such a voice is below
    Whisper's 80 dB range: FLEURS en-004 (-67 dB RMS, the VAD hears none of it) was lost in 5 of its 12
    passes over bench/pause_cuts.py's files (seeds 0-1), skipped under a segment that began at the
    window's start with its words seconds later."""
    limit = int(max_chunk_s * SAMPLE_RATE)
    speech: list[Chunk] = []
    group: list[Span] = []
    for i, span in enumerate(spans):
        group.append(span)
        sound = _sounding(span[1], spans[i + 1][0], levels) if i + 1 < len(spans) else None
        if sound is not None or i + 1 == len(spans):
            speech += merge_spans(group, max_chunk_s, levels)
            speech += _pieces(*sound, limit) if sound else []
            group = []
    out: list[Chunk] = []
    cursor = 0  # everything before it is covered
    for i, c in enumerate(speech):
        left = _quietest(speech[i - 1].end, c.start, levels) if i else 0
        right = _quietest(c.end, speech[i + 1].start, levels) if i + 1 < len(speech) else num_samples
        # the room left under the limit, half to each side unless one side needs less
        room = limit - (c.end - c.start)
        before = min(c.start - left, max(room // 2, room - (right - c.end)))
        start = c.start - before
        end = min(right, c.end + room - before)
        onset = _onset(cursor, start, levels)
        out.extend(_pieces(cursor, onset, limit) + _pieces(onset, start, limit))
        out.append(Chunk(start, end, c.voiced))
        cursor = end
    out.extend(_pieces(cursor, num_samples, limit))
    return out


def to_decode(chunks: list[Chunk], max_chunk_s: float = WHISPER_WINDOW_S) -> list[Chunk]:
    """``chunks`` (``plan_chunks``) without the pieces of a pause (``speech=False``) shorter than
    ``MIN_PIECE_S`` (or half of ``max_chunk_s``, which no piece of a longer stretch is), unless they
    are all there is. Such a piece is what is left of a pause between chunks that could not grow
    over it (their 30 s were full); decoded alone, it is a 30 s window of almost nothing. Measured on
    bench/pause_cuts.py's six 10-minute files: 23 such pieces among 200 chunks (0.02-0.99 s), each read
    "you", "Thank you." or "I'm sorry." (no-speech probability 0.60-0.96) and nothing of the clips.
    whisper.cpp likewise stops when less than a second of its input is left. A sound in a pause
    (``_sounding``) is a chunk of at least ``SOUNDING_S``."""
    shortest = min(MIN_PIECE_S, max_chunk_s / 2) * SAMPLE_RATE
    kept = [c for c in chunks if c.speech or c.end - c.start >= shortest]
    return kept or chunks


def join_spans(spans: list[Span], max_chunk_s: float = WHISPER_WINDOW_S) -> list[Chunk]:
    """The speech spans alone, back to back, in ``joined`` chunks of at most ``max_chunk_s`` of speech
    (faster-whisper's ``collect_chunks``): the audio between spans is never decoded. A span is never
    cut (``VoiceActivityDetector.speech_spans`` keeps each under the limit)."""
    limit = int(max_chunk_s * SAMPLE_RATE)
    groups: list[list[Span]] = []
    total = 0
    for start, end in spans:
        if groups and total + end - start <= limit:
            groups[-1].append((start, end))
            total += end - start
        else:
            groups.append([(start, end)])
            total = end - start
    return [Chunk(g[0][0], g[-1][1], tuple(g), joined=True) for g in groups]
