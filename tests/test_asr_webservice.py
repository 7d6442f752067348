"""whisper-asr-webservice's routes on our server (POST /asr, POST /detect-language), called as Bazarr's
Whisper provider calls them: the audio decoded by ffmpeg to raw 16 kHz mono 16-bit PCM, sent as the form's
``audio_file`` with ``encode=false``. Real models (the embedded Whisper base), real audio from the
evaluation set (JFK in English, FLEURS clips in four other languages); transcripts are checked against
their references (WER), every failure against our one-line error body, and no upload may stay in the spool."""

from __future__ import annotations

import json
import re
import subprocess
import time

import httpx
import pytest

from specwhisper.evaluation.transcripts import load_manifest, normalize, wer
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.config import RequestLimits, ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.params import Choices
from specwhisper.serving.service import ServiceSettings
from tests.test_abuse import server_log  # noqa: F401 - a fixture: no traceback in the server's log

MAX_UPLOAD = 2 * 2**20
MAX_WER = 0.05  # Whisper base on JFK: 0 after normalisation


def pcm(path) -> bytes:
    """What Bazarr sends: ``ffmpeg -i FILE -f s16le -acodec pcm_s16le -ac 1 -ar 16000 -``."""
    return subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-f", "s16le", "-acodec", "pcm_s16le",
                           "-ac", "1", "-ar", "16000", "-"], capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
def clips(eval_root):
    items = {i.file: i for i in load_manifest(eval_root)}
    return {"en": items["openai-whisper/jfk.flac"], **{lang: items[f"cuttledoc-fleurs/fleurs-{lang}-000.ogg"]
                                                       for lang in ("de", "es", "fr", "pt")}}


@pytest.fixture(scope="module")
def server(server_log, tmp_path_factory):  # noqa: F811
    settings = ServiceSettings(choices=Choices(models=("base",), drafters=("auto",)), max_audio_s=60,
                               max_upload_bytes=MAX_UPLOAD)
    config = ServerConfig(port=0, requests=RequestLimits(max_upload_bytes=MAX_UPLOAD), access_log=False,
                          spool_dir=tmp_path_factory.mktemp("spool"))
    with serving(Endpoint(settings), config) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=300) as client:
        yield client


@pytest.fixture(autouse=True)
def nothing_left(server):
    """After each case: no upload left in the spool."""
    yield
    for _ in range(50):
        if not server.spool.files():
            break
        time.sleep(0.1)
    assert server.spool.files() == []


def _error(answer: httpx.Response, status: int, fragment: str) -> None:
    body = answer.json()
    assert answer.status_code == status and body == {"error": body["error"], "status": status}, body
    assert fragment in body["error"] and "\n" not in body["error"], body


def _cue_text(subtitles: str) -> str:
    return " ".join(line for line in subtitles.splitlines() if line and "-->" not in line and not line.isdigit())


def test_bazarr_detects_the_language_from_raw_pcm(http, clips):
    for language in ("de", "pt"):  # every FLEURS language: tests/test_api.py
        item = clips[language]
        answer = http.post("/detect-language", params={"encode": "false"}, files={"audio_file": ("audio", pcm(item.path))})
        body = answer.json()
        print(f"\n{item.file}: {body}")
        assert answer.status_code == 200 and set(body) == {"detected_language", "language_code", "confidence"}, body
        assert body["language_code"] == language and 0.5 <= body["confidence"] <= 1, body
    assert body["detected_language"] == "portuguese"


def test_bazarr_gets_srt_subtitles_from_raw_pcm(http, clips):
    jfk = clips["en"]
    answer = http.post("/asr", params={"task": "transcribe", "language": "en", "output": "srt", "encode": "false",
                                       "video_file": "/media/Kennedy (1961).mkv"},
                       files={"audio_file": ("Kennedy (1961).mkv", pcm(jfk.path))})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "text/plain; charset=utf-8" and answer.headers["asr-engine"] == "specwhisper"
    assert answer.headers["content-disposition"] == 'attachment; filename="Kennedy%20%281961%29.mkv.srt"'
    assert re.match(r"1\n00:00:00,[0-4]\d\d --> 00:00:\d\d,\d{3}\n\w", answer.text), answer.text  # from his first word
    assert wer([jfk.reference], [_cue_text(answer.text)]) <= MAX_WER


@pytest.mark.parametrize("output", ["json", "tsv"])  # srt: Bazarr's case above; txt: translate's below
def test_an_encoded_file_comes_back_in_each_output(http, clips, output):
    jfk = clips["en"]
    answer = http.post("/asr", params={"output": output, "word_timestamps": "true"},
                       files={"audio_file": ("jfk.flac", jfk.path.read_bytes())})
    assert answer.status_code == 200, answer.text
    if output == "json":  # openai-whisper's result: text, segments (with words), language
        result = json.loads(answer.text)
        assert answer.headers["content-type"] == "application/json" and result["language"] == "en"
        assert result["segments"][0]["words"] and wer([jfk.reference], [result["text"]]) <= MAX_WER
    else:  # openai-whisper's tsv: start, end (ms), text
        rows = [line.split("\t") for line in answer.text.splitlines()]
        assert rows[0] == ["start", "end", "text"] and all(int(a) < int(b) for a, b, _ in rows[1:])
        assert wer([jfk.reference], [" ".join(t for _, _, t in rows[1:])]) <= MAX_WER


def test_translate_to_english(http, clips):
    """The French clip (10 s: "l'accident a eu lieu en terrain montagneux...") in English, as txt, the default."""
    answer = http.post("/asr", params={"task": "translate"}, files={"audio_file": ("fr.ogg", clips["fr"].path.read_bytes())})
    words = set(normalize(answer.text).split())
    assert answer.status_code == 200 and {"the", "accident"} <= words, answer.text
    assert not words & {"le", "la", "montagneux", "incendie", "semblerait"}, answer.text


@pytest.mark.parametrize("route, params, files, status, fragment", [
    ("/asr", {"encode": "false"}, {"audio_file": ("a", b"\x00\x01\x02")}, 400, "odd number of bytes (3)"),
    ("/asr", {}, {"file": ("a.wav", b"RIFF")}, 400, "audio_file: missing"),
    ("/asr", {}, {"audio_file": ("a.wav", b"")}, 400, "audio_file: the upload is empty"),
    ("/asr", {}, {"audio_file": ("a.wav", b"not audio at all")}, 400, "audio_file"),
    ("/asr", {"output": "docx"}, {"audio_file": ("a", b"\x00\x00")}, 400, "output: expected one of txt, vtt, srt"),
    ("/asr", {"encode": "maybe"}, {"audio_file": ("a", b"\x00\x00")}, 400, "encode: expected true or false"),
    ("/asr", {"language": "klingon"}, {"audio_file": ("a", b"\x00\x00")}, 400, "klingon"),
    ("/asr", {"beam": "5"}, {"audio_file": ("a", b"\x00\x00")}, 400, "beam: not a parameter of POST /asr"),
    ("/detect-language", {"language": "en"}, {"audio_file": ("a", b"\x00\x00")}, 400, "language: not a parameter"),
    ("/detect-language", {"encode": "false"}, {"audio_file": ("a", b"\x00" * 16000 * 2 * 61)}, 400, "61 s of audio is over the limit of 60 s"),
])
def test_bad_requests_are_one_line(http, route, params, files, status, fragment):
    _error(http.post(route, params=params, files=files), status, fragment)


def test_a_body_that_is_no_form_is_refused(http):
    _error(http.post("/asr", content=b"\x00\x00", headers={"content-type": "audio/wav"}), 400, "multipart/form-data")
