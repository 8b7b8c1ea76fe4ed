"""Synthetic preference pairs written to a JSONL file, for the reward model stage to train on.

    python -m grpo.cli.synthetic data/prefs.jsonl +env=alphabet_sort \\
        'reward_model.data.synthetic.languages=[en,sv]'

The command line is composed and checked as `python -m grpo` checks it (one line and exit 2 on a
problem); the pairs are those the reward_model stage would make (grpo/reward_model/synthetic.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from grpo.cli.preflight import check, fail
from grpo.errors import UserError
from grpo.reward_model.data import write_pairs
from grpo.reward_model.synthetic import pairs_from_config


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m grpo.cli.synthetic OUT.jsonl [overrides]`: write synthetic pairs."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-") or "=" in args[0]:
        fail(
            "usage: python -m grpo.cli.synthetic OUT.jsonl +env=NAME [reward_model.data.synthetic.KEY=VALUE ...]"
        )
    out, overrides = args[0], args[1:]
    try:
        pairs = pairs_from_config(check(overrides))
        path = write_pairs(out, pairs)
    except UserError as ex:
        fail(str(ex))
        return
    by_language: dict[str, int] = {}
    for pair in pairs:
        by_language[pair.language] = by_language.get(pair.language, 0) + 1
    counts = ", ".join(f"{code} {count}" for code, count in sorted(by_language.items()))
    print(f"wrote {len(pairs)} preference pairs ({counts}) to {path}")


if __name__ == "__main__":
    from grpo.errors import quiet_closed_pipe

    quiet_closed_pipe()
    main()
