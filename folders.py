"""Every write into a user's folder goes through this one door, in the order git writes a ref.

1. **Lock.** A command takes its destination's lock before it looks at it: an exclusive ``flock``
   on PARENT/.NAME.lock, and on the destination folder itself while there is one, held until the
   command ends. The kernel drops both when the process dies (SIGKILL included), so a crash never
   blocks the next command; while held, the file names its holder, and it is removed when released.
   The folder's own lock is the one nobody can delete or leave behind: it holds when the lock file
   was deleted, and it moves with the folder when the folder is renamed.
2. **Look.** Only then does it see what the destination holds (contents.look): nothing, a train.py
   run (finished or not, with or without checkpoints), a GRPO run, an export, a dataset, a scan of
   runs, a file, or something else. A folder one of our commands made says so in a marker it
   wrote (``mark``).
3. **Decide.** A command writes into what is absent or empty, continues its own unfinished work
   (a run stopped before its first checkpoint, a sweep's scan), and replaces only what it makes
   itself, and only when the user asks (``--overwrite``). Anything else is refused in one line
   that names what is there (``Destination.allow``).
4. **Write beside, then swap.** New content is written beside the old (PARENT/.NAME.new-*) and
   swapped in only once complete; the old is moved aside (PARENT/.NAME.old-*) and removed last.
   A kill at any moment leaves the old or the new content whole, and the next command to take the
   lock finishes what a killed one began (``recover``): a swap that had begun is completed,
   anything else half-made is removed. A training run replaces an old run only once it has taken
   its first step (train.py).

Read-only commands (evaluation, sampling, ``--check``, a sweep's ``--summarize``) take no
lock and write nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from contents import (
    ABSENT,
    DATASET,
    DATASET_FILES,
    EMPTY,
    EXPORT,
    GRPO,
    MARKER,
    OTHER,
    RUN,
    RUN_FILES,
    SCAN,
    SWEEP_LOG,
    Found,
    look,
)
from errors import UserError

# --- the lock ---------------------------------------------------------------------------------------------


def lock_path(path: str | os.PathLike) -> Path:
    path = Path(os.path.abspath(path))
    return path.with_name(f".{path.name}.lock")


def holder(path: str | os.PathLike) -> str | None:
    """Who holds ``path``'s lock (the holder's own words), or None if nobody does. Takes nothing."""
    import fcntl

    for lock in (lock_path(path), Path(path) / ".lock"):  # .lock inside: runs of an older version
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return os.read(fd, 4096).decode(errors="replace").strip() or "another process"
        finally:
            os.close(fd)
    return None


class Lock:
    """An exclusive ``flock`` on PARENT/.NAME.lock and on ``path`` itself when it is a folder: one writer for
    ``path`` at a time, whatever happened to the lock file."""

    def __init__(self, path: str | os.PathLike, command: str):
        self.path, self.file, self.fd, self.folder_fd = Path(path), lock_path(path), None, None
        self.command = command

    def hold_folder(self, option: str) -> None:
        """Lock the destination folder itself (it now exists, or exists anew after a swap): the lock that survives
        a deleted lock file and follows a renamed folder."""
        import fcntl

        if self.folder_fd is not None:
            os.close(self.folder_fd)
            self.folder_fd = None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return  # not a folder (a file destination), or gone: the lock file alone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UserError(f"{self.path} is in use by another command (it holds the folder itself, though its lock file "
                            f"{self.file.name} is gone); wait for it to end, or choose another {option}") from None
        self.folder_fd = fd

    def acquire(self, option: str, wait: bool = False) -> None:
        """Take the lock, or (unless ``wait``) refuse in one line naming the command that holds it."""
        import fcntl

        mask = umask()
        while True:
            try:
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o666 & ~mask)
            except OSError as e:
                raise UserError(f"{self.path} is not writable: its lock {self.file} cannot be created ({e.strerror}); "
                                f"choose another {option}, in a folder you can write") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError:
                who = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise UserError(f"{self.path} is in use by another command ({who}); wait for it to end, or choose "
                                f"another {option}") from None
            try:  # a holder that was releasing may have removed the file we opened: lock the one that is there
                same = os.fstat(fd).st_ino == os.stat(self.file).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        try:
            self.hold_folder(option)
        except UserError:
            self.release()
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{self.command}, process {os.getpid()} on {socket.gethostname()}\n".encode())

    def release(self) -> None:
        if self.folder_fd is not None:
            os.close(self.folder_fd)
            self.folder_fd = None
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.file)  # while still held: the next holder opens a new file
        os.close(self.fd)
        self.fd = None


# --- the destination ----------------------------------------------------------------------------------------


NAME_MAX = 255  # bytes in a file name (Linux, macOS)
BESIDE = 30  # what the names beside a destination add to its own: ".NAME.new-PID.XXXXXXXX.tmp"


def alive(pid: int) -> bool:
    """Whether another process ``pid`` runs (our own leftovers are ours to clear: not alive)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk, where the file system allows."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _command() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return name if name not in ("-c", "__main__.py") else "python"


