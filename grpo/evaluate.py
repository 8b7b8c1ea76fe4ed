"""The evaluator: n examples x r rollouts per example, with vf-eval's -n / -r semantics.

`evaluate` takes the first `eval.num_examples` rows of the environment's eval split (the same rows
for the same env seed), runs `eval.rollouts_per_example` rollouts of each through the batched
rollout engine, scores every rollout with the environment's rubric plus any extra reward
functions, prints a compact report, and writes `results.jsonl` (one line per rollout) and
`metadata.json` atomically under `out_dir`.

Statistics: `mean` / `std` are over all n*r rollouts (population std, ddof=0, as numpy's default
that vf-eval uses); pass@k is reported only when every reward function is binary (0/1) and uses
the unbiased estimator 1 - C(n-c, k) / C(n, k) per example, averaged over examples.

This module stays light at import time (the config check `validate_eval` runs before any heavy
import); torch and the rollout engine are imported inside `evaluate`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from grpo.envs.base import Environment, RewardFunc, Row, Rubric, safe_reward
from grpo.errors import UserError

RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"
# results.jsonl keys that are not reward functions; a reward function may not take one of these names
RESERVED_KEYS = (
    "example_id",
    "rollout_index",
    "language",
    "prompt",
    "completion",
    "messages",
    "info",
    "reward",
    "num_turns",
    "truncated",
)


# ---- config check (light: runs before any heavy import) ---------------------------------------


def validate_eval(cfg: Any) -> None:
    """Reject eval settings that cannot run: one line naming the field and the fix."""
    ev = cfg.eval
    for key, flag, default in (("num_examples", "-n", 5), ("rollouts_per_example", "-r", 3)):
        value = _get(ev, key)
        if value is None or int(value) < 1:
            raise UserError(
                f"eval.{key} must be >= 1 (vf-eval {flag}), got {value}: set e.g. eval.{key}={default}"
            )
    temperature = float(ev.temperature)
    if temperature < 0 or not math.isfinite(temperature):
        raise UserError(f"eval.temperature must be >= 0 (0 = greedy), got {ev.temperature}")
    top_p = float(ev.top_p)
    if not 0.0 < top_p <= 1.0:
        raise UserError(f"eval.top_p must be in (0, 1], got {ev.top_p}")


# ---- statistics ---------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one example with n samples of which c are correct:
    1 - C(n-c, k) / C(n, k), the probability that k samples drawn without replacement
    contain at least one correct one (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0 for a single value)."""
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values)


