"""Errors a user can cause: printed as one line, exit code 2, no traceback."""

import sys
from typing import NoReturn

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input (config, data file, override): the message names the field and the fix."""


def reject(message: str) -> NoReturn:
    """Raise the UserError of a broken settings rule (the rules in grpo/<package>/checks.py)."""
    raise UserError(message)


def fail(message: str) -> None:
    """The one line of a fatal user error on stderr, then exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)
