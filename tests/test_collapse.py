"""The collapse watch (grpo/train/collapse.py): its rule on step signals, then real GRPO runs of the
CPU recipe (+experiment=alphabet_sort_cpu: the small warm-started model) made to collapse with 10x
the recipe's learning rate, under each trainer.on_collapse, and its silence at the recipe's own lr."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo import compose, run
from grpo.files import ASSETS_DIR
from grpo.train.collapse import WARMUP, CollapseWatch, describe, step_signals

# ---- the rule ------------------------------------------------------------------------------------


def calm_steps(watch: CollapseWatch, n: int, start: int = 1) -> None:
    for i in range(n):
        # a healthy run: a noisy reward, a loss near 0, now and then a completion in another language
        signals = {
            "reward": 0.5 + 0.03 * ((-1) ** i),
            "loss": 1e-4 * (i % 3),
            "wrong_language": 0.03 * (i % 2),
        }
        assert watch.update(start + i, signals) is None
        assert watch.calm


def test_two_kinds_jumping_together_are_a_collapse_one_alone_is_not():
    watch = CollapseWatch()
    calm_steps(watch, 8)
    # one kind alone, once: a hard batch
    assert watch.update(9, {"reward": 0.30, "loss": 0.0, "wrong_language": 0.0}) is None and not watch.calm
    calm_steps(watch, 3, start=10)
    # the loss leaves its scale and the wrong-language share jumps in the same step
    found = watch.update(13, {"reward": 0.5, "loss": -0.03, "wrong_language": 0.40})
    assert found is not None and set(found.moved) == {"loss", "wrong_language"} and found.kinds == 2
    assert re.fullmatch(r"loss 0\.0001 -> -0\.03, wrong-lang 1% -> 40%", describe(found)), describe(found)
    # reported once: the breakdown going on is not a second collapse until a calm step
    assert watch.update(14, {"reward": 0.2, "loss": -0.05, "wrong_language": 0.6}) is None


def test_the_loss_of_a_batch_with_cut_completions_is_not_a_signal():
    """Cut completions are masked out of the loss, which then leaves its scale by construction (a
    healthy run measured -0.05 for one cut completion of 32): the cut share speaks, the loss not."""
    watch = CollapseWatch()
    calm_steps(watch, 8)
    assert watch.update(9, {"reward": 0.5, "loss": -0.05, "truncated": 0.03, "wrong_language": 0.0}) is None
    assert watch.calm


def test_a_language_says_where_the_batch_says_whether():
    """A language's shares come from a group or two a step: alone they never make a collapse (a
    healthy run measured ja repetition 0.17 beside a KL spike), but they are no calm step either,
    and a collapse of the batch names them."""
    watch = CollapseWatch()
    for step in range(1, 9):
        signals = {"truncated": 0.0, "wrong_language": 0.01 * (step % 2)}
        signals |= {"truncated/ja": 0.0, "wrong_language/ja": 0.02 * (step % 2)}
        assert watch.update(step, signals) is None
    # one cut completion of a group of 8 in a language is no jump: its floor is 2.5 x the batch's
    assert watch.update(9, {"truncated/ja": 0.125, "wrong_language/ja": 0.0}) is None and watch.calm
    # the language's two shares jump, the batch's do not: not calm, no collapse
    assert watch.update(10, {"truncated": 0.03, "truncated/ja": 0.5, "wrong_language/ja": 0.4}) is None
    assert not watch.calm
    # the breakdown reaches the batch: cut completions that run on into words in another language
    # are one kind of evidence (runaway), so it is a collapse when it lasts SUSTAIN steps, the
    # language named
    breakdown = {"truncated": 0.25, "wrong_language": 0.3, "truncated/ja": 0.75, "wrong_language/ja": 0.9}
    assert watch.update(11, breakdown) is None and watch.update(12, breakdown) is None
    found = watch.update(13, breakdown)
    assert found is not None and found.kinds == 1
    assert {"truncated", "wrong_language", "truncated/ja", "wrong_language/ja"} <= set(found.moved)
    assert describe(found) == "cut 0% -> 25%, wrong-lang 0% -> 30%, ja cut 1% -> 75%, ja wrong-lang 1% -> 90%"
    # a language's reward is not judged: a group or two a step is noise
    assert watch.update(12, {"reward/ja": 0.0}) is None


def test_a_fall_that_lasts_is_a_collapse_from_the_first_steps_the_prompts_mix_is_not():
    """A too-high lr breaks the policy before any signal has WARMUP steps of past: three batch
    rewards in a row under half the start are a collapse. Early falls that come back are the
    prompts' mix, however many in a row (a few prompts a step). The rewards are measured ones."""
    # 10x the lr, en fr es zh ja from their SFT checkpoint (benchmarks/collapse.py)
    watch = CollapseWatch()
    rewards = [0.525, 0.528, 0.309, 0.091, 0.083, 0.046]
    found = [watch.update(step, {"reward": r}) for step, r in enumerate(rewards, 1)]
    assert found[:-1] == [None] * 5 and found[-1] is not None and found[-1].step == 6
    assert describe(found[-1]) == "reward 0.525 -> 0.046"
    assert not watch.calm
    # a model that cannot do the task yet: its rewards near 0 have no half to fall to
    watch = CollapseWatch()
    for step, r in enumerate([2e-4, 1e-4, 3e-4, 0.0, 0.0, 0.0, 1e-5], 1):
        assert watch.update(step, {"reward": r}) is None, step
    # a healthy de fr sv zh ja run at the recipe's lr (4 prompts a step): three falls, then back
    watch = CollapseWatch()
    for step, r in enumerate([0.602, 0.431, 0.360, 0.198, 0.635, 0.727, 0.584, 0.393], 1):
        assert watch.update(step, {"reward": r}) is None, step
    assert 6 < WARMUP + 3  # the case is within the reward's early steps


