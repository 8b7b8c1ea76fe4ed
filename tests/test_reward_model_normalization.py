"""reward_model.normalization: per_language | global | none, on known raw scores (a real Calibration
fitted from them and its rm_calibration.json), through the learned reward functions of a run
(members, their combination, what evaluation's score columns use) with real tiny reward models, and
the config check that rejects an unknown value before anything loads."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from helpers.packaged_env import packaged_env

from grpo import __main__ as entry
from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.config import REWARD_MODEL_NORMALIZATIONS
from grpo.errors import UserError
from grpo.reward_model.backbone import RMMeta, build_backbone, save_reward_model
from grpo.reward_model.calibration import Calibration
from grpo.rewards import build_rewards
from grpo.rewards.learned import RewardModelScorer, combine_scores, learned_reward_funcs
from grpo.run.layout import RM_CALIBRATION_FILE

# raw reference-set scores: en around 5 (std 1), sv around -3 (std 2)
EN = [4.0, 6.0, 4.0, 6.0]
SV = [-5.0, -1.0, -5.0, -1.0]
MEAN_EN, STD_EN = 5.0, 1.0
MEAN_SV, STD_SV = -3.0, 2.0
# pooled over all eight: mean 8 / 8 = 1, variance (2 * (9 + 25 + 36 + 4)) / 8 = 18.5
MEAN_ALL, STD_ALL = 1.0, math.sqrt(18.5)


def fitted() -> Calibration:
    return Calibration.fit(EN + SV, ["en"] * len(EN) + ["sv"] * len(SV))


def expected(score: float | None, language: str, normalization: str) -> float | None:
    """The documented definitions, written out."""
    if score is None:
        return None
    if normalization == "none":
        return score
    if normalization == "global":
        return (score - MEAN_ALL) / STD_ALL
    if language == "en":
        return (score - MEAN_EN) / STD_EN
    if language == "sv":
        return (score - MEAN_SV) / STD_SV
    return None  # per_language: no statistics for this language


def test_the_fitted_statistics_are_the_hand_computed_ones():
    cal = fitted()
    assert (cal.languages["en"].mean, cal.languages["en"].std) == (MEAN_EN, STD_EN)
    assert (cal.languages["sv"].mean, cal.languages["sv"].std) == (MEAN_SV, STD_SV)
    assert (cal.pooled.mean, cal.pooled.std) == (MEAN_ALL, STD_ALL)


def test_each_normalization_gives_the_documented_scores(tmp_path: Path):
    # the real file the reward_model stage writes, read back as a scorer reads it
    cal = Calibration.load(fitted().save(tmp_path / RM_CALIBRATION_FILE))
    scores = [7.0, 5.5, 1.0, -3.0, 2.0]
    languages = ["en", "en", "sv", "sv", "de"]  # de: not calibrated
    assert cal.normalize(scores, languages) == [2.0, 0.5, 2.0, 0.0, None]  # per_language, the default
    assert cal.normalize(scores, languages, "per_language") == [
        (7.0 - 5.0) / 1.0,
        (5.5 - 5.0) / 1.0,
        (1.0 + 3.0) / 2.0,
        (-3.0 + 3.0) / 2.0,
        None,
    ]
    assert cal.normalize(scores, languages, "global") == [(s - 1.0) / math.sqrt(18.5) for s in scores]
    assert cal.normalize(scores, languages, "none") == scores
    for how in REWARD_MODEL_NORMALIZATIONS:
        assert cal.normalize(scores, languages, how) == [
            expected(s, lang, how) for s, lang in zip(scores, languages, strict=True)
        ]
        assert cal.normalize_one(float("nan"), "en", how) is None
    assert [cal.covers("de", how) for how in REWARD_MODEL_NORMALIZATIONS] == [False, True, True]
    with pytest.raises(ValueError, match="unknown normalization 'bogus'"):
        cal.normalize_one(1.0, "en", "bogus")


# ---- through a run's learned rewards, with real tiny reward models --------------------------------

TRAINED = ["en", "sv", "de"]  # de is trained on but has no calibration statistics


def make_rm(path: Path, seed: int) -> Path:
    settings = load_settings(
        ["+env=alphabet_sort", "reward_model=learned", f"reward_model.backbone.seed={seed}"]
    )
    model, tokenizer = build_backbone(settings.reward_model.backbone, TRAINED, True, False)
    with torch.no_grad():
        model.score.weight.mul_(50.0)  # raw scores spread well beyond the statistics' scale
    meta = RMMeta(languages=TRAINED, tag_token=True, per_language_heads=False, max_length=256)
    return save_reward_model(model, tokenizer, meta, fitted(), path)


@pytest.fixture(scope="module")
def rms(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("rms")
    return [make_rm(root / "a", seed=1), make_rm(root / "b", seed=2)]


PROMPTS = ["Sort: Bob, Ada", "Sort: Bob, Ada", "Sortera: Bo, Ada", "Sortera: Bo, Ada", "Sortiere: Bo, Ada"]
EPISODES = ["Ada\nBob", "Bob", "Ada\nBo", "<broken", "Ada\nBo"]
LANGUAGES = ["en", "en", "sv", "sv", "de"]
# an RM it was not trained on scores nothing in any mode
UNTRAINED = ("Ada", "fr")


def raw_scores(rm: Path) -> list[float | None]:
    return RewardModelScorer(str(rm), device="cpu", normalization="none").raw(
        [*PROMPTS, "Trie: Bo"], [*EPISODES, UNTRAINED[0]], [*LANGUAGES, UNTRAINED[1]]
    )


def call(func, **extra) -> list[float | None]:
    return func.fn(
        prompts=[*PROMPTS, "Trie: Bo"],
        completions=[*EPISODES, UNTRAINED[0]],
        language=[*LANGUAGES, UNTRAINED[1]],
        **extra,
    )


def assert_same_scores(got: list[float | None], want: list[float | None]) -> None:
    """None (a row the RM does not score) at the same places, and the scores close elsewhere.

    Compared apart: pytest.approx over a list holding None raises from pytest 9.2 on.
    """
    assert [g is None for g in got] == [w is None for w in want]
    scored = [(g, w) for g, w in zip(got, want, strict=True) if w is not None]
    assert [g for g, _ in scored] == pytest.approx([w for _, w in scored], rel=1e-5, abs=1e-5)


def run_settings(rms: list[Path], kind: str, normalization: str | None):
    listed = ",".join(str(p) for p in rms)
    overrides = [
        "+env=alphabet_sort",
        "stages=[train]",
        f"reward_model={kind}",
        f"reward_model.checkpoints=[{listed}]",
    ]
    if normalization is not None:
        overrides.append(f"reward_model.normalization={normalization}")
    settings = load_settings(overrides)
    check(settings)
    return settings


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("normalization", [None, *REWARD_MODEL_NORMALIZATIONS])
def test_the_grpo_reward_uses_the_setting(rms, normalization):
    how = normalization or "per_language"
    settings = run_settings(rms[:1], "learned", normalization)
    assert settings.reward_model.normalization == how
    raw = raw_scores(rms[0])
    assert raw[-1] is None and all(isinstance(s, float) for s in raw[:-1])
    (func,) = learned_reward_funcs(settings, device="cpu")
    logged: dict[str, float] = {}
    got = call(func, log_metric=lambda name, value: logged.__setitem__(name, value))
    want = [expected(s, lang, how) for s, lang in zip(raw, [*LANGUAGES, UNTRAINED[1]], strict=True)]
    assert_same_scores(got, want)
    assert want[-1] is None and (want[-2] is None) == (how == "per_language")
    # the per-language means logged with the reward are of the same numbers
    assert logged["rewards/reward_model/en/mean"] == pytest.approx(
        (want[0] + want[1]) / 2, rel=1e-5, abs=1e-5
    )
    assert logged["rewards/reward_model/sv/mean"] == pytest.approx(
        (want[2] + want[3]) / 2, rel=1e-5, abs=1e-5
    )
    assert ("rewards/reward_model/de/mean" in logged) == (how != "per_language")
    assert "rewards/reward_model/fr/mean" not in logged


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("normalization", REWARD_MODEL_NORMALIZATIONS)
def test_ensemble_members_and_their_combination_use_the_setting(rms, normalization):
    """build_rewards' learned functions: what GRPO trains on and evaluation's score columns."""
    env = packaged_env("alphabet_sort", "en", seed=0, num_train_examples=4, max_turns=1)
    settings = run_settings(rms, "ensemble", normalization)
    rewards = build_rewards(settings, env)
    assert [f.name for f in rewards.learned] == ["rm_0", "rm_1", "reward_model"]
    langs = [*LANGUAGES, UNTRAINED[1]]
    members = [
        [expected(s, lang, normalization) for s, lang in zip(raw_scores(rm), langs, strict=True)]
        for rm in rms
    ]
    got = [call(f) for f in rewards.learned]
    combined = combine_scores(members, settings.reward_model.combine, settings.reward_model.k)
    for g, want in zip(got, [*members, combined], strict=True):
        assert_same_scores(g, want)


# ---- the config check -----------------------------------------------------------------------------


def test_an_unknown_normalization_is_rejected_by_the_check():
    settings = load_settings(
        ["+env=alphabet_sort", "reward_model=learned", "reward_model.normalization=bogus"]
    )
    with pytest.raises(UserError) as err:
        check(settings)
    assert str(err.value) == ("reward_model.normalization='bogus' is not one of per_language, global, none")


def test_an_unknown_normalization_stops_the_cli_with_one_line(capsys, monkeypatch):
    """Through `python -m grpo`'s own main(): exit 2, one line, before any model loads."""
    argv = ["grpo", "+env=alphabet_sort", "reward_model=learned", "reward_model.normalization=bogus"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == ["error: reward_model.normalization='bogus' is not one of per_language, global, none"]
