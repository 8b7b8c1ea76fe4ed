"""The stages of a run, in the order `settings.stages` lists them: reward_model, sft, eval, train.

An `eval` before any `train` stage is the baseline, one after it the final evaluation; a run
without a train stage labels its evaluation `eval`. With trainer.keep_best, the final evaluation
also evaluates the best checkpoint by validation reward (label `best`) when it is not the last.
Everything a stage writes goes under the run's output dir (Hydra's job dir), and the tracker logs
it. Stages receive checked settings (grpo.validation ran in the preflight) and hand their results
on in a `RunResults`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.config import GrpoConfig
from grpo.run.distributed import is_main
from grpo.run.interrupt import enter_stage

# the reward_model stage's output dir under the run dir
RM_DIR = "reward_model"

if TYPE_CHECKING:
    from grpo.evaluation.evaluator import EvalResult
    from grpo.reward_model.train import RMResult
    from grpo.sft.train import SftResult
    from grpo.train.trainer import TrainResult


@dataclass
class Policy:
    """The policy in memory: loaded by the first stage that needs it, then the trained one."""

    model: Any
    tokenizer: Any


@dataclass
class RunResults:
    """What the stages of one run have produced so far."""

    policy: Policy | None = None
    train: TrainResult | None = None
    reward_model: RMResult | None = None
    # the supervised warm start; its model is the policy of the later stages
    sft: SftResult | None = None
    # evaluation label (baseline, final, best, eval) -> its result
    evals: dict[str, EvalResult] = field(default_factory=dict)
    # the last evaluation's mean reward: what `python -m grpo` returns to a sweeper
    objective: float | None = None
    # a resumed run's finished reward model, reused instead of training one (grpo/resume.py)
    reward_model_dir: Path | None = None

    @property
    def step(self) -> int:
        """The global training step reached (0 before training)."""
        return self.train.global_step if self.train is not None else 0

    def reward_model_checkpoints(self, settings: GrpoConfig) -> list[str]:
        """The RM dirs GRPO scores with: reward_model.checkpoints, else this run's fresh RM."""
        if settings.reward_model.checkpoints:
            return list(settings.reward_model.checkpoints)
        trained = self.reward_model.path if self.reward_model is not None else None
        directory = self.reward_model_dir or trained
        return [str(Path(directory).resolve())] if directory is not None else []


def run_dir_of_job() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def eval_label(settings: GrpoConfig, trained: bool) -> str:
    if "train" not in settings.stages:
        return "eval"
    return "final" if trained else "baseline"


def run_stages(settings: GrpoConfig, run_dir: Path | None = None) -> float | None:
    """Run every stage; return the last evaluation's mean reward (the sweep objective)."""
    from grpo.envs import build_env
    from grpo.tracking import make_tracker

    run_dir = run_dir or run_dir_of_job()
    run_dir.mkdir(parents=True, exist_ok=True)
    env = build_env(settings.env, settings.language)
    tracker = make_tracker(settings, run_dir)
    results = RunResults()
    with tracker:
        tracker.log_config(settings)
        for stage in settings.stages:
            enter_stage(stage)
            if stage == "eval" and _baseline_done(settings, results):
                # the run being resumed already logged its baseline (to the same MLflow run)
                print("resume: skipping the baseline evaluation (the resumed run has it)")
            elif stage == "eval" and not is_main():
                pass  # evaluations run on rank 0 only (grpo/distributed.py)
            elif stage == "eval" and results.train is not None and results.train.sharded:
                print(
                    "eval: skipped after ZeRO-3 / FSDP training (each process holds a shard): evaluate the "
                    f"checkpoint in one process, python -m grpo stages=[eval] model.path={results.train.checkpoint_dir}"
                )
            elif stage == "eval":
                _eval_stage(settings, env, run_dir, tracker, results)
            elif stage == "train":
                _train_stage(settings, env, run_dir, tracker, results)
            elif stage == "reward_model":
                _reward_model_stage(settings, run_dir, tracker, results)
            elif stage == "sft":
                _sft_stage(settings, env, run_dir, tracker, results)
        if settings.tracking.log_model or settings.tracking.register_as:
            _log_models(settings, tracker, results)
        tracker.finish_run(results.objective)
    means = {label: result.mean for label, result in results.evals.items()}
    if "baseline" in means and "final" in means:
        change = means["final"] - means["baseline"]
        line = f"reward: baseline {means['baseline']:.4f} -> final {means['final']:.4f} ({change:+.4f})"
        if "best" in means:
            line += f"; best checkpoint (step {results.train.best.global_step}) {means['best']:.4f}"
        print(line)
    return results.objective


