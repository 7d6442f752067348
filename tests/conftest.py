"""Shared fixtures: real models (loaded once per session) and the public eval set."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Mapping, Sequence

import pytest

from specwhisper.hardware.threads import configure  # the process's thread policy, before torch is imported

from specwhisper.evaluation.transcripts import eval_dir, load_manifest  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
# `make test` runs two pytest-xdist workers, a file each: one torch thread apiece (the suite's small
# operations keep a second thread of one process only partly busy: test_speculative 320 s on 2 threads at
# 122% CPU, 304 s on one)
configure(max(1, 2 // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

# The heaviest files first (their summed test seconds on the 2-core CI machine, heaviest first): the
# workers take whole files in collection order (``--no-loadscope-reorder``; xdist's own order is by
# the number of tests, which put files of a few long tests last, one worker running them alone at the end)
HEAVY_FIRST = ("test_fallback.py", "test_speculative.py", "test_fixed_shape.py", "test_no_lost_speech.py",
               "test_openai_api.py", "test_streaming.py", "test_batch.py", "test_app.py", "test_large_shapes.py",
               "test_handler.py", "test_hallucination.py", "test_batched_speculation.py", "test_postedit.py",
               "test_cli.py", "test_realtime_ws.py", "test_transcribe.py", "test_between_batches.py",
               "test_diarize.py", "test_int8.py", "test_early_exit.py", "test_api.py", "test_text_alignment.py",
               "test_resume.py", "test_convert.py", "test_multilingual.py", "test_jobs.py", "test_app_live.py",
               "test_live_ws.py", "test_scheduling.py", "test_auto_draft.py", "test_beam.py", "test_http_overtake.py",
               "test_suppress.py", "test_abuse.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept


@pytest.fixture(scope="session")
def eval_root():
    """The public evaluation audio (MANIFEST.tsv and the files it lists). Every test that reads it asks for
    this fixture, so a checkout without it skips those tests, with the reason, and runs the rest."""
    root = eval_dir()
    if not (root / "MANIFEST.tsv").exists():
        pytest.skip(f"no evaluation audio at {root}: put the shared eval folder there (../shared/eval beside "
                    "the checkout) or set SPECWHISPER_EVAL_DIR")
    return root


@pytest.fixture(scope="session")
def manifest(eval_root):
    return load_manifest(eval_root)


@pytest.fixture(scope="session")
def base_engine():
    from specwhisper.asr.engine import AsrEngine

    return AsrEngine("base")


@pytest.fixture
def unpacked():
    """Within a test: every float32 engine, runtime and drafter it makes has plain ``F.linear`` products
    (``tests.exactness.plain_float32_products``)."""
    from tests.exactness import plain_float32_products

    with plain_float32_products():
        yield


@pytest.fixture(scope="session")
def unpacked_engine():
    """base in float32 with plain ``F.linear`` products (``tests.exactness.plain_float32_products``): the
    fixed-shape mode."""
    from specwhisper.asr.engine import AsrEngine
    from tests.exactness import plain_float32_products

    with plain_float32_products():
        return AsrEngine("base")


@pytest.fixture(scope="session")
def unpacked_tiny_engine():
    """tiny.en in float32 with plain ``F.linear`` products: the fixed-shape mode."""
    from specwhisper.asr.engine import AsrEngine
    from tests.exactness import plain_float32_products

    with plain_float32_products():
        return AsrEngine("tiny.en")


@pytest.fixture(scope="session")
def tiny_engine():
    from specwhisper.asr.engine import AsrEngine

    return AsrEngine("tiny.en")


class Windows(Sequence):
    """Per public file, in the manifest's order: (item, features, encoder output, prompt) of its first 30 s
    window, made when first asked for (a worker running only some of the exactness files encodes only the
    windows they read: base's encoder takes 1.2 s a window on one thread, 36 s for all 30)."""

    def __init__(self, engine, items):
        self.engine, self.items, self._made = engine, list(items), {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]  # a negative index counts from the end; past the end, IndexError
        if i not in self._made:
            from specwhisper.audio.loading import load_audio

            e, item = self.engine, self.items[i]
            audio = load_audio(item.path)[: 30 * 16000]
            feats = e.bundle.feature_extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
            self._made[i] = (item, feats, e.encoder.encode(feats), e.special.prompt(item.language or "en", "transcribe", timestamps=True))
        return self._made[i]

    def of(self, file: str):
        return self[next(i for i, item in enumerate(self.items) if item.file == file)]

    def english(self, n: int | None = None) -> list:
        """The first ``n`` English files' windows (all of them when ``n`` is None)."""
        return [self[i] for i in [i for i, item in enumerate(self.items) if (item.language or "en") == "en"][:n]]


class PlainReference(Mapping):
    """Plain greedy decode of each window, by file, made when first asked for: what every speculative
    decode must reproduce."""

    def __init__(self, engine, windows: Windows):
        self.engine, self.windows, self._made = engine, windows, {}

    def __getitem__(self, file: str):
        if file not in self._made:
            _, _, enc, prompt = self.windows.of(file)
            self._made[file] = self.engine.decoder.decode(enc, prompt).sequences[0]
        return self._made[file]

    def __iter__(self):
        return (item.file for item in self.windows.items)

    def __len__(self) -> int:
        return len(self.windows)


@pytest.fixture(scope="session")
def windows(base_engine, manifest):
    """The public files' first windows (``Windows``), shared by the exactness tests of every drafter."""
    return Windows(base_engine, manifest)


@pytest.fixture(scope="session")
def plain_reference(base_engine, windows):
    return PlainReference(base_engine, windows)


@pytest.fixture(scope="session")
def faster_whisper_base(tmp_path_factory):
    """faster-whisper (CTranslate2, float32 on the CPU) on the embedded base weights."""
    faster_whisper = pytest.importorskip("faster_whisper")
    from specwhisper.asr.weights.loader import write_ct2_folder

    folder = write_ct2_folder("base", tmp_path_factory.mktemp("ct2"))
    return faster_whisper.WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2)


