"""The temperature fallback's samples: one continuous decode of every failing chunk's temperatures,
each draw a sample of the target on its own chunk and a function of that chunk alone (the same in any
batch, order or schedule), a lone chunk's draws sharing its row of the audio's keys and values, and a
draw stopping at a cap set by its audio's length (a looping draw kept its whole batch decoding).
The sampler's own mechanics are checked on tiny.en (about twice as fast; they do not depend on the
model), what rides on base's texts on base."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataclasses import dataclass

from specwhisper.asr.decoding.greedy import Draws
from specwhisper.asr.weights.loader import resolve_model_path
from specwhisper.asr.decoding.fallback import decode_with_fallback
from specwhisper.asr.decoding.quality import SAMPLE_TOKENS_BASE, Attempt, QualityRules
from specwhisper.asr.options import SAMPLING, DecodeOptions
from specwhisper.results.stats import DecodeStats
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import wer


def _jfk(engine, eval_root):
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    feats = engine.features(audio, [Chunk(0, len(audio))])
    return feats, engine.encoder.encode(feats), engine.special.prompt("en", "transcribe", True)


def _two_chunks(engine, manifest):
    items = {m.file: m for m in manifest}
    clips = [items["openai-whisper/jfk.flac"], items["cuttledoc-fleurs/fleurs-en-002.ogg"]]
    feats, enc, _ = engine.encode([load_audio(m.path) for m in clips])
    return clips, feats, enc, engine.special.prompt("en", "transcribe", True)


@pytest.fixture(scope="module")
def transformers_tiny():
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(resolve_model_path("tiny.en"), attn_implementation="eager").eval()


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


@pytest.mark.parametrize("name", ["tiny_engine", "unpacked_tiny_engine"])  # row-exact; the fixed-shape mode (GPU-like)
def test_every_draw_of_the_continuous_decode_is_a_sample_of_its_own_chunk(name, manifest, transformers_tiny, request):
    """Two chunks, every temperature failing (sampled at 0.2, 0.4 and 0.6: chains of three temperatures),
    four rows: each chunk's temperatures follow one another as its draws end, in rows the other chunk's
    draws left. Each draw's log-probability is what transformers' decoder gives its tokens on that draw's
    own audio (a draw reading the other chunk's keys and values, or at shifted positions, scores tens of
    nats apart), its text is of its own clip, and the decode takes the steps of the longest chain of
    temperatures, not the sum of each level's longest draws."""
    engine = request.getfixturevalue(name)
    clips, feats, enc, prompt = _two_chunks(engine, manifest)
    # every text fails: every temperature runs
    rules = QualityRules(temperatures=(0.0, 0.2, 0.4, 0.6), compression_ratio_threshold=0.5, best_of=2)

    def draws(row, temperature):  # each chunk's draws cut short at every other temperature, in turn
        return Draws(row, temperature, 2, limit=None if (row + rules.temperatures.index(temperature)) % 2 else 3)

    units, seen = [], []

    def then(unit, sequences):
        units.append(unit)
        seen.append(sequences)
        later = [t for t in rules.temperatures if t > unit.temperature]
        return draws(unit.row, later[0]) if later else None

    sampler = engine._sampler()
    stats = sampler.stream(enc, prompt, [draws(0, 0.2), draws(1, 0.2)], then, rows=4)
    assert sorted((u.row, u.temperature) for u in units) == [(r, t) for r in (0, 1) for t in rules.temperatures[1:]]
    for unit, sequences in zip(units, seen):
        for seq in sequences:
            want = _target_logprob(transformers_tiny, engine.rules.for_prompt(prompt), enc[unit.row], prompt, seq,
                                   engine.special.eot)
            assert seq.sum_logprob == pytest.approx(want, abs=0.02), (unit, seq.tokens)
    for unit, sequences in zip(units, seen):
        if unit.temperature <= 0.4 and unit.limit is None:  # the cooler draws read as the clip
            text = engine.text_of(max(sequences, key=lambda s: s.avg_logprob).tokens)
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


