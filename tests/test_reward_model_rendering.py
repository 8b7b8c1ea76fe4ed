"""What the reward model reads: a conversation through the RM tokenizer's chat template, and the
"role: content" fallback said in one warning line (per kind of fallback, not per conversation)
when the tokenizer has no template or its template rejects a conversation."""

from __future__ import annotations

import logging

import pytest

from grpo.models.tiny import tiny_tokenizer
from grpo.reward_model.scoring import SequenceEncoder, render_conversation

PROMPT = [{"role": "user", "content": "Sort: Bo, Al"}]
ANSWER = [{"role": "assistant", "content": "Al, Bo"}]
LOGGER = "grpo.reward_model.scoring"


def fallback_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_the_chat_template_renders_without_a_warning(caplog):
    tokenizer = tiny_tokenizer()
    text, fallback = render_conversation(tokenizer, PROMPT + ANSWER, {})
    assert fallback is None
    assert text == tokenizer.apply_chat_template(PROMPT + ANSWER, tokenize=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        SequenceEncoder(tokenizer, 256, tag_token=True).encode([PROMPT], [ANSWER], ["en"])
    assert fallback_warnings(caplog) == []


def test_no_template_falls_back_to_role_lines_and_says_so_once(caplog):
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = None
    text, fallback = render_conversation(tokenizer, PROMPT + ANSWER, {})
    assert text == "user: Sort: Bo, Al\nassistant: Al, Bo"
    assert "no chat template" in fallback
    encoder = SequenceEncoder(tokenizer, 256, tag_token=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            assert encoder.text(PROMPT, ANSWER, "en") == text
    warnings = fallback_warnings(caplog)
    assert len(warnings) == 1 and '"role: content" lines' in warnings[0]


def test_a_template_that_raises_names_its_error(caplog):
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m.role == 'assistant' and loop.first %}"
        "{{ raise_exception('a conversation must start with the user') }}{% endif %}"
        "{{ m.role }}> {{ m.content }}\n{% endfor %}"
    )
    encoder = SequenceEncoder(tokenizer, 256, tag_token=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert encoder.text(PROMPT, ANSWER, "en") == "user> Sort: Bo, Al\nassistant> Al, Bo\n"
        assert fallback_warnings(caplog) == []
        # a completion with no prompt starts with the assistant: the template refuses it
        assert encoder.text([], ANSWER, "en") == "assistant: Al, Bo"
        assert encoder.text([], ANSWER * 2, "en") == "assistant: Al, Bo\nassistant: Al, Bo"
    warnings = fallback_warnings(caplog)
    assert len(warnings) == 1
    assert "chat template raised" in warnings[0] and "must start with the user" in warnings[0]


@pytest.mark.parametrize("garbage", [None, 42, [{"role": None, "content": None}], "\ud800 lone surrogate"])
def test_garbage_still_renders(garbage):
    text = SequenceEncoder(tiny_tokenizer(), 256, tag_token=True).text(PROMPT, garbage, "en")
    assert isinstance(text, str)
