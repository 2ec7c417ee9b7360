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
    """The module docstring as written, and each option's default: not where the help text already says it,
    nor where there is none (None: the help says what happens without the option)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or "(default" in text:
            return text
        return super()._get_help_string(action)


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
        if names and names[0].startswith("-") and kwargs.get("default") is not None:
            kwargs.setdefault("help", "(default: %(default)s)")  # argparse shows a default only beside a help text
        return super().add_argument(*names, *others, **kwargs)

    def show_sets(self, sets: dict[str, dict], word: str) -> None:
        """For the options whose defaults come from a named set of settings (``--preset``, ``--recipe``),
        each set's value in their help: ``(preset) prompts per step [cpu: 16, tinyzero: 64]``."""
        for action in self._actions:
            if any(action.dest in values for values in sets.values()):
                shown = ", ".join(f"{name}: {'unset' if values.get(action.dest) is None else values[action.dest]}"
                                  for name, values in sets.items())
                text = action.help or ""
                text = text if text.startswith(f"({word})") else f"({word}) {text}".rstrip()
                action.help = f"{text} [{shown}]"


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
