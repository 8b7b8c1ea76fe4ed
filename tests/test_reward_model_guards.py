"""The guards of a learned reward: the documented reward on fixed scores (capped and relative to the
reference episode, mean - k * std and min across members), the KL anchor's settings, the hacking
warning on scripted validation histories, and what normalisation does to GRPO's advantages."""

from __future__ import annotations

import math
import random

import pytest

from grpo.compose import load_settings
from grpo.rewards.advantages import group_advantages, total_rewards
from grpo.rewards.learned import combine_scores, guard_scores, kl_guard
from grpo.train.monitors import HackingWatch


def test_reference_cap_and_relative_on_fixed_scores():
    scores = [1.5, -0.2, 0.4, None]
    references = [0.5, 0.5, None, 0.1]
    assert guard_scores(scores, references, "cap") == [0.5, -0.2, 0.4, None]
    relative = guard_scores(scores, references, "relative")
    assert relative[0] == pytest.approx(1.0) and relative[1] == pytest.approx(-0.7)
    assert relative[2] == 0.4 and relative[3] is None  # no reference score: as is
    assert guard_scores(scores, references, "none") == scores
    with pytest.raises(ValueError):
        guard_scores(scores, references, "clip")


def test_conservative_aggregates_on_fixed_scores():
    members = [[1.0, 0.0, None], [3.0, 0.0, None], [2.0, 0.3, None]]
    # mean 2, population std sqrt(2/3)
    (lcb, second, missing) = combine_scores(members, "mean_minus_std", k=0.5)
    assert lcb == pytest.approx(2.0 - 0.5 * math.sqrt(2 / 3))
    assert second == pytest.approx(0.1 - 0.5 * math.sqrt(((0.1) ** 2 * 2 + 0.2**2) / 3))
    assert missing is None
    assert combine_scores(members, "min") == [1.0, 0.0, None]
    assert combine_scores(members, "mean")[0] == pytest.approx(2.0)


def test_the_conservative_aggregate_and_the_cap_are_the_defaults():
    cfg = load_settings(["+env=alphabet_sort", "reward_model=ensemble"])
    assert cfg.reward_model.combine == "mean_minus_std"
    assert cfg.reward_model.guards.reference == "cap"
    assert cfg.reward_model.guards.kl_beta > 0
    assert cfg.reward_model.rounds.every > 0


def test_kl_anchor_raises_beta_for_rm_runs_only_and_says_so():
    rm = load_settings(
        ["+env=alphabet_sort", "reward_model=learned_only", "trainer.beta=0", "trainer.eval_steps=5"]
    )
    guarded, line = kl_guard(rm)
    assert guarded.trainer.beta == rm.reward_model.guards.kl_beta > 0
    assert "trainer.beta=0 -> " in line and "kl_beta=null" in line
    off = load_settings(["+env=alphabet_sort", "reward_model=learned_only", "trainer.beta=0",
                         "reward_model.guards.kl_beta=null", "trainer.eval_steps=5"])  # fmt: skip
    assert kl_guard(off) == (off, None)
    higher = load_settings(
        ["+env=alphabet_sort", "reward_model=learned", "trainer.beta=0.2", "trainer.eval_steps=5"]
    )
    assert kl_guard(higher)[0].trainer.beta == 0.2
    rubric = load_settings(["+env=alphabet_sort", "trainer.beta=0"])
    assert kl_guard(rubric) == (rubric, None)
    # without validation the hacking watch cannot run: said in the same line
    _, line = kl_guard(load_settings(["+env=alphabet_sort", "reward_model=learned", "trainer.beta=0.2"]))
    assert "trainer.eval_steps=0" in line


def test_hacking_warning_fires_on_rising_rm_and_falling_gold_only():
    watch = HackingWatch(patience=2, keep_best=True)
    history = [
        (20, {"ja": -0.5, "en": 0.1}, {"ja": 0.14, "en": 0.40}),
        (40, {"ja": 0.2, "en": 0.2}, {"ja": 0.08, "en": 0.43}),
        (60, {"ja": 0.9, "en": 0.3}, {"ja": 0.01, "en": 0.47}),
    ]
    lines = [watch.update(step, rm, gold) for step, rm, gold in history]
    assert lines[:2] == [None, None]  # one interval is not a trend
    assert lines[2] is not None and "ja: RM score -0.500 -> +0.900" in lines[2]
    assert "0.140 -> 0.010" in lines[2] and "steps 20-60" in lines[2]
    assert "en:" not in lines[2]  # en's RM and rubric rose together: no warning
    assert "best by the gold" in lines[2]
    # once per streak
    assert watch.update(80, {"ja": 1.2, "en": 0.4}, {"ja": 0.0, "en": 0.5}) is None


def test_no_hacking_warning_when_the_gold_falls_within_its_noise():
    # measured in the benchmark: sv's rubric 0.066 -> 0.059 on ~50 held-out rows (SE ~0.02)
    history = [(20, -1.103, 0.066), (40, -1.0, 0.062), (60, -0.900, 0.059)]
    noisy, exact = HackingWatch(patience=2), HackingWatch(patience=2)
    assert [noisy.update(s, {"sv": rm}, {"sv": g}, gold_se={"sv": 0.02}) for s, rm, g in history][-1] is None
    assert [exact.update(s, {"sv": rm}, {"sv": g}, gold_se={"sv": 0.001}) for s, rm, g in history][-1]


