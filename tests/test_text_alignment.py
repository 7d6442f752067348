"""A text the user has, dated against the audio (``align_text``): the transcript is the text, word for word,
and its words' times agree with a forced aligner's (Montreal Forced Aligner TextGrid) and with where
each piece of a joined file really is."""

from __future__ import annotations

import difflib
import json

import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.transcripts import normalize, read_textgrid_words
from specwhisper.pipeline.options import check_values, run_options

GAP_S = 1.5
# clips of two voices, their texts as the eval set writes them (capitals, punctuation); mfa/acoustic_corpus.wav,
# spontaneous speech, has its own test against a forced aligner
JOINED = ("coqui-tts-ljspeech/LJ001-0001.wav", "cuttledoc-fleurs/fleurs-en-002.ogg", "coqui-tts-ljspeech/LJ001-0003.wav")


def _words(transcript):
    return [w for s in transcript.segments for w in s.words]


def _written(text: str) -> list[str]:
    return text.split()


@pytest.fixture(scope="module")
def joined(manifest, tmp_path_factory):
    """The clips back to back with 1.5 s of silence between them (about 35 s: two windows), the text
    one line per clip, and where each clip starts and ends."""
    items = {i.file: i for i in manifest}
    pieces, spans, lines, at = [], [], [], 0.0
    for name in JOINED:
        audio = load_audio(items[name].path)
        pieces += [audio, np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)]
        spans.append((at, at + len(audio) / SAMPLE_RATE))
        at += len(audio) / SAMPLE_RATE + GAP_S
        lines.append(items[name].reference)
    path = tmp_path_factory.mktemp("joined") / "joined.wav"
    sf.write(path, np.concatenate(pieces), SAMPLE_RATE)
    return path, "\n".join(lines), spans


def test_aligned_words_match_a_forced_aligner(base_pipeline, eval_root):
    text = (eval_root / "mfa/acoustic_corpus.lab").read_text()
    ref = read_textgrid_words(eval_root / "mfa/acoustic_corpus.TextGrid")
    t = base_pipeline.run_file(eval_root / "mfa/acoustic_corpus.wav", run_options({"align_text": text, "language": "en"}))
    words = _words(t)
    assert [w.text.strip() for w in words] == _written(text)  # the text, word for word ("yknow", "um" and "uh" too)
    assert " ".join(s.text.strip() for s in t.segments) == " ".join(_written(text))
    assert t.model["aligned_text"]["text_words"] == len(_written(text))
    starts = [w.start for w in words]
    assert starts == sorted(starts) and all(w.start <= w.end for w in words)
    for s in t.segments:
        assert s.start == s.words[0].start and s.end == s.words[-1].end
    # a text without sentence ends is cut where the transcript's segments are, not left one 25 s segment
    assert len(t.segments) >= 3 and max(s.end - s.start for s in t.segments) < 10
    matcher = difflib.SequenceMatcher(a=[normalize(w.text) for w in words], b=[normalize(w) for _, _, w in ref], autojunk=False)
    diffs = np.array([abs(words[b.a + k].start - ref[b.b + k][0]) for b in matcher.get_matching_blocks() for k in range(b.size)])
    print(f"\nword start error vs MFA: median {np.median(diffs):.3f} s, within 0.2 s: {np.mean(diffs <= 0.2):.0%} of {len(diffs)}")
    assert len(diffs) >= 0.95 * len(ref)  # every word is there to compare (the transcription pass has 53 of 58)
    assert np.median(diffs) < 0.12  # measured 0.080 (the transcription's own words: 0.060)
    assert np.mean(diffs <= 0.2) >= 0.7  # measured 0.77 (the transcription's own words: 0.77)


