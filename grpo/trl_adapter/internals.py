"""EVERY use grpo makes of TRL's private or undocumented internals, each behind one small named
function, so that a TRL upgrade that moves one breaks here, and in tests/test_trl_adapter.py
(which pins each of them against the installed TRL and names what moved), not deep in a stage.
Read against trl 1.16 (trl/trainer/grpo_trainer.py, trl/generation/vllm_generation.py).

GRPOTrainer attributes:
- `_logs`, with `reward_func_names` and `reward_weights`: its record of the last generation batch
  (prompt, completion, rewards, advantages, extra columns), kept for its completions printout;
  grpo's completions table reads it (`completions_record`);
- `_log_metric`: its metric log, averaged over the processes and logged with its own metrics at the
  step (`metric_logger`; the rollout function's monitors go through it);
- `_metrics["train"]`: name -> the values recorded since its last log (one per generation batch for
  the reward, the monitors and `rewards/...`; one per micro-batch for `policy_loss` and `kl`), which
  it averages and clears at each log: read per optimizer step by the collapse watch
  (`StepMetrics`), whatever trainer.logging_steps is;
- `compute_loss`: wrapped on the instance (`record_losses`) so that each micro-batch's training loss
  is kept for the collapse watch (TRL records its policy loss only with an entropy bonus);
- `vllm_generation` (TRL's VLLMGeneration) and `_last_loaded_step`: the vLLM engine and the step
  its weights were last synced at (`vllm_engine`, `sync_vllm_weights`, `sync_vllm_weights_once_per_step`);
- `use_vllm` with `vllm_generation.sync_weights()`: TRL's importance-sampling correction of rollouts
  sampled apart from the trainer, and the point before each generation batch where it syncs the
  sampler's weights (`correct_for_external_sampler`: generation ahead of training, and grpo's own
  vLLM engines where TRL's cannot run);
- `_get_train_sampler`: the sampler of its train dataloader (`wrap_train_sampler`: generation ahead
  of training reads the coming batches' prompts from it);
- what the rollout function reads of the trainer TRL hands it (ROLLOUT_FUNC_READS): public names,
  read directly by grpo/train/rollout_func.py, pinned here all the same.
Reward-function keyword arguments: `log_extra` (a column of the completions record; the columns
grpo adds are EPISODE_COLUMN, LANGUAGE_COLUMN, MODEL_TOKENS_COLUMN) and `log_metric`
(`extra_column_logger`, `reward_metric_logger`).
transformers' Trainer: `_save_checkpoint` with the `on_save` callbacks (`save_checkpoint_now`: a
checkpoint in the middle of a step, when the generator failed before the step could train).
Names inside TRL's modules: `trl.generation.vllm_generation.extract_logprobs` (`vllm_logprobs`),
`trl.generation.vllm_client.VLLMClient` (`vllm_server_client`),
`trl.models.unwrap_model_for_generation` (`unwrapped_for_generation`),
`trl.trainer.reward_trainer.DataCollatorForPreference` (`preference_collator`),
`trl.trainer.utils._use_triton` (`fused_head_switch`, `set_fused_head_switch`).

The pins below (MODULE_NAMES, CALL_KEYWORDS, TRAINER_ATTRIBUTES, VLLM_TRAINER_ATTRIBUTES,
VLLM_ENGINE_ATTRIBUTES, RECORD_KEYS, REWARD_KWARGS) list what this module relies on; the pin test
checks each against the installed TRL. trl is imported inside the functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# the reward-function keyword arguments GRPOTrainer passes (trl 1.16: _calculate_rewards)
LOG_EXTRA_KWARG = "log_extra"
LOG_METRIC_KWARG = "log_metric"
REWARD_KWARGS = (LOG_EXTRA_KWARG, LOG_METRIC_KWARG)
# the columns the first rubric adapter (grpo/rewards/reward_funcs.py) adds to TRL's record of the
# batch through `log_extra`, which the completions table (grpo/tracking/completions.py) reads back
EPISODE_COLUMN = "episode"
LANGUAGE_COLUMN = "language"
MODEL_TOKENS_COLUMN = "model_tokens"

# the keys of GRPOTrainer._logs grpo reads
RECORD_KEYS = ("prompt", "completion", "rewards", "advantages", "extra")
# what grpo/train/rollout_func.py reads of the GRPOTrainer TRL hands it
ROLLOUT_FUNC_READS = (
    "num_generations",
    "num_generations_eval",
    "temperature",
    "top_p",
    "max_completion_length",
    "use_vllm",
    "eos_token_ids",
)
# GRPOTrainer attributes every trainer has
TRAINER_ATTRIBUTES = (
    "_logs",
    "_log_metric",
    "_metrics",
    "compute_loss",
    "reward_func_names",
    "reward_weights",
    "_get_train_sampler",
    "_save_checkpoint",
    "callback_handler",
    "vllm_importance_sampling_correction",
    *ROLLOUT_FUNC_READS,
)
# GRPOTrainer attributes set only with use_vllm (its __init__ assigns them)
VLLM_TRAINER_ATTRIBUTES = ("vllm_generation", "_last_loaded_step")
# what grpo reads of TRL's VLLMGeneration (the attributes set by its __init__ / setup, a method)
VLLM_ENGINE_ATTRIBUTES = (
    "mode",
    "llm",
    "vllm_client",
    "server_base_url",
    "server_host",
    "server_port",
    "server_timeout",
    "sync_weights",
)
# module -> the names grpo imports from it
MODULE_NAMES = {
    "trl.generation.vllm_generation": ("extract_logprobs", "VLLMGeneration"),
    "trl.generation.vllm_client": ("VLLMClient",),
    "trl.models": ("unwrap_model_for_generation",),
    "trl.trainer.reward_trainer": ("DataCollatorForPreference",),
    "trl.trainer.utils": ("_use_triton",),
}
# "module.name" -> the parameters grpo passes it
CALL_KEYWORDS = {
    "trl.generation.vllm_generation.extract_logprobs": ("all_outputs",),
    "trl.generation.vllm_client.VLLMClient": ("base_url", "host", "server_port", "connection_timeout"),
    "trl.models.unwrap_model_for_generation": (
        "model",
        "accelerator",
        "gather_deepspeed3_params",
        "gradient_checkpointing_kwargs",
    ),
    "trl.trainer.reward_trainer.DataCollatorForPreference": ("pad_token_id",),
    "trl.trainer.utils._use_triton": ("device",),
}


# ---- the record of the last generation batch (the completions table) ------------------------------


@dataclass(frozen=True)
class CompletionsRecord:
    """TRL's record of a GRPOTrainer's last generation batch: `record` has "prompt", "completion",
    "rewards" (function name -> scores, NaN where a function does not apply), "advantages" and
    "extra" (column -> values); `names` and `weights` are the reward functions in TRL's order."""

    record: Mapping[str, Any]
    names: list[str]
    weights: list[float]