def _baseline_done(settings: GrpoConfig, results: RunResults) -> bool:
    """A resumed run whose chain has already evaluated the baseline (grpo/resume.py)."""
    if not settings.resume or eval_label(settings, results.train is not None) != "baseline":
        return False
    from grpo.run.resume import done_in_chain

    return done_in_chain(settings.resume, "eval_baseline/results.jsonl") is not None


def _eval_stage(settings: GrpoConfig, env: Any, run_dir: Path, tracker: Any, results: RunResults) -> None:
    from grpo.evaluation.evaluator import evaluate
    from grpo.generation import make_backend
    from grpo.rewards import extra_reward_funcs, score_funcs

    if results.policy is None and settings.generation.backend == "hf":
        from grpo.models import load_policy

        results.policy = Policy(*load_policy(settings.model))
    policy = results.policy or Policy(None, None)
    backend = make_backend(settings.generation, policy.model, policy.tokenizer, settings.model)
    label = eval_label(settings, results.train is not None)
    scores = score_funcs(settings, results.reward_model_checkpoints(settings))
    result = evaluate(
        settings,
        env,
        backend,
        run_dir / f"eval_{label}",
        label=label,
        extra_reward_funcs=extra_reward_funcs(settings, env),
        step=results.step,
        score_funcs=scores,
    )
    tracker.log_eval(label, result, step=results.step)
    results.evals[label] = result
    results.objective = result.mean
    _push_dataset(settings, result)
    best = results.train.best if results.train is not None else None
    if label == "final" and best is not None:
        if best.global_step != results.step:
            _eval_best(settings, env, run_dir, tracker, results, scores)
        else:
            print(
                f"best checkpoint: the last one (step {best.global_step}, val reward {best.val_reward:.4f})"
            )


def _eval_best(
    settings: GrpoConfig, env: Any, run_dir: Path, tracker: Any, results: RunResults, scores: list[Any]
) -> None:
    """Evaluate the best checkpoint (by validation reward), loaded from disk, as label `best`."""
    from grpo.evaluation.evaluator import evaluate
    from grpo.generation import make_backend
    from grpo.rewards import extra_reward_funcs
    from grpo.train.trainer import checkpoint_policy

    best = results.train.best
    if settings.generation.backend != "hf":
        print(
            f"best checkpoint: step {best.global_step} (val reward {best.val_reward:.4f}), {best.path}; not "
            f"evaluated here: generation={settings.generation.backend} serves the trained weights"
        )
        return
    model, tokenizer = checkpoint_policy(results.train, best.path, settings.model)
    backend = make_backend(settings.generation, model, tokenizer, settings.model)
    # the evaluation's header and metadata name the checkpoint
    at_best = dataclasses.replace(settings, model=dataclasses.replace(settings.model, path=str(best.path)))
    result = evaluate(
        at_best,
        env,
        backend,
        run_dir / "eval_best",
        label="best",
        extra_reward_funcs=extra_reward_funcs(settings, env),
        step=best.global_step,
        score_funcs=scores,
    )
    tracker.log_eval("best", result, step=results.step)
    results.evals["best"] = result
    _push_dataset(settings, result)


