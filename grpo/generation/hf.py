"""The transformers backend: token-level, left-padded batched `generate()`.

One `generate` call per turn (or per `batch_size` chunk) over all active conversations. Requests
may ask for different `max_new_tokens` (each conversation has its own remaining budget): the call
runs to the largest and a per-row stopping criterion ends every row at its own limit, so a row's
tokens are exactly what a call with its own limit would sample.

Imports torch and transformers at the top: `grpo.generation.make_backend` imports this module
only when backend=hf is built.

Log-probabilities are recorded while generating, under the distribution the token was sampled
from (temperature-scaled and top-p-truncated; raw logits when greedy) — what TRL calls processed
logprobs. Only one step of full-vocabulary log-probs is held at a time, never the whole
(steps x batch x vocab) tensor that `output_scores` would keep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from grpo.generation.base import ChatTokenizerSide, GenRequest, GenResult, Sampling


class HFBackend(ChatTokenizerSide):
    """Generate with a transformers causal LM (the policy itself during training)."""

    token_level = True

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        batch_size: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = None if batch_size is None else int(batch_size)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.eos_token_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else min(self.eos_token_ids)
        # several processes in lockstep (run_rollouts' any_rank_active): one generate() call per
        # turn, each synced across ranks (generate continues until every rank's rows are done)
        self.lockstep = False

    # ---- generation ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        if not requests:
            return []
        for r in requests:
            if r.prompt_ids is None or not r.prompt_ids:
                raise ValueError("the hf backend needs non-empty prompt_ids in every request")
            if r.max_new_tokens < 1:
                raise ValueError(f"max_new_tokens must be >= 1, got {r.max_new_tokens}")
        # Chunks of similar prompt length waste less compute on padding.
        order = list(range(len(requests)))
        size = len(requests) if self.lockstep else (self.batch_size or len(requests))
        if size < len(requests):
            order.sort(key=lambda i: len(requests[i].prompt_ids or ()))
        results: list[GenResult | None] = [None] * len(requests)
        was_training = self.model.training
        self.model.eval()
        try:
            # no_grad rather than inference_mode: tensors a model caches lazily during generation
            # (rotary tables, ...) must stay usable by the training step that follows.
            with torch.no_grad(), _seeded(sampling.seed, self._device):
                for start in range(0, len(order), size):
                    chunk = order[start : start + size]
                    for i, result in zip(
                        chunk, self._generate_chunk([requests[i] for i in chunk], sampling), strict=True
                    ):
                        results[i] = result
        finally:
            if was_training:
                self.model.train()
        return [r for r in results if r is not None]

    def idle_turn(self, sampling: Sampling) -> None:
        """A generate() call with nothing to generate, for a rank whose episodes have ended while
        others still generate (lockstep): one pad-token prompt, one new token, result dropped."""
        device = self._device
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                self.model.generate(
                    input_ids=torch.full((1, 1), self.pad_token_id, dtype=torch.long, device=device),
                    attention_mask=torch.ones((1, 1), dtype=torch.long, device=device),
                    generation_config=self._generation_config(sampling, 1),
                    synced_gpus=True,
                )
        finally:
            if was_training:
                self.model.train()

    @property
    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _generate_chunk(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        device = self._device
        prompts = [list(r.prompt_ids or ()) for r in requests]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        limits = [int(r.max_new_tokens) for r in requests]

        processors, recorder = _sampling_processors(sampling)
        stop = _RowLimits(width, torch.tensor(limits, device=device))
        sequences = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=self._generation_config(sampling, max(limits)),
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList([stop]),
            **({"synced_gpus": True} if self.lockstep else {}),
        )
        generated = sequences[:, width:]
        logprobs = recorder.finish(generated)

        results = []
        for row, limit in enumerate(limits):
            ids = generated[row, :limit].tolist()
            finished = False
            for pos, tok in enumerate(ids):
                if tok in self.eos_token_ids:
                    ids, finished = ids[: pos + 1], True
                    break
            lps = logprobs[row, : len(ids)].tolist()
            results.append(
                GenResult(
                    text=self.decode(ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=lps,
                    finished=finished,
                    num_tokens=len(ids),
                )
            )
        return results

    def _generation_config(self, sampling: Sampling, max_new_tokens: int) -> GenerationConfig:
        # Every field that shapes the distribution is set explicitly: generate() fills unset ones
        # from the checkpoint's generation_config.json (Qwen ships top_k=20, repetition_penalty...),
        # which would make the sampled distribution differ from the configured one and from the
        # logprobs the trainer recomputes. Temperature / top-p run in our own processors (below).
        fields: dict[str, Any] = dict(
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            do_sample=not sampling.greedy,
            num_beams=1,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            use_cache=True,
        )
        if not sampling.greedy:  # sampling-only flags (setting them for greedy decoding only warns)
            fields.update(
                temperature=1.0, top_k=0, top_p=1.0, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0
            )
            if getattr(self.model.generation_config, "min_p", None) is not None:
                fields["min_p"] = 0.0
        return GenerationConfig(**fields)


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The tokens that end a model turn: the generation config's EOS ids plus the tokenizer's."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured is not None:
        ids.update(int(i) for i in configured)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(
            "the model has no EOS token: set generation_config.eos_token_id or the tokenizer's eos"
        )
    return frozenset(ids)


@contextlib.contextmanager
def _seeded(seed: int | None, device: Any) -> Iterator[None]:
    """Seed torch for one call without disturbing the caller's RNG streams (training keeps its own)."""
    if seed is None:
        yield
        return
    devices = [device] if getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _sampling_processors(sampling: Sampling) -> tuple[list[Any], _LogprobRecorder]:
    """Our warpers in sampling order, then the recorder that sees the final distribution."""
    processors: list[Any] = []
    if not sampling.greedy:
        if sampling.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(sampling.temperature))
        if sampling.top_p < 1.0:
            processors.append(TopPLogitsWarper(sampling.top_p))
    recorder = _LogprobRecorder()
    processors.append(recorder)
    return processors, recorder


class _LogprobRecorder(LogitsProcessor):
    """A logits processor that stores the log-prob of each chosen token, one step behind.

    At step k it receives the scores of step k and the ids up to step k-1, so it gathers step
    k-1's chosen token from the log-probs it kept and keeps step k's; `finish` gathers the last."""

    def __init__(self) -> None:
        self._pending: torch.Tensor | None = None
        self._steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._steps.append(self._pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self._pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, generated: torch.LongTensor) -> torch.Tensor:
        """(batch, generated steps) log-probs of the generated ids (rows past their end: garbage)."""
        steps = list(self._steps)
        n = generated.shape[1]
        if self._pending is not None and len(steps) < n:
            steps.append(self._pending.gather(1, generated[:, len(steps) : len(steps) + 1]).squeeze(1))
        self._pending, self._steps = None, []
        if not steps:
            return torch.zeros((generated.shape[0], 0))
        return torch.stack(steps[:n], dim=1).cpu()


class _RowLimits(StoppingCriteria):
    """Stopping criterion: row i is done once it has generated limits[i] tokens."""

    def __init__(self, prompt_width: int, limits: torch.Tensor):
        self.prompt_width = prompt_width
        self.limits = limits

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        return (input_ids.shape[1] - self.prompt_width) >= self.limits
