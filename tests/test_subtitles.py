"""Subtitle layout (specwhisper.pipeline.subtitles): openai-whisper's own srt and vtt writers
(``whisper.utils`` of the openai-whisper package), given our json and the same options, write our
files byte for byte. Real transcripts with word timings: the committed ones of tests/data/subtitles
(real eval speech, see make_transcripts.py there) and jfk.flac decoded here."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
import whisper.utils as openai_utils

from specwhisper.results.transcript import Segment, SpeakerTurn, Transcript, Word
from specwhisper.pipeline.config import RunOptions
from specwhisper.pipeline.subtitles import SubtitleOptions
from specwhisper.pipeline.writers import render, write_outputs

DATA = Path(__file__).parent / "data" / "subtitles"
FIELDS = ("max_line_width", "max_line_count", "max_words_per_line", "highlight_words")
# every combination of these that SubtitleOptions accepts (42: the broadcast width; 1: a word a line)
GRID = [SubtitleOptions(*values) for values in itertools.product((None, 1, 16, 42), (None, 1, 2), (None, 1, 4), (False, True))]


def _valid(opts: SubtitleOptions) -> bool:
    try:
        opts.validate()
    except ValueError:
        return False
    return True


LAYOUTS = [o for o in GRID if _valid(o) and o.active]


def _transcript(result: dict) -> Transcript:
    """Our json read back (the fields the writers use)."""
    segments = [Segment(s["start"], s["end"], s["text"], speaker=s.get("speaker"),
                        words=[Word(w["start"], w["end"], w["word"], w["probability"], w.get("speaker"))
                               for w in s.get("words", [])])
                for s in result["segments"]]
    turns = [SpeakerTurn(**t) for t in result["speaker_turns"]] if result.get("speaker_turns") is not None else None
    return Transcript(segments, result["language"], result["duration"], source=result["source"], turns=turns)


def _openai(fmt: str, result: dict, opts: SubtitleOptions) -> str:
    buf = io.StringIO()
    openai_utils.get_writer(fmt, ".").write_result(result, file=buf, options={f: getattr(opts, f) for f in FIELDS})
    return buf.getvalue()


@pytest.fixture(scope="module", params=["english", "french"])
def fixture_result(request) -> dict:
    return json.loads((DATA / f"{request.param}.json").read_text(encoding="utf-8"))


def test_grid_covers_the_options():
    assert len(LAYOUTS) == 35  # 4 x 3 x 3 x 2, less the ones refused and the unset one
    for field in FIELDS:
        assert len({getattr(o, field) for o in LAYOUTS}) > 1, field


def test_openai_whispers_writer_on_our_json_gives_our_subtitles(fixture_result):
    """Every layout of the grid, srt and vtt: byte for byte, and each layout changes the cues."""
    t = _transcript(fixture_result)
    ours = json.loads(render(t, "json"))
    plain = render(t, "srt")
    for opts in LAYOUTS:
        for fmt in ("srt", "vtt"):
            assert render(t, fmt, opts) == _openai(fmt, ours, opts), (opts, fmt)
        assert render(t, "srt", opts) != plain, opts
    for fmt in ("txt", "tsv", "json"):  # the layout is for subtitles only, as in openai-whisper
        assert render(t, fmt, LAYOUTS[-1]) == render(t, fmt)


def test_lines_fit_the_width_and_cues_the_line_count():
    """What the options promise, read off our srt: no line over 42 characters unless one word is,
    at most 2 lines a cue, the words in order and none lost."""
    t = _transcript(json.loads((DATA / "english.json").read_text(encoding="utf-8")))
    srt = render(t, "srt", SubtitleOptions(max_line_width=42, max_line_count=2))
    cues = [block.split("\n")[2:] for block in srt.strip().split("\n\n")]
    assert sum(len(lines) == 2 for lines in cues) > len(cues) / 2
    assert all(len(lines) <= 2 for lines in cues)
    assert all(len(line) <= 42 or " " not in line for lines in cues for line in lines)
    assert " ".join(line for lines in cues for line in lines).split() == t.text.split()
    one_word = render(t, "vtt", SubtitleOptions(max_words_per_line=1))
    assert one_word.count(" --> ") == sum(len(s.words) for s in t.segments)


def test_layout_from_the_pipeline_turns_word_timings_on(base_pipeline, eval_root):
    """A layout in RunOptions gives the words it needs (word timestamps were not asked for), and the
    subtitles of that live transcript (times not rounded yet) are openai-whisper's."""
    opts = RunOptions(subtitles=SubtitleOptions(max_line_width=20, max_line_count=2))
    assert not opts.decode.word_timestamps
    t = base_pipeline.run_file(eval_root / "openai-whisper/jfk.flac", opts)
    assert sum(len(s.words) for s in t.segments) == 22
    result = json.loads(render(t, "json"))
    for layout in (opts.subtitles, SubtitleOptions(max_words_per_line=4, highlight_words=True)):
        for fmt in ("srt", "vtt"):
            assert render(t, fmt, layout) == _openai(fmt, result, layout), (layout, fmt)


