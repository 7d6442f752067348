"""whisper-asr-webservice's routes on the server, so that the apps built for it (Bazarr's Whisper provider,
subgen's and the other clients of ``POST /asr``) use this server as they use it: point them at
``http://HOST:PORT``.

* ``POST /asr``: a ``multipart/form-data`` body with ``audio_file``; the query string: ``output`` (``txt``,
  the default, ``vtt``, ``srt``, ``tsv``, ``json``), ``task`` (``transcribe``, ``translate``), ``language``,
  ``initial_prompt``, ``vad_filter``, ``word_timestamps``, and WhisperX's ``diarize``, ``min_speakers``,
  ``max_speakers``; ``encode`` (default true: the file is any audio or video file ffmpeg reads; false: it is
  raw 16 kHz mono 16-bit PCM, which is what Bazarr sends). The answer is the format's text (``json``:
  openai-whisper's result, as the CLI writes it), with ``Asr-Engine: specwhisper`` and
  ``Content-Disposition: attachment; filename="<upload>.<output>"``, as whisper-asr-webservice sends it.
* ``POST /detect-language``: ``audio_file`` and ``encode``; the answer is ``{"detected_language": "english",
  "language_code": "en", "confidence": p}``: the language ``POST /asr`` would decode the file in without a
  ``language``, found on the same window (``PipelinePool.detect_language``).

``video_file`` (Bazarr's and subgen's name of the video the audio came from) is taken and not used; any
other parameter is refused, as a bad value is, with our error body ``{"error": "<one line>", "status": N}``.
The uploads go through the steps, limits, queue and deadline of every upload
(:mod:`specwhisper.serving.http.uploads`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, quote

import numpy as np
import soundfile as sf
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from specwhisper.asr.decoding.language import language_name
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.pipeline.writers import render
from specwhisper.serving.http.form_upload import receive_form
from specwhisper.serving.http.uploads import Refusal, Uploads
from specwhisper.messages import clip
from specwhisper.serving.params import RequestError, TranscribeParams

FILE_FIELD = "audio_file"
OUTPUTS = ("txt", "vtt", "srt", "tsv", "json")
# whisper-asr-webservice's parameters that are ours by the same name and meaning
SAME = ("task", "language", "initial_prompt", "vad_filter", "word_timestamps", "diarize", "min_speakers", "max_speakers")
TAKEN = {"/asr": {*SAME, "output", "encode", "video_file"}, "/detect-language": {"encode", "video_file"}}
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def route_query(path: str, query: str) -> dict[str, str]:
    """A route's query string as {name: value} (the last of a repeated one); a name the route does not
    take is refused."""
    values = {key: found[-1] for key, found in parse_qs(query, keep_blank_values=True).items()}
    taken = TAKEN[path]
    if other := sorted(set(values) - taken):
        raise Refusal(400, f"{clip(other[0], 60)}: not a parameter of POST {path} (it takes {', '.join(sorted(taken))})")
    return values


def our_parameters(values: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The output format a query asks for, and our parameters under their names (checked by the caller:
    ``Endpoint.parse``); ``encode`` must be true or false."""
    output = values.get("output") or "txt"
    if output not in OUTPUTS:
        raise Refusal(400, f"output: expected one of {', '.join(OUTPUTS)}, got '{clip(output, 40)}'")
    _flag(values, "encode", True)
    return output, {k: v for k, v in values.items() if k in SAME and v != ""}


def _flag(query: dict[str, str], name: str, default: bool) -> bool:
    value = query.get(name, "").strip().lower()
    if not value:
        return default
    if value not in TRUE + FALSE:
        raise Refusal(400, f"{name}: expected true or false, got '{clip(value, 40)}'")
    return value in TRUE


def pcm_to_wav(path: Path) -> None:
    """``encode=false``: the upload in ``path`` is raw 16 kHz mono little-endian 16-bit PCM (whisper-asr-webservice
    reads it so); it is rewritten as a WAV file of the same samples, which every later step reads."""
    size = path.stat().st_size
    if size % 2:
        raise RequestError(f"{FILE_FIELD}: with encode=false the upload is raw 16-bit PCM, but it has an odd "
                           f"number of bytes ({size})")
    samples = np.fromfile(path, dtype="<i2")
    sf.write(path, samples, SAMPLE_RATE, subtype="PCM_16", format="WAV")


def add_asr_webservice_routes(app: FastAPI, uploads: Uploads, refused: Callable[[Refusal], Response]) -> None:
    """The two routes; ``refused`` answers a failure (the server's error body)."""
    endpoint = uploads.endpoint

    async def receive(request: Request, path: Path, query: dict[str, str]) -> str:
        """The form's audio file into ``path`` (a WAV file with ``encode=false``); its name for the answer."""
        encode = _flag(query, "encode", True)
        form = await receive_form(uploads, request, path, FILE_FIELD)
        if not form.has_file:
            raise Refusal(400, f"{FILE_FIELD}: missing (send the audio as the form's '{FILE_FIELD}' part)")
        if form.file_size == 0:
            raise Refusal(400, f"{FILE_FIELD}: the upload is empty (0 bytes)")
        if not encode:
            await asyncio.to_thread(pcm_to_wav, path)
        return form.file_name or FILE_FIELD

    def parsed(request: Request, route: str) -> tuple[dict[str, str], TranscribeParams]:
        """The query string, the output it asks for and the parameters it gives; what is wrong with them is
        refused before the upload is read (the connection closes)."""
        try:
            query = route_query(route, request.url.query)
            output, ours = our_parameters(query)
            params = endpoint.parse({"parameters": ours})
        except (Refusal, RequestError) as exc:
            raise Refusal(exc.status, str(exc), close=True) from None
        return {**query, "output": output}, params

    async def asr(request: Request) -> Response:
        async def handle(path: Path) -> Response:
            query, params = parsed(request, "/asr")
            name = await receive(request, path, query)
            transcript = await uploads.transcribe(request, path, FILE_FIELD, params)
            output = query["output"]
            headers = {"Asr-Engine": "specwhisper",
                       "Content-Disposition": f"attachment; filename=\"{quote(name)}.{output}\""}
            kind = "application/json" if output == "json" else "text/plain; charset=utf-8"
            return Response(render(transcript, output, params.layout()), media_type=kind, headers=headers)

        return await uploads.answer(handle, refused)

    async def detect_language(request: Request) -> Response:
        async def handle(path: Path) -> Response:
            query, params = parsed(request, "/detect-language")
            await receive(request, path, query)
            await uploads.length(path, FILE_FIELD)  # too long: refused before it is decoded
            found = await uploads.on_worker(request, lambda: endpoint.detect_language(path, params, FILE_FIELD))
            return JSONResponse({"detected_language": found.language and language_name(found.language),
                                 "language_code": found.language, "confidence": found.probability})

        return await uploads.answer(handle, refused)

    app.add_api_route("/asr", asr, methods=["POST"])
    app.add_api_route("/detect-language", detect_language, methods=["POST"])

