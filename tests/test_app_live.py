"""The web UI's Live tab: its callbacks on real speech (no browser), then the whole tab in Debian's
chromium with a fake microphone playing eval speech (Chromium's --use-file-for-fake-audio-capture)."""

from __future__ import annotations

import html
import re
import time

import gradio as gr
import numpy as np
import pytest
import soundfile as sf
import soxr

from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import english_set, wer
from specwhisper.pipeline.config import PipelineConfig
from specwhisper.serving.params import Choices
from specwhisper.serving.service import LiveLimits, ServiceSettings, PipelinePool
from specwhisper.serving.ui.live import LiveError, LiveHandlers, LiveSlot, LiveView, PieceResampler, encode_payload
from specwhisper.serving.worker import ModelWorker
from tests.browser import chromium, fake_microphone_flags, running_app, screenshot

MIC_RATE = 48000
CLIPS = ("coqui-tts-ljspeech/LJ001-0001.wav", "coqui-tts-ljspeech/LJ001-0002.wav")  # 9.7 s + 1.9 s of one voice


@pytest.fixture(scope="module")
def speech(eval_root):
    """Two eval clips with short pauses and 1.5 s of silence at the end (13.8 s), and their reference."""
    items = {i.file: i for i in english_set(eval_root)}
    silence = lambda s: np.zeros(int(s * 16000), np.float32)  # noqa: E731
    a, b = (load_audio(items[f].path) for f in CLIPS)
    audio = np.concatenate([silence(0.3), a, silence(0.4), b, silence(1.5)])
    return audio, " ".join(items[f].reference for f in CLIPS)


def mic_pieces(audio: np.ndarray, piece_s: float = 0.5) -> list[np.ndarray]:
    """The audio as a browser sends it: 48 kHz int16, in ``piece_s`` pieces."""
    at_48k = np.clip(soxr.resample(audio, 16000, MIC_RATE), -1, 1)
    samples = (at_48k * 32767).astype(np.int16)
    step = int(piece_s * MIC_RATE)
    return [samples[i : i + step] for i in range(0, len(samples), step)]


@pytest.fixture(scope="module")
def handlers(tmp_path_factory):
    out = tmp_path_factory.mktemp("live-out")
    service = PipelinePool(ServiceSettings(base=PipelineConfig(), choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=60))
    folders = iter(range(1000))
    return LiveHandlers(service, lambda: out / str(next(folders)), ModelWorker(max_waiting=4, overtake_s=60.0))


def test_callbacks_confirm_text_as_pieces_arrive(handlers, speech):
    """Ticks hand over 48 kHz int16 audio as the page does (here 2 s each: the page gives a tick
    all it recorded since the last one); each runs an update; the stop gives the final text and files."""
    audio, reference = speech
    slot = LiveSlot()
    page, timer, files, record = handlers.start(slot, "tiny.en", "en", "transcribe")
    assert timer.active and files is None and "Waiting for audio" in page and not record.interactive
    pieces = mic_pieces(audio, piece_s=2.0)
    confirmed = []
    for piece in pieces[:-1]:
        page = handlers.tick(encode_payload(MIC_RATE, piece), slot)
        confirmed.append(slot.session.view.confirmed)
        assert html.escape(confirmed[-1]) in page and html.escape(slot.session.view.partial) in page
    assert confirmed[-1], "nothing was confirmed before the stop"
    assert all(b.startswith(a) for a, b in zip(confirmed, confirmed[1:])), confirmed  # confirmed text only grows
    assert len(set(confirmed)) >= 3, confirmed  # and grows update by update
    assert slot.session.updates == len(pieces) - 1

    page, timer, files, record = handlers.stop(encode_payload(MIC_RATE, pieces[-1]), slot)
    text = slot.session.view.confirmed
    assert record.interactive and not timer.active and text.startswith(confirmed[-1]) and html.escape(text) in page and slot.session.view.partial == ""
    assert slot.session.received_s == pytest.approx(len(audio) / 16000, abs=0.01)  # every sample arrived
    assert wer([reference], [text]) < 0.2, text
    assert sorted(p.rsplit(".", 1)[1] for p in files) == ["json", "srt", "tsv", "txt", "vtt"]
    assert open(next(p for p in files if p.endswith(".txt"))).read().split() == text.split()

    assert handlers.tick(encode_payload(MIC_RATE, pieces[0]), slot) is not None  # a tick after the stop changes nothing
    assert slot.session.view.confirmed == text
    handlers.start(slot, "tiny.en", "en", "transcribe")  # a new recording: a new stream
    assert slot.session.view.confirmed == "" and slot.session.updates == 0
    handlers.stop("", slot)


