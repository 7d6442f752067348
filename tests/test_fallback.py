"""The temperature fallback's samples: one continuous decode of every failing chunk's temperatures,
each draw a sample of the target on its own chunk, a lone chunk's draws sharing its row of the audio's
keys and values, and a draw stopping at a cap set by its audio's length (a looping draw kept its whole
batch decoding)."""

from __future__ import annotations

import pytest
import torch

from specwhisper.asr.decoding.greedy import Draws
from specwhisper.asr.weights.loader import resolve_model_path
from specwhisper.asr.decoding.fallback import SAMPLE_TOKENS_BASE, QualityRules, decode_with_fallback
from specwhisper.results.stats import DecodeStats
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import wer


def _jfk(base_engine, eval_root):
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    feats = base_engine.features(audio, [Chunk(0, len(audio))])
    return feats, base_engine.encoder.encode(feats), base_engine.special.prompt("en", "transcribe", True)


def _two_chunks(base_engine, manifest):
    items = {m.file: m for m in manifest}
    clips = [items["openai-whisper/jfk.flac"], items["cuttledoc-fleurs/fleurs-en-002.ogg"]]
    feats, enc, _ = base_engine._encode([load_audio(m.path) for m in clips])
    return clips, feats, enc, base_engine.special.prompt("en", "transcribe", True)


@pytest.fixture(scope="module")
def transformers_base():
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(resolve_model_path("base"), attn_implementation="eager").eval()


def _target_logprob(model, rules, enc_row, prompt, seq, eot) -> float:
    """transformers' own decoder, fed the prompt and the draw: the summed log-probability of each drawn
    token (and the end of text, when the draw wrote it) after Whisper's rules, as sampling sums it."""
    chosen = seq.tokens + ([] if seq.hit_max_length else [eot])
    ids = torch.tensor([prompt + chosen[:-1]])
    with torch.inference_mode():
        hidden = model.model.decoder(input_ids=ids, encoder_hidden_states=enc_row[None]).last_hidden_state
        logits = model.proj_out(hidden)[0, len(prompt) - 1 :].float()
    total = 0.0
    for j, token in enumerate(chosen):
        row = logits[j : j + 1].clone()
        rules.select(row, [seq.tokens[:j]], pick=False)
        total += row.log_softmax(-1)[0, token].item()
    return total


@pytest.mark.parametrize("engine", ["base_engine", "unpacked_engine"])  # row-exact; the fixed-shape mode (GPU-like)
def test_every_draw_of_the_continuous_decode_is_a_sample_of_its_own_chunk(engine, manifest, transformers_base, request):
    """Two chunks, every temperature failing, four rows: each chunk's temperatures follow one another
    as its draws end, in rows the other chunk's draws left. Each draw's log-probability is what
    transformers' decoder gives its tokens on that draw's own audio (a draw reading the other chunk's
    keys and values, or at shifted positions, scores tens of nats apart), its text is of its own clip,
    and the decode takes the steps of the longest chain of temperatures, not the sum of each level's
    longest draws."""
    base_engine = request.getfixturevalue(engine)
    clips, feats, enc, prompt = _two_chunks(base_engine, manifest)
    rules = QualityRules(compression_ratio_threshold=0.5, best_of=2)  # every text fails: every temperature runs

    def draws(row, temperature):  # each chunk's draws cut short at every other temperature, in turn
        return Draws(row, temperature, 2, limit=None if (row + rules.temperatures.index(temperature)) % 2 else 3)

    units, seen = [], []

    def then(unit, sequences):
        units.append(unit)
        seen.append(sequences)
        later = [t for t in rules.temperatures if t > unit.temperature]
        return draws(unit.row, later[0]) if later else None

    sampler = base_engine._sampler()
    stats = sampler.stream(enc, prompt, [draws(0, 0.2), draws(1, 0.2)], then, rows=4)
    assert sorted((u.row, u.temperature) for u in units) == [(r, t) for r in (0, 1) for t in rules.temperatures[1:]]
    for unit, sequences in zip(units, seen):
        for seq in sequences:
            want = _target_logprob(transformers_base, base_engine.rules.for_prompt(prompt), enc[unit.row], prompt, seq,
                                   base_engine.special.eot)
            assert seq.sum_logprob == pytest.approx(want, abs=0.02), (unit, seq.tokens)
    for unit, sequences in zip(units, seen):
        if unit.temperature <= 0.4 and unit.limit is None:  # the cooler draws read as the clip
            text = base_engine._text(max(sequences, key=lambda s: s.avg_logprob).tokens)
            assert wer([clips[unit.row].reference], [text]) < 0.5, (unit, text)
    length = {(u.row, u.temperature): max(len(s.tokens) + (not s.hit_max_length) for s in seqs) for u, seqs in zip(units, seen)}
    chains = [sum(n for (r, _), n in length.items() if r == row) for row in (0, 1)]
    levels = sum(max(length[(0, t)], length[(1, t)]) for t in rules.temperatures[1:])
    prompt_passes = len(units)
    assert stats.decoder_steps <= max(chains) + prompt_passes < levels, (stats.decoder_steps, chains, levels)