def test_cut_repeated_and_run_on_wrong_language_shares_are_one_kind():
    """Cut completions are the looping ones, and the ones that run on into words to judge: their
    shares jumping together are one kind of evidence (a healthy run measured it: 2 of a group's 8
    cut), not a collapse; with another kind (the reward falling) they are."""
    watch = CollapseWatch()
    for step in range(1, 9):
        calm = {"reward": 0.5 + 0.03 * (-1) ** step, "truncated": 0.0, "wrong_language": 0.0}
        assert watch.update(step, {**calm, "repetition": 0.01 + 0.005 * (step % 2)}) is None
    runaway = {"reward": 0.5, "truncated": 0.125, "repetition": 0.083, "wrong_language": 0.0}
    assert watch.update(9, runaway) is None and not watch.calm
    calm = {"reward": 0.5, "truncated": 0.0, "repetition": 0.01, "wrong_language": 0.0}
    assert watch.update(10, calm) is None and watch.calm
    assert watch.update(11, {**runaway, "wrong_language": 1.0}) is None and not watch.calm
    assert watch.update(12, calm) is None and watch.calm
    found = watch.update(13, {**runaway, "wrong_language": 1.0, "reward": 0.1})
    assert found is not None and found.kinds == 2
    assert set(found.moved) == {"truncated", "repetition", "wrong_language", "reward"}


def test_a_healthy_runs_one_step_of_run_on_completions_is_no_collapse():
    """Measured (learning_where_rl_helps.py, scarce setting, GRPO seed 0, steps 1-47, the batch's
    signals as recorded): at step 46, 8 of 32 completions ran on to the token limit and, the only
    ones with words to judge, read wrong-lang 0% -> 100%; step 47 was calm. The rule before this one
    counted two kinds there and rolled a healthy run back."""
    path = Path(__file__).parent / "data" / "scarce_s0_steps_1_47.jsonl"
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    watch = CollapseWatch()
    for entry in steps:
        step = entry.pop("step")
        assert watch.update(step, entry) is None, step
        if step == 46:
            assert not watch.calm and entry["truncated"] == 0.25 and entry["wrong_language"] == 1.0
    assert watch.calm and len(steps) == 47


def test_a_language_needs_a_past_before_it_can_jump():
    """Per-language signals come from a few groups a step: no early jumps."""
    watch = CollapseWatch()
    watch.update(1, {"reward/zh": 0.9, "truncated/zh": 0.0})
    assert watch.update(2, {"reward/zh": 0.0, "truncated/zh": 1.0}) is None and watch.calm


def test_step_signals_read_trls_names_and_grpos_monitors():
    metrics = {
        "loss": -0.02, "kl": 0.1, "reward": 0.4, "monitor/truncated": 0.1, "monitor/truncated/ja": 0.4,
        "monitor/wrong_language/zh": 0.2, "monitor/repetition": 0.01,
        "rewards/alphabet_sort_reward/mean": 0.4, "rewards/alphabet_sort_reward/ja/mean": 0.2,
        "rewards/language_consistency/ja/mean": 0.9, "completions/mean_length": 40.0, "kl_nan": float("nan"),
    }  # fmt: skip
    assert step_signals(metrics) == {
        "loss": -0.02, "kl": 0.1, "reward": 0.4, "truncated": 0.1, "truncated/ja": 0.4,
        "wrong_language/zh": 0.2, "repetition": 0.01, "reward/ja": 0.2,
    }  # fmt: skip