def test_bad_pieces(handlers):
    slot = LiveSlot()
    handlers.start(slot, "tiny.en", "auto", "transcribe")
    handlers.tick("", slot)  # nothing recorded yet
    handlers.tick(encode_payload(MIC_RATE, np.zeros(4800, np.int16)), slot)  # 0.1 s: too little to detect the language
    assert slot.session.updates == 0 and slot.session.received_s == pytest.approx(0.1, abs=0.02)  # less the filter delay
    handlers.stop("", slot)
    for payload, message in [(encode_payload(44100, np.zeros(4410, np.int16)), "changed its sample rate from 48000 to 44100 Hz"),
                             ("48000:@@not base64@@", "the page sent audio the server cannot read"),
                             ("48000:AA==", "an odd count"),
                             ("error:the microphone could not be opened (NotAllowedError)", "could not be opened (NotAllowedError)")]:
        slot = fresh(handlers)
        handlers.tick(encode_payload(MIC_RATE, np.zeros(4800, np.int16)), slot)
        with pytest.raises(gr.Error) as err:
            handlers.tick(payload, slot)
        assert message in str(err.value.message) and "\n" not in str(err.value.message)
        assert handlers.tick(payload, slot) is not None  # the ticks still queued end quietly
        page, timer, files, _ = handlers.stop("", slot)
        assert message in page and not timer.active and files is None
    with pytest.raises(gr.Error, match="passed the limit of 60 s"):
        handlers.tick(encode_payload(16000, np.zeros(61 * 16000, np.int16)), fresh(handlers))
    with pytest.raises(LiveError, match="too low to hold speech"):
        PieceResampler()(500, np.zeros(10, np.int16))
    with pytest.raises(LiveError, match="must be mono"):
        PieceResampler()(MIC_RATE, np.zeros((10, 2), np.int16))
    with pytest.raises(gr.Error, match="'large' is not offered here"):
        handlers.start(LiveSlot(), "large", "en", "transcribe")
    assert "Nothing is recording" in handlers.stop("", LiveSlot())[0]


def test_live_recordings_are_capped(tmp_path):
    """At most ``live.max_streams`` recordings at once (the WebSocket's limit); a stopped one frees its
    place, and so does one whose page stopped handing audio over (a closed tab) after the idle timeout."""
    limits = LiveLimits(max_streams=2, idle_timeout_s=2.0)  # room for a loaded machine between the starts
    service = PipelinePool(ServiceSettings(base=PipelineConfig(), choices=Choices(models=("tiny.en",), drafters=("none",)),
                                          max_audio_s=60, live=limits))
    capped = LiveHandlers(service, lambda: tmp_path, ModelWorker(max_waiting=4))
    first, second = fresh(capped), fresh(capped)
    with pytest.raises(gr.Error, match=r"2 live recordings are running, the most this server takes \(2\)"):
        fresh(capped)
    capped.stop("", first)
    third = fresh(capped)
    capped.start(third, "tiny.en", "en", "transcribe")  # a new recording on the same page replaces its last
    time.sleep(2.1)  # ``second``'s tab closed: no tick for longer than the idle timeout
    fourth = fresh(capped)
    capped.tick(encode_payload(MIC_RATE, np.zeros(4800, np.int16)), fourth)
    with pytest.raises(gr.Error, match="no audio arrived for 2 s"):
        capped.tick(encode_payload(MIC_RATE, np.zeros(4800, np.int16)), second)
    assert capped.tick("", second) is not None and "Stopped" in second.session.view.status


def fresh(handlers: LiveHandlers) -> LiveSlot:
    slot = LiveSlot()
    handlers.start(slot, "tiny.en", "en", "transcribe")
    return slot


def test_view_escapes_and_greys_the_partial_text():
    page = LiveView(confirmed="<b>said</b>", partial=" & then", status="ok").html()
    assert "&lt;b&gt;said&lt;/b&gt;" in page and "&amp; then" in page and "<b>" not in page
    assert 'class="live-partial" style="color:' in page


