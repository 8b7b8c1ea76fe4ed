"""verifiers v1 tasksets through grpo (grpo/envs/verifiers_v1.py), with the real verifiers package
and a v1 taskset written here (tests/v1_envs/vf_grpo_sortera: Swedish, a scripted user, two
named rewards and a metric):

  - `+env=verifiers env.id=...` builds the v1 adapter for a v1 package (the classic adapter for a
    classic one, tests/test_envs_verifiers.py);
  - evaluation against a scripted OpenAI-compatible endpoint that answers perfectly scores 1.0 on
    both rewards, through verifiers' own harness loop, interception server and eval client;
  - two GRPO steps on the tiny model with the policy served on grpo's policy server (verifiers'
    training client, tokens in / tokens out); the env mask of a two-turn trace selects exactly the
    model's tokens;
  - an episode past its deadline is counted, said, and dropped from the loss.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from helpers.scripted_endpoint import ScriptedEndpoint  # noqa: E402

from grpo.compose import load_settings  # noqa: E402
from grpo.envs import build_env  # noqa: E402
from grpo.envs.verifiers_v1 import VerifiersV1Env  # noqa: E402
from grpo.errors import UserError  # noqa: E402
from grpo.generation.base import Sampling  # noqa: E402
from grpo.generation.openai_endpoint import OpenAIBackend  # noqa: E402
from grpo.rollout import run_rollouts  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "v1_envs"))
import vf_grpo_sortera as sortera  # noqa: E402

ENV_ID = "vf-grpo-sortera"
BASE = ["+env=verifiers", f"env.id={ENV_ID}", "language=sv", "model=tiny", "env.args={num_tasks: 4}"]
# a taskset whose rows carry no prompt: its scripted user opens every episode (Spanish)
ORDENAR = ["+env=verifiers", "env.id=vf-grpo-ordenar", "language=es", "model=tiny"]
# two GRPO steps of 8 completions on the SFT'd small model, which ends its turns (a random one
# never does, and a turn cut without its end token is re-tokenised into a new branch by the
# client's renderer)
TWO_STEPS = [
    "model=small_alphabet_sort",
    "stages=[train]",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.max_steps=2",
    "trainer.save_steps=1000",
    "trainer.beta=0",
    "generation.max_tokens_per_turn=48",
]


def env_of(*overrides: str) -> VerifiersV1Env:
    settings = load_settings([*BASE, *overrides])
    env = build_env(settings.env, settings.language)
    assert isinstance(env, VerifiersV1Env)
    return env


def perfect_reply(messages: list[dict]) -> str:
    """What a perfect model answers at this point of a sortera episode."""
    names = re.search(r"Sortera: (.*)", messages[1]["content"]).group(1).split(", ")
    last = messages[-1]["content"]
    extra = re.match(r"Lägg till (.*) och sortera", last)
    if extra:
        names += extra.group(1).split(" och ")
    return "<svar>" + ", ".join(sorted(names, key=str.casefold)) + "</svar>"


def test_the_one_way_in_builds_the_v1_adapter_and_names_its_rewards(capsys):
    env = env_of()
    assert "a verifiers v1 taskset (SorteraTaskset, env SorteraEnv)" in capsys.readouterr().err
    assert [(f.name, f.weight) for f in env.rubric.funcs] == [
        ("format", 0.5),
        ("sorterat", 1.0),
        ("antal_namn", 0.0),
    ]
    rows = env.rows("eval")
    assert len(rows) == 4 and rows[0].language == "sv"
    assert rows[0].prompt == [
        {"role": "system", "content": sortera.SYSTEM},
        {"role": "user", "content": rows[0].prompt[1]["content"]},
    ]
    assert rows[0].prompt[1]["content"].startswith("Sortera: ")
    # every v1 env of the process runs on one event loop (verifiers' process-wide asyncio state
    # binds to the first loop using it: a second env on its own loop failed its model calls)
    assert env_of()._loop is env._loop


def test_prompts_in_another_language_than_the_label_are_said_once(capsys):
    settings = load_settings(["+env=verifiers", f"env.id={ENV_ID}", "env.args={num_tasks: 4}"])
    env = build_env(settings.env, settings.language)  # language=en (the default): not what it is
    env.rows("eval")
    env.rows("train")
    err = capsys.readouterr().err
    assert err.count("its prompts read as sv, but language=en labels its rows") == 1
    env_of().rows("eval")  # language=sv: nothing to say
    assert "read as" not in capsys.readouterr().err


def test_a_module_with_neither_api_is_refused_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "vf_grpo_empty.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        UserError, match="env.id=vf-grpo-empty: module 'vf_grpo_empty' exposes neither load_environment"
    ):
        build_env(load_settings(["+env=verifiers", "env.id=vf-grpo-empty"]).env, "en")


def test_perfect_answers_from_a_scripted_endpoint_score_one():
    env = env_of()
    endpoint = ScriptedEndpoint(perfect_reply)
    try:
        backend = OpenAIBackend(base_url=endpoint.url, model="scripted", api_key="EMPTY")
        rows = env.rows("eval")
        rollouts = run_rollouts(env, rows, backend, rollouts_per_row=2, sampling=Sampling(temperature=0))
    finally:
        endpoint.close()
    assert endpoint.calls == len(rows) * 2 * 2  # two model turns per episode
    assert env.last_errors == []
    for r in rollouts:
        assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]
        assert r.completion[1]["content"].startswith("Lägg till ")
        scores = env.score(r.row, r.completion, r.state)
        assert scores["sorterat"] == 1.0 and scores["format"] == 1.0
        assert scores["antal_namn"] == 5.0
        assert r.completion_ids == [] and not r.truncated


def test_an_episode_past_its_deadline_is_counted_and_dropped(capsys):
    env = env_of("env.timeout_s=0.001")
    endpoint = ScriptedEndpoint(perfect_reply)
    try:
        backend = OpenAIBackend(base_url=endpoint.url, model="scripted", api_key="EMPTY")
        rollouts = run_rollouts(env, env.rows("eval", 2), backend, rollouts_per_row=1, sampling=Sampling())
    finally:
        endpoint.close()
    assert len(env.last_errors) == 2 and "deadline" in env.last_errors[0]
    assert "2 of 2 episodes failed" in capsys.readouterr().err
    for r in rollouts:
        assert r.completion == [] and sum(r.env_mask) == 0
        assert set(env.score(r.row, r.completion, r.state).values()) == {None}


@pytest.mark.usefixtures("one_torch_thread")
def test_a_trace_with_two_branches_trains_its_last_one():
    """The random tiny model's turns stop at the token limit, so the client cannot extend the
    token history and re-renders it: a second branch. The documented rule: the last branch is the
    training row (turn 1 is in its prompt, unmasked), the first one's sampled tokens are counted."""
    from grpo.generation import make_backend

    settings = load_settings(BASE)
    env = build_env(settings.env, settings.language)
    backend = make_backend(settings.generation, None, None, settings.model)
    sampling = Sampling(temperature=1.0, max_tokens_per_turn=8, seed=0)
    rollouts = run_rollouts(env, env.rows("train", 2), backend, rollouts_per_row=2, sampling=sampling)
    split = [r for r in rollouts if r.state["v1_trace"].num_branches == 2]
    assert split, "expected a re-rendered history"
    assert (
        env.dropped_branch_tokens >= sum(sum(r.state["v1_trace"].branches[0].sampled_mask) for r in split) > 0
    )
    for r in split:
        first, last = r.state["v1_trace"].branches
        assert r.prompt_ids + r.completion_ids == list(last.token_ids)
        # the second turn only: its own sampled tokens, none of the first branch's
        assert 1 <= sum(r.env_mask) == sum(last.sampled_mask) <= 8
        assert sum(first.sampled_mask) >= 1
        assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]
    # seeded: the same rollouts again
    again = run_rollouts(env, env.rows("train", 2), backend, rollouts_per_row=2, sampling=sampling)
    assert [r.completion_ids for r in again] == [r.completion_ids for r in rollouts]


