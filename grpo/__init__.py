"""grpo: a config-driven Hydra framework for GRPO fine-tuning of language models, in any language."""

__version__ = "0.1.0"