def is_binary(values: Iterable[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


# ---- the result -----------------------------------------------------------------------------------


@dataclass
class EvalResult:
    label: str
    n: int
    r: int
    mean: float
    std: float
    # reward function name -> mean / std of its score over all n*r rollouts
    per_function: dict[str, float]
    per_function_std: dict[str, float]
    # language code -> {"mean", "std", "count" (rollouts), "examples"}
    per_language: dict[str, dict[str, float]]
    # {k: pass@k} for k = 1..r, or None when some reward function is not binary
    pass_at_k: dict[int, float] | None
    # total reward per example (rows) and rollout index (columns)
    rewards: list[list[float]]
    results_path: Path
    metadata_path: Path
    seconds: float
    # reward function name -> weight in the total
    weights: dict[str, float] = field(default_factory=dict)
    # the example id of each row of `rewards`
    example_ids: list[Any] = field(default_factory=list)

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        """Flat metric names (MLflow-safe: no '@'), e.g. mean, std, func/<name>, func/<name>/std,
        lang/<code>/mean, pass_at_<k>, seconds; `prefix` is prepended to every name."""
        m: dict[str, float] = {
            "mean": self.mean,
            "std": self.std,
            "num_examples": float(self.n),
            "rollouts_per_example": float(self.r),
            "seconds": self.seconds,
        }
        for name, value in self.per_function.items():
            m[f"func/{name}"] = value
            m[f"func/{name}/std"] = self.per_function_std[name]
        for code, stats in self.per_language.items():
            for key in ("mean", "std", "count"):
                m[f"lang/{code}/{key}"] = float(stats[key])
        for k, value in (self.pass_at_k or {}).items():
            m[f"pass_at_{k}"] = value
        return {f"{prefix}{name}": float(value) for name, value in m.items()}


# ---- scoring --------------------------------------------------------------------------------------


def combined_rubric(env: Environment, extra_reward_funcs: Sequence[Any] | None) -> Rubric:
    """The env rubric plus extra reward functions (objects with name, fn, weight, or tuples)."""
    extras = [_as_reward_func(f) for f in extra_reward_funcs or ()]
    funcs = list(env.rubric.funcs) + extras
    names = [f.name for f in funcs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"reward function names must be unique, {duplicates} appear twice: rename one")
    reserved = sorted(set(names) & set(RESERVED_KEYS))
    if reserved:
        raise UserError(f"reward function name(s) {reserved} clash with results.jsonl fields: rename them")
    if not funcs:
        raise UserError(f"environment {env.name!r} has no reward functions to evaluate")
    return Rubric(funcs)


def _as_reward_func(f: Any) -> RewardFunc:
    if isinstance(f, RewardFunc):
        return f
    if isinstance(f, tuple | list) and len(f) in (2, 3):
        return RewardFunc(str(f[0]), f[1], float(f[2]) if len(f) == 3 else 1.0)
    if hasattr(f, "name") and hasattr(f, "fn"):
        return RewardFunc(str(f.name), f.fn, float(getattr(f, "weight", 1.0)))
    raise TypeError(f"extra reward function must have name, fn and weight, got {f!r}")


def score_rollout(
    env: Environment,
    extras: Sequence[RewardFunc],
    row: Row,
    completion: list[dict[str, str]],
    state: dict[str, Any],
) -> dict[str, float]:
    """Per-function scores of one rollout: the env's own `score`, then each extra function, called
    with the keywords training passes to rubric functions (prompt, completion, info, state)."""
    scores = dict(env.score(row, completion, state))
    for f in extras:
        scores[f.name] = safe_reward(
            f.fn, prompt=row.prompt, completion=completion, info=row.info, state=state
        )
    return scores


# ---- atomic, JSON-safe output --------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    """Make ground truth JSON-safe: sets become sorted lists, paths and the rest strings."""
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    if isinstance(obj, tuple):
        return list(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        with contextlib.suppress(Exception):
            return obj.item()
    if hasattr(obj, "tolist") and callable(obj.tolist):
        with contextlib.suppress(Exception):
            return obj.tolist()
    return str(obj)


def to_json(obj: Any, **kwargs: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default, allow_nan=True, **kwargs)


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[TextIO]:
    """Write `path` through a temporary file in the same directory, renamed over `path` only
    when the block finishes: a crash leaves the previous file (or none), never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_jsonl_atomic(path: Path, records: Iterable[dict[str, Any]]) -> None:
    with atomic_writer(path) as fh:
        for record in records:
            fh.write(to_json(record) + "\n")


def write_json_atomic(path: Path, obj: Any) -> None:
    with atomic_writer(path) as fh:
        fh.write(to_json(obj, indent=2) + "\n")


# ---- the report printed to stdout ----------------------------------------------------------------


def format_report(result: EvalResult, header: dict[str, Any], show_examples: bool = True) -> str:
    """vf-eval-like summary: header, total reward, each function, languages, pass@k, per-example table."""
    lines = [f"--- Evaluation ({result.label}) ---"]
    lines += [f"{key}: {value}" for key, value in header.items()]
    lines.append(
        f"reward: mean {result.mean:.4f} ± {result.std:.4f}  ({result.n} examples x {result.r} rollouts)"
    )
    width = max(len(name) for name in result.per_function)
    for name, value in result.per_function.items():
        weight = result.weights.get(name)
        suffix = f"  (weight {weight:g})" if weight is not None else ""
        lines.append(f"  {name:<{width}}  {value:.4f} ± {result.per_function_std[name]:.4f}{suffix}")
    if len(result.per_language) > 1:
        lines.append("per language:")
        lines.append(f"  {'lang':<6} {'mean':>7} {'std':>7} {'rollouts':>8}")
        for code, stats in result.per_language.items():
            lines.append(f"  {code:<6} {stats['mean']:>7.4f} {stats['std']:>7.4f} {int(stats['count']):>8}")
    if result.pass_at_k:
        lines.append("pass@k: " + "  ".join(f"pass@{k}={v:.4f}" for k, v in result.pass_at_k.items()))
    if show_examples and result.rewards:
        ids = result.example_ids or list(range(len(result.rewards)))
        id_width = max(len("example"), *(len(str(i)) for i in ids))
        lines.append("rewards per example (columns: rollout index):")
        lines.append(f"  {'example':>{id_width}}  " + "  ".join(f"{f'r{j}':>6}" for j in range(result.r)))
        for example_id, row in zip(ids, result.rewards, strict=True):
            lines.append(f"  {str(example_id):>{id_width}}  " + "  ".join(f"{v:>6.3f}" for v in row))
    lines.append(f"saved: {result.results_path}")
    return "\n".join(lines)


# ---- the evaluator ------------------------------------------------------------------------------------


def evaluate(
    cfg: Any,
    env: Environment,
    backend: Any,
    out_dir: Path,
    label: str = "eval",
    extra_reward_funcs: Sequence[Any] | None = None,
    step: int | None = None,
) -> EvalResult:
    """Evaluate `backend` on `env`: n eval rows x r rollouts, scored, printed and saved under `out_dir`.

    `extra_reward_funcs` (RewardFunc, or (name, fn[, weight])) join the env rubric: they get a column
    in results.jsonl, a per-function mean, and their weighted score counts in the total reward."""
    from grpo.rollout import Sampling, run_rollouts

    validate_eval(cfg)
    ev = cfg.eval
    n_wanted, r = int(ev.num_examples), int(ev.rollouts_per_example)
    rubric = combined_rubric(env, extra_reward_funcs)
    extras = rubric.funcs[len(env.rubric.funcs) :]
    rows = env.rows("eval", n_wanted)
    if len(rows) < n_wanted:
        print(
            f"note: eval.num_examples={n_wanted} but the eval split has {len(rows)} rows; using all of them"
        )
    sampling = Sampling(
        temperature=float(ev.temperature),
        top_p=float(ev.top_p),
        max_tokens_per_turn=int(cfg.generation.max_tokens_per_turn),
        seed=None if _get(ev, "seed") is None else int(ev.seed),
    )
    max_completion_tokens = int(cfg.trainer.max_completion_length)
    out_dir = Path(out_dir)
    header = _header(cfg, env, len(rows), r, sampling, max_completion_tokens)
    print(f"evaluating {header['env']} ({label}): {len(rows)} examples x {r} rollouts", flush=True)

    start = time.perf_counter()
    rollouts = run_rollouts(
        env,
        rows,
        backend,
        rollouts_per_row=r,
        sampling=sampling,
        max_completion_tokens=max_completion_tokens,
        progress=True,
    )
    records = [_record(env, rubric, extras, ro) for ro in rollouts]
    seconds = time.perf_counter() - start

    result = summarize(records, rubric, label, r, out_dir / RESULTS_FILE, out_dir / METADATA_FILE, seconds)
    write_jsonl_atomic(result.results_path, records)
    metadata = {
        "label": label,
        "step": step,
        **{k: v for k, v in header.items() if k != "sampling"},
        "env_args": _env_args(cfg),
        "sampling": header["sampling"],
        "num_examples": result.n,
        "rollouts_per_example": result.r,
        "seed": sampling.seed,
        "reward_mean": result.mean,
        "reward_std": result.std,
        "reward_weights": result.weights,
        "per_function": result.per_function,
        "per_function_std": result.per_function_std,
        "per_language": result.per_language,
        "pass_at_k": result.pass_at_k,
        "rewards": result.rewards,
        "time_s": seconds,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "results_file": RESULTS_FILE,
    }
    write_json_atomic(result.metadata_path, metadata)
    print(
        format_report(result, _printable_header(header), show_examples=bool(_get(ev, "show_examples", True)))
    )
    sys.stdout.flush()
    return result


def _record(env: Environment, rubric: Rubric, extras: Sequence[RewardFunc], rollout: Any) -> dict[str, Any]:
    """One results.jsonl line: the episode, its ground truth, every function's score and the total."""
    row: Row = rollout.row
    scores = score_rollout(env, extras, row, rollout.completion, rollout.state)
    return {
        "example_id": row.id,
        "rollout_index": rollout.rollout_index,
        "language": row.language,
        "prompt": row.prompt,
        "completion": rollout.completion,
        "messages": rollout.messages,
        "info": row.info,
        **{name: scores[name] for name in rubric.names},
        "reward": rubric.total(scores),
        "num_turns": rollout.num_turns,
        "truncated": bool(rollout.truncated),
    }


def summarize(
    records: Sequence[dict[str, Any]],
    rubric: Rubric,
    label: str,
    r: int,
    results_path: Path,
    metadata_path: Path,
    seconds: float,
) -> EvalResult:
    """Statistics of scored rollouts (records in row-major order: example, then rollout index)."""
    if not records or len(records) % r:
        raise ValueError(f"expected a multiple of r={r} scored rollouts, got {len(records)}")
    totals = [float(rec["reward"]) for rec in records]
    mean, std = mean_std(totals)
    per_function, per_function_std = {}, {}
    for name in rubric.names:
        per_function[name], per_function_std[name] = mean_std([float(rec[name]) for rec in records])

    by_language: dict[str, list[float]] = {}
    examples_by_language: dict[str, set[Any]] = {}
    for rec in records:
        by_language.setdefault(rec["language"], []).append(float(rec["reward"]))
        examples_by_language.setdefault(rec["language"], set()).add(rec["example_id"])
    per_language = {}
    for code, values in by_language.items():
        m, s = mean_std(values)
        per_language[code] = {
            "mean": m,
            "std": s,
            "count": len(values),
            "examples": len(examples_by_language[code]),
        }

    rewards = [totals[i : i + r] for i in range(0, len(totals), r)]
    pass_k = None
    # pass@k only for pass/fail tasks: every function declared binary (a continuous reward that
    # happens to be all 0 in this run is not a pass rate)
    declared = all(getattr(f, "binary", False) for f in rubric.funcs)
    if declared and all(is_binary(float(rec[name]) for rec in records) for name in rubric.names):
        # a rollout passes when every function that counts (non-zero weight) scored 1
        counted = [f.name for f in rubric.funcs if f.weight != 0] or rubric.names
        passed = [all(rec[name] == 1.0 for name in counted) for rec in records]
        correct = [sum(passed[i : i + r]) for i in range(0, len(passed), r)]
        pass_k = {k: statistics.fmean(pass_at_k(r, c, k) for c in correct) for k in range(1, r + 1)}

    return EvalResult(
        label=label,
        n=len(rewards),
        r=r,
        mean=mean,
        std=std,
        per_function=per_function,
        per_function_std=per_function_std,
        per_language=per_language,
        pass_at_k=pass_k,
        rewards=rewards,
        results_path=Path(results_path),
        metadata_path=Path(metadata_path),
        seconds=seconds,
        weights={f.name: f.weight for f in rubric.funcs},
        example_ids=[records[i]["example_id"] for i in range(0, len(records), r)],
    )


def _get(node: Any, key: str, default: Any = None) -> Any:
    if node is None:
        return default
    if hasattr(node, "get"):
        value = node.get(key, default)
    else:
        value = getattr(node, key, default)
    return default if value is None else value


def _header(
    cfg: Any, env: Environment, n: int, r: int, sampling: Any, max_completion_tokens: int
) -> dict[str, Any]:
    gen = cfg.generation
    backend = str(_get(gen, "backend", "hf"))
    model = {
        "name": _get(cfg.model, "name"),
        "path": _get(cfg.model, "path"),
        "source": _get(cfg.model, "source"),
    }
    if backend != "hf":
        # the endpoint serves its own model: record what it was asked for and where
        model["served_model"] = _get(gen, "model")
    return {
        "env": env.name,
        "env_class": f"{type(env).__module__}.{type(env).__qualname__}",
        "model": model,
        "generation_backend": backend,
        "base_url": _get(gen, "base_url"),
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens_per_turn": sampling.max_tokens_per_turn,
            "max_completion_tokens": max_completion_tokens,
            "seed": sampling.seed,
        },
        "n": n,
        "r": r,
    }


def _printable_header(header: dict[str, Any]) -> dict[str, str]:
    model = header["model"]
    name = model.get("served_model") or model.get("path") or model.get("name")
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


def _env_args(cfg: Any) -> dict[str, Any]:
    """The env config group as plain data, minus `_target_` (the class is recorded as `env_class`)."""
    env_cfg = cfg.get("env") if hasattr(cfg, "get") else getattr(cfg, "env", None)
    if env_cfg is None:
        return {}
    from omegaconf import OmegaConf

    args = OmegaConf.to_container(env_cfg, resolve=True) if OmegaConf.is_config(env_cfg) else dict(env_cfg)
    args.pop("_target_", None)
    return args
