"""faster-whisper's penalties on repetition (``repetition_penalty``, ``no_repeat_ngram_size``): the words
faster-whisper writes with them on the same weights, token-identical under every drafter (word timings
included), applied by beam search and by the fallback's sampling too, and refused in one line where a value
or an entry point does not take them."""

from __future__ import annotations

import numpy as np
import pytest

from specwhisper.asr.decoding.quality import QualityRules
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio

CLIPS = ["lhotse/2412-153948-0000.flac", "openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-en-000.ogg"]
GREEDY = QualityRules(temperatures=(0.0,))  # faster-whisper's temperature=0.0: no fallback


def _text(segments) -> str:
    return " ".join(s.text.strip() for s in segments)


def _repeated_ngrams(tokens: list[int], n: int) -> set[tuple[int, ...]]:
    seen, repeated = set(), set()
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        (repeated if gram in seen else seen).add(gram)
    return repeated


def test_the_words_faster_whisper_writes_with_the_same_penalties(base_engine, faster_whisper_base, eval_root):
    """Three clips, each one window, greedy, English: with a repetition penalty of 1.5, and with no 2-gram
    repeated, our text is faster-whisper's, word for word, where the penalties change faster-whisper's own
    text (4 of the 6 cases: the penalty rewords all three clips, the 2-gram ban JFK's "your country")."""
    changed = 0
    for clip in CLIPS:
        audio = load_audio(eval_root / clip)
        common = dict(language="en", beam_size=1, condition_on_previous_text=False, vad_filter=False, temperature=0.0)
        unpenalized = _text(faster_whisper_base.transcribe(audio, **common)[0])
        for penalty, ngram in [(1.5, 0), (1.0, 2)]:
            theirs = _text(faster_whisper_base.transcribe(audio, repetition_penalty=penalty, no_repeat_ngram_size=ngram,
                                                          **common)[0])
            ours = base_engine.transcribe(audio, DecodeOptions(language="en", quality=GREEDY, repetition_penalty=penalty,
                                                               no_repeat_ngram_size=ngram))
            assert _text(ours.segments) == theirs, (clip, penalty, ngram)
            changed += theirs != unpenalized
    assert changed >= 4


PENALIZED = dict(language="en", batch_size=4, word_timestamps=True, repetition_penalty=1.2, no_repeat_ngram_size=3)


def _key(result):
    return [(s.start, s.end, s.tokens, [(w.start, w.end, w.text, w.probability) for w in s.words]) for s in result.segments]


@pytest.fixture(scope="module")
def two_clips(base_engine, eval_root):
    """Two clips with a pause between them (one batch of two chunks) and their plain decode under both
    penalties, which differs from the unpenalized one."""
    pause = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([p for clip in CLIPS[:2] for p in (load_audio(eval_root / clip), pause)])
    plain = base_engine.transcribe(audio, DecodeOptions(**PENALIZED), decoder=decoder_factory("none")(base_engine))
    unpenalized = base_engine.transcribe(audio, DecodeOptions(language="en", batch_size=4))
    assert _text(plain.segments) != _text(unpenalized.segments)
    return audio, plain


@pytest.mark.parametrize("draft", ["tiny.en", "early-exit", "ngram"])
def test_speculation_with_the_penalties_is_token_identical(base_engine, two_clips, draft):
    """The same segments, tokens, times and words with each drafter as with none, under both penalties at
    once, word timestamps on (the drafters propose without the penalties; the verify pass applies them at
    every drafted position)."""
    audio, plain = two_clips
    fast = base_engine.transcribe(audio, DecodeOptions(**PENALIZED), decoder=decoder_factory(draft)(base_engine))
    assert _key(fast) == _key(plain)
    if draft != "ngram":  # the n-gram drafter proposes repeats, which the 3-gram ban refuses
        assert fast.stats.accepted_tokens > 0


@pytest.mark.parametrize("how", [dict(beam_size=5), dict(quality=QualityRules(temperatures=(0.6,), best_of=3))],
                         ids=["beam-search", "sampling"])
def test_beam_search_and_sampling_never_repeat_a_banned_ngram(base_engine, eval_root, sampler_seed, how):
    """JFK says "your country" twice: without timestamp tokens (one segment, the window's tokens) beam search
    and sampled decoding write that 2-gram twice, and never with ``no_repeat_ngram_size=2``."""
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    tokens = {}
    for ngram in (0, 2):
        result = base_engine.transcribe(audio, DecodeOptions(language="en", without_timestamps=True,
                                                             no_repeat_ngram_size=ngram, **how))
        tokens[ngram] = [t for s in result.segments for t in s.tokens]
    assert _repeated_ngrams(tokens[0], 2)
    assert not _repeated_ngrams(tokens[2], 2)


def test_the_entry_points_take_them_and_refuse_bad_values_in_one_line(run_cli, cli_run, eval_root, tmp_path):
    """The CLI (our spelling and whisper-ctranslate2's), its bounds, and the live mode, which does not
    apply them."""
    jfk = eval_root / "openai-whisper/jfk.flac"
    code, out, _ = run_cli(jfk, "-l", "en", "--no_repeat_ngram_size", "2", "-f", "txt", "-o", "-")
    assert code == 0 and out.lower().count("your country") == 1
    for bad, message in [(["--repetition-penalty", "0"], "--repetition-penalty: must be > 0 and <= 10, got 0"),
                         (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size: must be between 0 and 448, got -1"),
                         (["--no_repeat_ngram_size", "2.5"], "--no_repeat_ngram_size: must be a whole number, got '2.5'"),
                         (["--live", "--repetition-penalty", "1.2"], "--repetition-penalty does not apply to --live")]:
        code, _, err = cli_run(jfk, "-o", tmp_path, *bad)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], (bad, err)


def test_the_python_api_and_transformers_generate_kwargs_take_them(eval_root):
    """``transcribe(..., no_repeat_ngram_size=2)`` as faster-whisper's ``transcribe`` takes it, a bad value a
    one-line ValueError; transformers' ``generate_kwargs`` spelling over HTTP."""
    from specwhisper.pipeline.api import Transcriber
    from specwhisper.pipeline.options import check_values, run_options
    from specwhisper.serving.params import Choices, parse_params

    opts = run_options(check_values({"repetition_penalty": "1.1", "no_repeat_ngram_size": 3}, "api"))
    assert (opts.decode.repetition_penalty, opts.decode.no_repeat_ngram_size) == (1.1, 3)
    with pytest.raises(ValueError, match="^repetition_penalty: must be > 0 and <= 10, got -1$"):
        Transcriber(pipeline=None).options(repetition_penalty=-1)
    params = parse_params({"generate_kwargs": {"repetition_penalty": 1.2, "no_repeat_ngram_size": 4}}, Choices())
    assert (params.repetition_penalty, params.no_repeat_ngram_size) == (1.2, 4)
