"""An interrupted long file resumes from its last finished batch of chunks (specwhisper.pipeline.checkpoint),
with a transcript identical to an uninterrupted run; the progress it reports is monotone and the CLI's
bar shows audio seconds and the time left."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import build_long_file
from specwhisper.pipeline.checkpoint import ChunkCheckpoint
from specwhisper.pipeline.config import RunOptions
from specwhisper.pipeline.writers import render


class Stop(KeyboardInterrupt):
    pass


def _options(**decode) -> RunOptions:
    return RunOptions(decode=DecodeOptions(language="en", batch_size=2, word_timestamps=True, **decode))


def _count_decoded(monkeypatch, engine) -> list[int]:
    """Chunks the engine decodes from now on (rows of its batches)."""
    rows: list[int] = []
    original = engine._first_pass

    def counting(audios, batch, *rest):
        rows.append(len(batch))
        return original(audios, batch, *rest)

    monkeypatch.setattr(engine, "_first_pass", counting)
    return rows


def _interrupt_second_batch(monkeypatch, engine, exc: type[BaseException]) -> None:
    """The engine's second decoded batch raises ``exc`` (a Ctrl-C)."""
    original, calls = engine._first_pass, []

    def second_batch_interrupted(*a):
        calls.append(1)
        if len(calls) == 2:
            raise exc
        return original(*a)

    monkeypatch.setattr(engine, "_first_pass", second_batch_interrupted)


def _records(path) -> int:
    return len(path.read_bytes().split(b"\n")) - 2  # the header, and the empty piece after the last newline


@pytest.fixture(scope="module")
def long_file(eval_root, tmp_path_factory):
    """About 81 s of the public clips, back to back (6 chunks: 3 batches of 2)."""
    return build_long_file("dense", tmp_path_factory.mktemp("long"), min_seconds=70)


def test_interrupted_file_resumes_identically(tiny_pipeline, long_file, tmp_path, monkeypatch):
    pipeline = tiny_pipeline
    opts = _options()
    fractions: list[tuple[str, float]] = []
    decoded_whole = _count_decoded(monkeypatch, pipeline.asr)
    whole = pipeline.run_file(long_file.path, opts, lambda stage, f: fractions.append((stage, f)))
    decoded_whole = sum(decoded_whole)
    asr = [f for stage, f in fractions if stage == "transcribe"]
    assert asr == sorted(asr) and asr[0] == 0.0 and asr[-1] == pytest.approx(1.0)
    assert len(asr) >= 4, "too few batches to interrupt in the middle"

    ckpt = tmp_path / ".long.partial.jsonl"
    reports = []

    def interrupt_after_two_batches(stage, f):
        reports.append(stage)
        if reports.count("transcribe") == 3:  # 0.0, then two finished batches
            raise Stop

    with pytest.raises(Stop):
        pipeline.run_file(long_file.path, opts, interrupt_after_two_batches, checkpoint=ckpt)
    assert _records(ckpt) == 2

    # The same audio and settings find both records; another file or setting finds none.
    audio = load_audio(long_file.path)
    probe = tmp_path / "probe.jsonl"
    changed = audio.copy()
    changed[len(changed) // 2] += 1e-3
    for other_audio, other_opts, expected in [(audio, opts, 2), (changed, opts, 0), (audio, _options(vad_threshold=0.45), 0),
                                              (audio, replace(opts, decode=replace(opts.decode, word_timestamps=False)), 0)]:
        shutil.copy(ckpt, probe)
        assert len(pipeline._journal(probe, other_audio, other_opts).records) == expected
    # A line torn by a kill mid-write is ignored and cut off; so is everything after a garbled line.
    size = ckpt.stat().st_size
    for tail, kept in [(b'{"batch": [[0, 1', 2), (b"\x00garbage\n" + b"{}\n", 2)]:
        probe.write_bytes(ckpt.read_bytes() + tail)
        assert len(pipeline._journal(probe, audio, opts).records) == kept and probe.stat().st_size == size
    lines = ckpt.read_bytes().split(b"\n")
    probe.write_bytes(b"\n".join(lines[:2] + [b"not json"] + lines[2:]))
    assert len(pipeline._journal(probe, audio, opts).records) == 1

    monkeypatch.undo()
    decoded = _count_decoded(monkeypatch, pipeline.asr)
    resumed_fractions: list[tuple[str, float]] = []
    again = pipeline.run_file(long_file.path, opts, lambda stage, f: resumed_fractions.append((stage, f)), checkpoint=ckpt)
    assert again.stats.resumed_chunks == 4 and sum(decoded) == decoded_whole - 4
    assert again.segments == whole.segments  # text, tokens, times, words, window facts
    for fmt in ("srt", "tsv", "vtt"):
        assert render(again, fmt) == render(whole, fmt)
    assert json.loads(render(again, "json"))["segments"] == json.loads(render(whole, "json"))["segments"]
    assert again.stats.generated_tokens == whole.stats.generated_tokens
    asr = [(stage, f) for stage, f in resumed_fractions if stage != "vad"]
    assert [f for _, f in asr] == sorted(f for _, f in asr) and asr[-1][1] == pytest.approx(1.0)
    assert [stage for stage, _ in asr][:4] == ["transcribe", "resume", "resume", "transcribe"]  # replayed, then decoded
    assert _records(ckpt) == len(decoded) + 2  # every batch, kept until the caller removes the file


def test_cli_removes_the_checkpoint_and_says_how_to_resume(tiny_pipeline, long_file, tmp_path, monkeypatch, capsys):
    """The CLI in-process (as the ``run_cli`` fixture runs it) on the session's tiny.en pipeline: the
    checkpoint's handling does not depend on the model. The file's first 20 s: two chunks, a batch each."""
    import soundfile as sf

    import specwhisper.pipeline.core
    import specwhisper.serving.cli.main as cli

    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: tiny_pipeline)

    def run_cli(*argv):
        code = cli.main([str(a) for a in argv])
        return code, *capsys.readouterr()

    short = tmp_path / "short.wav"
    audio, rate = sf.read(long_file.path, dtype="float32")
    sf.write(short, audio[: 20 * rate], rate)
    out = tmp_path / "out"
    args = [short, "-o", out, "-f", "json", "--batch-size", "1", "--language", "en"]
    original = tiny_pipeline.asr._first_pass
    _interrupt_second_batch(monkeypatch, tiny_pipeline.asr, KeyboardInterrupt)
    code, _, err = run_cli(*args)
    assert code == 130 and "run the same command again to resume" in err and (out / ".short.partial.jsonl").is_file()
    monkeypatch.setattr(tiny_pipeline.asr, "_first_pass", original)
    code, _, err = run_cli(*args)
    assert code == 0 and "1 chunk resumed" in err, err
    assert json.loads((out / "short.json").read_text())["segments"]
    assert not list(out.glob(".*partial*")), "the checkpoint outlives the outputs"


