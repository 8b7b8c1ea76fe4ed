"""Learned rewards for GRPO: ensemble combination semantics, per-member per-language normalisation
before combining, the TRL reward functions (names, weights, one scoring pass per batch), language
checks and garbage completions. Members are real tiny reward models saved with real calibrations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers.grpo_process import run_grpo
from helpers.packaged_env import packaged_env

from grpo.compose import load_settings
from grpo.envs.alphabet_sort import AlphabetSortEnv
from grpo.envs.rubric import COMPLETION_FIELD
from grpo.errors import UserError
from grpo.reward_model.backbone import RMMeta, build_backbone, save_reward_model
from grpo.reward_model.calibration import Calibration
from grpo.reward_model.scoring import SequenceEncoder, score_ids
from grpo.reward_model.synthetic import synthetic_pairs
from grpo.rewards import build_rewards, rubric_reward_funcs
from grpo.rewards.learned import RewardModelScorer, combine_scores, learned_reward_funcs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LANGUAGES = ["en", "sv"]


@pytest.fixture(scope="module")
def pairs():
    def make_env(code: str) -> AlphabetSortEnv:
        return packaged_env("alphabet_sort", code, seed=0, num_train_examples=12, max_turns=1)

    return synthetic_pairs(make_env, LANGUAGES, n=12, severity=0.5, corruptions=["drop", "format"], seed=0)


def make_member(path: Path, seed: int, scale: float, pairs) -> Path:
    """A tiny RM (random weights from `seed`, score head times `scale`) calibrated on `pairs`."""
    backbone = load_settings(
        ["+env=alphabet_sort", "reward_model=learned", f"reward_model.backbone.seed={seed}"]
    )
    model, tokenizer = build_backbone(backbone.reward_model.backbone, LANGUAGES, True, False)
    with torch.no_grad():
        model.score.weight.mul_(scale)
    encoder = SequenceEncoder(tokenizer, 512, tag_token=True)
    languages = [p.language for p in pairs] * 2
    ids = encoder.encode(
        [p.prompt for p in pairs] * 2, [p.chosen for p in pairs] + [p.rejected for p in pairs], languages
    )
    calibration = Calibration.fit(score_ids(model, ids, tokenizer.pad_token_id, 16), languages)
    meta = RMMeta(languages=LANGUAGES, tag_token=True, per_language_heads=False, max_length=512)
    return save_reward_model(model, tokenizer, meta, calibration, path)


@pytest.fixture(scope="module")
def members(tmp_path_factory, pairs) -> list[Path]:
    root = tmp_path_factory.mktemp("members")
    # very different raw scales: combining raw scores would let member 1 decide everything
    return [
        make_member(root / "a", seed=1, scale=1.0, pairs=pairs),
        make_member(root / "b", seed=2, scale=500.0, pairs=pairs),
    ]


def ensemble_cfg(members: list[Path], *overrides: str):
    listed = ",".join(str(m) for m in members)
    return load_settings(
        [
            "+env=alphabet_sort",
            "stages=[train]",
            "reward_model=ensemble",
            f"reward_model.checkpoints=[{listed}]",
            *overrides,
        ]
    )


def batch(pairs):
    """What TRL hands a reward function: prompts, its own decoded completions, dataset columns and
    our rollout fields (the real episode)."""
    prompts = [p.prompt for p in pairs] + [p.prompt for p in pairs]
    episodes = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    return {
        "prompts": prompts,
        "completions": [[{"role": "assistant", "content": "TRL's text"}] for _ in episodes],
        COMPLETION_FIELD: episodes,
        "language": [p.language for p in pairs] * 2,
    }


# ---- combination semantics on known scores -------------------------------------------------


def test_combine_mean_min_and_mean_minus_std_on_known_scores():
    members = [[1.0, 5.0, None, None], [3.0, -1.0, None, 2.0], [2.0, 2.0, 4.0, None]]
    assert combine_scores(members, "mean") == [2.0, 2.0, 4.0, 2.0]
    assert combine_scores(members, "min") == [1.0, -1.0, 4.0, 2.0]
    got = combine_scores(members, "mean_minus_std", k=1.0)
    assert got[0] == pytest.approx(2.0 - math.sqrt(2 / 3))
    assert got[1] == pytest.approx(2.0 - math.sqrt(6.0))
    assert got[2:] == [4.0, 2.0]  # one member: no spread
    assert combine_scores(members, "mean_minus_std", k=0.0) == combine_scores(members, "mean")
    assert combine_scores(members, "mean_minus_std", k=2.0)[1] == pytest.approx(2.0 - 2 * math.sqrt(6.0))
    assert combine_scores([[None], [float("nan")]], "min") == [None]
    with pytest.raises(ValueError):
        combine_scores(members, "max")


# ---- real members ------------------------------------------------------------------------------


def test_members_are_normalised_per_language_before_they_are_combined(members, pairs):
    b = batch(pairs)
    scorers = [RewardModelScorer(str(m), device="cpu") for m in members]
    raw = [s.raw(b["prompts"], b[COMPLETION_FIELD], b["language"]) for s in scorers]
    normalized = [s.normalized(b["prompts"], b[COMPLETION_FIELD], b["language"]) for s in scorers]
    assert max(abs(v) for v in raw[1]) > 50 * max(abs(v) for v in raw[0])  # very different raw scales
    for lang in LANGUAGES:  # the members' reference sets: standardised per member and language
        for member in normalized:
            values = [v for v, code in zip(member, b["language"], strict=True) if code == lang]
            assert sum(values) / len(values) == pytest.approx(0.0, abs=1e-6)

    expected = {
        "mean": combine_scores(normalized, "mean"),
        "min": combine_scores(normalized, "min"),
        "mean_minus_std": combine_scores(normalized, "mean_minus_std", k=0.5),
    }
    for how, want in expected.items():
        funcs = learned_reward_funcs(
            ensemble_cfg(members, f"reward_model.combine={how}", "reward_model.k=0.5"), device="cpu"
        )
        assert [f.name for f in funcs] == ["rm_0", "rm_1", "reward_model"]
        assert [f.weight for f in funcs] == [0.0, 0.0, 1.0]  # members are logged, the combination counts
        rm_0, rm_1, combined = (f.fn for f in funcs)
        assert rm_0(**b) == pytest.approx(normalized[0]) and rm_1(**b) == pytest.approx(normalized[1])
        logged: dict[str, float] = {}
        assert combined(**b, log_metric=logged.__setitem__) == pytest.approx(want)
        # a batch in two languages: the mean per language is logged too
        for lang in LANGUAGES:
            values = [v for v, code in zip(want, b["language"], strict=True) if code == lang]
            assert logged[f"rewards/reward_model/{lang}/mean"] == pytest.approx(sum(values) / len(values))
    # on raw scores the min would follow the large-scale member almost everywhere: it does not here
    raw_min = [min(a, c) for a, c in zip(raw[0], raw[1], strict=True)]
    assert expected["min"] != pytest.approx(raw_min)
    picks_member_1 = sum(c == n1 for c, n1 in zip(expected["min"], normalized[1], strict=True))
    assert 0 < picks_member_1 < len(raw_min)


def test_one_scoring_pass_serves_every_function_of_a_batch(members, pairs):
    funcs = learned_reward_funcs(ensemble_cfg(members), device="cpu")
    source = funcs[-1].fn.source
    b = batch(pairs)
    first = source.member_scores(**b)
    for f in funcs:
        f.fn(**b)
    assert source.member_scores(**b) is first  # cached: the batch was scored once
    other = batch(pairs[:3])
    assert source.member_scores(**other) is not first and len(source.member_scores(**other)[0]) == 6


def test_trl_sees_them_as_batched_functions_weighted_with_the_rubric(members):
    cfg = ensemble_cfg(members, "reward_model.weight=2.0", "reward_model.rubric_weight=0.5")
    env = packaged_env("alphabet_sort", seed=0, num_train_examples=4)
    funcs, weights = rubric_reward_funcs(build_rewards(cfg, env).training())
    assert [getattr(f, "__name__", None) for f in funcs] == [
        "alphabet_sort_reward",
        "rm_0",
        "rm_1",
        "reward_model",
    ]
    assert weights == [0.5, 0.0, 0.0, 2.0]
    assert funcs[-1].trl_batched and not getattr(funcs[0], "trl_batched", False)
    learned_only = load_settings(
        [
            "+env=alphabet_sort",
            "stages=[train]",
            "reward_model=learned_only",
            f"reward_model.checkpoints=[{members[0]}]",
        ]
    )
    _, weights = rubric_reward_funcs(build_rewards(learned_only, env).training())
    assert weights == [0.0, 1.0]  # the rubric is logged only


def test_languages_the_rm_does_not_know(members, pairs):
    cfg = load_settings(
        [
            "+env=alphabet_sort",
            "stages=[train]",
            "reward_model=learned",
            f"reward_model.checkpoints=[{members[0]}]",
            "language=de",
        ]
    )
    with pytest.raises(UserError, match=r"reward_model.checkpoints\[0\]=.* was trained on en, sv, not on de"):
        learned_reward_funcs(cfg, device="cpu")
    (func,) = learned_reward_funcs(
        load_settings(
            [
                "+env=alphabet_sort",
                "stages=[train]",
                "reward_model=learned",
                f"reward_model.checkpoints=[{members[0]}]",
            ]
        ),
        device="cpu",
    )
    b = batch(pairs[:2])
    b["language"] = ["en", "de", "sv", "de"]
    scores = func.fn(**b)
    assert scores[1] is None and scores[3] is None  # TRL leaves these out of the mean
    assert all(isinstance(s, float) for s in (scores[0], scores[2]))


def test_garbage_completions_score_without_raising(members):
    (func,) = learned_reward_funcs(
        load_settings(
            [
                "+env=alphabet_sort",
                "stages=[train]",
                "reward_model=learned",
                f"reward_model.checkpoints=[{members[0]}]",
            ]
        ),
        device="cpu",
    )
    completions = [
        "",
        "\x00\ud800 lone surrogate <|im_end|><|endoftext|><lang:sv>",
        [{"role": "assistant"}],
        [{"content": None}, 5, None],
        "名前 " * 3000,  # far longer than max_length: the middle is cut
        None,
    ]
    scores = func.fn(prompts=["q"] * len(completions), completions=completions)  # TRL's own decoding only
    assert len(scores) == len(completions) and all(isinstance(s, float) and math.isfinite(s) for s in scores)


def test_length_batches_cap_sequences_and_padded_tokens():
    from grpo.reward_model.scoring import length_batches

    lengths = [10, 500, 20, 480, 30, 5000, 15]
    batches = length_batches(lengths, max_sequences=3, max_tokens=999, max_pad=10**6)
    # longest first; 2 x 500 tokens > 999, 2 x 480 fit, at most 3 per batch
    assert batches == [[5], [1], [3, 4], [2, 6, 0]]
    # at most 32 padded tokens per sequence (the default): 480 and 30 no longer share a batch
    assert length_batches(lengths, max_sequences=3, max_tokens=999) == [[5], [1], [3], [4, 2, 6], [0]]
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 999
    assert length_batches([], 4) == []


def test_bucketed_scores_equal_unbucketed_batches_in_the_original_order():
    """score_ids sorts by length into buckets; the scores equal those of plain batches in the
    input order (right-padded, with an attention mask), each at its own index."""
    cfg = load_settings(["+env=alphabet_sort", "reward_model=learned"])
    model, tokenizer = build_backbone(
        cfg.reward_model.backbone, ["en"], tag_token=True, per_language_heads=False
    )
    model.eval()
    generator = torch.Generator().manual_seed(0)
    lengths = [5, 300, 17, 120, 64, 9, 250, 33, 120, 2]
    sequences = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in lengths]
    bucketed = score_ids(model, sequences, tokenizer.pad_token_id, batch_size=3)

    plain = []
    with torch.inference_mode():
        for start in range(0, len(sequences), 4):  # input order: lengths mixed within a batch
            chunk = sequences[start : start + 4]
            width = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), width), tokenizer.pad_token_id)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, seq in enumerate(chunk):
                ids[row, : len(seq)], mask[row, : len(seq)] = torch.tensor(seq), 1
            plain += model(input_ids=ids, attention_mask=mask).logits[:, 0].tolist()
    assert bucketed == pytest.approx(plain, abs=1e-4)
    assert len(set(round(s, 4) for s in bucketed)) == len(sequences)  # distinct: the order is tested


@pytest.mark.slow
def test_preflight_refuses_a_language_the_rm_does_not_know_before_any_run(members, tmp_path):
    """The mismatch is one line naming the fix, exit 2, found from the RM dir's JSON before any
    model loads or any MLflow run exists; the fix it names passes the preflight."""
    from grpo.cli.checks import check

    args = [
        "+env=alphabet_sort",
        "stages=[eval]",
        "reward_model=learned",
        f"reward_model.checkpoints=[{members[0]}]",
    ]
    proc = run_grpo([*args, "language=de"], root=tmp_path / "outputs", timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        f"error: reward_model.checkpoints[0]={members[0]} was trained on en, sv, not on de (the run's language): "
        "run in its languages with language=mix 'language.members=[en,sv]', or train it with pairs in de"
    ]
    assert not (tmp_path / "outputs").exists()  # no run folder, no MLflow store
    # a mix with one language the RM knows: the fix keeps that one
    with pytest.raises(
        UserError, match=r"not on de \(the run's language\): run in its languages with language=en,"
    ):
        check(load_settings([*args, "language=mix", "language.members=[en,de]"]))
    # the named fix passes, in process and on the command line
    check(load_settings([*args, "language=mix", "language.members=[en,sv]"]))
    ok = run_grpo(
        [*args, "language=mix", "language.members=[en,sv]", "--cfg", "job"],
        root=tmp_path / "outputs",
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
