"""openai-whisper's ``hallucination_silence_threshold``: text Whisper invents over a long silence
(or music, or noise) is dropped, and the audio after its start is decoded again without the silence.

The rules are those of openai/whisper ``transcribe()`` (release 20250625), on word timings:

- A word is anomalous by its probability (below 0.15: +1), and a duration too short (below 0.133 s:
  up to +1) or too long (over 2 s: +1 a second); a segment is an anomaly when its first 8 words that
  are not punctuation score 3 or more, or about 1 per word (``is_segment_anomaly``).
- A window whose first segment with words is an anomaly after more than ``threshold`` seconds of
  leading silence: the window is decoded again from that segment's start.
- Otherwise an anomaly with silence before it (more than ``threshold`` since the speech before it, or
  within the first ``threshold`` seconds of the file, or within 2 s of the window's start) and after it
  (more than ``threshold`` until the next words, or another anomaly next, or within 2 s of the window's
  end) is dropped with everything after it in its window, and decoding resumes at its start (at least
  1 s after the window's start); when the file ends less than ``threshold`` after it, nothing after
  it is decoded.

How they map onto this engine (specwhisper.asr.engine), which decodes a file's chunks side by side in
batches where openai decodes one 30 s window after another, each starting where the text before it
ended:

- openai's window is a chunk (specwhisper.audio.chunking): its start and end are the chunk's, and its
  length the chunk's audio, not 30 s (the rest of Whisper's input is padding, which it does not hear).
- "decode again from here" is a stretch of the chunk, from there to its end, queued like the
  stretches a decode skipped (specwhisper.asr.redecode): decoded alone, at most
  ``redecode.MAX_REDECODE_DEPTH`` deep, and not when shorter than ``redecode.MIN_SKIP_SPEECH_S``. The
  audio after the chunk is the next chunk's, decoded anyway. Where a stretch cannot be decoded again
  (the depth limit, or too short), a dropped anomaly goes alone and the text after it stays, screened
  by the same rule with the anomaly taken as silence; a leading anomaly goes to the second rule.
- The text after a dropped anomaly (screened so), when its decode passed openai's checks, is kept in
  reserve (``redecode.Standing``): where the stretch's new decode fails the checks at every
  temperature, that text stays instead of the new one. openai keeps the new decode; but it starts
  over the music or noise that made Whisper invent text, and it is sampled as often as not. On
  tests/test_hallucination.py's one-window case over sampler seeds 0-11, the speech after the tones
  was lost with seeds 6 and 7 (the re-decode of the re-decode wrote only "Thank you." over the
  tones, or an anomaly at the depth limit, which dropped all after it); with both rules, with none.
- The speech before a chunk, which openai knows from the window before (its last word's end), is
  taken to end at the chunk's start: chunks are decoded side by side, and a chunk starts in the middle
  of a pause the VAD found, so no earlier speech ends later. It makes "silence before" at most half
  that pause shorter than openai's, never longer.
- A segment's start and end are its first word's start and last word's end: openai moves them there
  when it times the words (whisper/timing.py ``add_word_timestamps``), before these rules run, where
  ours keep Whisper's timestamps (a hallucination over silence often starts at the end of the speech
  before it by its timestamps, seconds before its first word).
- An anomaly whose words span more than ``threshold`` seconds in which the VAD hears less than
  ``redecode.MIN_SKIP_SPEECH_S`` of speech counts as surrounded by silence, which openai's rules
  cannot see there: the aligner stretches invented words over the music up to the next speech
  ("channel" 9.3 s long, the sign-off ending where the speech starts), so no gap between words is
  silence. On tests/test_hallucination.py's one-window case this kept 7 invented words of one draw
  in six, over sampler seeds 0-5.
- openai's other use of the threshold, where to start the window after one whose text stops early,
  is the skipped-stretch rule of specwhisper.asr.redecode here, with or without this option.
"""

from __future__ import annotations

from dataclasses import replace

from specwhisper.asr import redecode
from specwhisper.asr.redecode import Standing
from specwhisper.results.transcript import Segment, Word
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import SAMPLE_RATE

PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"  # openai's: a word that is a piece of it is not scored
EDGE_S = 2.0  # an anomaly this close to its window's start or end counts as surrounded by silence there
ANOMALY_WORDS = 8  # words of a segment that are scored