@pytest.fixture(scope="session")
def base_pipeline(base_engine):
    """A plain-decoding pipeline sharing the session's base engine."""
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.pipeline.config import PipelineConfig

    return Pipeline(PipelineConfig(model="base", draft="none"), asr=base_engine)


@pytest.fixture(scope="session")
def tiny_pipeline(tiny_engine):
    """A plain-decoding pipeline on the session's tiny.en engine, for checks of the pipeline's bookkeeping
    rather than of base's transcripts (on test_resume's 2.5 minutes with words, about 3x faster than base)."""
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.pipeline.config import PipelineConfig

    return Pipeline(PipelineConfig(model="tiny.en", draft="none"), asr=tiny_engine)


@pytest.fixture
def sampler_seed(monkeypatch):
    """Call it with a seed: the temperature fallback's samplers made after it draw from that seed
    (the engine's own are seeded with 0), for outcomes that ride on the draws."""
    from functools import partialmethod

    from specwhisper.asr.decoding.greedy import SamplingDecoder

    init = SamplingDecoder.__init__

    def use(seed: int) -> None:
        monkeypatch.setattr(SamplingDecoder, "__init__", partialmethod(init, seed=seed))

    return use


@pytest.fixture(scope="session")
def diarizer():
    """The embedded offline diarization pipeline with the stored tuned parameters."""
    from specwhisper.diarize.pipeline import load_diarizer

    return load_diarizer()


@pytest.fixture
def run_cli(base_pipeline, tiny_pipeline, monkeypatch, capsys):
    """Run the CLI in-process with the session's already loaded pipeline (files, and folders on the
    local engine): ``-m tiny.en`` the session's tiny.en pipeline, any other model base's; returns
    (exit code, stdout, stderr)."""
    import specwhisper.serving.cli.main as cli
    import specwhisper.pipeline.core

    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline",
                        lambda config: tiny_pipeline if config.model == "tiny.en" else base_pipeline)

    def run(*argv):
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def cli_run(run_cli, capsys):
    """``run_cli`` for arguments it may refuse: (exit code, stdout, stderr), argparse's own refusals
    (its SystemExit before anything runs) included."""

    def run(*argv):
        try:
            return run_cli(*argv)
        except SystemExit as exc:
            return (exc.code, *capsys.readouterr())

    return run


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nobody can create files in (root too: the immutable attribute)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() == 0:
        undo = ["chattr", "-i", str(folder)]
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("running as root without chattr +i: no folder is unwritable")
    else:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    try:
        yield folder
    finally:
        subprocess.run(undo, check=True)


@pytest.fixture
def file_spans_only(monkeypatch):
    """The engine plans chunks from the VAD's one pass over the file: its pauses are not heard again
    alone and no level step starts a chunk (``VoiceActivityDetector.rehear``, ``chunking.join_heard``,
    ``merge_spans``). For the re-decode and fallback rules' own cases on the built files, which that
    planning keeps from arising there, and which a voice the VAD misses even alone still meets."""
    import specwhisper.asr.engine as engine
    import specwhisper.audio.chunking as chunking

    monkeypatch.setattr(engine, "join_heard", lambda spans, *_: spans)
    monkeypatch.setattr(chunking, "LEVEL_STEP_DB", float("inf"))
