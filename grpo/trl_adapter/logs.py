"""What the ML libraries print that is not the user's business, silenced at its source
(`quiet_library_notices`; `quiet_progress_bars` for one block); every other warning of theirs
still prints. Light: the libraries are imported inside the functions."""

from __future__ import annotations

import ast
import contextlib
import logging
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """No datasets / transformers progress bars inside the block (TRL's dataset preparation, shard
    writing, a verifiers environment formatting its dataset): the caller prints its own lines.
    The previous setting is restored."""
    from datasets.utils import logging as datasets_logging
    from transformers.utils import logging as transformers_logging

    datasets_on = datasets_logging.is_progress_bar_enabled()
    transformers_on = transformers_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if datasets_on:
            datasets_logging.enable_progress_bar()
        if transformers_on:
            transformers_logging.enable_progress_bar()


def quiet_library_notices(model: Any = None) -> None:
    """Silence, each at its source, what the libraries print that is not the user's business:
    - transformers' FutureWarning for `is_gradient_checkpointing`, which TRL (not the user) reads
      at every generation and checkpoint (trl/models/utils.py);
    - transformers' "Loading weights" / "Writing model shards" bars (grpo prints what it loads);
    - "mtime may not be reliable on this filesystem" when the trainer rotates checkpoints;
    - accelerate's INFO lines for each FSDP shard saved or loaded;
    - on resume, "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" when
      the missing keys are tied to parameters that were loaded (the tiny / small models and
      Qwen3-0.6B tie the LM head to the embeddings; safetensors stores a tied tensor once).
    Other warnings of these libraries still print. Idempotent."""
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings(
        "ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning
    )
    hf_logging.disable_progress_bar()
    # FSDP checkpoints: accelerate logs every save and load of each shard at INFO
    logging.getLogger("accelerate.utils.fsdp_utils").setLevel(logging.WARNING)
    # checkpoint rotation on filesystems with coarse mtimes (overlay, NFS): it then orders the
    # checkpoints by step number, which is what grpo's own resume does anyway (grpo/run/checkpoints.py)
    utils_log = hf_logging.get_logger("transformers.trainer_utils")
    if not any(isinstance(f, _MtimeFilter) for f in utils_log.filters):
        utils_log.addFilter(_MtimeFilter())
    tied = tied_parameter_names(model) if model is not None else set()
    if tied:
        trainer_log = hf_logging.get_logger("transformers.trainer")
        for old in [f for f in trainer_log.filters if isinstance(f, _TiedKeysFilter)]:
            trainer_log.removeFilter(old)
        trainer_log.addFilter(_TiedKeysFilter(tied))


def tied_parameter_names(model: Any) -> set[str]:
    """Names of parameters that share their tensor with another parameter (tied weights)."""
    by_tensor: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(param), []).append(name)
    return {name for names in by_tensor.values() if len(names) > 1 for name in names}


class _MtimeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("mtime may not be reliable on this filesystem")


class _TiedKeysFilter(logging.Filter):
    """Drops transformers' missing-keys warning when every missing key is a tied parameter."""

    PREFIX = "There were missing keys in the checkpoint model loaded: "

    def __init__(self, tied: set[str]) -> None:
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.PREFIX):
            return True
        try:
            missing = ast.literal_eval(message[len(self.PREFIX) :].rstrip("."))
        except (ValueError, SyntaxError):
            return True
        # peft wraps names (base_model.model.lm_head.weight): compare by suffix
        return not all(any(str(k).endswith(t) or t.endswith(str(k)) for t in self.tied) for k in missing)
