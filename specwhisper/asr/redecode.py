"""Which stretches of a decoded chunk to decode again on their own (never lose a word).

Whisper sometimes stops writing before the speech does: openai/whisper seeks on from the last
timestamp, and a window that holds a loud voice and then a quiet one often ends its text after the
loud one, or writes one segment with a few words over several sentences (a thin segment). The
engine (``specwhisper.asr.engine``) queues what these rules return and decodes it again alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specwhisper.asr.decoding.segments import repeats
from specwhisper.results.transcript import Segment
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import SAMPLE_RATE

# A stretch of a chunk that its decode skipped is decoded again alone when the VAD hears this much
# speech in it, or when it is this long; re-decodes of re-decodes stop at the depth limit.
MIN_SKIP_SPEECH_S = 1.0
MIN_SKIP_SILENCE_S = 3.0
MAX_REDECODE_DEPTH = 2
THIN_S_PER_WORD = 0.6  # read speech is 2-3 words/s: 0.6 s a word is slow speech
THIN_SLACK_S = 3.0
MIN_PAUSE_S = 0.3  # a pause of the VAD's inside a thin segment that may part its text from other speech
MIN_EARLY_WORDS = 4  # a text a stretch's new text repeats (``dated_early``): shorter ones are said twice


@dataclass
class Standing:
    """Text already decoded over a stretch queued again, which the stretch's new text may replace
    (``specwhisper.asr.scheduling.FileResults``), by its ``kind``:

    - ``"thin"``: a thin segment, replaced when the new text has more words;
    - ``"after hallucination"``: the text after a hallucination that was dropped
      (``specwhisper.asr.hallucination``), replaced unless the new decode failed the checks at every
      temperature;
    - ``"repeated"``: a thin segment cut at a pause, dropped when the speech after the pause repeats
      its words (``after_first_pause``), or the speech after that speech's text (``after_new_text``);
    - ``"earlier"``: the text ``window`` (the chunk the stretch was skipped in) wrote before the
      stretch, dropped from the segment the new text begins with on (``dated_early``)."""

    segments: list[Segment]
    kind: Literal["thin", "after hallucination", "repeated", "earlier"]
    window: Chunk | None = None


def hears_speech(chunk: Chunk, start: int, end: int) -> bool:
    """Whether the VAD hears at least ``MIN_SKIP_SPEECH_S`` of speech in ``[start, end)`` of ``chunk``."""
    return chunk.voiced_in(start, end) >= MIN_SKIP_SPEECH_S * SAMPLE_RATE


def skipped(chunk: Chunk, segments: list[Segment]) -> list[tuple[Chunk, Standing | None]]:
    """Stretches of ``chunk`` that its decode skipped, to decode again on their own, each with the
    text its new text may replace or show misdated (a ``Standing``; None: nothing).

    - no segment covers it and the VAD hears at least ``MIN_SKIP_SPEECH_S`` of speech there (openai/
      whisper seeks to the last timestamp when a window's text stops early), or it is
      ``MIN_SKIP_SILENCE_S`` long (a quiet voice after a loud one is below Whisper's 80 dB window
      range, but not alone); its standing is the text dated before it (``"earlier"``);
    - a segment too thin for its speech: more VAD speech under it than ``THIN_S_PER_WORD`` per word
      plus ``THIN_SLACK_S`` (a 3-minute conversation: one 20 s segment held "This is all very high
      pitched!" over two other sentences).
    Not for a chunk without any text (Whisper was asked; but see ``_after_leading_speech``), nor deeper
    than ``MAX_REDECODE_DEPTH``."""
    if chunk.depth >= MAX_REDECODE_DEPTH:
        return []
    if not segments:
        return _after_leading_speech(chunk) if chunk.depth else []
    sr = SAMPLE_RATE
    out: list[tuple[Chunk, Standing | None]] = []
    cursor = chunk.start
    ordered = sorted(segments, key=lambda s: s.start)
    for seg in ordered + [None]:
        a, b = (round(seg.start * sr), round(seg.end * sr)) if seg else (chunk.end, chunk.end)
        if a - cursor >= MIN_SKIP_SPEECH_S * sr and (
            hears_speech(chunk, cursor, a) or (chunk.speech and a - cursor >= MIN_SKIP_SILENCE_S * sr)
        ):
            out.append((chunk.part(cursor, a), _earlier(chunk, ordered, cursor)))
        if seg is not None and _thin(chunk, seg):
            out.append((chunk.part(max(a, chunk.start), min(b, chunk.end)), Standing([seg], "thin")))
        cursor = max(cursor, b)
    return out


def joined_rest(chunk: Chunk, segments: list[Segment]) -> list[tuple[Chunk, Standing | None]]:
    """``--vad-filter``'s seek: a joined chunk (``chunking.join_spans``) whose text ``segments`` (times
    in the file) ends with ``MIN_SKIP_SPEECH_S`` or more of its speech after it gives that speech, joined,
    to decode again, as faster-whisper's ``vad_filter`` seeks to the last timestamp in the speech it
    joined. Measured: JFK, 15 s of quiet noise, then LJ001-0004: one joined window wrote JFK's
    sentence and stopped, the second sentence lost. Not for a chunk without text (Whisper was asked)."""
    if chunk.depth >= MAX_REDECODE_DEPTH or not segments:
        return []
    end = round(max(s.end for s in segments) * SAMPLE_RATE)
    rest = tuple((max(s, end), e) for s, e in chunk.voiced if e > end)
    if sum(e - s for s, e in rest) < MIN_SKIP_SPEECH_S * SAMPLE_RATE:
        return []
    return [(Chunk(rest[0][0], rest[-1][1], rest, chunk.depth + 1, joined=True), None)]


def _earlier(chunk: Chunk, ordered: list[Segment], start: int) -> Standing | None:
    """The text ``chunk``'s decode dated before a stretch it skipped from ``start`` (``ordered``: its
    segments by start), which the stretch's new text may show to be its own (``dated_early``)."""
    before = [s for s in ordered if round(s.end * SAMPLE_RATE) <= start]
    return Standing(before, "earlier", window=chunk) if before else None


