"""The early-exit drafter (specwhisper/asr/drafters/early_exit.py): exact output (the same tokens, timestamps included, as
plain greedy decoding) for batch sizes 1 and 4, the KV cache shared with the verify pass, and the
committed exit adapters: small, loadable, and better drafters than the bare first layers."""

from __future__ import annotations

import pytest
import torch

from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.drafters.exit_adapters import ADAPTER_DIR, adapter_path, available_exit_layers, load_adapter, model_fingerprint
from specwhisper.asr.drafters.early_exit import EarlyExitDrafter, early_exit_drafter
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder
from tests.exactness import assert_decodes_like_plain

# English clips of different lengths and kinds (read speech, a number, spontaneous speech, an edge
# voice) and another language: a spread of timestamp patterns, endings and scripts
FILES = ["openai-whisper/jfk.flac", "lhotse/2412-153948-0000.flac", "lhotse/LJ002-0020.wav", "mfa/mfa_uhum.flac",
         "mfa/acoustic_corpus.wav", "cuttledoc-fleurs/fleurs-de-000.ogg"]


@pytest.fixture(scope="module")
def encoded(windows):
    """Per file of FILES: (item, encoder output, prompt), from the session's shared windows."""
    return [(item, enc, prompt) for item, _, enc, prompt in map(windows.of, FILES)]


def decode_all(engine, drafter, encoded, reference, files=None):
    """Decode each file alone; assert identity with plain greedy; return the acceptance rate."""
    dec = SpeculativeDecoder(engine.runtime, engine.special, engine.rules, drafter, Lookahead())
    cases = [(item, enc, prompt, None) for item, enc, prompt in encoded if files is None or item.file in files]
    drafted, accepted = assert_decodes_like_plain(dec, cases, reference, drafter.name)
    return accepted / drafted if drafted else 0.0


@pytest.fixture(scope="module")
def acceptance(base_engine, encoded, plain_reference):
    """Acceptance at exit layer 3 with the committed adapter (every file of FILES) and without any (a
    weak drafter, so slow to verify: its first 4 files, the shorter ones); both must be exact."""
    rates = {}
    for adapter, files in (("auto", None), (None, FILES[:4])):
        drafter = early_exit_drafter(base_engine, 3, adapter=adapter)
        rates["adapter" if adapter else "raw"] = decode_all(base_engine, drafter, encoded, plain_reference, files)
    print(f"\nearly-exit:3 acceptance with adapter {rates['adapter']:.2f}, without {rates['raw']:.2f}")
    return rates


def test_identical_tokens_batch_1(acceptance):
    """Every file, with and without the adapter: the fixture asserts token identity."""
    assert acceptance["adapter"] > 0


def test_adapter_beats_bare_layers(acceptance):
    """The trained adapter is what makes the first layers a drafter: without it they agree with the
    target a few percent of the time."""
    assert acceptance["raw"] < 0.2
    assert acceptance["adapter"] > acceptance["raw"] + 0.25
    assert acceptance["adapter"] > 0.4


@pytest.mark.parametrize("k", [1, 5])
def test_identical_tokens_other_exit_layers(base_engine, encoded, plain_reference, k):
    """The first and the last possible exit (a verify pass of 5 layers, of 1 layer), on three files
    (JFK, LJSpeech's number, German)."""
    files = [FILES[0], FILES[2], FILES[-1]]
    assert decode_all(base_engine, early_exit_drafter(base_engine, k), encoded, plain_reference, files) > 0


def test_identical_tokens_batch_4(base_engine, encoded, plain_reference):
    """Rows draft, share the cache, accept and finish apart; row removal re-attaches the cache."""
    e = base_engine
    dec = decoder_factory("early-exit:3")(e)
    group = [x for x in encoded if (x[0].language or "en") == "en"][:4]  # 27, 48, 6 and 11 tokens
    out = dec.decode(torch.cat([g[1] for g in group]), group[0][2])
    for (item, *_), got in zip(group, out.sequences):
        assert got.tokens == plain_reference[item.file].tokens, f"{item.file} differs in a batch of {len(group)}"
    assert out.stats.accepted_tokens > 0


