"""Models unloaded when idle (``ServiceSettings.model_ttl_s``, the server's SPECWHISPER_MODEL_TTL, app.py's
--model-ttl): with the embedded Whisper tiny.en on jfk.wav, the weights really leave memory, the next request
gets the same transcript, a pass keeps its model however long it runs, and a live stream's engine is handed
back instead of a second copy."""

from __future__ import annotations

import time
import weakref

import pytest

from specwhisper.audio.loading import load_audio
from specwhisper.serving.endpoint.contract import settings_from_env
from specwhisper.serving.params import Choices, parse_params
from specwhisper.serving.service import PipelinePool, ServiceSettings

CHOICES = Choices(models=("tiny.en",), drafters=("none",))


@pytest.fixture(scope="module")
def jfk(eval_root):
    return load_audio(eval_root / "whisper.cpp/jfk.wav")


def _pool(ttl_s: float | None) -> tuple[PipelinePool, object]:
    pool = PipelinePool(ServiceSettings(choices=CHOICES, model_ttl_s=ttl_s))
    return pool, parse_params({}, CHOICES)


def _weights(pool: PipelinePool) -> weakref.ref:
    (pipeline,) = pool._pipelines.values()
    return weakref.ref(pipeline.asr.bundle.model)


def _gone(ref: weakref.ref, within_s: float = 15.0) -> bool:
    end = time.monotonic() + within_s
    while ref() is not None and time.monotonic() < end:
        time.sleep(0.1)
    return ref() is None


def _unloaded(pool: PipelinePool, within_s: float = 15.0) -> bool:
    """Whether the pool lists nothing within ``within_s`` (it lists a model until its memory is freed)."""
    end = time.monotonic() + within_s
    while pool.loaded() and time.monotonic() < end:
        time.sleep(0.1)
    return pool.loaded() == []


def test_an_idle_model_leaves_memory_and_comes_back_the_same(jfk):
    pool, params = _pool(0.5)
    first = pool.transcribe(jfk, params)
    assert "ask not what your country can do for you" in first.text
    weights = _weights(pool)
    assert _unloaded(pool) and pool.idle_seconds() == []
    assert weights() is None, "the idle model's weights are still in memory"
    again = pool.transcribe(jfk, params)
    assert [s.tokens for s in again.segments] == [s.tokens for s in first.segments]
    assert pool.loaded() == [("tiny.en", "none")]


def test_a_pass_keeps_its_model_however_long_it_runs(jfk):
    """A TTL shorter than the pass: the model stays through it, and its idle time starts at the pass's end."""
    pool, params = _pool(0.2)
    seen: list[list] = []

    def progress(stage: str, fraction: float) -> None:
        seen.append(pool.loaded())
        time.sleep(0.1)

    pool.transcribe_many([jfk, jfk, jfk], params, progress)
    assert len(seen) > 4 and all(loaded == [("tiny.en", "none")] for loaded in seen[1:]), seen
    assert all(idle < 0.2 for _, _, idle in pool.idle_seconds())  # counted from the end, not from the start
    weights = _weights(pool)
    assert _unloaded(pool) and weights() is None


def test_a_live_streams_engine_is_handed_back_not_loaded_twice(jfk):
    pool, params = _pool(0.3)
    engine = pool.engine(params)  # what a live stream holds while it runs
    assert _unloaded(pool)
    assert pool.engine(params) is engine  # its weights were not loaded again beside the live stream's
    weights = weakref.ref(engine.bundle.model)
    del engine
    assert _gone(weights)  # once the stream and the pool let go


def test_without_a_ttl_a_model_stays(jfk):
    pool, params = _pool(None)
    pool.transcribe(jfk, params)
    time.sleep(0.5)
    assert pool.loaded() == [("tiny.en", "none")]
    weights = _weights(pool)
    assert pool.unload("tiny.en") == ["none"]
    assert pool.loaded() == [] and weights() is None
    assert pool.unload("tiny.en") == []


@pytest.mark.parametrize("value, expected", [("300", 300.0), ("0", 0.0), ("-1", None), (None, None)])
def test_the_ttl_setting(value, expected):
    env = {} if value is None else {"SPECWHISPER_MODEL_TTL": value}
    assert settings_from_env(env).model_ttl_s == expected


@pytest.mark.parametrize("value, message", [
    ("five", "SPECWHISPER_MODEL_TTL must be a number, got 'five'"),
    ("-5", "SPECWHISPER_MODEL_TTL is seconds a model may stay idle before it is unloaded (-1: never), got -5"),
    ("nan", "SPECWHISPER_MODEL_TTL is seconds a model may stay idle before it is unloaded (-1: never), got nan"),
])
def test_a_bad_ttl_setting_is_one_line(value, message):
    with pytest.raises(ValueError) as info:
        settings_from_env({"SPECWHISPER_MODEL_TTL": value})
    assert str(info.value) == message
    with pytest.raises(ValueError, match="0 s or more"):
        ServiceSettings(model_ttl_s=-5)
