"""Language names and codes as users write them: "en", "EN", "english", "English", "German", "mandarin".

Whisper's prompt takes a code (``<|en|>``); the CLI, the web UI, the HTTP server and the Inference
Endpoint all take what a person or a transformers client sends (``generate_kwargs={"language":
"english"}`` is the ASR pipeline's usual form), so every entry point normalises through here. The
tables are transformers' own (``tokenization_whisper.LANGUAGES`` / ``TO_LANGUAGE_CODE``: 100 codes,
112 names with aliases such as "castilian" and "mandarin"); that module is imported by the Whisper
tokenizer anyway, so this costs no start-up time.
"""

from __future__ import annotations

import re

from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

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
    if key in LANGUAGES:
        return key
    if key in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[key]
    if CODE.match(key):
        return key
    shown = value if len(value) <= 40 else value[:37] + "..."
    raise ValueError(f"unknown language '{' '.join(shown.split())}' (give a code such as 'en' or a name such as 'english')")