def test_a_text_over_several_windows_lands_on_its_clips(base_pipeline, joined):
    path, text, spans = joined
    assert spans[-1][1] > 30.0  # the text spans more than one 30 s window
    t = base_pipeline.run_file(path, run_options({"align_text": text}))
    words = _words(t)
    assert [w.text.strip() for w in words] == _written(text)
    assert t.model["aligned_text"]["matched_share"] > 0.8  # the transcription pass misheard a few words
    at = 0
    for line, (start, end) in zip(text.splitlines(), spans):
        mine = words[at : at + len(_written(line))]
        at += len(mine)
        print(f"\n{line[:20]!r}: clip {start:.2f}-{end:.2f} s, words {mine[0].start:.2f}-{mine[-1].end:.2f} s")
        # Whisper's cross-attention stretches a clip's first word back into the silence before it: measured
        # 0.59 s for LJ001-0003's "For", a word the transcription pass did not hear (0.15 s for the others)
        assert start - 0.8 <= mine[0].start <= start + 1.0, (line[:30], mine[0], start)
        assert mine[-1].end <= end + 0.3, (line[:30], mine[-1], end)
    # the lines are segments (sentences inside them too): none spans two clips
    for s in t.segments:
        assert any(a - 0.8 <= s.start and s.end <= b + 0.3 for a, b in spans), s


def test_a_word_the_audio_does_not_say_takes_its_place_with_a_low_probability(base_pipeline, eval_root):
    said = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
    jfk = eval_root / "openai-whisper/jfk.flac"
    right = _words(base_pipeline.run_file(jfk, run_options({"align_text": said})))
    text = said.replace("Americans", "Martians")
    wrong = _words(base_pipeline.run_file(jfk, run_options({"align_text": text})))
    assert [w.text.strip() for w in wrong] == text.split()
    martians, americans = wrong[4], right[4]
    assert abs(martians.start - americans.start) <= 0.1 and abs(martians.end - americans.end) <= 0.1
    others = sorted(w.probability for w in wrong if w is not martians)
    assert martians.probability < 0.2 and martians.probability < others[0] / 2  # measured 0.13; the others 0.64 and up
    assert americans.probability > 0.5
    # a text far longer than 11 s of speech can hold: refused at once, not placed word by word for minutes
    with pytest.raises(ValueError, match=r"the text to align has 3000 words for 11\.0 s of audio \(more than 20 a "
                                         r"second\): is it this audio's text\?$"):
        base_pipeline.run_file(jfk, run_options({"align_text": said + " word" * (3000 - len(said.split()))}))


@pytest.mark.parametrize("values, fragment", [
    ({"align_text": "  \n "}, "the text to align is empty"),
    ({"align_text": "hello", "postedit": True}, "does not go with postedit"),
    ({"align_text": "hello", "task": "translate"}, "does not go with task translate"),
    ({"align_text": "hello", "vad_filter": True}, "does not go with vad-filter"),
])
def test_bad_alignment_requests_are_one_line(values, fragment):
    with pytest.raises(ValueError, match=fragment) as caught:
        run_options(check_values(values, "http"))
    assert "\n" not in str(caught.value)


def test_cli_aligns_a_text_file(run_cli, eval_root, tmp_path):
    """tiny.en: the text's words are the transcript whatever the model."""
    def run_tiny(*argv):
        return run_cli(*argv, "-m", "tiny.en")

    text = tmp_path / "jfk.txt"
    text.write_text("And so, my fellow Americans:\nask not what your country can do for you;\n"
                    "ask what you can do for your country.\n")
    code, out, err = run_tiny(eval_root / "openai-whisper/jfk.flac", "--align-text", text, "-o", tmp_path, "-f", "srt,json")
    assert code == 0, err
    cues = (tmp_path / "jfk.srt").read_text().split("\n\n")
    assert [c.splitlines()[2] for c in cues if c.strip()] == text.read_text().splitlines()  # a cue per line
    code, out, err = run_tiny(eval_root / "openai-whisper/jfk.flac", "--align-text", tmp_path / "missing.txt")
    assert code == 2 and err.strip() == f"transcribe: error: --align-text: {tmp_path / 'missing.txt'}: file not found"
    code, out, err = run_tiny(eval_root / "openai-whisper/jfk.flac", eval_root / "whisper.cpp/jfk.wav", "--align-text", text)
    assert code == 2 and "give that file or folder alone" in err and "Traceback" not in err
    # the outputs beside the text, as its name would write them (-f all: txt): refused, the text kept
    kept = text.read_text()
    code, out, err = run_tiny(eval_root / "openai-whisper/jfk.flac", "--align-text", text, "-o", tmp_path)
    assert code == 2 and err == f"transcribe: error: {text}: the txt output would overwrite this text to align: write the " \
                                "outputs to another folder (-o) or leave txt out\n", err
    assert text.read_text() == kept


