"""The memory plan (grpo/memory/): what it measures follows the settings, a run that cannot fit is
refused in one line before any model loads, plans are cached by settings, and the plan command
reports. How close the plan is to measured peaks is a benchmark (benchmarks/memory_plan.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo

from grpo.compose import load_settings
from grpo.memory.device import GIB
from grpo.memory.plan import _cache_dir, plan_memory
from grpo.models.loading import save_pretrained_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the tiny model (2 layers), a short completion: each plan takes a few seconds
TINY = [
    "+env=alphabet_sort",
    "model=tiny",
    "trainer.max_completion_length=128",
    "generation.max_tokens_per_turn=64",
    "memory.device_gib=80",
]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test plans into a cache of its own."""
    monkeypatch.setenv("GRPO_CACHE_DIR", str(tmp_path / "cache"))


def plan(*overrides):
    return plan_memory(load_settings([*TINY, *overrides]), use_cache=False)


def test_the_plan_measures_what_the_settings_change():
    base = plan("trainer.beta=0")
    train = base.phase("train")
    assert {p.name for p in base.phases} == {"train", "generation", "evaluation"}
    assert base.device.is_gpu and base.device.total_bytes == 80 * GIB
    weights = train.parts["policy weights"]
    # AdamW: two states of each parameter's size (the weights hold a few buffers besides)
    assert weights > 0 and train.parts["optimizer states"] == pytest.approx(2 * weights, rel=0.01)
    assert "reference model" not in train.parts and train.parts["activations"] > 0

    # gradient checkpointing keeps each layer's input only: both settings measured, the step's
    # peak follows the configured one
    checkpointed = plan("trainer.beta=0", "trainer.gradient_checkpointing=true")
    assert base.saved_checkpointed < base.saved_full / 2
    assert (checkpointed.saved_full, checkpointed.saved_checkpointed) == (
        base.saved_full,
        base.saved_checkpointed,
    )
    assert checkpointed.phase("train").total < train.total

    # twice the micro-batch: about twice the activations, the same weights
    double = plan("trainer.beta=0", "trainer.per_device_batch_completions=16")
    assert 1.6 < double.saved_full / base.saved_full < 2.4
    assert double.phase("train").parts["policy weights"] == weights
    # the generation batch (completions per step) sets the KV cache, the micro-batch does not
    more = plan("trainer.beta=0", "trainer.completions_per_step=32")
    assert more.phase("generation").parts["KV cache"] > 3 * base.phase("generation").parts["KV cache"]
    assert more.saved_full == base.saved_full

    # beta > 0 without LoRA: TRL's reference copy of the policy; LoRA: none, and the adapter's states
    reference = plan("trainer.beta=0.04")
    assert reference.phase("train").parts["reference model"] == weights
    lora = plan("trainer.beta=0.04", "model.lora.enabled=true")
    lora_train = lora.phase("train")
    assert "reference model" not in lora_train.parts
    assert lora_train.parts["optimizer states"] < train.parts["optimizer states"] / 4

    # vLLM colocated: its share of the GPU in every train-stage phase
    vllm = plan("trainer.beta=0", "generation=vllm_colocate", "generation.gpu_memory_utilization=0.25")
    assert vllm.phase("train").parts["vLLM share"] == int(0.25 * 80 * GIB)
    assert vllm.phase("generation") is None and vllm.peak.name == "train"


def test_a_plan_is_cached_by_settings_and_a_damaged_entry_is_measured_again(tmp_path):
    settings = load_settings([*TINY, "trainer.beta=0"])
    first = plan_memory(settings)
    assert first is not None and not first.cached
    again = plan_memory(settings)
    assert again.cached and again.peak.total == first.peak.total and again.phases == first.phases
    # another setting, another entry
    other = plan_memory(load_settings([*TINY, "trainer.beta=0", "trainer.per_device_batch_completions=4"]))
    assert not other.cached and other.peak.total != first.peak.total
    entries = sorted(_cache_dir().glob("*.json"))
    assert len(entries) == 2
    for entry in entries:
        entry.write_text("{not json")
    redone = plan_memory(settings)
    assert not redone.cached and redone.peak.total == first.peak.total

    def readable(entry) -> bool:
        try:
            return bool(json.loads(entry.read_text())["phases"])
        except ValueError:
            return False

    # the damaged entry of these settings was written again; the other one is left as it is
    assert sorted(readable(e) for e in _cache_dir().glob("*.json")) == [False, True]


def test_a_run_that_cannot_fit_is_refused_in_one_line_before_any_model_loads(tmp_path):
    """The policy's folder has a config and a damaged weights file: had anything loaded it, the
    error would be about the weights. The refusal names the peak, the largest part and the setting
    to change; no run folder and no MLflow run are left."""
    model_dir = save_pretrained_tiny(
        load_settings(["+env=alphabet_sort", "model=small"]).model, tmp_path / "m"
    )
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    root = tmp_path / "out"
    result = run_grpo(
        [
            "+env=alphabet_sort",
            "model.source=pretrained",
            f"model.path={model_dir}",
            "memory.device_gib=0.5",
            "memory.reserve_gib=0",
        ],
        root=root,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the run does not fit a 0.5 GiB GPU"), lines
    assert "largest part activations" in lines[0] and "trainer.gradient_checkpointing=true" in lines[0]
    assert "Traceback" not in result.stderr and "safetensors" not in result.stderr
    assert not list(root.glob("runs/*/*"))
    db = root / "mlflow.db"
    if db.exists():
        with sqlite3.connect(db) as con:
            assert con.execute("select count(*) from runs").fetchone()[0] == 0

    # the remedy it names: checkpointing fits a device that the run without it does not
    def fits(*overrides):
        settings = ["+env=alphabet_sort", "model=small", "memory.device_gib=1", "memory.reserve_gib=0"]
        return plan_memory(load_settings([*settings, *overrides])).fits

    assert not fits() and fits("trainer.gradient_checkpointing=true")


def test_the_plan_command_and_a_planned_runs_header(tmp_path):
    result = run_grpo(
        [*TINY, "memory.device_gib=0.25", "memory.reserve_gib=0"], module="grpo.cli.memory_plan"
    )
    assert result.returncode == 1, result.stderr[-2000:]
    out = result.stdout
    assert "| phase |" in out and "| train (micro-batch 8 x" in out and "does NOT fit" in out
    assert "largest part:" in out and "no [batch, length, vocabulary] tensor" in out
    assert run_grpo([*TINY, "trainer.max_stepz=1"], module="grpo.cli.memory_plan").returncode == 2

    # a CPU run asks for its plan (memory.plan=true): the header says it, then the run trains
    run = run_grpo(
        [
            "+env=char_target",
            "trainer.max_steps=1",
            "stages=[train]",
            "tracking=none",
            "memory.plan=true",
            "trainer.max_completion_length=16",
            "generation.max_tokens_per_turn=16",
        ],
        root=tmp_path / "out",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    header = [line for line in run.stdout.splitlines() if line.startswith("[memory]")]
    assert header and "the host's memory" in header[0] and "fits" in header[0], run.stdout[:2000]
    assert run.stdout.index("[memory]") < run.stdout.index("[train]")
    assert Path(tmp_path / "out").exists()
