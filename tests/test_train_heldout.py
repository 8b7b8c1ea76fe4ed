"""Held-out evaluation during GRPO training and the best checkpoint kept (grpo/train/heldout.py), on the
real tiny model, the real TRL trainer and a real MLflow SQLite store: val/* metrics at the right
steps, held-out rows apart from the evaluation's, the best checkpoint surviving save_total_limit=1,
the final evaluation of both the last and the best policy, and training left undisturbed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from mlflow import MlflowClient
from peft import get_peft_model_state_dict
from safetensors.torch import load_file

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.evaluation.evaluator import RESULTS_FILE, evaluate_rows
from grpo.evaluation.setup import EvalSetup
from grpo.generation import make_backend
from grpo.models import load_policy
from grpo.run.checkpoints import (
    BEST_MARKER,
    best_checkpoint,
    checkpoint_step,
    checkpoints_of,
    is_complete_checkpoint,
)
from grpo.run.layout import MLFLOW_RUN_FILE
from grpo.run.trained import checkpoint_model
from grpo.stages import run_stages
from grpo.tracking.store import metric_curve, tracking_uri
from grpo.train.heldout import heldout_metrics, heldout_rows
from grpo.train.trainer import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# char_target: a dense reward, so validation rewards differ between policies
SMALL = [
    "+env=char_target",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.beta=0",
    "trainer.max_completion_length=12",
    "generation.max_tokens_per_turn=12",
    *TRAIN_ON_CUT_COMPLETIONS,
    "trainer.val_num_examples=3",
    "trainer.val_rollouts_per_example=2",
    "eval.num_examples=3",
    "eval.rollouts_per_example=2",
    "eval.show_examples=false",
    # every step saved: without the best's protection, rotation would delete it
    "trainer.save_steps=1",
    "trainer.save_total_limit=1",
]


def validated_again(cfg, env, model, tokenizer):
    """`model` scored on the validation rows as training validated its policy."""
    return evaluate_rows(
        EvalSetup.of(cfg),
        env,
        heldout_rows(env, cfg.trainer.val_num_examples),
        cfg.trainer.val_rollouts_per_example,
        make_backend(cfg.generation, model, tokenizer, cfg.model),
        None,
    )


def steps_on_disk(run_dir: Path) -> set[int]:
    return {checkpoint_step(c) for c in checkpoints_of(run_dir)}


def test_validation_rows_are_the_end_of_the_eval_split():
    cfg = load_settings(["+env=arithmetic", "env.num_eval_examples=10"])
    env = build_env(cfg.env, cfg.language)
    rows = heldout_rows(env, 3)
    assert [r.id for r in rows] == [7, 8, 9]
    assert [r.prompt for r in rows] == [r.prompt for r in env.rows("eval")[7:]]
    # the evaluation takes the first rows: none in common
    assert not {r.id for r in rows} & {r.id for r in env.rows("eval", cfg.eval.num_examples)}
    assert [r.id for r in heldout_rows(env, 50)] == list(range(10))  # a short split: all of it


def test_validation_and_evaluation_rows_must_not_overlap():
    base = ["+env=alphabet_sort", "trainer.eval_steps=2", "trainer.val_num_examples=8", "eval.num_examples=5"]
    with pytest.raises(
        UserError, match=r"trainer.val_num_examples=8 \+ eval.num_examples=5 exceed env.num_eval_examples=12"
    ):
        check(load_settings([*base, "env.num_eval_examples=12"]))
    check(load_settings([*base, "env.num_eval_examples=13"]))
    check(load_settings([*base, "env.num_eval_examples=12", "stages=[train]"]))  # no evaluation
    check(load_settings([*base[:1], "env.num_eval_examples=2"]))  # no validation


def test_an_env_whose_config_hides_its_eval_size_is_checked_once_built(tmp_path):
    # without env.num_eval_examples in the config the preflight cannot know the split's size (as for
    # a verifiers or third-party env); the env's default holds 100 eval rows
    base = [
        "+env=char_target",
        "~env.num_eval_examples",
        "stages=[eval,train,eval]",
        "trainer.eval_steps=2",
        "trainer.val_num_examples=32",
        "tracking=mlflow",
        f"output_root={tmp_path}",
    ]
    cfg = load_settings([*base, "eval.num_examples=80"])
    check(cfg)  # nothing to check before the env exists
    with pytest.raises(UserError) as caught:
        run_stages(cfg, run_dir=tmp_path / "runs" / "r")
    message = str(caught.value)
    assert "\n" not in message
    assert (
        "trainer.val_num_examples=32 + eval.num_examples=80 exceed the 100 rows of env char_target" in message
    )
    assert "trainer.val_num_examples=25 eval.num_examples=75" in message  # a split that fits
    # refused before any stage ran or any MLflow run was opened
    assert not (tmp_path / "runs" / "r" / "eval_baseline").exists()
    assert not list(tmp_path.glob("mlflow*"))
    # what the message proposes passes
    from grpo.cli.checks import check_built_env

    fits = load_settings([*base, "eval.num_examples=75", "trainer.val_num_examples=25"])
    check_built_env(fits, build_env(fits.env, fits.language))


@pytest.mark.slow
def test_val_metrics_at_steps_2_and_4_and_the_best_checkpoint_evaluated(tmp_path, capsys):
    cfg = load_settings(
        [
            *SMALL,
            "stages=[train,eval]",
            "trainer.max_steps=4",
            "trainer.eval_steps=2",
            "trainer.keep_best=true",
            # a policy that does not move: both validations score the same, the tie keeps step 2
            "optimizer.lr=0",
            "tracking=mlflow",
            f"output_root={tmp_path}",
        ]
    )
    run_dir = tmp_path / "runs" / "r"
    run_stages(cfg, run_dir=run_dir)
    out = capsys.readouterr().out

    client = MlflowClient(tracking_uri(cfg))
    run_id = json.loads((run_dir / MLFLOW_RUN_FILE).read_text())["run_id"]
    val = metric_curve(client, run_id, "val/reward")
    assert [step for step, _ in val] == [2, 4]
    assert val[0][1] == val[1][1]
    assert [s for s, _ in metric_curve(client, run_id, "val/func/target_char_fraction")] == [2, 4]
    assert [s for s, _ in metric_curve(client, run_id, "train/monitor/tokens_per_turn")] == [1, 2, 3, 4]

    # one line per validation; files per validation, on the last rows of the eval split
    assert out.count("[val] step 2 | reward ") == 1 and out.count("[val] step 4 | reward ") == 1
    assert "best so far" in out.split("[val] step 2")[1].splitlines()[0]
    env = build_env(cfg.env, cfg.language)
    records = [
        json.loads(line) for line in (run_dir / "val" / "step_4" / RESULTS_FILE).read_text().splitlines()
    ]
    assert [r["example_id"] for r in records] == [97, 97, 98, 98, 99, 99]
    assert sum(r["reward"] for r in records) / 6 == pytest.approx(val[1][1])
    assert env.num_examples["eval"] == 100

    # the best (step 2) survived save_total_limit=1 next to the last (step 4)
    assert steps_on_disk(run_dir) == {2, 4}
    best = best_checkpoint(run_dir)
    assert best is not None and best.global_step == 2 and best.val_reward == val[0][1]
    assert json.loads((run_dir / "checkpoints" / BEST_MARKER).read_text())["checkpoint"] == "checkpoint-2"

    # the final evaluation reports the last and the best policy (identical weights here)
    metrics = client.get_run(run_id).data.metrics
    assert metrics["eval/best/mean"] == metrics["eval/final/mean"]
    assert (run_dir / "eval_best" / RESULTS_FILE).is_file()
    meta = json.loads((run_dir / "eval_best" / "metadata.json").read_text())
    assert meta["step"] == 2 and meta["model"]["path"] == str(best.path)
    assert "--- Evaluation (best) ---" in out


@pytest.mark.slow
def test_keep_best_keeps_the_checkpoint_with_the_best_val_reward(tmp_path):
    overrides = [*SMALL, "stages=[train]", "trainer.max_steps=3", "optimizer.lr=1e-2"]
    cfg = load_settings([*overrides, "trainer.eval_steps=1", "trainer.keep_best=true"])
    env = build_env(cfg.env, cfg.language)
    result = train(cfg, env, tmp_path / "val")

    rewards = result.val_rewards
    assert sorted(rewards) == [1, 2, 3] and len(set(rewards.values())) > 1  # the policy moved
    best_step = max(rewards, key=lambda s: (rewards[s], -s))  # ties: the earliest
    assert result.best is not None and result.best.global_step == best_step
    assert result.best.val_reward == rewards[best_step]
    assert steps_on_disk(tmp_path / "val") == {best_step, 3}
    assert all(is_complete_checkpoint(c) for c in checkpoints_of(tmp_path / "val"))

    # the best checkpoint, loaded from disk, is the policy that earned that validation reward
    model, tokenizer = load_policy(checkpoint_model(cfg.model, result.best.path))
    saved = load_file(str(result.best.path / "model.safetensors"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    again = validated_again(cfg, env, model, tokenizer)
    assert again.mean == pytest.approx(rewards[best_step])
    assert heldout_metrics(again)["val/reward"] == again.mean

    # validation samples under its own RNG, even unseeded: training is the same with or without it
    plain = train(
        load_settings([*overrides, "trainer.eval_steps=0", "trainer.save_total_limit=null"]),
        env,
        tmp_path / "plain",
    )
    unseeded = train(
        load_settings([*overrides, "trainer.eval_steps=1", "eval.seed=null"]), env, tmp_path / "u"
    )
    assert len(unseeded.val_rewards) == 3 and unseeded.best is None
    train_rewards = [
        [log["reward"] for log in r.log_history if "reward" in log] for r in (plain, result, unseeded)
    ]
    assert train_rewards[0] == train_rewards[1] == train_rewards[2]
    assert plain.best is None and plain.val_rewards == {} and steps_on_disk(tmp_path / "plain") == {1, 2, 3}

    # any checkpoint loads as its own weights, not the trained model's
    first = tmp_path / "plain" / "checkpoints" / "checkpoint-1"
    model, _ = load_policy(checkpoint_model(cfg.model, first))
    saved = load_file(str(first / "model.safetensors"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    assert not all(torch.equal(plain.model.state_dict()[k], v) for k, v in saved.items())


def test_a_lora_checkpoint_loaded_after_training_scores_as_it_did_in_training(tmp_path):
    """A LoRA checkpoint loaded in the process that trained it (as the run's evaluation of its best
    checkpoint loads it) is that step's policy: it earns that step's validation reward again.
    Copying the trained peft model did not: TRL's patched forward still ran the final weights."""
    cfg = load_settings(
        [
            *SMALL,
            "stages=[train]",
            "trainer.max_steps=2",
            "optimizer.lr=5e-2",
            "model.lora.enabled=true",
            "trainer.eval_steps=1",
            "trainer.save_total_limit=null",
        ]
    )
    env = build_env(cfg.env, cfg.language)
    result = train(cfg, env, tmp_path)
    first = tmp_path / "checkpoints" / "checkpoint-1"
    loaded = checkpoint_model(cfg.model, first)
    assert (loaded.adapter, loaded.lora.enabled) == (str(first), False)
    model, tokenizer = load_policy(loaded)
    # the adapter is merged in: the weights are neither the base's nor the final policy's
    base, _ = load_policy(cfg.model)
    saved = load_file(str(first / "adapter_model.safetensors"))
    assert not all(torch.equal(get_peft_model_state_dict(result.model)[k], v) for k, v in saved.items())
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), base.parameters(), strict=True))
    assert validated_again(cfg, env, model, tokenizer).mean == pytest.approx(result.val_rewards[1])
    assert result.val_rewards[1] != result.val_rewards[2]  # the two steps' policies differ
