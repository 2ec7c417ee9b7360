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
import contextlib
import errno
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default: not where the help text already says it,
    nor where there is none (None: the help says what happens without the option)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or "(default" in text:
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that accepts both spellings of every long option, shows defaults, and
    reports a mistake as one ``error:`` line (exit 2), never a usage block."""

    def __init__(self, *args, **kwargs):
        kwargs["formatter_class"] = _Formatter
        if "prog" not in kwargs:  # the command as it is typed: python -m scripts.sweep, not sweep.py or __main__.py
            caller = sys._getframe(1).f_globals
            spec = caller.get("__spec__")
            if spec is not None and spec.name:
                kwargs["prog"] = f"python -m {spec.name.removesuffix('.__main__')}"
            elif caller.get("__file__"):
                kwargs["prog"] = f"python {Path(caller['__file__']).name}"
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        from errors import UserError

        raise UserError(f"{message} (see {self.prog} --help)")

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


# --- kinds of values: each option's type and range, declared once where the option is -------------------------


class Kind:
    """A kind of option value: how the command line spells it, and which values are allowed.

    ``kind("12")`` reads a command-line string (argparse's ``type=``); ``kind.check(value)`` admits a
    Python value (a config file's); both refuse, naming what is wanted, anything outside the range.
    """

    def __init__(self, says: str, parse: Callable[[str], object], admits: Callable[[object], bool],
                 base: type | None = None):
        self.parse, self.admits, self.base = parse, admits, base
        self.described = lambda: says
        self.__name__ = says  # argparse names the kind in its messages

    @property
    def says(self) -> str:
        return self.described()

    def __call__(self, text: str):
        try:
            value = self.parse(text)
        except (ValueError, TypeError, OverflowError):
            raise argparse.ArgumentTypeError(f"must be {self.says}, got {text!r}") from None
        if not self.admits(value):
            raise argparse.ArgumentTypeError(f"must be {self.says}, got {text!r}")
        return value

    def check(self, value) -> bool:
        """Whether the Python ``value`` is of this kind."""
        try:
            return (self.base is None or isinstance(value, self.base)) and bool(self.admits(value))
        except (TypeError, ValueError):
            return False

    def __repr__(self) -> str:
        return f"Kind({self.says!r})"


LARGEST = 2**53  # no count, size or step number here is larger; beyond it floats lose integers


def _integer(text: str) -> int:
    """An integer, also as 1e5 or 2_000."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise
        return int(value)


def integer(low: int, high: int = LARGEST, says: str | None = None) -> Kind:
    says = says or (f"an integer >= {low}" if high == LARGEST else f"an integer from {low} to {high}")
    return Kind(says, _integer, lambda v: not isinstance(v, bool) and low <= v <= high, int)


def number(low: float = 0.0, high: float = math.inf, low_open: bool = False, high_open: bool = True,
           says: str | None = None) -> Kind:
    def admits(v) -> bool:
        if isinstance(v, bool) or not math.isfinite(v):
            return False
        return (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    if says is None:
        lo = f"> {low:g}" if low_open else f">= {low:g}"
        says = f"a finite number {lo}" if high == math.inf else \
            f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Kind(says, float, admits, (int, float))


def choice(*allowed: str, lazily: Callable[[], Iterable[str]] | None = None) -> Kind:
    """One of ``allowed``, or of what ``lazily()`` gives (a list known once a module is imported)."""
    options = (lambda: tuple(lazily())) if lazily else (lambda: allowed)
    kind = Kind("one of " + ", ".join(allowed), str, lambda v: v in options(), str)
    if lazily:
        kind.described = lambda: "one of " + ", ".join(options())
    return kind


def text(says: str = "a non-empty string") -> Kind:
    return Kind(says, str, lambda v: v != "" and "\0" not in v, str)


def _path(text: str) -> Path:
    if text == "" or "\0" in text:
        raise ValueError(text)
    return Path(text)


def _writable_place(path: Path) -> bool:
    """Whether output can go to ``path``: the nearest part above it that exists is a folder (a file there
    would make every folder below it impossible)."""
    above = next((p for p in path.parents if p.exists() or p.is_symlink()), Path("."))
    return above.is_dir()


assignment = Kind("KEY=VALUE", str, lambda v: re.fullmatch(r"[A-Za-z_][\w-]*=.*", v) is not None, str)
count = integer(1)  # how many of something: at least one
natural = integer(0)  # a count that may be zero
seed = integer(0, 2**31 - 1, "a seed from 0 to 2147483647")
positive = number(0.0, low_open=True)
nonnegative = number(0.0)
fraction = number(0.0, 1.0, low_open=True, says="a fraction in (0, 1)")
beta = number(0.0, 1.0, says="a number in [0, 1)")
file = Kind("an existing file", _path, lambda p: p.is_file(), Path)
folder = Kind("an existing folder", _path, lambda p: p.is_dir(), Path)
existing = Kind("an existing file or folder", _path, lambda p: p.exists(), Path)
place = Kind("a path below a folder (not below a file)", _path, _writable_place, Path)  # where output goes


def main(entry: Callable[[list[str] | None], object], argv: list[str] | None = None) -> int:
    """A module's ``entry(argv)`` through the error wrapper: its exit code (what ``run`` says). Every command's
    ``if __name__ == "__main__"`` ends the process with it."""
    return run(lambda: entry(argv))


def run(action: Callable[[], object]) -> int:
    """``action()``'s result where it is an exit code (an int), else 0 once it has run. A mistake the user can fix (errors.UserError), a file the disk refuses
    (an OSError that names its path) and Ctrl-C are each one ``error:`` line on stderr and a non-zero exit
    (2, 2, 130), never a traceback."""
    import os

    from errors import UserError

    def say(line: str) -> None:
        # under torchrun, one process says what went wrong; a RANK left in a shell's environment silences nobody
        if os.environ.get("RANK", "0") == "0" or "TORCHELASTIC_RUN_ID" not in os.environ:
            print(f"error: {line}", file=sys.stderr)

    try:
        with stop_signals_as_ctrl_c():
            result = action()
    except UserError as e:
        say(str(e))
        return e.code
    except BrokenPipeError:  # the reader went away (``--help | head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if e.filename is None and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            say(f"the disk is full or a file-size limit was reached ({e.strerror}); free space or raise the limit, then run "
                "the command again (what it was writing is not kept)")
            return 2
        if e.filename is None:
            raise
        where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
        say(f"{where}: {e.strerror or e}; check the path and its permissions")
        return 2
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


@contextlib.contextmanager
def stop_signals_as_ctrl_c():
    """SIGTERM (kill, a scheduler, torchrun stopping its workers) and SIGHUP (a closed terminal) stop a command as
    Ctrl-C does (KeyboardInterrupt): it says where it stopped and keeps what is complete. From the main thread only;
    the previous handlers come back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def progress(items: Iterable, desc: str, total: int | None = None, every: float = 30.0) -> Iterator:
    """``items`` as they are used, with their progress: a tqdm bar on a terminal; when stderr is redirected (a log
    file), a plain line after the first item, then at most every ``every`` seconds, and at the end of anything
    that took longer than that: ``DESC: I/TOTAL, S s, about L s left``. Long commands are never silent."""
    import time

    if total is None and hasattr(items, "__len__"):
        total = len(items)
    if sys.stderr.isatty():
        from tqdm import tqdm

        yield from tqdm(items, desc=desc, total=total)
        return
    start = last = time.monotonic()
    done = 0
    for done, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if done == 1 or now - last >= every or (done == total and now - start >= every):
            left = f", about {(now - start) / done * (total - done):.0f} s left" if total and done < total else ""
            print(f"{desc}: {done}/{total or '?'}, {now - start:.0f} s{left}", file=sys.stderr, flush=True)
            last = now


def library_bars_on_terminals_only() -> None:
    """Hugging Face's own progress bars (loading a model, writing its shards) off when stderr is not a terminal,
    so a redirected log holds the command's lines, not carriage-return bars."""
    if not sys.stderr.isatty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
