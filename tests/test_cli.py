"""The front door: every config option composes, bad input is one line with exit code 2, and
config composition imports nothing heavy."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys

import pytest
from helpers.grpo_process import run_grpo

from grpo.cli.checks import check
from grpo.compose import compose, group_options
from grpo.config import to_settings
from grpo.errors import UserError

GROUPS = ["model", "language", "reward_model", "optimizer", "trainer", "generation", "tracking"]
ENVS = group_options("env")
# options that need a GPU, vLLM or an endpoint: they compose, and validation says what is missing
NEEDS_MORE_THAN_CPU = {
    ("optimizer", "adamw_8bit"): "CUDA GPU",
    ("generation", "vllm_colocate"): "needs vLLM",
    ("generation", "vllm_server"): "needs vLLM",
    ("generation", "openai"): "evaluation only",
    # the recipe file selects vllm_colocate generation
    ("model", "qwen3_0_6b"): "needs vLLM",
    # learned rewards need a checkpoint or a reward_model stage before training
    ("reward_model", "learned"): "needs a trained reward model",
    ("reward_model", "ensemble"): "needs two or more reward_model.checkpoints",
    ("reward_model", "learned_only"): "needs a trained reward model",
}


def test_every_env_is_listed():
    assert ENVS == [
        "alphabet_sort",
        "alphabet_sort_v0_1_6",
        "alphabet_sort_v0_1_7",
        "alphabet_sort_v0_1_8",
        "arithmetic",
        "char_target",
        "reverse_text",
        "verifiers",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("env", ENVS)
def test_every_option_of_every_group_composes_with_every_env(group, env):
    options = group_options(group)
    assert len(options) >= 2, f"group {group} should offer choices, got {options}"
    for option in options:
        cfg = compose([f"+env={env}", f"{group}={option}"])
        # a verifiers env is named after its env.id when built (conf/env/verifiers.yaml: name null)
        assert cfg.env.name == (None if env == "verifiers" else env)
        # the option really was selected: its file's values are in the composed config
        if group == "model":
            assert cfg.model.name == option
        elif group in ("trainer", "optimizer"):
            assert cfg[group].name == option
        elif group == "generation":
            assert cfg.generation.backend == option
        elif group == "tracking":
            assert cfg.tracking.backend == option
        elif group == "language":
            assert cfg.language.code == option
        elif group == "reward_model":
            assert cfg.reward_model.kind == option
        reason = NEEDS_MORE_THAN_CPU.get((group, option))
        if env == "char_target" and group == "language" and option != "en":
            continue  # char_target is an English-only toy env (its build, not composition, says so)
        if reason is None:
            check(to_settings(cfg))
        else:
            with pytest.raises(UserError, match=reason):
                check(to_settings(cfg))


# recipes for GPU machines: without vLLM, the check stops at that rule alone
GPU_RECIPES = {"alphabet_sort_hub_recipe": "needs vLLM"}


@pytest.mark.parametrize("recipe", group_options("experiment"))
def test_every_experiment_recipe_composes_alone_and_validates(recipe):
    # a recipe brings its own env (no +env=...) and must pass every cross-field rule as shipped
    settings = to_settings(compose([f"+experiment={recipe}"]))
    reason = GPU_RECIPES.get(recipe)
    if reason and importlib.util.find_spec("vllm") is None:
        with pytest.raises(UserError, match=reason):
            check(settings)
        # every other rule holds: the same recipe generating with the CPU backend passes
        settings = dataclasses.replace(
            settings, generation=dataclasses.replace(settings.generation, backend="hf")
        )
    check(settings)
    assert settings.env["name"]
    assert "train" in settings.stages


def test_sweep_presets_are_a_group():
    assert group_options("sweep") == ["loss_types", "lr_beta_grid", "optuna_lr_beta"]


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "no environment selected: add +env=NAME (available: alphabet_sort, alphabet_sort_v0_1_6, "),
        (["+env=nope"], "unknown env 'nope' (available: alphabet_sort, alphabet_sort_v0_1_6, "),
        (["+env=alphabet_sort", "model=gpt9"], "unknown model 'gpt9' (available: qwen2_5_0_5b_instruct"),
        (["+env=alphabet_sort", "language=xx"], "unknown language 'xx'"),
        (["+env=alphabet_sort", "eval.num_examples=-1"], "eval.num_examples"),
        (["+env=alphabet_sort", "trainer.beta=[1,"], "malformed override"),
        # a key typo: the closest key, not Hydra's "To append to your config use +..." hint
        (
            ["+env=alphabet_sort", "trainer.max_stepz=4"],
            "unknown key trainer.max_stepz; did you mean trainer.max_steps?",
        ),
        (
            ["+env=alphabet_sort", "+trainer.max_stepz=4"],
            "unknown key trainer.max_stepz; did you mean trainer.max_steps?",
        ),
        (
            ["+env=alphabet_sort", "trainr.max_steps=4"],
            "unknown key trainr.max_steps; did you mean trainer.max_steps?",
        ),
        (["+env=alphabet_sort", "env.num_train_exampels=3"], "did you mean env.num_train_examples?"),
        (["+env=alphabet_sort", "trainer.zzz=3"], "unknown key trainer.zzz (keys of trainer: "),
        # a setting another tool keeps in another group: where grpo keeps it
        (
            ["+env=alphabet_sort", "trainer.learning_rate=1e-5"],
            "unknown key trainer.learning_rate; did you mean optimizer.lr?",
        ),
        (["+env=alphabet_sort", "+trainer.lr=1e-5"], "unknown key trainer.lr; did you mean optimizer.lr?"),
        (["+env=alphabet_sort", "model.lora_r=8"], "unknown key model.lora_r; did you mean model.lora.r?"),
        (["+env=alphabet_sort", "model.beta=0.1"], "unknown key model.beta; did you mean trainer.beta?"),
        # a group option typo
        (["+env=alphabet_sort", "trainer=dapoo"], "unknown trainer 'dapoo'; did you mean dapo? (available: "),
        (["-m", "+env=alphabet_sort", "trainer=grpo,dapoo"], "unknown trainer 'dapoo'; did you mean dapo?"),
        (["+env=alphabet_srt"], "unknown env 'alphabet_srt'; did you mean alphabet_sort?"),
        (
            ["+env=alphabet_sort", "eval.num_examples=abc"],
            "eval.num_examples=abc: expected an integer (now 5)",
        ),
        (["-m", "+env=alphabet_sort", "model=tiny,gpt9"], "unknown model 'gpt9'"),
        (["+env=alphabet_sort", "stages=[evaluate]"], "stages=['evaluate']"),
        (
            [
                "+env=alphabet_sort",
                "env.names_source=/nonexistent/names.txt",
                "stages=[eval]",
                "tracking=none",
            ],
            "names_source",
        ),
        (["+env=alphabet_sort", "env.max_turn=2", "stages=[eval]", "tracking=none"], "env.max_turn"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, expected, tmp_path):
    proc = run_grpo(args, root=tmp_path / "outputs", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "To append to your config" not in lines[0]
    # a refused start leaves no run folder (Hydra's .hydra/ and log alone are removed)
    assert not list((tmp_path / "outputs").glob("runs/*/*")), list((tmp_path / "outputs").rglob("*"))


def errors_page_examples() -> list[tuple[str, str]]:
    """(command, the error line under it) of docs/errors.md's examples that run on this machine
    as written: not those marked for another machine (a comment) or needing a run of yours."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text(encoding="utf-8")
    lines = page.splitlines()
    pairs = []
    for command, printed in zip(lines, lines[1:], strict=False):
        if command.startswith("$ python -m grpo") and printed.startswith("error: "):
            if "#" in command or "<" in command or "runs/rm" in command:
                continue
            pairs.append((command[2:], printed))
    assert len(pairs) >= 8 and all(re.match(r"python -m grpo\b", c) for c, _ in pairs)
    return pairs