def completions_record(trainer: Any) -> CompletionsRecord | None:
    """The trainer's record of its last generation batch (`trainer._logs`, gathered from every
    process); None when this TRL version keeps no such record."""
    record = getattr(trainer, "_logs", None)
    names = getattr(trainer, "reward_func_names", None)
    weights = getattr(trainer, "reward_weights", None)
    if not isinstance(record, Mapping) or names is None or weights is None:
        return None
    return CompletionsRecord(record, list(names), [float(w) for w in weights])


# ---- metric logs -----------------------------------------------------------------------------------


def metric_logger(trainer: Any) -> Callable[[str, float], None] | None:
    """`log(name, value)` into the trainer's own metrics (`trainer._log_metric`: averaged over the
    processes, logged with TRL's metrics at the step); None when this TRL version has none."""
    return getattr(trainer, "_log_metric", None)


class StepMetrics:
    """The trainer's metrics of each optimizer step, whatever its logging interval: `take(trainer)`
    returns name -> the mean of the values TRL recorded since the previous call (an empty dict where
    this TRL records none). TRL clears its record at each log (its lists are then new objects)."""

    def __init__(self) -> None:
        # name -> (the list object read last time, how many of its values were read)
        self.seen: dict[str, tuple[list[Any], int]] = {}

    def take(self, trainer: Any) -> dict[str, float]:
        record = (getattr(trainer, "_metrics", None) or {}).get("train") or {}
        out: dict[str, float] = {}
        seen: dict[str, tuple[list[Any], int]] = {}
        for name, values in list(record.items()):
            if not isinstance(values, list):
                continue
            last, read = self.seen.get(name, (None, 0))
            start = read if last is values and read <= len(values) else 0
            new = [
                float(v) for v in values[start:] if isinstance(v, (int, float)) and not isinstance(v, bool)
            ]
            seen[name] = (values, len(values))
            if new:
                out[name] = sum(new) / len(new)
        self.seen = seen
        return out