def test_a_lone_chunks_draws_share_its_row_and_stop_at_their_cap(base_engine, eval_root):
    _, enc, prompt = _jfk(base_engine, eval_root)
    sampler = base_engine._sampler()
    drawn = []
    stats = sampler.stream(enc, prompt, [Draws(0, 1.0, 3, limit=6), Draws(0, 1.0, 3)], lambda u, s: drawn.append(s),
                           rows=3)
    capped, free = drawn
    assert all(len(s.tokens) == 6 and s.hit_max_length for s in capped)
    assert all(not s.hit_max_length and len(s.tokens) > 6 for s in free)
    assert len({tuple(s.tokens) for s in free}) > 1  # three different draws
    assert stats.target_passes == 2 + sum(len(s.tokens) + (not s.hit_max_length) - 1 for s in capped + free)


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


def test_failing_chunks_of_a_batch_draw_their_samples_together(base_engine, manifest):
    """Four chunks in a batch of four, two draws each: one continuous decode of four rows, and each chunk
    keeps a draw of its own audio."""
    items = {m.file: m for m in manifest}
    clips = [items["openai-whisper/jfk.flac"], items["cuttledoc-fleurs/fleurs-en-002.ogg"]] * 2
    feats, enc, _ = base_engine._encode([load_audio(m.path) for m in clips])
    prompt = base_engine.special.prompt("en", "transcribe", True)
    calls = []

    def sampler():
        decoder = base_engine._sampler()
        stream = decoder.stream
        decoder.stream = lambda *a, **kw: calls.append(([(u.row, u.count) for u in a[2]], kw["rows"])) or stream(*a, **kw)
        return decoder

    rules = QualityRules(temperatures=(0.3,), best_of=2)  # a first temperature above 0: every chunk is sampled
    stats = DecodeStats()
    kept = decode_with_fallback(base_engine.decoder, sampler, enc, prompt, feats, rules, base_engine._text, stats)
    assert calls == [([(0, 2), (1, 2), (2, 2), (3, 2)], 4)]
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


def test_rows_a_cache_dropped_are_taken_again_without_new_memory(base_engine, eval_root):
    """``KVCache.grow`` after ``select``: the new rows are the idle rows of the same storage, the live
    rows keep their keys and values; past the storage's rows everything is made again, live rows first."""
    _, enc, _ = _jfk(base_engine, eval_root)
    cache = base_engine.runtime.new_cache(enc.expand(4, -1, -1))
    with torch.inference_mode():
        cache.k[:, 2] = 7.0
    storage = cache.k.untyped_storage().data_ptr()
    fewer = cache.select([0, 2])
    grown, slots = fewer.grow(2, capacity=6, width=None)
    assert slots == [2, 3] and grown.batch_size == 4
    assert grown.k.untyped_storage().data_ptr() == storage and bool((grown.k[:, 1] == 7.0).all())
    more, slots = grown.grow(2, capacity=6, width=None)
    assert slots == [4, 5] and more.batch_size == 6 and more.k.untyped_storage().data_ptr() != storage
    assert bool((more.k[:, 1] == 7.0).all()) and torch.equal(more.cross_k[:, :4], grown.cross_k)
    with pytest.raises(ValueError, match="7 rows for a cache of 6"):
        more.grow(1, capacity=6, width=None)