def dated_early(chunk: Chunk, segments: list[Segment], earlier: Standing) -> tuple[list[Segment], list[tuple[Chunk, None]]]:
    """A skipped stretch ``chunk`` was decoded alone and its text ``segments`` begins with the words of a
    segment its window wrote before it (``MIN_EARLY_WORDS`` or more, ``repeats``): Whisper wrote this
    speech at the window's start, over the speech that is there, and that speech was lost. The text
    from that segment on goes, and the window from it to this stretch is decoded alone (when the VAD
    hears speech there). Returns the segments that go and the stretch to decode again. On the built
    conversation (``build_long_file("speakers", seed=5)``, base): the first window (0.14-30.14 s) wrote
    the words of the clips at 14.7-32.4 s dated 0.14-16.14 s, and the stretch after them, decoded alone,
    wrote them again where they are; the three clips under 0.14-16.14 s (25 words) were lost, and that
    stretch alone writes them."""
    for k, seg in enumerate(earlier.segments):
        if len(seg.text.split()) >= MIN_EARLY_WORDS and repeats(segments, seg):
            a = round(seg.start * SAMPLE_RATE)
            window = earlier.window
            again = [(window.part(a, chunk.start), None)] if hears_speech(window, a, chunk.start) else []
            return earlier.segments[k:], again
    return [], []


def _thin(chunk: Chunk, seg: Segment) -> bool:
    """Whether ``seg`` is too thin for the VAD speech under it in ``chunk`` (``skipped``)."""
    a, b = round(seg.start * SAMPLE_RATE), round(seg.end * SAMPLE_RATE)
    return chunk.voiced_in(a, b) > (len(seg.text.split()) * THIN_S_PER_WORD + THIN_SLACK_S) * SAMPLE_RATE


def thin_repeat(chunk: Chunk, segments: list[Segment]) -> list[tuple[Chunk, Standing | None]]:
    """The speech after a pause repeated a thin text (``after_first_pause``), and the repeat (its first
    segment) is as thin for its own speech: the same rule again, from the repeat's first pause. The first
    pause is the VAD's first, often inside the speech the thin text was written for; measured on
    bench/longform.py's talk (seed 5): "In being comparatively modern." (151.6-153.8 s) written over
    150.8-171.2 s, its repeat from the pause at 151.3 s as thin, and the acoustic corpus clip under it
    (154.9-171.5 s, 60 words) lost. Each turn starts at a later pause."""
    return after_first_pause(chunk, segments[0]) if segments and _thin(chunk, segments[0]) else []


def vad_speech(chunk: Chunk) -> bool:
    """Whether the VAD speaks for speech in ``chunk``, for the no-speech rule (``QualityRules.is_silence``):
    a planned chunk when any of its spans is in it; a stretch decoded again when it hears
    ``MIN_SKIP_SPEECH_S`` there. A stretch is cut out of its chunk's spans and may keep the edge of one
    (a pad or a word's tail): with that edge alone Whisper's no-speech probability had to come with an
    unlikely text as well. On bench/longform.py's talk under pink noise 30 dB below its speech
    (bench/noise.py), two re-decoded stretches of noise with under 0.05 s and 0.4 s of VAD speech at
    their edge read "Thank you." (no-speech probability 0.91 and 0.73, average log-probability -0.92
    and -0.85) and were kept."""
    return hears_speech(chunk, chunk.start, chunk.end) if chunk.depth else chunk.speech


