"""A faithful minimal copy of how the Hugging Face inference toolkit serves a custom handler, for tests.

Inference Endpoints runs ``huggingface-inference-toolkit`` in front of ``handler.EndpointHandler``;
the toolkit itself does not import here (0.5.6 needs transformers' removed ``is_tf_available`` and
Starlette's removed ``on_startup``), so this reproduces, line for line where it matters, its request
handling from huggingface/huggingface-inference-toolkit 0.5.6 (commit 833b5a2e, 2025-08-25):

- ``src/huggingface_inference_toolkit/webservice_starlette.py``, ``predict``: the body is decoded by
  the deserializer of the exact ``Content-Type`` (an unknown one is an error); it must hold
  ``inputs``; with ``parameters`` in the body and ``HF_TASK`` an audio task, ``inputs`` is
  base64-decoded (``validate=True``) before the handler sees it; query parameters become
  ``parameters`` only when the body has none, through ``convert_params_to_int_or_bool``; the handler
  runs in a worker thread, one at a time (``async_utils``); its return value is serialized by the
  ``Accept`` type (``*/*`` or none: JSON) with status 200, and ANY exception becomes status 400 with
  ``{"error": str(exc)}``;
- ``serialization/base.py`` (content types), ``audio_utils.Audioer`` (a raw audio body is
  ``{"inputs": bytes}``), ``json_utils.Jsoner`` (orjson);
- ``utils.convert_params_to_int_or_bool``: ``"5"`` -> 5, ``"true"``/``"false"`` -> bools, the rest
  stays text (``"0.5"``, ``"srt,vtt"``); a repeated key keeps its last value (``dict(query_params)``).
"""

from __future__ import annotations

import base64
import functools

import anyio
import orjson
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

AUDIO_TYPES = ("audio/x-flac", "audio/flac", "audio/mpeg", "audio/x-mpeg-3", "audio/wave", "audio/wav", "audio/x-wav",
               "audio/ogg", "audio/x-audio", "audio/webm", "audio/webm;codecs=opus", "audio/AMR", "audio/amr",
               "audio/AMR-WB", "audio/AMR-WB+", "audio/m4a", "audio/x-m4a")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/tiff", "image/bmp", "image/gif", "image/webp", "image/x-image")


class Jsoner:
    deserialize = staticmethod(orjson.loads)
    serialize = staticmethod(lambda body, accept=None: orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY))


class Audioer:
    deserialize = staticmethod(lambda body: {"inputs": bytes(body)})


# serialization/base.py's content_type_mapping (images: not needed here, kept as unsupported None)
CONTENT_TYPES = {"application/json": Jsoner, "application/json; charset=UTF-8": Jsoner, "text/csv": None,
                 "text/plain": None, **dict.fromkeys(IMAGE_TYPES), **dict.fromkeys(AUDIO_TYPES, Audioer)}


def convert_params_to_int_or_bool(params: dict) -> dict:
    """Converts query params to int or bool if possible (the toolkit's own code)."""
    for k, v in params.items():
        if v.isnumeric():
            params[k] = int(v)
        if v == "false":
            params[k] = False
        if v == "true":
            params[k] = True
    return params


def content_type(name: str | None, kind: str):
    """``ContentType.get_deserializer`` / ``get_serializer``: the class, or an exception naming the types."""
    if name in CONTENT_TYPES:
        return CONTENT_TYPES[name]
    raise Exception(f"""
                {kind} type "{name}" not supported.
                Supported {kind.lower()} types are:
                {", ".join(list(CONTENT_TYPES.keys()))}
            """)


def toolkit_app(inference_handler, task: str = "custom") -> Starlette:
    """The toolkit's Starlette app around ``inference_handler`` (HF_TASK = ``task``)."""
    guard = anyio.Semaphore(1)  # MAX_CONCURRENT_THREADS = 1

    async def predict(request):
        try:
            deserializer = content_type(request.headers.get("content-Type", None), "Content")
            deserialized_body = deserializer.deserialize(await request.body())
            if "inputs" not in deserialized_body and "instances" not in deserialized_body:
                raise ValueError(f"Body needs to provide a inputs key, received: {orjson.dumps(deserialized_body)}")
            if "parameters" in deserialized_body and task in {"automatic-speech-recognition", "audio-classification"}:
                deserialized_body["inputs"] = base64.b64decode(deserialized_body["inputs"], validate=True)
            if request.query_params and "parameters" not in deserialized_body:
                deserialized_body["parameters"] = convert_params_to_int_or_bool(dict(request.query_params))
            async with guard:
                pred = await anyio.to_thread.run_sync(functools.partial(inference_handler, deserialized_body))
            accept = request.headers.get("accept", None)
            if accept is None or accept == "*/*":
                accept = "application/json"
            return Response(content_type(accept, "Accept").serialize(pred, accept), media_type=accept)
        except Exception as e:  # noqa: BLE001 - the toolkit's own catch-all
            return Response(Jsoner.serialize({"error": str(e)}), status_code=400, media_type="application/json")

    async def health(request):
        return PlainTextResponse("Ok")

    return Starlette(routes=[Route("/", health, methods=["GET"]), Route("/health", health, methods=["GET"]),
                             Route("/", predict, methods=["POST"]), Route("/predict", predict, methods=["POST"])])
