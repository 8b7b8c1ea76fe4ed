"""The front door: what runs before (and around) a run, for the person at the keyboard.

    preflight.py     `python -m grpo`'s command line checked before Hydra runs it: one line, exit 2
    checks.py        the registry of a run's settings rules (each in grpo/<package>/checks.py): one walk
    output_check.py  can the run write its outputs and its MLflow store?
    compare.py       `python -m grpo.cli.compare`: a sweep's jobs side by side, without the MLflow UI
    synthetic.py     `python -m grpo.cli.synthetic OUT.jsonl ...`: synthetic preference pairs

May import every package below the stages; nothing but the entry point and the stages import
it. Light: importing it imports no torch.
"""
