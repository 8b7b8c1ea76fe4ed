"""Trained models in MLflow (tracking.log_model / register_as): a logged policy loads back to the
same greedy tokens (full weights; a LoRA adapter on a random base or on a base dir), lands in its
run's experiment, and one run registers its policy and its reward model."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import pytest
import torch
from mlflow import MlflowClient

from grpo.compose import load_settings
from grpo.models import load_policy, lora_config
from grpo.run.layout import LORA_BASE_DIR
from grpo.stages import run_stages
from grpo.tracking import make_tracker
from grpo.tracking.models import REWARD_MODEL_SUFFIX
from grpo.tracking.store import tracking_uri

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["Sort these names: Zoe, Adam", "hej"]


def _greedy(model: Any, tokenizer: Any) -> list[list[int]]:
    model.eval()
    out = []
    for prompt in PROMPTS:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
        )
        ids = ids if torch.is_tensor(ids) else ids["input_ids"]
        with torch.no_grad():
            out.append(model.generate(input_ids=ids, max_new_tokens=12, do_sample=False)[0].tolist())
    return out


@contextlib.contextmanager
def _store(uri: str) -> Iterator[None]:
    """MLflow's fluent API (loading models) pointed at `uri`, then unset: the next test's runs log
    where their settings say."""
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(None)
        if previous is not None:
            os.environ["MLFLOW_TRACKING_URI"] = previous


def _load(uri: str, model_uri: str) -> dict[str, Any]:
    with _store(uri):
        return mlflow.transformers.load_model(model_uri, return_type="components")


def _lora(model: Any, cfg: Any) -> Any:
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config(type(cfg.model.lora)(enabled=True)))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # a trained adapter: B != 0, so the adapter changes the output
                p.normal_(std=0.5, generator=torch.Generator().manual_seed(1))
    return peft_model


@pytest.mark.parametrize("kind", ["full", "lora_random_base", "lora_base_dir"])
def test_a_logged_policy_loads_back_to_the_same_greedy_tokens(tmp_path, monkeypatch, kind) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may land in the working dir (MLflow's ./mlruns default)
    cfg = load_settings(["+env=alphabet_sort", "tracking=mlflow", f"output_root={tmp_path / 'out'}"])
    model, tokenizer = load_policy(cfg.model)
    start = None
    if kind == "full":
        with torch.no_grad():  # trained weights, not the seeded init a load could rebuild
            model.lm_head.weight.add_(
                torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(2))
            )
    elif kind == "lora_base_dir":
        start = str(tmp_path / "base")
        model.save_pretrained(start)
        tokenizer.save_pretrained(start)
    if kind != "full":
        before = _greedy(model, tokenizer)
        model = _lora(model, cfg)
        assert _greedy(model, tokenizer) != before  # the adapter matters
    expected = _greedy(model, tokenizer)

    run_dir = tmp_path / "out" / "runs" / "r"
    tracker = make_tracker(cfg, run_dir)
    with tracker:
        tracker.log_policy(model, tokenizer, start)
    uri = tracking_uri(cfg)
    client = MlflowClient(uri)
    (logged,) = client.search_logged_models([tracker.experiment_id])
    assert logged.source_run_id == tracker.run_id
    loaded = _load(uri, logged.model_uri if hasattr(logged, "model_uri") else f"models:/{logged.model_id}")
    assert _greedy(loaded["model"], loaded["tokenizer"]) == expected
    assert loaded["tokenizer"].chat_template == tokenizer.chat_template
    assert hasattr(loaded["model"], "peft_config") == (kind != "full")
    # the base of an adapter on a random init is saved once under the run dir; a base dir is referenced
    assert (run_dir / LORA_BASE_DIR / "config.json").is_file() == (kind == "lora_random_base")
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "mlflow.db").exists()
    assert os.environ.get("MLFLOW_TRACKING_URI") is None


@pytest.mark.slow
def test_one_run_registers_its_policy_and_its_reward_model(tmp_path) -> None:
    cfg = load_settings(
        [
            "+env=alphabet_sort",
            "env.max_turns=1",
            "stages=[reward_model,train]",
            "reward_model=learned",
            "reward_model.data.synthetic.n=24",
            "reward_model.training.max_steps=2",
            "model.lora.enabled=true",
            "trainer.num_generations=4",
            "trainer.per_device_batch_completions=8",
            "trainer.max_steps=1",
            "trainer.beta=0",
            "trainer.max_completion_length=24",
            "generation.max_tokens_per_turn=24",
            "tracking=mlflow",
            "tracking.register_as=grpo-e2e",
            f"output_root={tmp_path}",
        ]
    )
    run_dir = tmp_path / "runs" / "e2e"
    run_stages(cfg, run_dir=run_dir)

    uri = tracking_uri(cfg)
    client = MlflowClient(uri)
    (policy,) = client.search_model_versions("name='grpo-e2e'")
    (rm,) = client.search_model_versions(f"name='grpo-e2e{REWARD_MODEL_SUFFIX}'")
    (run,) = client.search_runs([client.get_experiment_by_name("grpo-alphabet_sort").experiment_id])
    assert policy.run_id == rm.run_id == run.info.run_id and run.info.status == "FINISHED"
    assert (int(policy.version), int(rm.version)) == (1, 1)

    # the registered policy is the trained adapter (the last checkpoint's weights) on the random base
    from safetensors.torch import load_file

    loaded = _load(uri, "models:/grpo-e2e/1")
    (checkpoint,) = (run_dir / "checkpoints").glob("checkpoint-*")
    saved = load_file(str(checkpoint / "adapter_model.safetensors"))
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(loaded["model"])
    assert saved and set(saved) == set(state)
    assert all(torch.equal(saved[k], state[k]) for k in saved)

    # the registered reward model scores as the reward model dir does, its calibration in the metadata
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm_loaded = _load(uri, f"models:/grpo-e2e{REWARD_MODEL_SUFFIX}/1")
    rm_dir = run_dir / "reward_model"
    direct = AutoModelForSequenceClassification.from_pretrained(str(rm_dir)).eval()
    tok = AutoTokenizer.from_pretrained(str(rm_dir))
    batch = tok(["<alphabetical_sorted>\nAdam\nZoe\n</alphabetical_sorted>"], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(rm_loaded["model"].eval()(**batch).logits, direct(**batch).logits)
    with _store(uri):
        info = mlflow.models.get_model_info(f"models:/grpo-e2e{REWARD_MODEL_SUFFIX}/1")
    assert "calibration" in info.metadata


def test_register_as_needs_mlflow() -> None:
    from grpo.cli.checks import check
    from grpo.errors import UserError

    settings = load_settings(["+env=alphabet_sort", "tracking=none", "tracking.register_as=x"])
    with pytest.raises(UserError, match="tracking.register_as logs to MLflow: it needs tracking=mlflow"):
        check(settings)


def test_lora_base_is_the_start_dir_when_there_is_one(tmp_path: Path) -> None:
    from grpo.tracking.models import lora_base_path

    (tmp_path / "start").mkdir()
    assert lora_base_path(None, str(tmp_path / "start"), tmp_path / "run") == str(
        (tmp_path / "start").resolve()
    )
    assert lora_base_path(None, "Qwen/Qwen3-0.6B", tmp_path / "run") is None
