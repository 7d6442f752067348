"""End to end: `python app.py` on localhost, driven by Debian's chromium through Playwright.

Screenshots are kept as test artifacts in $SPECWHISPER_ARTIFACTS (default: tests/artifacts/).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import soundfile as sf

from specwhisper.audio.loading import load_audio
from tests.browser import ROOT, chromium, fake_microphone_flags, running_app, screenshot, wait_for_text

JFK = ROOT / "samples" / "jfk.wav"
MEETING = ROOT / "samples" / "meeting-dev00.wav"  # 30 s, two speakers
RUN_TIMEOUT_MS = 180_000
SRT_CUE = re.compile(r"(\d+)\n(\d\d):(\d\d):(\d\d),(\d{3}) --> (\d\d):(\d\d):(\d\d),(\d{3})\n(.+)")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """The app on tiny.en: what the page does does not depend on the model, and the file's tests take
    0.7 of their time on base with it; test_app_live runs the app on base."""
    with running_app(tmp_path_factory.mktemp("app"), "--models", "tiny.en", "--drafters", "auto,none,ngram",
                     "--max-duration", "120", "--output-dir", str(tmp_path_factory.mktemp("downloads"))) as url:
        yield url


@pytest.fixture(scope="module")
def launch():
    with chromium() as launch:
        yield launch


@pytest.fixture(scope="module")
def browser(launch):
    b = launch()
    yield b
    b.close()


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.goto(app_url)
    pg.wait_for_selector("#audio-input input[type=file]", state="attached")
    yield pg
    context.close()


def _transcribe(pg, audio: Path) -> None:
    pg.locator("#audio-input input[type=file]").set_input_files(str(audio))
    pg.wait_for_selector("#audio-input button[aria-label='Clear']")  # the upload is in
    pg.click("#run")


def _wait_for_text(pg, selector: str, text: str, log=None) -> None:
    wait_for_text(pg, selector, text, RUN_TIMEOUT_MS, log)


def _table(pg) -> list[list[str]]:
    """The transcript table's body cells, row by row (gradio renders rows as role=row/gridcell divs)."""
    return pg.locator("#transcript div[role=row]").evaluate_all(
        "rows => rows.map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()))")


def _parse_srt(text: str) -> list[tuple[int, float, float, str]]:
    cues = []
    for block in text.strip().split("\n\n"):
        m = SRT_CUE.fullmatch(block.strip())
        assert m, f"not an SRT cue: {block!r}"
        g = [int(x) for x in m.groups()[:9]]
        start = g[1] * 3600 + g[2] * 60 + g[3] + g[4] / 1000
        end = g[5] * 3600 + g[6] * 60 + g[7] + g[8] / 1000
        cues.append((g[0], start, end, m.group(10)))
    return cues


@pytest.mark.integration
def test_transcribe_upload(page):
    _transcribe(page, JFK)
    _wait_for_text(page, "#player", "Transcribing")  # the stage progress bar, fed by the pipeline (the table fills above it)
    screenshot(page, "app-progress")
    _wait_for_text(page, "#transcript", "ask not what your country")
    _wait_for_text(page, "#facts", "RTF")
    screenshot(page, "app-transcript")

    cells = _table(page)
    assert cells and all(re.fullmatch(r"\d+:\d\d\.\d", c[0]) and re.fullmatch(r"\d+:\d\d\.\d", c[1]) for c in cells), cells
    assert all(len(c) == 4 for c in cells) and all(c[2] == "" for c in cells)  # no speakers without diarization
    assert "ask not what your country can do for you" in " ".join(c[3] for c in cells).lower()

    facts = page.inner_text("#facts")
    for fact in ("RTF", "Speculative acceptance", "Tokens per target pass", "language en"):
        assert fact in facts

    assert page.locator("#player audio").count() >= 1  # the player holds the audio (subtitles from the vtt)

    names = sorted(page.locator("#downloads a[download]").evaluate_all("els => els.map(e => e.getAttribute('download'))"))
    assert names == sorted(f"jfk.{f}" for f in ("txt", "srt", "vtt", "json", "tsv"))
    with page.expect_download() as info:
        page.click('#downloads a[download="jfk.srt"]')
    srt = Path(info.value.path()).read_text(encoding="utf-8")
    cues = _parse_srt(srt)
    assert [c[0] for c in cues] == list(range(1, len(cues) + 1))
    assert all(0 <= s < e <= 11.0 for _, s, e, _ in cues) and [c[1] for c in cues] == sorted(c[1] for c in cues)
    assert "ask not what your country" in " ".join(c[3] for c in cues).lower()


