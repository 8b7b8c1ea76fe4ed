"""Verifiers environments as they are (grpo/envs/verifiers_env.py): two small classic-API
environments, written here and put on sys.path as installed modules, run through grpo.

  - a single-turn one: system prompt + few-shot, an XMLParser, a sync and an async reward function
    (the async one unbounded, with a negative weight: verifiers' values pass unclipped);
  - a multi-turn one: async env_response, setup_state, a @vf.stop condition, a final env response,
    rewards that read the state.

grpo's evaluation of scripted completions scores exactly what verifiers' own Rubric.score_group
gives for the same completions (single-turn: states built from the rows; multi-turn: states of
verifiers' own rollout with a scripted client), and two GRPO steps train on the multi-turn one
with the tiny model, the environment's turns masked out of the loss. Skipped without verifiers.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest

vf = pytest.importorskip("verifiers")

from helpers.env_mask_check import assert_env_mask_follows_the_template  # noqa: E402

from grpo.compose import compose, load_settings  # noqa: E402
from grpo.envs import build_env  # noqa: E402
from grpo.envs.verifiers_env import INSTALL_HINT, VerifiersEnv, load_verifiers_env  # noqa: E402
from grpo.errors import UserError  # noqa: E402
from grpo.evaluation.evaluator import evaluate_rows  # noqa: E402
from grpo.evaluation.setup import EvalSetup  # noqa: E402
from grpo.generation.base import GenRequest, GenResult, Sampling  # noqa: E402

SINGLE_ID, MULTI_ID = "vf-grpo-single", "someorg/vf-grpo-multi"

SINGLE_PY = """
import asyncio

import verifiers as vf
from datasets import Dataset


def load_environment(num_examples=4):
    rows = [{"question": f"What is {a}+{b}?", "answer": str(a + b), "info": {"a": a, "b": b}}
            for a, b in [(2, 2), (3, 4), (10, 7), (1, 8), (6, 6)]][:num_examples]
    parser = vf.XMLParser(["reasoning", "answer"], answer_field="answer")

    def correct_answer(completion, answer, parser):
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    async def length_penalty(completion, info, **kwargs):
        await asyncio.sleep(0)
        return len(completion[-1]["content"] or "") / 10 + info["a"] / 100  # unbounded

    rubric = vf.Rubric(funcs=[correct_answer, length_penalty, parser.get_format_reward_func()],
                       weights=[1.0, -0.5, 0.2], parser=parser)
    few_shot = [{"role": "user", "content": "What is 1+1?"},
                {"role": "assistant", "content": "<reasoning>1+1=2</reasoning>\\n<answer>2</answer>"}]
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), system_prompt="Think, then answer in tags.",
                            few_shot=few_shot, parser=parser, rubric=rubric)
"""

MULTI_PY = """
import verifiers as vf
from datasets import Dataset


class GuessEnv(vf.MultiTurnEnv):
    async def setup_state(self, state):
        state["guesses"] = []
        return state

    async def env_response(self, messages, state, **kwargs):
        guess = (self.parser.parse_answer(messages) or "").strip()
        state["guesses"].append(guess)
        if not guess.isdigit():
            return [vf.UserMessage(content="Answer with a number in <answer> tags.")]
        if guess == state["answer"]:
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]
            return state["final_env_response"]
        return [vf.UserMessage(content="higher" if int(guess) < int(state["answer"]) else "lower")]

    @vf.stop
    async def gave_up(self, state):
        return any(m.get("content") == "<answer>give up</answer>" for m in state["trajectory"][-1]["completion"]) \\
            if state["trajectory"] else False


def load_environment(max_turns=3):
    rows = [{"question": f"Game {i}: guess my number between 1 and 9.", "answer": str(t)}
            for i, t in enumerate((7, 3, 5, 2, 8, 4))]
    parser = vf.XMLParser(["answer"])

    def solved(state, answer):
        return 1.0 if state.get("guesses") and state["guesses"][-1] == answer else 0.0

    async def fewer_turns(state, **kwargs):
        return 1.0 / max(1, len(state["trajectory"]))

    rubric = vf.Rubric(funcs=[solved, fewer_turns], weights=[1.0, 0.3], parser=parser)
    return GuessEnv(dataset=Dataset.from_list(rows), parser=parser, rubric=rubric, max_turns=max_turns)
