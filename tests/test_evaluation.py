"""The evaluator: results.jsonl / metadata.json contents, statistics, pass@k, per-language table,
atomic writes, and the eval config checks.

Runs on the real tiny model through the hf backend, and on a scripted text-level backend (a
stand-in for a model: it answers each request with the row's reference answer or a wrong one,
following a per-rollout plan) so that scores other than 0 go through the whole pipeline.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.grpo_process import run_grpo
from helpers.packaged_env import packaged_env

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.envs.arithmetic import ArithmeticEnv
from grpo.envs.base import Environment, Row
from grpo.envs.parsers import assistant_turns
from grpo.envs.rubric import RewardFunc
from grpo.errors import UserError
from grpo.evaluation.evaluator import evaluate
from grpo.evaluation.setup import EvalSetup
from grpo.evaluation.summary import pass_at_k
from grpo.files import to_json, write_jsonl_atomic
from grpo.generation.base import GenRequest, GenResult, Sampling
from grpo.run.layout import METADATA_FILE, RESULTS_FILE

RECORD_KEYS = {
    "example_id",
    "rollout_index",
    "language",
    "prompt",
    "completion",
    "messages",
    "info",
    "reward",
    "num_turns",
    "truncated",
}
# small token budgets keep the tiny model fast; the alphabet-sort budget check wants >= 16 per turn
TINY = [
    "model=tiny",
    "generation.max_tokens_per_turn=16",
    "trainer.max_completion_length=64",
]


def read_results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def ascii_share(completion: Any = None, **_: Any) -> float:
    """An extra reward with values spread over [0, 1] even for a random model's output."""
    text = "".join(assistant_turns(completion))
    return sum(c.isascii() for c in text) / len(text) if text else 0.0


class ScriptedBackend:
    """A text-level model stand-in: rollout k of example i answers turn t with the row's reference
    answer when plan[i][k] is True, else with `wrong(reference_text)`; `cut(row, k)` True: that
    answer stopped at the token limit (not ended by the model)."""

    token_level = False

    def __init__(
        self,
        env: Environment,
        rows: Sequence[Row],
        plan: Sequence[Sequence[bool]],
        wrong: Any,
        cut: Any = None,
    ):
        self.env, self.rows, self.plan, self.wrong, self.cut = env, list(rows), plan, wrong, cut

    def _row(self, messages: list[dict[str, Any]]) -> Row:
        for row in self.rows:
            if messages[: len(row.prompt)] == row.prompt:
                return row
        raise AssertionError("request for an unknown prompt")

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        seen: dict[int, int] = {}
        out = []
        for request in requests:
            row = self._row(request.messages)
            # episodes are row-major and every rollout of a row is active for the same turns,
            # so the j-th request of a row in one call is its rollout j
            k = seen[row.id] = seen.get(row.id, -1) + 1
            turn = sum(1 for m in request.messages if m["role"] == "assistant")
            reference = assistant_turns(self.env.reference_completion(row))[turn]
            text = reference if self.plan[row.id][k] else self.wrong(reference)
            finished = not (self.cut is not None and self.cut(row, k))
            out.append(GenResult(text=text, num_tokens=len(text.split()), finished=finished))
        return out


@pytest.fixture(scope="module")
def tiny_alphabet() -> tuple[Any, Any, Any]:
    from grpo.generation import make_backend

    cfg = load_settings(["+env=alphabet_sort", *TINY, "eval.num_examples=2", "eval.rollouts_per_example=2"])
    return cfg, build_env(cfg.env, cfg.language), make_backend(cfg.generation, None, None, cfg.model)


# ---- the estimator and small pieces ----------------------------------------------------------------


