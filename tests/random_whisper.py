"""Random-weight Whisper checkpoints with the real layer structure of the large-class models (layer
counts, mel bins, vocabulary, tokenizer: large-v3's <|yue|> included) at a small width: shapes, token
identity and error paths without a download. Their outputs mean nothing."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

# (encoder layers, decoder layers, mel bins, vocabulary) of the real checkpoints
SHAPES = {
    "large-v3": (32, 32, 128, 51866),
    "large-v3-turbo": (32, 4, 128, 51866),
    "distil-large-v3": (32, 2, 128, 51866),  # large-v3's encoder, 2 decoder layers
    "medium": (24, 24, 80, 51865),
    # no such checkpoint: a drafter of another vocabulary (base's tokenizer, no <|yue|>) with a 128-bin
    # encoder of its own, so a large-v3-class target has a cross-vocabulary drafter to test with
    "other-vocab-128": (2, 2, 128, 51865),
}
V3_NEW_TOKEN = ("<|yue|>", 50358)  # inserted after <|su|>; every special token after it moves up one


def processor_files(folder: Path, v3: bool, mels: int) -> None:
    """base's tokenizer (with <|yue|> for a v3 vocabulary) and feature extractor (with ``mels`` bins)."""
    from specwhisper.asr.weights.loader import resolve_model_path

    base = Path(resolve_model_path("base"))
    shutil.copy(base / "tokenizer_config.json", folder / "tokenizer_config.json")
    proc = json.loads((base / "processor_config.json").read_text())
    proc["feature_extractor"]["feature_size"] = mels
    (folder / "processor_config.json").write_text(json.dumps(proc))
    tok = json.loads((base / "tokenizer.json").read_text())
    if v3:
        content, new_id = V3_NEW_TOKEN
        template = copy.deepcopy(tok["added_tokens"][0])
        for t in tok["added_tokens"]:
            if t["id"] >= new_id:
                t["id"] += 1
        tok["added_tokens"].append({**template, "id": new_id, "content": content})
        tok["added_tokens"].sort(key=lambda t: t["id"])
    (folder / "tokenizer.json").write_text(json.dumps(tok))


def write_random_whisper(folder: Path, kind: str, d_model: int = 64, max_positions: int = 448, seed: int = 0,
                         encoder_from: Path | None = None, eot_scale: float = 0.0) -> Path:
    """``kind``: a key of ``SHAPES``. ``encoder_from``: copy that checkpoint's encoder (a distilled
    drafter shares its teacher's). ``max_positions`` below 448 keeps decoding short in tests.
    ``eot_scale``: end-of-text's row of the (tied) output head, zero as the padding token's embedding,
    becomes a random row times this, so some decodes end by themselves (2.5-3: some rows of a batch
    end after 20-50 tokens, the others run to the length limit)."""
    enc_layers, dec_layers, mels, vocab = SHAPES[kind]
    v3 = vocab == 51866
    eot, sot = 50257, 50258
    no_ts = 50364 if v3 else 50363
    cfg = WhisperConfig(d_model=d_model, encoder_layers=enc_layers, decoder_layers=dec_layers, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
                        vocab_size=vocab, num_mel_bins=mels, max_source_positions=1500, max_target_positions=max_positions,
                        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(cfg).eval()
    if encoder_from is not None:
        teacher = WhisperForConditionalGeneration.from_pretrained(encoder_from)
        model.model.encoder.load_state_dict(teacher.model.encoder.state_dict())
    if eot_scale:
        with torch.no_grad():
            emb = model.model.decoder.embed_tokens.weight
            emb[eot] = emb[1000] * eot_scale
    model.generation_config = GenerationConfig(decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
                                               max_length=max_positions, no_timestamps_token_id=no_ts)
    model.save_pretrained(folder)
    processor_files(folder, v3, mels)
    return folder