def test_draws_stopped_at_max_new_tokens_are_whole_and_below_it_a_sample_cap_cuts(base_engine, eval_root):
    """A sampler capped at 8 tokens (``max_new_tokens``): draws stop there, marked capped, which is no
    reason to sample again (``is_cut``); a unit whose own cap (5) is below it stops at 5, cut short."""
    from specwhisper.asr.decoding.quality import is_cut

    _, enc, prompt = _jfk(base_engine, eval_root)
    drawn = []
    base_engine._sampler().with_cap(8).stream(enc, prompt, [Draws(0, 1.0, 3, limit=5), Draws(0, 1.0, 3)],
                                               lambda u, s: drawn.append(s), rows=3)
    cut, capped = drawn
    assert all(len(s.tokens) == 5 and s.hit_max_length and not s.capped for s in cut)
    assert all(len(s.tokens) == 8 and s.capped and not s.hit_max_length for s in capped)
    text_of = base_engine.text_of
    assert all(is_cut(Attempt.of(s, 1.0, text_of(s.tokens))) for s in cut)
    assert not any(is_cut(Attempt.of(s, 1.0, text_of(s.tokens))) for s in capped)


def test_samples_cut_at_their_cap_fail_and_lose_to_the_greedy_text(tiny_engine, eval_root):
    feats, enc, prompt = _jfk(tiny_engine, eval_root)
    text_of = tiny_engine.text_of
    # every text fails this ratio, so every temperature runs; 0.5 s of audio allows 22 tokens, fewer
    # than any full transcript of the 11 s clip
    rules = QualityRules(compression_ratio_threshold=0.5)
    stats = DecodeStats()
    kept = decode_with_fallback(tiny_engine.decoder, tiny_engine._sampler, enc, prompt, feats, rules, text_of,
                                stats, seconds=[0.5])[0]
    cap = rules.sample_limit(0.5)
    assert cap == SAMPLE_TOKENS_BASE + 6
    steps = len(rules.temperatures) - 1
    assert 0 < stats.fallback_passes <= steps * (1 + rules.best_of * cap)  # no draw ran past its cap
    assert kept.temperature == 0.0  # the one attempt not cut short
    assert "ask not what your country can do for you" in text_of(kept.seq.tokens)
    whole = DecodeStats()
    decode_with_fallback(tiny_engine.decoder, tiny_engine._sampler, enc, prompt, feats,
                         QualityRules(compression_ratio_threshold=0.5, sample_tokens_per_s=None), text_of, whole,
                         seconds=[0.5])
    assert whole.fallback_passes > stats.fallback_passes  # uncapped, the draws write the whole clip


def test_failing_chunks_of_a_batch_draw_their_samples_together(tiny_engine, manifest):
    """Four chunks in a batch of four, two draws each: one continuous decode of four rows, and each chunk
    keeps a draw of its own audio."""
    items = {m.file: m for m in manifest}
    clips = [items["openai-whisper/jfk.flac"], items["cuttledoc-fleurs/fleurs-en-002.ogg"]] * 2
    feats, enc, _ = tiny_engine.encode([load_audio(m.path) for m in clips])
    prompt = tiny_engine.special.prompt("en", "transcribe", True)
    calls = []

    def sampler():
        decoder = tiny_engine._sampler()
        stream = decoder.stream
        decoder.stream = lambda *a, **kw: calls.append(([(u.row, u.count) for u in a[2]], kw["rows"])) or stream(*a, **kw)
        return decoder

    rules = QualityRules(temperatures=(0.3,), best_of=2)  # a first temperature above 0: every chunk is sampled
    stats = DecodeStats()
    kept = decode_with_fallback(tiny_engine.decoder, sampler, enc, prompt, feats, rules, tiny_engine.text_of, stats)
    assert calls == [([(0, 2), (1, 2), (2, 2), (3, 2)], 4)]
    assert all(a.temperature == 0.3 for a in kept)
    for item, attempt in zip(clips, kept):
        assert wer([item.reference], [tiny_engine.text_of(attempt.seq.tokens)]) < 0.35, item.file


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


