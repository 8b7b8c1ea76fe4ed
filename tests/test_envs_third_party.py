"""Adding an environment is one .py and one .yaml, nothing else edited: a package written to a
temporary directory (an Environment subclass declaring its prompt spec, and conf/env/greet.yaml
with prompts in English and Swedish) is put on sys.path and on Hydra's search path, composed and
built in both languages, and evaluated for real with the tiny model through `python -m grpo`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo

from grpo.compose import compose
from grpo.envs import build_env
from grpo.errors import UserError

ENV_PY = """
from grpo.envs.base import Environment, Row
from grpo.envs.parsers import assistant_turns
from grpo.envs.prompts import PromptSpec, Text
from grpo.envs.rubric import RewardFunc, Rubric


class GreetEnv(Environment):
    name = "greet"
    prompt_spec = PromptSpec({"user": Text(("who",), ("{who}",))})

    def __init__(self, seed=0, num_train_examples=8, num_eval_examples=4, language="en", name=None, prompts=None):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name, prompts)
        self.rubric = Rubric([RewardFunc("says_name", self._says_name)])

    def make_row(self, rng, index, split):
        spec = self.row_spec(split, index)
        who = rng.choice(["Ada", "Bo", "Cy"])
        prompt = [{"role": "user", "content": self.prompt(spec, "user", who=who)}]
        return Row(index, prompt, {"who": who}, spec.code)

    def reference_completion(self, row):
        return [{"role": "assistant", "content": row.info["who"]}]

    def _says_name(self, completion=None, info=None, **_):
        turns = assistant_turns(completion)
        return float(bool(turns) and info["who"] in turns[-1])
"""
ENV_YAML = """\
_target_: theirpkg.greet.GreetEnv
name: greet
num_eval_examples: 4
seed: ${seed}
prompts:
  en:
    user: "Say hello to {who}."
  sv:
    user: "Säg hej till {who}."
"""
GREETING = {"en": "Say hello to", "sv": "Säg hej till"}


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """The third-party package; returns the directory to put on sys.path."""
    pkg = tmp_path / "theirpkg"
    (pkg / "conf" / "env").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "greet.py").write_text(ENV_PY, encoding="utf-8")
    (pkg / "conf" / "env" / "greet.yaml").write_text(ENV_YAML, encoding="utf-8")
    return tmp_path


def searchpath(root: Path) -> str:
    return f"hydra.searchpath=[file://{root / 'theirpkg' / 'conf'}]"


def test_composed_and_built_in_two_languages(package: Path, monkeypatch):
    monkeypatch.syspath_prepend(str(package))
    for code in ("en", "sv"):
        cfg = compose(["+env=greet", f"language={code}", searchpath(package)])
        env = build_env(cfg.env, cfg.language)
        rows = env.rows("eval")
        assert env.name == "greet" and {r.language for r in rows} == {code}
        for row in rows:
            assert row.prompt[0]["content"] == f"{GREETING[code]} {row.info['who']}."
            assert env.score(row, env.reference_completion(row)) == {"says_name": 1.0}
    cfg = compose(["+env=greet", "language=de", searchpath(package)])
    with pytest.raises(UserError, match=r"^env\.prompts\.de: greet has no prompts for language 'de'"):
        build_env(cfg.env, cfg.language)


def evaluate_greet(package: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`python -m grpo +env=greet stages=[eval] *overrides` run in `package`, its package importable."""
    return run_grpo(
        [
            "+env=greet",
            "stages=[eval]",
            "tracking=none",
            searchpath(package),
            f"output_root={package / 'outputs'}",
            *overrides,
        ],
        cwd=package,
        env_extra={"PYTHONPATH": os.pathsep.join([str(package), os.environ.get("PYTHONPATH", "")])},
    )


@pytest.mark.slow
def test_evaluated_for_real_in_two_languages(package: Path):
    proc = evaluate_greet(
        package,
        "language=mix",
        "language.members=[en,sv]",
        "language.balance=true",
        "eval.num_examples=4",
        "eval.rollouts_per_example=2",
        "generation.max_tokens_per_turn=8",
        "trainer.max_completion_length=16",
    )
    assert proc.returncode == 0, proc.stderr
    (results,) = (package / "outputs").glob("runs/*/*/eval/results.jsonl")
    records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 8 and {r["language"] for r in records} == {"en", "sv"}
    for record in records:
        assert record["prompt"][0]["content"] == f"{GREETING[record['language']]} {record['info']['who']}."
        for name in ("says_name", "language_consistency"):
            assert 0.0 <= record[name] <= 1.0
        assert record["reward"] == pytest.approx(record["says_name"] + 0.1 * record["language_consistency"])
    meta = json.loads((results.parent / "metadata.json").read_text(encoding="utf-8"))
    assert set(meta["per_language"]) == {"en", "sv"} and meta["env"] == "greet"


def test_a_language_without_a_block_is_one_line(package: Path):
    proc = evaluate_greet(package, "language=de")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: env.prompts.de: greet has no prompts for language 'de'; add a `de:` block under `prompts:` in "
        "its YAML (conf/env/greet.yaml; its `en:` block shows the keys)"
    ]
