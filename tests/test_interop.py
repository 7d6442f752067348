"""Our outputs read by the speech ecosystem's own code: openai-whisper's and WhisperX's writers
(verbatim copies in tests/peers/, see its README) run on our json must give our txt, srt, vtt and tsv
byte for byte, and our json must carry every key and type of openai-whisper's ``transcribe()`` verbose
result and of WhisperX's diarized result. Real transcripts of real audio: jfk.flac (one speaker, no
diarization) and samples/meeting-dev00.wav (two speakers, diarized)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import typing
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

PEERS = Path(__file__).parent / "peers"
ROOT = Path(__file__).resolve().parents[1]
TEXT_FORMATS = ("txt", "srt", "vtt", "tsv")


def _peer(name: str):
    """A vendored peer module, loaded by path under a private name."""
    loader = SourceFileLoader(f"_peer_{name}", str(PEERS / f"{name}.py.txt"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


openai_utils = _peer("openai_whisper_utils")
whisperx_utils = _peer("whisperx_utils")
whisperx_schema = _peer("whisperx_schema")

# the options both CLIs pass to their writers by default (subtitle layout off: one cue per segment)
WRITER_OPTIONS = {"max_line_width": None, "max_line_count": None, "highlight_words": False, "max_words_per_line": None}


def _peer_output(utils, fmt: str, result: dict) -> str:
    writer = utils.get_writer(fmt, ".")
    buf = io.StringIO()
    writer.write_result(result, file=buf, options=dict(WRITER_OPTIONS))
    return buf.getvalue()


def _without_words(result: dict) -> dict:
    """The result as both peers hold it without word timestamps: segments with no ``words`` key."""
    return {**result, "segments": [{k: v for k, v in s.items() if k != "words"} for s in result["segments"]]}


@pytest.fixture(scope="module")
def jfk_run(base_pipeline, eval_root, tmp_path_factory):
    """jfk.flac through the CLI: every format, without word timestamps, then json with them."""
    import specwhisper.pipeline.core
    import specwhisper.serving.cli.main as cli

    out = tmp_path_factory.mktemp("jfk")
    mp = pytest.MonkeyPatch()
    mp.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: base_pipeline)
    try:
        assert cli.main([str(eval_root / "openai-whisper/jfk.flac"), "-o", str(out / "plain"), "-f", "all,aud,textgrid", "-q"]) == 0
        # openai-whisper's own spellings of the options
        assert cli.main([str(eval_root / "openai-whisper/jfk.flac"), "--output_dir", str(out / "words"),
                         "--output_format", "all", "--word_timestamps", "True", "--verbose", "False"]) == 0
    finally:
        mp.undo()
    return out


@pytest.fixture(scope="module")
def meeting_run(base_pipeline, diarizer, tmp_path_factory):
    """samples/meeting-dev00.wav (two speakers) through the CLI with WhisperX's spellings."""
    import specwhisper.pipeline.core
    import specwhisper.serving.cli.main as cli

    out = tmp_path_factory.mktemp("meeting")
    mp = pytest.MonkeyPatch()
    mp.setattr(base_pipeline, "_diarizer", diarizer)
    mp.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: base_pipeline)
    try:
        code = cli.main([str(ROOT / "samples/meeting-dev00.wav"), "--diarize", "--min_speakers", "1", "--max_speakers", "3",
                         "--output_dir", str(out), "--output_format", "all,aud,textgrid", "--verbose", "False"])
    finally:
        mp.undo()
    assert code == 0
    return out


def _read(folder: Path, stem: str, fmt: str) -> str:
    return (folder / f"{stem}.{fmt}").read_text(encoding="utf-8")