def unheard(chunk: Chunk, passed: bool) -> bool:
    """A chunk the VAD does not speak for (``vad_speech``: a stretch decoded again in which it hears less
    than ``MIN_SKIP_SPEECH_S`` of speech, or a planned chunk of audio it rejected, a sound in a pause)
    whose decode failed openai's checks at every temperature (``passed`` False): its text is what
    Whisper makes of music or noise, and is dropped. Such audio is decoded at all for a voice too quiet
    for the VAD, which Whisper reads with a likely text. Measured on bench/hallucination.py's music gaps
    (4 sampler seeds): "Thank you." or "Thanks for watching!" over the tones in every draw of three of
    the four cases, each from the re-decode of the tones after the speech, where openai-whisper (a 30 s
    window of tones: no speech by its rule) wrote nothing; on the talk under pink noise, a 14 s sound
    chunk of noise read "Thank you." at every temperature (kept at 0.2, log-probability -1.23)."""
    return not passed and not vad_speech(chunk)


def _after_leading_speech(chunk: Chunk) -> list[tuple[Chunk, Standing | None]]:
    """A skipped stretch decoded again came back without text. When it begins inside speech (the tail of
    the loud voice its window's text ended in) and ``MIN_SKIP_SILENCE_S`` or more follow that speech, the
    rest is decoded alone: the tail set the stretch's level, so a quiet voice after it stayed below
    Whisper's 80 dB window range (and the VAD, too, hears nothing of a -60 dB voice). Measured on
    tests/test_no_lost_speech.py's quiet voice: the stretch from 10.68 s, JFK's last 0.5 s in it, read
    "Thank you." (no-speech 0.65, silence by openai's rule) and the sentence after it was lost."""
    spans = sorted(chunk.voiced)
    if not spans or spans[0][0] > chunk.start or chunk.end - spans[0][1] < MIN_SKIP_SILENCE_S * SAMPLE_RATE:
        return []
    return [(chunk.part(spans[0][1], chunk.end), None)]


def after_first_pause(chunk: Chunk, thin: Segment) -> list[tuple[Chunk, Standing | None]]:
    """The thin segment's stretch ``chunk`` was decoded again and gave no more words: Whisper wrote the
    same few words over the whole stretch twice. When the VAD hears a pause of ``MIN_PAUSE_S`` or more
    in it, with ``MIN_SKIP_SPEECH_S`` of speech after, that speech is decoded alone as new text: the
    thin text stays for the speech before the pause, its segment (and its words) ending there, unless
    the new text begins with its words (a ``"repeated"`` ``Standing``): then they were the later speech's,
    stretched back over speech Whisper could not read, and the thin segment goes. On the built
    conversation over a phone line (8 kHz mu-law): "I have a thousand thoughts about that thing." (at
    12.2-14.0 s) was written at 0.4-11.0 s over a quiet FLEURS clip, then again alone from 12.15 s: twice.

    Measured on the 3-minute conversation of ``bench/accuracy.py``: "even in the middle of a
    sentence." (loud) then, 12 dB lower after a 0.9 s pause, "If the reader will excuse me, I will
    say nothing of my antecedents, nor of the circumstances which led me to leave my native
    country." Both decodes of the 9.9 s stretch wrote "middle of a sentence." alone over all of it
    (24 words lost); the stretch from 40 ms later, or from the pause, is decoded whole."""
    sr = SAMPLE_RATE
    spans = sorted(chunk.voiced)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start - end >= MIN_PAUSE_S * sr and hears_speech(chunk, start, chunk.end):
            at = end / sr
            thin.end = max(thin.start, min(thin.end, at))
            for w in thin.words:
                w.end, w.start = min(w.end, at), min(w.start, at)
            return [(chunk.part(start, chunk.end), Standing([thin], "repeated"))]
    return []


def after_new_text(chunk: Chunk, segments: list[Segment], thin: Segment) -> list[tuple[Chunk, Standing | None]]:
    """The speech after a pause (``after_first_pause``) was decoded alone and its text ``segments`` does
    not repeat the thin one: when they end before more speech (the VAD hears ``MIN_SKIP_SPEECH_S`` of
    speech from the first of its spans that starts after them), that speech is decoded alone in turn,
    for the same test. The thin text may be a later voice's: a loud voice after a quiet one that
    Whisper dated from the window's start, the quiet voice what the speech after the pause wrote.
    Measured on bench/longform.py's talk (seed 0, 65.7-106 s): JFK (80.9-91.9 s, -17 dBFS) after a
    FLEURS clip at -49 dBFS; the window wrote JFK's words over 65.97-89.83 s, the speech after the first
    pause (70.4 s) the FLEURS sentence alone, and JFK's words stayed dated 65.97-68.69 s, before it.
    Each turn starts later in ``chunk``; none follows a decode without text."""
    if not segments:
        return []
    end = round(max(s.end for s in segments) * SAMPLE_RATE)
    later = sorted(a for a, _ in chunk.voiced if a >= end and a > chunk.start)  # never this stretch again
    if later and hears_speech(chunk, later[0], chunk.end):
        return [(chunk.part(later[0], chunk.end), Standing([thin], "repeated"))]
    return []
