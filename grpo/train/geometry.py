"""The batch geometry of GRPO training, in grpo's words, and TRL's numbers for it.

Three numbers decide what one optimizer step trains and what it holds in memory:

- completions per step (`trainer.completions_per_step`, all processes together): the generation
  batch, prompts per step x `trainer.num_generations`, sampled with one set of weights and trained
  on in one optimizer step; what a recipe specifies (the Hub's alphabet-sort: 8 prompts x 8 = 64);
- the micro-batch (`trainer.per_device_batch_completions`, per process): the completions one
  forward/backward holds, what the device's memory allows;
- micro-batches per step (`trainer.gradient_accumulation_steps`): follows from the two, or, when
  `completions_per_step` is null, says how many micro-batches make a step.

TRL's names: per_device_train_batch_size = the micro-batch, gradient_accumulation_steps = the
micro-batches per step, and one generation per optimizer step (steps_per_generation = the
accumulation, TRL's default), so TRL's generation_batch_size is the completions per step.

Light: no torch; `step_geometry` raises a one-line UserError on numbers that do not fit together.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo.config import TrainerConfig
from grpo.errors import reject
from grpo.run.distributed import world_size


@dataclass(frozen=True)
class StepGeometry:
    """What one optimizer step of GRPO trains, and in what pieces."""

    # completions per optimizer step, all processes together (the generation batch)
    completions_per_step: int
    # completions per forward/backward, per process
    micro_batch: int
    # micro-batches per optimizer step, per process
    accumulation: int
    processes: int
    num_generations: int

    @property
    def prompts_per_step(self) -> int:
        return self.completions_per_step // self.num_generations

    @property
    def local_completions_per_step(self) -> int:
        """The completions one process generates and trains on per step."""
        return self.micro_batch * self.accumulation

    def describe(self) -> str:
        """`64 completions per step (8 prompts x 8) in 8 micro-batches of 8`, said as a run says it."""
        where = f" on each of {self.processes} processes" if self.processes > 1 else ""
        return (
            f"{self.completions_per_step} completions per step ({self.prompts_per_step} prompts x "
            f"{self.num_generations}) in {self.accumulation} micro-batch(es) of {self.micro_batch}{where}"
        )


def step_geometry(t: TrainerConfig, processes: int | None = None) -> StepGeometry:
    """The geometry of `t` on `processes` (None: this launch's world size). UserError when the
    numbers do not fit together (a group split over two micro-batches, a step that is not a whole
    number of micro-batches, an accumulation that disagrees with completions_per_step)."""
    n = world_size() if processes is None else int(processes)
    micro, group = int(t.per_device_batch_completions), int(t.num_generations)
    if micro < 1 or micro % group:
        lower = max(group, micro // group * group)
        reject(
            f"trainer.per_device_batch_completions={micro} is not a multiple of trainer.num_generations="
            f"{group} (a prompt's group must fit in one micro-batch): set it to {lower} or {lower + group}"
        )
    accumulation = t.gradient_accumulation_steps
    if accumulation is not None and accumulation < 1:
        reject(
            f"trainer.gradient_accumulation_steps={accumulation} must be >= 1, or null (from completions_per_step)"
        )
    per_round = micro * n  # completions of one micro-batch on every process
    where = f" x {n} processes" if n > 1 else ""
    if t.completions_per_step is None:
        return StepGeometry(per_round * (accumulation or 1), micro, accumulation or 1, n, group)
    total = int(t.completions_per_step)
    if total < per_round or total % per_round:
        lower = max(per_round, total // per_round * per_round)
        reject(
            f"trainer.completions_per_step={total} is not a whole number of micro-batches of "
            f"trainer.per_device_batch_completions={micro}{where}: set it to {lower} or {lower + per_round}, "
            "or change the micro-batch"
        )
    derived = total // per_round
    if accumulation is not None and accumulation != derived:
        reject(
            f"trainer.gradient_accumulation_steps={accumulation} disagrees with trainer.completions_per_step="
            f"{total} (= {derived} micro-batches of {micro}{where}): set one of them, the other follows "
            "(gradient_accumulation_steps=null)"
        )
    return StepGeometry(total, micro, derived, n, group)
