"""Parsers shared by environments: the assistant turns of a completion and <tag>...</tag> fields,
found in linear time on any text (a lazy regex is quadratic on many unclosed open tags)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from grpo.envs.base import Messages


def assistant_turns(completion: Messages | Any) -> list[str]:
    """The text of each assistant message of a message list, in order (non-string content counts
    as empty; anything but a list has none)."""
    out = []
    for m in completion if isinstance(completion, list) else []:
        if isinstance(m, dict) and m.get("role") == "assistant":
            content = m.get("content")
            out.append(content if isinstance(content, str) else "")
    return out


def tag_spans(text: str, tag: str) -> list[tuple[int, int]]:
    """(start, end) of the content of every complete <tag>...</tag>, left to right.

    Same matches as `re.findall(r"<tag>(.*?)</tag>", text, re.DOTALL)`, found with str.find in
    linear time (the regex is quadratic on many unclosed open tags)."""
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return spans
        start += len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            # no close after this open means none after any later open either
            return spans
        spans.append((start, end))
        pos = end + len(close_tag)


def last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last complete <tag>...</tag> in text, or None when there is none."""
    if not isinstance(text, str):
        return None
    spans = tag_spans(text, tag)
    if not spans:
        return None
    start, end = spans[-1]
    return text[start:end]


@dataclass
class XMLParser:
    """Parses answers written as <tag>...</tag> fields; `think` may precede the answer."""

    answer_tag: str = "answer"
    optional_tags: list[str] = field(default_factory=lambda: ["think"])

    def parse_answer(self, text: str) -> str | None:
        content = last_tag_content(text, self.answer_tag)
        return None if content is None else content.strip()

    def format_score(self, text: str) -> float:
        """1.0 when the text is exactly: optional fields (each at most once), then one answer
        field, separated only by whitespace and with no tag inside a field; 0.5 for a parseable
        answer in a messier layout; 0.0 otherwise. Linear time, whatever the text."""
        if not isinstance(text, str) or not text.strip():
            return 0.0
        if self._strict_layout(text):
            return 1.0
        return 0.5 if self.parse_answer(text) is not None else 0.0

    def _strict_layout(self, text: str) -> bool:
        names = [self.answer_tag, *self.optional_tags]
        tag_re = re.compile("<(/?)(" + "|".join(re.escape(t) for t in names) + ")>")
        tags = [(m.start(), m.end(), m.group(1) == "/", m.group(2)) for m in tag_re.finditer(text)]
        # tags must pair up as open/close of the same field, in sequence
        if len(tags) % 2 or not tags:
            return False
        seen: set[str] = set()
        gap_start = 0
        for opening, closing in zip(tags[::2], tags[1::2], strict=True):
            o_start, _, o_closing, o_name = opening
            _, c_end, c_closing, c_name = closing
            if o_closing or not c_closing or o_name != c_name or o_name in seen:
                return False
            if text[gap_start:o_start].strip():
                return False
            seen.add(o_name)
            gap_start = c_end
        # the answer comes last, and nothing but whitespace follows it
        return tags[-1][3] == self.answer_tag and not text[gap_start:].strip()