def drafted_round(engine, enc, prompt, k: int):
    """A drafter over a fresh cache holding the prompt: the first token, and ``k`` drafts after it."""
    rt = engine.runtime
    drafter = early_exit_drafter(engine, 3)
    drafter.log_min_conf = float("-inf")  # always draft the full k
    cache = rt.new_cache(enc, slack=8)
    drafter.begin(enc, prompt, None)
    drafter.attach(cache)
    first = rt.step(torch.tensor([prompt]), torch.arange(len(prompt))[None], cache)[0, -1].argmax().item()
    return drafter, cache, first, drafter.propose([[first]], [k])[0]


def verify_checked(engine, drafter, cache, enc, prompt, tokens, monkeypatch):
    """The verify pass's hidden states (checked against a full pass over a fresh cache) and the layer
    ranges it ran: (start, stop, tokens) per call."""
    rt = engine.runtime
    positions = len(prompt) + torch.arange(tokens.shape[1])[None]
    calls, real = [], rt.layer_range
    monkeypatch.setattr(rt, "layer_range", lambda x, pos, c, start=0, stop=None, **kw: calls.append((start, stop, x.shape[1]))
                        or real(x, pos, c, start, stop, **kw))
    hidden = drafter.verify(rt, tokens, positions, cache)
    monkeypatch.undo()
    fresh = rt.new_cache(enc, slack=8)
    rt.hidden(torch.tensor([prompt]), torch.arange(len(prompt))[None], fresh)
    assert torch.allclose(hidden, rt.hidden(tokens, positions, fresh), atol=1e-4)
    return calls


def test_verify_reuses_the_drafters_layers(base_engine, encoded, monkeypatch):
    """The verify pass enters the stack at layer k for the tokens the drafter fed (no lower layer runs
    twice), and its hidden states equal a full pass over the same tokens."""
    _, enc, prompt = encoded[0]
    drafter, cache, first, drafts = drafted_round(base_engine, enc, prompt, 4)
    assert len(drafts) == 4
    tokens = torch.tensor([[first, *drafts[:-1]]])  # no bonus token: the last draft is only checked
    assert verify_checked(base_engine, drafter, cache, enc, prompt, tokens, monkeypatch) == [(3, None, 4)]


def test_verify_falls_back_when_the_drafter_did_not_feed(base_engine, encoded, monkeypatch):
    """Tokens other than those the drafter fed (here: a changed draft and what follows it) run through
    every layer; the leading ones it fed still enter at layer k."""
    _, enc, prompt = encoded[1]
    drafter, cache, first, drafts = drafted_round(base_engine, enc, prompt, 3)
    tokens = torch.tensor([[first, (drafts[0] + 1) % 50000, drafts[1]]])
    assert verify_checked(base_engine, drafter, cache, enc, prompt, tokens, monkeypatch) == [(0, 3, 2), (3, None, 3)]


def test_adapter_files_small_and_loadable(base_engine):
    """One committed adapter per exit layer of base, fp16, well under 2% of the target's weights."""
    rt = base_engine.runtime
    assert available_exit_layers(model_fingerprint(base_engine.bundle.model)) == [1, 2, 3, 4, 5]
    target_bytes = sum(p.numel() * p.element_size() for p in base_engine.bundle.model.parameters())
    for k in range(1, 6):
        path = adapter_path("base", k)
        assert path.stat().st_size < 1_000_000
        a = load_adapter(path)
        assert a.config.exit_layer == k and a.config.model == "base"
        assert a.config.fingerprint == model_fingerprint(base_engine.bundle.model)
        assert a.config.d_model == rt.d_model and a.config.n_head == rt.n_head
        assert a.num_bytes() < 0.02 * target_bytes
        assert 0.0 <= a.min_confidence < 1.0
        assert all(torch.isfinite(p).all() for p in a.parameters())
    assert (ADAPTER_DIR / "base.json").exists() and (ADAPTER_DIR / "README.md").exists()


def test_draft_option_parsing(base_engine, tiny_engine):
    build = decoder_factory("early-exit")(base_engine)
    assert isinstance(build.drafter, EarlyExitDrafter) and build.drafter.k == 3 and build.drafter.adapter is not None
    raw = decoder_factory("early-exit:2:raw")(base_engine)
    assert raw.drafter.k == 2 and raw.drafter.adapter is None
    for bad in ("early-exit:x", "early-exit:3:4", "early-exit:"):
        with pytest.raises(ValueError):
            decoder_factory(bad)
    with pytest.raises(ValueError, match="exit layer"):
        decoder_factory("early-exit:6")(base_engine)
    with pytest.raises(ValueError, match="no early-exit adapter"):
        decoder_factory("early-exit:2")(tiny_engine)