def _clock(text: str) -> float:
    m, s = text.split(":")[-2:]
    return int(m) * 60 + float(s) + (3600 * int(text.split(":")[0]) if text.count(":") == 2 else 0)


def test_speaker_timeline_and_row_click_plays_from_there(page, tmp_path, eval_root):
    """A diarized file: a lane per speaker above the transcript, with the turns in it, each speaker named
    after the known speakers' clips uploaded (cut from the meeting's other excerpt, dev01); a click on a
    transcript row moves the player to that row's start."""
    page.locator("#audio-input input[type=file]").set_input_files(str(MEETING))
    page.wait_for_selector("#audio-input button[aria-label='Clear']")
    page.locator("#opt-diarize input[type=checkbox]").check()
    dev01 = load_audio(eval_root / "pyannote-audio/tests_data/dev01.wav")
    for name, (a, b) in {"MEE009": (7.05, 11.75), "MEE012": (4.3, 6.75)}.items():
        sf.write(tmp_path / f"{name}.wav", dev01[int(a * 16000):int(b * 16000)], 16000)
    page.click("#more-options")
    page.locator("#opt-known-speakers input[type=file]").set_input_files([str(tmp_path / "MEE009.wav"),
                                                                         str(tmp_path / "MEE012.wav")])
    page.wait_for_selector("#opt-known-speakers :text('MEE012')")  # the upload is in
    page.click("#run")
    _wait_for_text(page, "#facts", "RTF")
    screenshot(page, "app-timeline")

    lanes = page.locator("#timeline g.lane").evaluate_all("gs => gs.map(g => g.dataset.speaker)")
    cells = _table(page)
    said = {c[2].removesuffix(" (overlap)") for c in cells if c[2]}
    assert sorted(lanes) == ["MEE009", "MEE012"] and said and said <= set(lanes), (lanes, said)
    turns = page.locator("#timeline rect.turn").evaluate_all(
        "rs => rs.map(r => [r.closest('g.lane').dataset.speaker, +r.dataset.start, +r.dataset.end])")
    assert {spk for spk, _, _ in turns} == set(lanes) and all(0 <= a < b <= 30.1 for _, a, b in turns), turns
    overlapping = any(s1 != s2 and a1 < b2 and a2 < b1 for s1, a1, b1 in turns for s2, a2, b2 in turns)
    assert (page.locator("#timeline rect.overlap").count() > 0) == overlapping  # overlap shown where turns overlap

    row = max(range(len(cells)), key=lambda k: _clock(cells[k][0]))  # the last row: far from 0
    start = _clock(cells[row][0])
    assert start > 1.0
    page.locator("#transcript div[role=row]").nth(row).locator("[role=gridcell]").last.click()
    page.wait_for_function(
        """(t) => { const find = (root) => { const a = root.querySelector('audio'); if (a) return a;
                      for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
                      return null; };
                    const a = find(document.getElementById('player')); return a && Math.abs(a.currentTime - t) < 1.0; }""",
        arg=start, timeout=30_000)


def test_a_script_pasted_under_more_options_is_the_transcript(page):
    """The text under "More options" is aligned: a row per line of it, word for word, timed in the clip."""
    script = ["And so, my fellow Americans:", "ask not what your country can do for you;",
              "ask what you can do for your country."]
    page.click("#more-options button, #more-options .label-wrap")
    page.locator("#opt-align-text textarea").fill("\n".join(script))
    _transcribe(page, JFK)
    _wait_for_text(page, "#facts", "Text aligned")
    rows = _table(page)
    assert [r[3] for r in rows] == script
    times = [_clock(t) for r in rows for t in r[:2]]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= 11.0 and times[1] > times[0]
    assert "22 words, 22 of them heard the same" in page.inner_text("#facts")


