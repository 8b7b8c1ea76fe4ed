"""The example environment packages under examples/ (docs/verifiers.md): a classic verifiers
environment (vf-count-letters, English, `load_environment`) and a v1 taskset (vf-namen-sortieren,
German). They load through `+env=verifiers env.id=...` as installed packages do (their folders on
sys.path: what `pip install -e examples/<name>` adds; tests/test_readme_commands.py runs the
install itself), score known answers as their docstrings say (perfect 1, garbage 0, padding never
paid), and train a real GRPO step in a `python -m grpo` process, offline."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from helpers.grpo_process import run_grpo  # noqa: E402
from helpers.scripted_endpoint import ScriptedEndpoint  # noqa: E402

from grpo.compose import load_settings  # noqa: E402
from grpo.envs import build_env  # noqa: E402
from grpo.generation.base import Sampling  # noqa: E402
from grpo.generation.openai_endpoint import OpenAIBackend  # noqa: E402
from grpo.rollout import run_rollouts  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PACKAGES = {"vf-count-letters": "vf_count_letters", "vf-namen-sortieren": "vf_namen_sortieren"}
COUNT = ["+env=verifiers", "env.id=vf-count-letters", "env.args={num_examples: 30}"]
NAMEN = ["+env=verifiers", "env.id=vf-namen-sortieren", "language=de", "env.args={num_tasks: 12}"]


@pytest.fixture(autouse=True)
def installed(monkeypatch):
    for folder in PACKAGES:
        monkeypatch.syspath_prepend(str(EXAMPLES / folder))


def env_of(overrides: list[str]):
    settings = load_settings(overrides)
    return build_env(settings.env, settings.language)


def scored(env, reply, n: int = 6) -> list[dict[str, float]]:
    """Each eval row's scores when the model answers `reply(messages)`."""
    endpoint = ScriptedEndpoint(reply)
    try:
        backend = OpenAIBackend(base_url=endpoint.url, model="scripted", api_key="EMPTY")
        rollouts = run_rollouts(env, env.rows("eval", n), backend, rollouts_per_row=1, sampling=Sampling())
    finally:
        endpoint.close()
    assert endpoint.calls == n
    return [env.score(r.row, r.completion, r.state) for r in rollouts]


def test_every_example_is_a_package_pip_can_install():
    for folder, module in PACKAGES.items():
        text = (EXAMPLES / folder / "pyproject.toml").read_text(encoding="utf-8")
        assert f'name = "{folder}"' in text and f'py-modules = ["{module}"]' in text
        assert '"verifiers>=0.3.1,<0.4"' in text  # the range grpo's extra pins
        assert (EXAMPLES / folder / f"{module}.py").is_file()


def test_every_example_row_is_a_question_of_its_own_with_default_arguments():
    """GRPO groups rollouts by prompt: rows that repeat a prompt would be said as a note."""
    for overrides in (
        ["+env=verifiers", "env.id=vf-count-letters"],
        ["+env=verifiers", "env.id=vf-namen-sortieren", "language=de"],
    ):
        env = env_of(overrides)
        for split in ("train", "eval"):
            prompts = [str(row.prompt) for row in env.rows(split)]
            assert len(prompts) >= 40 and len(set(prompts)) == len(prompts), (overrides, split)


def count_reply(messages: list[dict]) -> str:
    """The right count, as the classic example asks for it."""
    letter, word = re.search(r"letter '(.)' occur in the word '(\w+)'", messages[-1]["content"]).groups()
    return f"<answer>{word.count(letter)}</answer>"


def test_the_classic_example_scores_the_count_and_nothing_for_garbage(capsys):
    env = env_of(COUNT)
    err = capsys.readouterr().err
    # one line naming the API it loaded; the env's dataset formatting prints no progress bars
    assert "env.id=vf-count-letters: a classic verifiers environment (SingleTurnEnv" in err
    assert "Map:" not in err
    assert [(f.name, f.weight) for f in env.rubric.funcs][:2] == [
        ("correct_count", 1.0),
        ("answer_format", 0.2),
    ]
    assert all((s["correct_count"], s["answer_format"]) == (1.0, 1.0) for s in scored(env, count_reply))
    wrong = lambda m: count_reply(m).replace("<answer>", "<answer>1").replace("</answer>", "7</answer>")  # noqa: E731
    assert all((s["correct_count"], s["answer_format"]) == (0.0, 1.0) for s in scored(env, wrong))
    for garbage in (
        lambda m: "",
        lambda m: "three",
        lambda m: "<answer>three</answer>",
        lambda m: "ok " * 40,
    ):
        assert all((s["correct_count"], s["answer_format"]) == (0.0, 0.0) for s in scored(env, garbage))


