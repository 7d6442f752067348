"""The temperature fallback's samples: best-of draws share their row's pass over the audio, and a
draw stops at a cap set by its audio's length (a looping draw kept its whole batch decoding)."""

from __future__ import annotations

from specwhisper.asr.decoding.greedy import SamplingDecoder
from specwhisper.asr.decoding.fallback import SAMPLE_TOKENS_BASE, QualityRules, decode_with_fallback
from specwhisper.results.stats import DecodeStats
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import wer


def _jfk(base_engine, eval_root):
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    feats = base_engine.features(audio, [Chunk(0, len(audio))])
    return feats, base_engine.encoder.encode(feats), base_engine.special.prompt("en", "transcribe", True)


def test_draws_sharing_a_row_equal_draws_of_repeated_rows_and_stop_at_their_cap(base_engine, eval_root):
    _, enc, prompt = _jfk(base_engine, eval_root)
    limits = [6, 400, 400]
    sampler = SamplingDecoder(base_engine.runtime, base_engine.special, base_engine.rules, temperature=1.0)
    shared = sampler.decode(enc, prompt, limits=limits, copies=3)
    repeated = sampler.decode(enc.repeat_interleave(3, 0), prompt, limits=limits)
    assert [s.tokens for s in shared.sequences] == [s.tokens for s in repeated.sequences]
    assert [s.sum_logprob for s in shared.sequences] == [s.sum_logprob for s in repeated.sequences]
    assert len({tuple(s.tokens) for s in shared.sequences}) > 1  # three different draws
    first, *others = shared.sequences
    assert len(first.tokens) == 6 and first.hit_max_length
    assert all(not s.hit_max_length and len(s.tokens) > 6 for s in others)
    assert shared.stats.target_passes < repeated.stats.target_passes  # one prompt pass for the three


def test_samples_cut_at_their_cap_fail_and_lose_to_the_greedy_text(base_engine, eval_root):
    feats, enc, prompt = _jfk(base_engine, eval_root)
    text_of = base_engine._text
    # every text fails this ratio, so every temperature runs; 0.5 s of audio allows 22 tokens, fewer
    # than any full transcript of the 11 s clip
    rules = QualityRules(compression_ratio_threshold=0.5)
    stats = DecodeStats()
    kept = decode_with_fallback(base_engine.decoder, base_engine._sampler, enc, prompt, feats, rules, text_of,
                                stats, seconds=[0.5])[0]
    cap = rules.sample_limit(0.5)
    assert cap == SAMPLE_TOKENS_BASE + 6
    steps = len(rules.temperatures) - 1
    assert 0 < stats.fallback_passes <= steps * (1 + rules.best_of * cap)  # no draw ran past its cap
    assert kept.temperature == 0.0  # the one attempt not cut short
    assert "ask not what your country can do for you" in text_of(kept.seq.tokens)
    whole = DecodeStats()
    decode_with_fallback(base_engine.decoder, base_engine._sampler, enc, prompt, feats,
                         QualityRules(compression_ratio_threshold=0.5, sample_tokens_per_s=None), text_of, whole,
                         seconds=[0.5])
    assert whole.fallback_passes > stats.fallback_passes  # uncapped, the draws write the whole clip


def test_failing_chunks_of_a_batch_draw_their_samples_in_one_decode(base_engine, manifest):
    """Four chunks in a batch of four, two draws each: two sampling decodes of two chunks (their four
    draws fill the batch's rows), not four, and each chunk keeps a draw of its own audio."""
    items = {m.file: m for m in manifest}
    clips = [items["openai-whisper/jfk.flac"], items["cuttledoc-fleurs/fleurs-en-002.ogg"]] * 2
    feats, enc, _ = base_engine._encode([load_audio(m.path) for m in clips])
    prompt = base_engine.special.prompt("en", "transcribe", True)
    calls = []

    def sampler(temperature):
        decoder = base_engine._sampler(temperature)
        decode = decoder.decode
        decoder.decode = lambda rows, *a, **kw: calls.append((rows.shape[0], kw["copies"])) or decode(rows, *a, **kw)
        return decoder

    rules = QualityRules(temperatures=(0.3,), best_of=2)  # a first temperature above 0: every chunk is sampled
    kept = decode_with_fallback(base_engine.decoder, sampler, enc, prompt, feats, rules, base_engine._text, DecodeStats())
    assert calls == [(2, 2), (2, 2)]
    assert all(a.temperature == 0.3 for a in kept)
    for item, attempt in zip(clips, kept):
        assert wer([item.reference], [base_engine._text(attempt.seq.tokens)]) < 0.35, item.file


def test_sample_cap_is_validated():
    try:
        QualityRules(sample_tokens_per_s=0).validate()
    except ValueError as e:
        assert "sample tokens per second must be > 0" in str(e)
    else:
        raise AssertionError("a zero cap was accepted")
    assert QualityRules(sample_tokens_per_s=None).sample_limit(30.0) is None
    assert QualityRules().sample_limit(30.0) == SAMPLE_TOKENS_BASE + 360


def test_copies_of_one_row_share_its_cross_attention_memory(base_engine, eval_root):
    """Five draws of a chunk hold one row of cross-attention K/V (37 MB for base), not five: gathered,
    two chunks' draws were the peak of a 10-minute file (370 MB)."""
    _, enc, _ = _jfk(base_engine, eval_root)
    cache = base_engine.runtime.new_cache(enc)
    storage = cache.cross_k.untyped_storage().data_ptr()
    copies = cache.select([0] * 5)
    assert copies.batch_size == 5 and copies.cross_k.shape[1] == 5
    assert copies.cross_k.untyped_storage().data_ptr() == storage and copies.cross_k.stride(1) == 0
    fewer = copies.select([0, 2, 4])  # draws that ended dropped: the shared rows need no moving
    assert fewer.cross_k.shape[1] == 3 and fewer.cross_k.untyped_storage().data_ptr() == storage