@pytest.mark.integration
def test_a_short_file_is_transcribed_inside_a_long_one(browser, app_url, tmp_path):
    """Two users: one transcribes a 93 s file a window per batch ("More options" open, the options left
    empty there at their defaults), its rows appearing while the run goes on; the other's jfk.wav, sent once the
    long run's first rows are in, gets its transcript while the long run goes on (no speed facts yet: it ran
    between two of the long run's batches), and the long one finishes whole, the first rows as they came."""
    from specwhisper.evaluation.transcripts import build_long_file, wer

    long = build_long_file("dense", tmp_path, 85, seed=0)
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(2)]
    try:
        slow, quick = (c.new_page() for c in contexts)
        for pg in (slow, quick):
            pg.goto(app_url)
            pg.wait_for_selector("#audio-input input[type=file]", state="attached")
        slow.click("#more-options button, #more-options .label-wrap")
        slow.locator("#opt-batch-size textarea, #opt-batch-size input").first.fill("1")
        _transcribe(slow, long.path)
        slow.wait_for_function("() => document.querySelectorAll('#transcript div[role=row] [role=gridcell]').length > 0",
                               timeout=RUN_TIMEOUT_MS, polling=50)  # its first window is done: the rest to go
        early = _table(slow)
        assert "RTF" not in slow.inner_text("#facts"), "the rows came with the finished run"
        _transcribe(quick, JFK)
        _wait_for_text(quick, "#transcript", "ask not what your country")
        assert "RTF" not in slow.inner_text("#facts"), "the short file waited for the long one"
        _wait_for_text(slow, "#facts", "RTF")
        final = _table(slow)
        assert early and len(final) > len(early) and final[: len(early)] == early, (early, final)
        assert wer([long.reference], [" ".join(row[-1] for row in final)]) <= 0.15
    finally:
        for c in contexts:
            c.close()


def test_bad_upload_shows_message(page, tmp_path):
    fake = tmp_path / "notes.wav"
    fake.write_text("this is a text file with a .wav name, not audio\n")
    _transcribe(page, fake)
    _wait_for_text(page, ".toast-body", "not a readable audio file")
    screenshot(page, "app-bad-upload")
    toast = page.locator(".toast-body").first.inner_text()
    assert "notes.wav: not a readable audio file" in toast
    assert "Traceback" not in toast and "/tmp/" not in toast
    assert _table(page) == []


@pytest.mark.integration
@pytest.mark.slow  # test_a_short_file_is_transcribed_inside_a_long_one: two sessions share the one model, both get theirs
def test_two_users_queue(browser, app_url):
    """Two sessions press Transcribe together: they queue for the one model and both get their transcript."""
    contexts = [browser.new_context() for _ in range(2)]
    try:
        pages = [c.new_page() for c in contexts]
        for pg in pages:
            pg.goto(app_url)
            pg.wait_for_selector("#audio-input input[type=file]", state="attached")
        for pg in pages:
            _transcribe(pg, JFK)
        for pg in pages:
            _wait_for_text(pg, "#transcript", "ask not what your country")
    finally:
        for c in contexts:
            c.close()


@pytest.mark.integration
def test_record_from_microphone(launch, app_url):
    """Chromium's fake capture device plays jfk.wav into the microphone; the recording is transcribed."""
    b = launch(*fake_microphone_flags(JFK))
    try:
        pg = b.new_context(viewport={"width": 1400, "height": 1000}, permissions=["microphone"]).new_page()
        pg.goto(app_url)
        pg.click("#audio-input button[aria-label='Record audio']")
        pg.get_by_role("button", name="Record", exact=True).click()
        pg.wait_for_timeout(6000)
        # The recording is uploaded when it stops, then the component loads it back from the server:
        # a click on Transcribe before that (Playwright clicks within milliseconds, a person does not)
        # sends gradio's queue a value still in flight, and the run ends in a bare "Error" (4 of 9 runs).
        with pg.expect_response(lambda r: "/gradio_api/file=" in r.url and r.url.endswith(".wav")):
            pg.locator("#audio-input button:visible", has_text="Stop").first.click()
        pg.wait_for_selector("#audio-input button[aria-label='Clear']")
        pg.click("#run")
        _wait_for_text(pg, "#facts", "RTF", app_url.log)
        screenshot(pg, "app-microphone")
        assert _table(pg)
        text = pg.inner_text("#transcript").lower()
        assert any(w in text for w in ("fellow", "americ", "country", "ask")), text
        assert pg.locator("#downloads a[download]").count() == 5
    finally:
        b.close()


