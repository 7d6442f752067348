"""Live transcription: audio arrives in pieces, the growing buffer is decoded again on every update
with the previous hypothesis as the speculative draft, and words are confirmed by local agreement.

The policy is whisper_streaming's (Macháček et al., 2023, ``OnlineASRProcessor``): each update
decodes the whole buffer (at most Whisper's 30 s window) after a prompt of the confirmed text that
has already left the buffer (its last ``prompt_chars`` characters); LocalAgreement-2
(``specwhisper.live.agreement``) confirms the words two consecutive hypotheses share; once the
buffer passes ``trim_s`` it is cut at the end of the last Whisper segment whose words are all
confirmed; the end of the stream confirms the last hypothesis.

What is new here is the decoder: consecutive hypotheses are nearly the same, so the previous one
drafts the next (``specwhisper.speculative.hypothesis``) for the exact speculative decoder
(``specwhisper.asr.decoding.speculative``): every re-decode is token-identical to plain greedy decoding of
the same buffer and prompt, at a fraction of the target passes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from specwhisper.asr.decoding.alignment import SENTENCE_END
from specwhisper.asr.decoding.greedy import Decoder, GreedyDecoder
from specwhisper.asr.decoding.language import detect_language
from specwhisper.asr.engine import TASKS, AsrEngine
from specwhisper.asr.decoding.fallback import compression_ratio
from specwhisper.asr.decoding.language import normalize_language
from specwhisper.asr.decoding.segments import TIME_PRECISION, tokens_to_segments
from specwhisper.asr.decoding.speculative import WhisperDrafter, Lookahead, SpeculativeDecoder
from specwhisper.results.stats import DecodeStats
from specwhisper.results.transcript import Segment, Transcript, Word
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.audio.vad import WINDOW as VAD_WINDOW
from specwhisper.live.agreement import LocalAgreement, before_squeezed_run
from specwhisper.hardware.memory import trim_heap
from specwhisper.speculative.hypothesis import HypothesisDrafter, rebase_tokens

ENCODERS = ("window", "audio")
WINDOW_S = 30.0  # Whisper's window: the buffer never grows past it
# A near-perfect draft wants long drafts: the draft length starts at 8 and grows to 24 while every
# drafted token is accepted. Measured on 25 s of clips in 1 s pieces (26 re-decodes, loaded 2-core
# CPU), decoder time over plain: 4..12 (the offline default) 1.47x, 8..24 1.50-1.52x, 24..48 1.51x,
# 32..64 1.49x, fixed 64 1.40x: the passes a re-decode needs are set by where the hypotheses differ,
# not by the draft length. With a perfect draft (the same buffer again) 8..24 gives 2.3x, 64 3.1x.
LIVE_LOOKAHEAD = Lookahead(initial=8, maximum=24)
# A re-decode that loops ("sense with the only sense with the only ...") runs to Whisper's 448-token
# limit: 399 tokens, 3-4 s of decoding where a sound one takes 0.3-0.7 s (seen on 3 of 40 re-decodes of
# 40 s of clips with the buffer-only encoder). Speech runs at 2-6 text tokens per second (the eval
# clips: 3.3) plus two timestamps per segment: a re-decode may write ``LOOP_TOKENS_BASE`` +
# ``LOOP_TOKENS_PER_S`` per second of buffer; one that needs more, or whose text is as repetitive as
# openai-whisper's fallback threshold, is not a hypothesis (it confirms nothing and drafts nothing).
# Plain and speculative decoding stop at the same token, so the cap keeps them token-identical.
LOOP_TOKENS_BASE = 16
LOOP_TOKENS_PER_S = 8.0
LOOP_COMPRESSION_RATIO = 2.4
# Words lost by trimming (traced on bench/streaming.py's 70 s file: two whole clips gone without these rules).
# 1. Whisper skipped a clip between two words that two hypotheses agreed on, and the buffer was then
#    cut past it. A hypothesis is now taken only up to a gap of ``SKIP_GAP_S`` or more that holds
#    ``SKIP_SPEECH_S`` of speech by the VAD: the words after it wait, so the buffer is cut at the gap.
# 2. After a cut inside a word, the re-decodes only repeated the confirmed words and nothing was cut
#    until the window forced unconfirmed audio out. When a hypothesis writes nothing past the confirmed
#    words while ``STALL_S`` or more of audio with speech in it follow them, the buffer is cut at the
#    last confirmed word, so the next decode starts on the audio that went untranscribed. Measured on
#    that file (CPU clock, buffer-only encoder): WER 0.384 -> 0.164 (offline 0.185), p50 latency
#    2.66 -> 2.49 s; the previous hypothesis drafts less after such cuts (acceptance 0.68 -> 0.56,
#    decoder 1.61x -> 1.43x over plain). Waiting for two stalled updates in a row kept the drafts on a
#    25 s file but lost words again (WER 0.219).
SKIP_GAP_S = 1.5
SKIP_SPEECH_S = 0.5
STALL_S = 3.0


class WhisperHypothesisDrafter(HypothesisDrafter, WhisperDrafter):
    """The previous-hypothesis drafter with the Whisper decoder's hooks (no model pass of its own)."""


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
    speculative: bool = True  # False: plain greedy re-decodes (the reference of the speed-up)
    # "audio": the encoder over the buffer's frames only (``encode_audio_part``, an approximation);
    # "window": over the whole 30 s window, as offline. In 0.5 s pieces (the web page's), bench file,
    # one thread, CPU clock: "window" fell behind real time (1.02 s per audio s, p50 2.75 s, WER
    # 0.260), "audio" kept up (0.77, p50 1.41 s, WER 0.103; offline 0.185).
    encoder: str = "audio"

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
class LiveDecode:
    """One re-decode: its buffer, prompt and output tokens, for checks and benchmarks (the encoder
    output is only kept here for the observer's call)."""

    buffer_start: float
    buffer_seconds: float
    prompt: list[int]
    tokens: list[int]
    encoder_out: torch.Tensor
    stats: DecodeStats
    segments: list[Segment]
    max_len: int = 448  # the decoder's length limit (prompt and tokens) for this buffer (``token_cap``)
    looped: bool = False  # hit the token cap or too repetitive: not used as a hypothesis
    # the cross-attention K/V projection, made once for the decode and the alignment (part of the
    # decoder's cost: ``stats.decoder_seconds`` is the decode after it)
    cross_seconds: float = 0.0


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