"""


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory) -> Path:
    """The two environments as importable modules (what `vf-install` does, minus pip)."""
    root = tmp_path_factory.mktemp("vf_envs")
    (root / "vf_grpo_single.py").write_text(SINGLE_PY, encoding="utf-8")
    (root / "vf_grpo_multi.py").write_text(MULTI_PY, encoding="utf-8")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


def env_of(env_id: str, *overrides: str) -> VerifiersEnv:
    cfg = compose(["+env=verifiers", f"env.id={env_id}", *overrides])
    return build_env(cfg.env, cfg.language)


class ScriptedBackend:
    """A text-level model stand-in: each conversation follows its own script of replies. At the
    first turn the j-th request of a row is its rollout j (all are active); later a conversation
    is recognised by its row and its first reply."""

    token_level = False

    def __init__(self, rows: Sequence[Any], scripts: dict[tuple[int, int], list[str]]):
        self.rows, self.scripts = list(rows), scripts

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        seen: dict[int, int] = {}
        out = []
        for request in requests:
            messages = request.messages
            row = next(r for r in self.rows if messages[: len(r.prompt)] == r.prompt)
            said = [m["content"] for m in messages[len(row.prompt) :] if m["role"] == "assistant"]
            if not said:
                k = seen[row.id] = seen.get(row.id, -1) + 1
            else:
                k = next(k for (i, k), s in self.scripts.items() if i == row.id and s[0] == said[0])
            text = self.scripts[(row.id, k)][len(said)]
            out.append(GenResult(text=text, num_tokens=len(text.split())))
        return out


class ScriptedClient(vf.Client):
    """A verifiers client returning canned replies in order: verifiers' own rollout, no network."""

    def __init__(self, replies: list[str]):
        super().__init__(object())
        self.replies = list(replies)

    def setup_client(self, config):
        return None

    async def to_native_tool(self, tool):
        return tool

    async def to_native_prompt(self, messages):
        return messages, {}

    async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
        return self.replies.pop(0)

    async def raise_from_native_response(self, response):
        return None

    async def from_native_response(self, text):
        message = vf.ResponseMessage(content=text, finish_reason="stop", is_truncated=False)
        return vf.Response(id="r", created=int(time.time()), model="scripted", message=message)

    async def close(self):
        return None


def grpo_eval(
    env: VerifiersEnv, scripts: dict[tuple[int, int], list[str]], r: int, out: Path
) -> list[dict[str, Any]]:
    """grpo's evaluator on the scripted replies: one results.jsonl record per rollout."""
    settings = load_settings(["+env=verifiers", f"env.id={env.env_id}", "eval.seed=0"])
    rows = env.rows("eval")
    evaluate_rows(EvalSetup.of(settings), env, rows, r, ScriptedBackend(rows, scripts), out)
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def vf_state(row: dict[str, Any], completion: list[dict[str, Any]]) -> Any:
    """A verifiers State for a finished single-turn rollout, built as init_state builds one."""
    from verifiers.types import State, flatten_task_input
    from verifiers.utils.message_utils import normalize_messages

    task = flatten_task_input(deepcopy(row))
    state = State(input=task)
    state["task"] = task
    state["prompt"] = normalize_messages(row["prompt"], field_name="prompt")
    state["completion"] = normalize_messages(completion, field_name="completion")
    # one model turn (MultiTurnEnv's num_turns metric = 1)
    state["trajectory"] = [{"completion": state["completion"], "reward": None, "advantage": None}]
    state["reward"] = state["metrics"] = None
    return state


def check_record(record: dict[str, Any], state: Any, names: dict[str, str]) -> None:
    """grpo's per-function scores and total equal verifiers' metrics and reward."""
    for grpo_name, vf_name in names.items():
        assert record[grpo_name] == pytest.approx(state["metrics"][vf_name], abs=1e-12), grpo_name
    assert record["reward"] == pytest.approx(state["reward"], abs=1e-12)