def record_losses(trainer: Any) -> list[float]:
    """A list that every training micro-batch's loss (TRL's compute_loss) is appended to from now
    on: `trainer.compute_loss` wrapped on the instance. The caller empties it as it reads."""
    losses: list[float] = []
    compute = trainer.compute_loss

    def compute_loss(*args: Any, **kwargs: Any) -> Any:
        loss = compute(*args, **kwargs)
        if getattr(trainer.model, "training", True):
            losses.append(float(loss.detach()))
        return loss

    trainer.compute_loss = compute_loss
    return losses


def reward_metric_logger(reward_kwargs: Mapping[str, Any]) -> Callable[[str, float], None] | None:
    """The `log_metric(name, value)` TRL hands a reward function (None outside a GRPOTrainer)."""
    return reward_kwargs.get(LOG_METRIC_KWARG)


def extra_column_logger(reward_kwargs: Mapping[str, Any]) -> Callable[[str, list[Any]], None] | None:
    """The `log_extra(column, values)` TRL hands a reward function: one value per completion of
    the batch, kept in its record's "extra" columns (None outside a GRPOTrainer)."""
    return reward_kwargs.get(LOG_EXTRA_KWARG)


# ---- the trainer's vLLM engine -----------------------------------------------------------------------


@dataclass(frozen=True)
class VllmEngine:
    """What grpo uses of a GRPOTrainer's vLLM engine (TRL's VLLMGeneration). `mode`: "colocate"
    (`llm`, the engine in this process) or "server" (`client`: TRL's client, on the main process
    only, else None; the server's `base_url`, `host`, `port` and `timeout` for a client of one's own)."""

    mode: str
    llm: Any
    client: Any
    base_url: str | None
    host: str
    port: int
    timeout: float


def uses_vllm_engine(trainer: Any) -> bool:
    """Whether the trainer generates with a vLLM engine of TRL's (not a generator of grpo's
    that only borrows TRL's correction, see `correct_for_external_sampler`)."""
    return bool(trainer.use_vllm) and _engine_of(trainer) is not None


def _engine_of(trainer: Any) -> Any:
    engine = getattr(trainer, "vllm_generation", None)
    return engine.engine if isinstance(engine, _SyncHook) else engine


def vllm_engine(trainer: Any) -> VllmEngine:
    """The vLLM engine of a GRPOTrainer built with use_vllm (`trainer.vllm_generation`)."""
    engine = _engine_of(trainer)
    return VllmEngine(
        mode=engine.mode,
        llm=getattr(engine, "llm", None),  # colocate only
        client=getattr(engine, "vllm_client", None),  # server mode, main process only
        base_url=engine.server_base_url,
        host=engine.server_host,
        port=engine.server_port,
        timeout=engine.server_timeout,
    )


def sync_vllm_weights(trainer: Any) -> None:
    """Push the policy's current weights into the trainer's vLLM engine now."""
    trainer.vllm_generation.sync_weights()


def sync_vllm_weights_once_per_step(trainer: Any) -> None:
    """Push the policy's weights into the trainer's vLLM engine unless they were pushed at this
    step already (`trainer._last_loaded_step`, which TRL itself checks before it generates)."""
    if trainer.state.global_step != trainer._last_loaded_step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


class _SyncHook:
    """Stands in for `trainer.vllm_generation` where TRL syncs it: `sync_weights()` runs `sync`;
    everything else is the wrapped engine's (None: a generator of grpo's, no engine of TRL's)."""

    def __init__(self, engine: Any, sync: Callable[[], None]):
        self.engine = engine
        self._sync = sync

    def sync_weights(self) -> None:
        self._sync()

    def __getattr__(self, name: str) -> Any:
        if name in ("engine", "_sync"):  # not set yet (copy / unpickle build the object bare)
            raise AttributeError(name)
        if self.engine is None:
            raise AttributeError(f"a generator apart from the trainer has no {name!r}")
        return getattr(self.engine, name)


