"""The learned reward in GRPO, end to end: one run trains the reward model, evaluates, trains GRPO
with it and evaluates again (stages=[reward_model,eval,train,eval]) logging all of it to MLflow,
with the reward model loaded from disk once; the reward TRL logs is the RM's normalised score of
the real episodes, mixed with the rubric by weight."""

from __future__ import annotations

import json
import statistics

import pytest
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from mlflow import MlflowClient
from transformers import TrainerCallback

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.reward_model.backbone import LOADS
from grpo.rewards.learned import RewardModelScorer
from grpo.run.layout import RM_META_FILE
from grpo.stages import run_stages
from grpo.tracking.store import metric_curve, tracking_uri
from grpo.train.trainer import build_trainer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

SMALL_RM = [
    "env.max_turns=1",
    "reward_model.data.synthetic.n=24",
    "reward_model.training.max_steps=4",
    "reward_model.training.logging_steps=2",
]
SMALL_GRPO = [
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.max_steps=2",
    "trainer.save_steps=1000",
    "trainer.beta=0",
    # one small preference round before GRPO (the default budget and steps are sized for real runs)
    "reward_model.rounds.label_budget=12",
    "reward_model.rounds.steps=2",
    "trainer.max_completion_length=24",
    "generation.max_tokens_per_turn=24",
    *TRAIN_ON_CUT_COMPLETIONS,
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`python -m grpo +env=alphabet_sort stages=[reward_model,eval,train,eval] reward_model=learned
    ...`; with how many times the run loaded its reward model from disk."""
    root = tmp_path_factory.mktemp("e2e")
    cfg = load_settings(
        [
            "+env=alphabet_sort",
            "stages=[reward_model,eval,train,eval]",
            "reward_model=learned",
            *SMALL_RM,
            *SMALL_GRPO,
            "eval.num_examples=2",
            "eval.rollouts_per_example=2",
            # validation at both steps: the RM's score against the rubric on held-out rows
            "trainer.eval_steps=1",
            "trainer.val_num_examples=2",
            "trainer.val_rollouts_per_example=1",
            "tracking=mlflow",
            f"output_root={root}",
        ]
    )
    run_dir = root / "runs" / "e2e"
    run_stages(cfg, run_dir=run_dir)
    return cfg, run_dir, LOADS[str((run_dir / "reward_model").resolve())]


def test_the_run_loads_its_reward_model_once_for_both_evaluations_and_training(run):
    cfg, run_dir, loads = run
    assert loads == 1
    client = MlflowClient(tracking_uri(cfg))
    (mlrun,) = client.search_runs([client.get_experiment_by_name("grpo-alphabet_sort").experiment_id])
    # every stage scored with it: the evaluations' score column, GRPO's reward
    for label in ("baseline", "final"):
        meta = json.loads((run_dir / f"eval_{label}" / "metadata.json").read_text())
        assert meta["scores"]["reward_model"]["count"] == 4
        assert f"eval/{label}/score/reward_model/mean" in mlrun.data.metrics
    assert "train/rewards/reward_model/mean" in mlrun.data.metrics
    # the preference round before GRPO: labels spent and the RM's accuracy on the policy's pairs
    assert mlrun.data.metrics["rm/round/labels"] == 12
    assert "rm/round/acc/en" in mlrun.data.metrics
    # the hacking watch's inputs per language, and their plot
    assert "val/score/reward_model/lang/en" in mlrun.data.metrics and "val/lang/en/mean" in mlrun.data.metrics
    plots = [a.path for a in client.list_artifacts(mlrun.info.run_id, "plots")]
    assert "plots/rm_vs_gold_by_language.png" in plots
    rounds = json.loads((run_dir / "reward_model_rounds" / "rounds.json").read_text())
    assert rounds["labels"] == 12 and [r["step"] for r in rounds["rounds"]] == [0]


def test_one_run_trains_the_rm_then_grpo_with_it(run):
    cfg, run_dir, _ = run
    rm_dir = run_dir / "reward_model"
    assert (rm_dir / RM_META_FILE).is_file()
    # the fresh RM reaches the train stage as the stage's result: the settings stay as given
    assert cfg.reward_model.checkpoints == []
    assert (run_dir / "checkpoints").is_dir()

    client = MlflowClient(tracking_uri(cfg))
    (experiment,) = [e for e in client.search_experiments() if e.name == "grpo-alphabet_sort"]
    (mlrun,) = client.search_runs([experiment.experiment_id])
    run_id = mlrun.info.run_id
    assert mlrun.info.status == "FINISHED"
    # the reward model stage: held-out accuracy at init and after its 4 steps
    assert [s for s, _ in metric_curve(client, run_id, "rm/acc/en")] == [0, 4]
    assert [s for s, _ in metric_curve(client, run_id, "rm/train/loss")] == [2, 4]
    # GRPO: the learned reward and the rubric, each under its own name, every step
    rm_reward = metric_curve(client, run_id, "train/rewards/reward_model/mean")
    assert [s for s, _ in rm_reward] == [1, 2]
    assert all(abs(v) < 20 for _, v in rm_reward)  # normalised scores, not raw logits
    assert [s for s, _ in metric_curve(client, run_id, "train/rewards/alphabet_sort_reward/mean")] == [1, 2]


class LogCapture(TrainerCallback):
    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.logs.append(dict(logs))


def test_the_grpo_reward_is_the_normalised_rm_score_of_each_episode(run, tmp_path):
    _, run_dir, _ = run
    rm_dir = run_dir / "reward_model"
    cfg = load_settings(
        [
            "+env=alphabet_sort",
            "stages=[train]",
            "reward_model=learned",
            f"reward_model.checkpoints=[{rm_dir}]",
            "reward_model.weight=2.0",
            "reward_model.rubric_weight=0.5",
            # the score as the stage's RM gives it: no round retrains it, no reference cap
            "reward_model.rounds.every=0",
            "reward_model.guards.reference=none",
            # two-turn episodes: the RM reads the environment's turn between the model's two answers
            "env.min_turns=2",
            "env.max_turns=2",
            *SMALL_GRPO,
            "trainer.max_steps=1",
            "trainer.max_completion_length=256",
            "generation.max_tokens_per_turn=16",
        ]
    )
    env = build_env(cfg.env, cfg.language)
    logs = LogCapture()
    bundle = build_trainer(cfg, env, tmp_path, callbacks=[logs])
    assert bundle.trainer.reward_func_names == ["alphabet_sort_reward", "reward_model"]
    assert bundle.trainer.reward_weights.tolist() == [0.5, 2.0]
    bundle.trainer.train()
    (log,) = logs.logs

    rollouts = bundle.rollout.last_rollouts
    assert len(rollouts) == 8 and all(
        [m["role"] for m in r.completion] == ["assistant", "user", "assistant"] for r in rollouts
    )
    scorer = RewardModelScorer(str(rm_dir), device="cpu")
    expected = scorer.normalized(
        [r.row.prompt for r in rollouts], [r.completion for r in rollouts], [r.row.language for r in rollouts]
    )
    assert log["rewards/reward_model/mean"] == pytest.approx(statistics.fmean(expected), abs=1e-4)
    rubric = [env.rubric.total(env.score(r.row, r.completion, r.state)) for r in rollouts]
    total = [0.5 * a + 2.0 * b for a, b in zip(rubric, expected, strict=True)]
    assert log["reward"] == pytest.approx(statistics.fmean(total), abs=1e-4)
