"""TRL's `rollout_func` for an environment: the batch's episodes, run by grpo's rollout engine.

How it meets TRL (trl 1.16, read its grpo_trainer.py):
- Dataset: the environment's train rows as conversational prompts (+ row_id, language;
  `train_dataset`). TRL's sampler repeats every prompt `num_generations` times, consecutively, and
  hands each process its generation batch of prompts.
- `EnvRolloutFunc(prompts, trainer)`: maps each group of identical prompts back to its Row
  (`PromptIndex`), runs ALL of the batch's conversations through the rollout engine
  (grpo.rollout.run_rollouts: one batched generate call per turn) with the trainer's current policy
  (the hf backend on the unwrapped model, or TRL's own vLLM engine), and returns per completion:
  `prompt_ids`, `completion_ids` (model and environment tokens interleaved), `logprobs`,
  `env_mask` (TRL's tool mask: environment tokens get no gradient and do not count as completion
  length) and the reward fields of grpo/envs/rubric.py (the episode's messages, state, the row's
  info and language), which the reward adapters read.
- Monitors: it also computes the batch's reward-hacking monitors (grpo/train/monitors.py) and
  hands them to TRL's metric log (the `log_metric` path reward functions use), so they are logged
  with TRL's own metrics at the step, as monitor/<name> (train/monitor/<name> in MLflow).

What it uses of TRL's undocumented internals (the metric log, the vLLM engine and its weight sync,
the unwrapped policy) goes through grpo/trl_adapter/internals.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from grpo.config import GenerationConfig, ModelConfig
from grpo.envs.rubric import MODEL_TOKENS_FIELD, TRUNCATED_FIELD, reward_fields
from grpo.errors import UserError
from grpo.run.distributed import any_rank, world_size
from grpo.train.monitors import LanguageScore, batch_monitors
from grpo.trl_adapter.devices import is_sharded
from grpo.trl_adapter.internals import (
    metric_logger,
    sync_vllm_weights_once_per_step,
    unwrapped_for_generation,
    uses_vllm_engine,
    vllm_engine,
)


def prompt_key(prompt: Any) -> str:
    """A canonical text key of a conversational prompt. Arrow fills keys missing from some
    messages with None, so None-valued keys are dropped to match the env's own rows."""
    if isinstance(prompt, list):
        prompt = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in prompt]
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


# what TRL's dataset carries as the prompt of a row whose episode the environment opens itself
OPENED_BY_ENV = "(the environment opens this episode: row {id})"


def dataset_prompt(row: Any) -> list[dict[str, Any]]:
    """The prompt TRL's dataset carries for a row: the row's own prompt, or, when it holds no user
    turn (the environment opens the episode itself: a v1 taskset's scripted user or user
    simulator), that prompt plus a stand-in user turn naming the row. TRL samples, groups and
    hands back rows by a non-empty conversational prompt; what the loss conditions on is the
    rollout's `prompt_ids`, which for such a row are the episode's opening (its first user turn)."""
    prompt = [dict(m) for m in row.prompt]
    if any(m.get("role") == "user" for m in prompt):
        return prompt
    return [*prompt, {"role": "user", "content": OPENED_BY_ENV.format(id=row.id)}]


class PromptIndex:
    """Maps the prompts TRL hands to the rollout function back to environment rows.

    TRL passes only the prompts, so rows are found by their prompt (`dataset_prompt`). Rows
    sharing an identical prompt are interchangeable to the model; a group of such a prompt takes
    them in turn."""

    def __init__(self, rows: Sequence[Any]):
        self.rows: dict[str, list[Any]] = {}
        for row in rows:
            self.rows.setdefault(prompt_key(dataset_prompt(row)), []).append(row)
        self._turn: dict[str, int] = {}

    @property
    def ambiguous(self) -> int:
        """Rows whose prompt is shared with another row."""
        return sum(len(v) for v in self.rows.values() if len(v) > 1)

    def row_for(self, prompt: Any) -> Any:
        key = prompt_key(prompt)
        candidates = self.rows.get(key)
        if not candidates:
            raise RuntimeError(
                "rollout_func received a prompt that is not one of the environment's train rows"
            )
        if len(candidates) == 1:
            return candidates[0]
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        return candidates[turn % len(candidates)]