def test_batch_folder_writes_laid_out_subtitles(base_pipeline, eval_root, tmp_path, monkeypatch):
    """The batch runner (specwhisper.batch.runner) lays out the subtitles it writes by RunOptions.subtitles."""
    import shutil

    import specwhisper.pipeline.core
    from specwhisper.batch.runner import BatchConfig, run_batch

    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: base_pipeline)
    (tmp_path / "in").mkdir()
    shutil.copy(eval_root / "cuttledoc-fleurs/fleurs-en-004.ogg", tmp_path / "in/clip.ogg")
    layout = SubtitleOptions(max_line_width=16, max_line_count=1)
    report = run_batch(BatchConfig(tmp_path / "in", tmp_path / "out", ["json", "srt", "vtt"]),
                       base_pipeline.config, RunOptions(subtitles=layout))
    assert report.done_now == 1
    result = json.loads((tmp_path / "out/clip.json").read_text(encoding="utf-8"))
    for fmt in ("srt", "vtt"):
        written = (tmp_path / f"out/clip.{fmt}").read_text(encoding="utf-8")
        assert written == _openai(fmt, result, layout) and written.count(" --> ") >= 4


def test_diarized_cues_carry_their_speaker():
    """WhisperX's ``[SPEAKER_00]: `` label on each cue, the speaker of each of its words (a cue never
    holds two speakers); without the speakers the cues are openai-whisper's."""
    t = _transcript(json.loads((DATA / "meeting.json").read_text(encoding="utf-8")))
    opts = SubtitleOptions(max_line_width=42, max_line_count=2)
    words = [(w.text, s.speaker) for s in t.segments for w in s.words]
    labels = set()
    for label, text in _srt_cues(render(t, "srt", opts)):
        n = next(n for n in range(1, len(words) + 1) if "".join(w for w, _ in words[:n]).strip() == text.replace("\n", " "))
        assert {sp for _, sp in words[:n]} == {label}, (label, text)
        words = words[n:]
        labels.add(label)
    assert not words and labels == {"SPEAKER_00", "SPEAKER_01"}
    for s in t.segments:
        s.speaker = None
    assert render(t, "srt", opts) == _openai("srt", json.loads(render(t, "json")), opts)


def _srt_cues(srt: str) -> list[tuple[str, str]]:
    """(speaker label, text) of each srt cue."""
    out = []
    for block in srt.strip().split("\n\n"):
        label, text = "\n".join(block.split("\n")[2:]).split("]: ", 1)
        out.append((label.removeprefix("["), text))
    return out


@pytest.mark.parametrize("opts, message", [
    (SubtitleOptions(max_line_width=0), "max-line-width must be >= 1, got 0"),
    (SubtitleOptions(max_line_width=-5), "max-line-width must be >= 1, got -5"),
    (SubtitleOptions(max_line_width=42, max_line_count=0), "max-line-count must be >= 1, got 0"),
    (SubtitleOptions(max_words_per_line=0), "max-words-per-line must be >= 1, got 0"),
    (SubtitleOptions(max_line_width=4.5), "max-line-width must be a whole number, got 4.5"),
    (SubtitleOptions(max_line_count=2), "max-line-count needs max-line-width"),
    (SubtitleOptions(42, 2, 5), "max-words-per-line has no effect with both max-line-width and max-line-count"),
])
def test_bad_layout_is_a_one_line_error_and_writes_nothing(opts, message, tmp_path):
    t = _transcript(json.loads((DATA / "french.json").read_text(encoding="utf-8")))
    for call in (lambda: render(t, "srt", opts), lambda: write_outputs(t, tmp_path, "out", ["txt", "srt"], opts),
                 lambda: RunOptions(subtitles=opts).validate()):
        with pytest.raises(ValueError) as err:
            call()
        assert message in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []
