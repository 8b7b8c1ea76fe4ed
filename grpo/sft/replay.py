"""Demonstrations replayed through the rollout engine: the exact token layout GRPO trains on.

SFT must see the tokens GRPO will: the same chat-template rendering of the prompt, the same ids
between two model turns (the rest of the assistant turn's close, the environment's messages, the
next generation prompt), and the same stop token at the end of every model turn. So each
demonstration runs through grpo.rollout.run_rollouts, the engine of training and evaluation,
with a scripted token-level backend, the `Teacher`: it answers every model turn with the
demonstration's next assistant message, as the token ids a model would have to write (the
content's ids, then the token that ends an assistant turn). The environment answers as in
training: the env's own env_response for env demonstrations, the conversation's next messages for
JSONL ones (`ConversationReplay`). Then

    input_ids      = rollout.prompt_ids + rollout.completion_ids
    assistant_mask = [0] * len(prompt_ids) + rollout.env_mask     (1 = a token the model wrote)

and only the masked-in tokens are trained (TRL's SFTTrainer turns every other label into -100).
An env whose replayed episode differs from its reference_completion (env_response and the
reference disagree) is an error naming the env and the row. Conversations longer than
sft.max_length tokens are cut at the end; one left without an assistant token is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpo.envs.base import Environment, Messages, Row
from grpo.errors import UserError
from grpo.generation.base import GenRequest, GenResult, Sampling, TokenBackend
from grpo.rollout import Rollout, TurnTokenizer, run_rollouts
from grpo.sft.data import ASSISTANT, FIELD, Demonstration


class Teacher:
    """A token-level backend that answers with a script: one conversation at a time, each model
    turn the next scripted message. Rendering, encoding and the EOS ids are those of `tokens`
    (the hf backend of the policy, i.e. what GRPO tokenises and stops with)."""

    token_level = True

    def __init__(self, tokens: TokenBackend):
        self.render = tokens.render
        self.encode = tokens.encode
        self.decode = tokens.decode
        self.eos_token_ids = tokens.eos_token_ids
        self.stop_token_id = self._stop_token()
        self.script: list[str] = []

    def _stop_token(self) -> int:
        """The EOS token a model ends its turn with: the one the template's close of an assistant
        message starts with (ChatML: <|im_end|>), else the lowest EOS id."""
        closing = TurnTokenizer(self).closing
        for token in sorted(self.eos_token_ids):
            text = self.decode([token], skip_special_tokens=False)
            if text and closing.startswith(text):
                return token
        return min(self.eos_token_ids)

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        if len(requests) != 1:
            raise RuntimeError(f"the teacher replays one conversation at a time, got {len(requests)}")
        if not self.script:
            raise _PastTheEnd
        text = self.script.pop(0)
        ids = [*self.encode(text), self.stop_token_id]
        return [
            GenResult(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finished=True, num_tokens=len(ids))
        ]


class _PastTheEnd(Exception):
    """The environment asked for a model turn after the demonstration's last assistant message."""


class ConversationReplay(Environment):
    """The environment of a JSONL conversation: after the model's k-th turn it answers with the
    messages between the k-th and the (k+1)-th assistant message, and ends after the last one."""

    name = "sft_conversations"
    multi_turn = True

    def __init__(self, max_turns: int):
        super().__init__()
        self.max_turns = max(1, int(max_turns))

    @staticmethod
    def row(demo: Demonstration, index: int) -> Row:
        follow_ups: list[Messages] = []
        for m in demo.completion:
            if m["role"] == ASSISTANT:
                follow_ups.append([])
            else:
                follow_ups[-1].append(dict(m))
        return Row(id=index, prompt=demo.prompt, info={"follow_ups": follow_ups}, language=demo.language)

    def env_response(self, messages: Messages, state: dict[str, Any], row: Row) -> Messages | None:
        answered = sum(1 for m in messages if m.get("role") == ASSISTANT)
        state["turn"] = answered
        follow_ups = row.info["follow_ups"]
        return follow_ups[answered - 1] if answered < len(follow_ups) else None


@dataclass
class Example:
    """One demonstration as SFT trains on it."""

    input_ids: list[int]
    # 1 = a token the model wrote (in the loss), 0 = prompt, user and environment tokens
    assistant_mask: list[int]
    where: str
    # the conversation was longer than sft.max_length and was cut at the end
    cut: bool = False


def replay(demos: Sequence[Demonstration], env: Environment | None, tokens: TokenBackend) -> list[Rollout]:
    """Every demonstration replayed (see the module docstring). `env` answers the env
    demonstrations (those with a row); JSONL conversations answer themselves."""
    teacher = Teacher(tokens)
    conversations = ConversationReplay(max((len(d.answers) for d in demos), default=1))
    rollouts = []
    for index, demo in enumerate(demos):
        if demo.row is not None and env is not None:
            where, answering, row = f"env {env.name}: {demo.where}", env, demo.row
        else:
            where, answering, row = f"{FIELD} {demo.where}", conversations, conversations.row(demo, index)
        teacher.script = demo.answers
        try:
            (rollout,) = run_rollouts(answering, [row], teacher, sampling=Sampling(temperature=0.0))
        except _PastTheEnd:
            raise UserError(
                f"{where}: env_response continues the episode after the reference's last assistant message "
                "(reference_completion and env_response disagree)"
            ) from None
        except UserError as ex:  # e.g. a chat template that cannot render this conversation's turns
            raise UserError(f"{where}: {ex}") from None
        if rollout.completion != demo.completion:
            raise UserError(f"{where}: {_difference(rollout.completion, demo.completion)}")
        rollouts.append(rollout)
    return rollouts


def _difference(replayed: Messages, reference: Messages) -> str:
    for k, (got, want) in enumerate(zip(replayed, reference, strict=False)):
        if got != want:
            return (
                f"the replayed episode differs from reference_completion at message {k}: env_response gave "
                f"{got!r}, the reference has {want!r}"
            )
    return (
        f"the replayed episode has {len(replayed)} messages, reference_completion {len(reference)} "
        "(env_response ends the episode elsewhere)"
    )


def to_example(rollout: Rollout, where: str, max_length: int) -> Example:
    """Input ids and assistant mask of a replayed demonstration, cut to `max_length` tokens."""
    ids = [*rollout.prompt_ids, *rollout.completion_ids]
    mask = [0] * len(rollout.prompt_ids) + [int(bit) for bit in rollout.env_mask]
    return Example(ids[:max_length], mask[:max_length], where, cut=len(ids) > max_length)


def build_examples(
    demos: Sequence[Demonstration], env: Environment | None, tokens: TokenBackend, max_length: int
) -> list[Example]:
    """The training examples of the demonstrations; those that keep no assistant token within
    `max_length` are dropped (a UserError when that leaves none)."""
    examples = [
        to_example(rollout, demo.where, max_length)
        for demo, rollout in zip(demos, replay(demos, env, tokens), strict=True)
    ]
    kept = [e for e in examples if any(e.assistant_mask)]
    if not kept:
        raise UserError(
            f"sft.max_length={max_length} cuts every demonstration before its first assistant token (the "
            "prompts alone are longer): raise sft.max_length"
        )
    cut = sum(e.cut for e in examples)
    if cut:
        print(
            f"[sft] note: {cut} of {len(examples)} demonstrations are longer than sft.max_length={max_length} "
            f"tokens and were cut at the end; {len(examples) - len(kept)} kept no assistant token and were dropped",
            flush=True,
        )
    return kept
