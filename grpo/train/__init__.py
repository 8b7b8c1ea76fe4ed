"""GRPO training on TRL's GRPOTrainer, configured from the trainer / optimizer / model / generation groups.

    trainer.py       the stage: `build_trainer` (the trainer and what surrounds it) and `train`
    rollout_func.py  TRL's `rollout_func`: the environment's episodes for a batch of prompts
    grpo_args.py     trl.GRPOConfig's arguments from our settings
    progress.py      the one compact line per logging step, and the zero-signal hint
    monitors.py      reward-hacking monitors computed from each batch's rollouts
    heldout.py       held-out evaluation during training (trainer.eval_steps) and the best
                     checkpoint kept (trainer.keep_best)
    checks.py        the settings rules of training (trainer, optimizer, turn budget, the rows it takes)

Imports the evaluator, the rollout engine, rewards, generation, models, tracking's interface and
the run's bookkeeping (grpo/run/); nothing imports it but the stages (and the settings registry
grpo/cli/checks.py, its rules only).
"""
