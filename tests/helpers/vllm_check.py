"""What the `-m vllm` tests measure inside a process of its own (a colocated vLLM engine joins a
torch.distributed world of one, which a test worker should not keep). Run as a script:

    python tests/helpers/vllm_check.py parity OUT.json [overrides...]
        greedy rollouts of grpo's hf engine and of vllm_colocate on the same rows: their tokens
        and sampled-token log-probs (each rollout's episode), and the hf log-probs of vLLM's tokens;
        then one seeded batch of vLLM rollouts whose prompts pass 4096 tokens
    python tests/helpers/vllm_check.py train OUT.json [overrides...]
        train() with generation=vllm_colocate, then sampled rollouts through the trainer's engine:
        the engine's log-probs beside the trained and the initial policy's, teacher-forced

Both print nothing the test reads but OUT.json. `logprobs_of` is also what the server tests use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def logprobs_of(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """The log-probability of each completion token after the prompt and the tokens before it,
    under `model` (teacher-forced, float32)."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    start = len(prompt_ids)
    lp = torch.log_softmax(logits[start - 1 : -1], dim=-1)
    return [float(lp[i, tok]) for i, tok in enumerate(completion_ids)]


def episodes(rollouts: list[Any]) -> list[dict[str, Any]]:
    """Per rollout: its prompt, its completion tokens (env turns included), which of them are the
    model's (env_mask 1), and the sampler's log-probs."""
    return [
        {
            "prompt_ids": list(r.prompt_ids),
            "completion_ids": list(r.completion_ids),
            "env_mask": list(r.env_mask),
            "logprobs": [float(x) for x in r.logprobs],
            "turns": int(r.num_turns),
        }
        for r in rollouts
    ]


def sampled_episodes(
    env: Any, backend: Any, rows: int, rollouts: int, seed: int, max_tokens: int
) -> list[dict[str, Any]]:
    """`episodes` of seeded rollouts (temperature 1) through `backend` on the env's first eval rows."""
    from grpo.generation import Sampling
    from grpo.rollout import run_rollouts

    done = run_rollouts(
        env,
        env.rows("eval", rows),
        backend,
        rollouts_per_row=rollouts,
        sampling=Sampling(temperature=1.0, max_tokens_per_turn=max_tokens, seed=seed),
        max_completion_tokens=400,
    )
    return episodes(done)


def model_logprobs(model: Any, episode: dict[str, Any]) -> list[float]:
    """Teacher-forced log-probs of the model's own tokens of an episode (env tokens left out)."""
    every = logprobs_of(model, episode["prompt_ids"], episode["completion_ids"])
    return [lp for lp, own in zip(every, episode["env_mask"], strict=True) if own]


def sampled(episode: dict[str, Any]) -> list[float]:
    return [lp for lp, own in zip(episode["logprobs"], episode["env_mask"], strict=True) if own]


def parity(overrides: list[str]) -> dict[str, Any]:
    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation import Sampling, make_backend
    from grpo.models import load_policy
    from grpo.rollout import run_rollouts

    cfg = load_settings(["+env=alphabet_sort", *overrides])
    env = build_env(cfg.env, cfg.language)
    rows = env.rows("eval", 6)
    policy, tokenizer = load_policy(cfg.model)
    sampling = Sampling(temperature=0.0, max_tokens_per_turn=cfg.generation.max_tokens_per_turn)
    out: dict[str, Any] = {}
    for name in ("hf", "vllm_colocate"):
        gen = load_settings(["+env=alphabet_sort", *overrides, f"generation={name}"]).generation
        backend = make_backend(gen, policy, tokenizer, cfg.model)
        rollouts = run_rollouts(
            env, rows, backend, rollouts_per_row=1, sampling=sampling, max_completion_tokens=600
        )
        out[name] = episodes(rollouts)
    out["hf_logprobs_of_vllm"] = [model_logprobs(policy, e) for e in out["vllm_colocate"]]
    # a batch whose prompts pass vLLM's 4096 tokens per engine step, every request seeded
    big = run_rollouts(
        env,
        env.rows("eval", 24),
        backend,
        rollouts_per_row=4,
        sampling=Sampling(temperature=1.0, max_tokens_per_turn=16, seed=1),
        max_completion_tokens=200,
    )
    out["big_batch"] = {"rollouts": len(big), "prompt_tokens": sum(len(r.prompt_ids) for r in big)}
    out["context"] = context_edge(backend, sampling)
    return out


def context_edge(backend: Any, sampling: Any) -> dict[str, Any]:
    """Two requests at the model's context: 4 tokens of room left, and none: the tokens each got
    and whether it finished (vLLM refuses a prompt past max_model_len)."""
    from grpo.generation import GenRequest

    limit = backend.max_model_len
    near, past = backend.generate(
        [
            GenRequest(max_new_tokens=64, prompt_ids=[65] * (limit - 4)),
            GenRequest(max_new_tokens=64, prompt_ids=[65] * (limit + 3)),
        ],
        sampling,
    )
    return {
        "limit": limit,
        "near": [len(near.token_ids), near.finished],
        "past": [len(past.token_ids), past.finished, past.text],
    }


def train(overrides: list[str], run_dir: Path) -> dict[str, Any]:
    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation import make_backend
    from grpo.models import load_policy
    from grpo.train.trainer import train as train_policy

    cfg = load_settings(["+env=alphabet_sort", "generation=vllm_colocate", *overrides])
    env = build_env(cfg.env, cfg.language)
    initial, _ = load_policy(cfg.model)
    result = train_policy(cfg, env, run_dir)
    backend = make_backend(cfg.generation, result.model, result.tokenizer, cfg.model)  # the trainer's engine
    eps = sampled_episodes(env, backend, 4, 2, seed=3, max_tokens=cfg.generation.max_tokens_per_turn)
    history = [h for h in result.log_history if "sampling/importance_sampling_ratio/mean" in h]
    return {
        "global_step": result.global_step,
        "engine": [sampled(e) for e in eps],
        "trained": [model_logprobs(result.model.eval(), e) for e in eps],
        "checkpoint": [model_logprobs(_checkpoint(result.checkpoint_dir), e) for e in eps],
        "initial": [model_logprobs(initial, e) for e in eps],
        "is_ratio": [h["sampling/importance_sampling_ratio/mean"] for h in history],
        "losses": [h.get("loss") for h in result.log_history if "loss" in h],
    }


def _checkpoint(folder: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def main(argv: list[str]) -> None:
    mode, out_path, *overrides = argv
    out = Path(out_path)
    if mode == "parity":
        result = parity(overrides)
    elif mode == "train":
        result = train(overrides, out.parent / "run")
    else:
        raise SystemExit(f"unknown mode {mode}")
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
