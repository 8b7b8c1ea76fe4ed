"""`python -m grpo.serve model=... [serve.KEY=VALUE ...]`: serve a policy (a checkpoint grpo
trained, or any model preset) on the policy server until Ctrl-C / SIGTERM.

    python -m grpo.serve model=qwen3_0_6b model.path=outputs/runs/<day>/<time> serve.port=8000
    vf-eval <env> -b http://127.0.0.1:8000/v1 -m <model name>        # any OpenAI-compatible harness

The model loads as `python -m grpo` loads the policy (model.*, LoRA adapters merged as the
trainer saved them); generation=hf. model.path=<a grpo run folder> serves its final checkpoint
(model.checkpoint=best: its best), said in one line, as `python -m grpo stages=[eval]` does. The settings are `serve.*` (grpo/config.py ServeConfig).
A bad override or setting is one line and exit 2; Ctrl-C stops the server and exits 0.

A training run with generation.num_batches_ahead > 0 starts it as its generator
(grpo/generation/generator.py) with serve.threads (its share of the cores) and serve.parent_pid
(it stops when the trainer is gone, however the trainer ended).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from grpo.errors import UserError, fail

USAGE = (
    "usage: python -m grpo.serve model=NAME [model.path=DIR or a grpo run folder] [model.checkpoint=final|best] "
    "[serve.port=8000] [serve.host=...] [serve.api_key_var=VAR]"
)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE + "\n" + (__doc__ or ""))
        return
    try:
        server = _start(args)
    except UserError as ex:
        fail(str(ex))
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if server.parent_pid is not None:
        threading.Thread(target=_watch_parent, args=(server.parent_pid, stop), daemon=True).start()
    print(
        f"grpo.serve: {server.model_name} on {server.url} — chat: {server.url}/v1/chat/completions, "
        f"tokens: {server.url}/inference/v1/generate; Ctrl-C stops",
        flush=True,
    )
    example = getattr(server, "example_request", None)
    if example:
        print(f"grpo.serve: the run's env asks in its own format; a request it knows: {example}", flush=True)
    stop.wait()
    server.stop()
    n = server.requests
    print(
        f"grpo.serve: stopped after {n} request{'' if n == 1 else 's'} ({server.completion_tokens} tokens generated)"
    )


def _start(overrides: list[str]):
    from grpo.compose import load_settings, one_line, type_mismatch
    from grpo.run.trained import resolve_trained_model, saved_model

    try:
        settings = load_settings(overrides)
    except UserError:
        raise
    except Exception as ex:  # Hydra's override and composition errors
        raise UserError(f"{type_mismatch(ex) or one_line(ex)}\n{USAGE}") from None
    # model.path=<run folder>: the checkpoint an evaluation of the run would load
    settings, trained = resolve_trained_model(settings)
    if trained is not None:
        print(trained.line("serving"), flush=True)
    cfg = settings.serve
    if settings.generation.backend != "hf":
        raise UserError(
            f"generation={settings.generation.backend}: python -m grpo.serve serves the hf backend"
        )
    key = None
    if cfg.api_key_var:
        key = os.environ.get(cfg.api_key_var)
        if not key:
            raise UserError(
                f"serve.api_key_var={cfg.api_key_var}: the environment variable {cfg.api_key_var} is not set"
            )
    from grpo.serve.protocol import ServeLimits

    try:
        limits = ServeLimits(
            max_prompt_tokens=_positive("max_prompt_tokens", cfg.max_prompt_tokens),
            max_tokens=_positive("max_tokens", cfg.max_tokens),
            max_batch=_positive("max_batch", cfg.max_batch),
            max_pending=_positive("max_pending", cfg.max_pending),
            batch_window_ms=float(cfg.batch_window_ms),
        )
    except (TypeError, ValueError) as ex:
        raise UserError(str(ex)) from None
    if not 0 <= int(cfg.port) <= 65535:
        raise UserError(f"serve.port={cfg.port}: expected 0..65535 (0: a free port)")
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(_positive("threads", cfg.threads))
    if cfg.parent_pid is not None and not _alive(int(cfg.parent_pid)):
        raise UserError(f"serve.parent_pid={cfg.parent_pid}: no such process")
    from grpo.generation import make_backend
    from grpo.serve.server import PolicyServer, is_loopback

    if not is_loopback(cfg.host) and not key:  # before the model loads
        raise UserError(
            f"serve.host={cfg.host}: listening beyond loopback needs an API key "
            "(serve.api_key_var=NAME of an environment variable holding it)"
        )
    from grpo.trl_adapter.logs import quiet_library_notices

    quiet_library_notices()  # no "Loading weights" bar: the first line says what is served
    backend = make_backend(settings.generation, None, None, settings.model)
    import torch

    torch.manual_seed(int(settings.seed))  # unseeded requests draw from this stream
    # a run folder's checkpoint: the id of the model the run trained (its saved model.name)
    trained_name = saved_model(trained.run_dir).name if trained is not None else None
    name = cfg.model_name or trained_name or settings.model.name or "grpo-policy"
    from grpo.generation.served import WEIGHTS_KEY_VAR

    server = PolicyServer(
        backend,
        model_name=str(name),
        host=cfg.host,
        port=int(cfg.port),
        api_key=key,
        limits=limits,
        # a training run's generator (or one started for runs): their key opens the weights route
        weights_key=os.environ.get(WEIGHTS_KEY_VAR),
    ).start()
    server.parent_pid = None if cfg.parent_pid is None else int(cfg.parent_pid)
    if trained is not None:
        server.example_request = _example_request(
            trained.run_dir, str(name), settings.generation.max_tokens_per_turn
        )
    return server


def _example_request(run_dir: Path, model: str, max_tokens: int) -> str | None:
    """A chat request in the served run's env's own prompt format (a prompt its evaluations
    asked), as JSON: the model knows its env's prompts, not free-form text. None when the run
    evaluated nothing."""
    import json

    from grpo.run.trained import example_prompt

    prompt = example_prompt(run_dir)
    if prompt is None:
        return None
    return json.dumps({"model": model, "messages": prompt, "max_tokens": int(max_tokens)}, ensure_ascii=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_parent(pid: int, stop: threading.Event) -> None:
    """Stop the server once process `pid` is gone (checked every half second). When `pid` is this
    server's parent, its exit shows as a new parent (a dead parent not yet reaped still answers
    a signal check)."""
    direct = os.getppid() == pid
    while not stop.wait(0.5):
        if (os.getppid() != pid) if direct else not _alive(pid):
            print(f"grpo.serve: process {pid} (the trainer) is gone; stopping", file=sys.stderr, flush=True)
            stop.set()


def _positive(key: str, value: int) -> int:
    if isinstance(value, bool) or int(value) < 1:
        raise ValueError(f"serve.{key}={value}: expected a positive integer")
    return int(value)


if __name__ == "__main__":
    from grpo.errors import quiet_closed_pipe

    quiet_closed_pipe()
    main()
