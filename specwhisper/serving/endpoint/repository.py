"""The models an Inference Endpoint's repository brings, found in the folder the platform passes.

Inference Endpoints copies the endpoint's model repository to a folder (``/repository``) and calls
``EndpointHandler(path)`` with it. Its layout (docs/serving.md, "Inference Endpoint handler"):

- the root: a Whisper model, either transformers' files (``config.json`` with ``model_type`` whisper,
  ``model.safetensors`` or ``pytorch_model.bin``, tokenizer and preprocessor files, as
  ``save_pretrained`` / ``push_to_hub`` write them) or a CTranslate2 folder (``model.bin``,
  ``config.json``, ``tokenizer.json``: faster-whisper's format, converted once into the cache);
- ``drafter/``: a Whisper drafter in either form;
- ``diarization/``: a pyannote pipeline folder (``config.yaml``);
- ``postedit/``: a causal LM folder for the post-edit.

Each one present becomes the deployment's default (and stays one of its choices); a folder holding
none (the usual repository: ``handler.py`` and ``requirements.txt`` only) keeps the embedded models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from specwhisper.asr.weights.loader import WEIGHT_FILES, ct2_converted, is_ct2_folder
from specwhisper.serving.service import ServiceSettings

DRAFTER_DIR, DIARIZATION_DIR, POSTEDIT_DIR = "drafter", "diarization", "postedit"


@dataclass(frozen=True)
class RepositoryModels:
    """Model folders found in a repository (None: not there, the embedded default is used)."""

    whisper: str | None = None
    drafter: str | None = None
    diarization: str | None = None
    postedit: str | None = None


def _config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def whisper_folder(folder: Path, cache_dir: Path | None = None) -> str | None:
    """The loadable Whisper folder ``folder`` holds (itself, or its CTranslate2 model converted), or None."""
    if not folder.is_dir():
        return None
    config = _config(folder)
    if config.get("model_type") == "whisper" and any((folder / f).exists() for f in WEIGHT_FILES):
        return str(folder)
    if is_ct2_folder(folder) and (folder / "tokenizer.json").is_file():
        return str(ct2_converted(folder, cache_dir))
    return None


def find_models(path: str | Path | None, cache_dir: Path | None = None) -> RepositoryModels:
    """What ``path`` (the repository folder) holds; nothing for "" / None / a missing folder."""
    if not path or not Path(path).is_dir():
        return RepositoryModels()
    root = Path(path)
    diarization = root / DIARIZATION_DIR
    postedit = root / POSTEDIT_DIR
    return RepositoryModels(
        whisper=whisper_folder(root, cache_dir),
        drafter=whisper_folder(root / DRAFTER_DIR, cache_dir),
        diarization=str(diarization) if (diarization / "config.yaml").is_file() else None,
        postedit=str(postedit) if (postedit / "config.json").is_file() else None,
    )


def with_repository(settings: ServiceSettings, models: RepositoryModels) -> ServiceSettings:
    """``settings`` with the repository's models as the defaults (first choices); the rest unchanged."""
    def first(value: str | None, offered: tuple[str, ...]) -> tuple[str, ...]:
        return offered if value is None else (value, *(o for o in offered if o != value))

    choices = replace(settings.choices, models=first(models.whisper, settings.choices.models),
                      drafters=first(models.drafter, settings.choices.drafters))
    base = replace(settings.base, model=choices.models[0], draft=choices.drafters[0],
                   diarization_model=models.diarization or settings.base.diarization_model,
                   postedit_model=models.postedit or settings.base.postedit_model)
    return replace(settings, base=base, choices=choices)