def test_a_corpus_of_recordings_and_their_texts(run_cli, eval_root, tmp_path):
    """The Montreal Forced Aligner's layout: a folder of recordings, each with its text beside it (.lab or .txt, or
    its subtitles, .srt).
    Every recording with a text gets its text's words, timed; one without fails alone; an edited text aligns its
    recording again, and nothing else; outputs that would overwrite a text are refused before anything runs
    (tiny.en)."""
    def run_tiny(*argv):
        return run_cli(*argv, "-m", "tiny.en")

    import json
    import shutil

    from praatio import textgrid

    corpus, out = tmp_path / "corpus", tmp_path / "out"
    corpus.mkdir()
    shutil.copy(eval_root / "mfa/acoustic_corpus.wav", corpus)
    shutil.copy(eval_root / "mfa/acoustic_corpus.lab", corpus)
    shutil.copy(eval_root / "openai-whisper/jfk.flac", corpus)
    (corpus / "jfk.txt").write_text("And so, my fellow Americans: ask not what your country can do for you;\n"
                                    "ask what you can do for your country.\n")
    shutil.copy(eval_root / "coqui-tts-ljspeech/LJ001-0001.wav", corpus)  # no text
    shutil.copy(eval_root / "whisper.cpp/jfk.wav", corpus / "kennedy.wav")  # its subtitles, out of sync
    (corpus / "kennedy.srt").write_text("1\n00:01:00,000 --> 00:01:02,000\nAnd so, my fellow Americans,\n\n"
                                        "2\n00:01:03,000 --> 00:01:09,000\nask not what your country can do for you,\n"
                                        "ask what you can do for your country.\n")
    code, _, err = run_tiny(corpus, "--align-text", corpus, "-o", out, "-f", "json,srt,textgrid")
    assert code == 1, err
    assert [line for line in err.splitlines() if "error" in line] == [
        f"transcribe: error: {corpus / 'LJ001-0001.wav'}: the text to align, {corpus / 'LJ001-0001.lab'}: file not found"]
    for stem, text in (("acoustic_corpus", (corpus / "acoustic_corpus.lab").read_text()), ("jfk", (corpus / "jfk.txt").read_text())):
        words = [w["word"].strip() for s in json.loads((out / f"{stem}.json").read_text())["segments"] for w in s["words"]]
        assert words == text.split(), stem
    # Praat's TextGrid, as MFA writes one per recording, read by MFA's own TextGrid library
    grid = textgrid.openTextgrid(str(out / "acoustic_corpus.TextGrid"), includeEmptyIntervals=False, reportingMode="error")
    assert [e.label for e in grid.getTier("words").entries] == (corpus / "acoustic_corpus.lab").read_text().split()
    kennedy = json.loads((out / "kennedy.json").read_text())["segments"]
    assert [s["text"].strip() for s in kennedy] == ["And so, my fellow Americans,", "ask not what your country can do for "
                                                    "you, ask what you can do for your country."]
    assert kennedy[-1]["end"] < 11.5  # the cues' own times (a minute in) are not the audio's
    assert not (out / "LJ001-0001.json").exists()
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}

    (corpus / "jfk.txt").write_text("And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.")
    code, _, err = run_tiny(corpus, "--align-text", corpus, "-o", out, "-f", "json,srt,textgrid")
    assert code == 1, err  # the recording without a text is still failed (kept, not retried)
    assert (out / "acoustic_corpus.json").stat().st_mtime_ns == before["acoustic_corpus.json"]
    assert (out / "jfk.json").stat().st_mtime_ns != before["jfk.json"]
    assert len(json.loads((out / "jfk.json").read_text())["segments"]) == 1  # the new text: one sentence

    kept = (corpus / "jfk.txt").read_text()
    code, _, err = run_tiny(corpus, "--align-text", corpus, "-f", "txt", "-o", corpus)
    assert code == 2 and "the txt output would overwrite this text to align" in err and "Traceback" not in err
    assert (corpus / "jfk.txt").read_text() == kept
    code, _, err = run_tiny(corpus, "--align-text", corpus / "jfk.txt", "-o", out)
    assert code == 2 and "takes the folder of their texts" in err
    code, _, err = run_tiny(corpus / "jfk.flac", "--align-text", corpus, "-o", out)
    assert code == 2 and "is a folder: give the text of this file" in err


