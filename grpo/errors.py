"""Errors a user can cause: printed as one line, exit code 2, no traceback."""


class UserError(Exception):
    """Bad input (config, data file, override): the message names the field and the fix."""
