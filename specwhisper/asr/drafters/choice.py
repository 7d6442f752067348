"""Choosing the decoder per ``--draft``: plain greedy, or speculative with a drafter.

``none``      plain greedy decoding (one target pass per token)
``ngram``     prompt-lookup drafting from the decoded text of the batch (no model)
``auto``      decided by measurement on this device and batch size (specwhisper/asr/drafters/auto.py): the
              n-gram, early-exit or (where the target has one here) distil-whisper drafter expected
              to beat plain decoding, else plain decoding
early-exit[:k] the target's own first k decoder layers with a trained exit adapter (specwhisper/asr/drafters/early_exit.py):
              no second model, the KV cache shared with the verify pass; ``early-exit:k:raw`` without
              the adapter (a weak drafter, for comparison)
MODEL         any Whisper model (embedded name, HF id, folder) drafting for the target;
              same tokenizer: ids pass through and the encoder output is reused when the
              encoders are identical (e.g. distil-large-v3 for large-v3); different tokenizer
              (tiny.en for base): text is re-tokenized between the vocabularies.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from specwhisper.asr.decoding.greedy import Decoder, GreedyDecoder
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.decoding.rules import WhisperLogitRules
from specwhisper.asr.drafters.auto import AutoDecoder
from specwhisper.asr.drafters.cost_store import CostStore
from specwhisper.asr.drafters.early_exit import DEFAULT_EXIT_LAYER, early_exit_drafter
from specwhisper.asr.drafters.exit_adapters import find_adapters, model_fingerprint
from specwhisper.asr.drafters.vocab import HEAD_TEXT_TOKENS
from specwhisper.asr.drafters.model import DraftModel, WhisperModelDrafter, Retokenize
from specwhisper.asr.drafters.ngram import WhisperNgramDrafter
from specwhisper.speculative.token_map import SameVocab
from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime
from specwhisper.asr.runtime.encoder import EncoderRuntime
from specwhisper.asr.weights.loader import (DISTIL_DRAFTERS, ModelError, WhisperBundle, default_cache_dir,
                                            find_distil_drafter, hub_id, load_whisper, resolve_model_path, split_int8)
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder
from specwhisper.hardware.device import device_label
from specwhisper.messages import one_line

log = logging.getLogger(__name__)
DRAFT_CHOICES = ("auto", "none", "ngram", "early-exit")


def decoder_factory(draft: str, cache_dir: Path | None = None, lookahead: Lookahead | None = None, token: str | None = None):
    """Return a function building the decoder for an engine, per ``--draft`` (``token``: a hub drafter's)."""
    if not draft or not isinstance(draft, str):
        raise ValueError("--draft must be auto, none, ngram, early-exit[:k] or a Whisper model")
    if draft.split(":")[0] == "early-exit":
        early_exit_spec(draft)  # bad forms fail here, before any model loads

    def build(engine) -> Decoder:
        if draft == "auto":
            return auto_decoder(engine, lookahead, cache_dir, token)
        choice = draft
        if choice == "none":
            return GreedyDecoder(engine.runtime, engine.special, engine.rules)
        if choice == "ngram":
            drafter = WhisperNgramDrafter()
        elif choice.split(":")[0] == "early-exit":
            layer, raw = early_exit_spec(choice)
            drafter = early_exit_drafter(engine, layer, adapter=None if raw else "auto")
        else:
            drafter = model_drafter(engine, choice, cache_dir, token=token)
        return SpeculativeDecoder(engine.runtime, engine.special, engine.rules, drafter, lookahead)

    return build


def check_draft(draft: str, cache_dir: Path | None = None) -> None:
    """A ``ValueError`` or ``ModelError`` (one line) when ``draft`` names no drafter this machine can load:
    a bad form, or a model that is neither embedded, a folder, cached nor on a hub that answers. Loads
    nothing; what a deployment checks for every drafter it offers before it serves."""
    if draft in ("auto", "none", "ngram"):
        return
    if draft.split(":")[0] == "early-exit":
        early_exit_spec(draft)
        return
    resolve_model_path(split_int8(draft)[0], cache_dir)


def auto_decoder(engine, lookahead: Lookahead | None = None, cache_dir: Path | None = None, token: str | None = None) -> AutoDecoder:
    """``--draft auto``: candidates are the n-gram drafter, where an adapter for this target exists the
    early-exit drafter (at the default exit layer if trained, else the deepest), and the target's
    distil-whisper drafter where this machine has it or the hub answers (``find_distil_drafter``)."""
    def spec(drafter) -> SpeculativeDecoder:
        return SpeculativeDecoder(engine.runtime, engine.special, engine.rules, drafter, lookahead)

    candidates = {"ngram": spec(WhisperNgramDrafter())}
    fingerprint = model_fingerprint(engine.bundle.model)
    adapters = find_adapters(fingerprint)
    if adapters:
        k = DEFAULT_EXIT_LAYER if DEFAULT_EXIT_LAYER in adapters else max(adapters)
        candidates[f"early-exit:{k}"] = spec(early_exit_drafter(engine, k, adapter=adapters[k]))
    notes = []
    if hub_id(engine.model_name) in DISTIL_DRAFTERS:
        distil, why = find_distil_drafter(engine.model_name, token)
        if distil is not None:
            try:
                candidates[distil] = spec(model_drafter(engine, distil, cache_dir, token=token))
            except (ModelError, ValueError) as exc:
                distil, why = None, f"{distil} could not be loaded ({one_line(exc)})"
        if distil is None:  # one line, and on with the drafters there are
            log.warning(f"--draft auto: {why}; weighing {', '.join(candidates)} and plain decoding")
        notes.append(why)
    rt = engine.runtime
    setting = json.dumps([device_label(engine.device), fingerprint, str(engine.bundle.model.dtype), rt.int8,
                          rt.fixed_width, sorted(candidates)])
    store = CostStore((cache_dir or default_cache_dir()) / "auto-costs.json", setting)
    return AutoDecoder(rt, engine.special, engine.rules, candidates, notes=notes, store=store)


def early_exit_spec(draft: str) -> tuple[int | None, bool]:
    """``early-exit[:k][:raw]`` -> (exit layer or None for the default, without adapter)."""
    parts = draft.split(":")[1:]
    raw = bool(parts) and parts[-1] == "raw"
    parts = parts[:-1] if raw else parts
    if len(parts) > 1 or (parts and not parts[0].isdigit()):
        raise ValueError(f"--draft early-exit takes an exit layer: early-exit:3 (got '{draft}')")
    return (int(parts[0]) if parts else None), raw


def same_encoder(a, b) -> bool:
    ea, eb = a.model.encoder.state_dict(), b.model.encoder.state_dict()
    return ea.keys() == eb.keys() and all(ea[k].shape == eb[k].shape and torch.equal(ea[k], eb[k]) for k in ea)


def model_drafter(engine, name: str, cache_dir: Path | None = None, head_text_tokens: int | None = HEAD_TEXT_TOKENS,
                  min_confidence: float = 0.0, num_layers: int | None = None, bundle: WhisperBundle | None = None,
                  token: str | None = None) -> WhisperModelDrafter:
    """A Whisper model drafting for ``engine``'s target. ``name`` may be the target itself: all its
    layers make a perfect (and slow) drafter, its first ``num_layers`` a cheap, weaker one; ``NAME:int8``
    drafts with int8 weights (``specwhisper.asr.weights.loader.load_whisper``: a quarter of the memory traffic per step).
    ``bundle``: the drafter already loaded (e.g. a model built in memory)."""
    if bundle is None and name == engine.model_name:
        bundle = engine.bundle
    elif bundle is None:  # in the target's dtype (an int8 drafter computes in float32)
        dtype = torch.float32 if split_int8(name)[1] else engine.bundle.model.dtype
        bundle = load_whisper(name, cache_dir=cache_dir, device=engine.device, dtype=dtype, token=token)
    if bundle.model.config.num_mel_bins != engine.bundle.model.config.num_mel_bins:
        raise ValueError(f"drafter '{name}' uses {bundle.model.config.num_mel_bins} mel bins, the target "
                         f"{engine.bundle.model.config.num_mel_bins}: they cannot share input features")
    special = SpecialTokens.from_tokenizer(bundle.tokenizer, bundle.generation_config, bundle.model.config.vocab_size)
    # a drafter's numbers only shape its guesses: no need for the verify pass's per-query attention
    runtime = WhisperDecoderRuntime(bundle.model, num_layers=num_layers, row_exact=False)
    gc = bundle.generation_config
    same_vocab = bundle.tokenizer.get_vocab() == engine.bundle.tokenizer.get_vocab()
    # the target's suppressed tokens too, where the ids mean the same: a draft the target would refuse is wasted
    suppress = sorted(set(gc.suppress_tokens or []) | (set(engine.suppressed) if same_vocab else set()))
    rules = WhisperLogitRules(special, runtime.vocab_size, suppress, list(gc.begin_suppress_tokens or []), timestamps=True)
    token_map = SameVocab() if same_vocab else Retokenize(engine.bundle.tokenizer, engine.special, bundle.tokenizer, special)
    shares = bundle is engine.bundle or same_encoder(bundle.model, engine.bundle.model)
    if shares and bundle is not engine.bundle:  # its own copy of the encoder is never run: the target's stands in
        bundle.model.model.encoder = engine.bundle.model.model.encoder
    draft = DraftModel(runtime, special, rules, bundle.tokenizer, shares_encoder=shares,
                       encoder=None if shares else EncoderRuntime(bundle.model.model.encoder))
    label = f"{name}:{num_layers}" if num_layers else name
    return WhisperModelDrafter(draft, token_map, engine.special, name=label, min_confidence=min_confidence,
                        head_text_tokens=head_text_tokens)
