"""The one exception type for mistakes a user can fix (config, data, paths, checkpoints).

train.py catches it at the top and prints its message as one line with a non-zero exit, instead
of a traceback: the message must name the problem and the fix.
"""


class UserError(Exception):
    code = 2  # the exit code


class Interrupted(UserError):
    """Ctrl-C, with what the user needs to know to go on."""

    code = 130


def require(module: str, extra: str) -> None:
    """A UserError naming the extra to install when an optional dependency is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UserError(f"this needs {module}, which is not installed: pip install -e \".[{extra}]\"")