def test_table_colours_rows_by_speaker():
    from specwhisper.results.transcript import Segment, Transcript
    from specwhisper.serving.ui.app import SPEAKER_COLOURS, clock, transcript_table

    segs = [Segment(0.0, 1.5, " hi", speaker="SPEAKER_00"), Segment(1.5, 3.0, " hello", speaker="SPEAKER_01", overlap=True),
            Segment(3.0, 3661.25, " bye", speaker="SPEAKER_00")]
    styler = transcript_table(Transcript(segments=segs, language="en", duration=3661.25))
    html = styler.to_html()
    frame = styler.data
    assert list(frame["Start"]) == ["0:00.0", "0:01.5", "0:03.0"] and clock(3661.25) == "1:01:01.2"
    assert list(frame["Speaker"]) == ["SPEAKER_00", "SPEAKER_01 (overlap)", "SPEAKER_00"]
    assert SPEAKER_COLOURS[0] in html and SPEAKER_COLOURS[1] in html


def test_speed_facts_say_no_drafter_when_none_ran():
    from specwhisper.results.stats import DecodeStats
    from specwhisper.results.transcript import Transcript
    from specwhisper.serving.ui.app import speed_facts

    plain = Transcript([], "en", 11.0, stats=DecodeStats(generated_tokens=29, target_passes=30))
    facts = speed_facts(plain)
    assert "| Speculative acceptance | no drafter |" in facts
    assert "| Tokens per target pass | no drafter" in facts and "0.97" not in facts
    drafted = Transcript([], "en", 11.0, stats=DecodeStats(generated_tokens=30, target_passes=12, drafted_tokens=40,
                                                           accepted_tokens=24))
    assert "| Speculative acceptance | 60% (24/40 drafted tokens) |" in speed_facts(drafted)
    assert "| Tokens per target pass | 2.50 |" in speed_facts(drafted)


def test_timeline_draws_a_lane_per_speaker_and_marks_overlap():
    import xml.etree.ElementTree as ET

    from specwhisper.results.transcript import SpeakerTurn, Transcript
    from specwhisper.serving.ui.app import speaker_timeline

    turns = [SpeakerTurn(0.0, 5.0, "A"), SpeakerTurn(4.0, 9.0, "B"), SpeakerTurn(10.0, 20.0, "A"), SpeakerTurn(20.0, 25.0, "B")]
    svg = ET.fromstring(speaker_timeline(Transcript([], "en", 30.0, turns=turns)))
    ns = {"s": "http://www.w3.org/2000/svg"}
    lanes = svg.findall(".//s:g[@class='lane']", ns)
    assert [g.get("data-speaker") for g in lanes] == ["A", "B"]
    assert [[(float(r.get("data-start")), float(r.get("data-end"))) for r in g.findall("s:rect[@class='turn']", ns)]
            for g in lanes] == [[(0.0, 5.0), (10.0, 20.0)], [(4.0, 9.0), (20.0, 25.0)]]
    overlaps = [r.find("s:title", ns).text for r in svg.findall(".//s:rect[@class='overlap']", ns)]
    assert overlaps == ["overlap 0:04.0–0:05.0"]  # turns that only touch (20.0) do not overlap
    assert speaker_timeline(Transcript([], "en", 30.0)) == ""  # no diarization: no timeline


def test_overtake_audio_flag(capsys):
    """--overtake-audio: 0 turns overtaking off; a negative or NaN value is one line, exit 2."""
    import app

    parser = app.build_parser()
    assert parser.parse_args([]).overtake_audio == 60 and parser.parse_args(["--overtake-audio", "0"]).overtake_audio == 0
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--overtake-audio", bad])
        assert exc.value.code == 2 and f"expected a non-negative float, got '{bad}'" in capsys.readouterr().err
