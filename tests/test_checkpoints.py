"""Checkpoints a new user brings: a folder saved without the generation-config extras the embedded
models carry (no ``alignment_heads``, no ``lang_to_id``/``is_multilingual``), found and served like any
other model. Random weights with a real tokenizer: the outputs mean nothing, the behaviour is checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "processor_config.json")


def write_checkpoint(folder: Path, vocab_size: int = 51865, seed: int = 0) -> Path:
    """A small random-weight Whisper with base's tokenizer, saved the way a bare ``save_pretrained``
    of a fine-tune is: its generation config knows the special tokens and nothing Whisper-specific."""
    from specwhisper.asr.weights.loader import resolve_model_path

    base = Path(resolve_model_path("base"))
    cfg = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=vocab_size, num_mel_bins=80,
                        max_source_positions=1500, max_target_positions=448, decoder_start_token_id=50258,
                        eos_token_id=50257, pad_token_id=50257, bos_token_id=50257)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(cfg).eval()
    model.generation_config = GenerationConfig(decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257,
                                               bos_token_id=50257, max_length=448)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(base / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def bare_checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("bare-whisper"))


@pytest.fixture(scope="module")
def bare_engine(bare_checkpoint):
    from specwhisper.asr.engine import AsrEngine

    return AsrEngine(str(bare_checkpoint))


def test_languages_from_the_tokenizer():
    """No ``lang_to_id`` in the generation config: languages come from the tokenizer's <|xx|> tokens,
    multilingual when the vocabulary is (51865 tokens and up), English-only at 51864."""
    from specwhisper.asr.decoding.tokens import SpecialTokens
    from specwhisper.asr.weights.loader import load_whisper

    tok = load_whisper("base").tokenizer
    multi = SpecialTokens.from_tokenizer(tok, GenerationConfig(), vocab_size=51865)
    assert multi.multilingual and multi.languages["en"] == 50259 and multi.languages["fr"] == 50265
    assert len(multi.languages) == 99  # base's tokenizer: every language but <|yue|> (large-v3's)
    english = SpecialTokens.from_tokenizer(tok, GenerationConfig(), vocab_size=51864)
    assert not english.multilingual and english.languages == {}
    assert english.prompt(None, "transcribe", timestamps=True) == [english.sot]


def test_bare_checkpoint_transcribes_with_words(bare_engine):
    """Without ``alignment_heads`` the engine loads (it crashed before), and word timestamps use
    openai's fallback heads (every head of the upper half of the decoder)."""
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.asr.decoding.quality import QualityRules

    assert bare_engine.special.multilingual and "de" in bare_engine.special.languages
    assert bare_engine.aligner.heads == [(1, 0), (1, 1)]
    audio = load_audio(ROOT / "samples" / "jfk.wav")
    # one greedy decode: random weights fail every quality check, and the fallback's 5 temperatures x
    # best-of-5 samples of 448 tokens took 143 s of the suite without checking anything more here
    options = DecodeOptions(language="en", word_timestamps=True, quality=QualityRules(temperatures=(0.0,)))
    result = bare_engine.transcribe(audio, options)
    assert result.language == "en" and result.chunks
    words = [w for s in result.segments for w in s.words]
    assert all(s.start <= w.start <= w.end <= s.end + 0.02 for s in result.segments for w in s.words)
    assert words or not any(s.tokens for s in result.segments)