LIVE_TIMEOUT_MS = 90_000  # an update takes 1-2 s with base on this CPU, 5 s when other jobs share it
WATCH_PARTIAL_JS = """() => { window.sawPartial = false; new MutationObserver(() => {
  if (document.querySelector('#live-text .live-partial')?.innerText.trim()) window.sawPartial = true; })
  .observe(document.querySelector('#live-text'), {subtree: true, childList: true, characterData: true}); }"""


def _refused_record_closes_the_microphone(browser, url: str) -> None:
    """A second page's Record while the server's one live place is taken: the page says why, and the
    microphone it opened on the click is closed again."""
    other = browser.new_context(permissions=["microphone"]).new_page()
    other.goto(url)
    other.get_by_role("tab", name="Live").click()
    other.wait_for_selector("#live-text .live-status")
    other.click("#live-record")
    other.get_by_text("1 live recordings are running").first.wait_for(timeout=30_000)
    other.wait_for_function("() => window.specwhisperLive && window.specwhisperLive.parts === null", timeout=10_000)
    assert other.locator("#live-record").is_enabled()
    other.context.close()


@pytest.mark.integration
def test_live_tab_with_a_fake_microphone(speech, tmp_path_factory):
    """Chromium's fake microphone plays the eval speech once; confirmed text appears while it plays,
    the partial text is grey, every sample reaches the server, and the final text matches the reference.
    A second page is refused while it records (``--live-streams 1``) and closes its microphone."""
    audio, reference = speech
    wav = tmp_path_factory.mktemp("mic") / "speech.wav"
    sf.write(wav, audio, 16000, subtype="PCM_16")  # Chromium's fake capture reads 16-bit WAV
    duration = len(audio) / 16000
    with running_app(tmp_path_factory.mktemp("app"), "--models", "base", "--drafters", "none", "--max-duration", "120",
                     "--live-streams", "1", "--output-dir", str(tmp_path_factory.mktemp("downloads"))) as url, chromium() as launch:
        b = launch(*fake_microphone_flags(wav, loop=False))
        try:
            pg = b.new_context(viewport={"width": 1400, "height": 1000}, permissions=["microphone"]).new_page()
            pg.goto(url)
            pg.get_by_role("tab", name="Live").click()
            pg.wait_for_selector("#live-text .live-status")
            pg.evaluate(WATCH_PARTIAL_JS)
            pg.click("#live-record")
            started = time.monotonic()
            pg.wait_for_function("() => document.querySelector('#live-text .live-confirmed')?.innerText.trim()",
                                 timeout=LIVE_TIMEOUT_MS)
            confirmed_after = time.monotonic() - started
            assert pg.locator("#live-record").is_disabled() and "Recording" in pg.inner_text("#live-record")
            screenshot(pg, "app-live")
            colours = pg.evaluate("() => ['confirmed', 'partial'].map(c => getComputedStyle(document.querySelector(`#live-text .live-${c}`)).color)")
            assert colours[0] != colours[1], colours
            _refused_record_closes_the_microphone(b, url)
            pg.wait_for_timeout(max(0.0, duration + 1.0 - (time.monotonic() - started)) * 1000)  # the file has played
            recorded = time.monotonic() - started
            pg.click("#live-stop")
            pg.wait_for_selector("#live-downloads a[download]", timeout=LIVE_TIMEOUT_MS)
            screenshot(pg, "app-live-done")
            text = pg.inner_text("#live-text .live-confirmed")
            status = pg.inner_text("#live-text .live-status")
            assert pg.evaluate("() => window.sawPartial"), "no partial text was shown"
            assert pg.inner_text("#live-text .live-partial").strip() == ""
            assert pg.locator("#live-downloads a[download]").count() == 5
            assert pg.locator("#live-record").is_enabled() and pg.inner_text("#live-record").strip() == "Record"
        finally:
            b.close()
    heard = float(re.search(r"([\d.]+) s heard", status).group(1))
    # every sample recorded reached the server (the page keeps them until a tick takes them); the
    # microphone opens a moment after the click
    assert recorded - 2.5 <= heard <= recorded + 0.5, (heard, recorded)
    assert wer([reference], [text]) < 0.4, text
    print(f"confirmed text after {confirmed_after:.1f} s; {status}")