def _log_models(settings: GrpoConfig, tracker: Any, results: RunResults) -> None:
    """tracking.log_model: the policy this run trained (GRPO, else SFT) and the reward model it
    trained, as MLflow models of the run."""
    if results.train is not None and results.train.sharded:
        print(
            "mlflow: the policy is not logged after ZeRO-3 / FSDP training (each process holds a shard); "
            f"its checkpoint is {results.train.checkpoint_dir}"
        )
    elif (results.train is not None or results.sft is not None) and results.policy is not None:
        # where the weights training started from live: a LoRA adapter's base is referenced there
        start = str(results.sft.path) if results.sft is not None else settings.model.path
        tracker.log_policy(results.policy.model, results.policy.tokenizer, start)
    if results.reward_model is not None:
        tracker.log_reward_model(results.reward_model.path)
    if results.train is None and results.sft is None and results.reward_model is None:
        print(
            "mlflow: tracking.log_model: this run trained no model (stages without sft, train or reward_model)"
        )


def _push_dataset(settings: GrpoConfig, result: EvalResult) -> None:
    """eval.push_to_hub: the saved evaluation dataset as split <label> of the Hub repo (after it
    is written and logged: a failed push is one error line and loses nothing)."""
    ev = settings.eval
    if ev.push_to_hub is None or result.dataset_path is None:
        return
    from grpo.evaluation.dataset import push_eval_dataset

    url = push_eval_dataset(
        result.dataset_path, ev.push_to_hub, result.label, ev.hub_private, ev.hub_token_env
    )
    print(f"dataset: pushed the {result.label} evaluation to {url} (split {result.label})")


def _train_stage(settings: GrpoConfig, env: Any, run_dir: Path, tracker: Any, results: RunResults) -> None:
    from grpo.train.trainer import train

    policy = results.policy or Policy(None, None)
    result = train(
        settings,
        env,
        run_dir,
        model=policy.model,
        tokenizer=policy.tokenizer,
        callbacks=[tracker.trainer_callback()],
        reward_model_checkpoints=results.reward_model_checkpoints(settings),
        log_metrics=tracker.log_metrics,
    )
    results.train = result
    results.policy = Policy(result.model, result.tokenizer)


def _reward_model_stage(settings: GrpoConfig, run_dir: Path, tracker: Any, results: RunResults) -> None:
    from grpo.reward_model import META_FILE
    from grpo.reward_model.train import train_reward_model
    from grpo.run.resume import checkpoint_in_chain, done_in_chain

    resume_from = None
    if settings.resume:
        done = done_in_chain(settings.resume, f"{RM_DIR}/{META_FILE}")
        if done is not None:
            print(f"resume: the reward model of {done.parent.parent} is trained; using {done.parent}")
            results.reward_model_dir = done.parent
            return
        resume_from = checkpoint_in_chain(settings.resume, "reward_model")
    results.reward_model = train_reward_model(
        settings, run_dir / RM_DIR, tracker=tracker, resume_from=resume_from
    )


def _sft_stage(settings: GrpoConfig, env: Any, run_dir: Path, tracker: Any, results: RunResults) -> None:
    from grpo.run.resume import checkpoint_in_chain, done_in_chain
    from grpo.sft import META_FILE, SFT_DIR
    from grpo.sft.train import train_sft

    resume_from = None
    if settings.resume:
        done = done_in_chain(settings.resume, f"{SFT_DIR}/{META_FILE}")
        if done is not None:
            from grpo.models import load_policy

            print(f"resume: the SFT of {done.parent.parent} is done; the policy is {done.parent}")
            sft_model = dataclasses.replace(
                settings.model, source="pretrained", path=str(done.parent), tokenizer=None
            )
            results.policy = Policy(*load_policy(sft_model))
            return
        resume_from = checkpoint_in_chain(settings.resume, "sft")
    policy = results.policy or Policy(None, None)
    result = train_sft(
        settings,
        env,
        run_dir / SFT_DIR,
        model=policy.model,
        tokenizer=policy.tokenizer,
        tracker=tracker,
        resume_from=resume_from,
    )
    results.sft = result
    results.policy = Policy(result.model, result.tokenizer)