@dataclass(frozen=True)
class _PassingFrom04(QualityRules):
    """Every attempt below temperature 0.4 fails, every one from it passes: two temperatures sampled."""

    def needs_fallback(self, attempt: Attempt) -> bool:
        return attempt.temperature < 0.4


def test_a_chunks_samples_are_its_own_in_any_batch_order_and_schedule(tiny_engine, manifest):
    """JFK's clip and a FLEURS clip fall back to 0.2 and 0.4 (best of 2). Each keeps the very same
    sample decoded alone, beside the other in either order, at 4 or 16 rows, with its temperatures in
    turn or ahead: a draw's random numbers are its chunk's own (drawn from one shared generator, JFK's
    kept sample changed with the rows beside it). Ahead, the two temperatures run side by side: fewer
    steps."""
    clips, feats, enc, prompt = _two_chunks(tiny_engine, manifest)
    rules = _PassingFrom04(best_of=2)
    keys = [101, 202]

    def kept(rows_of: list[int], rows: int, ahead: bool) -> tuple[list[tuple], DecodeStats]:
        stats = DecodeStats()
        attempts = decode_with_fallback(tiny_engine.decoder, tiny_engine._sampler, enc[rows_of], prompt, feats[rows_of],
                                        rules, tiny_engine.text_of, stats, seconds=[clips[r].duration for r in rows_of],
                                        rows=rows, keys=[keys[r] for r in rows_of], ahead=ahead)
        by_row = {r: (a.temperature, a.seq.tokens, a.seq.sum_logprob) for r, a in zip(rows_of, attempts)}
        return [by_row.get(r) for r in (0, 1)], stats

    alone, _ = kept([0], 4, False)
    in_turn, turn_stats = kept([1, 0], 16, False)
    ahead, ahead_stats = kept([0, 1], 16, True)
    assert in_turn == ahead
    assert alone[0] == in_turn[0]
    for clip, (temperature, tokens, _) in zip(clips, ahead):
        assert temperature == 0.4
        assert wer([clip.reference], [tiny_engine.text_of(tokens)]) < 0.5, clip.file
    assert ahead_stats.fallback_steps < turn_stats.fallback_steps, (ahead_stats.fallback_steps, turn_stats.fallback_steps)


def test_a_files_transcript_with_samples_is_the_same_at_any_batch_size(tiny_engine, manifest):
    """Two clips transcribed together in one batch of two and each alone in a batch of one, with word
    timings, every chunk kept at a sample (temperature 0.4): the same segments, words and times. In the
    CPU's row-exact mode neither a row's greedy tokens nor its samples depend on the rows beside it."""
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio

    items = {m.file: m for m in manifest}
    clips = [items[f] for f in ("openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-en-002.ogg")]
    audios = [load_audio(m.path) for m in clips]

    def options(batch_size: int) -> DecodeOptions:
        return DecodeOptions(language="en", batch_size=batch_size, word_timestamps=True, quality=_PassingFrom04(best_of=2))

    def facts(result) -> list[tuple]:
        return [(s.tokens, s.temperature, s.start, s.end, [(w.text, w.start, w.end) for w in s.words])
                for s in result.segments]

    def probabilities(result) -> list[float]:
        return [w.probability for s in result.segments for w in s.words]

    together = tiny_engine.transcribe_many(audios, options(2))
    alone = [tiny_engine.transcribe(audio, options(1)) for audio in audios]
    for clip, a, b in zip(clips, together, alone):
        assert facts(a) == facts(b), clip.file
        # the alignment's pass pads each row to the batch's longest: a clip's last word's probability
        # moves in the 7th digit
        assert probabilities(a) == pytest.approx(probabilities(b), abs=1e-5), clip.file
        assert a.segments and all(s.temperature == 0.4 for s in a.segments), clip.file
        assert wer([clip.reference], [" ".join(s.text for s in a.segments)]) < 0.5, clip.file


