"""Errors a user can cause: printed as one line, exit code 2, no traceback; and a training run
stopped by its generator (one line, a checkpoint, exit code 3)."""

import signal
import sys
from typing import NoReturn

EXIT_USER_ERROR = 2
# a run stopped because its generator apart from the trainer failed (generation ahead of training)
EXIT_GENERATOR_FAILED = 3


class UserError(Exception):
    """Bad input (config, data file, override): the message names the field and the fix."""


def reject(message: str) -> NoReturn:
    """Raise the UserError of a broken settings rule (the rules in grpo/<package>/checks.py)."""
    raise UserError(message)


def fail(message: str) -> None:
    """The one line of a fatal user error on stderr, then exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


class GeneratorFailed(RuntimeError):
    """Generation ahead of training stopped: the generator died, hung past its timeout or refused
    the trainer. `stage` and `step` say where (the last complete step, whose checkpoint the
    training stage writes before it raises this on)."""

    exit_code = EXIT_GENERATOR_FAILED

    def __init__(self, message: str, stage: str | None = None, step: int | None = None):
        super().__init__(message)
        self.stage, self.step = stage, step


def quiet_closed_pipe() -> None:
    """A command whose output is cut (`python -m grpo --help | head`) ends as Unix tools do,
    silently, not with a BrokenPipeError traceback: SIGPIPE back to its default action (Python
    ignores it and raises at the next write instead). Called first by every program's entry, in its
    `if __name__ == "__main__"` block only: never from a `main()` a test or notebook calls in process."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
