"""What an evaluation reads of a run's settings, picked once: `EvalSetup.of(settings)`.

The evaluator takes this, not the whole settings: eval.* (how many rows and rollouts, how it
samples), the episode's token budget (trainer.max_completion_length, all turns together), and what
its header and metadata.json record (the generation and model groups, the env's arguments).
Light: the schema only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo.config import EvalConfig, GenerationConfig, GrpoConfig, ModelConfig


@dataclass(frozen=True)
class EvalSetup:
    """An evaluation's settings (see the module docstring); built from checked settings."""

    eval: EvalConfig
    generation: GenerationConfig
    model: ModelConfig
    # an episode's completion tokens over all its turns (trainer.max_completion_length)
    max_completion_tokens: int
    # the env group's arguments but its _target_ (metadata.json records the class as env_class)
    env_args: dict[str, Any]

    @classmethod
    def of(cls, settings: GrpoConfig) -> EvalSetup:
        """The parts of a run's `settings` an evaluation reads."""
        return cls(
            eval=settings.eval,
            generation=settings.generation,
            model=settings.model,
            max_completion_tokens=settings.trainer.max_completion_length,
            env_args={k: v for k, v in (settings.env or {}).items() if k != "_target_"},
        )
