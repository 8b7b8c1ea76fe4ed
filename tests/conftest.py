import os

import pytest

# Tests never reach a model hub: everything loads from local files or is built offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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
