"""The thread policy (specwhisper.hardware.threads): passive OpenMP waiting from the first import, --threads honoured."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from specwhisper.pipeline.core import Pipeline
from specwhisper.pipeline.config import PipelineConfig
from specwhisper.evaluation.transcripts import REPO_ROOT


@pytest.mark.parametrize("env, expected", [({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE")])
def test_wait_policy_set_before_torch(env, expected):
    """Importing the package sets passive OpenMP waiting before torch loads (a user's choice wins)."""
    code = "import os, specwhisper, torch; print(os.environ['OMP_WAIT_POLICY'])"
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, env={**base, **env})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


def test_pipeline_applies_threads(base_pipeline):
    before = torch.get_num_threads()
    try:
        Pipeline(PipelineConfig(threads=1), asr=base_pipeline.asr)
        assert torch.get_num_threads() == 1
        with pytest.raises(ValueError, match="threads must be >= 1"):
            Pipeline(PipelineConfig(threads=0), asr=base_pipeline.asr)
    finally:
        torch.set_num_threads(before)


def test_endpoint_threads_setting():
    from specwhisper.serving.endpoint.contract import settings_from_env

    assert settings_from_env({"SPECWHISPER_THREADS": "3"}).base.threads == 3
    assert settings_from_env({}).base.threads is None
    with pytest.raises(ValueError, match="SPECWHISPER_THREADS"):
        settings_from_env({"SPECWHISPER_THREADS": "two"})