# ---- single-turn -----------------------------------------------------------------------------------


def test_single_turn_rows_rewards_and_scores_equal_verifiers(tmp_path):
    env = env_of(SINGLE_ID, "env.args={num_examples: 3}")
    assert (env.name, env.max_turns, env.multi_turn) == ("vf-grpo-single", 1, False)
    # every reward function and metric, named and weighted as the rubric has them; MultiTurnEnv's
    # num_turns metric is renamed (num_turns is a results.jsonl column)
    assert env.rubric.names == ["correct_answer", "length_penalty", "format_reward_func", "vf_num_turns"]
    assert [f.weight for f in env.rubric.funcs] == [1.0, -0.5, 0.2, 0.0]

    reference = load_verifiers_env(SINGLE_ID, {"num_examples": 3})
    vf_rows = [dict(r) for r in reference.get_eval_dataset()]
    rows = env.rows("eval")
    assert len(rows) == 3 and len(env.rows("eval", 2)) == 2
    for row, vf_row in zip(rows, vf_rows, strict=True):
        # the env's formatted prompt: system prompt, few-shot, question
        assert row.prompt == [{k: v for k, v in m.items() if v is not None} for m in vf_row["prompt"]]
        assert [m["role"] for m in row.prompt] == ["system", "user", "assistant", "user"]
        assert row.id == vf_row["example_id"] and row.info["answer"] == vf_row["answer"]

    def scripts(row):
        a = row.info["answer"]
        return [
            f"<reasoning>\nadd\n</reasoning>\n<answer>\n{a}\n</answer>",  # right, well formatted
            f"The answer is {a}, I think, after a long and winding explanation of the sum.",
            f"<answer>{int(a) + 1}</answer>",
        ]

    plan = {(row.id, k): [text] for row in rows for k, text in enumerate(scripts(row))}
    records = grpo_eval(env, plan, r=3, out=tmp_path)
    assert len(records) == 9

    names = {n: n for n in ("correct_answer", "length_penalty", "format_reward_func")}
    names["vf_num_turns"] = "num_turns"
    for vf_row in vf_rows:
        group = [rec for rec in records if rec["example_id"] == vf_row["example_id"]]
        states = [vf_state(vf_row, rec["completion"]) for rec in group]
        asyncio.run(reference.rubric.score_group(states))  # verifiers scores the same completions
        for record, state in zip(group, states, strict=True):
            check_record(record, state, names)
    # the unclipped, negatively weighted function did go beyond [0, 1]
    assert max(rec["length_penalty"] for rec in records) > 1.0
    assert {rec["correct_answer"] for rec in records} == {0.0, 1.0}


