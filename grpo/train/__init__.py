"""GRPO training on TRL's GRPOTrainer: the trainer, its monitors, held-out evaluation."""