@pytest.mark.usefixtures("one_torch_thread")
def test_two_grpo_steps_with_the_served_policy_mask_the_users_turns(tmp_path):
    from grpo.models import render_chat
    from grpo.train.trainer import build_trainer

    settings = load_settings(
        [
            *BASE,
            *TWO_STEPS,
            "trainer.max_completion_length=160",
            "trainer.mask_truncated_completions=false",
            "trainer.truncated_reward=null",
        ]
    )
    env = build_env(settings.env, settings.language)
    bundle = build_trainer(settings, env, tmp_path)
    assert bundle.trainer.reward_func_names[:3] == ["format", "sorterat", "antal_namn"]
    bundle.trainer.train()
    assert bundle.trainer.state.global_step == 2
    assert env._server is not None  # the policy answered on grpo's policy server
    batcher = env._server.batcher
    assert batcher.calls < batcher.jobs  # concurrent episodes' turns shared generate calls

    rollouts = bundle.rollout.last_rollouts
    assert len(rollouts) == 8 and env.last_errors == []
    tokenizer = bundle.tokenizer
    checked = 0
    for r in rollouts:
        assert len(r.completion_ids) == len(r.env_mask) == len(r.logprobs) <= 160
        assert r.state["v1_scores"]["antal_namn"] == 5.0
        assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]
        trace = r.state["v1_trace"]
        if trace.num_branches != 1:
            continue  # a re-tokenised history: the last branch alone is trained (documented rule)
        # the client rendered the prompt with the policy's own template, as grpo's engine does
        text = render_chat(
            tokenizer, r.row.prompt, settings.model.chat_template_kwargs, add_generation_prompt=True
        )
        assert r.prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
        # the mask selects exactly the model's tokens: each run of 1s is one model turn, in order
        runs, current = [], []
        for tok, m in zip(r.completion_ids, r.env_mask, strict=True):
            if m:
                current.append(tok)
            elif current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
        assert len(runs) == len(trace.calls) == 2
        texts = [tokenizer.decode(run, skip_special_tokens=True) for run in runs]
        assert texts == [r.completion[0]["content"], r.completion[2]["content"]]
        # the user's turn is in the unmasked tokens, as text
        unmasked = tokenizer.decode([t for t, m in zip(r.completion_ids, r.env_mask, strict=True) if not m])
        assert r.completion[1]["content"] in unmasked
        checked += 1
    assert checked >= 1


