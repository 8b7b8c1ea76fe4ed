"""Chat messages as the text a table cell shows (MLflow's sample and completions tables), and such a
table as a page MLflow's artifact viewer shows whole (`rows_html`: its table view cuts every cell
to a few characters). Light."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

# the columns `rows_html` shows as text blocks, in full, and those in each row's heading
TEXT_COLUMNS = ("prompt", "completion")
HEADING_COLUMNS = ("language", "reward")
_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px; color: #1f272d; }
h2 { font-size: 17px; margin: 0 0 12px; }
section { border-top: 1px solid #d1d9e1; padding: 10px 0 14px; }
h3 { font-size: 14px; margin: 0 0 2px; }
.meta { color: #5f7281; margin: 0 0 6px; }
.label { color: #5f7281; font-size: 12px; text-transform: uppercase; margin-top: 6px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 2px 0; padding: 6px 8px;
      background: #f6f7f9; border-radius: 4px; font: 13px/1.4 ui-monospace, monospace; }
"""


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


def rows_html(table: Mapping[str, Sequence[Any]], title: str) -> str:
    """The rows of a column table (`{column: values}`, as MLflow's log_table takes it) as an HTML
    page: per row a heading (its number, language, reward), a line of its other values, then its
    prompt and completion in full, wrapped, as the model saw and wrote them."""
    count = max((len(values) for values in table.values()), default=0)
    others = [c for c in table if c not in TEXT_COLUMNS and c not in HEADING_COLUMNS and c != "step"]
    sections = []
    for i in range(count):
        row = {column: values[i] if i < len(values) else None for column, values in table.items()}
        heading = [f"#{i + 1}"]
        if row.get("language"):
            heading.append(str(row["language"]))
        if "reward" in row:
            heading.append(f"reward {_cell(row['reward'])}")
        meta = " · ".join(f"{c} {_cell(row[c])}" for c in others)
        blocks = "".join(
            f'<div class="label">{column}</div><pre>{html.escape(str(row[column] or "")) or "(empty)"}</pre>'
            for column in TEXT_COLUMNS
            if column in row
        )
        sections.append(
            f"<section><h3>{html.escape(' · '.join(heading))}</h3>"
            f'<p class="meta">{html.escape(meta)}</p>{blocks}</section>'
        )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h2>{html.escape(title)}</h2>{''.join(sections)}</body></html>\n"
    )


def _cell(value: Any) -> str:
    """A table value in a line of text: numbers to 4 significant digits, no value as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