@dataclass
class StreamState:
    buffer: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    offset: float = 0.0  # absolute time of the buffer's first sample
    received: float = 0.0  # seconds of audio pushed so far
    decoded_to: float = 0.0  # end of the audio the last update decoded
    previous: list[int] = field(default_factory=list)  # the last hypothesis, buffer-relative timestamps
    confirmed: list[Word] = field(default_factory=list)


class StreamingTranscriber:
    """One live stream over a loaded ``AsrEngine``: ``push`` audio, ``update`` to re-decode, ``finish``."""

    def __init__(self, engine: AsrEngine, options: StreamOptions | None = None, observer: Observer | None = None):
        self.engine = engine
        self.opts = options or StreamOptions()
        self.opts.validate()
        self.language = self.opts.language
        self.observer = observer
        sp = engine.special
        self.drafter = WhisperHypothesisDrafter(sp.timestamp_begin)
        self.decoder: Decoder = (SpeculativeDecoder(engine.runtime, sp, engine.rules, self.drafter, LIVE_LOOKAHEAD)
                                 if self.opts.speculative else GreedyDecoder(engine.runtime, sp, engine.rules))
        self.agreement = LocalAgreement()
        self.state = StreamState()
        self.stats = DecodeStats()

    @property
    def confirmed(self) -> list[Word]:
        return list(self.state.confirmed)

    @property
    def room_s(self) -> float:
        """Seconds of audio the buffer takes before it holds a whole window (more waits for later updates)."""
        return max(0.0, WINDOW_S - len(self.state.buffer) / SAMPLE_RATE)

    def push(self, audio: np.ndarray) -> None:
        """Append 16 kHz mono float32 samples (any length); nothing is decoded until ``update``, which
        decodes the buffer's first ``WINDOW_S`` seconds (the rest waits for the next updates)."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError(f"live audio must be mono samples (one dimension), got shape {audio.shape}")
        self.state.buffer = np.concatenate([self.state.buffer, audio])
        self.state.received += len(audio) / SAMPLE_RATE

    def update(self) -> StreamUpdate:
        """Re-decode the buffer, confirm what two hypotheses agree on, trim the buffer."""
        t0 = time.perf_counter()
        st = self.state
        if len(st.buffer) < self.opts.min_update_s * SAMPLE_RATE:
            return StreamUpdate(Confirmed([]), self._partial(), time.perf_counter() - t0)
        decode = self._decode()
        committed: list[Word] = []
        if not decode.looped:
            self.agreement.insert(before_squeezed_run(self._up_to_skipped_speech([w for s in decode.segments for w in s.words])))
            committed = self.agreement.flush()
            st.confirmed.extend(committed)
        st.decoded_to = st.offset + decode.buffer_seconds
        if not decode.looped and self._stalled():
            self._cut(self.agreement.last_time)
        else:
            self._trim(decode.segments, waiting=st.received > st.decoded_to + 1e-6, committed=bool(committed))
        update = StreamUpdate(Confirmed(committed), self._partial(), time.perf_counter() - t0, decode)
        if self.observer is not None:
            self.observer(decode)
        decode.encoder_out = None  # megabytes: not kept past the observer
        return update

    def finish(self) -> StreamUpdate:
        """End of stream: decode what arrived since the last update, then confirm the last hypothesis."""
        t0 = time.perf_counter()
        st = self.state
        update, words = None, []
        # more than a window may be waiting (a client that sent faster than the updates ran): each
        # update decodes a window and trims it; bounded, as a window that cannot be cut stays
        for _ in range(int(len(st.buffer) / SAMPLE_RATE / self.opts.trim_s) + 2):
            if st.received <= st.decoded_to + 1e-6:
                break
            update = self.update()
            words += update.confirmed.words
        rest = self.agreement.pending()
        self.agreement.tail = []
        st.confirmed.extend(rest)
        words += rest
        return StreamUpdate(Confirmed(words), Partial(""), time.perf_counter() - t0, update.decode if update else None)

    def transcript(self, compute_s: float, source: str | None = None) -> Transcript:
        """The confirmed stream as a transcript, for the usual output formats (every way in: the
        CLI's ``--live``, the web UI's Live tab, the WebSocket's final message); ``compute_s``: the
        updates' compute seconds."""
        duration = self.state.received
        segments = words_to_segments(self.state.confirmed)
        for seg in segments:  # its text's tokens (offline segments carry the decoded ones)
            seg.tokens = self.engine.bundle.tokenizer.encode(seg.text, add_special_tokens=False)
        return Transcript(segments, self.language, duration,
                          model={"asr": self.engine.model_name, "live": True,
                                 "drafter": self.drafter.name if self.opts.speculative else None},
                          timings={"compute": round(compute_s, 3), "rtf": round(compute_s / max(duration, 1e-9), 4)},
                          stats=self.stats, source=source)

    # ------------------------------------------------------------------ internals

    def _context(self) -> list[int]:
        """The confirmed text that has left the buffer, its last ``prompt_chars`` characters (whole words)."""
        st, text = self.state, ""
        for w in reversed(st.confirmed):
            if w.end > st.offset + 1e-6:
                continue
            if len(text) + len(w.text) > self.opts.prompt_chars:
                break
            text = w.text + text
        return self.engine.bundle.tokenizer.encode(" " + text.strip(), add_special_tokens=False) if text.strip() else []

    @torch.inference_mode()
    def _decode(self) -> LiveDecode:
        eng, st = self.engine, self.state
        audio = st.buffer[: int(WINDOW_S * SAMPLE_RATE)]
        seconds = len(audio) / SAMPLE_RATE
        t = time.perf_counter()
        feats = eng.features(audio, [Chunk(0, len(audio))])
        enc = eng.runtime.encode(feats) if self.opts.encoder == "window" else eng.runtime.encode_audio_part(feats)
        trim_heap()
        self.stats.encoder_seconds += time.perf_counter() - t
        if self.language is None and eng.special.multilingual:
            self.language = detect_language(eng.runtime, eng.special, enc)[0]
        prompt = eng.special.prompt(self.language, self.opts.task, timestamps=True, context=self._context())
        t = time.perf_counter()
        with eng.runtime.sharing_cross_kv(enc):  # the decode and the alignment attend to the same frames
            cross_seconds = time.perf_counter() - t
            self.stats.decoder_seconds += cross_seconds
            decode = self._decode_and_align(enc, prompt, seconds)
        decode.cross_seconds = cross_seconds
        return decode

    def _decode_and_align(self, enc: torch.Tensor, prompt: list[int], seconds: float) -> LiveDecode:
        eng, st = self.engine, self.state
        self.drafter.set_source(st.previous)
        max_len = self.decoder.max_len = min(eng.runtime.max_len, len(prompt) + token_cap(seconds))
        out = self.decoder.decode(enc, prompt)
        seq = out.sequences[0]
        self.stats.merge(out.stats)
        segments = tokens_to_segments(seq.tokens, eng.special, eng.bundle.tokenizer, st.offset, seconds,
                                      drop_unfinished=seq.hit_max_length)
        text = "".join(s.text for s in segments)
        if seq.hit_max_length or compression_ratio(text) > LOOP_COMPRESSION_RATIO:
            return LiveDecode(st.offset, seconds, prompt, list(seq.tokens), enc, out.stats, [], max_len, looped=True)
        t = time.perf_counter()
        eng.aligner.align(enc, [segments], [st.offset], [seconds], self.language, self.opts.task)
        self.stats.alignment_seconds += time.perf_counter() - t
        st.previous = list(seq.tokens)
        return LiveDecode(st.offset, seconds, prompt, list(seq.tokens), enc, out.stats, segments, max_len)

    def _up_to_skipped_speech(self, words: list[Word]) -> list[Word]:
        """``words`` up to the first gap (after the last confirmed word) of ``SKIP_GAP_S`` or more in
        which the VAD hears ``SKIP_SPEECH_S`` of speech: Whisper skipped it (reason 1 above). Only
        gaps after a confirmed word still in the buffer count: after the cut at such a gap the buffer
        starts there, so a stretch Whisper skips again is given up (no stall on noise the VAD hears)."""
        prev = self.agreement.last_time if self.agreement.in_buffer else None
        for i, w in enumerate(words):
            if prev is not None and w.start - prev >= SKIP_GAP_S and w.start > self.agreement.last_time:
                if self._speech_seconds(prev, w.start) >= SKIP_SPEECH_S:
                    return words[:i]
            prev = w.end if prev is None else max(prev, w.end)
        return words

    def _speech_seconds(self, start: float, end: float) -> float:
        st = self.state
        a = max(0, int((start - st.offset) * SAMPLE_RATE))
        b = min(len(st.buffer), int((end - st.offset) * SAMPLE_RATE))
        if b - a < SAMPLE_RATE * SKIP_SPEECH_S:
            return 0.0
        probs = self.engine.vad.speech_probs(st.buffer[a:b])  # ~10 ms for 2-5 s of audio
        return sum(p >= self.engine.vad.threshold for p in probs) * VAD_WINDOW / SAMPLE_RATE

    def _stalled(self) -> bool:
        """Nothing past the confirmed words in this hypothesis though ``STALL_S`` of audio with speech
        in it follow them (reason 2 above)."""
        st, done = self.state, self.agreement.last_time
        end = st.offset + min(len(st.buffer) / SAMPLE_RATE, WINDOW_S)
        if done <= st.offset or self.agreement.pending() or end - done < STALL_S:
            return False
        return self._speech_seconds(done, end) >= SKIP_SPEECH_S  # speech, not a pause, went untranscribed

    def _trim(self, segments: list[Segment], waiting: bool = False, committed: bool = False) -> None:
        """Cut the buffer at the end of the last segment inside the confirmed words once it passes
        ``trim_s`` (whisper_streaming's segment trimming); past Whisper's window, at the last
        confirmed word's end, or keep the window's last seconds when nothing is confirmed. Not that
        last, unconfirmed cut while audio past the window is ``waiting`` and this decode had words:
        the next update decodes the same window again and confirms what the two agree on."""
        st = self.state
        seconds = min(len(st.buffer) / SAMPLE_RATE, WINDOW_S)  # what the update decoded
        if seconds <= self.opts.trim_s:
            return
        done = self.agreement.last_time
        ends = [s.end for s in segments[:-1] if st.offset < s.end <= done + 1e-6]
        cut = max(ends) if ends else None
        if cut is None and seconds > WINDOW_S - 1.0:  # the next pieces would not fit the window:
            if waiting and segments and not committed:
                return  # a first look at this window: the next update decodes it again
            # at the last confirmed word if that frees enough room (or audio waits: what this update
            # confirmed is all the window gives), else unconfirmed audio goes
            end = st.offset + seconds
            cut = done if end - done <= WINDOW_S - 5.0 or (waiting and committed) else end - self.opts.trim_s
        if cut is not None:
            self._cut(cut)

    def _cut(self, at: float) -> None:
        st = self.state
        frames = int(round((at - st.offset) / TIME_PRECISION))
        samples = int(round(frames * TIME_PRECISION * SAMPLE_RATE))
        if frames <= 0:
            return
        st.buffer = st.buffer[samples:]
        st.offset += samples / SAMPLE_RATE
        st.previous = rebase_tokens(st.previous, self.engine.special.timestamp_begin, frames)
        self.agreement.drop_before(st.offset)

    def _partial(self) -> Partial:
        pending = self.agreement.pending()
        if not pending:
            return Partial("")
        return Partial("".join(w.text for w in pending), pending[0].start, pending[-1].end)


def token_cap(seconds: float) -> int:
    """The most tokens a re-decode of ``seconds`` of buffer may write (``LOOP_TOKENS_PER_S``)."""
    return LOOP_TOKENS_BASE + int(LOOP_TOKENS_PER_S * seconds)


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