def test_a_run_stops_inside_a_batch_whose_windows_are_sampled_again(tiny_engine, eval_root):
    """Repeated speech (jfk.wav three times over) fails its windows' compression-ratio check, and their samples
    at five temperatures take seconds inside one batch: progress is reported there too (``SAMPLING``, at the
    transcription's fraction so far) as each window's draws at a temperature end, so that a server whose client
    left or whose deadline passed stops the run inside the batch, not at its end. What the report raises stops it."""
    from specwhisper.serving.cli.main import _Progress

    audio = np.concatenate([load_audio(eval_root / "whisper.cpp/jfk.wav")] * 3)
    seen: list[tuple[str, float]] = []

    class Gone(Exception):
        pass

    def progress(stage: str, fraction: float) -> None:
        seen.append((stage, fraction))
        if stage == SAMPLING:
            raise Gone

    with pytest.raises(Gone):
        tiny_engine.transcribe(audio, DecodeOptions(language="en"), progress=progress)
    assert [(stage, fraction) for stage, fraction in seen if stage != "vad"] == [("transcribe", 0.0), (SAMPLING, 0.0)]

    bars = _Progress("jfk", enabled=True, seconds=33)  # the command line's bar shows nothing new for it
    bars("transcribe", 0.5)
    drawn = bars.bar
    bars(SAMPLING, 0.5)
    assert bars.bar is drawn and bars.stage == "transcribe"
    bars.close()


def test_a_draw_whose_text_loops_stops_there_as_at_its_cap(base_engine, manifest):
    """``looping`` is asked of each draw's tokens every 8 tokens from the 32nd: a draw it calls looping
    stops there, marked as stopped at a cap (so it ranks below every draw that ended); the others run
    on. In the fallback it is the repetition check on the text so far."""
    from specwhisper.asr.decoding.greedy import LOOP_CHECK_EVERY, LOOP_CHECK_FROM

    clips, _, enc, prompt = _two_chunks(base_engine, manifest)  # JFK (11 s), a FLEURS clip (about 60 tokens)
    asked, drawn = [], []

    def looping(tokens):
        asked.append(len(tokens))
        return len(tokens) >= LOOP_CHECK_FROM + LOOP_CHECK_EVERY

    stats = base_engine._sampler().stream(enc, prompt, [Draws(1, 0.2, 2), Draws(0, 0.2, 2)],
                                          lambda u, s: drawn.append((u.row, s)), rows=4, looping=looping)
    assert asked and all(n >= LOOP_CHECK_FROM and n % LOOP_CHECK_EVERY == 0 for n in asked)
    by_row = dict(drawn)
    cut = LOOP_CHECK_FROM + LOOP_CHECK_EVERY
    assert all(len(s.tokens) == cut and s.hit_max_length for s in by_row[1])  # the longer clip's draws
    assert all(len(s.tokens) < cut and not s.hit_max_length for s in by_row[0])  # JFK's ended first
    assert stats.loops_cut == 2


