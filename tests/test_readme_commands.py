"""Every command of the bash blocks of README.md and of the docs site's pages (docs/*.md), parsed
from those files themselves so the text and the code cannot drift. A command written on several
pages is placed and tested once.

Each command is one of:
- run for real, as written, in a fresh working directory (a new user's clone): the commands that
  take under a minute on the tiny model (evaluations, --cfg job, the small tools) must exit 0;
- checked by the real preflight (`python -m grpo`'s composition and every settings rule), the
  longer training commands: they must pass it, or, where they need a GPU (Qwen3-0.6B, vLLM), be
  refused with the one-line reason on this CPU machine;
- the installs of the example environments (`pip install -e examples/<name>`): run as written in
  the clone's own virtual environment (it sees this one's packages), whose `python` runs every
  command; its other installs are .ci/run's set-up;
- not run here, with the reason said: other installs, servers, other launchers (each has its own
  test).
A command this file cannot place fails the test: a new documented command needs a decision here.
Placeholders (`<date>/<time>`, `/path/to/model`) take a real folder of the right kind.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.cli.preflight import check_command
from grpo.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the README first: its commands keep their place at the front of the parametrised ids
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
CI = ROOT / ".ci" / "run"

# commands that take under a minute: run for real (an evaluation of the default tiny model, --cfg job)
QUICK = re.compile(r"^python -m grpo .*(stages=\[eval\]|--cfg job$)")
# ... except those that need what a new clone lacks: another model or server, a hub account
NEEDS = re.compile(r"generation=|push_to_hub|model=")
# the example environments' installs (docs/verifiers.md), run in the clone's venv
EXAMPLE_INSTALL = re.compile(r"^pip install -e examples/[\w.-]+$")


def is_quick(command: str) -> bool:
    return bool(QUICK.search(command)) and not NEEDS.search(command)


# needs a GPU / vLLM on this machine: the preflight says so in one line
GPU = re.compile(r"model=qwen3_0_6b|generation=vllm|experiment=alphabet_sort_hub_recipe(\s|$)")
# not run here, and why
NOT_HERE = {
    "pip install": "an install (.ci/run does the set-up)",
    "python -m venv": "the set-up's new environment (.ci/run makes one)",
    "mlflow ui": "a long-running server (tests/test_tracking.py runs a real one)",
    "vllm serve": "a GPU server",
    "python -m vllm.entrypoints": "a vLLM server (tests/test_vllm_cpu.py starts the documented command, -m vllm)",
    "pip uninstall": "an install step (.ci/run's vLLM venv does it)",
    "transformers serve": "a server (tests/test_openai_endpoint.py runs a real one)",
    "srun": "SLURM",
    "accelerate launch": "another launcher (tests/test_distributed.py)",
    "torchrun": "another launcher (tests/test_distributed.py)",
    "python -m grpo.serve": "a long-running server (tests/test_serve.py runs the real command)",
    "curl": "a request to a running grpo.serve (tests/test_evaluate_run.py serves a run folder and sends it)",
    "vf-eval": "verifiers' own CLI against a running policy server (tried by hand, docs/serving.md)",
    "python -m mkdocs": "the docs site (tests/test_docs_site.py builds it in strict mode)",
}


def bash_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks: continuation lines joined, comments and prompts left out."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            # a comment after the command: two or more spaces, then #
            commands.append(re.split(r"\s{2,}#", line, maxsplit=1)[0].strip())
    return commands


def split(command: str) -> tuple[dict[str, str], list[str]]:
    """(environment assignments in front, argv)."""
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


# each command once (a few appear on several pages)
COMMANDS = list(dict.fromkeys(c for page in PAGES for c in bash_commands(page.read_text(encoding="utf-8"))))
README_COMMANDS = bash_commands(README.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A new user's working directory, with what the placeholders stand for: a finished run
    folder (a real evaluation run), a reward model trained on en and sv, an SFT model dir, and a
    downloaded model's folder (its files' names only: the preflight reads no more, and what stops
    those commands here is the GPU rule)."""
    root = tmp_path_factory.mktemp("clone")
    # the two runs side by side (they share nothing): a finished GRPO run (tracked), what resume=
    # and the MLflow sync take, and an RM trained on en and sv (untracked, in its own folder)
    grpo_run = _start(
        root,
        "python -m grpo +env=alphabet_sort stages=[train] trainer.max_steps=1 trainer.num_generations=2 "
        "trainer.per_device_batch_completions=2 env.max_turns=1 trainer.max_completion_length=16 "
        "generation.max_tokens_per_turn=16",
    )
    rm_run = _start(
        root,
        "python -m grpo +env=alphabet_sort stages=[reward_model] reward_model=learned tracking=none "
        "reward_model.data.synthetic.n=40 'reward_model.data.synthetic.languages=[en,sv]' "
        "reward_model.training.max_steps=2 hydra.run.dir=rm_run",
    )
    venv, installs = _example_installs(root)  # while the two runs train
    for proc in (grpo_run, rm_run):
        err = proc.communicate(timeout=300)[1]
        assert proc.returncode == 0, err[-2000:]
    (run_dir,) = (root / "outputs" / "runs").glob("*/*")
    # the user's own chat data (the format docs/sft.md gives)
    (root / "data").mkdir()
    (root / "data" / "chats.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "Sortera: b, a"}, {"role": "assistant", "content": "a, b"}], '
        '"language": "sv"}\n',
        encoding="utf-8",
    )
    downloaded = root / "Qwen3-0.6B"
    downloaded.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (downloaded / name).write_text("{}", encoding="utf-8")
    return {
        "root": root,
        "venv": venv,
        "installs": installs,
        "downloaded": downloaded,
        "run": run_dir,
        "rm": root / "rm_run" / "reward_model",
        "sft": ROOT / "grpo" / "assets" / "small_alphabet_sort_sft",
    }


