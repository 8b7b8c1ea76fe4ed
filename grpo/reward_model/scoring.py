"""What the reward model reads, and batched scoring.

One rendering for training pairs and GRPO completions alike: the prompt messages followed by the
whole (possibly multi-turn) completion, through the RM tokenizer's chat template (a tokenizer
without one, e.g. an encoder, or a template that rejects a conversation, gets "role: content" lines,
said once in a warning line), with the language tag in front (and, for
RMs trained since tag_at_end, at the end too: a decoder reads its score there). A sequence longer
than max_length keeps its head (special tokens and the tag) and its END (the last answer and the
closing tag) and loses the middle.

Scoring sorts sequences by length and runs them in batches under torch.inference_mode, so a
batch pads little; results come back in input order. Any model output (garbage, empty, unicode,
special-token strings) renders and scores without raising.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from grpo.reward_model.backbone import lang_tag

Messages = list[dict[str, str]]
log = logging.getLogger(__name__)


def _clean(text: str) -> str:
    """Text any tokenizer accepts: lone surrogates (invalid UTF-16 halves) become U+FFFD."""
    return text.encode("utf-8", errors="replace").decode("utf-8") if not text.isascii() else text


def _message(m: Any, default_role: str) -> dict[str, str] | None:
    if isinstance(m, Mapping):
        role = m.get("role")
        content = m.get("content")
        if isinstance(content, list):  # multimodal-style parts: keep the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return {
            "role": _clean(role) if isinstance(role, str) and role else default_role,
            "content": "" if content is None else _clean(str(content)),
        }
    if isinstance(m, str):
        return {"role": default_role, "content": _clean(m)}
    return None


def as_conversation(value: Any, default_role: str) -> Messages:
    """A prompt or completion (string, message list, or garbage) as a clean message list."""
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return [{"role": default_role, "content": "" if value is None else _clean(str(value))}]
    return [msg for m in value if (msg := _message(m, default_role)) is not None]


def render_conversation(
    tokenizer: Any, messages: Messages, chat_template_kwargs: Mapping[str, Any]
) -> tuple[str, str | None]:
    """The conversation as text through the chat template, or as plain "role: content" lines, and
    why it fell back to those (None when the template rendered it): the tokenizer has no chat
    template, or the template raised on this conversation (its error)."""
    if not getattr(tokenizer, "chat_template", None):
        return _plain(messages), "the reward model's tokenizer has no chat template"
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=False, **dict(chat_template_kwargs)
        )
        return text, None
    except Exception as ex:  # a template that rejects this shape of conversation
        message = " ".join(str(ex).split())[:200]
        return _plain(messages), f"its chat template raised {type(ex).__name__}: {message}"


def _plain(messages: Messages) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class SequenceEncoder:
    """Prompt + completion + language -> the token ids the reward model reads."""

    def __init__(
        self,
        tokenizer: Any,
        max_length: int,
        tag_token: bool,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tag_at_end: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.tag_token = bool(tag_token)
        self.tag_at_end = self.tag_token and bool(tag_at_end)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._fallbacks_said: set[str] = set()
        # special tokens the tokenizer wraps every text in (an encoder's <s> ... </s>): kept on truncation
        plain = tokenizer("a", add_special_tokens=False)["input_ids"]
        wrapped = tokenizer("a", add_special_tokens=True)["input_ids"]
        starts = [i for i in range(len(wrapped) - len(plain) + 1) if wrapped[i : i + len(plain)] == plain]
        self.n_prefix = starts[0] if starts else 0
        self.n_suffix = max(0, len(wrapped) - self.n_prefix - len(plain))
        self.n_head = self.n_prefix + (1 if self.tag_token else 0)
        self.n_tail = self.n_suffix + (1 if self.tag_at_end else 0)
        if self.max_length <= self.n_head + self.n_tail:
            raise ValueError(f"max_length={self.max_length} leaves no room for text")

    def text(self, prompt: Any, completion: Any, language: str) -> str:
        messages = as_conversation(prompt, "user") + as_conversation(completion, "assistant")
        body, fallback = render_conversation(self.tokenizer, messages, self.chat_template_kwargs)
        if fallback is not None:
            self._say_fallback(fallback)
        if not self.tag_token:
            return body
        return lang_tag(language) + body + (lang_tag(language) if self.tag_at_end else "")

    def _say_fallback(self, reason: str) -> None:
        """One warning line per kind of fallback (no template; a template that raised), so a user
        knows the RM reads plain role lines, here and wherever this encoder renders."""
        kind = "template raised" if getattr(self.tokenizer, "chat_template", None) else "no template"
        if kind in self._fallbacks_said:
            return
        self._fallbacks_said.add(kind)
        log.warning('reward model input: %s; conversations are rendered as "role: content" lines', reason)

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
        keep = self.max_length - self.n_head - self.n_tail
        end = len(ids) - self.n_tail
        return ids[: self.n_head] + ids[end - keep : end] + ids[end:]


# padded tokens per forward pass when scoring: long sequences go in smaller batches (attention
# memory grows with batch x length^2), short ones in bigger batches
TOKENS_PER_BATCH = 16384
# a sequence joins a batch when it is at most this many tokens shorter than the batch's longest:
# a padded position costs what a real one does, and one more forward pass costs about as much
# as ~100 tokens on a CPU (benchmarks/rm_scoring.py: 256 episodes of 79-929 tokens pad 3.5%
# instead of 16%, at 0.87 of the compute floor instead of 0.65; short sequences keep their few
# big batches)
MAX_PAD_TOKENS = 32


def length_batches(
    lengths: Sequence[int],
    max_sequences: int,
    max_tokens: int = TOKENS_PER_BATCH,
    max_pad: int = MAX_PAD_TOKENS,
) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (a batch that does not fit in
    memory fails at once): at most `max_sequences` per batch, `max_tokens` padded tokens (a
    sequence longer than that gets a batch of its own), and each sequence at most `max_pad`
    tokens shorter than its batch's longest."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    for i in order:
        # the first (longest) sequence of a batch sets its width
        if (
            batches
            and len(batches[-1]) < max_sequences
            and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens
            and lengths[batches[-1][0]] - lengths[i] <= max_pad
        ):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def is_causal_classifier(model: Any) -> bool:
    """A decoder-only classifier that pools its last non-pad token (Qwen, Llama, Mistral, ...):
    with right padding, causal attention alone keeps pads out of every real position, so no
    padding mask is needed (faster attention, identical scores)."""
    from transformers.modeling_layers import GenericForSequenceClassification

    from grpo.reward_model.backbone import inner_model

    return isinstance(inner_model(model), GenericForSequenceClassification)


def score_ids(
    model: Any,
    sequences: Sequence[Sequence[int]],
    pad_token_id: int,
    batch_size: int,
    head_ids: Sequence[int] | None = None,
) -> list[float]:
    """One score per token sequence, in batches of similar length, without gradients.
    `head_ids`: the per-language head of each sequence (per-language heads models only)."""
    import torch

    if not sequences:
        return []
    device = next(model.parameters()).device
    causal = is_causal_classifier(model)
    scores = [0.0] * len(sequences)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for chunk in length_batches([len(s) for s in sequences], max(1, int(batch_size))):
                width = len(sequences[chunk[0]])
                input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
                attention = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    seq = sequences[i]
                    input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                    attention[row, : len(seq)] = 1
                kwargs: dict[str, Any] = {"use_cache": False}
                if not causal:
                    kwargs["attention_mask"] = attention.to(device)
                if head_ids is not None:
                    kwargs["language_ids"] = torch.tensor([head_ids[i] for i in chunk], device=device)
                logits = model(input_ids=input_ids.to(device), **kwargs).logits
                values = logits[:, 0].float().cpu().tolist()
                for i, value in zip(chunk, values, strict=True):
                    scores[i] = float(value)
    finally:
        model.train(was_training)
    return scores