def test_progress_bar_shows_audio_seconds_and_time_left(capsys):
    """The time left is the rate of this run's decoding: 3600 s of audio in 100 s leaves 300 s for the
    other 10800; after a resume to 50 %, the replayed half does not count as speed."""
    from specwhisper.serving.cli.main import _Progress

    bar = _Progress("talk.mp3", enabled=True, seconds=14400)
    bar("transcribe", 0.0)
    bar.bar.start_t -= 100  # as if 100 s went by
    bar("transcribe", 0.25)
    assert "3600/14400 s audio [01:40<05:00]" in capsys.readouterr().err
    bar("resume", 0.5)
    bar("transcribe", 0.5)
    bar.bar.start_t -= 100
    bar("transcribe", 0.75)
    bar.close()
    assert "10800/14400 s audio [01:40<01:40]" in capsys.readouterr().err
    percent = _Progress("stream", enabled=True)  # no length known: percent
    percent("vad", 0.5)
    percent.close()
    assert "stream vad:  50%|" in capsys.readouterr().err


def test_checkpoint_of_another_run_is_not_reused(tmp_path):
    path = tmp_path / ".x.partial.jsonl"
    ChunkCheckpoint.open(path, "a")._write('{"batch": [], "prompt": [], "chunks": [], "stats": {}}\n')
    assert len(ChunkCheckpoint.open(path, "a").records) == 1
    assert len(ChunkCheckpoint.open(path, "b").records) == 0
    assert len(ChunkCheckpoint.open(path, "a").records) == 0  # "b" started the file anew


def test_a_batch_replays_with_the_text_its_redecodes_may_replace(tmp_path):
    """What a decoded batch hands on (the stretches queued again, each with the thin segment, the text
    after a dropped hallucination it may replace or the text dated before it, and whether each attempt
    ended in a loop and passed its checks) comes back from the journal as it went in."""
    from specwhisper.asr.decoding.quality import Attempt
    from specwhisper.asr.decoding.greedy import SequenceResult
    from specwhisper.asr.redecode import Standing
    from specwhisper.audio.chunking import Chunk
    from specwhisper.results.stats import DecodeStats
    from specwhisper.results.transcript import Segment, Word

    chunk = Chunk(0, 30 * 16000, ((0, 5 * 16000),))
    own = Segment(0.5, 4.0, " own", words=[Word(0.5, 4.0, " own", 0.9)], tokens=[7])
    after = Segment(25.5, 29.0, " after", words=[Word(25.5, 29.0, " after", 0.8)], tokens=[8])
    again = [(chunk.part(8 * 16000, 30 * 16000), Standing([after], "after hallucination")),
             (chunk.part(0, 4 * 16000), Standing([own], "thin")), (chunk.part(5 * 16000, 8 * 16000), Standing([own], "earlier", chunk)),
             (chunk.part(29 * 16000, 30 * 16000), None)]
    attempt = Attempt(SequenceResult([7, 8], -2.0, 0.1), 0.4, 1.2, loops=True, passed=False)
    path = tmp_path / ".x.partial.jsonl"
    ChunkCheckpoint.open(path, "k").record([(0, chunk)], [1, 2], [[own]], [again], [attempt], DecodeStats())
    per_chunk, back, attempts, _ = ChunkCheckpoint.open(path, "k").replay([(0, chunk)], [1, 2])
    assert per_chunk == [[own]] and attempts == [attempt]
    assert [(c.start, c.end, c.depth, s) for c, s in back[0]] == [(c.start, c.end, c.depth, s) for c, s in again]
    assert back[0][1][1].segments[0] is per_chunk[0][0]  # a chunk's own thin segment is that very segment
    assert back[0][2][1].segments[0] is per_chunk[0][0] and back[0][2][1].window == chunk  # the text dated before, its window