def _check_openai_result(result: dict, with_words: bool) -> None:
    """The keys and types of openai-whisper's transcribe() result (whisper/transcribe.py new_segment and
    its final dict; whisper/timing.py add_word_timestamps for words)."""
    assert isinstance(result["text"], str) and isinstance(result["language"], str)
    assert result["segments"], "a real transcript has segments"
    types = {"id": int, "seek": int, "start": float, "end": float, "text": str, "tokens": list,
             "temperature": float, "avg_logprob": float, "compression_ratio": float, "no_speech_prob": float}
    for i, seg in enumerate(result["segments"]):
        for key, kind in types.items():
            assert isinstance(seg[key], kind if kind is not float else (int, float)), (key, seg[key])
        assert seg["id"] == i and all(isinstance(t, int) for t in seg["tokens"])
        assert 0 <= seg["start"] <= seg["end"] and 0 <= seg["no_speech_prob"] <= 1 and seg["avg_logprob"] <= 0
        assert ("words" in seg) == with_words
        for w in seg.get("words", []):
            assert isinstance(w["word"], str) and "text" not in w
            assert seg["start"] - 0.02 <= w["start"] <= w["end"] <= seg["end"] + 0.02
            assert 0 <= w["probability"] <= 1
        if with_words:  # openai-whisper's words keep their leading space and join into the segment's text
            assert "".join(w["word"] for w in seg["words"]).strip() == seg["text"]


def test_json_is_openai_whispers_verbose_result(jfk_run):
    plain = json.loads(_read(jfk_run / "plain", "jfk", "json"))
    words = json.loads(_read(jfk_run / "words", "jfk", "json"))
    _check_openai_result(plain, with_words=False)
    _check_openai_result(words, with_words=True)
    assert sum(len(s["words"]) for s in words["segments"]) == 22  # "And so my fellow Americans ..."
    assert plain["language"] == "en" and "fellow Americans" in plain["text"]
    assert not any("speaker" in s for s in plain["segments"])  # not diarized: no speaker key (WhisperX's rule)
    assert {"speakers", "speculative", "timings", "model", "duration"} <= set(plain)  # our extras stay


def test_peer_writers_on_our_json_give_our_files(jfk_run):
    """openai-whisper's WriteTXT/WriteSRT/WriteVTT/WriteTSV on our json: our files, byte for byte."""
    result = json.loads(_read(jfk_run / "plain", "jfk", "json"))
    for fmt in TEXT_FORMATS:
        assert _peer_output(openai_utils, fmt, result) == _read(jfk_run / "plain", "jfk", fmt), fmt
        assert _peer_output(whisperx_utils, fmt, result) == _read(jfk_run / "plain", "jfk", fmt), fmt


def test_word_cues_of_openai_whisper_read_our_words(jfk_run):
    """With words, openai-whisper's subtitle writers build cues from them: same text as ours, cue
    times the words' first start and last end, inside our segment's times."""
    result = json.loads(_read(jfk_run / "words", "jfk", "json"))
    ours = json.loads(_read(jfk_run / "plain", "jfk", "json"))
    cues = _srt_cues(_peer_output(openai_utils, "srt", result))
    assert [c[2] for c in cues] == [s["text"] for s in ours["segments"]]
    for (start, end, _), seg in zip(cues, result["segments"]):
        assert seg["start"] - 0.02 <= start <= end <= seg["end"] + 0.02
    for seg in result["segments"]:  # timed by its words, as openai-whisper's add_word_timestamps does
        assert (seg["start"], seg["end"]) == (seg["words"][0]["start"], seg["words"][-1]["end"])
    for fmt in TEXT_FORMATS:  # so their writers on our json give our files
        assert _peer_output(openai_utils, fmt, result) == _read(jfk_run / "words", "jfk", fmt), fmt


def _srt_time(text: str) -> float:
    h, m, rest = text.replace(",", ".").split(":")
    return int(h) * 3600 + int(m) * 60 + float(rest)


def _srt_cues(srt: str) -> list[tuple[float, float, str]]:
    cues = []
    for block in srt.strip().split("\n\n"):
        number, times, *text = block.split("\n")
        start, end = times.split(" --> ")
        cues.append((_srt_time(start), _srt_time(end), "\n".join(text)))
    return cues


def test_tsv_is_whispers_three_columns(jfk_run):
    """openai-whisper's WriteTSV contract: header start/end/text, integer milliseconds, one row per segment."""
    rows = list(csv.reader(io.StringIO(_read(jfk_run / "plain", "jfk", "tsv")), delimiter="\t"))
    result = json.loads(_read(jfk_run / "plain", "jfk", "json"))
    assert rows[0] == ["start", "end", "text"]
    assert [(int(a), int(b), t) for a, b, t in rows[1:]] == [
        (round(1000 * s["start"]), round(1000 * s["end"]), s["text"]) for s in result["segments"]]


