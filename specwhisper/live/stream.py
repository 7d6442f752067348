"""Live transcription: audio arrives in pieces, the growing buffer is decoded again on every update
with the previous hypothesis as the speculative draft, and words are confirmed by local agreement.

The policy is whisper_streaming's (Macháček et al., 2023, ``OnlineASRProcessor``): each update
decodes the whole buffer (``specwhisper.live.decoder``) after a prompt of the confirmed text that has
already left the buffer (its last ``prompt_chars`` characters); LocalAgreement-2
(``specwhisper.live.agreement``) confirms the words two consecutive hypotheses share; the buffer is
then trimmed (``specwhisper.live.buffer``); the end of the stream confirms the last hypothesis.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specwhisper.asr.decoding.quality import QualityRules, compression_ratio
from specwhisper.asr.decoding.language import normalize_language
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import TASKS, DecodeOptions
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.live.agreement import LocalAgreement, before_squeezed_run
from specwhisper.live.buffer import WINDOW_S, LiveBuffer
from specwhisper.live.decoder import ENCODERS, LiveDecode, LiveDecoder, WhisperHypothesisDrafter
from specwhisper.results.stats import DecodeStats
from specwhisper.results.transcript import Segment, Transcript, Word
from specwhisper.results.words import SENTENCE_END


class LiveError(ValueError):
    """A live stream or a request for one that cannot go on as asked: ``str()`` is one line for users,
    ``status`` the HTTP-like status a server answers with (the WebSocket route, the web UI's Live tab,
    ``transcribe --live``)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class StreamOptions:
    language: str | None = None  # None: detected on the first update, then kept
    task: str = "transcribe"
    trim_s: float = 15.0  # cut the buffer at a confirmed segment end once it is this long
    prompt_chars: int = 200  # confirmed text before the buffer given as the decoder's context
    min_update_s: float = 0.3  # no decode of a buffer shorter than this
    # no re-decode before this much audio arrived since the last one: two hypotheses over nearly the same
    # audio agree on words the next second of it changes (bench/realtime.py's talk in turns, base, its audio
    # in 0.1 s pieces: WER 0.222 with an update per piece, 0.075 with this wait; offline 0.126)
    min_step_s: float = 0.5
    # without a language, the first update waits for this much speech (the VAD's) in the window: it detects
    # the stream's language, kept after (base heard Chinese in the first 0.3-0.5 s of an English talk:
    # bench/realtime.py). Counted in audio, a FLEURS clip's second of silence left one second of speech:
    # German, French and Spanish clips were decoded as English (translated) or Welsh
    detect_s: float = 2.0
    # ... and, until the window is full, for a detection this likely (else it waits for more speech): a
    # greeting, a pause and German were decoded as Japanese from the greeting's guess
    language_threshold: float = 0.5
    speculative: bool = True  # False: plain greedy re-decodes (the reference of the speed-up)
    # text before the stream (names, a glossary: offline's initial prompt and hotwords), in every re-decode's
    # context ahead of the confirmed text; a realtime turn's prompt
    initial_prompt: str | None = None
    # "audio": the encoder over the buffer's frames only (``encode_audio_part``, an approximation);
    # "window": over the whole 30 s window, as offline. In 0.5 s pieces (the web page's), bench file,
    # one thread, CPU clock: "window" fell behind real time (1.02 s per audio s, p50 2.75 s, WER
    # 0.260), "audio" kept up (0.77, p50 1.41 s, WER 0.103; offline 0.185).
    encoder: str = "audio"
    # silero-vad's speech threshold, for what the stream hears as speech: the speech the first update waits
    # for, the skipped and untranscribed speech that cuts the buffer, the speech that keeps a text Whisper
    # reads as no speech (offline's --vad-threshold)
    vad_threshold: float = 0.5
    # a re-decode is silence (it confirms nothing) by openai-whisper's rule with these thresholds: offline's
    # --no-speech-threshold and --logprob-threshold (None switches the check, or its log-probability part, off)
    no_speech_threshold: float | None = 0.6
    logprob_threshold: float | None = -1.0
    suppress_tokens: str | None = None  # offline's --suppress-tokens (None: the engine's own set)
    # False: the transcript's segments without their words (offline's --no-word-timestamps); the stream
    # confirms words either way (its agreement is of timed words)
    word_timestamps: bool = True

    @classmethod
    def of(cls, decode: DecodeOptions, word_timestamps: bool | None = None, **live) -> StreamOptions:
        """The live stream of a request's decode options: its language, task, prompt text, language
        threshold, VAD threshold, silence thresholds and suppressed tokens (the run options the live engine applies:
        ``specwhisper.pipeline.options.Option.live``); ``word_timestamps`` as the request gave it (None, the
        default: on, live words always have times; ``decode`` holds offline's resolved value)."""
        return cls(language=decode.language, task=decode.task, initial_prompt=decode.prompt_text,
                   language_threshold=decode.language_threshold, vad_threshold=decode.vad_threshold,
                   no_speech_threshold=decode.quality.no_speech_threshold,
                   logprob_threshold=decode.quality.logprob_threshold, suppress_tokens=decode.suppress_tokens,
                   word_timestamps=word_timestamps is not False, **live)

    @property
    def silence(self) -> QualityRules:
        """openai-whisper's no-speech rule with this stream's thresholds."""
        return QualityRules(no_speech_threshold=self.no_speech_threshold, logprob_threshold=self.logprob_threshold)

    def validate(self) -> None:
        self.language = normalize_language(self.language)
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got '{self.task}'")
        if not 2.0 <= self.trim_s <= WINDOW_S - 2.0:
            raise ValueError(f"trim length must be between 2 and {WINDOW_S - 2:.0f} s, got {self.trim_s}")
        if self.encoder not in ENCODERS:
            raise ValueError(f"live encoder must be one of {', '.join(ENCODERS)}, got '{self.encoder}'")
        if self.prompt_chars < 0:
            raise ValueError(f"prompt length must be >= 0 characters, got {self.prompt_chars}")
        if not (self.min_step_s >= 0 and self.detect_s >= 0):
            raise ValueError(f"the update step and the detection wait must be >= 0 s, got {self.min_step_s} and {self.detect_s}")
        if not 0.0 <= self.language_threshold <= 1.0:
            raise ValueError(f"language threshold must be between 0 and 1, got {self.language_threshold}")
        if not 0.0 < self.vad_threshold < 1.0:
            raise ValueError(f"VAD threshold must be between 0 and 1 (exclusive), got {self.vad_threshold}")
        self.silence.validate()