def test_the_classic_example_has_reference_answers_that_warm_up_an_sft_and_the_v1_one_has_none():
    """A single-turn env whose parser writes its answer field and whose rows carry the answer: its
    reference episode is the answer in the parser's format, scoring full marks; the sft stage's
    demonstrations come from it. A v1 taskset writes none: NotImplementedError, and the
    zero-signal hint points to demonstrations instead."""
    from grpo.sft.data import env_demonstrations
    from grpo.train.progress import zero_signal_hint

    env = env_of(COUNT)
    for row in env.rows("train", 5):
        reference = env.reference_completion(row)
        assert reference == [{"role": "assistant", "content": f"<answer>\n{row.info['answer']}\n</answer>"}]
        assert env.score(row, reference) == {"correct_count": 1.0, "answer_format": 1.0, "vf_num_turns": 1.0}
    demos = env_demonstrations(env, 4)
    assert [d.completion for d in demos] == [env.reference_completion(r) for r in env.rows("train", 4)]
    assert "stages=[sft,eval,train,eval]" in zero_signal_hint(1, env)
    namen = env_of(NAMEN)
    with pytest.raises(NotImplementedError):
        namen.reference_completion(namen.rows("train", 1)[0])
    assert "has no reference answers" in zero_signal_hint(1, namen)


def names_of(messages: list[dict]) -> list[str]:
    return re.search(r"\): (.*)\. Antworte", messages[-1]["content"]).group(1).split(", ")


def test_the_v1_example_sorts_as_german_dictionaries_and_never_pays_padding():
    import vf_namen_sortieren as namen

    env = env_of(NAMEN)
    assert env.rows("eval", 1)[0].language == "de"

    def reply(order):
        return lambda m: "<liste>" + ", ".join(order(names_of(m))) + "</liste>"

    perfect = scored(env, reply(lambda names: sorted(names, key=namen.din_key)))
    assert all((s["sortiert"], s["format"], s["namen"]) == (1.0, 1.0, 4.0) for s in perfect)
    # code-point order differs where an umlaut meets its base letter: the list is paid as a format only
    assert sorted(["Jörg", "Julia"], key=namen.din_key) == ["Jörg", "Julia"] != sorted(["Jörg", "Julia"])
    padded = scored(env, reply(lambda names: [*sorted(names, key=namen.din_key), names[-1]]))
    assert all((s["sortiert"], s["format"]) == (0.0, 0.0) for s in padded)
    twice = lambda m: reply(lambda names: sorted(names, key=namen.din_key))(m) * 2  # noqa: E731
    for garbage in (lambda m: "", lambda m: "Anna, Bernd", lambda m: "<liste>x, y</liste>", twice):
        assert all((s["sortiert"], s["format"]) == (0.0, 0.0) for s in scored(env, garbage))


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        [*COUNT, "env.max_turns=1"],
        [*NAMEN, "env.max_concurrent=8"],
    ],
    ids=["classic", "v1"],
)
def test_an_example_trains_a_real_grpo_step_offline(overrides, tmp_path):
    paths = [str(EXAMPLES / folder) for folder in PACKAGES]
    env = {"PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    proc = run_grpo(
        [
            *overrides,
            "stages=[train]",
            "trainer.max_steps=1",
            "trainer.num_generations=2",
            "trainer.per_device_batch_completions=4",
            "trainer.max_completion_length=24",
            "generation.max_tokens_per_turn=24",
            "tracking=none",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        root=tmp_path,
        cwd=tmp_path,
        timeout=300,
        env_extra=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\[train\] step 1/1 \| reward ", proc.stdout), proc.stdout[-2000:]
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-1").is_dir()
    state = json.loads((tmp_path / "run" / "checkpoints" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