def _typed_keys(typed_dict) -> dict[str, object]:
    return typing.get_type_hints(typed_dict)


def test_diarized_json_has_whisperx_speakers(meeting_run):
    """WhisperX's diarized result: TranscriptionResult/SingleSegment keys (whisperx/schema.py) and
    assign_word_speakers's ``speaker`` on segments and words."""
    result = json.loads(_read(meeting_run, "meeting-dev00", "json"))
    _check_openai_result(result, with_words=True)  # word timestamps are on with --diarize
    assert whisperx_schema.TranscriptionResult.__required_keys__ <= set(result)
    hints = _typed_keys(whisperx_schema.SingleSegment)
    for seg in result["segments"]:
        assert whisperx_schema.SingleSegment.__required_keys__ <= set(seg)
        assert all(isinstance(seg[k], hints[k] if hints[k] is not float else (int, float)) for k in ("text", "start", "end"))
    speakers = {s["speaker"] for s in result["segments"] if "speaker" in s}
    assert speakers == {"SPEAKER_00", "SPEAKER_01"} and speakers <= set(result["speakers"])
    assert all("speaker" not in s or s["speaker"] is not None for s in result["segments"])
    words = [w for s in result["segments"] for w in s["words"]]
    assert words and {w["speaker"] for w in words if "speaker" in w} == speakers
    assert {"word", "start", "end"} <= set(words[0])  # what WhisperX's subtitle writer reads of a word


def test_whisperx_writers_on_our_diarized_json_give_our_files(meeting_run):
    """WhisperX's writers on our diarized json (as WhisperX writes without word cues): our txt, srt and
    vtt with their ``[SPEAKER_00]: `` labels, and our tsv, byte for byte."""
    result = _without_words(json.loads(_read(meeting_run, "meeting-dev00", "json")))
    for fmt in TEXT_FORMATS:
        assert _peer_output(whisperx_utils, fmt, result) == _read(meeting_run, "meeting-dev00", fmt), fmt
    txt = _read(meeting_run, "meeting-dev00", "txt")
    assert "[SPEAKER_00]: " in txt and "[SPEAKER_01]: " in txt
    # openai-whisper's writers know no speakers: its tsv is the same file
    assert _peer_output(openai_utils, "tsv", result) == _read(meeting_run, "meeting-dev00", "tsv")


def test_whisperx_audacity_labels_of_our_json_are_our_aud(jfk_run, meeting_run):
    """WhisperX's WriteAudacity (its ``--output_format aud``) on our json gives our aud byte for byte, with and
    without speakers: Audacity's label rows, start and end in seconds, then the text."""
    for folder, stem in ((jfk_run / "plain", "jfk"), (meeting_run, "meeting-dev00")):
        result = json.loads(_read(folder, stem, "json"))
        ours = _read(folder, stem, "aud")
        assert _peer_output(whisperx_utils, "aud", result) == ours, stem
        rows = [line.split("\t") for line in ours.splitlines()]
        assert [(float(a), float(b)) for a, b, _ in rows] == [(s["start"], s["end"]) for s in result["segments"]]
        labelled = [text.startswith("[[SPEAKER_") for _, _, text in rows]
        assert all(labelled) if stem.startswith("meeting") else not any(labelled)


def _textgrid(path: Path):
    from praatio import textgrid

    return textgrid.openTextgrid(str(path), includeEmptyIntervals=False, reportingMode="error")