class Destination:
    """A folder (or a file) that one command writes: locked, looked at, and written beside then swapped.

        with Destination(out, makes=EXPORT, option="HF_DIR") as dest:
            dest.allow(overwrite=args.overwrite)     # refuses what this command may not replace
            staged = dest.stage()                    # a new folder beside ``out``
            ...                                      # write the new content there
            dest.swap(staged)                        # ``out`` is now the new content, the old removed

    ``makes`` is the kind of content the command makes; ``option`` the option that names the
    destination (for error lines). Folders created to hold the lock are removed again if the
    command leaves nothing in them.
    """

    def __init__(self, path: str | os.PathLike, makes: str, option: str, command: str | None = None,
                 wait: bool = False):
        given = Path(path)
        self.wait = wait  # for the lock, rather than refuse while another command holds it
        if str(path) == "":
            raise UserError(f"{option} is empty; give a path")
        self.path = Path(os.path.realpath(given)) if given.is_symlink() and given.exists() else Path(os.path.abspath(given))
        if self.path == self.path.parent:
            raise UserError(f"{option} {given} is the root of the file system; give a folder below it")
        if len(self.path.name.encode()) > NAME_MAX - BESIDE:
            raise UserError(f"{option} {given}: its name is {len(self.path.name.encode())} bytes long, and the lock and "
                            f"staging beside it add up to {BESIDE} to the {NAME_MAX} a name may have; choose a shorter name")
        self.given, self.makes, self.option = given, makes, option
        self.lock = Lock(self.path, command or _command())
        self.created: list[Path] = []
        self.staged: list[Path] = []
        self.found: Found | None = None

    # -- entering: folders for the lock, the lock, leftovers of a killed command, then the look
    def __enter__(self) -> Destination:
        parent = self.path.parent
        missing = [p for p in (parent, *parent.parents) if not p.exists()]
        first = next(p for p in (parent, *parent.parents) if p.exists())
        if not first.is_dir():
            raise UserError(f"{self.option} {self.given} is not writable: {first} is a file, not a folder; choose another "
                            f"{self.option}")
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            except OSError as e:
                self._remove_created()
                raise UserError(f"{self.given}: the folder {folder} cannot be made ({e.strerror}); choose another "
                                f"{self.option}") from e
            self.created.append(folder)
        try:
            self.lock.acquire(self.option, self.wait)
            cleared = self.recover()
            if cleared:
                print(f"note: {self.given}: finished or cleared what a killed command left beside it "
                      f"({', '.join(sorted(p.name for p in cleared))})", file=sys.stderr)
            self.found = look(self.path)
        except BaseException:
            self.lock.release()
            self._remove_created()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for staged in self.staged:
            _remove(staged)
        self.lock.release()
        self._remove_created()

    def _remove_created(self) -> None:
        for folder in reversed(self.created):  # the deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty: the command left nothing there

    # -- deciding
    def allow(self, overwrite: bool = False, continues: Iterable[str] = (), beside: Iterable[str] = ()) -> Found:
        """Refuse, in one line, a destination this command may not write; return what it holds.

        Always allowed: nothing, an empty folder; ``continues``: kinds this command carries on (a sweep
        its scan). What this command makes is restarted where it stopped before its first checkpoint (a
        run) or before its end (a GRPO run), and otherwise replaced only with ``overwrite``. ``beside``:
        the names this command writes into a folder that holds other things (a dataset next to its
        prepare.py); allowed while none of them is taken.
        """
        found, where = self.found, f"{self.option} {self.given}"
        if found.kind in (ABSENT, EMPTY) or found.kind in continues:
            return found
        if found.kind == self.makes:
            if found.restartable or overwrite:
                return found
            raise UserError(f"{where} holds {found.what}; choose another {self.option}, or pass --overwrite to replace it")
        beside = list(beside)
        if beside and found.kind == OTHER and not any(os.path.lexists(self.path / n) for n in beside):
            return found
        raise UserError(f"{where} holds {found.what}, which this command does not make and will not replace; "
                        f"choose another {self.option}")

    # -- writing beside, then swapping
    def stage(self, folder: bool = True) -> Path:
        """A new path beside the destination (an empty folder, or a file name), removed on exit unless swapped in."""
        staged = self.path.with_name(f".{self.path.name}.new-{os.getpid()}")
        _remove(staged)
        if folder:
            staged.mkdir()
        self.staged.append(staged)
        return staged

    def swap(self, staged: Path) -> None:
        """Put the complete ``staged`` in the destination's place, marked as what this command makes when it is one
        of our folders; the old content goes only after."""
        if self.makes in (EXPORT, GRPO) and staged.is_dir():
            mark(staged, self.makes, by=self.lock.command)
        old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
        if os.path.lexists(self.path):
            if self.path.is_dir() and not any(self.path.iterdir()):
                self.path.rmdir()
            else:
                os.rename(self.path, old)  # from here on, recover() completes this swap
        os.rename(staged, self.path)
        fsync_dir(self.path.parent)
        self.staged.remove(staged)
        self.lock.hold_folder(self.option)  # the folder in the destination's place is a new one: lock it too
        _remove(old)

    def swap_files(self, staged: Path, names: Iterable[str]) -> None:
        """Move the files ``names`` of the folder ``staged`` into the destination folder, each replacing its
        namesake; the replaced files are removed once every new one is in place."""
        old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
        old.mkdir()  # from here on, recover() completes this swap
        fsync_dir(self.path.parent)
        self.path.mkdir(exist_ok=True)
        for name in names:
            if os.path.lexists(self.path / name):
                os.rename(self.path / name, old / name)
            os.rename(staged / name, self.path / name)
        fsync_dir(self.path)
        _remove(old)
        _remove(staged)
        self.staged.remove(staged)

    def move_aside(self, names: Iterable[str] | None) -> None:
        """Remove the entries ``names`` of the destination folder (None: the destination itself): each is moved
        aside first, then deleted, so that a kill leaves it either whole in place or out of the way."""
        old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
        if names is None:
            os.rename(self.path, old)
            fsync_dir(self.path.parent)
        else:
            old.mkdir(exist_ok=True)
            for name in names:
                if os.path.lexists(self.path / name):
                    os.rename(self.path / name, old / name)
        _remove(old)

    def recover(self) -> list[Path]:
        """Finish what a killed command left beside the destination, and return what it touched. A swap that had
        begun (an .old-PID beside) is completed with the new content it had staged, which was whole by then;
        anything else half-made is removed. Only this destination's own names count (.NAME.new-PID,
        .NAME.old-PID, and a writer's .NAME.new-PID.XXXX.tmp), never a sibling whose name begins the same
        (NAME.old-1, say), and never the files of a process still alive."""
        pattern = re.compile(re.escape(f".{self.path.name}.") + r"(?:(old)-(\d+)|(new)-(\d+)(\.\w+\.tmp)?)$")
        found: dict[str, dict[str, Path]] = {"new": {}, "old": {}}
        touched = []
        with contextlib.suppress(OSError):
            for entry in self.path.parent.iterdir():
                match = pattern.match(entry.name)
                if not match:
                    continue
                kind, pid = ("old", match.group(2)) if match.group(1) else ("new", match.group(4))
                if alive(int(pid)):
                    continue
                touched.append(entry)
                if match.group(5):  # a writer's own temporary file beside a staged one
                    _remove(entry)
                else:
                    found[kind][pid] = entry
        for pid, old in found["old"].items():
            new = found["new"].pop(pid, None)
            if new is not None and not os.path.lexists(self.path):
                os.rename(new, self.path)  # killed between the two renames of ``swap``
            elif new is not None and new.is_dir() and self.path.is_dir():  # killed inside ``swap_files``
                for entry in sorted(new.iterdir()):
                    if os.path.lexists(self.path / entry.name):
                        os.rename(self.path / entry.name, old / entry.name)
                    os.rename(entry, self.path / entry.name)
                _remove(new)
            _remove(old)
        for new in found["new"].values():
            _remove(new)
        return touched


