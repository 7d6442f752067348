"""openai-whisper's and faster-whisper's ``suppress_blank``, ``max_initial_timestamp`` and
``prompt_reset_on_temperature``: taken at every entry point, decoded as faster-whisper decodes them on the same
weights, speculative decoding unchanged by them. (The masks themselves are checked row by row against
openai-whisper's logit filters in test_rules.py.)"""

from __future__ import annotations

import pytest

from specwhisper.asr.decoding.greedy import SequenceResult
from specwhisper.asr.decoding.quality import Attempt, QualityRules
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.scheduling import FileResults
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import load_audio
from specwhisper.results.transcript import Segment

GREEDY = QualityRules(temperatures=(0.0,))  # faster-whisper's temperature=0.0
START = dict(suppress_blank=False, max_initial_timestamp=0.0)


@pytest.mark.parametrize("timestamps", [True, False], ids=["timestamps", "without-timestamps"])
def test_faster_whispers_text_and_times_and_speculation_unchanged(base_engine, faster_whisper_base, eval_root, timestamps):
    """JFK with a first token that may be blank or end-of-text and a first timestamp at 0 s at most: faster-
    whisper's text and segment ends on the same weights; the n-gram drafter gives plain decoding's tokens."""
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    opts = DecodeOptions(language="en", quality=GREEDY, without_timestamps=not timestamps, **START)
    ours = base_engine.transcribe(audio, opts, decoder=decoder_factory("none")(base_engine)).segments
    theirs = list(faster_whisper_base.transcribe(audio, language="en", temperature=0.0, beam_size=1,
                                                 condition_on_previous_text=False, without_timestamps=not timestamps,
                                                 **START)[0])
    assert [s.text for s in ours] == [s.text for s in theirs] and "ask not" in ours[0].text
    assert [round(s.end, 2) for s in ours] == [round(s.end, 2) for s in theirs]
    spec = base_engine.transcribe(audio, opts, decoder=decoder_factory("ngram")(base_engine)).segments
    assert [(s.start, s.end, s.tokens) for s in spec] == [(s.start, s.end, s.tokens) for s in ours]


@pytest.mark.parametrize("reset_above", [0.5, 0.2])
def test_the_text_before_a_chunk_is_dropped_after_a_decode_hotter_than_the_setting(reset_above):
    """Conditioning: after a chunk kept at temperature 0.4, the next chunk follows the text before it (openai-
    whisper's 0.5) or, with the setting below 0.4, nothing but the carried hotwords."""
    files = FileResults(1, [7, 8], conditioning=True, carried=[3], reset_temperature=reset_above)
    chunk = Chunk(0, 16000, ((0, 16000),))
    files.take((0, chunk), [Segment(0.0, 1.0, " Words.", tokens=[11, 12])], [], Attempt(SequenceResult([]), 0.4, 1.0))
    assert files.context(0) == ([3, 7, 8, 11, 12] if reset_above == 0.5 else [3])


def test_the_entry_points_take_them(run_cli, cli_run, eval_root, tmp_path):
    """The CLI (--no-suppress-blank, --max-initial-timestamp; out of range: one line), faster-whisper's
    ``WhisperModel`` and ``BatchedInferencePipeline``, openai-whisper's ``transcribe`` and ``decode``; the live
    mode, which does not apply them, refuses them."""
    import specwhisper
    from specwhisper.pipeline.faster_whisper import BatchedInferencePipeline, WhisperModel

    jfk = eval_root / "openai-whisper/jfk.flac"
    code, out, _ = run_cli(jfk, "-l", "en", "--no-suppress-blank", "--max-initial-timestamp", "0",
                           "--condition-on-previous-text", "--prompt-reset-on-temperature", "0.2", "-f", "txt", "-o", "-")
    assert code == 0 and "ask not what your country" in out, out
    for bad, message in [(["--max-initial-timestamp", "31"], "--max-initial-timestamp: must be between 0 and 30, got 31"),
                         (["--prompt-reset-on-temperature", "2"], "must be between 0 and 1, got 2"),
                         (["--live", "--no-suppress-blank"], "--suppress-blank does not apply to --live")]:
        code, _, err = cli_run(jfk, "-o", tmp_path, *bad)
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and message in lines[0], (bad, err)
    assert not list(tmp_path.iterdir())

    model = WhisperModel("base", device="cpu")
    for transcribe in (model.transcribe, BatchedInferencePipeline(model).transcribe):
        segments, _ = transcribe(str(jfk), language="en", beam_size=1, prompt_reset_on_temperature=0.2, **START)
        assert "ask not" in " ".join(s.text for s in segments)
    whisper = specwhisper.load_model("base")
    assert "ask not" in whisper.transcribe(str(jfk), **START)["text"]
    mel = specwhisper.log_mel_spectrogram(specwhisper.pad_or_trim(specwhisper.load_audio(str(jfk))))
    result = specwhisper.decode(whisper, mel, specwhisper.DecodingOptions(language="en", **START))
    assert "ask not" in result.text
