"""What the reward model reads, and batched scoring.

One rendering for training pairs and GRPO completions alike: the prompt messages followed by the
whole (possibly multi-turn) completion, through the RM tokenizer's chat template (a tokenizer
without one, e.g. an encoder, gets "role: content" lines), with the language tag in front. A
sequence longer than max_length keeps its head (special tokens and the tag) and its END (the last
answer) and loses the middle.

Scoring sorts sequences by length and runs them in batches under torch.inference_mode, so a
batch pads little; results come back in input order. Any model output (garbage, empty, unicode,
special-token strings) renders and scores without raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grpo.reward_model.backbone import lang_tag

Messages = list[dict[str, str]]


def _message(m: Any, default_role: str) -> dict[str, str] | None:
    if isinstance(m, Mapping):
        role = m.get("role")
        content = m.get("content")
        if isinstance(content, list):  # multimodal-style parts: keep the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return {
            "role": role if isinstance(role, str) and role else default_role,
            "content": "" if content is None else str(content),
        }
    if isinstance(m, str):
        return {"role": default_role, "content": m}
    return None


def as_conversation(value: Any, default_role: str) -> Messages:
    """A prompt or completion (string, message list, or garbage) as a clean message list."""
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return [{"role": default_role, "content": "" if value is None else str(value)}]
    return [msg for m in value if (msg := _message(m, default_role)) is not None]


def render_conversation(tokenizer: Any, messages: Messages, chat_template_kwargs: Mapping[str, Any]) -> str:
    """The conversation as text through the chat template; plain role lines without one."""
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=False, **dict(chat_template_kwargs)
            )
        except Exception:  # a template that rejects this shape of conversation: fall back below
            pass
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class SequenceEncoder:
    """Prompt + completion + language -> the token ids the reward model reads."""

    def __init__(
        self,
        tokenizer: Any,
        max_length: int,
        tag_token: bool,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.tag_token = bool(tag_token)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # special tokens the tokenizer wraps every text in (an encoder's <s> ... </s>): kept on truncation
        around = tokenizer("", add_special_tokens=True)["input_ids"]
        first = tokenizer("a", add_special_tokens=True)["input_ids"][:1]
        specials = set(tokenizer.all_special_ids)
        self.n_prefix = 1 if around and first and first[0] in specials else 0
        self.n_suffix = len(around) - self.n_prefix
        self.n_head = self.n_prefix + (1 if self.tag_token else 0)
        if self.max_length <= self.n_head + self.n_suffix:
            raise ValueError(f"max_length={self.max_length} leaves no room for text")

    def text(self, prompt: Any, completion: Any, language: str) -> str:
        messages = as_conversation(prompt, "user") + as_conversation(completion, "assistant")
        body = render_conversation(self.tokenizer, messages, self.chat_template_kwargs)
        return (lang_tag(language) if self.tag_token else "") + body

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        ids = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        return [self._fit(list(seq)) for seq in ids]

    def encode(
        self, prompts: Sequence[Any], completions: Sequence[Any], languages: Sequence[str]
    ) -> list[list[int]]:
        texts = [self.text(p, c, lang) for p, c, lang in zip(prompts, completions, languages, strict=True)]
        return self.encode_texts(texts)

    def _fit(self, ids: list[int]) -> list[int]:
        if len(ids) <= self.max_length:
            return ids
        tail = self.max_length - self.n_head - self.n_suffix
        end = len(ids) - self.n_suffix
        return ids[: self.n_head] + ids[end - tail : end] + ids[end:]


def score_ids(
    model: Any,
    sequences: Sequence[Sequence[int]],
    pad_token_id: int,
    batch_size: int,
    head_ids: Sequence[int] | None = None,
) -> list[float]:
    """One score per token sequence, batched by similar length, without gradients.
    `head_ids`: the per-language head of each sequence (per-language heads models only)."""
    import torch

    if not sequences:
        return []
    device = next(model.parameters()).device
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]), reverse=True)
    scores = [0.0] * len(sequences)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                width = max(len(sequences[i]) for i in chunk)
                input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
                attention = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    seq = sequences[i]
                    input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                    attention[row, : len(seq)] = 1
                kwargs: dict[str, Any] = {}
                if head_ids is not None:
                    kwargs["language_ids"] = torch.tensor([head_ids[i] for i in chunk], device=device)
                logits = model(
                    input_ids=input_ids.to(device), attention_mask=attention.to(device), use_cache=False, **kwargs
                ).logits
                values = logits[:, 0].float().cpu().tolist()
                for i, value in zip(chunk, values, strict=True):
                    scores[i] = float(value)
    finally:
        model.train(was_training)
    return scores