@pytest.mark.parametrize("command, printed", errors_page_examples())
def test_the_errors_page_shows_what_each_command_prints(command, printed, tmp_path):
    import shlex

    proc = run_grpo(shlex.split(command)[3:], root=tmp_path / "outputs", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == printed, proc.stderr


def test_every_setting_named_elsewhere_points_at_a_real_key_or_option():
    """The table of names other tools give a setting (grpo/cli/suggest.py): every target is a key
    of the composed config, or a group with those options; every source is not a key (else the
    table would hide a real one)."""
    from omegaconf import OmegaConf

    from grpo.cli.suggest import ELSEWHERE

    cfg = compose(["+env=alphabet_sort"])
    for source, target in ELSEWHERE.items():
        assert OmegaConf.select(cfg, source, default="missing") == "missing", source
        for choice in target.split(" or "):
            name = choice.split(" (")[0]
            if "=" in name:
                group, _, options = name.partition("=")
                if options != "CODE":
                    assert set(options.split("|")) <= set(group_options(group)), target
            else:
                assert OmegaConf.select(cfg, name, default="missing") != "missing", target


@pytest.mark.parametrize("module", ["grpo", "grpo.cli.memory_plan", "grpo.serve", "grpo.cli.compare"])
def test_a_closed_pipe_ends_a_command_without_a_traceback(module, tmp_path):
    """`python -m grpo --help | head -3`: the reader goes away after a few bytes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    assert proc.stdout.read(20)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_cfg_job_prints_the_config_without_heavy_imports(tmp_path):
    code = (
        "import runpy, sys\n"
        "sys.argv = ['grpo', '+env=alphabet_sort', '--cfg', 'job']\n"
        "try:\n    runpy.run_module('grpo', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'mlflow', 'datasets', 'peft') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout
    assert "name: alphabet_sort" in proc.stdout and "similarity_power: 4" in proc.stdout
    assert not (tmp_path / "outputs").exists()  # printing the config runs nothing


@pytest.mark.parametrize(
    "args",
    [
        ["+env=alphabet_sort", "--cfg", "job"],
        ["+env=reverse_text", "language=ja", "model=small", "trainer.beta=0.1", "--cfg", "job", "--resolve"],
        ["+experiment=alphabet_sort_cpu", "--cfg", "job"],
        ["+env=arithmetic", "--cfg", "job", "--package", "trainer"],
    ],
)
def test_cfg_job_prints_what_hydra_prints(args, tmp_path):
    """`--cfg job` prints the preflight's composition instead of composing again in Hydra: the
    same text as Hydra's own answer (HYDRA_FULL_ERROR=1 leaves the command line to Hydra alone)."""
    ours = run_grpo(args, root=tmp_path / "outputs", cwd=tmp_path)
    hydra_own = run_grpo(args, root=tmp_path / "outputs", cwd=tmp_path, env_extra={"HYDRA_FULL_ERROR": "1"})
    assert ours.returncode == hydra_own.returncode == 0, ours.stderr + hydra_own.stderr
    assert ours.stdout == hydra_own.stdout and len(ours.stdout.splitlines()) > 20


def test_config_tree_is_found_from_any_directory(tmp_path):
    proc = run_grpo(["+env=arithmetic", "--cfg", "job"], root=tmp_path / "outputs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "_target_: grpo.envs.arithmetic.ArithmeticEnv" in proc.stdout
