"""The row bookkeeping the verifiers adapters share: rows read from a loaded source (a verifiers
dataset, a v1 taskset), the first `num_<split>_examples` of each split (None: all), read once."""

from __future__ import annotations

from typing import Any

from grpo.envs.base import Environment, Row, int_arg


class LoadedRowsEnv(Environment):
    """Subclasses call `_set_limits` in their constructor and implement `_load_rows(split)`."""

    def _set_limits(self, num_train_examples: Any, num_eval_examples: Any) -> None:
        self.limits: dict[str, int | None] = {
            "train": None
            if num_train_examples is None
            else int_arg("num_train_examples", num_train_examples, 1),
            "eval": None if num_eval_examples is None else int_arg("num_eval_examples", num_eval_examples, 1),
        }
        self._rows: dict[str, list[Row]] = {}

    def rows(self, split: str = "train", n: int | None = None) -> list[Row]:
        """The first n rows of `split`, in the source's order (read once, then kept)."""
        if split not in self.limits:
            raise ValueError(f"unknown split {split!r}: use 'train' or 'eval'")
        if split not in self._rows:
            self._rows[split] = self._load_rows(split)
        rows = self._rows[split]
        return list(rows if n is None else rows[:n])

    def _load_rows(self, split: str) -> list[Row]:
        """Every row of `split` within `self.limits[split]`."""
        raise NotImplementedError
