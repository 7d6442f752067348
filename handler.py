"""Hugging Face Inference Endpoints custom handler: ``EndpointHandler(path)(data) -> dict``.

``data`` is ``{"inputs": <audio bytes or base64 string>, "parameters": {...}}``; the answer holds
``text``, ``segments`` (start, end, text, speaker, overlap, words), ``language``, ``speakers``,
``timings`` (seconds per stage, ``rtf``) and ``speculative`` (acceptance rate, tokens per target
pass), or ``{"error": "<one line>", "status": 4xx/5xx}``. Deployment settings come from
``SPECWHISPER_*`` environment variables (see README, "Inference Endpoint"); the models are the
embedded ones, so ``path`` (the repository folder Inference Endpoints passes) is only kept.
"""

from __future__ import annotations

import os
from typing import Any

from specwhisper.serving.endpoint import Endpoint, settings_from_env
from specwhisper.serving.service import ServiceSettings


class EndpointHandler:
    def __init__(self, path: str = "", settings: ServiceSettings | None = None):
        self.path = path
        self.endpoint = Endpoint(settings or settings_from_env(os.environ))

    def __call__(self, data: dict[str, Any]) -> dict[str, Any]:
        return self.endpoint(data)
