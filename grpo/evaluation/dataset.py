"""An evaluation as a Hugging Face dataset: saved next to results.jsonl, pushed to the Hub, and
described to MLflow as the run's evaluation input.

`save_eval_dataset(records, out_dir, task)` writes `<out_dir>/dataset` with `datasets`'
save_to_disk (written whole to a temporary dir, then renamed in place). Its columns are vf-eval's,
which are results.jsonl's with two more:

- every results.jsonl field as is (example_id, rollout_index, prompt, completion, messages,
  reward, one column per reward function and per score, language, num_turns, truncated), except
  `info`, stored as a JSON string: its keys and shapes differ between environments and between
  rows of one (an optional key), which one Arrow column type cannot hold;
- `answer`: the row's `info["answer"]` as text where the environment keeps one there, else "";
- `task`: the environment's name.

`push_eval_dataset` pushes it as split `<label>` of a Hub dataset repo (private unless asked
otherwise), with the token from an environment variable or, without one, huggingface_hub's saved
login. Any failure is one UserError line; the local files are written before it is tried.

`eval_input_rows(records, task)` are the examples evaluated (one row per example_id: prompt,
answer, info, task, language), what MLflow records as the run's dataset input: two evaluations
on the same rows have the same digest.

`datasets` and `huggingface_hub` are imported inside the functions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo.errors import UserError
from grpo.files import replace_dir, to_json
from grpo.run.layout import DATASET_DIR

# a Hub dataset repo id: namespace/name
HUB_REPO_PATTERN = r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*"


def answer_of(info: Any) -> str:
    """The ground-truth answer text of a row, "" when its environment keeps none in info."""
    answer = info.get("answer") if isinstance(info, dict) else None
    return "" if answer is None else str(answer)


def dataset_rows(records: Sequence[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """results.jsonl records as dataset rows (see the module docstring for the columns)."""
    return [
        {**rec, "info": to_json(rec.get("info") or {}), "answer": answer_of(rec.get("info")), "task": task}
        for rec in records
    ]


def eval_input_rows(records: Sequence[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """The evaluated examples, once each, in order: what the run was evaluated on."""
    seen: set[Any] = set()
    rows = []
    for rec in records:
        if rec["example_id"] in seen:
            continue
        seen.add(rec["example_id"])
        rows.append(
            {
                "example_id": rec["example_id"],
                "prompt": to_json(rec["prompt"]),
                "answer": answer_of(rec.get("info")),
                "info": to_json(rec.get("info") or {}),
                "task": task,
                "language": rec["language"],
            }
        )
    return rows


def save_eval_dataset(records: Sequence[dict[str, Any]], out_dir: Path, task: str) -> Path:
    """Write `<out_dir>/dataset` (save_to_disk), replacing an older one whole; returns its path."""
    from datasets import Dataset

    out_dir = Path(out_dir)
    out = out_dir / DATASET_DIR
    partial = Path(tempfile.mkdtemp(prefix=f".{DATASET_DIR}.", dir=out_dir))
    try:
        Dataset.from_list(dataset_rows(records, task)).save_to_disk(str(partial))
        return replace_dir(partial, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def hub_token(token_env: str) -> str | None:
    """The Hub token: $<token_env> if set, else huggingface_hub's saved login (None: neither)."""
    token = os.environ.get(token_env)
    if token:
        return token
    from huggingface_hub import get_token

    return get_token()


def push_eval_dataset(path: Path, repo_id: str, split: str, private: bool, token_env: str) -> str:
    """Push the saved dataset at `path` as split `split` of the Hub dataset `repo_id`; returns the
    repo's URL. A failure (no token, no network, a refused repo) is one UserError line."""
    from datasets import load_from_disk

    token = hub_token(token_env)
    if token is None:
        raise UserError(
            f"eval.push_to_hub={repo_id}: no Hub token (set ${token_env} or run `hf auth login`); "
            f"the dataset is saved in {path}"
        )
    try:
        load_from_disk(str(path)).push_to_hub(repo_id, split=split, private=private, token=token)
    except Exception as ex:  # noqa: BLE001 - network, auth and repo errors all end the same way
        reason = " ".join(f"{type(ex).__name__}: {ex}".split())[:300]
        raise UserError(
            f"eval.push_to_hub={repo_id}: could not push the {split} evaluation ({reason}); "
            f"it is saved in {path}"
        ) from ex
    return f"https://huggingface.co/datasets/{repo_id}"