def test_a_greedy_text_that_loops_stops_there_in_plain_and_speculative_decoding_alike(tiny_engine, manifest, tmp_path,
                                                                                      monkeypatch):
    """A window of the built conversation where tiny.en's greedy text is "Ha ha ha ..." to Whisper's
    448-token limit (compression ratio 58). In the fallback its text is checked as a sample's is: it
    stops at the first check that finds it looping (token 32), in plain decoding and, at the same token,
    with the n-gram and early-exit drafters (whose rounds cross the checks); the clip beside it in the
    batch decodes as it does alone; and the chunk's kept attempt is the one it gets when the greedy text
    runs on to the limit, in fewer decoder steps."""
    import specwhisper.asr.decoding.greedy as greedy
    from specwhisper.asr.decoding.quality import compression_ratio
    from specwhisper.asr.drafters.choice import decoder_factory
    from specwhisper.evaluation.transcripts import build_long_file

    e = tiny_engine
    talk = load_audio(build_long_file("speakers", tmp_path, 600, seed=0).path)
    jfk = load_audio(next(m for m in manifest if m.file == "openai-whisper/jfk.flac").path)
    _, enc, _ = e.encode([talk[int(328.18 * 16000) : int(358.18 * 16000)], jfk])
    prompt = e.special.prompt("en", "transcribe", True)
    plain = greedy.GreedyDecoder(e.runtime, e.special, e.rules)

    def fallback():
        stats = DecodeStats()
        kept = decode_with_fallback(plain, e._sampler, enc, prompt, None, QualityRules(), e.text_of, stats,
                                    seconds=[30.0, 11.0], keys=[1, 2])
        return kept, stats

    # the control first: nothing is checked, and its greedy pass (the text run on to the limit) is kept
    greedy_passes, decode = [], plain.decode
    with monkeypatch.context() as patch:
        patch.setattr(greedy, "LOOP_CHECK_FROM", 10**9)
        patch.setattr(plain, "decode", lambda *a, **kw: greedy_passes.append(decode(*a, **kw)) or greedy_passes[-1])
        kept_whole, stats_whole = fallback()
    assert len(greedy_passes) == 1
    whole = greedy_passes[0].sequences
    assert whole[0].hit_max_length and compression_ratio(e.text_of(whole[0].tokens)) > 50
    assert not whole[1].hit_max_length

    def looping(tokens):
        return compression_ratio(e.text_of(tokens)) > 2.4

    cut = plain.decode(enc, prompt, looping=looping)
    assert cut.stats.loops_cut == 1
    assert cut.sequences[0].hit_max_length and cut.sequences[0].tokens == whole[0].tokens[: greedy.LOOP_CHECK_FROM]
    assert cut.sequences[1].tokens == whole[1].tokens
    for draft in ("ngram", "early-exit:2:raw"):
        spec = decoder_factory(draft)(e).decode(enc, prompt, looping=looping)
        assert [s.tokens for s in spec.sequences] == [s.tokens for s in cut.sequences], draft
        assert spec.stats.loops_cut == 1 and spec.sequences[0].hit_max_length, draft
        assert spec.stats.drafted_tokens > 0, draft

    kept, stats = fallback()
    assert [(a.seq.tokens, a.temperature, a.passed) for a in kept] == [(a.seq.tokens, a.temperature, a.passed) for a in kept_whole]
    assert kept[0].temperature > 0 and kept[0].passed
    assert stats.decoder_steps < stats_whole.decoder_steps - 300


# base's greedy text of the built conversation's window 118.12-148.12 s (seed 5): the first words of
# a clip ("to the north and within easy reach is the romantic and fascinating town of sintra and which
# was made famous ...") then " St." a second, to the window's end.
SINTRA_LOOP = " North and within easy-weep is a romantic and fascinating town of St." + " St." * 24


def test_a_text_ending_in_a_loop_is_repetitive_and_spoken_repeats_are_not():
    from specwhisper.asr.decoding.quality import compression_ratio, ends_in_loop

    assert compression_ratio(SINTRA_LOOP) < 2.4 and ends_in_loop(SINTRA_LOOP)
    assert ends_in_loop(" Ha ha ha" * 20) and ends_in_loop(" I'm sorry." * 8)
    # spoken: the eval set's acoustic_corpus.wav reference, and base's text of mfa_laughter.flac
    assert not ends_in_loop(" we're just saying some words and here's some more words words words words")
    assert not ends_in_loop(" And here's some more words, words, words, words, words.")
    assert not ends_in_loop(" Ha ha ha, Montreal. Ha ha ha, forced. Ha ha ha, a liner. Ha ha ha.")
    assert not ends_in_loop(SINTRA_LOOP + " He began a confused complaint")