def test_an_interrupted_call_resumes_every_channel(tiny_pipeline, manifest, tmp_path, monkeypatch):
    """``multichannel``: the checkpoint keeps the batches of all the call's channels (one pass decodes
    them); the resumed call equals the uninterrupted one, channel by channel, and the same samples read
    as another layout (channels swapped, or one waveform) find none of its records."""
    from specwhisper.evaluation.calls import build_call

    call = build_call(manifest)
    opts = RunOptions(decode=DecodeOptions(language="en", batch_size=1, word_timestamps=True), multichannel=True)
    decoded = _count_decoded(monkeypatch, tiny_pipeline.asr)
    whole = tiny_pipeline.run(call.channels, opts)
    batches = len(decoded)
    assert batches >= 2 and whole.speakers == ["CHANNEL_1", "CHANNEL_2"], batches
    monkeypatch.undo()

    ckpt = tmp_path / ".call.partial.jsonl"
    _interrupt_second_batch(monkeypatch, tiny_pipeline.asr, Stop)
    with pytest.raises(Stop):
        tiny_pipeline.run(call.channels, opts, checkpoint=ckpt)
    monkeypatch.undo()
    assert _records(ckpt) == 1
    probe = tmp_path / "probe.jsonl"
    mono = RunOptions(decode=opts.decode)
    for audio, other, expected in [(call.channels, opts, 1), (call.channels[::-1], opts, 0), (call.channels.reshape(1, -1), opts, 0),
                                   (call.channels.reshape(-1), mono, 0)]:
        shutil.copy(ckpt, probe)
        assert len(tiny_pipeline._journal(probe, audio, other).records) == expected

    decoded = _count_decoded(monkeypatch, tiny_pipeline.asr)
    again = tiny_pipeline.run(call.channels, opts, checkpoint=ckpt)
    assert again.stats.resumed_chunks == 1 and len(decoded) == batches - 1
    assert again.segments == whole.segments and again.speakers == whole.speakers
    assert render(again, "srt") == render(whole, "srt")
    assert _records(ckpt) == batches


def test_a_file_of_a_folder_resumes_where_it_stopped(run_cli, tiny_pipeline, long_file, tmp_path, monkeypatch):
    """A batch folder (the local engine): a file its group holds alone keeps its finished batches beside its
    outputs, so the interrupted batch resumes inside it; the outputs equal an uninterrupted batch's and the
    checkpoint goes once they are written. The long file's first 20 s: two chunks, a batch each."""
    import soundfile as sf

    folder = tmp_path / "in"
    folder.mkdir()
    audio, rate = sf.read(long_file.path, dtype="float32")
    sf.write(folder / "short.wav", audio[: 20 * rate], rate)
    args = ["-m", "tiny.en", "-f", "json", "--batch-size", "1", "--language", "en", "-q"]
    code, _, err = run_cli(folder, "-o", tmp_path / "whole", *args)
    assert code == 0, err
    out = tmp_path / "out"
    original = tiny_pipeline.asr._first_pass
    _interrupt_second_batch(monkeypatch, tiny_pipeline.asr, KeyboardInterrupt)
    code, _, err = run_cli(folder, "-o", out, *args)
    assert code == 130 and "run the same command again to resume" in err, err
    assert _records(out / ".short.partial.jsonl") == 1
    monkeypatch.setattr(tiny_pipeline.asr, "_first_pass", original)  # run_cli's own patch stays
    code, _, err = run_cli(folder, "-o", out, *args)
    assert code == 0, err
    resumed, whole = (json.loads((o / "short.json").read_text()) for o in (out, tmp_path / "whole"))
    assert resumed["speculative"]["resumed_chunks"] == 1 and whole["speculative"]["resumed_chunks"] == 0
    assert resumed["segments"] == whole["segments"]
    assert not list(out.glob(".*partial*")), "the checkpoint outlives the outputs"