def test_pass_at_k_hand_computed_values() -> None:
    # 1 - C(n-c, k) / C(n, k)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_at_k(10, 3, 3) == pytest.approx(1 - 35 / 120)
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 2, 2) == 1.0  # fewer wrong samples than k: some draw is always right
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_atomic_write_leaves_no_partial_file(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_FILE

    def records(fail_at: int | None):
        for i in range(5):
            if i == fail_at:
                raise RuntimeError("writer crashed")
            yield {"i": i, "name": "Åsa"}

    with pytest.raises(RuntimeError):
        write_jsonl_atomic(path, records(fail_at=3))
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one

    write_jsonl_atomic(path, records(fail_at=None))
    good = path.read_bytes()
    assert good.decode("utf-8").count("\n") == 5 and "Åsa" in good.decode("utf-8")
    with pytest.raises(RuntimeError):
        write_jsonl_atomic(path, records(fail_at=2))
    assert path.read_bytes() == good  # the previous complete file survives the crash
    assert [p.name for p in tmp_path.iterdir()] == [RESULTS_FILE]


def test_to_json_is_utf8_and_json_safe() -> None:
    text = to_json({"names": {"Zoë"}, "pair": (1, 2), "path": Path("/x")})
    assert json.loads(text) == {"names": ["Zoë"], "pair": [1, 2], "path": "/x"}
    assert "Zoë" in text


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("eval.num_examples=0", "eval.num_examples"),
        ("eval.num_examples=-3", "eval.num_examples"),
        ("eval.rollouts_per_example=0", "eval.rollouts_per_example"),
        ("eval.top_p=0", "eval.top_p"),
        ("eval.temperature=-1", "eval.temperature"),
    ],
)
def test_eval_rules_reject_bad_settings(override: str, field: str) -> None:
    settings = load_settings(["+env=alphabet_sort", override])
    with pytest.raises(UserError, match=field) as info:
        check(settings)
    assert "\n" not in str(info.value)


def test_eval_rules_accept_defaults() -> None:
    settings = load_settings(["+env=alphabet_sort"])
    check(settings)
    assert (settings.eval.num_examples, settings.eval.rollouts_per_example) == (5, 3)