def word_anomaly_score(w: Word) -> float:
    """openai's score of one word: improbable, or too short or too long to be speech."""
    score = 0.0
    if (w.probability or 0.0) < 0.15:
        score += 1.0
    duration = w.end - w.start
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def is_segment_anomaly(seg: Segment | None) -> bool:
    if seg is None or not seg.words:
        return False
    words = [w for w in seg.words if w.text not in PUNCTUATION][:ANOMALY_WORDS]
    score = sum(word_anomaly_score(w) for w in words)
    return score >= 3 or score + 0.01 >= len(words)


def _first_with_words(segments: list[Segment]) -> Segment | None:
    return next((s for s in segments if s.words), None)


def _span(seg: Segment) -> tuple[float, float]:
    """The segment's times as openai's rules see them: its words' (see the module docstring)."""
    return seg.words[0].start, seg.words[-1].end


def _unvoiced(chunk: Chunk, start_s: float, end_s: float, threshold: float) -> bool:
    """An anomaly whose words span more than ``threshold`` seconds in which the VAD hears less than
    ``redecode.MIN_SKIP_SPEECH_S`` of speech: silence by the VAD, whatever its word timings say."""
    if end_s - start_s <= threshold:
        return False
    a, b = round(start_s * SAMPLE_RATE), round(end_s * SAMPLE_RATE)
    return not redecode.hears_speech(chunk, a, b)


def _until(chunk: Chunk, end_s: float) -> Chunk:
    """The chunk up to ``end_s``, at its own depth: what its kept segments stand for."""
    end = min(chunk.end, max(chunk.start, round(end_s * SAMPLE_RATE)))
    return replace(chunk.part(chunk.start, end), depth=chunk.depth)


def _again(chunk: Chunk, from_s: float) -> list[Chunk]:
    """The stretch of ``chunk`` from ``from_s`` to its end, to decode alone (none past the depth limit
    or under ``MIN_SKIP_SPEECH_S``)."""
    start = max(chunk.start, round(from_s * SAMPLE_RATE))
    if chunk.depth >= redecode.MAX_REDECODE_DEPTH or chunk.end - start < redecode.MIN_SKIP_SPEECH_S * SAMPLE_RATE:
        return []
    return [chunk.part(start, chunk.end)]


def screen(chunk: Chunk, segments: list[Segment], threshold: float, file_end_s: float) -> tuple[list[Segment], Chunk, list[tuple[Chunk, Standing | None]]]:
    """openai's silence rules on one decoded chunk (segments with words, in time order).

    Returns the segments kept, the part of the chunk they stand for (the chunk up to where its text
    was dropped, for ``redecode.skipped``) and the stretches to decode again, each with the text after
    the dropped hallucination (screened as if the hallucination were silence), which stays where the
    stretch's new decode fails the checks at every temperature: the new decode starts over the music
    or noise that made Whisper invent text, and is sampled as often as not."""
    start_s = chunk.start_s
    end_s = start_s + chunk.duration_s
    cut, again, dropped = None, [], set()  # where the text is decoded again; anomalies dropped alone
    first = _first_with_words(segments)
    if is_segment_anomaly(first) and _span(first)[0] - start_s > threshold:
        again = _again(chunk, _span(first)[0])
        if again:
            cut = segments.index(first)
            dropped.add(cut)
    last_end, end = start_s, len(segments)
    for k, seg in enumerate(segments):
        if not seg.words or k in dropped:
            continue
        seg_start, seg_end = _span(seg)
        if is_segment_anomaly(seg):
            nxt = _first_with_words(segments[k + 1 :])
            next_start = nxt.words[0].start if nxt is not None else end_s
            silence_before = seg_start - last_end > threshold or seg_start < threshold or seg_start - start_s < EDGE_S
            silence_after = next_start - seg_end > threshold or is_segment_anomaly(nxt) or end_s - seg_end < EDGE_S
            if (silence_before and silence_after) or _unvoiced(chunk, seg_start, seg_end, threshold):
                if file_end_s - seg_end < threshold:  # nothing after it is decoded
                    end = k
                    break
                if cut is None:
                    again = _again(chunk, max(start_s + 1.0, seg_start))
                    cut = k if again else None
                # where the stretch cannot be decoded again (depth limit), or after the cut, the anomaly
                # goes alone and the text after it stays, screened as if the anomaly were silence
                dropped.add(k)
                continue
        last_end = seg_end
    kept = [i for i in range(end) if i not in dropped]
    if cut is None:
        return [segments[i] for i in kept], chunk if end == len(segments) else _until(chunk, _span(segments[end])[0]), []
    rest = [segments[i] for i in kept if i > cut]
    standing = Standing(rest, "after hallucination") if rest else None
    return [segments[i] for i in kept if i < cut], _until(chunk, _span(segments[cut])[0]), [(c, standing) for c in again]