def test_a_loop_after_real_words_is_decoded_again(base_engine, tmp_path, file_spans_only):
    """The window of ``SINTRA_LOOP``: its compression ratio (2.23) passes openai's check, so without the
    loop check the three clips after the loop (the wizard, JFK's, "in being comparatively modern") are
    lost from the transcript. The loop fails the check: the window is sampled again and they are in it."""
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.evaluation.transcripts import build_long_file, normalize

    talk = build_long_file("speakers", tmp_path, 600, seed=5)
    window = load_audio(talk.path)[int(118.12 * 16000) : int(148.12 * 16000)]
    inside = [c for c in talk.clips if 117 < c.start and c.end < 148.12]
    assert [c.reference.split()[-1] for c in inside] == ["byron", "LEFT", "country.", "modern."]
    greedy_only = base_engine.transcribe(window, DecodeOptions(language="en", quality=QualityRules(temperatures=(0.0,))))
    greedy_text = normalize(" ".join(s.text for s in greedy_only.segments))
    assert greedy_text.startswith(normalize(SINTRA_LOOP)) and "wizard" not in greedy_text
    res = base_engine.transcribe(window, DecodeOptions(language="en"))
    text = normalize(" ".join(s.text for s in res.segments))
    for clip in inside[1:]:
        assert normalize(clip.reference) in text, clip.reference
    assert wer([" ".join(c.reference for c in inside)], [text]) < 0.45


class _FailingBelow(QualityRules):
    """A greedy text whose average log-probability is under -0.3 fails, and its samples until 0.4."""

    def needs_fallback(self, attempt: Attempt) -> bool:
        return attempt.temperature < 0.4 and attempt.seq.avg_logprob < -0.3


def test_a_gpus_pooled_fallback_gives_the_transcripts_in_fewer_steps(tiny_engine, manifest, monkeypatch, tmp_path):
    """Four clips in batches of three (the most speech first: JFK's clip and two others, then a 1.9 s LJ
    Speech clip), one row of each batch failing on tiny.en (JFK's text at -0.38 a token, the short
    clip's at -0.42; the other two above -0.3), one draw each, both kept at 0.4. A GPU's schedule
    (``fallback_ahead``) pools the two batches' failing rows into one stream of three rows: the CPU's
    transcripts, temperatures and times, in fewer sampling steps than a stream per batch (32 against
    38: the short clip's samples run beside JFK's, not after them). A journal of the pooled run, finishing the batches in the order
    they came, replays every one of them in a second run."""
    from specwhisper.asr.decoding import fallback
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.pipeline.checkpoint import ChunkCheckpoint

    items = {m.file: m for m in manifest}
    clips = [items[f] for f in ("openai-whisper/jfk.flac", "lhotse/2412-153948-0000.flac",
                                "coqui-tts-ljspeech/LJ001-0001.wav", "coqui-tts-ljspeech/LJ001-0002.wav")]
    audios = [load_audio(m.path) for m in clips]
    opts = DecodeOptions(language="en", batch_size=3, quality=_FailingBelow(best_of=1))
    streams: list[int] = []
    sample_again = fallback.sample_again

    def counted(sampler, batches, prompt, rules, text_of, stats, *rest):
        sample_again(sampler, batches, prompt, rules, text_of, stats, *rest)
        streams.append(stats.fallback_steps)

    monkeypatch.setattr(fallback, "sample_again", counted)

    def facts(results) -> list[list[tuple]]:
        return [[(s.tokens, s.temperature, s.start, s.end) for s in r.segments] for r in results]

    cpu = facts(tiny_engine.transcribe_many(audios, opts))
    assert [{s[1] for s in f} for f in cpu] == [{0.4}, {0.0}, {0.0}, {0.4}]  # sampled where the greedy text failed
    assert len(streams) == 2  # a stream per batch
    monkeypatch.setattr(tiny_engine, "fallback_ahead", True)
    monkeypatch.setattr(tiny_engine, "fallback_pool", 1)  # ahead, a stream per batch
    streams.clear()
    assert facts(tiny_engine.transcribe_many(audios, opts)) == cpu
    one_by_one = sum(streams)
    monkeypatch.setattr(tiny_engine, "fallback_pool", 4)
    streams.clear()
    journal = ChunkCheckpoint.open(tmp_path / "journal.jsonl", "k")
    assert facts(tiny_engine.transcribe_many(audios, opts, journal=journal)) == cpu
    assert len(streams) == 1 and streams[0] < one_by_one, (streams, one_by_one)
    again = ChunkCheckpoint.open(tmp_path / "journal.jsonl", "k")
    assert facts(tiny_engine.transcribe_many(audios, opts, journal=again)) == cpu
    assert again.resumed_chunks == 4 and len(streams) == 1