@dataclass
class Confirmed:
    """Words confirmed by this update (absolute times); never revised, never repeated."""

    words: list[Word]

    @property
    def text(self) -> str:
        return "".join(w.text for w in self.words)


@dataclass
class Partial:
    """The current hypothesis past the confirmed words (may still change)."""

    text: str
    start: float | None = None
    end: float | None = None


@dataclass
class StreamUpdate:
    confirmed: Confirmed
    partial: Partial
    seconds: float  # compute time of the update (encoder, decoder, alignment, agreement)
    decode: LiveDecode | None = None  # None: nothing was decoded (too little audio)

    @property
    def events(self) -> list[Confirmed | Partial]:
        return ([self.confirmed] if self.confirmed.words else []) + [self.partial]


Observer = Callable[[LiveDecode], None]


class StreamingTranscriber:
    """One live stream over a loaded ``AsrEngine``: ``push`` audio, ``update`` to re-decode, ``finish``."""

    def __init__(self, engine: AsrEngine, options: StreamOptions | None = None, observer: Observer | None = None):
        self.engine = engine
        self.opts = options or StreamOptions()
        self.opts.validate()
        self.observer = observer
        self.decoder = LiveDecoder(engine, self.opts.task, self.opts.encoder, self.opts.speculative, self.opts.language,
                                   self.opts.silence, self.opts.vad_threshold, self.opts.suppress_tokens)
        self.agreement = LocalAgreement()
        self.state = LiveBuffer(engine.vad, engine.special.timestamp_begin, self.opts.vad_threshold)
        self.confirmed_words: list[Word] = []
        self.looped = False  # the last decode looped (no hypothesis)
        self.prompt = self._tokens(self.opts.initial_prompt)
        self.looked_at = -math.inf  # audio received at the last detection that was not sure (``_language_floors``)

    @property
    def language(self) -> str | None:
        return self.decoder.language

    @property
    def stats(self) -> DecodeStats:
        return self.decoder.stats

    @property
    def drafter(self) -> WhisperHypothesisDrafter:
        return self.decoder.drafter

    @property
    def confirmed(self) -> list[Word]:
        return list(self.confirmed_words)

    def push(self, audio: np.ndarray) -> None:
        """Append 16 kHz mono float32 samples (any length); nothing is decoded until ``update``, which
        decodes the buffer's first ``WINDOW_S`` seconds (the rest waits for the next updates)."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError(f"live audio must be mono samples (one dimension), got shape {audio.shape}")
        self.state.push(audio)

    def update(self, final: bool = False, window: bool = False) -> StreamUpdate:
        """Re-decode the buffer, confirm what two hypotheses agree on, trim the buffer (nothing before
        ``min_step_s`` of new audio, unless ``final``: the stream ends; ``window``: the encoder over the
        whole 30 s window, as offline)."""
        t0 = time.perf_counter()
        st = self.state
        if len(st.buffer) < self.opts.min_update_s * SAMPLE_RATE or (
                not final and st.received - st.decoded_to < self.opts.min_step_s - 1e-9):
            return StreamUpdate(Confirmed([]), self._partial(), time.perf_counter() - t0)
        floors = (0.0, 0.0) if final else self._language_floors()
        if floors is None:
            return StreamUpdate(Confirmed([]), self._partial(), time.perf_counter() - t0)
        decode = self.decoder.decode(st.window(), st.offset, self._context(), st.previous, window=window,
                                     language_floor=floors[0], keep_floor=floors[1])
        if decode is None:  # the language is not sure yet: a look again after min_step_s more audio
            self.looked_at = st.received
            return StreamUpdate(Confirmed([]), self._partial(), time.perf_counter() - t0)
        self.looped = decode.looped
        committed: list[Word] = []
        if not decode.looped:
            st.previous = list(decode.tokens)
            words = st.up_to_skipped_speech([w for s in decode.segments for w in s.words], self.agreement)
            self.agreement.insert(before_squeezed_run(words))
            committed = self.agreement.flush()
            self.confirmed_words.extend(committed)
        st.decoded_to = st.offset + decode.buffer_seconds
        if not decode.looped and st.stalled(self.agreement):
            st.cut(self.agreement.last_time, self.agreement)
        else:
            st.trim(decode.segments, self.agreement, self.opts.trim_s, waiting=st.received > st.decoded_to + 1e-6,
                    committed=bool(committed))
        update = StreamUpdate(Confirmed(committed), self._partial(), time.perf_counter() - t0, decode)
        if self.observer is not None:
            self.observer(decode)
        decode.encoder_out = None  # megabytes: not kept past the observer
        return update

    def _language_floors(self) -> tuple[float, float] | None:
        """Before the stream's language is detected: None while the window holds under ``detect_s`` of
        speech (nothing to decode yet), else the probability the detection must reach for this update to
        decode, and for the stream to keep its language (``language_threshold`` both; once the window is
        full, 0 to decode: its likeliest language is taken, and kept only if the window holds ``detect_s``
        of speech). A greeting alone, then 30 s of waiting ("Allô?", base: English) decided a French
        stream's language; now only the greeting is written in it, and the speech after decides. A
        buffer of ``trim_s`` or more in which the VAD hears nothing is cut to its last second (no speech
        is lost), so that speech after a long silence is still in the window."""
        st = self.state
        if self.decoder.language is not None or not self.engine.special.multilingual:
            return 0.0, 0.0
        if st.received - self.looked_at < self.opts.min_step_s - 1e-9:
            return None
        seconds = min(len(st.buffer) / SAMPLE_RATE, WINDOW_S)
        heard = st.speech_seconds(st.offset, st.offset + seconds)
        if heard == 0.0 and seconds >= self.opts.trim_s:
            st.cut(st.end - 1.0, self.agreement)
            return None
        full = seconds >= WINDOW_S - 1.0
        if heard < self.opts.detect_s and not full:
            return None
        if not full:
            return self.opts.language_threshold, self.opts.language_threshold
        return 0.0, (0.0 if heard >= self.opts.detect_s else math.inf)

    def finish(self) -> StreamUpdate:
        """End of stream: decode what arrived since the last update, then confirm the last hypothesis."""
        t0 = time.perf_counter()
        st = self.state
        update, words, tail = None, [], self.agreement.pending()
        # more than a window may be waiting (a client that sent faster than the updates ran): each
        # update decodes a window and trims it; bounded, as a window that cannot be cut stays
        for _ in range(int(len(st.buffer) / SAMPLE_RATE / self.opts.trim_s) + 3):
            if st.received <= st.decoded_to + 1e-6:
                # all of it decoded, but the last hypothesis may end before speech that follows it (Whisper
                # wrote its end of text early: 48 s sent at once to a realtime turn, tiny.en stopped at "in
                # 1813." with 15 s of speech after it, WER 0.526): its words stand, the rest is decoded after them
                at = st.unheard_after(self.agreement)
                if at is None or at <= st.offset + 1e-6:  # nothing, or nothing heard yet: a decode again reads the same
                    break
                last = self.agreement.confirm_tail()
                self.confirmed_words.extend(last)
                words += last
                st.cut(at, self.agreement)
            update = self.update(final=True)
            words += update.confirmed.words
        # when the last decode looped, or nothing was heard yet: one more look at what is not confirmed, with
        # the encoder over the whole window as offline. The buffer's frames alone show Whisper no end of
        # audio: a short turn sent at once looped on its text ("In 18 13. In 18 13. ...") and came back empty
        # (an OpenAI Realtime turn of 1.5 s, tests/test_realtime_ws.py). Not at every end: bench/realtime.py's
        # turns, 0.1 s at a time, went from WER 0.075 to 0.105 that way (laughter written as "Ha ha ha!")
        unread = st.end - max(self.agreement.last_time, st.offset) > self.opts.min_update_s
        if unread and (self.looped or not (self.confirmed_words or self.agreement.pending())):
            update = self.update(final=True, window=True)
            words += update.confirmed.words
        rest = self.agreement.pending()
        if not words and not rest:
            # the last looks read nothing past the confirmed words (they looped, or the whole window's decode
            # read the speech already confirmed): the last hypothesis's tail stands, as LocalAgreement ends a
            # stream (whisper_streaming's ``finish``). bench/realtime.py's talk, its last 19 s in 0.1 s pieces:
            # " a liner." was the tail for 6 s of decodes that looped, and the end returned nothing
            rest = tail
        self.agreement.tail = []
        self.confirmed_words.extend(rest)
        words += rest
        return StreamUpdate(Confirmed(words), Partial(""), time.perf_counter() - t0, update.decode if update else None)

    def transcript(self, compute_s: float, source: str | None = None) -> Transcript:
        """The confirmed stream as a transcript, for the usual output formats (every way in: the
        CLI's ``--live``, the web UI's Live tab, the WebSocket's final message); ``compute_s``: the
        updates' compute seconds."""
        duration = self.state.received
        segments = words_to_segments(self.confirmed_words)
        for seg in segments:  # its text's tokens (offline segments carry the decoded ones)
            seg.tokens = self.engine.bundle.tokenizer.encode(seg.text, add_special_tokens=False)
            # offline's per-token average is a decode's; a live segment's words come from several
            # decodes, so it is their words' (each word's probability: its tokens' mean); a decode
            # that reads as no speech confirms nothing (``live.decoder``), so no_speech_prob stays 0
            seg.compression_ratio = compression_ratio(seg.text)
            probabilities = [w.probability for w in seg.words if w.probability]
            seg.avg_logprob = sum(map(math.log, probabilities)) / len(probabilities) if probabilities else 0.0
            if not self.opts.word_timestamps:
                seg.words = []
        return Transcript(segments, self.language, duration,
                          model={"asr": self.engine.model_name, "live": True,
                                 "drafter": self.drafter.name if self.opts.speculative else None},
                          timings={"compute": round(compute_s, 3), "rtf": round(compute_s / max(duration, 1e-9), 4)},
                          stats=self.stats, source=source)

    # ------------------------------------------------------------------ internals

    def _context(self) -> list[int]:
        """The initial prompt, then the confirmed text that has left the buffer, its last ``prompt_chars``
        characters (whole words)."""
        st, text = self.state, ""
        for w in reversed(self.confirmed_words):
            if w.end > st.offset + 1e-6:
                continue
            if len(text) + len(w.text) > self.opts.prompt_chars:
                break
            text = w.text + text
        return self.prompt + self._tokens(text)

    def _tokens(self, text: str | None) -> list[int]:
        return self.engine.bundle.tokenizer.encode(" " + text.strip(), add_special_tokens=False) if text and text.strip() else []

    def _partial(self) -> Partial:
        pending = self.agreement.pending()
        if not pending:
            return Partial("")
        return Partial("".join(w.text for w in pending), pending[0].start, pending[-1].end)


SEGMENT_GAP_S = 1.0  # a pause this long between confirmed words starts a new segment


def words_to_segments(words: list[Word]) -> list[Segment]:
    """The confirmed stream as transcript segments (for the usual output formats): a segment ends
    with a sentence or at a pause of ``SEGMENT_GAP_S``."""
    segments: list[Segment] = []
    run: list[Word] = []
    for i, w in enumerate(words):
        run.append(w)
        last = i == len(words) - 1
        text = w.text.strip()
        if last or (text and text[-1] in SENTENCE_END) or words[i + 1].start - w.end >= SEGMENT_GAP_S:
            segments.append(Segment(start=run[0].start, end=run[-1].end, text="".join(x.text for x in run), words=run))
            run = []
    return segments


def play(transcriber: StreamingTranscriber, audio: np.ndarray, chunk_s: float = 1.0,
         on_update: Callable[[StreamUpdate], None] | None = None) -> list[Word]:
    """Feed ``audio`` in ``chunk_s`` pieces as fast as the updates run (no clock), then finish;
    the confirmed words. The simulated real-time clock is the benchmark's (bench/streaming.py)."""
    step = max(1, int(round(chunk_s * SAMPLE_RATE)))
    for a in range(0, len(audio), step):
        transcriber.push(audio[a : a + step])
        update = transcriber.update()
        if on_update is not None:
            on_update(update)
    last = transcriber.finish()
    if on_update is not None:
        on_update(last)
    return transcriber.confirmed
