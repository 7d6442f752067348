"""Languages: the codes and names users write ("en", "EN", "english", "German", "mandarin"), and
detecting the language of a window (openai/whisper's method).

Whisper's prompt takes a code (``<|en|>``); the CLI, the web UI, the HTTP server and the Inference
Endpoint all take what a person or a transformers client sends (``generate_kwargs={"language":
"english"}`` is the ASR pipeline's usual form), so every entry point normalises through here. The
tables are transformers' own (``tokenization_whisper.LANGUAGES`` / ``TO_LANGUAGE_CODE``: 100 codes,
112 names with aliases such as "castilian" and "mandarin"), imported when a language is named: the
command line checks its options before transformers or torch are loaded.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from specwhisper.asr.decoding.tokens import SpecialTokens
    from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime

CODE = re.compile(r"^[a-z]{2,3}$")  # a code the tables may not know (a newer model's): the model checks it


def normalize_language(value: str | None) -> str | None:
    """A language code, or None (detect) for None, "" and "auto"; ValueError (one line) for a name
    that is neither a code nor a language name. ``<|en|>`` (a token) is taken too."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"language must be a code or a name (e.g. 'en' or 'english'), got {type(value).__name__}")
    key = value.strip().lower().removeprefix("<|").removesuffix("|>").replace("_", " ")
    if key in ("", "auto"):
        return None
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    if key in LANGUAGES:
        return key
    if key in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[key]
    if CODE.match(key):
        return key
    shown = value if len(value) <= 40 else value[:37] + "..."
    raise ValueError(f"unknown language '{' '.join(shown.split())}' (give a code such as 'en' or a name such as 'english')")


def same_language(a: object, b: object) -> bool:
    """Equal, or the same language written two ways ("en", "english", "<|en|>"); a value that names no
    language equals only itself (its field's own check reports it)."""
    if a == b:
        return True
    try:
        return normalize_language(a) == normalize_language(b)
    except ValueError:
        return False


def language_name(code: str | None) -> str:
    """A code's name as transformers writes it ("en" -> "english"): what its ASR pipeline's ``return_language``,
    OpenAI's verbose_json and the asr-webservice answer with; a code the tables lack as it is; "" for None."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return LANGUAGES.get(code, code) if code else ""


def language_probabilities(runtime: WhisperDecoderRuntime, special: SpecialTokens, encoder_out: "torch.Tensor"
                           ) -> dict[str, float]:
    """Every language's probability for the first row of ``encoder_out``, most likely first
    (openai/whisper's method: the language tokens' softmax at the step after ``<|startoftranscript|>``).
    An English-only model knows one: ``{"en": 1.0}``."""
    from specwhisper.hardware.device import on_device

    if not special.multilingual:
        return {"en": 1.0}
    cache = runtime.new_cache(encoder_out[:1])
    device = runtime.device
    logits = runtime.step(on_device([[special.sot]], device), on_device([[0]], device), cache)[0, -1]
    codes = list(special.languages)
    ids = on_device([special.languages[c] for c in codes], device)
    probs = logits[ids].float().softmax(-1).tolist()
    order = sorted(range(len(codes)), key=probs.__getitem__, reverse=True)  # stable: ties keep the table's order
    return {codes[k]: probs[k] for k in order}


def detect_language(runtime: WhisperDecoderRuntime, special: SpecialTokens, encoder_out: "torch.Tensor") -> tuple[str, float]:
    """Most likely language of the first row of ``encoder_out`` and its probability."""
    return next(iter(language_probabilities(runtime, special, encoder_out).items()))
