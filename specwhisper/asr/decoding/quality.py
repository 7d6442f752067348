"""The checks a decode must pass: openai-whisper's thresholds (compression ratio, log-probability,
no-speech probability) and the schedule of temperatures, a loop at a text's end and Whisper's stock
phrases over silence. Plain Python on a decode's text and probabilities: the options that carry the
rules load without torch; ``specwhisper.asr.decoding.fallback`` runs the decodes they ask for."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specwhisper.asr.decoding.greedy import SequenceResult

DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
SAMPLE_TOKENS_BASE = 16


def temperature_schedule(first: float = 0.0, increment: float | None = 0.2) -> tuple[float, ...]:
    """openai-whisper's ``--temperature`` and ``--temperature_increment_on_fallback``: ``first``, then
    up to 1.0 in steps of ``increment`` (none when it is 0 or None)."""
    if not 0.0 <= first <= 1.0:
        raise ValueError(f"temperature must be between 0 and 1, got {first}")
    if increment is None or increment == 0:
        return (first,)
    if not 0.0 < increment <= 1.0:
        raise ValueError(f"temperature increment must be between 0 and 1, got {increment}")
    steps = int((1.0 - first) / increment + 1e-6)
    return tuple(round(first + k * increment, 6) for k in range(steps + 1))


def length_normalized(sum_logprob: float, length: int, length_penalty: float | None = None,
                      length_exponent: float = 1.0) -> float:
    """openai-whisper's ``MaximumLikelihoodRanker`` score of a candidate of ``length`` tokens (end-of-text
    not counted): its log-probability over its length, or, with a ``length_penalty``, over Google NMT's
    ``((5 + length) / 6) ** length_penalty`` (0: the plain log-probability; the higher, the more a long
    candidate is favoured). Without one, over ``length ** length_exponent`` (CTranslate2's ranking, faster-
    whisper's ``length_penalty``; 1: openai-whisper's)."""
    if length_penalty is None:
        return sum_logprob / max(length, 1) ** length_exponent  # openai's divides by zero for an empty candidate
    return sum_logprob / ((5 + length) / 6) ** length_penalty


def schedule_of(values) -> tuple[float, float | None]:
    """A fallback schedule written as its list of temperatures (transformers', faster-whisper's and
    openai-whisper's ``temperature=(0.0, 0.2, ..., 1.0)``) as ``temperature_schedule``'s first temperature
    and increment (None: one temperature); a ValueError for a list that is not evenly spaced up to 1.0."""
    try:
        temps = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"expected numbers, got {str(values)[:60]}") from None
    if not temps:
        raise ValueError("the list is empty")
    step = round(temps[1] - temps[0], 6) if len(temps) > 1 else None
    try:
        even = step is None or (step > 0 and list(temperature_schedule(temps[0], step)) == [round(t, 6) for t in temps])
    except ValueError:
        even = False
    if not even:
        raise ValueError(f"a list must rise in equal steps up to 1.0, e.g. [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] (got {temps})")
    return temps[0], step


def compression_ratio(text: str) -> float:
    """openai/whisper's repetition measure: bytes of the text over bytes of its zlib compression."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


# The compression ratio is the whole text's: a loop after a window of real speech can pass it. On a
# 10-minute conversation (``build_long_file("speakers", seed=5)``, base) a window's text was 14 real words
# then " St." 24 times, one segment a second (ratio 2.23). whisper.cpp checks the last 32 tokens'
# entropy (below 2.4 fails) for this; here that also fails laughter transcribed as "Ha ha ha, Montreal.
# Ha ha ha, forced." (2.25-2.45), so the check is for a loop itself: a tail that repeats one phrase
# back to back. Of 297 first decodes of six such files only the " St." text ends in one besides two
# "Ha ha ha ..." texts the ratio fails already; "words, words, words, words, words" (spoken) spans 35
# characters.
LOOP_SPAN = 64  # characters the repeats cover at least
LOOP_REPEATS = 4  # ... and at least this many of them
LOOP_PERIOD = 32  # the longest phrase (characters) looked for


def ends_in_loop(text: str) -> bool:
    """Whether the text ends in one phrase of at most ``LOOP_PERIOD`` characters repeated back to back
    ``LOOP_REPEATS`` times or more, over ``LOOP_SPAN`` characters or more."""
    t = text.rstrip()
    for period in range(1, LOOP_PERIOD + 1):
        span = max(LOOP_SPAN, LOOP_REPEATS * period)
        if len(t) < span:
            break
        if t[len(t) - span:len(t) - period] == t[len(t) - span + period:]:
            return True
    return False


# The phrases Whisper writes where it hears no speech (its subtitle corpus' sign-offs and credits;
# Barański et al., "Investigation of Whisper ASR Hallucinations Induced by Non-Speech Audio", ICASSP
# 2025, list them as its most frequent hallucinations), each without case and punctuation.
STOCK_PHRASES = frozenset({
    "thank you", "thank you very much", "thank you so much", "thanks", "thanks for watching",
    "thank you for watching", "thanks for listening", "thank you for listening", "please subscribe",
    "subtitles by the amara org community", "you", "bye", "see you next time", "see you in the next video",
    "please subscribe and hit the bell", "don t forget to subscribe to my channel", "don t forget to like and subscribe",
})
# A text made only of them is silence at a lower no-speech probability and a higher log-probability
# than openai's (0.6 and -1.0). Measured with base on bench/noise.py's ten files, whose references
# hold no "thank you" and where base wrote 10: each was one of them alone (or, once, the fallback's
# sample after one), over a quiet clip Whisper could not read or the edge of a stretch decoded again,
# at no-speech 0.30-0.83 and log-probability -0.88 to -1.23;
# espeak-ng's "Thank you." / "Thanks." / "Thank you very much." / "Thanks for watching." at -20 to
# -55 dBFS, under pink noise 20 dB below, and after JFK decoded at no-speech 0.03-0.43 and
# log-probability -0.38 to -0.78 (one "Thanks." after JFK, sampled after its greedy text failed:
# 0.57 and -1.00).
STOCK_NO_SPEECH = 0.2
STOCK_LOGPROB = -0.85


def is_stock_phrase(text: str) -> bool:
    """Whether ``text`` is made only of ``STOCK_PHRASES`` (one or more sentences or clauses, each one of them:
    "Thank you for watching, see you next time!", written by base translating after a FLEURS clip's end)."""
    sentences = [" ".join(re.sub(r"[^\w\s]", " ", t).lower().split()) for t in re.split(r"[.!?,]+(?:\s+|$)", text)]
    sentences = [t for t in sentences if t]
    return bool(sentences) and all(t in STOCK_PHRASES for t in sentences)


def repetitive(text: str, limit: float) -> bool:
    """openai's repetition check (compression ratio above ``limit``) or a loop at the text's end."""
    return compression_ratio(text) > limit or ends_in_loop(text)


@dataclass(frozen=True)
class QualityRules:
    """openai-whisper's thresholds (its defaults); ``None`` switches a check off."""

    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    best_of: int = 5
    sample_tokens_per_s: float | None = 12.0  # a sample's cap per second of audio; None: Whisper's 448
    length_penalty: float | None = None  # the ranking of beams and best-of samples (``length_normalized``)
    length_exponent: float = 1.0  # without a length_penalty, that ranking's power of the length (CTranslate2's)

    def sample_limit(self, seconds: float) -> int | None:
        """The most tokens a sample of ``seconds`` of audio may write."""
        if self.sample_tokens_per_s is None:
            return None
        return SAMPLE_TOKENS_BASE + int(self.sample_tokens_per_s * seconds)

    def validate(self) -> None:
        if not self.temperatures or any(not 0.0 <= t <= 1.0 for t in self.temperatures):
            raise ValueError(f"temperatures must be between 0 and 1, got {list(self.temperatures)}")
        if list(self.temperatures) != sorted(self.temperatures):
            raise ValueError(f"temperatures must be increasing, got {list(self.temperatures)}")
        if self.compression_ratio_threshold is not None and self.compression_ratio_threshold <= 0:
            raise ValueError(f"compression ratio threshold must be > 0, got {self.compression_ratio_threshold}")
        if self.logprob_threshold is not None and self.logprob_threshold > 0:
            raise ValueError(f"log-probability threshold must be <= 0, got {self.logprob_threshold}")
        if self.no_speech_threshold is not None and not 0.0 <= self.no_speech_threshold <= 1.0:
            raise ValueError(f"no-speech threshold must be between 0 and 1, got {self.no_speech_threshold}")
        if self.best_of < 1:
            raise ValueError(f"best-of must be >= 1, got {self.best_of}")
        if self.sample_tokens_per_s is not None and self.sample_tokens_per_s <= 0:
            raise ValueError(f"sample tokens per second must be > 0, got {self.sample_tokens_per_s}")
        if self.length_penalty is not None and not 0.0 <= self.length_penalty <= 10.0:
            raise ValueError(f"length penalty must be between 0 and 10, got {self.length_penalty}")
        if not 0.0 <= self.length_exponent <= 10.0:
            raise ValueError(f"length exponent must be between 0 and 10, got {self.length_exponent}")
        if self.length_penalty is not None and self.length_exponent != 1.0:
            raise ValueError("give one ranking of beams: a length penalty (openai-whisper's) or a length exponent "
                             "(faster-whisper's length_penalty), not both")

    def is_silence(self, seq: SequenceResult, vad_speech: bool = True, stock: bool = False, unheard_stretch: bool = False) -> bool:
        """openai's rule: Whisper's no-speech probability is high and the text unlikely. For audio the
        VAD already rejected, Whisper's no-speech probability alone is enough: both say no speech. A
        text of Whisper's stock phrases (``stock``: ``is_stock_phrase``) is silence at ``STOCK_NO_SPEECH``
        and ``STOCK_LOGPROB``, and at any in a stretch its chunk's decode skipped where the VAD hears no
        speech (``unheard_stretch``; a FLEURS clip's last 4 s of silence, decoded again, read "Thank you for
        watching. Don't forget to like and subscribe." at no-speech 0.49, log-probability -0.81; a chunk of
        its own the VAD did not hear may be a quiet "Thanks!", spoken); switched off with the no-speech check."""
        if self.no_speech_threshold is None:
            return False
        if stock and (unheard_stretch or (seq.no_speech_prob > STOCK_NO_SPEECH and seq.avg_logprob < STOCK_LOGPROB)):
            return True
        if seq.no_speech_prob <= self.no_speech_threshold:
            return False
        if not vad_speech:
            return True
        return self.logprob_threshold is not None and seq.avg_logprob < self.logprob_threshold

    def too_repetitive(self, attempt: Attempt) -> bool:
        limit = self.compression_ratio_threshold
        return limit is not None and (attempt.compression_ratio > limit or attempt.loops)

    def needs_fallback(self, attempt: Attempt) -> bool:
        too_repetitive = self.too_repetitive(attempt)
        too_unlikely = self.logprob_threshold is not None and attempt.seq.avg_logprob < self.logprob_threshold
        if self.is_silence(attempt.seq, stock=attempt.stock):  # silence: no fallback, the chunk is dropped
            return False
        return too_repetitive or too_unlikely or is_cut(attempt)


@dataclass
class Attempt:
    """One decode of one chunk."""

    seq: SequenceResult
    temperature: float
    compression_ratio: float
    loops: bool = False  # the text ends in a loop (``ends_in_loop``)
    passed: bool = True  # False: the pick among attempts that all failed the checks
    stock: bool = False  # the text is Whisper's stock phrases alone (``is_stock_phrase``)

    @classmethod
    def of(cls, seq: SequenceResult, temperature: float, text: str) -> "Attempt":
        return cls(seq, temperature, compression_ratio(text), ends_in_loop(text), stock=is_stock_phrase(text))


def is_cut(attempt: Attempt) -> bool:
    """A sample stopped at its cap (``QualityRules.sample_limit``): unfinished."""
    return attempt.temperature > 0 and attempt.seq.hit_max_length
