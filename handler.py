"""Hugging Face Inference Endpoints custom handler: ``EndpointHandler(path)(data) -> dict``.

``data`` is ``{"inputs": <audio bytes or base64 string>, "parameters": {...}}`` (the toolkit puts a
query string's ``?formats=srt`` into ``parameters`` when the body has none); ``inputs`` may also be
transformers' ``{"raw": samples, "sampling_rate": Hz}`` or a list of inputs (a list of answers). The answer
holds ``text``, ``segments``, ``language``, ``speakers``, ``timings``, ``speculative``, and ``chunks`` with
``return_timestamps`` or ``return_language``. A bad request raises an exception with a one-line message, which the inference
toolkit answers with HTTP 400 and ``{"error": "<message>"}`` (a returned error dict would go out as
200). Models: those ``path`` (the repository folder) holds, else the embedded ones (docs/serving.md,
"Inference Endpoint handler"); deployment settings come from ``SPECWHISPER_*`` environment variables.
"""

from __future__ import annotations

import os
from typing import Any

from specwhisper.serving.endpoint.contract import Endpoint, settings_from_env
from specwhisper.serving.endpoint.repository import find_models, with_repository
from specwhisper.serving.service import ServiceSettings


class EndpointHandler:
    def __init__(self, path: str = "", settings: ServiceSettings | None = None):
        self.path = path
        settings = settings or settings_from_env(os.environ)
        self.models = find_models(path, settings.base.cache_dir)
        self.endpoint = Endpoint(with_repository(settings, self.models))

    def __call__(self, data: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        return self.endpoint.predict(data)
