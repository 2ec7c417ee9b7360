"""The command-line convention of every entry point (train.py's keys aside, which configurator.py reads).

- Options are spelled with underscores, as train.py's keys are (``--block_size``); the hyphenated
  spelling (``--block-size``) is accepted too, so either habit works everywhere.
- The same name means the same thing: ``--beta1``/``--beta2``, ``--batch_size``, ``--block_size``,
  ``--seed``, ``--device``.
- ``--out``: for the tools that run training (sweep, grpo), the folder their runs go in; for the
  scripts that make figures and tables, a file stem, OUT.png and OUT.csv (``--out x.png`` means x).
  Nothing writes into the repository's committed results/ unless ``--out`` says so: the default is
  under out/.
- ``--help`` shows every option with its default.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default."""


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that accepts both spellings of every long option and shows defaults."""

    def __init__(self, *args, **kwargs):
        kwargs["formatter_class"] = _Formatter
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        others = []
        for name in names:
            if name.startswith("--") and len(name) > 2:
                body = name[2:]
                other = "--" + (body.replace("_", "-") if "_" in body else body.replace("-", "_"))
                if other != name and other not in names and other not in others:
                    others.append(other)
        if names and names[0].startswith("-"):
            kwargs.setdefault("help", "(default: %(default)s)")  # argparse shows a default only beside a help text
        return super().add_argument(*names, *others, **kwargs)


def run(action: Callable[[], object]) -> int:
    """0 once ``action()`` has run; a mistake the user can fix (errors.UserError) is one `error:` line on
    stderr and 2, never a traceback."""
    from errors import UserError

    try:
        action()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