def test_an_interrupted_pooled_run_resumes_to_the_same_transcripts(tiny_engine, manifest, monkeypatch, tmp_path):
    """The four clips one at a time on a GPU's schedule, the most speech first: the two whose greedy
    text passes wait in the pool for JFK's failing row, and the pool finishes the three together.
    Interrupted at the fourth batch's decode, the journal holds those three; the resumed run replays
    them into the pool as they were counted (``FallbackPool.hold``: finished together again, before
    the fourth is taken), decodes the fourth, and gives the uninterrupted run's segments."""
    from specwhisper.asr.decoding import fallback
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.pipeline.checkpoint import ChunkCheckpoint

    items = {m.file: m for m in manifest}
    audios = [load_audio(items[f].path) for f in ("openai-whisper/jfk.flac", "lhotse/2412-153948-0000.flac",
                                                   "coqui-tts-ljspeech/LJ001-0001.wav", "coqui-tts-ljspeech/LJ001-0002.wav")]
    opts = DecodeOptions(language="en", batch_size=1, quality=_FailingBelow(best_of=1))
    monkeypatch.setattr(tiny_engine, "fallback_ahead", True)

    def facts(results) -> list[list[tuple]]:
        return [[(s.tokens, s.temperature, s.start, s.end) for s in r.segments] for r in results]

    whole = facts(tiny_engine.transcribe_many(audios, opts))
    first_pass, calls = tiny_engine._first_pass, []

    def interrupted(*args):
        calls.append(args[1])
        if len(calls) == 4:
            raise KeyboardInterrupt
        return first_pass(*args)

    monkeypatch.setattr(tiny_engine, "_first_pass", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tiny_engine.transcribe_many(audios, opts, journal=ChunkCheckpoint.open(tmp_path / "j.jsonl", "k"))
    monkeypatch.setattr(tiny_engine, "_first_pass", first_pass)
    journal = ChunkCheckpoint.open(tmp_path / "j.jsonl", "k")
    assert len(journal.records) == 3
    sample, finished = fallback.FallbackPool.sample, []
    monkeypatch.setattr(fallback.FallbackPool, "sample", lambda pool, prompt: finished.append(pool.held) or sample(pool, prompt))
    assert facts(tiny_engine.transcribe_many(audios, opts, journal=journal)) == whole
    assert journal.resumed_chunks == 3 and journal.decoded_chunks == 1
    assert finished == [3, 1]  # the replayed three together, as when they were decoded


def test_a_captured_draw_gives_the_eager_draws_bits(tiny_engine, manifest):
    """A GPU's sampler draws each step's tokens in one captured call (the rules and the tempered draw,
    ``CapturedChoices``); elsewhere the call runs op by op with the capture's semantics. JFK's clip and
    a FLEURS clip sampled to 0.4 (best of 2) that way keep the eager sampler's tokens and summed
    log-probabilities to the last bit, in as many steps."""
    from specwhisper.asr.decoding.greedy import SamplingDecoder

    clips, feats, enc, prompt = _two_chunks(tiny_engine, manifest)
    rules = _PassingFrom04(best_of=2)

    def kept(captured: bool) -> tuple[list[tuple], int]:
        sampler = SamplingDecoder(tiny_engine.runtime, tiny_engine.special, tiny_engine.rules, captured=captured)
        stats = DecodeStats()
        attempts = decode_with_fallback(tiny_engine.decoder, lambda: sampler, enc, prompt, feats, rules, tiny_engine.text_of,
                                        stats, seconds=[c.duration for c in clips], keys=[101, 202])
        if captured:
            assert {k[2] for k in sampler.choices.calls} == {True}  # draws, not greedy picks
        return [(a.temperature, a.seq.tokens, a.seq.sum_logprob) for a in attempts], stats.fallback_steps

    eager, captured = kept(False), kept(True)
    assert captured == eager
    assert all(t == 0.4 for t, _, _ in eager[0])


def test_a_text_of_whispers_stock_phrases_alone_is_one_and_one_with_other_words_is_not():
    from specwhisper.asr.decoding.quality import is_stock_phrase

    # what base wrote over the whispered clip, the noise and music of bench/noise.py and test_hallucination
    for text in (" Thank you very much.", " Thank you. Thank you.", " Thanks for watching!", " you",
                 " Subtitles by the Amara.org community", " Thank you for watching, see you next time!",
                 " Thank you for watching. Please subscribe and hit the bell."):
        assert is_stock_phrase(text), text
    # spoken: the end of the eval set's acoustic_corpus.wav, and a misheard sentence under pink noise
    for text in (" And that should be all. Thanks.", " Thank you for the point communication. Thanks.", "", " .",
                 " Thank you, John.", " See you next time, we go to Rome."):
        assert not is_stock_phrase(text), text


@pytest.mark.parametrize("penalty", [None, 0.0, 2.0])
def test_best_of_samples_are_ranked_as_openai_whispers_ranker(tiny_engine, manifest, monkeypatch, penalty):
    """``--length-penalty`` ranks the fallback's best-of samples too: of each temperature's five draws of
    JFK's clip and a FLEURS clip the kept one is the draw openai-whisper's ``MaximumLikelihoodRanker``
    ranks first (over the draws that ended)."""
    whisper_decoding = pytest.importorskip("whisper.decoding")
    import specwhisper.asr.decoding.fallback as fallback
    from specwhisper.asr.decoding.greedy import SamplingDecoder

    clips, feats, enc, prompt = _two_chunks(tiny_engine, manifest)
    rules = _PassingFrom04(best_of=5, length_penalty=penalty)
    ranked, likelihood = [], fallback._likelihood
    monkeypatch.setattr(fallback, "_likelihood",
                        lambda seq, rules: ranked.append((seq, rules.length_penalty)) or likelihood(seq, rules))
    sampler = SamplingDecoder(tiny_engine.runtime, tiny_engine.special, tiny_engine.rules)
    attempts = decode_with_fallback(tiny_engine.decoder, lambda: sampler, enc, prompt, feats, rules, tiny_engine.text_of,
                                    DecodeStats(), seconds=[c.duration for c in clips], keys=[101, 202])
    assert {p for _, p in ranked} == {penalty} and len(ranked) == 5 * 2 * 2  # 2 clips, 2 temperatures, 5 draws
    ranker, picks = whisper_decoding.MaximumLikelihoodRanker(penalty), set()
    for k in range(0, len(ranked), 5):
        draws = [seq for seq, _ in ranked[k : k + 5] if not seq.hit_max_length]
        first = ranker.rank([[torch.tensor(s.tokens) for s in draws]], [[s.sum_logprob for s in draws]])[0]
        picks.add(tuple(draws[first].tokens))
    assert [a.temperature for a in attempts] == [0.4, 0.4]
    assert {tuple(a.seq.tokens) for a in attempts} <= picks
