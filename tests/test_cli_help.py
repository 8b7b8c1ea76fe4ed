"""`python -m grpo --help`: grpo's own usage page (conf/hydra/help/grpo.yaml), fast and light."""

from __future__ import annotations

import subprocess
import sys

from grpo.compose import group_options

HEAVY = ("torch", "transformers", "trl", "mlflow", "datasets", "peft")


def test_help_starts_with_grpos_usage_without_heavy_imports(tmp_path):
    code = (
        "import runpy, sys\n"
        "sys.argv = ['grpo', '--help']\n"
        "try:\n    runpy.run_module('grpo', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("grpo: GRPO fine-tuning") and "HEAVY []" in out
    assert "Usage: python -m grpo +env=NAME" in out
    # how to pick an env, with every env listed, and the + the groups without a default need
    assert "+env=NAME, one of\n  " + ", ".join(group_options("env")) + "\n" in out
    assert "take a leading +, as in +env=alphabet_sort" in out
    assert "\ntrainer: dapo, dr_grpo, grpo\n" in out and "\nlanguage: ar, de, en," in out
    assert "README.md" in out and "docs/" in out and "model.checkpoint=final|best" in out
    # no Hydra banner, no config dump
    assert "powered by Hydra" not in out and "lr_scheduler" not in out and len(out.splitlines()) < 60
    assert not (tmp_path / "outputs").exists()


def test_hydra_help_still_shows_hydras_flags(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grpo", "--hydra-help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "== Flags ==" in proc.stdout and "--cfg,-c" in proc.stdout
