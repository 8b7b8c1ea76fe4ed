"""The stages of a run, in the order `settings.stages` lists them: reward_model, sft, eval, train.

An `eval` before any `train` stage is the baseline, one after it the final evaluation; a run
without a train stage labels its evaluation `eval`. With trainer.keep_best, the final evaluation
also evaluates the best checkpoint by validation reward (label `best`) when it is not the last.
Everything a stage writes goes under the run's folder (grpo/run/layout.py), and the tracker logs
it. Stages receive checked settings (grpo/cli/checks.py ran in the preflight), and what a run
needs once is built once and handed to them in a `StageContext`: the environment, the tracker,
the resume plan (grpo/run/resume.py) and the run's rewards (grpo.rewards.RunRewards, built after
the reward_model stage, so a learned reward model is loaded once per run). They hand their
results on in a `RunResults`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.config import GrpoConfig
from grpo.run.checkpoints import checkpoint_step
from grpo.run.distributed import is_main
from grpo.run.interrupt import enter_stage
from grpo.run.layout import RunLayout
from grpo.run.resume import ResumePlan

if TYPE_CHECKING:
    from grpo.evaluation.summary import EvalResult, PairedChange
    from grpo.reward_model.train import RMResult
    from grpo.rewards import RunRewards
    from grpo.sft.train import SftResult
    from grpo.tracking.base import Tracker
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
    # a resumed run's finished reward model, reused instead of training one
    reward_model_dir: Path | None = None
    # a resumed run's finished SFT model, the policy of the later stages
    sft_dir: Path | None = None
    # the run's MLflow run (None with tracking=none, or before the tracker started)
    mlflow_run_id: str | None = None

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


@dataclass
class StageContext:
    """What every stage of one run is handed (see the module docstring)."""

    settings: GrpoConfig
    env: Any
    paths: RunLayout
    tracker: Tracker
    # the resume plan of resume=<dir>, None for a fresh run
    resume: ResumePlan | None
    results: RunResults = field(default_factory=RunResults)
    _rewards: RunRewards | None = None

    @property
    def rewards(self) -> RunRewards:
        """The run's rewards, built when a stage first needs them: after the reward_model stage
        when it comes first, so a learned RM is loaded once."""
        if self._rewards is None:
            from grpo.rewards import build_rewards

            checkpoints = self.results.reward_model_checkpoints(self.settings)
            self._rewards = build_rewards(self.settings, self.env, checkpoints)
        return self._rewards

    def new_reward_model(self) -> None:
        """A reward_model stage is running: rewards built before it do not score with its RM."""
        self._rewards = None

    def policy(self) -> Policy:
        """The policy in memory (loaded now for hf generation when no stage has it yet); an empty
        Policy for a served model (generation=openai / vllm_server hold their own)."""
        if self.results.policy is None and self.settings.generation.backend == "hf":
            from grpo.models import load_policy

            self.results.policy = Policy(*load_policy(self.settings.model))
        return self.results.policy or Policy(None, None)


def eval_label(settings: GrpoConfig, trained: bool) -> str:
    if "train" not in settings.stages:
        return "eval"
    return "final" if trained else "baseline"


def _checkpoint_eval_command(settings: GrpoConfig, checkpoint: Path | None) -> str:
    """The command that evaluates a saved GRPO checkpoint of this run in one process: the run's env
    and languages, the checkpoint loaded as a pretrained model dir (what full fine-tuning saves)."""
    import shlex

    from grpo.languages import language_override

    language = settings.language
    languages = list(language.members or []) if language.code == "mix" else [language.code]
    env_cfg = settings.env if isinstance(settings.env, dict) else vars(settings.env)
    # a verifiers environment is the verifiers option with its id
    env = f"+env={env_cfg['name']}" if env_cfg.get("name") else f"+env=verifiers env.id={env_cfg.get('id')}"
    model = f"model.source=pretrained model.path={shlex.quote(str(checkpoint))}"
    return f"python -m grpo {env} {language_override(languages)} stages=[eval] {model}"


def run_stages(
    settings: GrpoConfig, run_dir: str | Path | None = None, resume: ResumePlan | None = None
) -> RunResults:
    """Run every stage; return what they produced (`objective`: the last evaluation's mean reward,
    the sweep objective). `run_dir`: the run's folder (None: Hydra's job dir). `resume`: the run's
    resume plan (None: read here when settings.resume is set)."""
    from grpo.cli.checks import check_built_env
    from grpo.envs import build_env
    from grpo.tracking import make_tracker
    from grpo.trl_adapter.logs import quiet_library_notices

    quiet_library_notices()  # before any model loads: no weight-loading bars

    run_dir = Path(run_dir) if run_dir is not None else _job_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    if resume is None and settings.resume:
        resume = ResumePlan.read(settings.resume)
    env = build_env(settings.env, settings.language)
    check_built_env(settings, env)
    run = StageContext(settings, env, RunLayout(run_dir), make_tracker(settings, run_dir), resume)
    results = run.results
    with run.tracker:
        run.tracker.log_config(settings)
        for stage in settings.stages:
            enter_stage(stage)
            if stage == "eval" and _baseline_done(run):
                # the run being resumed already logged its baseline (to the same MLflow run)
                print("resume: skipping the baseline evaluation (the resumed run has it)")
            elif stage == "eval" and not is_main():
                pass  # evaluations run on rank 0 only (grpo/run/distributed.py)
            elif stage == "eval" and results.train is not None and results.train.sharded:
                print(
                    "eval: skipped after ZeRO-3 / FSDP training (each process holds a shard): evaluate the "
                    f"checkpoint in one process, {_checkpoint_eval_command(settings, results.train.checkpoint_dir)}"
                )
            elif stage == "eval":
                _eval_stage(run)
            elif stage == "train":
                _train_stage(run)
            elif stage == "reward_model":
                _reward_model_stage(run)
            elif stage == "sft":
                _sft_stage(run)
        if settings.tracking.log_model or settings.tracking.register_as:
            _log_models(run)
        change = paired_change_of(results)
        if change is not None:
            run.tracker.log_metrics({"eval/gain": change.mean, "eval/gain_se": change.se}, 0)
        run.tracker.finish_run(results.objective)
        results.mlflow_run_id = getattr(run.tracker, "run_id", None)
    if change is not None:
        evals = results.evals
        line = f"reward: baseline {evals['baseline'].mean:.4f} -> final {evals['final'].mean:.4f}"
        if "best" in evals:
            line += f"; best checkpoint (step {results.train.best.global_step}) {evals['best'].mean:.4f}"
        print(line)
        print(change.verdict())
    for line in run.tracker.where():  # last: the run page, not scrolled away by the evaluations
        print(line)
    return results


def paired_change_of(results: RunResults) -> PairedChange | None:
    """final - baseline, paired by example (both evaluate the same rows with the same seeds)."""
    from grpo.evaluation.summary import paired_change

    if "baseline" not in results.evals or "final" not in results.evals:
        return None
    return paired_change(results.evals["baseline"], results.evals["final"])


def _job_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _baseline_done(run: StageContext) -> bool:
    """A resumed run whose chain has already evaluated the baseline."""
    trained = run.results.train is not None
    return (
        run.resume is not None
        and eval_label(run.settings, trained) == "baseline"
        and ("baseline" in run.resume.finished)
    )


def _eval_stage(run: StageContext) -> None:
    from grpo.evaluation.evaluator import evaluate
    from grpo.evaluation.setup import EvalSetup
    from grpo.generation import make_backend

    settings, results = run.settings, run.results
    policy = run.policy()
    backend = make_backend(settings.generation, policy.model, policy.tokenizer, settings.model)
    label = eval_label(settings, results.train is not None)
    result = evaluate(
        EvalSetup.of(_scored(settings, results)),
        run.env,
        backend,
        run.paths.eval(label),
        label=label,
        extra_reward_funcs=run.rewards.extra,
        step=results.step,
        score_funcs=run.rewards.learned,
        # the per-example table once: a baseline that a final evaluation will follow leaves it out
        show_examples=None if label != "baseline" or "train" not in settings.stages else False,
    )
    run.tracker.log_eval(label, result, step=results.step)
    results.evals[label] = result
    results.objective = result.mean
    _push_dataset(settings, result)
    best = results.train.best if results.train is not None else None
    if label == "final" and best is not None:
        if best.global_step != results.step:
            _eval_best(run)
        else:
            print(
                f"best checkpoint: the last one (step {best.global_step}, val reward {best.val_reward:.4f})"
            )


def _scored(settings: GrpoConfig, results: RunResults) -> GrpoConfig:
    """The settings whose model the evaluation's header and metadata name: the starting weights
    before training (the SFT model after an sft stage); after GRPO the trained policy, by its
    checkpoint when that holds the last step, else by its step."""
    train = results.train
    if train is None:
        sft = results.sft.path if results.sft is not None else results.sft_dir
        if sft is None:
            return settings
        return dataclasses.replace(settings, model=dataclasses.replace(settings.model, path=str(sft)))
    checkpoint = train.checkpoint_dir
    if checkpoint is not None and checkpoint_step(checkpoint) == train.global_step:
        model = dataclasses.replace(settings.model, path=str(checkpoint))
    else:
        name = f"the trained policy (step {train.global_step}, from {settings.model.path or settings.model.name})"
        model = dataclasses.replace(settings.model, path=None, name=name)
    return dataclasses.replace(settings, model=model)


def _eval_best(run: StageContext) -> None:
    """Evaluate the best checkpoint (by validation reward), loaded from disk, as label `best`: the
    same weights a later `model.path=<run> model.checkpoint=best` evaluates."""
    from grpo.evaluation.evaluator import evaluate
    from grpo.evaluation.setup import EvalSetup
    from grpo.generation import make_backend
    from grpo.models import load_policy
    from grpo.run.trained import checkpoint_model

    settings, results = run.settings, run.results
    best = results.train.best
    if settings.generation.backend != "hf":
        print(
            f"best checkpoint: step {best.global_step} (val reward {best.val_reward:.4f}), {best.path}; not "
            f"evaluated here: generation={settings.generation.backend} serves the trained weights"
        )
        return
    # loaded from disk as `model.path=<run> model.checkpoint=best` loads it, never copied from the
    # trained policy: TRL patches its forward with a closure over the original model, so a deep
    # copy would still run the final weights (in train mode)
    sft_dir = results.sft.path if results.sft is not None else results.sft_dir
    device = next(results.train.model.parameters()).device
    model, tokenizer = load_policy(checkpoint_model(settings.model, best.path, sft_dir), device=device)
    backend = make_backend(settings.generation, model, tokenizer, settings.model)
    # the evaluation's header and metadata name the checkpoint
    setup = EvalSetup.of(settings)
    at_best = dataclasses.replace(setup, model=dataclasses.replace(setup.model, path=str(best.path)))
    result = evaluate(
        at_best,
        run.env,
        backend,
        run.paths.eval("best"),
        label="best",
        extra_reward_funcs=run.rewards.extra,
        step=best.global_step,
        score_funcs=run.rewards.learned,
        show_examples=False,  # the final evaluation printed the run's one per-example table
    )
    run.tracker.log_eval("best", result, step=best.global_step)  # the step its weights are from
    results.evals["best"] = result
    _push_dataset(settings, result)


def _log_models(run: StageContext) -> None:
    """tracking.log_model: the policy this run trained (GRPO, else SFT) and the reward model it
    trained, as MLflow models of the run."""
    settings, results = run.settings, run.results
    if results.train is not None and results.train.sharded:
        print(
            "mlflow: the policy is not logged after ZeRO-3 / FSDP training (each process holds a shard); "
            f"its checkpoint is {results.train.checkpoint_dir}"
        )
    elif (results.train is not None or results.sft is not None) and results.policy is not None:
        # where the weights training started from live: a LoRA adapter's base is referenced there
        start = str(results.sft.path) if results.sft is not None else settings.model.path
        run.tracker.log_policy(results.policy.model, results.policy.tokenizer, start)
    if results.reward_model is not None:
        run.tracker.log_reward_model(results.reward_model.path)
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


def _train_stage(run: StageContext) -> None:
    from grpo.train.trainer import train

    policy = run.results.policy or Policy(None, None)
    result = train(
        run.settings,
        run.env,
        run.paths.root,
        model=policy.model,
        tokenizer=policy.tokenizer,
        rewards=run.rewards,
        tracker=run.tracker,
        resume=run.resume,
    )
    run.results.train = result
    run.results.policy = Policy(result.model, result.tokenizer)


def _reward_model_stage(run: StageContext) -> None:
    from grpo.reward_model.train import train_reward_model

    run.new_reward_model()
    finished = run.resume.finished.get("reward_model") if run.resume is not None else None
    if finished is not None:
        print(f"resume: the reward model of {finished.parent} is trained; using {finished}")
        run.results.reward_model_dir = finished
        return
    run.results.reward_model = train_reward_model(
        run.settings,
        run.paths.reward_model,
        tracker=run.tracker,
        resume_from=run.resume.checkpoints.get("reward_model") if run.resume is not None else None,
    )


def _sft_stage(run: StageContext) -> None:
    from grpo.sft.train import train_sft

    settings = run.settings
    finished = run.resume.finished.get("sft") if run.resume is not None else None
    if finished is not None:
        from grpo.models import load_policy

        print(f"resume: the SFT of {finished.parent} is done; the policy is {finished}")
        run.results.sft_dir = finished
        sft_model = dataclasses.replace(
            settings.model, source="pretrained", path=str(finished), tokenizer=None
        )
        run.results.policy = Policy(*load_policy(sft_model))
        return
    policy = run.results.policy or Policy(None, None)
    result = train_sft(
        settings,
        run.env,
        run.paths.sft,
        model=policy.model,
        tokenizer=policy.tokenizer,
        tracker=run.tracker,
        resume_from=run.resume.checkpoints.get("sft") if run.resume is not None else None,
    )
    run.results.sft = result
    run.results.policy = Policy(result.model, result.tokenizer)