def test_early_exit_on_a_folder_model(bare_engine, bare_checkpoint, tmp_path):
    """``--draft early-exit`` on a folder model: a clear error when no adapter was trained for it (it
    crashed on a path glob before); the raw early exit decodes like plain decoding; an adapter saved
    for it is found by the model's identity, from a copy of the folder under another name too."""
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.drafters.exit_adapters import AdapterConfig, ExitAdapter, find_adapters, model_fingerprint, save_adapter
    from specwhisper.asr.drafters.early_exit import early_exit_drafter
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.decoding.speculative import SpeculativeDecoder

    with pytest.raises(ValueError, match="no early-exit adapter for model .*bare-whisper.* at layer 1"):
        early_exit_drafter(bare_engine, exit_layer=1)

    e = bare_engine
    audio = load_audio(ROOT / "samples" / "jfk.wav")
    feats = e.bundle.feature_extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
    enc = e.encoder.encode(feats)
    prompt = e.special.prompt("en", "transcribe", timestamps=True)
    plain = e.decoder.decode(enc, prompt).sequences[0]
    spec = SpeculativeDecoder(e.runtime, e.special, e.rules, early_exit_drafter(e, exit_layer=1, adapter=None))
    assert spec.decode(enc, prompt, features=feats).sequences[0].tokens == plain.tokens

    fp = model_fingerprint(e.bundle.model)
    cfg = AdapterConfig(model=str(bare_checkpoint), exit_layer=1, cross_layer=None, rank=8, d_model=64, n_head=2, fingerprint=fp)
    save_adapter(ExitAdapter.from_target(cfg, e.runtime), tmp_path / "adapters" / "mine-k1.safetensors")
    assert find_adapters(fp, [tmp_path / "adapters"]) == {1: tmp_path / "adapters" / "mine-k1.safetensors"}
    copy = shutil.copytree(bare_checkpoint, tmp_path / "renamed")
    assert model_fingerprint(AsrEngine(str(copy)).bundle.model) == fp
    other = WhisperForConditionalGeneration.from_pretrained(write_checkpoint(tmp_path / "other", seed=1))
    assert model_fingerprint(other) != fp


def test_hub_id_in_the_local_cache_loads_offline(bare_checkpoint, tmp_path, monkeypatch):
    """A hub id whose snapshot is in the local hub cache loads from it at once, without asking the
    hub (no network here: asking took minutes of retries before)."""
    import huggingface_hub.constants as hub

    import specwhisper.asr.weights.loader
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.weights.loader import resolve_model_path

    def no_hub(name, timeout=10.0):
        raise AssertionError(f"asked the hub for {name}")

    repo = tmp_path / "hub" / "models--someone--bare-whisper"
    shutil.copytree(bare_checkpoint, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(specwhisper.asr.weights.loader, "_check_hub_model", no_hub)
    assert resolve_model_path("someone/bare-whisper") == str(repo / "snapshots" / "0123abcd")
    assert AsrEngine("someone/bare-whisper").model_name == "someone/bare-whisper"


def test_a_private_hub_model_is_fetched_with_the_token_given(bare_checkpoint, tmp_path, monkeypatch):
    """--hf-token (load(hf_token=...)) reaches every hub request of the Whisper model, its drafter and the
    post-edit LLM, not only the diarizer's (a private fine-tune, a gated LLM). No hub answers here: its two
    calls are stood in for, recording the token each is given, the 'download' handing over a local copy."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError
    from transformers import AutoTokenizer

    from specwhisper.pipeline.config import PipelineConfig
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.postedit.models import LLMError

    tokens = []

    def snapshot_download(repo, local_files_only=False, token=None, **kw):
        if local_files_only:
            raise LocalEntryNotFoundError(f"{repo} is not cached")
        tokens.append(("download", repo, token))
        return str(bare_checkpoint)

    def model_info(self, repo, timeout=None, token=None, **kw):
        tokens.append(("info", repo, token))

    def tokenizer(path, token=None, **kw):
        tokens.append(("llm", path, token))
        raise OSError("stop: no LLM to load here")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", tokenizer)
    config = PipelineConfig(model="someone/private-whisper", draft="someone/private-drafter", hf_token="hf_secret",
                            postedit_model="someone/gated-llm", cache_dir=tmp_path / "cache")
    pipeline = Pipeline(config)
    assert pipeline.asr.model_name == "someone/private-whisper"
    with pytest.raises(LLMError):
        pipeline.post_editor()
    asked = {(kind, repo) for kind, repo, _ in tokens}
    assert {("info", "someone/private-whisper"), ("download", "someone/private-whisper"), ("info", "someone/private-drafter"),
            ("download", "someone/private-drafter"), ("llm", "someone/gated-llm")} <= asked, tokens
    assert {token for _, _, token in tokens} == {"hf_secret"}, tokens
