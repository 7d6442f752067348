"""The multi-token draft heads (asr/draft_heads.py): exact output (the same tokens, timestamps
included, as plain greedy decoding) at batch sizes 1 and 4, whatever the heads guess; the committed
heads small and loadable; and a drafter that actually drafts well (far above the n-gram drafter)."""

from __future__ import annotations

import pytest
import torch

from asr.draft_heads import HeadsDrafter, heads_drafter, heads_path, load_heads
from asr.drafting import decoder_factory
from asr.speculative import Lookahead, SpeculativeDecoder
from tests.exactness import assert_decodes_like_plain
from tests.test_early_exit import FILES


@pytest.fixture(scope="module")
def encoded(windows):
    by_file = {item.file: (item, enc, prompt) for item, _, enc, prompt in windows}
    return [by_file[f] for f in FILES]


def decode_all(engine, drafter, encoded, reference):
    dec = SpeculativeDecoder(engine.runtime, engine.special, engine.rules, drafter, Lookahead())
    cases = [(item, enc, prompt, None) for item, enc, prompt in encoded]
    drafted, accepted = assert_decodes_like_plain(dec, cases, reference, drafter.name)
    return drafted, accepted


def test_identical_tokens_batch_1_and_acceptance(base_engine, encoded, plain_reference):
    """Every file of FILES (English read, meeting and spontaneous speech, German, French): identical
    tokens; and the heads draft: most of what they propose is accepted."""
    drafted, accepted = decode_all(base_engine, heads_drafter(base_engine), encoded, plain_reference)
    print(f"\nheads: drafted {drafted}, accepted {accepted} ({accepted / max(drafted, 1):.2f})")
    assert drafted > 100
    assert accepted / drafted > 0.5


def test_identical_tokens_batch_4(base_engine, encoded, plain_reference):
    """Rows accept different numbers of tokens and finish apart; the heads' states follow the rows."""
    dec = decoder_factory("heads")(base_engine)
    english = [x for x in encoded if (x[0].language or "en") == "en"][:8]
    for i in range(0, len(english), 4):
        group = english[i : i + 4]
        out = dec.decode(torch.cat([g[1] for g in group]), group[0][2])
        for (item, *_), got in zip(group, out.sequences):
            assert got.tokens == plain_reference[item.file].tokens, f"{item.file} differs in a batch of {len(group)}"
        assert out.stats.accepted_tokens > 0


def test_scrambled_heads_still_exact(base_engine, encoded, plain_reference):
    """Heads with random weights and no confidence stop propose garbage every round: the output must
    not change (the verify pass decides every token)."""
    heads = load_heads(heads_path("base"))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * p.std().clamp_min(0.1))
    drafter = HeadsDrafter(base_engine.runtime, base_engine.special, base_engine.rules, heads, min_confidence=0.0)
    drafted, accepted = decode_all(base_engine, drafter, encoded[:4], plain_reference)
    assert drafted > 0 and accepted < 0.2 * drafted


def test_heads_file_small_and_loadable(base_engine):
    rt = base_engine.runtime
    path = heads_path("base")
    heads = load_heads(path)
    target_bytes = sum(p.numel() * p.element_size() for p in base_engine.bundle.model.parameters())
    assert heads.config.model == "base" and heads.config.d_model == rt.d_model and heads.config.n_head == rt.n_head
    assert heads.num_bytes() < 0.02 * target_bytes
    assert path.stat().st_size < 4_000_000
    assert all(torch.isfinite(p).all() for p in heads.parameters())
    assert path.with_suffix(".json").exists() or (path.parent / "base-heads.json").exists()


def test_no_heads_for_other_models(tiny_engine):
    with pytest.raises(ValueError, match="no draft heads"):
        decoder_factory("heads")(tiny_engine)
