"""Shared by the rollout and training tests: a multi-turn rollout's env_mask split into its spans, and
checked token by token against the chat template."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo.envs.parsers import assistant_turns
from grpo.models import render_chat


def mask_spans(rollout: Any) -> list[tuple[int, list[int]]]:
    """Maximal spans of equal env_mask over the completion: [(mask, ids), ...]."""
    spans: list[tuple[int, list[int]]] = []
    for tok, mask in zip(rollout.completion_ids, rollout.env_mask, strict=True):
        if spans and spans[-1][0] == mask:
            spans[-1][1].append(tok)
        else:
            spans.append((mask, [tok]))
    return spans


def assert_env_mask_follows_the_template(
    rollout: Any,
    tokenizer: Any,
    chat_template_kwargs: dict[str, Any],
    check_env_message: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Mask-1 spans are the model's turns (decoding to its texts), mask-0 spans exactly the text
    the chat template puts between them (end of turn, the env's messages, the next generation
    prompt); the spans alternate, model first and last. `check_env_message` sees each env message."""
    spans = mask_spans(rollout)
    assert [m for m, _ in spans] == [1, 0] * (rollout.num_turns - 1) + [1]
    messages, seen = list(rollout.row.prompt), list(rollout.prompt_ids)
    assistant = iter(assistant_turns(rollout.completion))
    others = iter(m for m in rollout.completion if m["role"] != "assistant")
    for mask, ids in spans:
        seen += ids
        if mask == 1:
            text = next(assistant)
            assert tokenizer.decode(ids, skip_special_tokens=True) == text
            messages.append({"role": "assistant", "content": text})
        else:
            env_message = next(others)
            if check_env_message is not None:
                check_env_message(env_message)
            messages.append(env_message)
            rendered = render_chat(tokenizer, messages, chat_template_kwargs, add_generation_prompt=True)
            assert tokenizer.decode(seen, skip_special_tokens=False) == rendered
