"""Evaluation: n examples x r rollouts of a policy on an environment, scored, summarised, saved.

    evaluator.py  `evaluate` (the eval stage) and `evaluate_rows` (any rows; held-out evaluation
                  during training uses it): rollouts, scoring, results.jsonl and metadata.json
    summary.py    `EvalResult` and `summarize`: mean, std, per function, per language, pass@k
    setup.py      `EvalSetup`: the part of a run's settings an evaluation reads
    report.py     the printed vf-eval-like report and the header recorded with it
    dataset.py    an evaluation as a Hugging Face dataset: saved, pushed to the Hub, described
                  to MLflow
    checks.py     the settings rules of the eval group, and the eval rows validation leaves it

Imports envs, the rollout engine and generation's types; nothing above it. Light at import.
"""