def test_runs_of_an_env_named_by_its_id_land_in_its_own_experiment():
    from grpo.tracking.store import experiment_name

    for env_id in ("someorg/vf-my-env@1.0", "vf-my-env"):
        settings = load_settings(["+env=verifiers", f"env.id={env_id}"])
        assert experiment_name(settings.tracking, settings.env) == "grpo-vf-my-env"
    named = load_settings(["+env=verifiers", "env.id=vf-my-env", "env.name=mine"])
    assert experiment_name(named.tracking, named.env) == "grpo-mine"


# ---- a taskset whose environment opens the episode (no prompt on the row) -----------------------


def perfect_ordenar_reply(messages: list[dict]) -> str:
    """What a perfect model answers at this point of an ordenar episode (the opening is the first
    user message: the row had none)."""
    names = re.search(r"Ordena estos nombres: ([^.]*)\.", messages[0]["content"]).group(1).split(", ")
    extra = re.match(r"Añade (.*) y vuelve", messages[-1]["content"])
    if extra:
        names += extra.group(1).split(" y ")
    return "<lista>" + ", ".join(sorted(names, key=str.casefold)) + "</lista>"


@pytest.mark.parametrize("turns", [1, 2])
def test_a_taskset_that_opens_its_episodes_itself_evaluates(turns):
    settings = load_settings([*ORDENAR, f"env.args={{num_tasks: 4, turns: {turns}}}"])
    env = build_env(settings.env, settings.language)
    rows = env.rows("eval")
    assert [r.prompt for r in rows] == [[]] * 4  # nothing on the row: the env speaks first
    endpoint = ScriptedEndpoint(perfect_ordenar_reply)
    try:
        backend = OpenAIBackend(base_url=endpoint.url, model="scripted", api_key="EMPTY")
        rollouts = run_rollouts(env, rows, backend, rollouts_per_row=2, sampling=Sampling(temperature=0))
    finally:
        endpoint.close()
    assert endpoint.calls == len(rows) * 2 * turns and env.last_errors == []
    for r in rollouts:
        # the episode's first message is the env's opening, then the model's answer (and so on)
        assert [m["role"] for m in r.completion] == ["user", "assistant"] * turns
        assert r.completion[0]["content"].startswith("Hola. Ordena estos nombres: ")
        scores = env.score(r.row, r.completion, r.state)
        assert scores == {"ordenado": 1.0, "formato": 1.0}


