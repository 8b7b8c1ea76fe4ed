"""The seam between grpo and TRL (grpo/trl_adapter/).

The pin: every TRL internal grpo/trl_adapter/internals.py relies on, checked against the installed
TRL on a real GRPOTrainer built the way grpo builds one (tiny model, one training step); a failure
is one message naming what moved and the TRL version, and the checker reports a planted wrong
name. The fused log-prob head: it scores only labelled positions on CPU, with the SFT loss, its
token metrics and the gradients of the full projection, and both trainers turn the switch on."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch
import trl
from test_train import small_cfg
from transformers import TrainerCallback

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.models import load_policy
from grpo.sft.data import env_demonstrations
from grpo.sft.train import build_sft_trainer, prepare_examples
from grpo.train.monitors import PREFIX as MONITOR_PREFIX
from grpo.train.trainer import build_trainer
from grpo.trl_adapter import internals
from grpo.trl_adapter.devices import score_labelled_positions_on_cpu
from grpo.trl_adapter.internals import fused_head_switch, set_fused_head_switch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CPU = torch.device("cpu")
GRPO_COLUMNS = (internals.EPISODE_COLUMN, internals.LANGUAGE_COLUMN, internals.MODEL_TOKENS_COLUMN)


# ---- the pin -----------------------------------------------------------------------------------


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _sets(source: str, name: str) -> bool:
    """Whether a class's source assigns `self.<name>` or defines the method `name`."""
    return re.search(rf"self\.{re.escape(name)}\s*[:=]|def {re.escape(name)}\(", source) is not None


def moved_internals(
    trainer: Any,
    logged: Mapping[str, float],
    *,
    modules: Mapping[str, Sequence[str]] = internals.MODULE_NAMES,
    keywords: Mapping[str, Sequence[str]] = internals.CALL_KEYWORDS,
    trainer_attributes: Sequence[str] = internals.TRAINER_ATTRIBUTES,
    vllm_trainer_attributes: Sequence[str] = internals.VLLM_TRAINER_ATTRIBUTES,
    engine_attributes: Sequence[str] = internals.VLLM_ENGINE_ATTRIBUTES,
    record_keys: Sequence[str] = internals.RECORD_KEYS,
    extra_columns: Sequence[str] = GRPO_COLUMNS,
) -> list[str]:
    """What moved, one phrase each: `trainer` is a GRPOTrainer after one training step (grpo's
    rubric adapter among its reward functions), `logged` the metrics it logged at that step."""
    moved: list[str] = []
    for module, names in modules.items():
        try:
            loaded = importlib.import_module(module)
        except ImportError as ex:
            moved.append(f"module {module} is gone ({ex})")
            continue
        moved += [f"{module}.{name} is gone" for name in names if not hasattr(loaded, name)]
    for path, params in keywords.items():
        try:
            taken = inspect.signature(_resolve(path)).parameters
        except (ImportError, AttributeError):
            continue  # reported above
        lost = [p for p in params if p not in taken]
        if lost:
            moved.append(f"{path} no longer takes {', '.join(lost)}")
    cls = type(trainer)
    moved += [f"{cls.__name__}.{name} is gone" for name in trainer_attributes if not hasattr(trainer, name)]
    init = inspect.getsource(cls.__init__)
    moved += [
        f"{cls.__name__}.__init__ no longer sets {name} (use_vllm)"
        for name in vllm_trainer_attributes
        if not _sets(init, name)
    ]
    try:
        engine = inspect.getsource(_resolve("trl.generation.vllm_generation.VLLMGeneration"))
    except (ImportError, AttributeError):
        engine = None  # reported above
    if engine is not None:
        moved += [f"VLLMGeneration.{name} is gone" for name in engine_attributes if not _sets(engine, name)]
    record = getattr(trainer, "_logs", None)
    if isinstance(record, Mapping):
        moved += [f"{cls.__name__}._logs has no {key!r} key" for key in record_keys if key not in record]
        extra = record.get("extra", {})
        lost = [c for c in extra_columns if c not in extra]
        if lost:
            moved.append(
                f"reward functions' `{internals.LOG_EXTRA_KWARG}` no longer fills {cls.__name__}._logs"
                f"['extra'] ({', '.join(lost)} missing)"
            )
    if not any(k.startswith("rewards/") and k.endswith("/errors") for k in logged):
        moved.append(f"reward functions' `{internals.LOG_METRIC_KWARG}` no longer reaches the step's metrics")
    if not any(k.startswith(MONITOR_PREFIX) for k in logged):
        moved.append(f"{cls.__name__}._log_metric no longer reaches the step's metrics")
    return moved


def pin_message(moved: Sequence[str]) -> str:
    return f"TRL {trl.__version__}: what grpo/trl_adapter/internals.py relies on moved: {'; '.join(moved)}"


class _Logged(TrainerCallback):
    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.metrics.update(logs)


