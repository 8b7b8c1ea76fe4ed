"""Chat messages as the text a table cell shows (MLflow's sample and completions tables). Light."""

from __future__ import annotations

import json
from typing import Any


def render_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def render_messages(messages: Any) -> str:
    """Chat messages as readable text: one message as its content, several as `[role] content` blocks."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return render_text(messages)
    if len(messages) == 1 and isinstance(messages[0], dict):
        return render_text(messages[0].get("content", ""))
    return "\n\n".join(
        f"[{m.get('role', '?')}] {render_text(m.get('content', ''))}"
        if isinstance(m, dict)
        else render_text(m)
        for m in messages
    )


def last_user_message(prompt: Any) -> str:
    if isinstance(prompt, list):
        for m in reversed(prompt):
            if isinstance(m, dict) and m.get("role") == "user":
                return render_text(m.get("content", ""))
    return render_messages(prompt)
