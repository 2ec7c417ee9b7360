"""A fuzzer of every command: it finds the entry points and their options by itself, and tries hostile values.

Entry points are the repository's Python files with an ``if __name__ == "__main__":`` block; each one's
options come from its own parser (cli.Parser, or train.py's, built from TrainConfig), caught as the
command parses its arguments. No list of commands or options is kept here.

Each try runs one command with one option set to one hostile value (0, -1, NaN, inf, a huge number, an
empty string, a missing path, a file where a folder is expected and the reverse, a symbolic link, and
each folder of the world: a finished run, one whose checkpoints are gone, a GRPO run, an export, a
dataset, a packed scan and a path inside it). The other required arguments get a neutral value (a new
path for outputs, the first world path the parser takes for inputs), and ``--out`` a new path, so
that commands never write into the repository. A try runs in a child forked from a clean process that has imported the commands'
modules (tens of milliseconds for a try that fails at parsing), in a process group of its own, from the
world's folder. A try still running at its time limit gets SIGINT, as Ctrl-C would, and must then end as Ctrl-C
does. After each try the world is checked (every file and link there before is unchanged) and the
try's new files are removed.

A try passes when it ends with exit 0, or with a non-zero exit and exactly one line on stderr that starts
with ``error:``, and never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import re
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = {".venv", "venv", "tests", "build", ".git", "out"}


class _Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


@dataclass
class Entry:
    name: str  # as a user types it: train.py, scripts.sweep, study/lr_ratio.py
    path: Path
    function: str  # what its __main__ block calls


def entry_points(roots=("",)) -> list[Entry]:
    """Every file with a __main__ block under ``roots`` (relative to the repository), tests and venvs aside."""
    found = []
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            if SKIP & set(rel.parts[:-1]) or path.name.startswith("."):
                continue
            source = path.read_text()
            start = re.search(r'^if __name__ == "__main__":', source, re.M)
            if not start:
                continue
            block = source[start.start():]
            match = re.search(r"cli\.main\((\w+)\)", block) or re.search(r"(\w+)\(sys\.argv\[1:\]\)", block)
            assert match, f"{rel}: its __main__ block does not run through cli.main (the one error wrapper)"
            dotted = ".".join(rel.with_suffix("").parts)
            packaged = all((REPO.joinpath(*rel.parts[:i]) / "__init__.py").is_file() for i in range(1, len(rel.parts)))
            found.append(Entry(dotted if packaged else rel.as_posix(), path, match.group(1)))
    return found


def load(entry: Entry):
    """The entry's module, imported as the command imports it."""
    if entry.name.endswith(".py") and "/" in entry.name:
        spec = importlib.util.spec_from_file_location(f"_fuzzed_{entry.path.stem}", entry.path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(entry.name)


def parser_of(entry: Entry):
    """The command's argparse parser, caught as the command parses (it runs nothing else)."""
    import argparse

    module = load(entry)
    function = getattr(module, entry.function)

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    saved = {name: getattr(argparse.ArgumentParser, name) for name in ("parse_args", "parse_intermixed_args",
                                                                        "parse_known_args")}
    for name in saved:
        setattr(argparse.ArgumentParser, name, capture)
    try:
        function([])
    except _Captured as caught:
        return module, function, caught.parser
    finally:
        for name, method in saved.items():
            setattr(argparse.ArgumentParser, name, method)
    raise AssertionError(f"{entry.name} did not parse its arguments with an argparse parser")


@dataclass
class Argument:
    flag: str | None  # None: a positional
    dest: str
    takes_value: bool
    required: bool
    type: object


def arguments(parser) -> list[Argument]:
    out = []
    for action in parser._actions:
        if action.option_strings and set(action.option_strings) & {"-h", "--help"}:
            continue
        if getattr(action, "choices", None) is not None and hasattr(action, "_name_parser_map"):  # subcommands
            continue
        flag = max(action.option_strings, key=len) if action.option_strings else None
        takes = action.nargs != 0
        out.append(Argument(flag, action.dest, takes, bool(action.required or flag is None), action.type))
    return out


def subparsers(parser) -> dict:
    for action in parser._actions:
        if hasattr(action, "_name_parser_map"):
            return dict(action._name_parser_map)
    return {}


OUTPUT_NAMES = re.compile(r"(^|_)(out|dst|hf_dir|out_dir|json)$")


def hostile(world: dict[str, Path]) -> dict[str, str]:
    """The values every option is tried with, by name."""
    return {"zero": "0", "minus one": "-1", "nan": "nan", "inf": "inf", "huge": "1e30", "empty": "",
            "missing path": str(world["root"] / "missing" / "nothing"), "file for a folder": str(world["token file"]),
            "folder for a file": str(world["finished run"]), "symlink": str(world["symlink"]),
            **{name: str(path) for name, path in world.items() if name not in ("root", "token file", "symlink", "config")}}


def neutral(arg: Argument, world: dict[str, Path], n: int) -> str:
    """A value for a required argument that is not the one under test."""
    if OUTPUT_NAMES.search(arg.dest):
        return str(world["root"] / "new" / f"{arg.dest}_{n}")
    if arg.dest == "configs":
        return str(world["config"])
    if arg.type is not None and callable(arg.type):
        for name in ("finished run", "dataset", "export", "token file"):
            try:
                arg.type(str(world[name]))
                return str(world[name])
            except Exception:
                continue
    return str(world["finished run"])


def argv_for(args: list[Argument], under_test: Argument, value: str | None, world: dict[str, Path],
             keyed: bool) -> list[str]:
    """The command line: neutral required arguments, --out somewhere new, and the one under test."""
    argv: list[str] = []
    for n, arg in enumerate(args):
        if arg is under_test:
            continue
        if arg.flag is None:
            if arg.dest != "configs" or keyed:
                argv.append(neutral(arg, world, n))
        elif (arg.required or (arg.flag in ("--out", "--out_dir") and not keyed)) and arg.takes_value:
            argv += [f"{arg.flag}={neutral(arg, world, n)}"]
    if under_test.flag is None:
        argv.insert(0, value)
    elif under_test.takes_value:
        argv.append(f"{under_test.flag}={value}")
    else:
        argv.append(under_test.flag)
    return argv


CONTENTS = ("binary file", "empty file", "deeply nested JSON", "a config that exits")  # plain files: inputs' contents


def tries(entry: Entry, world: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(label, argv) for every argument of the entry and every hostile value (a flag: once, given)."""
    module, function, parser = parser_of(entry)
    keyed = entry.name == "train"  # train.py: config files, then --key=value
    values = hostile(world)
    found = []
    for prefix, p in [("", parser), *((f"{name} ", sub) for name, sub in subparsers(parser).items())]:
        args = arguments(p)
        for arg in args:
            label = f"{entry.name} {prefix}{arg.flag or arg.dest}"
            if not arg.takes_value:
                found.append((label, [*prefix.split(), *argv_for(args, arg, None, world, keyed)]))
                continue
            for name, value in values.items():
                if name in CONTENTS and OUTPUT_NAMES.search(arg.dest):
                    continue  # an output named at a plain file of the user's replaces it: asked for, not hostile
                found.append((f"{label}={name}", [*prefix.split(), *argv_for(args, arg, value, world, keyed)]))
    return found


# Environment variables the project reads, set as a shell might have left them (each with the command's neutral line)
ENVIRONMENTS = {"a torchrun job's RANK left behind": dict(RANK="1"), "a partial launch": dict(RANK="0", WORLD_SIZE="2"),
                "an unknown WANDB_MODE": dict(WANDB_MODE="garbage")}


def environment_tries(entry: Entry, world: dict[str, Path]) -> list[tuple[str, list[str], dict]]:
    """(label, argv, environment): the command's neutral command line under each of ENVIRONMENTS."""
    _, _, parser = parser_of(entry)
    args = arguments(parser)
    keyed = entry.name == "train"
    argv = []
    for n, arg in enumerate(args):
        if arg.flag is None and (arg.dest != "configs" or keyed):
            argv.append(neutral(arg, world, n))
        elif arg.flag is not None and arg.takes_value and (arg.required or arg.flag in ("--out", "--out_dir")):
            argv.append(f"{arg.flag}={neutral(arg, world, n)}")
    if keyed:
        argv += ["--wandb_log=True"]
    return [(f"{entry.name} with {label}", argv, env) for label, env in ENVIRONMENTS.items()]


def refused_at_parsing(entry: Entry, argv: list[str]) -> bool:
    """Whether the command's own parser refuses ``argv`` (a try that ends at once, before any work)."""
    from errors import UserError

    _, _, parser = parser_of(entry)
    try:
        if entry.name == "train":
            import configurator

            configurator.load_explicit(argv)
        else:
            parser.parse_args(argv)
    except (UserError, SystemExit):
        return True
    return False


# --- one try, in a forked child ----------------------------------------------------------------------------


def state(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` that a try must leave as it was: (kind, size, mtime, inode, link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            link = os.readlink(path) if path.is_symlink() else None
            out[str(path.relative_to(root))] = (st.st_mode, st.st_size if not path.is_dir() else 0,
                                                 st.st_mtime_ns if not path.is_dir() else 0, st.st_ino, link)
    return out


@dataclass
class Outcome:
    label: str
    argv: list[str]
    code: int
    stderr: str
    stopped: bool  # still running at the time limit: sent SIGINT
    changed: list[str]

    def problem(self) -> str | None:
        errors = [line for line in self.stderr.splitlines() if line.startswith("error:")]
        if "Traceback" in self.stderr:
            return "a traceback"
        if self.changed:
            return f"changed what it did not make: {self.changed[:3]}"
        if self.code != 0 and len(errors) != 1:
            return f"exit {self.code} with {len(errors)} error lines"
        if self.stopped and self.code != 130:
            return f"stopped at its time limit, then exit {self.code} (Ctrl-C's is 130)"
        return None


def repository() -> set[str]:
    """The repository's files and folders two levels down (git's own aside): where a command told to write
    elsewhere must not have written."""
    out = set()
    for top in REPO.iterdir():
        if top.name in (".git", ".venv", ".pytest_cache", ".ruff_cache", ".hypothesis", "__pycache__"):
            continue
        out.add(top.name)
        if top.is_dir() and not top.is_symlink():
            out.update(f"{top.name}/{child.name}" for child in top.iterdir() if child.name != "__pycache__")
    return out


class Runner:
    """Runs tries in children forked from a clean process (a 'zygote'): one that has imported the commands'
    modules but never run torch, so that no thread pool or lock of a parent is inherited half-held."""

    def __init__(self):
        import subprocess

        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env["OMP_NUM_THREADS"] = "1"
        env["PYTHONPATH"] = str(REPO)  # as python -m from the root: the children change folder, '' would follow them
        self.proc = subprocess.Popen([sys.executable, "-c", "from tests.fuzzing import serve; serve()"], cwd=REPO,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, entry: Entry, label: str, argv: list[str], world: dict[str, Path], limit: float,
            environment: dict | None = None) -> Outcome:
        import json

        root = world["root"]
        before, repo_before = state(root), repository()
        self.proc.stdin.write(json.dumps(dict(name=entry.name, path=str(entry.path), function=entry.function,
                                              argv=argv, cwd=str(root), limit=limit, env=environment or {})) + "\n")
        reply = json.loads(self.proc.stdout.readline())
        after = state(root)
        changed = sorted(k for k, v in before.items() if after.get(k) != v)
        changed += [f"the repository's {name}" for name in sorted(repository() - repo_before)]
        for new in sorted(set(after) - set(before), key=len):  # the try's own output goes, for the next try
            path = root / new
            if os.path.lexists(path):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        return Outcome(label, argv, reply["code"], reply["stderr"], reply["stopped"], changed)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def serve() -> None:
    """The zygote: for each request on stdin, fork a child that runs the command, and report how it ended."""
    import json

    functions = {}
    err_path = Path(f"/tmp/fuzz_stderr_{os.getpid()}")
    for line in sys.stdin:
        request = json.loads(line)
        entry = Entry(request["name"], Path(request["path"]), request["function"])
        if entry.name not in functions:
            functions[entry.name] = getattr(load(entry), entry.function)
        code, stopped = _fork_and_wait(entry, functions[entry.name], request["argv"], Path(request["cwd"]),
                                       request["limit"], err_path, request.get("env", {}))
        stderr = err_path.read_text(errors="replace") if err_path.exists() else ""
        err_path.unlink(missing_ok=True)
        print(json.dumps(dict(code=code, stderr=stderr, stopped=stopped)), flush=True)


def _fork_and_wait(entry: Entry, function, argv: list[str], cwd: Path, limit: float, err_path: Path,
                   environment: dict | None = None):
    pid = os.fork()
    if pid == 0:  # the child: the command, as its __main__ block would run it
        code = 99
        try:
            os.setpgrp()
            os.environ.update(environment or {})
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), write_through=True)
            sys.stdout = open(os.devnull, "w")
            os.chdir(cwd)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.argv = [str(entry.path), *argv]
            import cli

            code = function(argv) if entry.function != "main" else cli.main(function, argv)
            code = code if isinstance(code, int) else 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stderr.flush()
            finally:
                os._exit(code)
    stopped = False
    deadline = time.time() + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.time() > deadline and not stopped:
            stopped = True
            with _ignore():
                os.killpg(pid, signal.SIGINT)
            deadline = time.time() + 60
        elif stopped and time.time() > deadline:
            with _ignore():
                os.killpg(pid, signal.SIGKILL)
        time.sleep(0.01)
    with _ignore():
        os.killpg(pid, signal.SIGKILL)  # anything the command started and left running
    return os.waitstatus_to_exitcode(status), stopped


class _ignore:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], (ProcessLookupError, PermissionError, OSError))


def build_world(root: Path, data_dir: Path) -> dict[str, Path]:
    """The folders the tries run among: every kind of thing a command might be pointed at."""
    import json
    import zipfile

    import export
    import train
    from tests.helpers import tiny_config

    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(data_dir / "tiny", root / "data" / "tiny")
    finished = root / "runs" / "finished"
    cfg = tiny_config(root / "data", finished, max_iters=2, eval_interval=2, eval_iters=1, n_layer=1, n_embd=16,
                      block_size=16, batch_size=2)
    train.main(cfg)
    without = root / "runs" / "no_checkpoints"
    shutil.copytree(finished, without)
    shutil.rmtree(without / "checkpoints")
    grpo = root / "runs" / "grpo"
    grpo.mkdir(parents=True)
    (grpo / "metrics.jsonl").write_text('{"kind": "eval", "step": 0, "test_reward": 0.1, "test_accuracy": 0.0}\n')
    (grpo / "run.json").write_text(json.dumps(dict(optimizer="adams", seed=1, lr=1e-4, steps=1, done=True)))
    export.export(finished, root / "exports" / "hf")
    scan = root / "scans" / "scan"  # a packed scan: the folder's files in scan.zip, the folder gone
    scan.parent.mkdir()
    with zipfile.ZipFile(root / "scans" / "scan.zip", "w") as zf:
        for name in ("a", "b"):
            for path in sorted(without.rglob("*")):
                if path.is_file():
                    zf.write(path, f"{name}/{path.relative_to(without).as_posix()}")
    (root / "links").mkdir()
    (root / "links" / "to_run").symlink_to(finished)
    # hostile contents, where a file or a folder of files is expected: binary, empty, deep nesting, a config that
    # exits, and runs whose log and config.json were damaged (a stray line; a string where a number was)
    files = root / "files"
    files.mkdir()
    (files / "binary.json").write_bytes(bytes(range(256)) * 4)
    (files / "empty.py").write_text("")
    (files / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (files / "exits.py").write_text("import sys\nsys.exit(0)\n")
    stray = root / "runs" / "stray_line"
    shutil.copytree(finished, stray)
    with open(stray / "metrics.jsonl", "a") as f:
        f.write("not json\n" + (finished / "metrics.jsonl").read_text().splitlines()[-1] + "\n")
    wrong = root / "runs" / "string_for_number"
    shutil.copytree(finished, wrong)
    saved = json.loads((wrong / "config.json").read_text())
    saved["config"]["max_iters"] = "two"
    (wrong / "config.json").write_text(json.dumps(saved))
    config = root / "tiny_config.py"
    config.write_text("".join(f"{k} = {v!r}\n" for k, v in dict(
        dataset="tiny", data_dir=str(root / "data"), out_dir=str(root / "new" / "train_out"), n_layer=1, n_head=1,
        n_embd=16, block_size=16, batch_size=2, max_iters=2, eval_interval=2, eval_iters=1, log_interval=1,
        warmup_iters=1, lr_decay_iters=2, device="cpu", dtype="float32", sample_tokens=0).items()))
    return {"root": root, "finished run": finished, "run without checkpoints": without, "GRPO run": grpo,
            "export": root / "exports" / "hf", "dataset": root / "data" / "tiny",
            "packed scan": root / "scans" / "scan.zip", "inside a packed scan": scan / "a",
            "token file": root / "data" / "tiny" / "train.bin", "symlink": root / "links" / "to_run", "config": config,
            "binary file": files / "binary.json", "empty file": files / "empty.py", "deeply nested JSON": files / "deep.json",
            "a config that exits": files / "exits.py", "run with a stray log line": stray,
            "run with a string for a number": wrong}