@pytest.fixture(scope="module")
def stepped(tmp_path_factory):
    """A GRPOTrainer built by grpo (tiny model, char_target) after one training step, and the
    metrics it logged."""
    settings = small_cfg("char_target")  # the GRPO tests' quick step
    logged = _Logged()
    bundle = build_trainer(
        settings,
        build_env(settings.env, settings.language),
        tmp_path_factory.mktemp("pin"),
        callbacks=[logged],
    )
    bundle.trainer.train()
    return bundle.trainer, logged.metrics


def test_the_trl_internals_grpo_relies_on_are_where_it_reads_them(stepped):
    trainer, logged = stepped
    moved = moved_internals(trainer, logged)
    assert not moved, pin_message(moved)
    batch = internals.completions_record(trainer)  # what the completions table reads
    assert batch is not None and batch.names == list(trainer.reward_func_names)
    assert len(batch.record["prompt"]) == 8 and len(batch.record["extra"][internals.EPISODE_COLUMN]) == 8


def test_the_checker_names_what_moved_and_the_trl_version(stepped):
    """Planted wrong names, one of each kind: each is reported, in one message."""
    trainer, logged = stepped
    moved = moved_internals(
        trainer,
        {},  # a step that logged neither a reward function's nor the trainer's own metric
        modules={"trl.models": ("unwrap_model_for_generation", "unwrap_model_v9"), "trl.nope": ("x",)},
        keywords={"trl.models.unwrap_model_for_generation": ("model", "gather_params_v9")},
        trainer_attributes=("_logs", "_logs_v9"),
        vllm_trainer_attributes=("vllm_generation", "_last_synced_v9"),
        engine_attributes=("sync_weights", "sync_v9"),
        record_keys=("prompt", "prompts_v9"),
        extra_columns=(internals.EPISODE_COLUMN, "episode_v9"),
    )
    assert moved == [
        "trl.models.unwrap_model_v9 is gone",
        "module trl.nope is gone (No module named 'trl.nope')",
        "trl.models.unwrap_model_for_generation no longer takes gather_params_v9",
        "GRPOTrainer._logs_v9 is gone",
        "GRPOTrainer.__init__ no longer sets _last_synced_v9 (use_vllm)",
        "VLLMGeneration.sync_v9 is gone",
        "GRPOTrainer._logs has no 'prompts_v9' key",
        "reward functions' `log_extra` no longer fills GRPOTrainer._logs['extra'] (episode_v9 missing)",
        "reward functions' `log_metric` no longer reaches the step's metrics",
        "GRPOTrainer._log_metric no longer reaches the step's metrics",
    ]
    message = pin_message(moved)
    assert message.startswith(f"TRL {trl.__version__}: ") and "\n" not in message


# ---- the fused LM head on CPU ----------------------------------------------------------------------


@pytest.fixture
def full_head():
    """TRL's own switch for the duration of a test (the patch is process-wide and idempotent)."""
    saved = fused_head_switch()
    original = saved
    while getattr(original, "_grpo_compact_on_cpu", False):
        original = original.__wrapped__
    set_fused_head_switch(original)
    yield original
    set_fused_head_switch(saved)


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model(**batch, fused_lm_head=True)
    mask = batch["labels"][:, 1:] != -100
    loss = -out.log_probs.sum() / mask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, loss.item(), grads


def test_compact_scoring_equals_the_full_projection(tmp_path, full_head):
    settings = load_settings(["+env=alphabet_sort", "sft.num_examples=8", "sft.max_steps=1"])
    env = build_env(settings.env, settings.language)
    model, tokenizer = load_policy(settings.model)
    examples = prepare_examples(settings, env, env_demonstrations(env, 8), model, tokenizer)
    assert not full_head(CPU)  # TRL alone projects every position on CPU
    trainer = build_sft_trainer(settings, model, tokenizer, examples, tmp_path / "ck")
    assert fused_head_switch()(CPU)  # building the SFT trainer turned the compact path on
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(examples))])
    labelled = (batch["labels"][:, 1:] != -100).float().mean().item()
    assert 0.05 < labelled < 0.6  # prompts and padding are most of the positions

    compact_out, compact_loss, compact_grads = _loss_and_grads(model, batch)
    set_fused_head_switch(full_head)
    full_out, full_loss, full_grads = _loss_and_grads(model, batch)

    assert compact_loss == pytest.approx(full_loss, rel=1e-5)
    assert torch.allclose(compact_out.log_probs, full_out.log_probs, atol=1e-5)
    assert torch.equal(compact_out.label_mask, full_out.label_mask)
    assert compact_grads.keys() == full_grads.keys() and len(full_grads) > 10
    for name, grad in full_grads.items():
        assert torch.allclose(compact_grads[name], grad, atol=1e-6, rtol=1e-4), name


def test_the_switch_is_idempotent(full_head):
    assert score_labelled_positions_on_cpu() and score_labelled_positions_on_cpu()
    switch = fused_head_switch()
    assert switch.__wrapped__ is full_head  # wrapped once, not twice
    assert switch(CPU) and switch(torch.device("meta")) == full_head(torch.device("meta"))
