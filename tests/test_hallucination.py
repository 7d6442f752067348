"""openai-whisper's ``hallucination_silence_threshold`` (specwhisper.asr.hallucination) on audio built
from real speech: two clips of ../shared/eval with 20-30 s of music-like tones between them
(specwhisper.evaluation.music_gap), over which Whisper base writes YouTube sign-offs ("Don't forget
to subscribe to my channel!", "Thanks for watching!"). With the option most invented words go (what
is invented depends on the temperature fallback's draws: the checks run over several sampler seeds)
and the speech's words stay; the rules themselves are checked on made-up segments. Without the option,
noise the VAD hears no speech in keeps no text that fails openai's checks (a built talk under a noise
floor)."""

from __future__ import annotations

import pytest

from specwhisper.asr.decoding.quality import Attempt
from specwhisper.asr.decoding.greedy import SequenceResult
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.hallucination import screen
from specwhisper.asr.redecode import MAX_REDECODE_DEPTH
from specwhisper.asr.scheduling import FileResults
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.music_gap import MusicGap, music_gap
from specwhisper.evaluation.noise import with_noise
from specwhisper.evaluation.transcripts import build_long_file, deleted_share, normalize, read_textgrid_words
from specwhisper.pipeline.config import RunOptions
from specwhisper.results.transcript import Segment, Word

THRESHOLD = 2.0  # seconds


def _built(manifest, first: str, seconds: float, second: str) -> MusicGap:
    items = {i.file: i for i in manifest}
    return music_gap(items[first], seconds, items[second])


def _starts(transcript) -> list[float]:
    return [w.start for s in transcript.segments for w in s.words]


def _invented(base_pipeline, built: MusicGap, sampler_seed, seeds: range) -> tuple[int, int, int]:
    """Whisper base writes over the tones when the window's greedy text fails openai's checks and is
    sampled, so what it invents there, and whether openai's rules catch it, varies with the draws:
    the runs are repeated over several seeds of the fallback's sampler, and with every seed the
    speech stays. Returns the words started over the tones without and with the option, and the
    seeds whose guarded run has none there."""
    plain_words = guarded_words = clean = 0
    for seed in seeds:
        sampler_seed(seed)
        plain = base_pipeline.run(built.audio, RunOptions(decode=DecodeOptions(language="en", word_timestamps=True)))
        guarded = base_pipeline.run(built.audio, RunOptions(decode=DecodeOptions(language="en", hallucination_silence_threshold=THRESHOLD)))
        assert all(s.words for s in guarded.segments)  # timed words, though word timestamps were not asked for
        assert deleted_share(built.reference, guarded.text) <= 0.1, (seed, guarded.text)  # the speech is kept
        plain_words += built.inside(_starts(plain))
        guarded_words += built.inside(_starts(guarded))
        clean += built.inside(_starts(guarded)) == 0
    return plain_words, guarded_words, clean


def test_text_invented_over_music_is_dropped_and_speech_kept(base_pipeline, manifest, sampler_seed):
    """One 30 s window: 5.8 s of speech, 20 s of tones, 4.3 s of speech (the VAD hears the first
    clip only). With the fallback's sampler seeded 3, Whisper base writes "Subscribe to the channel
    and click the bell icon for more videos!" at 6.2-18.1 s, 11 of its words over the tones (seeds
    0-2 wrote 0, 0 and 1 there: what is invented rides on the draws); with the option none stays and
    the speech does."""
    built = _built(manifest, "cuttledoc-fleurs/fleurs-en-003.ogg", 20.0, "cuttledoc-fleurs/fleurs-en-004.ogg")
    plain, guarded, _ = _invented(base_pipeline, built, sampler_seed, range(3, 4))
    assert plain >= 8  # what the option is for: Whisper base writes over the tones
    assert guarded == 0, (plain, guarded)


