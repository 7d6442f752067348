"""``max_new_tokens`` (faster-whisper's name; openai-whisper's ``sample_len``): a window's decode writes at most
that many tokens, timestamps included. Speculative decoding stops where plain decoding stops (the same tokens
in a batch whose rows end apart), a capped decode is the first tokens of the uncapped one, and every entry
point takes the option or refuses a bad value in one line. openai-whisper's own ``decode`` and ``transcribe``
with ``sample_len`` are checked against ours in tests/test_openai_whisper_api.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specwhisper.asr.decoding.greedy import GreedyDecoder
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import wer
from tests.test_speculative import four_english

CAP = 12  # below the 48, 35 and 24 tokens of three of four_english's windows, above the fourth's 9


@pytest.mark.parametrize("name", ["ngram", "tiny.en"])
def test_speculation_stops_at_the_cap_where_plain_decoding_stops(base_engine, windows, plain_reference, name):
    """A batch of 4 windows whose rows end apart, three of them at the cap: the speculative decoder (an
    n-gram lookup; tiny.en, another vocabulary with its own encoder) writes plain greedy's capped tokens,
    which are the first ``CAP`` of the uncapped decode (``plain_reference``); a row that ends before the
    cap is not marked capped, and no row is marked cut short by Whisper's limit."""
    e = base_engine
    group = four_english(windows)
    feats, enc = torch.cat([g[1] for g in group]), torch.cat([g[2] for g in group])
    prompt = group[0][3]
    plain = GreedyDecoder(e.runtime, e.special, e.rules).with_cap(CAP).decode(enc, prompt)
    spec = decoder_factory(name)(e).with_cap(CAP).decode(enc, prompt, features=feats)
    for (item, *_), want, got in zip(group, plain.sequences, spec.sequences):
        full = plain_reference[item.file].tokens
        assert want.tokens == full[:CAP], item.file
        assert (want.capped, want.hit_max_length) == (len(full) >= CAP, False), item.file
        assert got.tokens == want.tokens, f"{name}: {item.file} differs from plain decoding at the cap"
        assert (got.capped, got.hit_max_length) == (want.capped, want.hit_max_length)
    assert sum(s.capped for s in plain.sequences) == 3


def test_a_capped_long_form_transcript_is_the_same_with_speculation(base_engine, manifest):
    """Three clips with pauses between (36 s: two chunks in one batch), 10 tokens a window: a window's
    text without a closing timestamp ends where Whisper would close it and the rest of its chunk is
    decoded again (where openai-whisper and faster-whisper seek past the window); a drafter changes
    nothing."""
    items = {m.file: m for m in manifest}
    files = ["lhotse/2412-153948-0000.flac", "whisper.cpp/jfk.wav", "cuttledoc-fleurs/fleurs-en-000.ogg"]
    pause = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([p for f in files for p in (load_audio(items[f].path), pause)])
    opts = DecodeOptions(language="en", batch_size=4, max_new_tokens=10)
    plain = base_engine.transcribe(audio, opts, decoder=decoder_factory("none")(base_engine))
    spec = base_engine.transcribe(audio, opts, decoder=decoder_factory("ngram")(base_engine))
    key = lambda r: [(s.start, s.end, s.tokens) for s in r.segments]  # noqa: E731
    assert key(spec) == key(plain)
    assert all(len(s.tokens) <= 10 and not s.words for s in plain.segments)
    text = " ".join(s.text for s in plain.segments)
    for words in ("excuse me", "antecedents", "slow communication", "30 years"):
        assert words in text.lower(), text
    # skipping past a window whose text has no closing timestamp kept 10 tokens a chunk: WER 0.81
    assert wer([" ".join(items[f].reference for f in files)], [text]) < 0.6


def test_the_entry_points_take_it_and_refuse_bad_values_in_one_line(run_cli, cli_run, eval_root, tmp_path):
    """The CLI (ours and faster-whisper's spelling), its bounds, the live mode (which does not apply it),
    the Python API, faster-whisper's ``WhisperModel`` and transformers' ``generate_kwargs`` over HTTP."""
    from specwhisper.pipeline.api import Transcriber
    from specwhisper.pipeline.options import check_values, run_options
    from specwhisper.serving.params import Choices, parse_params

    jfk = eval_root / "openai-whisper/jfk.flac"
    code, out, _ = run_cli(jfk, "-l", "en", "--max-new-tokens", "6", "-f", "txt", "-o", "-")
    # <|0.00|> and five text tokens, with no closing timestamp: a segment, as openai-whisper keeps it; the
    # rest decoded again from where Whisper closes it, 6 tokens at a time
    lines = out.strip().splitlines()
    assert code == 0 and lines[0] == "And so my fellow Americans" and len(lines) > 1, out
    # a cap of one token: each window's decode writes its first timestamp and stops, no text to keep
    code, out, err = run_cli(jfk, "-l", "en", "--max-new-tokens", "1", "-f", "txt", "-o", "-")
    assert code == 0 and out.strip() == "" and "Traceback" not in err, (out, err)
    for bad, message in [(["--max-new-tokens", "0"], "--max-new-tokens: must be between 1 and 448, got 0"),
                         (["--max_new_tokens", "449"], "--max_new_tokens: must be between 1 and 448, got 449"),
                         (["--max-new-tokens", "2.5"], "--max-new-tokens: must be a whole number, got '2.5'"),
                         (["--live", "--max-new-tokens", "20"], "--max-new-tokens does not apply to --live")]:
        code, _, err = cli_run(jfk, "-o", tmp_path, *bad)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], (bad, err)
    assert run_options(check_values({"max_new_tokens": "30"}, "api")).decode.max_new_tokens == 30
    with pytest.raises(ValueError, match="^max_new_tokens: must be between 1 and 448, got 0$"):
        Transcriber(pipeline=None).options(max_new_tokens=0)
    assert parse_params({"generate_kwargs": {"max_new_tokens": 40}}, Choices()).max_new_tokens == 40
    with pytest.raises(ValueError, match="max new tokens must be a whole number from 1 to 448"):
        DecodeOptions(max_new_tokens=True).validate()


def test_faster_whispers_transcribe_takes_it(eval_root):
    from specwhisper.pipeline.faster_whisper import WhisperModel

    model = WhisperModel("base", device="cpu")
    segments, _ = model.transcribe(str(eval_root / "openai-whisper/jfk.flac"), language="en", beam_size=1,
                                   max_new_tokens=6)
    segments = list(segments)
    assert segments[0].text.strip() == "And so my fellow Americans" and len(segments) > 1
    assert len(segments[0].tokens) == 5  # its text tokens; the sixth token written was <|0.00|>
    assert max(len(s.tokens) for s in segments) <= 6