def train_dataset(rows: Sequence[Any]) -> Any:
    """The dataset GRPOTrainer samples from: conversational prompts plus row id and language."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"prompt": dataset_prompt(row), "row_id": int(row.id), "language": str(row.language)}
            for row in rows
        ]
    )


class EnvRolloutFunc:
    """TRL `rollout_func`: the environment's episodes for a generation batch of prompts."""

    def __init__(
        self,
        env: Any,
        index: PromptIndex,
        tokenizer: Any,
        gen_cfg: GenerationConfig,
        model_cfg: ModelConfig,
        language_score: LanguageScore | None = None,
    ):
        self.env = env
        self.index = index
        self.tokenizer = tokenizer
        self.gen_cfg = gen_cfg
        self.model_cfg = model_cfg
        self.max_tokens_per_turn = gen_cfg.max_tokens_per_turn
        # the wrong-language monitor's scorer (non-English runs), see grpo/train/monitors.py
        self.language_score = language_score
        # filled after each call, for tests and debugging: the rollouts of the last batch and
        # their monitors
        self.last_rollouts: list[Any] = []
        self.last_monitors: dict[str, float] = {}
        # () -> a context in which the trainer may generate in process (generation ahead of
        # training pauses its worker there, grpo/train/ahead.py)
        self.pause: Callable[[], Any] = contextlib.nullcontext

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        group = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        rows = self._rows(prompts, group)
        sampling = self.sampling(trainer)
        budget = int(trainer.max_completion_length)
        lockstep = self._lockstep(trainer)
        with self.policy_backend(trainer) as backend:
            if lockstep:
                backend.lockstep = True  # hf (vLLM generates for all ranks itself)
            rollouts = self._run(rows, group, backend, sampling, budget, any_rank if lockstep else None)
        return self.hand_over(rollouts, trainer)

    def sampling(self, trainer: Any) -> Any:
        """How training rollouts sample: the trainer's temperature and top-p."""
        from grpo.generation import Sampling

        return Sampling(
            temperature=float(trainer.temperature),
            top_p=float(trainer.top_p),
            max_tokens_per_turn=self.max_tokens_per_turn,
            seed=None,  # the global RNG, which transformers checkpoints and restores on resume
        )

    def hand_over(self, rollouts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """A batch's rollouts as TRL takes them, with the batch's monitors logged at this step."""
        self.last_rollouts = rollouts
        if rollouts and not any(any(r.env_mask) for r in rollouts):
            errors = list(getattr(self.env, "last_errors", None) or [])
            raise UserError(
                f"env {self.env.name}: no episode of the training batch has a model token "
                f"({len(rollouts)} episodes)" + (f"; first failure: {errors[0]}" if errors else "")
            )
        # a third-party env need not have has_answer (then: no format-failure monitor)
        has_answer = getattr(self.env, "has_answer", None)
        short_answer = getattr(self.env, "short_answer", None)
        self.last_monitors = batch_monitors(rollouts, has_answer, self.language_score, short_answer)
        # TRL's metric log (what it hands reward functions as `log_metric`): averaged over the
        # processes and logged with its own metrics at this step
        log_metric = metric_logger(trainer)
        if log_metric is not None:
            for name, value in self.last_monitors.items():
                log_metric(name, value)
        return rollout_fields(rollouts, self._filler_id())

    def _filler_id(self) -> int:
        """The token an episode without tokens (a failed one) is given, masked out of the loss."""
        for attr in ("eos_token_id", "pad_token_id"):
            value = getattr(self.tokenizer, attr, None)
            if isinstance(value, int):
                return value
        return 0

    @contextlib.contextmanager
    def policy_backend(self, trainer: Any) -> Iterator[Any]:
        """A generation backend over the trainer's current policy: the hf backend on the unwrapped
        model, or TRL's vLLM engine with this step's weights (synced once per step, as TRL does
        before it calls rollout_func). Training rollouts and validation both generate through it;
        with generation ahead of training, the generator's worker is paused meanwhile (`pause`)."""
        with self.pause():
            if uses_vllm_engine(trainer):
                sync_vllm_weights_once_per_step(trainer)
                yield self._vllm_backend(trainer)
                return
            from grpo.generation import make_backend

            with unwrapped_for_generation(trainer) as policy:
                yield make_backend(self.gen_cfg, policy, self.tokenizer, self.model_cfg)

    def _rows(self, prompts: list[Any], group: int) -> list[Any]:
        """One row per group of `group` consecutive identical prompts (TRL's RepeatSampler order;
        the settings checks keep every per-device batch a whole number of groups)."""
        if len(prompts) % group:
            raise RuntimeError(
                f"rollout_func got {len(prompts)} prompts, not a multiple of the group size {group}"
            )
        rows = []
        for start in range(0, len(prompts), group):
            key = prompt_key(prompts[start])
            if any(prompt_key(p) != key for p in prompts[start + 1 : start + group]):
                raise RuntimeError(
                    "rollout_func got a group whose prompts differ: the batch is not group-aligned"
                )
            rows.append(self.index.row_for(prompts[start]))
        return rows

    def _run(
        self,
        rows: list[Any],
        group: int,
        backend: Any,
        sampling: Any,
        budget: int,
        any_rank_active: Callable[[bool], bool] | None = None,
    ) -> list[Any]:
        from grpo.generation.served import GeneratorError
        from grpo.rollout import run_rollouts

        try:
            return run_rollouts(
                self.env,
                rows,
                backend,
                rollouts_per_row=group,
                sampling=sampling,
                max_completion_tokens=budget,
                any_rank_active=any_rank_active,
            )
        except (UserError, GeneratorError):
            raise
        except OSError as ex:
            url = getattr(backend, "server_url", None)
            if url is None:
                raise UserError(
                    f"env {self.env.name}: its episodes failed during training: {_first_line(ex)}"
                ) from ex
            # a generation server's connection failing (a vLLM client's), not the env's
            raise GeneratorError(f"the generator at {url} failed: {_first_line(ex)}") from ex
        except Exception as ex:  # inside the env (a verifiers taskset, a third-party env): one line
            raise UserError(
                f"env {self.env.name}: its episodes failed during training: {_first_line(ex)}"
            ) from ex

    def _lockstep(self, trainer: Any) -> bool:
        """Whether every rank must make the same generate() calls (generation.lockstep; null: when
        generate is a collective, i.e. sharded parameters not gathered for generation)."""
        if uses_vllm_engine(trainer) or world_size() <= 1:
            return False
        if self.gen_cfg.lockstep is not None:
            return bool(self.gen_cfg.lockstep)
        if getattr(trainer, "is_fsdp_enabled", False):
            return True
        return is_sharded(trainer) and not trainer.args.ds3_gather_for_generation

    def _vllm_backend(self, trainer: Any) -> Any:
        from grpo.generation.vllm import trainer_backend

        return trainer_backend(vllm_engine(trainer), self.tokenizer, self.model_cfg, trainer.eos_token_ids)


def _first_line(ex: BaseException) -> str:
    text = str(ex).strip().splitlines()
    return f"{type(ex).__name__}: {text[0][:300]}" if text else type(ex).__name__


def rollout_fields(rollouts: Sequence[Any], filler_id: int = 0) -> dict[str, list[Any]]:
    """What rollout_func returns to TRL, one entry per completion. An episode without tokens (a
    failed one: no prompt or no completion ids) gets `filler_id` as its prompt and as one masked
    completion token: TRL reads every completion's last token, and nothing of it is trained on."""
    prompts = [list(r.prompt_ids) or [filler_id] for r in rollouts]
    empty = [not r.completion_ids for r in rollouts]
    return {
        "prompt_ids": prompts,
        "completion_ids": [
            [filler_id] if e else list(r.completion_ids) for r, e in zip(rollouts, empty, strict=True)
        ],
        # NaN where a backend has no log-prob; TRL neutralises NaN in its importance ratios
        "logprobs": [
            [0.0] if e else [float(x) for x in r.logprobs] for r, e in zip(rollouts, empty, strict=True)
        ],
        # 1 = model token, 0 = environment token: TRL masks the latter out of the loss
        "env_mask": [[0] if e else list(r.env_mask) for r, e in zip(rollouts, empty, strict=True)],
        **reward_fields(rollouts),
        "row_id": [r.row.id for r in rollouts],
        # a model turn cut by a token limit: such a completion scores trainer.truncated_reward
        TRUNCATED_FIELD: [bool(r.truncated) for r in rollouts],
        # the model's own tokens of the episode (the completions table, grpo/tracking/completions.py)
        MODEL_TOKENS_FIELD: [int(sum(r.env_mask)) for r in rollouts],
    }