@pytest.mark.slow  # the test above covers the rules; this one their mapping onto several chunks and a fallback
def test_over_several_chunks(base_pipeline, manifest, sampler_seed):
    """51 s in two chunks and their re-decodes: JFK, 30 s of tones, LJ001-0001. The tones after JFK are
    a skipped stretch, decoded again alone; over them Whisper base writes "Thank you." or "Thanks for
    watching!" as the pick of a fallback whose every temperature failed, which ``redecode.unheard``
    drops (the VAD hears no speech there): over sampler seeds 0-5 two words stayed without the option
    (10 before that rule), none with it. The speech stays with every seed."""
    built = _built(manifest, "openai-whisper/jfk.flac", 30.0, "coqui-tts-ljspeech/LJ001-0001.wav")
    plain, guarded, clean = _invented(base_pipeline, built, sampler_seed, range(6))
    assert guarded <= plain and clean >= 5, (plain, guarded, clean)


def test_noise_over_a_voice_too_quiet_to_hear_keeps_no_text(base_pipeline, tmp_path):
    """bench/longform.py's talk under pink noise 30 dB below its speech (bench/noise.py), 271.9-346.3 s:
    loud clips, FLEURS en-002 at -57 dBFS, under the noise (-54 dBFS), then FLEURS en-001 and MFA's
    corpus. The 14 s over en-002, a chunk the VAD hears nothing in, read "Thank you." at every
    temperature (kept at 0.2, log-probability -1.21) where openai-whisper, whose 30 s windows run on
    from the speech before, wrote none (on the whole file: 0 against 4): the chunk keeps no text, the
    speech beside it stays."""
    talk = build_long_file("dense", tmp_path, 600)
    noisy = with_noise(load_audio(talk.path), 30.0)
    got = normalize(base_pipeline.run(noisy[int(271.93 * SAMPLE_RATE) : int(346.31 * SAMPLE_RATE)],
                                      RunOptions(decode=DecodeOptions(language="en"))).text)
    assert "thank you" not in got, got
    for kept in ("comparatively modern", "antecedents", "tedious to him", "capital letter"):
        assert kept in got, (kept, got)


def test_a_stock_phrase_over_a_whispered_clip_goes_and_a_spoken_one_stays(base_pipeline, eval_root, tmp_path):
    """bench/longform.py's talk, 125-145 s: MFA's "this is all very whispered" clip (132.3-138.0 s), of
    which Whisper base reads the first words; the rest, decoded again alone, read "Thank you very
    much." (no-speech 0.56, log-probability -1.04), the sign-off Whisper writes where it hears no
    speech (``quality.is_stock_phrase``): it goes, the speech around it stays. The spoken "Thanks!" that
    ends MFA's corpus (from the pause before it, by its TextGrid), alone, 30 dB quieter, and under pink
    noise 20 dB below it, stays."""
    talk = load_audio(build_long_file("dense", tmp_path, 600).path)
    got = normalize(base_pipeline.run(talk[125 * SAMPLE_RATE : 145 * SAMPLE_RATE], RunOptions(decode=DecodeOptions(language="en"))).text)
    assert "thank you" not in got, got
    for kept in ("comparatively modern", "whisper", "acoustic corpus"):
        assert kept in got, (kept, got)
    words = read_textgrid_words(eval_root / "mfa/acoustic_corpus.TextGrid")
    (_, before, _), (start, _, said) = words[-2:]
    assert said == "thanks"
    thanks = load_audio(eval_root / "mfa/acoustic_corpus.wav")[round((before + start) / 2 * SAMPLE_RATE):]
    for audio in (thanks, thanks * 10 ** (-30 / 20), with_noise(thanks, 20.0)):
        assert normalize(base_pipeline.run(audio, RunOptions(decode=DecodeOptions(language="en"))).text) == "thanks"


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "2", True])
def test_bad_threshold_is_a_one_line_error(value):
    with pytest.raises(ValueError) as err:
        RunOptions(decode=DecodeOptions(hallucination_silence_threshold=value)).validate()
    assert str(err.value).startswith("hallucination silence threshold must be a number of seconds > 0") and "\n" not in str(err.value)