@contextlib.contextmanager
def dataset(out: str | os.PathLike, names: Iterable[str], overwrite: bool = False, command: str | None = None,
            wait: bool = False):
    """Write the files ``names`` of a dataset into the folder ``out``: yields a folder beside it to write them
    in, whose files replace their namesakes in ``out`` once the block ends (the others in ``out``, a
    prepare.py say, stay). An existing dataset is replaced only with ``overwrite``."""
    names = list(names)
    with Destination(out, makes=DATASET, option="--out", command=command, wait=wait) as dest:
        dest.allow(overwrite=overwrite, beside=names)
        staged = dest.stage()
        yield staged
        missing = [n for n in names if not (staged / n).is_file()]
        if missing:
            raise RuntimeError(f"the dataset's {missing[0]} was not written")
        dest.swap_files(staged, names)


# --- output files of the scripts that make figures and tables -----------------------------------------------


OWNED = (RUN, GRPO, EXPORT, DATASET, SCAN)
# The files each kind of folder is made of (an export is one whole): an output of another command never replaces them
OWN_FILES = {RUN: (*RUN_FILES, SWEEP_LOG), GRPO: (MARKER, "metrics.jsonl", "run.json"),
             DATASET: (*DATASET_FILES, "rl_train.jsonl", "test.jsonl"),
             SCAN: (MARKER, "runs.csv", "summary.csv", "summary.md", "summary.png")}


