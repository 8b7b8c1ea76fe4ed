"""What a generation backend is: the request/result types and the protocol the rollout engine calls.

A backend answers ONE call per turn for all active conversations (`generate(requests, sampling)`).
There are two kinds:

- token-level (`token_level = True`, e.g. hf, vllm): requests carry `prompt_ids`, results carry the
  generated token ids and their log-probabilities. Such a backend also exposes the tokenizer side
  the engine needs to keep ids exact across turns: `render`, `encode`, `decode`, `eos_token_ids`.
- text-level (`token_level = False`, e.g. an OpenAI-compatible endpoint): requests carry `messages`,
  results carry text only (no ids, no logprobs). Evaluation only.

This module is light (no torch): the engine imports it freely.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# a chat message ({"role": ..., "content": ...}) and a conversation: the one type every package
# that handles conversations (envs, the rollout engine, the reward model, SFT) uses
Message = dict[str, Any]
Messages = list[Message]


@dataclass(frozen=True)
class Sampling:
    """How the model samples. temperature 0 means greedy decoding (no sampling, seed unused).
    Built from checked settings (eval.* or trainer.*, grpo/cli/checks.py)."""

    temperature: float = 1.0
    top_p: float = 1.0
    # max new tokens of one model turn (the engine also caps it by the remaining completion budget)
    max_tokens_per_turn: int = 128
    # None: draw from the global RNG; an int makes a set of rollouts reproducible
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class GenRequest:
    """One conversation's next model turn."""

    max_new_tokens: int
    # token-level backends: the exact ids the model conditions on (prompt + completion so far)
    prompt_ids: list[int] | None = None
    # text-level backends: the conversation so far
    messages: Messages | None = None
    # per-conversation seed for this turn (endpoints take one per request; hf uses it when the
    # call's own sampling.seed is None: a generator per row); None = unseeded
    seed: int | None = None
    # which conversation of which rollout batch this is (run_rollouts sets it): a backend may keep
    # what it computed for the conversation's earlier turns (hf: the KV cache); None = unknown
    conversation: Hashable | None = None
    # token-level: tokens that end this request's turn besides the model's EOS ids (the policy
    # server passes a client's stop_token_ids); the stop token is kept, as an EOS is
    stop_token_ids: frozenset[int] = frozenset()


@dataclass
class GenResult:
    """The model's reply to one request."""

    text: str
    # generated ids, including the stop token when the model emitted one (empty for text-level)
    token_ids: list[int] = field(default_factory=list)
    # log-probability of each generated id under the sampling distribution used (empty for text-level)
    logprobs: list[float] = field(default_factory=list)
    # True: the model stopped on its own (EOS / stop); False: it hit max_new_tokens
    finished: bool = True
    # tokens the model generated (len(token_ids), or the endpoint's usage count; 0 if unknown)
    num_tokens: int = 0


def mix_seed(*parts: int) -> int:
    """A deterministic 31-bit seed from integers (Python's hash() of ints is not mixed enough)."""
    value = 0x9E3779B1
    for part in parts:
        value = (value ^ (int(part) & 0xFFFFFFFF)) * 0x01000193 & 0xFFFFFFFF
        value ^= value >> 15
    return value & 0x7FFFFFFF


@runtime_checkable
class GenerationBackend(Protocol):
    """The one method every backend has; token-level backends add the tokenizer side below."""

    token_level: bool

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        """One reply per request, in order. `sampling.seed` seeds this call as a whole."""
        ...


@runtime_checkable
class TokenBackend(GenerationBackend, Protocol):
    """A token-level backend: the engine renders and tokenises through it, so ids stay exact."""

    eos_token_ids: frozenset[int]

    def render(self, messages: Messages, add_generation_prompt: bool) -> str:
        """The chat template applied to `messages` (as text)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without adding special tokens (the template already has them)."""
        ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


class ChatTokenizerSide:
    """The tokenizer side of a token-level backend (`self.tokenizer`, `self.chat_template_kwargs`):
    render a conversation with the model's chat template, encode new text without special tokens
    added, decode ids. Shared so every backend tokenises exactly the same way and the engine's ids
    stay exact whichever backend generates."""

    tokenizer: Any
    chat_template_kwargs: dict[str, Any]

    def render(self, messages: Messages, add_generation_prompt: bool) -> str:
        from grpo.models import render_chat

        return render_chat(
            self.tokenizer, messages, self.chat_template_kwargs, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