def test_single_turn_through_an_openai_compatible_server_scores_as_verifiers(tmp_path):
    """The same check with the completions coming over HTTP from a scripted OpenAI-compatible
    server through generation=openai (what a served model would send)."""
    import re

    from test_openai_endpoint import ScriptedServer, completion_payload

    from grpo.generation import make_backend

    def reply(body, number):
        a, b = map(int, re.findall(r"\d+", body["messages"][-1]["content"])[:2])
        right = a % 2 == 0  # even first operand: right and tagged; odd: a wrong, untagged guess
        text = (
            f"<reasoning>\n{a}+{b}\n</reasoning>\n<answer>\n{a + b}\n</answer>" if right else f"maybe {a * b}"
        )
        return 200, completion_payload(body, text, len(text.split()))

    env = env_of(SINGLE_ID, "env.args={num_examples: 4}")
    with ScriptedServer(reply) as server:
        settings = load_settings(
            [
                "+env=verifiers",
                f"env.id={SINGLE_ID}",
                "generation=openai",
                f"generation.base_url={server.url}",
            ]
            + ["generation.model=scripted", "generation.max_retries=0"]
        )
        backend = make_backend(settings.generation, None, None, settings.model)
        evaluate_rows(EvalSetup.of(settings), env, env.rows("eval"), 2, backend, tmp_path)
        # the env's formatted prompt went over the wire as it is (system prompt and few-shot included)
        assert [m["role"] for m in server.bodies[0]["messages"]] == ["system", "user", "assistant", "user"]
    records = [
        json.loads(line) for line in (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(records) == 8 and {rec["correct_answer"] for rec in records} == {0.0, 1.0}

    reference = load_verifiers_env(SINGLE_ID, {"num_examples": 4})
    names = {n: n for n in ("correct_answer", "length_penalty", "format_reward_func")}
    names["vf_num_turns"] = "num_turns"
    for vf_row in (dict(r) for r in reference.get_eval_dataset()):
        group = [rec for rec in records if rec["example_id"] == vf_row["example_id"]]
        states = [vf_state(vf_row, rec["completion"]) for rec in group]
        asyncio.run(reference.rubric.score_group(states))
        for record, state in zip(group, states, strict=True):
            check_record(record, state, names)


# ---- multi-turn ------------------------------------------------------------------------------------


def multi_scripts(rows: Sequence[Any]) -> dict[tuple[int, int], list[str]]:
    plan = {}
    for row in rows:
        t = int(row.info["answer"])  # 2..8
        wrong = 9
        plan[(row.id, 0)] = [f"<answer>{t}</answer>"]  # solved at once (final env response)
        plan[(row.id, 1)] = [
            f"<answer>{wrong}</answer>",
            "no idea",
            f"<answer>{t}</answer>",
        ]  # solved at turn 3
        plan[(row.id, 2)] = ["hmm", f"<answer>{wrong}</answer>", "<answer>0</answer>"]  # max_turns, unsolved
        plan[(row.id, 3)] = [
            f"<answer>{10 - wrong}</answer>",
            "<answer>give up</answer>",
            "x",
        ]  # the @vf.stop
    return plan


def test_multi_turn_episodes_and_scores_equal_verifiers_own_rollouts(tmp_path):
    env = env_of(MULTI_ID, "env.num_eval_examples=3")
    assert (env.name, env.max_turns, env.multi_turn) == ("vf-grpo-multi", 3, True)
    rows = env.rows("eval")
    plan = multi_scripts(rows)
    records = grpo_eval(env, plan, r=4, out=tmp_path)
    assert len(records) == 12

    reference = load_verifiers_env(MULTI_ID)
    vf_rows = [dict(r) for r in reference.get_eval_dataset()][:3]
    names = {"solved": "solved", "fewer_turns": "fewer_turns", "vf_num_turns": "num_turns"}
    stops = set()
    for vf_row in vf_rows:
        group = sorted(
            (rec for rec in records if rec["example_id"] == vf_row["example_id"]),
            key=lambda rec: rec["rollout_index"],
        )

        async def rollouts(vf_row: dict[str, Any]) -> list[Any]:
            states = [
                await reference.rollout(
                    deepcopy(vf_row), ScriptedClient(plan[(vf_row["example_id"], k)]), "m"
                )
                for k in range(4)
            ]
            await reference.rubric.score_group(states)  # verifiers' own scoring of its rollouts
            return states

        states = asyncio.run(rollouts(vf_row))
        for record, state in zip(group, states, strict=True):
            stops.add(state["stop_condition"])
            vf_completion = [m.model_dump(exclude_none=True) for m in state["completion"]]
            # the same episode: grpo's completion is verifiers' without the final env message,
            # which verifiers appends but never sends to the model
            final = 1 if state["stop_condition"] == "has_final_env_response" else 0
            assert record["completion"] == vf_completion[: len(vf_completion) - final]
            assert record["num_turns"] == len(state["trajectory"])
            check_record(record, state, names)
    assert stops == {"has_final_env_response", "max_turns_reached", "gave_up"}
    assert {rec["solved"] for rec in records} == {0.0, 1.0}


def test_scoring_a_scripted_completion_replays_it_through_the_env():
    env = env_of(MULTI_ID)
    row = env.rows("train")[0]  # answer 7
    completion, state = env.replay(row, ["<answer>3</answer>", "<answer>7</answer>", "never sent"])
    assert [m["content"] for m in completion] == ["<answer>3</answer>", "higher", "<answer>7</answer>"]
    scores = env.score(row, completion)  # no state: the episode is replayed
    assert scores == {"solved": 1.0, "fewer_turns": 0.5, "vf_num_turns": 2.0}
    assert env.score(row, completion, state) == scores
    assert env.rubric.total(scores) == pytest.approx(1.15)


# ---- errors ----------------------------------------------------------------------------------------


def test_language_other_than_en_is_refused():
    cfg = compose(["+env=verifiers", f"env.id={SINGLE_ID}", "language=sv"])
    with pytest.raises(UserError, match=r"^language=sv: a verifiers environment runs its own prompts"):
        build_env(cfg.env, cfg.language)


def test_missing_environment_and_missing_extra_are_one_line_errors(monkeypatch):
    cfg = compose(["+env=verifiers"])
    with pytest.raises(UserError, match=r"^env\.id: required"):
        build_env(cfg.env, cfg.language)
    with pytest.raises(UserError, match=r"^env\.id=vf-no-such-env: no installed verifiers environment"):
        env_of("vf-no-such-env")
    with pytest.raises(UserError, match=r"could not load it .*unexpected keyword argument 'bogus'"):
        env_of(SINGLE_ID, "env.args={bogus: 1}")
    monkeypatch.setitem(sys.modules, "verifiers", None)  # `import verifiers` raises ImportError
    with pytest.raises(UserError) as info:
        env_of(SINGLE_ID)
    assert str(info.value) == INSTALL_HINT


def test_loading_keeps_the_process_signal_handlers():
    import signal

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    env_of(SINGLE_ID)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# ---- training ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("one_torch_thread")
# 1: the episodes generated one batch ahead, on a generator process (grpo/train/ahead.py)
@pytest.mark.parametrize("ahead", [0, 1], ids=["synchronous", "one batch ahead"])
def test_two_grpo_steps_on_the_multi_turn_env_mask_its_turns(tmp_path, ahead):
    from grpo.train.trainer import build_trainer

    cfg = load_settings(
        [
            "+env=verifiers",
            f"env.id={MULTI_ID}",
            "env.args={max_turns: 3}",
            "stages=[train]",
            "model=tiny",
            "trainer.num_generations=4",
            "trainer.per_device_batch_completions=8",
            "trainer.max_steps=2",
            "trainer.save_steps=1000",
            "trainer.beta=0",
            "trainer.max_completion_length=256",
            "generation.max_tokens_per_turn=12",
            f"generation.num_batches_ahead={ahead}",
            "trainer.logging_steps=1",
        ]
    )
    env = build_env(cfg.env, cfg.language)
    bundle = build_trainer(cfg, env, tmp_path)
    assert bundle.trainer.reward_func_names == ["solved", "fewer_turns", "vf_num_turns"]
    assert bundle.trainer.reward_weights.tolist() == pytest.approx([1.0, 0.3, 0.0])
    try:
        bundle.trainer.train()
    finally:
        if bundle.ahead is not None:
            bundle.ahead.close()
    assert bundle.trainer.state.global_step == 2
    lags = [e["async/lag"] for e in bundle.trainer.state.log_history if "async/lag" in e]
    assert lags == ([0.0, 1.0] if ahead else [])

    rollouts = bundle.rollout.last_rollouts  # the batch of step 2
    assert len(rollouts) == 8
    # the random model never guesses: the env asks again until max_turns
    multi = [r for r in rollouts if r.num_turns >= 2]
    assert multi, "expected multi-turn episodes"
    for rollout in rollouts:
        # the verifiers state went along: one trajectory step per model turn, scored by its rubric
        assert len(rollout.state["trajectory"]) == rollout.num_turns
        assert rollout.state["metrics"]["num_turns"] == rollout.num_turns
        assert rollout.state["reward"] == pytest.approx(
            env.rubric.total(env.score(rollout.row, rollout.completion, rollout.state))
        )

    def is_the_envs_reply(message: dict) -> None:
        assert message["role"] == "user" and message["content"] in (
            "Answer with a number in <answer> tags.",
            "higher",
            "lower",
        )

    # model turns (1) and env turns (0) alternate; the env's text is exactly its messages
    assert_env_mask_follows_the_template(
        multi[0], bundle.tokenizer, cfg.model.chat_template_kwargs, is_the_envs_reply
    )
