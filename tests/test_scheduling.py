"""The order in which chunks are handed out for decoding (specwhisper/asr/scheduling.py); the engine's
results over it are tests/test_no_lost_speech.py's, test_multilingual.py's and test_resume.py's."""

from __future__ import annotations

from specwhisper.asr.scheduling import WorkQueues
from specwhisper.audio.chunking import Chunk


def chunk(k: int, depth: int = 0) -> Chunk:
    return Chunk(k * 16000, (k + 1) * 16000, depth=depth)


def drain(work: WorkQueues) -> list[list[tuple[int, int]]]:
    out = []
    while (batch := work.next_batch()) is not None:
        out.append([(i, c.start // 16000) for i, c in batch])
    return out


def test_files_sharing_a_language_batch_together_and_a_queue_is_emptied_first():
    work = WorkQueues(2, key=lambda item, language: language)
    for i, language in enumerate(["en", "de", "en", "de", "en"]):
        work.add((i, chunk(i)), language)
    assert drain(work) == [[(0, 0), (2, 2)], [(4, 4)], [(1, 1), (3, 3)]]


def test_a_conditioned_file_decodes_in_order_its_skipped_stretch_first():
    work = WorkQueues(1, key=lambda item, language: item[0], in_order=True)
    for k in range(3):
        work.add((0, chunk(k)), "en")
    assert work.next_batch() == [(0, chunk(0))]
    work.again([(0, chunk(7, depth=1))], "en")
    assert [(i, c.start // 16000) for i, c in work.next_batch()] == [(0, 7)]
    assert drain(work) == [[(0, 1)], [(0, 2)]]


def test_chunks_waiting_for_their_language_leave_only_in_full_batches():
    seen = []

    def detect(items):
        seen.append([c.start // 16000 for _, c in items])
        return [(item, "de" if item[1].start // 16000 in (1, 2, 3) else "en") for item in items]

    work = WorkQueues(2, key=lambda item, language: language, detect=detect)
    for k in range(5):
        work.wait((0, chunk(k)))
    first = work.next_batch()
    # detected two at a time until a language fills a batch (0 en, 1 de, then 2 and 3 de): German's
    # first two leave while chunk 0 waits for a second English one
    assert seen == [[0, 1], [2, 3]] and [c.start // 16000 for _, c in first] == [1, 2]
    assert work.language_of[first[0]] == "de"
    assert drain(work) == [[(0, 3)], [(0, 0), (0, 4)]]
    assert seen[-1] == [4]


def test_a_chunk_detect_cuts_in_two_queues_both_parts_with_their_languages():
    """``detect`` may cut a chunk (``--multilingual``: two languages in one window): its parts queue in
    their own languages, the chunk itself not at all."""
    from specwhisper.audio.chunking import Chunk

    whole = Chunk(0, 20 * 16000, ((0, 8 * 16000), (12 * 16000, 20 * 16000)))
    parts = whole.cut([10 * 16000])

    def detect(items):
        return [((0, parts[0]), "en"), ((0, parts[1]), "de")] if items == [(0, whole)] else [(i, "en") for i in items]

    work = WorkQueues(1, key=lambda item, language: language, detect=detect)
    work.wait((0, whole))
    assert drain(work) == [[(0, 0)], [(0, 10)]]
    assert [work.language_of[(0, p)] for p in parts] == ["en", "de"] and (0, whole) not in work.language_of
    assert [p.voiced for p in parts] == [((0, 8 * 16000),), ((12 * 16000, 20 * 16000),)]


def test_chunks_with_the_most_speech_decode_together_with_the_same_text(tiny_engine, manifest, monkeypatch):
    """Six English clips of 1.5 to 12 s in batches of two: the batches leave with the most speech first, so
    a batch's rows write texts of alike lengths and the decode takes fewer steps (a batch steps until
    its longest text ends) than in the files' order, for the same tokens (greedy: a row's tokens do not
    depend on the rows beside it)."""
    from specwhisper.asr import scheduling
    from specwhisper.asr.decoding.quality import QualityRules
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio

    clips = [m for m in manifest if m.language == "en" and m.reference and m.duration <= 30][:6]
    audios = [load_audio(m.path) for m in clips]
    opts = DecodeOptions(language="en", batch_size=2, quality=QualityRules(temperatures=(0.0,)))
    run = tiny_engine._first_pass

    def transcribe() -> tuple[list, list[list[int]], int]:
        speech, steps = [], []

        def recorded(audios, batch, *args, **kwargs):
            out = run(audios, batch, *args, **kwargs)
            speech.append([scheduling._speech(c) for _, c in batch if not c.depth])
            steps.append(max(len(h[0].seq.tokens) + 1 for h in out.failing.history))  # the last step picks the end token
            assert out.stats.decoder_steps == steps[-1]  # the prompt's pass and a step after each token but the last
            return out

        monkeypatch.setattr(tiny_engine, "_first_pass", recorded)
        results = tiny_engine.transcribe_many(audios, opts)
        monkeypatch.setattr(tiny_engine, "_first_pass", run)
        return [[s.tokens for s in r.segments] for r in results], speech, sum(steps)

    tokens, speech, steps = transcribe()
    firsts = [s for s in speech if s]
    assert all(min(a) >= max(b) for a, b in zip(firsts, firsts[1:])), speech
    monkeypatch.setattr(scheduling, "_speech", lambda chunk: 0)  # every chunk alike: the files' order
    in_order, _, steps_in_order = transcribe()
    assert tokens == in_order
    assert steps < steps_in_order, (steps, steps_in_order)


def test_segments_given_as_they_become_final_are_the_transcript(tiny_engine, tmp_path, caplog):
    """``on_final`` (a streamed answer): a 65 s conversation built from the public clips (7 chunks), two
    windows a batch, word timings on. The segments come in several runs while the rest decodes; joined, they are the
    transcript (tokens, times, word times), and that is the transcript without ``on_final`` (the CPU's rows
    are exact whatever the order the chunks decode in). tiny.en: when segments are given does not depend on
    the model."""
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file

    audio = load_audio(build_long_file("speakers", tmp_path, 62, seed=1).path)
    opts = DecodeOptions(language="en", batch_size=2, word_timestamps=True)
    plain = tiny_engine.transcribe_many([audio], opts)[0]
    given: list[tuple[int, list]] = []
    streamed = tiny_engine.transcribe_many([audio], opts, on_final=lambda i, segments: given.append((i, segments)))[0]

    def key(segments):
        return [(s.tokens, s.start, s.end, [(w.start, w.end) for w in s.words]) for s in segments]

    assert len(given) >= 3 and {i for i, _ in given} == {0}, [len(s) for _, s in given]
    assert key([s for _, segments in given for s in segments]) == key(streamed.segments) == key(plain.segments)
    assert "differ" not in caplog.text