def test_praat_reads_our_textgrid(jfk_run, meeting_run):
    """praatio (the Montreal Forced Aligner's TextGrid library) reads our TextGrid, strictly: jfk's segments at
    the json's times; the meeting's segments and words in a pair of tiers per speaker, every word at its time."""
    result = json.loads(_read(jfk_run / "plain", "jfk", "json"))
    grid = _textgrid(jfk_run / "plain" / "jfk.TextGrid")
    assert list(grid.tierNames) == ["segments"] and grid.maxTimestamp == 11.0
    assert [tuple(e) for e in grid.getTier("segments").entries] == [(s["start"], s["end"], s["text"].strip())
                                                                    for s in result["segments"]]
    result = json.loads(_read(meeting_run, "meeting-dev00", "json"))
    grid = _textgrid(meeting_run / "meeting-dev00.TextGrid")
    speakers = sorted({s["speaker"] for s in result["segments"]})
    assert len(speakers) == 2 and list(grid.tierNames) == [f"{p} - {k}" for p in speakers for k in ("segments", "words")]
    for speaker in speakers:
        words = [(w["start"], w["end"], w["word"].strip()) for s in result["segments"] if s["speaker"] == speaker
                 for w in s["words"]]
        assert [tuple(e) for e in grid.getTier(f"{speaker} - words").entries] == words


def test_textgrid_of_odd_transcripts(tmp_path):
    """Words without a length join the word before them (Praat has no empty interval), quotes are doubled,
    a transcript without speech is one empty tier; praatio reads each."""
    from specwhisper.pipeline.writers import render
    from specwhisper.results.transcript import Segment, Transcript, Word

    words = [Word(0.5, 0.9, ' "Stop"'), Word(0.9, 0.9, " now"), Word(0.9, 0.9, " please"), Word(1.2, 1.6, " go.")]
    t = Transcript(segments=[Segment(0.4, 1.7, ' "Stop" now please go.', words=words)], language="en", duration=2.0)
    (tmp_path / "odd.TextGrid").write_text(render(t, "textgrid"))
    grid = _textgrid(tmp_path / "odd.TextGrid")
    assert [tuple(e) for e in grid.getTier("words").entries] == [(0.5, 0.9, '"Stop" now please'), (1.2, 1.6, "go.")]
    assert [tuple(e) for e in grid.getTier("segments").entries] == [(0.4, 1.7, '"Stop" now please go.')]
    (tmp_path / "empty.TextGrid").write_text(render(Transcript(segments=[], language=None, duration=3.0), "textgrid"))
    grid = _textgrid(tmp_path / "empty.TextGrid")
    assert list(grid.tierNames) == ["segments"] and list(grid.getTier("segments").entries) == [] and grid.maxTimestamp == 3.0


@pytest.fixture
def no_model(monkeypatch):
    """Building a pipeline fails the test: what runs must need no model."""
    import specwhisper.pipeline.core

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", refuse)


def test_a_json_is_written_again_byte_for_byte(jfk_run, meeting_run, tmp_path, no_model):
    """`transcribe talk.json -f ...` writes, from the json alone, the very files the run wrote (words and
    speakers, aud, TextGrid and RTTM included)."""
    import specwhisper.serving.cli.main as cli
    from specwhisper.pipeline.writers import file_name

    for folder, stem, formats in ((jfk_run / "words", "jfk", "txt,srt,vtt,tsv"),
                                  (jfk_run / "plain", "jfk", "txt,srt,vtt,tsv,aud,textgrid"),
                                  (meeting_run, "meeting-dev00", "txt,srt,vtt,tsv,aud,textgrid,rttm")):
        out = tmp_path / folder.name
        assert cli.main([str(folder / f"{stem}.json"), "-o", str(out), "-f", formats, "-q"]) == 0
        for fmt in formats.split(","):
            assert (out / file_name(stem, fmt)).read_bytes() == (folder / file_name(stem, fmt)).read_bytes(), (stem, fmt)


def test_openai_whispers_json_laid_out_again(jfk_run, tmp_path, no_model):
    """openai-whisper's own json (its keys alone) in another subtitle layout: our srt and vtt are what its
    writers write from that json with the same options."""
    import specwhisper.serving.cli.main as cli

    ours = json.loads(_read(jfk_run / "words", "jfk", "json"))
    keys = ("id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob", "compression_ratio", "no_speech_prob")
    theirs = {"text": ours["text"], "language": ours["language"],
              "segments": [{**{k: s[k] for k in keys}, "words": [{k: w[k] for k in ("word", "start", "end", "probability")}
                                                                 for w in s["words"]]} for s in ours["segments"]]}
    (tmp_path / "theirs.json").write_text(json.dumps(theirs))
    assert cli.main([str(tmp_path / "theirs.json"), "-o", str(tmp_path / "out"), "-f", "srt,vtt", "--max_line_width", "20",
                     "--max_line_count", "2", "-q"]) == 0
    options = {**WRITER_OPTIONS, "max_line_width": 20, "max_line_count": 2}
    for fmt in ("srt", "vtt"):
        buf = io.StringIO()
        openai_utils.get_writer(fmt, ".").write_result(theirs, file=buf, options=dict(options))
        assert (tmp_path / "out" / f"theirs.{fmt}").read_text() == buf.getvalue(), fmt
    assert len(buf.getvalue().split("\n\n")) > len(theirs["segments"]) + 2  # laid out anew: more cues than segments