def _srt_time(t: float) -> str:
    h, rest = divmod(t, 3600)
    m, s = divmod(rest, 60)
    return f"{int(h):02d}:{int(m):02d}:{s:06.3f}".replace(".", ",")


def test_a_subtitle_file_comes_back_in_sync(run_cli, eval_root, tmp_path):
    """``--align-text subs.srt``: an SRT whose cues are 3 s late (each cue two lines, the second in italics)
    comes back as the same cues, timed to the audio: each cue's start and end against the forced aligner's
    first and last word of it. A WebVTT file's cue holding two sentences stays one cue."""
    ref = read_textgrid_words(eval_root / "mfa/acoustic_corpus.TextGrid")
    groups = [ref[i:i + 10] for i in range(0, len(ref), 10)]
    blocks = []
    for k, group in enumerate(groups):
        words = [w for _, _, w in group]
        blocks.append(f"{k + 1}\n{_srt_time(group[0][0] + 3)} --> {_srt_time(group[-1][1] + 3)}\n"
                      f"{' '.join(words[:5])}\n<i>{' '.join(words[5:])}</i>\n")
    subs = tmp_path / "late.srt"
    subs.write_text("\n".join(blocks))
    code, _, err = run_cli(eval_root / "mfa/acoustic_corpus.wav", "--align-text", subs, "-l", "en", "-o", tmp_path / "out",
                           "-f", "srt,json")
    assert code == 0, err
    segments = json.loads((tmp_path / "out" / "acoustic_corpus.json").read_text())["segments"]
    assert [s["text"].strip() for s in segments] == [" ".join(w for _, _, w in g) for g in groups]
    assert (tmp_path / "out" / "acoustic_corpus.srt").read_text().count(" --> ") == len(groups)
    errors = np.array([abs(s["start"] - g[0][0]) for s, g in zip(segments, groups)] +
                      [abs(s["end"] - g[-1][1]) for s, g in zip(segments, groups)])
    assert np.median(errors) < 0.2 and errors.max() < 0.5, errors  # measured: median 0.13 s, at most 0.45 s (the first word)

    vtt = tmp_path / "jfk.vtt"
    vtt.write_text("WEBVTT\n\nNOTE two sentences in the first cue\n\nfirst\n00:20.000 --> 00:22.000 align:start\n"
                   "And so, my fellow Americans. Ask not\nwhat your country can do for you,\n\n"
                   "00:23.000 --> 00:25.000\n<v Kennedy>ask what you can do for your country.\n")
    code, _, err = run_cli(eval_root / "openai-whisper/jfk.flac", "--align-text", vtt, "-o", tmp_path / "out", "-f", "json")
    assert code == 0, err
    segments = json.loads((tmp_path / "out" / "jfk.json").read_text())["segments"]
    assert [s["text"].strip() for s in segments] == ["And so, my fellow Americans. Ask not what your country can do for you,",
                                                      "ask what you can do for your country."]
    assert segments[0]["start"] < 1.0 and 4.0 < segments[1]["start"] < segments[1]["end"] < 11.5