def test_cli_negative_num_examples_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = run_grpo(["+env=alphabet_sort", "eval.num_examples=-1"], root=tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "eval.num_examples" in lines[0], proc.stderr


# ---- end to end on the tiny model ----------------------------------------------------------------------


@pytest.mark.slow
def test_evaluate_tiny_model_end_to_end(tmp_path: Path, tiny_alphabet, capsys) -> None:
    cfg, env, backend = tiny_alphabet
    extra = RewardFunc("ascii_share", ascii_share, 0.5)
    result = evaluate(
        EvalSetup.of(cfg), env, backend, tmp_path, label="baseline", extra_reward_funcs=[extra], step=7
    )
    out = capsys.readouterr().out

    records = read_results(tmp_path / RESULTS_FILE)
    assert len(records) == 2 * 2 == result.n * result.r
    names = ["alphabet_sort_reward", "ascii_share"]
    rows = {row.id: row for row in env.rows("eval", 2)}
    assert [(r["example_id"], r["rollout_index"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for rec in records:
        assert set(rec) == RECORD_KEYS | set(names)
        row = rows[rec["example_id"]]
        assert rec["prompt"] == row.prompt and rec["info"] == json.loads(to_json(row.info))
        assert rec["language"] == "en"
        assert rec["messages"] == rec["prompt"] + rec["completion"]
        assert rec["num_turns"] == sum(m["role"] == "assistant" for m in rec["completion"]) >= 1
        assert isinstance(rec["truncated"], bool)
        # the stored scores are what the env's own scoring gives for the stored completion
        assert rec["alphabet_sort_reward"] == env.score(row, rec["completion"], {})["alphabet_sort_reward"]
        assert rec["ascii_share"] == ascii_share(completion=rec["completion"])
        assert rec["reward"] == pytest.approx(1.0 * rec["alphabet_sort_reward"] + 0.5 * rec["ascii_share"])
    totals = [r["reward"] for r in records]
    assert any(0 < r["ascii_share"] < 1 for r in records) or len(set(totals)) > 1

    meta = json.loads((tmp_path / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["reward_mean"] == pytest.approx(statistics.fmean(totals))
    assert meta["reward_std"] == pytest.approx(statistics.pstdev(totals))
    for name in names:
        assert meta["per_function"][name] == pytest.approx(statistics.fmean(r[name] for r in records))
    assert meta["env"] == "alphabet_sort" and meta["label"] == "baseline" and meta["step"] == 7
    assert "_target_" not in meta["env_args"] and meta["env_args"]["max_turns"] == 3
    assert meta["model"]["name"] == "tiny" and meta["generation_backend"] == "hf"
    assert meta["sampling"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens_per_turn": 16,
        "max_completion_tokens": 64,
        "seed": 0,
    }
    assert (meta["num_examples"], meta["rollouts_per_example"], meta["seed"]) == (2, 2, 0)
    assert meta["time_s"] > 0 and meta["timestamp"]
    assert meta["per_language"]["en"]["count"] == 4

    assert result.mean == pytest.approx(meta["reward_mean"]) and result.std == pytest.approx(
        meta["reward_std"]
    )
    assert result.rewards == [totals[:2], totals[2:]]
    assert result.results_path == tmp_path / RESULTS_FILE and result.metadata_path == tmp_path / METADATA_FILE
    metrics = result.to_metrics("eval/baseline/")
    assert metrics["eval/baseline/mean"] == result.mean
    assert metrics["eval/baseline/func/ascii_share"] == result.per_function["ascii_share"]
    assert metrics["eval/baseline/lang/en/count"] == 4.0

    assert "alphabet_sort" in out and "tiny" in out and "2 x 2" in out
    assert f"{result.mean:.4f} ± {result.std:.4f}" in out
    assert "ascii_share" in out and "r0" in out and "r1" in out
    table = out[out.index("rewards per example") :].splitlines()[2:4]
    assert [line.split()[1:] for line in table] == [[f"{v:.3f}" for v in row] for row in result.rewards]
    assert "per language" not in out  # a single language: no table printed


@pytest.mark.slow
def test_evaluate_is_deterministic_per_seed(tmp_path: Path, tiny_alphabet) -> None:
    cfg, env, backend = tiny_alphabet

    def completions(seed: int, name: str) -> list[Any]:
        run_cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, seed=seed))
        evaluate(EvalSetup.of(run_cfg), env, backend, tmp_path / name)
        return [(r["prompt"], r["completion"]) for r in read_results(tmp_path / name / RESULTS_FILE)]

    first, again, other = completions(0, "a"), completions(0, "b"), completions(1, "c")
    assert first == again
    assert [p for p, _ in first] == [p for p, _ in other]  # same rows whatever the sampling seed
    assert [c for _, c in first] != [c for _, c in other]


# ---- scores, pass@k and languages through the scripted backend --------------------------------------------


def add_bogus_line(reference: str) -> str:
    """The reference answer with one extra name before the closing tag: similarity in (0, 1)."""
    at = reference.rfind("</")
    return reference[:at] + "Zzzzz\n" + reference[at:]


def test_scripted_alphabet_sort_scores_and_no_pass_at_k(tmp_path: Path, capsys) -> None:
    cfg = load_settings(["+env=alphabet_sort", "eval.num_examples=3", "eval.rollouts_per_example=2"])
    env = build_env(cfg.env, cfg.language)
    rows = env.rows("eval", 3)
    backend = ScriptedBackend(env, rows, [[True, False]] * 3, add_bogus_line)
    result = evaluate(EvalSetup.of(cfg), env, backend, tmp_path)
    out = capsys.readouterr().out
    records = read_results(tmp_path / RESULTS_FILE)
    for rec in records:
        row = rows[rec["example_id"]]
        assert rec["num_turns"] == row.info["num_turns"] and not rec["truncated"]
        assert rec["reward"] == env.score(row, rec["completion"], {})["alphabet_sort_reward"]
        if rec["rollout_index"] == 0:
            assert rec["reward"] == 1.0
        else:
            assert 0.0 < rec["reward"] < 1.0
    assert result.pass_at_k is None and "pass@" not in out
    assert not any(k.startswith("pass_at") for k in result.to_metrics())
    meta = json.loads((tmp_path / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["pass_at_k"] is None


def test_arithmetic_pass_at_k_hand_worked(tmp_path: Path, capsys) -> None:
    cfg = load_settings(["+env=arithmetic", "eval.num_examples=3", "eval.rollouts_per_example=3"])
    env = build_env(cfg.env, cfg.language)
    plan = [[True, False, True], [False, False, False], [True, True, True]]
    backend = ScriptedBackend(env, env.rows("eval", 3), plan, lambda _: "no idea \\boxed{nope}")
    result = evaluate(EvalSetup.of(cfg), env, backend, tmp_path)
    out = capsys.readouterr().out

    assert result.rewards == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    # correct counts c = 2, 0, 3 of n = 3: pass@1 = mean(2/3, 0, 1); pass@2 = mean(1 - C(1,2)/C(3,2), 0, 1)
    expected = {1: 5 / 9, 2: 2 / 3, 3: 2 / 3}
    assert result.pass_at_k == pytest.approx(expected)
    meta = json.loads((tmp_path / METADATA_FILE).read_text(encoding="utf-8"))
    assert {int(k): v for k, v in meta["pass_at_k"].items()} == pytest.approx(expected)
    assert result.to_metrics()["pass_at_2"] == pytest.approx(2 / 3)
    assert "pass@1=0.5556" in out and "pass@3=0.6667" in out
    # 5 right of 9 rollouts: mean 5/9, population std sqrt(p (1 - p))
    assert result.mean == pytest.approx(5 / 9)
    assert result.std == pytest.approx(math.sqrt(5 / 9 * 4 / 9))


class TwoLanguageArithmetic(ArithmeticEnv):
    """Arithmetic rows tagged alternately en / sv (the per-language breakdown only reads the code)."""

    def make_row(self, rng: Any, index: int, split: str) -> Row:
        row = super().make_row(rng, index, split)
        row.language = "sv" if index % 2 else "en"
        return row


def two_language_eval() -> tuple[Any, Any, ScriptedBackend]:
    """4 examples x 2 rollouts of TwoLanguageArithmetic: en rows (0, 2) get 1 of 4 right, sv rows
    (1, 3) 3 of 4; the second rollout of each sv row is cut by the token limit."""
    cfg = load_settings(["+env=arithmetic", "eval.num_examples=4", "eval.rollouts_per_example=2"])
    # language=mix: the env holds the en and sv prompts its rows' references are written in
    env = packaged_env(
        "arithmetic", "mix", _target_="test_evaluation.TwoLanguageArithmetic", num_eval_examples=10
    )
    plan = [[True, False], [True, True], [False, False], [True, False]]
    cut = lambda row, k: row.language == "sv" and k == 1  # noqa: E731
    return cfg, env, ScriptedBackend(env, env.rows("eval", 4), plan, lambda _: "\\boxed{}", cut)


def test_per_language_table(tmp_path: Path, capsys) -> None:
    cfg, env, backend = two_language_eval()
    result = evaluate(EvalSetup.of(cfg), env, backend, tmp_path)
    out = capsys.readouterr().out

    records = read_results(tmp_path / RESULTS_FILE)
    assert [r["language"] for r in records] == ["en", "en", "sv", "sv", "en", "en", "sv", "sv"]
    for code in ("en", "sv"):
        values = [r["reward"] for r in records if r["language"] == code]
        stats = result.per_language[code]
        assert stats["mean"] == pytest.approx(statistics.fmean(values))
        assert stats["std"] == pytest.approx(statistics.pstdev(values))
        assert stats["count"] == 4 and stats["examples"] == 2
    assert result.per_language["en"]["mean"] == 0.25 and result.per_language["sv"]["mean"] == 0.75
    metrics = result.to_metrics("eval/eval/")
    assert metrics["eval/eval/lang/sv/mean"] == 0.75 and metrics["eval/eval/lang/en/count"] == 4.0
    meta = json.loads((tmp_path / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["per_language"]["sv"]["mean"] == 0.75
    table = out[out.index("per language") :].splitlines()
    assert table[2].split() == ["en", "0.2500", f"{math.sqrt(0.25 * 0.75):.4f}", "4", "0.0%"]
    assert table[3].split() == ["sv", "0.7500", f"{math.sqrt(0.25 * 0.75):.4f}", "4", "50.0%"]
    # truncated rollouts: every record says so, overall and per language in the result, metrics,
    # metadata and the report; a cut answer is scored as it stands
    assert [r["truncated"] for r in records] == [False, False, False, True] * 2
    assert result.truncated == 0.25
    assert (result.per_language["en"]["truncated"], result.per_language["sv"]["truncated"]) == (0.0, 0.5)
    assert metrics["eval/eval/truncated"] == 0.25 and metrics["eval/eval/lang/sv/truncated"] == 0.5
    assert meta["truncated"] == 0.25 and meta["per_language"]["sv"]["truncated"] == 0.5
    assert "truncated: 25.0% of rollouts" in out


def test_extra_reward_name_clash_is_user_error(tmp_path: Path) -> None:
    cfg = load_settings(["+env=arithmetic", "eval.num_examples=1", "eval.rollouts_per_example=1"])
    env = build_env(cfg.env, cfg.language)
    backend = ScriptedBackend(env, env.rows("eval", 1), [[True]], str)
    with pytest.raises(UserError, match="exact_match"):
        evaluate(
            EvalSetup.of(cfg),
            env,
            backend,
            tmp_path,
            extra_reward_funcs=[RewardFunc("exact_match", ascii_share)],
        )
    with pytest.raises(UserError, match="reward"):
        evaluate(EvalSetup.of(cfg), env, backend, tmp_path, extra_reward_funcs=[("reward", ascii_share, 1.0)])
    assert not (tmp_path / RESULTS_FILE).exists()


def test_score_columns_are_reported_unclipped_and_not_in_the_reward(tmp_path: Path, capsys) -> None:
    cfg, env, backend = two_language_eval()
    calls = []

    def rm_score(prompts, completions, **fields):
        """Batched, in TRL's reward signature: a right answer scores 2.5, a wrong one -1.5, with
        one example out of the model's reach (None) and one broken score (NaN)."""
        calls.append(fields)
        out = []
        for completion, info in zip(completions, fields["row_info"], strict=True):
            right = "\\boxed{" + info["answer"] + "}" in completion[-1]["content"]
            out.append(2.5 if right else -1.5)
        out[2], out[3] = None, math.nan  # example 1 (sv): no score
        return out

    result = evaluate(
        EvalSetup.of(cfg), env, backend, tmp_path, score_funcs=[RewardFunc("reward_model", rm_score)]
    )
    out = capsys.readouterr().out

    assert len(calls) == 1 and set(calls[0]) >= {
        "rollout_completion",
        "rollout_state",
        "row_info",
        "language",
    }
    records = read_results(tmp_path / RESULTS_FILE)
    assert [r["reward_model"] for r in records] == [2.5, -1.5, None, None, -1.5, -1.5, 2.5, -1.5]
    # the reward is the rubric's alone
    assert [r["reward"] for r in records] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert result.mean == 0.5 and "reward_model" not in result.per_function
    scores = result.scores["reward_model"]
    assert scores["mean"] == pytest.approx(statistics.fmean([2.5, -1.5, -1.5, -1.5, 2.5, -1.5]))
    assert scores["count"] == 6
    assert scores["per_language"] == {"en": pytest.approx(-0.5), "sv": pytest.approx(0.5)}
    metrics = result.to_metrics("eval/final/")
    assert metrics["eval/final/score/reward_model/lang/en"] == pytest.approx(-0.5)
    assert metrics["eval/final/score/reward_model/mean"] == pytest.approx(scores["mean"])
    assert metrics["eval/final/mean"] == 0.5
    meta = json.loads((tmp_path / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["scores"]["reward_model"]["per_language"]["sv"] == pytest.approx(0.5)
    assert "(a score, not in the reward: unclipped)" in out
    table = out[out.index("per language") :].splitlines()
    assert table[1].split()[-1] == "reward_model" and table[2].split()[-1] == "-0.5000"

    with pytest.raises(UserError, match="exact_match"):
        evaluate(EvalSetup.of(cfg), env, backend, tmp_path, score_funcs=[RewardFunc("exact_match", rm_score)])


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_learned_reward_model_gets_its_score_column(tmp_path: Path) -> None:
    """stages=[reward_model,eval] with reward_model=learned: the evaluation reports the RM's
    normalised score of every rollout as GRPO's reward would be (the default guard caps it at the
    score of the row's reference episode), next to the rubric's reward."""
    from grpo.envs.base import Row, reference_of
    from grpo.rewards.learned import RewardModelScorer
    from grpo.run.layout import RM_META_FILE
    from grpo.stages import run_stages

    cfg = load_settings(
        [
            "+env=alphabet_sort",
            *TINY,
            "stages=[reward_model,eval]",
            "reward_model=learned",
            "env.max_turns=1",
            "reward_model.data.synthetic.n=24",
            "reward_model.training.max_steps=4",
            "eval.num_examples=2",
            "eval.rollouts_per_example=2",
            f"output_root={tmp_path}",
        ]
    )
    run_dir = tmp_path / "run"
    run_stages(cfg, run_dir=run_dir)
    assert (run_dir / "reward_model" / RM_META_FILE).is_file()
    records = read_results(run_dir / "eval" / RESULTS_FILE)
    scorer = RewardModelScorer(str(run_dir / "reward_model"))
    prompts, languages = [r["prompt"] for r in records], [r["language"] for r in records]
    scores = scorer.normalized(prompts, [r["completion"] for r in records], languages)
    reference = reference_of(build_env(cfg.env, cfg.language))
    references = scorer.normalized(
        prompts, [reference(Row(0, r["prompt"], r["info"], r["language"])) for r in records], languages
    )
    expected = [min(s, ref) for s, ref in zip(scores, references, strict=True)]
    assert [r["reward_model"] for r in records] == pytest.approx(expected)
    assert any(not 0.0 <= v <= 1.0 for v in expected)  # unclipped
    meta = json.loads((run_dir / "eval" / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["scores"]["reward_model"]["per_language"]["en"] == pytest.approx(statistics.fmean(expected))
    assert "reward_model" not in meta["per_function"]


def test_the_verdict_pairs_examples_by_id_and_says_whether_the_change_is_noise():
    from grpo.evaluation.summary import EvalResult, paired_change

    def result(rows, ids):
        flat = [v for row in rows for v in row]
        return EvalResult(
            "x",
            len(rows),
            len(rows[0]),
            sum(flat) / len(flat),
            0.0,
            {},
            {},
            {},
            None,
            rows,
            None,
            None,
            0.0,
            example_ids=ids,
        )

    before = result([[0.0, 0.2], [0.5, 0.5], [0.1, 0.1], [0.3, 0.1]], [0, 1, 2, 3])
    # the same examples in another order, each better by 0.2-0.4
    after = result([[0.4, 0.4], [0.8, 0.8], [0.4, 0.6], [0.4, 0.4]], [2, 1, 0, 3])
    change = paired_change(before, after)
    diffs = [0.5 - 0.1, 0.8 - 0.5, 0.4 - 0.1, 0.4 - 0.2]
    mean = sum(diffs) / 4
    se = statistics.stdev(diffs) / 2
    assert (change.mean, change.se, change.examples) == (pytest.approx(mean), pytest.approx(se), 4)
    assert change.more_than_noise
    assert change.verdict() == (
        f"verdict: final - baseline = {mean:+.4f} (paired SE {se:.4f} over 4 examples): "
        f"better, more than noise ({mean / se:.1f} SE)"
    )
    # a change smaller than 2 SE is noise; too few examples cannot tell
    noisy = paired_change(before, result([[0.5, 0.5], [0.1, 0.1], [0.0, 0.2], [0.3, 0.1]], [0, 1, 2, 3]))
    assert not noisy.more_than_noise and "within noise" in noisy.verdict()
    one = paired_change(result([[0.0]], [0]), result([[1.0]], [0]))
    assert one.verdict().endswith("on 1 example(s): too few to tell noise from a change")
    # no spread (paired SE 0): said plainly, never an "inf SE" or nan
    same = [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    equal = paired_change(result(same, [0, 1, 2]), result(same, [0, 1, 2]))
    assert equal.se == 0 and not equal.more_than_noise
    assert equal.verdict() == (
        "verdict: final - baseline = +0.0000 over 3 examples: no difference (every paired reward equal)"
    )
    shifted = paired_change(before, result([[0.3, 0.3], [0.7, 0.7], [0.3, 0.3], [0.4, 0.4]], [0, 1, 2, 3]))
    assert shifted.more_than_noise and shifted.verdict() == (
        "verdict: final - baseline = +0.2000 over 4 examples: better, exactly (every example changed "
        "by the same amount, no spread)"
    )
    for change in (equal, shifted):
        assert "inf" not in change.verdict() and "nan" not in change.verdict()