@pytest.mark.parametrize("argv, fragment, code", [
    (["--diarize"], "--diarize does not apply to a json transcript", 2),
    (["-f", "json"], "the input is the json", 2),
    (["-f", "rttm"], "-f rttm needs speakers", 1),
    (["EXTRA_AUDIO"], "json transcripts are rendered and audio transcribed", 2),
    (["NOT_A_TRANSCRIPT"], "not a transcript: no 'segments' list", 1),
    (["NAN_TIMES"], "nan.json: not a transcript: a time must be seconds >= 0, got nan", 1),
    (["NOT_OBJECTS"], "ints.json: not a transcript: segment 1 or one of its words is not an object", 1),
])
def test_bad_json_renders_are_one_line(jfk_run, tmp_path, capsys, no_model, eval_root, argv, fragment, code):
    import specwhisper.serving.cli.main as cli

    (tmp_path / "other.json").write_text('{"text": "hello"}')
    (tmp_path / "nan.json").write_text('{"segments": [{"start": NaN, "end": Infinity, "text": "hi"}]}')  # json.dumps writes these
    (tmp_path / "ints.json").write_text('{"segments": [5, null]}')
    files = {"EXTRA_AUDIO": eval_root / "openai-whisper/jfk.flac", "NOT_A_TRANSCRIPT": tmp_path / "other.json",
             "NAN_TIMES": tmp_path / "nan.json", "NOT_OBJECTS": tmp_path / "ints.json"}
    argv = [str(files[a]) if a in files else a for a in argv]
    inputs = [a for a in argv if not a.startswith("-") and a not in ("json", "rttm")]
    flags = [a for a in argv if a not in inputs]
    assert cli.main([str(jfk_run / "plain" / "jfk.json"), *inputs, "-o", str(tmp_path / "out"), *flags]) == code
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1


def test_whisperxs_json_written_again(meeting_run, tmp_path, no_model):
    """WhisperX's json (its keys: words without a leading space, a ``score``, a number it could not align left
    without times) read back: the txt, srt and vtt WhisperX's own writers write from it, and a TextGrid whose
    words are its words."""
    import specwhisper.serving.cli.main as cli

    ours = json.loads(_read(meeting_run, "meeting-dev00", "json"))
    segments = [{"start": s["start"], "end": s["end"], "text": s["text"], "speaker": s["speaker"],
                 "words": [{"word": w["word"].strip(), "start": w["start"], "end": w["end"], "score": w["probability"],
                            "speaker": w["speaker"]} for w in s["words"]]} for s in ours["segments"]]
    del segments[1]["words"][0]["start"], segments[1]["words"][0]["end"]  # as WhisperX leaves "25" unaligned
    theirs = {"segments": segments, "word_segments": [w for s in segments for w in s["words"]], "language": "en"}
    (tmp_path / "whisperx.json").write_text(json.dumps(theirs))
    assert cli.main([str(tmp_path / "whisperx.json"), "-o", str(tmp_path), "-f", "txt,srt,vtt,textgrid", "-q"]) == 0
    for fmt in TEXT_FORMATS[:3]:
        assert (tmp_path / f"whisperx.{fmt}").read_text() == _peer_output(whisperx_utils, fmt, _without_words(theirs)), fmt
    grid = _textgrid(tmp_path / "whisperx.TextGrid")
    got = [e.label for name in grid.tierNames if name.endswith("words") for e in grid.getTier(name).entries]
    assert sorted(" ".join(got).split()) == sorted(w["word"] for s in segments for w in s["words"])