def _example_installs(root: Path) -> tuple[Path, dict[str, subprocess.CompletedProcess]]:
    """The clone's virtual environment (a new one that sees this one's packages through a .pth
    line, so nothing is installed twice and nothing here changes) and the documented example
    installs run in it, as written: command -> its result."""
    import shutil
    import sysconfig

    shutil.copytree(
        ROOT / "examples", root / "examples", ignore=shutil.ignore_patterns("*.egg-info", "build")
    )
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_paths()["purelib"]
    Path(site, "_grpo_test_parent.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n", encoding="utf-8"
    )
    from concurrent.futures import ThreadPoolExecutor

    commands = [c for c in COMMANDS if EXAMPLE_INSTALL.match(c)]
    with ThreadPoolExecutor(max_workers=len(commands) or 1) as pool:  # independent packages
        results = pool.map(lambda c: _run(root, c, timeout=600, venv=venv), commands)
        return venv, dict(zip(commands, results, strict=True))


def _start(cwd: Path, command: str, venv: Path | None = None) -> subprocess.Popen:
    """A documented command line, started in `cwd` as a new user's shell would run it (its own env
    assignments, offline, none of the test session's output settings), in `venv` when given (its
    bin/ first on PATH: `python` and `pip` are its own)."""
    env, argv = split(command)
    if venv is not None:
        env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv), **env}
        if argv[0] in ("python", "pip"):
            argv[0] = str(venv / "bin" / argv[0])
    elif argv[0] == "python":
        argv[0] = sys.executable
    full = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    for key in ("GRPO_OUTPUT_ROOT", "MLFLOW_TRACKING_URI", "HYDRA_FULL_ERROR"):
        full.pop(key, None)
    return subprocess.Popen(
        argv, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _run(
    cwd: Path, command: str, timeout: int = 120, venv: Path | None = None
) -> subprocess.CompletedProcess:
    proc = _start(cwd, command, venv)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def quick_runs(clone) -> dict[str, subprocess.CompletedProcess]:
    """Every quick `python -m grpo` command of the docs, run for real in the clone, two at a time
    (each is one process on one core; the machine has two): command as written -> its result."""
    from concurrent.futures import ThreadPoolExecutor

    quick = [c for c in COMMANDS if is_quick(_fill(c, clone)) and split(c)[1][:3] == ["python", "-m", "grpo"]]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda c: _run(clone["root"], _fill(c, clone), venv=clone["venv"]), quick)
        return dict(zip(quick, results, strict=True))


