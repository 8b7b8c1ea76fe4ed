"""The settings rules of evaluation: the eval group (vf-eval's -n / -r, sampling, the Hub dataset
it may push to), and the rule that held-out validation and the evaluation share no eval row.

Walked by the registry grpo/cli/checks.py (`disjoint_eval_rows` through grpo/train/checks.py);
UserError (one line: field, value, fix) on the first rule broken. Light: no torch, no datasets."""

from __future__ import annotations

import math
import re

from grpo.config import EvalConfig
from grpo.errors import reject


def check_eval(e: EvalConfig) -> None:
    for key, flag, default in (("num_examples", "-n", 5), ("rollouts_per_example", "-r", 3)):
        value = getattr(e, key)
        if value < 1:
            reject(f"eval.{key} must be >= 1 (vf-eval {flag}), got {value}: set e.g. eval.{key}={default}")
    if e.temperature < 0 or not math.isfinite(e.temperature):
        reject(f"eval.temperature must be >= 0 (0 = greedy), got {e.temperature}")
    if not 0.0 < e.top_p <= 1.0:
        reject(f"eval.top_p must be in (0, 1], got {e.top_p}")
    if e.push_to_hub is not None:
        from grpo.evaluation.dataset import HUB_REPO_PATTERN, hub_token

        if not re.fullmatch(HUB_REPO_PATTERN, str(e.push_to_hub)):
            reject(f"eval.push_to_hub={e.push_to_hub}: expected a Hub dataset repo id, namespace/name")
        if not e.hub_token_env:
            reject("eval.hub_token_env is empty: name the environment variable holding the Hub token")
        if hub_token(e.hub_token_env) is None:
            reject(
                f"eval.push_to_hub={e.push_to_hub}: no Hub token: set ${e.hub_token_env} or run `hf auth login`"
            )


def disjoint_eval_rows(val_rows: int, eval_rows: int, size: int, split: str, fix: str) -> None:
    """The validation rows (trainer.val_num_examples, the split's last) and the evaluation's
    (eval.num_examples, its first) fit in the `size` rows of the eval split (`split` names it)."""
    if val_rows + eval_rows > size:
        reject(
            f"trainer.val_num_examples={val_rows} + eval.num_examples={eval_rows} exceed "
            f"{split}: validation takes the last rows of the eval split and evaluation the first ones, so "
            f"they would overlap; {fix}"
        )
