"""What an evaluation prints and records about itself: the vf-eval-like report and its header.

`eval_header` is what was evaluated and how it sampled, `eval_metadata` the whole metadata.json
(the header, the env's arguments and every statistic); `printable_header` the header as short
text lines; `format_report` the printed summary: the header,
the total reward, each function, the languages, pass@k and the per-example table.

Light: the standard library only.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from grpo.envs.base import Environment
from grpo.evaluation.setup import EvalSetup
from grpo.evaluation.summary import EvalResult
from grpo.run.layout import RESULTS_FILE

# rows of the per-example table on the console; all of them are in results.jsonl and MLflow
MAX_EXAMPLE_ROWS = 20


def format_report(result: EvalResult, header: dict[str, Any], show_examples: bool = True) -> str:
    """vf-eval-like summary: header, total reward, each function, languages, pass@k, per-example table."""
    lines = [f"--- Evaluation ({result.label}) ---"]
    lines += [f"{key}: {value}" for key, value in header.items()]
    lines.append(
        f"reward: mean {result.mean:.4f} ± {result.std:.4f}  ({result.n} examples x {result.r} rollouts)"
    )
    lines.append(
        f"truncated: {result.truncated:.1%} of rollouts (cut by a token limit, not ended by the model)"
    )
    width = max(len(name) for name in [*result.per_function, *result.scores])
    for name, value in result.per_function.items():
        weight = result.weights.get(name)
        suffix = f"  (weight {weight:g})" if weight is not None else ""
        if result.errors.get(name):
            suffix += f"  raised on {result.errors[name]} of {result.n * result.r} rollouts (scored 0)"
        lines.append(f"  {name:<{width}}  {value:.4f} ± {result.per_function_std[name]:.4f}{suffix}")
    for name, stats in result.scores.items():
        lines.append(
            f"  {name:<{width}}  {stats['mean']:.4f} ± {stats['std']:.4f}  (a score, not in the reward: unclipped)"
        )
    if len(result.per_language) > 1:
        scores = list(result.scores)
        lines.append("per language:")
        lines.append(
            f"  {'lang':<6} {'mean':>7} {'std':>7} {'rollouts':>8} {'truncated':>9}"
            + "".join(f" {n:>12}" for n in scores)
        )
        for code, stats in result.per_language.items():
            cells = [result.scores[n]["per_language"].get(code, math.nan) for n in scores]
            lines.append(
                f"  {code:<6} {stats['mean']:>7.4f} {stats['std']:>7.4f} {int(stats['count']):>8}"
                f" {stats.get('truncated', 0.0):>9.1%}" + "".join(f" {v:>12.4f}" for v in cells)
            )
    if result.pass_at_k:
        lines.append("pass@k: " + "  ".join(f"pass@{k}={v:.4f}" for k, v in result.pass_at_k.items()))
    if show_examples and result.rewards:
        ids = result.example_ids or list(range(len(result.rewards)))
        id_width = max(len("example"), *(len(str(i)) for i in ids))
        lines.append("rewards per example (columns: rollout index):")
        lines.append(f"  {'example':>{id_width}}  " + "  ".join(f"{f'r{j}':>6}" for j in range(result.r)))
        for example_id, row in list(zip(ids, result.rewards, strict=True))[:MAX_EXAMPLE_ROWS]:
            lines.append(f"  {str(example_id):>{id_width}}  " + "  ".join(f"{v:>6.3f}" for v in row))
        if len(result.rewards) > MAX_EXAMPLE_ROWS:
            lines.append(f"  ... {len(result.rewards) - MAX_EXAMPLE_ROWS} more examples in {RESULTS_FILE}")
    lines.append(f"saved: {result.results_path}")
    if result.dataset_path is not None:
        lines.append(f"dataset: {result.dataset_path} (datasets.load_from_disk)")
    return "\n".join(lines)


def eval_header(setup: EvalSetup, env: Environment, n: int, r: int, sampling: Any) -> dict[str, Any]:
    gen, m = setup.generation, setup.model
    backend = gen.backend
    model = {"name": m.name, "path": m.path, "source": m.source}
    if m.adapter:  # a LoRA run's checkpoint on m.path's weights: the adapter names what was scored
        model["adapter"] = m.adapter
    if backend != "hf":
        # the endpoint serves its own model: record what it was asked for and where
        model["served_model"] = gen.model
    return {
        "env": env.name,
        "env_class": f"{type(env).__module__}.{type(env).__qualname__}",
        "model": model,
        "generation_backend": backend,
        "base_url": gen.base_url,
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens_per_turn": sampling.max_tokens_per_turn,
            "max_completion_tokens": setup.max_completion_tokens,
            "seed": sampling.seed,
        },
        "n": n,
        "r": r,
    }


def eval_metadata(
    setup: EvalSetup, result: EvalResult, header: dict[str, Any], label: str, step: int | None
) -> dict[str, Any]:
    """metadata.json of an evaluation: what ran (`header`, the env's arguments), its statistics."""
    return {
        "label": label,
        "step": step,
        **{k: v for k, v in header.items() if k != "sampling"},
        # the env's arguments; its class is recorded as env_class
        "env_args": setup.env_args,
        "sampling": header["sampling"],
        "num_examples": result.n,
        "rollouts_per_example": result.r,
        "example_ids": result.example_ids,
        "seed": header["sampling"]["seed"],
        "reward_mean": result.mean,
        "reward_std": result.std,
        "reward_weights": result.weights,
        "per_function": result.per_function,
        "per_function_std": result.per_function_std,
        "reward_errors": result.errors,
        "truncated": result.truncated,
        "per_language": result.per_language,
        "pass_at_k": result.pass_at_k,
        "scores": result.scores,
        "rewards": result.rewards,
        "time_s": result.seconds,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "results_file": RESULTS_FILE,
        "dataset_dir": result.dataset_path.name if result.dataset_path is not None else None,
    }


def printable_header(header: dict[str, Any]) -> dict[str, str]:
    model = header["model"]
    name = model.get("served_model") or model.get("adapter") or model.get("path") or model.get("name")
    s = header["sampling"]
    backend = header["generation_backend"] + (f" @ {header['base_url']}" if header.get("base_url") else "")
    return {
        "env": header["env"],
        "model": f"{name} ({backend})",
        "examples x rollouts": f"{header['n']} x {header['r']}",
        "sampling": (
            f"temperature={s['temperature']} top_p={s['top_p']} max_tokens_per_turn={s['max_tokens_per_turn']} "
            f"max_completion_tokens={s['max_completion_tokens']} seed={s['seed']}"
        ),
    }
