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