def correct_for_external_sampler(trainer: Any, sync: Callable[[], None], engine: Any = None) -> None:
    """Rollouts sampled apart from the trainer (generation ahead of training; a vLLM server whose
    weights come from files): TRL corrects the
    loss with their sampling logprobs as it does for its vLLM engine (`use_vllm` and
    `vllm_importance_sampling_correction`: a per-token ratio of the trainer's to the sampler's
    probability, truncated at vllm_importance_sampling_clip_max), and calls `sync()` where it syncs
    that engine (`vllm_generation.sync_weights()`, before the rollout function, once per optimizer
    step). A trainer with its own vLLM engine keeps it: `sync()` then decides when to call the
    engine's own sync (`engine_sync`). `engine`: an engine of grpo's standing for TRL's (one that
    looks like TRL's VLLMGeneration to `vllm_engine`), for a trainer built without one."""
    if engine is None:
        engine = _engine_of(trainer) if trainer.use_vllm else None
    trainer.vllm_generation = _SyncHook(engine, sync)
    if not trainer.use_vllm:
        trainer._last_loaded_step = -1
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True


def engine_sync(trainer: Any) -> Callable[[], None] | None:
    """The vLLM engine's own weight sync under `correct_for_external_sampler` (None without one)."""
    engine = _engine_of(trainer)
    return None if engine is None else engine.sync_weights


def wrap_train_sampler(trainer: Any, wrap: Callable[[Any], Any]) -> None:
    """Make the sampler of the trainer's train dataloader `wrap(sampler)` (GRPOTrainer builds it
    with `_get_train_sampler` when training starts: a RepeatSampler of each generation batch's
    prompts, repeated per group and per gradient-accumulation step)."""
    original = trainer._get_train_sampler

    def sampler(*args: Any, **kwargs: Any) -> Any:
        return wrap(original(*args, **kwargs))

    trainer._get_train_sampler = sampler


def save_checkpoint_now(trainer: Any) -> None:
    """Write a checkpoint of the trainer's state now, as at a save step (transformers'
    `_save_checkpoint`, then the `on_save` callbacks: grpo's completion marker among them).
    For a stop in the middle of a step before it changed anything (the generator failed before
    the step's batch came): the checkpoint is the state after the last complete step."""
    trainer._save_checkpoint(trainer.model, None)
    trainer.control = trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)


def vllm_logprobs(outputs: Sequence[Any]) -> tuple[Any, Any]:
    """(log-probs, their token ids) per sequence and position of vLLM's RequestOutputs, as TRL
    reads them (`trl.generation.vllm_generation.extract_logprobs`)."""
    from trl.generation.vllm_generation import extract_logprobs

    return extract_logprobs(outputs)


def vllm_server_client(base_url: str | None, host: str, port: int, timeout_s: float) -> Any:
    """TRL's client of a vLLM server (`trl vllm-serve` / `vllm serve`): generation and weight sync."""
    from trl.generation.vllm_client import VLLMClient

    return VLLMClient(base_url=base_url, host=host, server_port=port, connection_timeout=timeout_s)


# ---- the policy for generation, the reward model's collator, the fused LM head --------------------------


@contextlib.contextmanager
def unwrapped_for_generation(trainer: Any) -> Iterator[Any]:
    """The trainer's policy unwrapped from its distributed wrapper for generate() (ZeRO-3
    parameters gathered when the trainer's args ask for it), as TRL generates
    (`trl.models.unwrap_model_for_generation`)."""
    from trl.models import unwrap_model_for_generation

    with unwrap_model_for_generation(
        trainer.model_wrapped,
        trainer.accelerator,
        gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
    ) as policy:
        yield policy


def preference_collator(pad_token_id: int) -> Any:
    """TRL's collator of chosen / rejected pairs (`trl.trainer.reward_trainer.DataCollatorForPreference`):
    a batch of the chosen rows, then the rejected ones, padded with `pad_token_id`."""
    from trl.trainer.reward_trainer import DataCollatorForPreference

    return DataCollatorForPreference(pad_token_id=pad_token_id)


def fused_head_switch() -> Callable[[Any], bool] | None:
    """TRL's choice, per device, of its fused LM head's compact path (`trl.trainer.utils._use_triton`:
    True projects only the labelled positions); None when this TRL version has no such switch."""
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return None
    switch = getattr(trl_utils, "_use_triton", None)
    return switch if callable(switch) else None


def set_fused_head_switch(switch: Callable[[Any], bool]) -> None:
    """Replace TRL's choice of its fused LM head's path (see `fused_head_switch`), process-wide."""
    import trl.trainer.utils as trl_utils

    trl_utils._use_triton = switch
