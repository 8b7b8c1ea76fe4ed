"""The stages of a run, in the order `cfg.stages` lists them: reward_model, eval, train.

An `eval` before any `train` stage is the baseline, one after it the final evaluation; a run
without a train stage labels its evaluation `eval`. Everything a stage writes goes under the
run's output dir (Hydra's job dir), and the tracker logs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig


def run_dir_of_job() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def eval_label(cfg: DictConfig, trained: bool) -> str:
    if "train" not in cfg.stages:
        return "eval"
    return "final" if trained else "baseline"


def run_stages(cfg: DictConfig, run_dir: Path | None = None) -> float | None:
    """Run every stage; return the last evaluation's mean reward (the sweep objective)."""
    from grpo.config import validate
    from grpo.envs import build_env
    from grpo.tracking import make_tracker

    validate(cfg)  # again per job: a sweep's preflight only checked its first values
    run_dir = run_dir or run_dir_of_job()
    run_dir.mkdir(parents=True, exist_ok=True)
    env = build_env(cfg.env)
    tracker = make_tracker(cfg, run_dir)
    state: dict[str, Any] = {"model": None, "tokenizer": None, "trained": False, "step": 0, "objective": None}
    state["eval_means"] = {}
    with tracker:
        tracker.log_config(cfg)
        for stage in cfg.stages:
            if stage == "eval" and cfg.resume and "train" in cfg.stages and not state["trained"]:
                # the run being resumed already logged its baseline (to the same MLflow run)
                print("resume: skipping the baseline evaluation (the resumed run has it)")
            elif stage == "eval":
                _eval_stage(cfg, env, run_dir, tracker, state)
            elif stage == "train":
                _train_stage(cfg, env, run_dir, tracker, state)
            elif stage == "reward_model":
                _reward_model_stage(cfg, run_dir, tracker)
        tracker.finish_run(state["objective"])
    means = state["eval_means"]
    if "baseline" in means and "final" in means:
        change = means["final"] - means["baseline"]
        print(f"reward: baseline {means['baseline']:.4f} -> final {means['final']:.4f} ({change:+.4f})")
    return state["objective"]


def _eval_stage(cfg: DictConfig, env, run_dir: Path, tracker, state: dict[str, Any]) -> None:
    from grpo.evaluate import evaluate
    from grpo.generation import make_backend
    from grpo.rewards import extra_reward_funcs

    if state["model"] is None and cfg.generation.backend == "hf":
        from grpo.models import load_policy

        state["model"], state["tokenizer"] = load_policy(cfg.model)
    backend = make_backend(cfg.generation, state["model"], state["tokenizer"], cfg.model)
    label = eval_label(cfg, state["trained"])
    result = evaluate(
        cfg,
        env,
        backend,
        run_dir / f"eval_{label}",
        label=label,
        extra_reward_funcs=extra_reward_funcs(cfg, env),
        step=state["step"],
    )
    tracker.log_eval(label, result, step=state["step"])
    state["objective"] = result.mean
    state["eval_means"][label] = result.mean


def _train_stage(cfg: DictConfig, env, run_dir: Path, tracker, state: dict[str, Any]) -> None:
    from grpo.train import train

    result = train(
        cfg,
        env,
        run_dir,
        model=state["model"],
        tokenizer=state["tokenizer"],
        callbacks=[tracker.trainer_callback()],
    )
    state.update(model=result.model, tokenizer=result.tokenizer, trained=True, step=result.global_step)


def _reward_model_stage(cfg: DictConfig, run_dir: Path, tracker) -> None:
    from grpo.reward_model.train import train_reward_model

    train_reward_model(cfg, run_dir / "reward_model", tracker=tracker)