def _seg(start: float, text: str, probability: float, seconds_per_word: float) -> Segment:
    words, t = [], start
    for w in text.split():
        words.append(Word(t, t + seconds_per_word, " " + w, probability))
        t += seconds_per_word
    return Segment(start, t, " " + text, words=words)


def _invented_then_speech() -> tuple[Chunk, list[Segment]]:
    """A 30 s chunk: speech, a sign-off over tones (improbable words of 50 ms: openai's anomaly,
    with more than the threshold of silence either side), then speech again."""
    sr = SAMPLE_RATE
    chunk = Chunk(0, 30 * sr, ((0, 5 * sr), (25 * sr, 30 * sr)))
    return chunk, [_seg(0.5, "the cabbage juice changes color", 0.9, 0.4), _seg(10.0, "thanks for watching", 0.05, 0.05),
                   _seg(25.5, "many people do not think", 0.9, 0.4)]


def test_the_text_after_a_dropped_hallucination_waits_for_the_redecode():
    """openai drops an anomaly and everything after it and decodes again from its start; the text
    after it is kept in reserve (``redecode.Standing``), and at the depth limit it simply stays."""
    chunk, segs = _invented_then_speech()
    kept, view, again = screen(chunk, segs, THRESHOLD, 30.0)
    assert kept == segs[:1] and view.end == 10 * SAMPLE_RATE
    [(stretch, standing)] = again
    assert (stretch.start, stretch.end, stretch.depth) == (10 * SAMPLE_RATE, 30 * SAMPLE_RATE, 1)
    assert standing.segments == segs[2:] and standing.kind == "after hallucination"

    deep = Chunk(chunk.start, chunk.end, chunk.voiced, depth=MAX_REDECODE_DEPTH)
    kept, view, again = screen(deep, segs, THRESHOLD, 30.0)
    assert kept == [segs[0], segs[2]] and view == deep and again == []

    kept, view, again = screen(chunk, segs[:2], THRESHOLD, 12.0)  # the file ends right after it: nothing more
    assert kept == segs[:1] and again == []


def test_a_redecode_that_fails_every_check_leaves_the_text_it_was_to_replace():
    chunk, segs = _invented_then_speech()
    _, _, [(stretch, standing)] = screen(chunk, segs, THRESHOLD, 30.0)
    seq = SequenceResult(tokens=[1, 2], sum_logprob=-4.5, no_speech_prob=0.1)
    for passed, expected in [(True, " thank you"), (False, segs[2].text)]:
        files = FileResults(1, [], conditioning=False)
        files.take((0, chunk), segs[:1], [(stretch, standing)], Attempt(seq, 0.0, 1.0))
        files.take((0, stretch), [_seg(26.0, "thank you", 0.2, 0.3)], [], Attempt(seq, 1.0, 1.0, passed=passed))
        assert [s.text for s in files.segments[0]] == [segs[0].text, expected]


def test_an_anomaly_stretched_over_audio_the_vad_hears_no_speech_in_is_dropped():
    """The aligner stretches invented words over the tones up to the next speech (seed 3 of the
    one-window case: "Please subscribe to the channel and like the video." from 6.2 s to 25.7 s, "channel"
    9.3 s long), so no word gap is silence; the VAD hears no speech there, which counts as silence.
    The same segment over audio the VAD hears as speech stays (openai's rules alone)."""
    sr = SAMPLE_RATE
    segs = [_seg(0.5, "the cabbage juice changes color", 0.9, 0.4), _seg(6.0, "please subscribe to the channel", 0.1, 3.9),
            _seg(25.5, "many people do not think", 0.9, 0.4)]
    unheard = Chunk(0, 30 * sr, ((0, 5 * sr), (25 * sr, 30 * sr)))
    kept, view, [(stretch, standing)] = screen(unheard, segs, THRESHOLD, 30.0)
    assert kept == segs[:1] and view.end == 6 * sr and stretch.start == 6 * sr and standing.segments == segs[2:]

    heard = Chunk(0, 30 * sr, ((0, 30 * sr),))
    assert screen(heard, segs, THRESHOLD, 30.0) == (segs, heard, [])
