"""The one exception type for mistakes a user can fix (config, data, paths, checkpoints).

train.py catches it at the top and prints its message as one line with a non-zero exit, instead
of a traceback: the message must name the problem and the fix.
"""


class UserError(Exception):
    pass