def check_output(path: str | os.PathLike) -> None:
    """Refuse, in one line, an output file (a figure, a table, a benchmark's JSON) where it may not go: a folder,
    a path below a file, or a file that it would replace inside a run, an export, a dataset or a scan, or an
    archive."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder; give a file name (a stem) for the output")
    above = next((p for p in path.parents if p.exists()), Path("."))
    if not above.is_dir():
        raise UserError(f"{path} cannot be written: {above} is a file, not a folder; choose another --out")
    if path.exists():
        kind = look(path.parent)
        if zipfile.is_zipfile(path) or kind.kind == EXPORT or path.name in OWN_FILES.get(kind.kind, ()):
            what = kind.what if kind.kind in OWNED else "an archive"
            raise UserError(f"{path} belongs to {what}; an output of this command does not replace it. Choose another "
                            "--out")


def write_output(path: str | os.PathLike, data: bytes, command: str | None = None) -> Path:
    """The one door for a figure, a table or a benchmark's JSON: take the file's lock, refuse a place it may
    not go (check_output), then write it beside and rename it in (write_atomic). Returns the path."""
    path = Path(path)
    lock = Lock(path, command or _command())
    check_output(path)  # before the lock: a path below a file has no folder for the lock either
    path.parent.mkdir(parents=True, exist_ok=True)
    lock.acquire("--out")
    try:
        check_output(path)  # what is there now, under the lock
        write_atomic(path, data)
    finally:
        lock.release()
    return path


class _Noting:
    """A file that keeps the error its writes raise: torch.save's zip writer turns Ctrl-C, a full disk or a file-size
    limit inside a write into a RuntimeError ("unexpected pos") that no longer says which it was."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except BaseException as e:
            self.error = e
            raise

    def __getattr__(self, name):
        return getattr(self.f, name)


def write_atomic(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], object]) -> None:
    """The one writer of every file in a folder we own: ``path`` holds the new content or its old one, never a
    part. ``data``: the bytes, or a function that writes them into the file it is given (torch.save). Written to
    .NAME.PID.tmp beside, flushed to disk, renamed over ``path``, and the folder's entry flushed too; a write's
    own error (a full disk, a file-size limit) names the file and leaves no temporary behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw:
            f = _Noting(raw)
            try:
                f.write(data) if isinstance(data, (bytes, bytearray)) else data(f)
            except RuntimeError:
                if f.error is not None:
                    raise f.error from None  # what the zip writer hid
                raise
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if e.filename is None:  # a write's own error names no file: this one
            raise OSError(e.errno, e.strerror, str(tmp)) from None
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(path.parent)


def umask() -> int:
    """The process's file-creation mask (read without changing it for more than an instant)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: str | os.PathLike) -> object:
    """A JSON file's content, or one error naming the file when it is missing, unreadable or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path} cannot be read as JSON ({type(e).__name__}: {str(e)[:120]}); restore it, or leave it "
                        "out") from None


def mark(folder: str | os.PathLike, kind: str, **fields) -> None:
    """Write the marker that says what ``folder`` is (``kind``), with ``fields``."""
    write_atomic(Path(folder) / MARKER, (json.dumps(dict(kind=kind, **fields), indent=2) + "\n").encode())