def _fill(command: str, clone: dict) -> str:
    """Placeholders replaced by real folders of their kind."""
    command = command.replace("outputs/runs/<date>/<time>/reward_model", str(clone["rm"]))
    command = command.replace("outputs/runs/<date>/<time>/sft", str(clone["sft"]))
    command = command.replace("outputs/runs/<date>/<time>", str(clone["run"]))
    return command.replace("/data/Qwen3-0.6B", str(clone["downloaded"]))


def test_the_docs_have_commands_of_every_kind():
    assert len(COMMANDS) > 40
    assert any(is_quick(c) for c in COMMANDS) and any(GPU.search(c) for c in COMMANDS)
    # the README's test command is the one .ci/run runs, and the pages say no other
    (test_command,) = {c for c in COMMANDS if re.search(r"\bpytest\b", c) and "-m" not in c.split()}
    assert test_command in README_COMMANDS
    assert test_command in CI.read_text(encoding="utf-8").splitlines()
    # a quick subset is documented
    assert any(c.endswith('pytest -q -m "not slow"') for c in README_COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command(command, clone, quick_runs, monkeypatch):
    written, command = command, _fill(command, clone)
    for key, value in split(command)[0].items():
        monkeypatch.setenv(key, value)  # what the command sets in front of it, for the preflight too
    monkeypatch.chdir(clone["root"])  # relative paths (data/prefs.jsonl) as in the user's clone
    env, argv = split(command)
    head = " ".join(argv[:2])
    line = " ".join(argv)  # the command without the environment assignments in front
    if EXAMPLE_INSTALL.match(command):
        proc = clone["installs"][written]
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        return
    if any(
        command.startswith(k) or line.startswith(k) or head.startswith(k) or k in command.split(" -m ")[0]
        for k in NOT_HERE
    ):
        reason = next(
            v
            for k, v in NOT_HERE.items()
            if command.startswith(k) or line.startswith(k) or head.startswith(k) or k in command
        )
        pytest.skip(f"not run here: {reason}")
    if "pytest" in argv:
        pytest.skip("the test suite itself")
    assert argv[:2] == ["python", "-m"], f"a documented command this test cannot place: {command}"
    module = argv[2]
    if module == "grpo":
        args = argv[3:]
        if is_quick(command):
            proc = quick_runs[written]
            assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
            if "tracking=none" not in command and "--cfg" not in command:
                # a tracked run ends with where to see it: its run page and the command serving it
                last = proc.stdout.strip().splitlines()[-1]
                assert last.startswith("mlflow: open them with: mlflow ui --backend-store-uri sqlite:///"), (
                    last
                )
            return
        multirun = args[0] in ("-m", "--multirun")
        overrides = [a for a in args if not a.startswith("-")]
        for example in (ROOT / "examples").iterdir():
            # what the example's editable install puts on the path (for the in-process preflight)
            monkeypatch.syspath_prepend(str(example))
        if GPU.search(command):
            with pytest.raises(UserError, match=r"needs vLLM|GPU|CUDA"):
                check_command(overrides, multirun=multirun)
            return
        check_command(overrides, multirun=multirun)  # composes and passes every settings rule
        return
    # the small tools
    if module == "grpo.tracking.sync":
        command = command.replace(argv[3], str(clone["run"]))
    if module == "grpo.cli.compare" and len(argv) > 3:
        proc = _run(clone["root"], "python -m grpo.cli.compare --help", venv=clone["venv"])
    else:
        proc = _run(clone["root"], command, venv=clone["venv"])
    if module == "grpo.cli.compare" and proc.returncode == 2:
        # no sweep in a new clone's store yet: one line that says what to run first
        assert (
            proc.stderr.strip()
            == "error: no sweep in this store: run one (python -m grpo -m ...) or pass --uri / --experiment"
        )
        return
    assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
