"""The live buffer and where it is cut: the audio that each update decodes again (at most Whisper's
30 s window), its offset in the stream, the last hypothesis in its own time, and the policy that
trims it. The trimming is whisper_streaming's (Macháček et al., 2023, ``OnlineASRProcessor``): once
the buffer passes ``trim_s`` it is cut at the end of the last Whisper segment whose words are all
confirmed; two more rules keep words from being lost at a cut (below)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specwhisper.asr.decoding.segments import TIME_PRECISION
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.audio.vad import WINDOW as VAD_WINDOW, VoiceActivityDetector
from specwhisper.live.agreement import LocalAgreement
from specwhisper.results.transcript import Segment, Word
from specwhisper.speculative.hypothesis import rebase_tokens

WINDOW_S = 30.0  # Whisper's window: the buffer never grows past it
# Two ways the buffer's cuts could lose words (traced on bench/streaming.py's 70 s file, where two whole clips
# went missing before these rules):
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




@dataclass
class LiveBuffer:
    vad: VoiceActivityDetector
    timestamp_begin: int  # the model's first timestamp token (the hypothesis is rebased at a cut)
    threshold: float = 0.5  # the VAD's speech threshold (``StreamOptions.vad_threshold``)
    buffer: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    offset: float = 0.0  # absolute time of the buffer's first sample
    received: float = 0.0  # seconds of audio pushed so far
    decoded_to: float = 0.0  # end of the audio the last update decoded
    previous: list[int] = field(default_factory=list)  # the last hypothesis, buffer-relative timestamps

    def push(self, audio: np.ndarray) -> None:
        self.buffer = np.concatenate([self.buffer, audio])
        self.received += len(audio) / SAMPLE_RATE

    def window(self) -> np.ndarray:
        """The audio an update decodes: the buffer's first ``WINDOW_S`` seconds."""
        return self.buffer[: int(WINDOW_S * SAMPLE_RATE)]

    def up_to_skipped_speech(self, words: list[Word], agreement: LocalAgreement) -> list[Word]:
        """``words`` up to the first gap (after the last confirmed word) of ``SKIP_GAP_S`` or more in
        which the VAD hears ``SKIP_SPEECH_S`` of speech: Whisper skipped it (reason 1 above). Only
        gaps after a confirmed word still in the buffer count: after the cut at such a gap the buffer
        starts there, so a stretch Whisper skips again is given up (no stall on noise the VAD hears)."""
        prev = agreement.last_time if agreement.in_buffer else None
        for i, w in enumerate(words):
            if prev is not None and w.start - prev >= SKIP_GAP_S and w.start > agreement.last_time:
                if self.speech_seconds(prev, w.start) >= SKIP_SPEECH_S:
                    return words[:i]
            prev = w.end if prev is None else max(prev, w.end)
        return words

    def speech_seconds(self, start: float, end: float) -> float:
        st = self
        a = max(0, int((start - st.offset) * SAMPLE_RATE))
        b = min(len(st.buffer), int((end - st.offset) * SAMPLE_RATE))
        if b - a < SAMPLE_RATE * SKIP_SPEECH_S:
            return 0.0
        probs = self.vad.speech_probs(st.buffer[a:b])  # ~10 ms for 2-5 s of audio
        return sum(p >= self.threshold for p in probs) * VAD_WINDOW / SAMPLE_RATE

    @property
    def end(self) -> float:
        """Absolute time of the buffer's last sample."""
        return self.offset + len(self.buffer) / SAMPLE_RATE

    def _untranscribed(self, start: float, end: float) -> bool:
        """``STALL_S`` or more of audio from ``start`` to ``end`` with speech in it: speech, not a pause,
        went untranscribed."""
        return end - start >= STALL_S and self.speech_seconds(start, end) >= SKIP_SPEECH_S

    def stalled(self, agreement: LocalAgreement) -> bool:
        """Nothing past the confirmed words in this hypothesis though ``STALL_S`` of audio with speech
        in it follow them (reason 2 above)."""
        done = agreement.last_time
        if done <= self.offset or agreement.pending():
            return False
        return self._untranscribed(done, self.offset + min(len(self.buffer) / SAMPLE_RATE, WINDOW_S))

    def unheard_after(self, agreement: LocalAgreement) -> float | None:
        """Where the last hypothesis (its confirmed and unconfirmed words) ends, when ``STALL_S`` or more of
        the buffer follow it with speech in them: Whisper ended its text before that speech."""
        pending = agreement.pending()
        end = max(agreement.last_time, pending[-1].end if pending else 0.0, self.offset)
        return end if self._untranscribed(end, self.end) else None

    def trim(self, segments: list[Segment], agreement: LocalAgreement, trim_s: float, waiting: bool = False,
             committed: bool = False) -> None:
        """Cut the buffer at the end of the last segment inside the confirmed words once it passes
        ``trim_s`` (whisper_streaming's segment trimming); past Whisper's window, at the last
        confirmed word's end, or keep the window's last seconds when nothing is confirmed. Not that
        last, unconfirmed cut while audio past the window is ``waiting`` and this decode had words:
        the next update decodes the same window again and confirms what the two agree on."""
        st = self
        seconds = min(len(st.buffer) / SAMPLE_RATE, WINDOW_S)  # what the update decoded
        if seconds <= trim_s:
            return
        done = agreement.last_time
        ends = [s.end for s in segments[:-1] if st.offset < s.end <= done + 1e-6]
        cut = max(ends) if ends else None
        if cut is None and seconds > WINDOW_S - 1.0:  # the next pieces would not fit the window:
            if waiting and segments and not committed:
                return  # a first look at this window: the next update decodes it again
            # at the last confirmed word if that frees enough room (or audio waits: what this update
            # confirmed is all the window gives), else unconfirmed audio goes
            end = st.offset + seconds
            cut = done if end - done <= WINDOW_S - 5.0 or (waiting and committed) else end - trim_s
        if cut is not None:
            self.cut(cut, agreement)

    def cut(self, at: float, agreement: LocalAgreement) -> None:
        st = self
        frames = int(round((at - st.offset) / TIME_PRECISION))
        samples = int(round(frames * TIME_PRECISION * SAMPLE_RATE))
        if frames <= 0:
            return
        st.buffer = st.buffer[samples:]
        st.offset += samples / SAMPLE_RATE
        st.previous = rebase_tokens(st.previous, self.timestamp_begin, frames)
        agreement.drop_before(st.offset)
