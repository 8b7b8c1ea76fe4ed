import os
import sys
from pathlib import Path

import pytest

# Tests never reach a model hub: everything loads from local files or is built offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread in every process the suite starts (its workers and each `python -m grpo` they
# launch inherit this): three workers and their children share two cores, and OpenMP threads that
# spin waiting for a busy core burned ~3x the CPU of the work itself (a default evaluation of the
# tiny model beside the suite: 22.9 s of CPU on two threads, 7.9 s on one). A test that needs
# more threads sets them itself.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# Bytecode is written even where the shell says not to (PYTHONDONTWRITEBYTECODE): the suite starts
# some 200 Python processes that import grpo, and each would compile its modules again (the 89 a
# training run imports: 0.28 s of CPU per process).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny model's ops are too small for intra-op threads to pay off, and on a busy 2-core
    machine OpenMP threads waiting for each other make it several times slower. Modules that run
    the model use this (pytestmark); the previous thread count is restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The suite runs on three workers that each take whole files (`-n 3 --dist loadfile`, README). Files
# are handed out in this order, the heaviest first (seconds of a full run on 2 cores, 2026-12-05),
# so that the workers finish together: by default xdist orders files by their number of tests,
# which left the heaviest few-test files (outages, launchers) running alone at the end.
HEAVY_FIRST = (
    "test_interrupt_resume.py",
    "test_sweeps.py",
    "test_readme_commands.py",
    "test_tracking_outage.py",
    "test_distributed.py",
    "test_cli.py",
    "test_train_ahead.py",
    "test_tracking.py",
    "test_reward_model_rounds.py",
    "test_envs_verifiers_v1.py",
    "test_evaluate_run.py",
    "test_examples.py",
    "test_models.py",
    "test_memory_plan.py",
    "test_collapse.py",
    "test_api.py",
)
_missing = [name for name in HEAVY_FIRST if not (Path(__file__).parent / name).is_file()]
assert not _missing, f"tests/conftest.py HEAVY_FIRST names files that are gone: {_missing}"


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # xdist is loaded: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))  # stable: in-file order kept


@pytest.fixture
def in_process_root(tmp_path, monkeypatch):
    """The output root of runs started in this process (grpo.run / grpo.compose): a folder of the
    test's own, offline."""
    monkeypatch.setenv("GRPO_OUTPUT_ROOT", str(tmp_path / "out"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "out"