def test_no_hacking_warning_when_rm_and_gold_rise_together():
    watch = HackingWatch(patience=2)
    for step, value in ((10, 0.1), (20, 0.2), (30, 0.3), (40, 0.4)):
        assert watch.update(step, {"sv": value * 3}, {"sv": value}) is None


def test_without_gold_the_ensembles_disagreement_is_the_signal():
    watch = HackingWatch(patience=2)
    lines = [
        watch.update(step, {"ru": rm}, None, {"ru": d})
        for step, rm, d in ((5, 0.0, 0.1), (10, 0.5, 0.3), (15, 1.0, 0.6))
    ]
    assert lines[-1] is not None and "ensemble disagreement 0.100 -> 0.600" in lines[-1]


def _batch(seed: int = 0):
    """A fixed batch: 4 prompts (2 languages) x 4 completions, raw RM scores with per-language
    offsets and scales, rubric scores in [0, 1], and per-language / global statistics."""
    rng = random.Random(seed)
    languages = ["en"] * 8 + ["ja"] * 8
    offset, scale = {"en": 2.0, "ja": -3.0}, {"en": 0.5, "ja": 4.0}
    raw = [offset[lang] + scale[lang] * rng.gauss(0, 1) for lang in languages]
    rubric = [rng.random() for _ in languages]
    per_language = [(s - offset[lang]) / scale[lang] for s, lang in zip(raw, languages, strict=True)]
    mean = sum(raw) / len(raw)
    std = math.sqrt(sum((s - mean) ** 2 for s in raw) / len(raw))
    global_ = [(s - mean) / std for s in raw]
    return raw, rubric, per_language, global_


def test_normalisation_cancels_for_an_rm_only_reward_under_group_scaling():
    raw, _, per_language, global_ = _batch()
    a = group_advantages(total_rewards([per_language], [1.0]), 4, "group")
    b = group_advantages(total_rewards([global_], [1.0]), 4, "group")
    c = group_advantages(total_rewards([raw], [1.0]), 4, "group")
    assert a == pytest.approx(b, abs=2e-3) and a == pytest.approx(c, abs=2e-3)


def test_normalisation_matters_mixed_with_the_rubric_and_under_batch_scaling():
    _, rubric, per_language, global_ = _batch()
    mixed_pl = group_advantages(total_rewards([rubric, per_language], [1.0, 1.0]), 4, "group")
    mixed_gl = group_advantages(total_rewards([rubric, global_], [1.0, 1.0]), 4, "group")
    assert max(abs(x - y) for x, y in zip(mixed_pl, mixed_gl, strict=True)) > 0.1
    batch_pl = group_advantages(total_rewards([per_language], [1.0]), 4, "batch")
    batch_gl = group_advantages(total_rewards([global_], [1.0]), 4, "batch")
    assert max(abs(x - y) for x, y in zip(batch_pl, batch_gl, strict=True)) > 0.1


def test_advantages_follow_trls_formula_on_a_small_batch():
    adv = group_advantages([1.0, 0.0, 2.0, 2.0], 2, "group")
    s = math.sqrt(0.5)  # sample std of (1, 0)
    assert adv[:2] == pytest.approx([0.5 / (s + 1e-4), -0.5 / (s + 1e-4)])
    assert adv[2:] == [0.0, 0.0]
    assert group_advantages([1.0, 0.0, 2.0, 2.0], 2, "none") == [0.5, -0.5, 0.0, 0.0]
    with pytest.raises(ValueError):
        group_advantages([1.0, 2.0, 3.0], 2)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "reward_model.guards.reference=clip",
            "reward_model.guards.reference='clip' is not one of cap, relative, none",
        ),
        (
            "reward_model.guards.kl_beta=-1",
            "reward_model.guards.kl_beta=-1.0 must be a finite number >= 0, or null (off)",
        ),
        (
            "reward_model.guards.kl_beta=nan",
            "reward_model.guards.kl_beta=nan: a setting must be a finite number",
        ),
        (
            "reward_model.rounds.labeler=human",
            "reward_model.rounds.labeler='human' is not one of rubric, judge",
        ),
        ("reward_model.rounds.every=-1", "reward_model.rounds.every=-1 must be an integer >= 0"),
        ("reward_model.rounds.label_budget=0", "reward_model.rounds.label_budget=0 must be an integer >= 1"),
        (
            "reward_model.rounds.judge.base_url=localhost:8000",
            "reward_model.rounds.judge.base_url='localhost:8000' must be an http(s) URL",
        ),
    ],
)
def test_bad_guard_and_round_settings_are_one_line_errors(override, message):
    from grpo.cli.checks import check
    from grpo.errors import UserError

    extra = ["reward_model.rounds.labeler=judge"] if "judge" in override else []
    settings = load_settings(["+env=alphabet_sort", "reward_model=learned", *extra, override])
    with pytest.raises(UserError) as err:
        check(settings)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