def _ordenar_trainer(tmp_path, *extra):
    from grpo.train.trainer import build_trainer

    settings = load_settings([*ORDENAR, *TWO_STEPS, "trainer.max_completion_length=192", *extra])
    env = build_env(settings.env, settings.language)
    return env, build_trainer(settings, env, tmp_path)


def _check_opening_is_the_prompt(bundle, turns: int) -> None:
    """Each rollout's prompt_ids (what the loss conditions on) are the episode's opening: the
    rendered first user turn, up to the model's first token; every model turn is in the mask."""
    tokenizer = bundle.tokenizer
    rollouts = bundle.rollout.last_rollouts
    assert len(rollouts) == 8
    for r in rollouts:
        opening = r.completion[0]
        assert opening["role"] == "user" and opening["content"].startswith("Hola. Ordena estos nombres: ")
        assert opening["content"] in tokenizer.decode(r.prompt_ids)
        assert r.env_mask[0] == 1  # the completion starts with the model's first token
        assert tokenizer.decode([t for t, m in zip(r.completion_ids, r.env_mask, strict=True) if m]).strip()
        assert 1 <= r.num_turns <= turns
    assert any(r.num_turns == turns for r in rollouts)
    # TRL was handed a stand-in prompt per row, one each (rows are told apart, never rotated)
    assert bundle.rollout.index.ambiguous == 0


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("turns", [1, 2])
def test_a_taskset_that_opens_its_episodes_itself_trains_on_its_first_user_turn(tmp_path, turns):
    env, bundle = _ordenar_trainer(tmp_path, f"env.args={{num_tasks: 8, turns: {turns}}}")
    bundle.trainer.train()
    assert bundle.trainer.state.global_step == 2 and env.last_errors == []
    _check_opening_is_the_prompt(bundle, turns)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_taskset_that_opens_its_episodes_itself_trains_one_batch_ahead(tmp_path):
    from grpo.trl_adapter.trainer import run_trainer

    env, bundle = _ordenar_trainer(
        tmp_path,
        "env.args={num_tasks: 8, turns: 2}",
        "generation.num_batches_ahead=1",
        "trainer.logging_steps=1",
    )
    try:
        run_trainer(bundle.trainer, "train")
    finally:
        bundle.ahead.close()
    assert env._server is None  # the episodes called the generator process, not a server in the trainer
    lags = [e["async/lag"] for e in bundle.trainer.state.log_history if "async/lag" in e]
    assert lags == [0.0, 1.0]
    _check_opening_is_the_prompt(bundle, 2)


@pytest.mark.usefixtures("one_torch_thread")
def test_a_training_batch_whose_episodes_all_failed_is_one_line_naming_the_env(tmp_path):
    env, bundle = _ordenar_trainer(tmp_path, "env.args={num_tasks: 8, turns: 1}", "env.timeout_s=0.001")
    with pytest.raises(UserError, match=r"env vf-grpo-ordenar: no episode of the training batch has a model token "
                       r"\(8 episodes\); first failure: .*deadline"):  # fmt: skip
        bundle.trainer.train()