# ---- real runs -----------------------------------------------------------------------------------

# the CPU recipe's GRPO stage alone, 2 prompts x 8 completions a step (the recipe: 4 x 8), one log
# line per step, no validation
RECIPE = [
    "+experiment=alphabet_sort_cpu",
    "stages=[train]",
    "trainer.per_device_batch_completions=16",
    "tracking=none",
    "trainer.eval_steps=0",
    "trainer.keep_best=false",
    "trainer.logging_steps=1",
    "trainer.save_steps=100",
]
# 10x the recipe's optimizer.lr (2e-4)
TOO_HIGH = "optimizer.lr=2e-3"
COLLAPSE = re.compile(r"^\[train\] collapse at step (\d+): (.+?); (.+)$", re.M)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def root(in_process_root):
    return in_process_root


def _record(run_dir):
    return [json.loads(line) for line in (run_dir / "collapse.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_default_rolls_back_to_the_last_calm_policy_at_a_lower_lr_and_finishes(root, capsys):
    result = run(compose([*RECIPE, TOO_HIGH, "trainer.max_steps=9"]))
    out = capsys.readouterr().out
    found = COLLAPSE.findall(out)
    assert found, out[-3000:]
    step, what, action = found[0]
    assert 2 <= int(step) <= 6, out[-3000:]  # caught within a few steps of the breakdown
    back = re.fullmatch(
        r"rolled back to the policy of step (\d+) \(rollback 1 of 2\), optimizer moments reset, "
        r"lr 0\.002 -> 0\.001; trainer\.on_collapse=none keeps going instead",
        action,
    )
    assert back and int(back[1]) < int(step), action
    # the run went on: to its last step, or stopped by a later collapse after the rollbacks
    assert result.step == 9 or "after 2 rollbacks: stopped" in out, out[-2000:]
    record = _record(result.run_dir)
    assert [r["step"] for r in record] == list(range(1, result.step + 1))
    assert [r["step"] for r in record if "collapse" in r][0] == int(step)
    assert result.collapses[0] == f"[train] collapse at step {step}: {what}; {action}"


@pytest.mark.slow
def test_stop_hands_on_the_last_calm_policy(root, capsys):
    result = run(compose([*RECIPE, TOO_HIGH, "trainer.max_steps=9", "trainer.on_collapse=stop"]))
    out = capsys.readouterr().out
    (found,) = COLLAPSE.findall(out)
    step, _, action = found
    back = re.fullmatch(
        r"trainer\.on_collapse=stop: stopped, the policy back to the one of step (\d+), which the "
        r"run's final checkpoint and evaluation take",
        action,
    )
    assert back, action
    # it stopped at the collapse, with a checkpoint of the policy it went back to
    assert result.step == int(step) < 9
    assert result.final_checkpoint.name == f"checkpoint-{step}"
    saved = load_file(result.final_checkpoint / "model.safetensors")
    if int(back[1]) == 0:  # back to the start: the recipe's warm start, weight for weight
        start = load_file(ASSETS_DIR / "small_alphabet_sort_sft" / "model.safetensors")
        assert saved.keys() == start.keys()
        assert all(torch.equal(saved[k], start[k].to(saved[k].dtype)) for k in saved)


@pytest.mark.slow
def test_none_says_so_and_goes_on_and_the_recipes_lr_is_silent(root, capsys):
    collapsed = run(compose([*RECIPE, TOO_HIGH, "trainer.max_steps=7", "trainer.on_collapse=none"]))
    out = capsys.readouterr().out
    found = COLLAPSE.findall(out)
    assert found and all(
        a == "trainer.on_collapse=none: training goes on (rollback or stop would undo it)"
        for _, _, a in found
    ), out[-3000:]
    assert collapsed.step == 7
    # the recipe's own lr: a healthy run, not a word from the watch
    healthy = run(compose([*RECIPE, "trainer.max_steps=7"]))
    out = capsys.readouterr().out
    assert "collapse" not in out, out[-3000:]
    record = _record(healthy.run_dir)
    assert healthy.step == 7 and not any("collapse" in r for r in record)
    # each step's own signals: TRL's record of the step and the loss of its micro-batches
    assert all({"loss", "reward", "truncated", "repetition"} <= set(r) for r in record), record[:2]
    assert len({r["reward"] for r in record}) > 1
