"""Finished scans, one archive each: a folder of run folders becomes FOLDER.zip, and the analysis
scripts read it as if it were still the folder.

    python -m study.pack study/results/runs/new_scan          # -> study/results/runs/new_scan.zip, the folder removed
    python -m study.pack --unpack study/results/runs/tiny.zip  # -> study/results/runs/tiny/ (the archive kept)
    python -m study.pack --unpack study/results/runs/tiny.zip --out /tmp/tiny
    python -m study.pack --check study/results/runs/*.zip     # every archive opens and reads back; writes nothing

A scan's per-iteration logs are thousands of small files; packed, they are one file per scan
(deflated, about a tenth of the bytes). The archive is deterministic: members in sorted order, fixed
timestamps and permissions, so packing the same folder twice gives the same bytes, and git stores a
re-packed scan that did not change as no change at all.

Paths keep their meaning. ``resolve("study/results/runs/tiny/w64_800/adams")`` is that folder of
study/results/runs/tiny.zip, extracted once per process to a temporary folder (so every reader reads plain
files; ``shown`` names it as it was), and ``expand`` does the shell's globbing inside archives too, so the
commands written beside the committed figures run as written: ``python -m study.lr_transfer study/results/runs/tiny/w64_*/*/`` (bash leaves a pattern that
matches no real folder as it is, and the script expands it; in zsh, quote it). A real folder wins over
an archive of the same name, so an unpacked scan is read from its files.

Packing verifies before it deletes: the archive is written beside the folder under a temporary name,
read back member by member against the files, and only then renamed into place and the folder
removed. It refuses a folder that a run is still writing (its .lock is held), one that holds
checkpoints (commit logs, not weights), and an existing archive with members the folder lacks
(unpack it first, then add the new runs, then pack).
"""

from __future__ import annotations

import atexit
import fnmatch
import json
import os
import posixpath
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import cli
import contents
import folders
from errors import UserError

SUFFIX = ".zip"
STAMP = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold: the archive's bytes do not depend on when it was made
MODE = 0o644 << 16  # rw-r--r-- for every member
NOT_PACKED = (".lock",)  # a run's writer lock: present only while a run is going
CHECKPOINT_SUFFIXES = (".pt", ".dcp", ".safetensors", ".bin")


_extracted: dict[tuple, Path] = {}  # an archive (by its file) -> the folder it was extracted to, this process
_shown: dict[Path, str] = {}  # such a folder -> the path its scan had before it was packed


def _with_kinds(text: str) -> str:
    """A metrics.jsonl written before its lines had a ``kind`` (132 of the committed runs), with one, as train.py
    writes them now: 'eval' where there is a val_loss, else 'train'."""
    if '"kind"' in text.split("\n", 1)[0]:
        return text
    lines = []
    for line in text.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            lines.append(line)  # (a last line cut short: the reader leaves it out)
            continue
        kind = "eval" if "val_loss" in record else "train"
        lines.append(json.dumps(dict(kind=kind, **record)) + ("\n" if line.endswith("\n") else ""))
    return "".join(lines)


def extracted(archive: Path) -> Path:
    """The folder ``archive`` holds, extracted once per process into a temporary folder (removed when the process
    ends), so that every reader reads plain files. The archive is the one this script wrote (checked)."""
    info = os.stat(archive)
    key = (os.path.realpath(archive), info.st_ino, info.st_mtime_ns, info.st_size)
    if key not in _extracted:
        root = Path(tempfile.mkdtemp(prefix="adams-gpt-scan-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        folder = root / archive.name.removesuffix(SUFFIX)
        try:
            zf = zipfile.ZipFile(archive)
        except (OSError, zipfile.BadZipFile) as e:
            raise UserError(f"{archive} is not a readable archive ({e})") from None
        with zf:
            for member in _checked_members(archive, zf):
                target = folder.joinpath(*PurePosixPath(member.filename).parts)
                if member.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                data = zf.read(member)
                if target.name == "metrics.jsonl":
                    data = _with_kinds(data.decode()).encode()
                target.write_bytes(data)
        folder.mkdir(exist_ok=True)
        _extracted[key] = folder
        _shown[folder] = str(archive)[: -len(SUFFIX)]
    return _extracted[key]


def shown(path: Path) -> str:
    """A path as the user knows it: one inside an extracted scan as it was before the scan was packed
    (``study/results/runs/tiny/w64_800``), so that tables name runs the same from an archive as from a folder."""
    for folder, name in _shown.items():
        if path == folder or folder in path.parents:
            return posixpath.join(name, path.relative_to(folder).as_posix()).removesuffix("/.")
    return str(path)


def _archive_of(folder: Path) -> Path:
    return folder.with_name(folder.name + SUFFIX)


def packed_in(path: str | os.PathLike) -> Path | None:
    """The archive that packed ``path`` or one of its parent folders (a/b.zip for a/b/c), if one did."""
    parts = Path(path).parts
    for i in range(len(parts), 0, -1):
        folder = Path(*parts[:i])
        if folder.name in ("", ".", "..") or folder.is_dir():
            continue
        if _archive_of(folder).is_file():
            return _archive_of(folder)
    return None


def resolve(path: str | os.PathLike) -> Path:
    """``path`` on disk if it is there, else the same path inside the extracted archive that packed one of its
    parent folders (``a/b/c/d`` -> ``c/d`` of a/b.zip); unchanged (and not existing) if neither."""
    path = Path(path)
    archive = None if path.exists() else packed_in(path)
    if archive is None:
        return path
    inside = path.relative_to(archive.with_name(archive.name.removesuffix(SUFFIX)))
    return extracted(archive).joinpath(inside)


def _children(node: Path) -> dict[str, Path]:
    """A folder's entries by name; a packed folder (NAME.zip) is listed as NAME, unless a real NAME is there."""
    if not node.is_dir():
        return {}
    found: dict[str, Path] = {}
    for child in node.iterdir():
        if child.suffix == SUFFIX and child.is_file() and not (child.with_suffix("")).exists():
            found[child.stem] = extracted(child)
        else:
            found[child.name] = child
    return found


def _glob(pattern: str) -> list[Path]:
    """The shell's glob of ``pattern`` (``*``, ``?``, ``[...]``; a trailing / keeps folders only), inside
    archives too; sorted as in the C locale."""
    dirs_only = pattern.endswith("/")
    pure = PurePosixPath(pattern)
    nodes: list[Path] = [Path(pure.anchor or ".")]
    for part in pure.parts[1 if pure.anchor else 0:]:
        step = []
        for node in nodes:
            if any(c in part for c in "*?["):
                step += [child for name, child in sorted(_children(node).items())
                         if fnmatch.fnmatchcase(name, part) and (part.startswith(".") or not name.startswith("."))]
            else:
                child = resolve(node / part)
                if child.exists():
                    step.append(child)
        nodes = step
    if dirs_only:
        nodes = [n for n in nodes if n.is_dir()]
    return sorted(nodes, key=shown)


def expand(args: list[str | os.PathLike]) -> list[Path]:
    """Command-line paths as the scripts should see them: each resolved (``resolve``), and each pattern
    the shell left unexpanded (it matched no real path) globbed, archives included; a pattern that
    matches nothing stays as given, for the caller's "does not exist" error."""
    out: list[Path] = []
    for arg in args:
        text = os.fspath(arg)
        if any(c in text for c in "*?[") and not Path(text).exists():
            out += _glob(text) or [Path(text)]
        else:
            out.append(resolve(text))
    return out


def _members(folder: Path) -> list[Path]:
    return sorted((p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p.name not in NOT_PACKED
                   and not p.name.endswith(".lock")), key=lambda p: p.relative_to(folder).as_posix())


def _refuse_unpackable(folder: Path) -> None:
    for lock in [*folder.rglob(".lock"), *folder.rglob(".*.lock")]:  # a run's lock: inside (older runs) or beside it
        run = lock.parent if lock.name == ".lock" else lock.with_name(lock.name[1:].removesuffix(".lock"))
        holder = folders.holder(run)
        if holder:
            raise UserError(f"{run} is still being written by {holder}; pack it when the run has ended")
    links = [p for p in folder.rglob("*") if p.is_symlink()]
    if links:
        raise UserError(f"{folder} holds a symbolic link ({links[0]}); a packed scan stores its own files, never what a "
                        "link points to: put the file itself there, or remove the link")
    weights = [p for p in folder.rglob("*") if p.suffix in CHECKPOINT_SUFFIXES or p.name == "checkpoints"]
    if weights:
        raise UserError(f"{folder} holds checkpoints ({weights[0]} and {len(weights) - 1} more); a packed scan keeps "
                        "logs, not weights: move them out of the folder first")


def write_archive(folder: Path, archive: Path) -> int:
    """Write ``folder``'s files to ``archive`` deterministically; returns the number of members."""
    members = _members(folder)
    with zipfile.ZipFile(archive, "w") as zf:
        for path in members:
            info = zipfile.ZipInfo(path.relative_to(folder).as_posix(), date_time=STAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = MODE
            info.create_system = 3  # unix: the mode above is read as one
            zf.writestr(info, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return len(members)


def verify(folder: Path, archive: Path) -> None:
    """Every file of ``folder`` is in ``archive`` with the same bytes, and nothing else is."""
    members = {p.relative_to(folder).as_posix(): p for p in _members(folder)}
    with zipfile.ZipFile(archive) as zf:
        names = [i.filename for i in zf.infolist()]
        if sorted(names) != sorted(members):
            raise UserError(f"{archive} does not list the files of {folder}; the folder was left as it is")
        for name, path in members.items():
            if zf.read(name) != path.read_bytes():
                raise UserError(f"{name} reads back different from {path}; the folder was left as it is")


def pack(folder: Path) -> Path:
    """FOLDER -> FOLDER.zip, written beside, read back, swapped in; only then is the folder removed (moved aside
    first, so that a kill never leaves half a folder hiding the archive)."""
    folder = Path(folder)
    archive = _archive_of(folder)
    with folders.Destination(folder, makes=contents.SCAN, option="FOLDER", command="study.pack") as scan, \
            folders.Destination(archive, makes=contents.FILE, option="archive", command="study.pack") as dest:
        if not folder.is_dir():
            raise UserError(f"{folder} is not a folder; pass the folder a sweep wrote its runs to")
        _refuse_unpackable(folder)
        if not _members(folder):
            raise UserError(f"{folder} holds no files; there is nothing to pack")
        if archive.exists():
            try:
                with zipfile.ZipFile(archive) as zf:
                    missing = [n for n in zf.namelist() if not (folder / n).is_file()]
            except (OSError, zipfile.BadZipFile) as e:
                raise UserError(f"{archive} exists and is not a readable archive ({e}); move it aside first") from None
            if missing:
                raise UserError(f"{archive} holds {len(missing)} files that {folder} lacks (e.g. {missing[0]}); unpack "
                                f"it into the folder first (python -m study.pack --unpack {archive}), then pack again")
        staged = dest.stage(folder=False)
        count = write_archive(folder, staged)
        verify(folder, staged)
        dest.swap(staged)  # every file of the folder is in it: it may replace an archive of a subset of them
        scan.move_aside(None)
    print(f"packed {count} files of {folder} into {archive} ({archive.stat().st_size / 1e6:.1f} MB); the folder is removed")
    return archive


def _checked_members(archive: Path, zf: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The archive's members, once none may land outside its folder or be anything but a file or a folder."""
    infos = zf.infolist()
    for info in infos:
        parts = PurePosixPath(info.filename).parts
        if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in info.filename or \
                stat.S_ISLNK(info.external_attr >> 16):
            raise UserError(f"{archive} has a member outside its folder or that is a link ({info.filename}); "
                            "it was not made by this script")
    return infos


MAX_BYTES = 20 * 2**30  # what --unpack writes at most unless told otherwise


def unpack(archive: Path, out: Path | None, max_bytes: int = MAX_BYTES) -> Path:
    """ARCHIVE -> a new folder (default: beside it, without .zip), extracted beside and swapped in whole; the
    archive stays. Members must be files inside the folder, and their sizes within ``max_bytes`` and the disk."""
    archive = Path(archive)
    if archive.suffix != SUFFIX or not archive.is_file():
        raise UserError(f"{archive} is not a packed scan (a .zip file); pass one like study/results/runs/tiny.zip")
    out = Path(out) if out else archive.with_suffix("")
    with folders.Destination(out, makes=contents.SCAN, option="--out", command="study.pack --unpack") as dest:
        if dest.found.kind not in (contents.ABSENT, contents.EMPTY):
            raise UserError(f"{out} already exists and is not empty; pass --out to unpack somewhere else")
        try:
            zf = zipfile.ZipFile(archive)
        except (OSError, zipfile.BadZipFile) as e:
            raise UserError(f"{archive} is not a readable archive ({e})") from None
        with zf:
            infos = _checked_members(archive, zf)
            total = sum(info.file_size for info in infos)
            if total > max_bytes:
                raise UserError(f"{archive} would unpack to {total:,} bytes, over the budget of {max_bytes:,}; pass "
                                "--max-bytes to allow more")
            if total > shutil.disk_usage(out.parent).free:
                raise UserError(f"{archive} would unpack to {total:,} bytes, more than the disk holding {out.parent} has free")
            staged = dest.stage()
            for info in infos:
                target = staged.joinpath(*PurePosixPath(info.filename).parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as dst:  # at most file_size bytes: zipfile stops there
                    shutil.copyfileobj(src, dst)
            dest.swap(staged)
    print(f"unpacked {archive} into {out}; the archive is kept (pack the folder again to replace it)")
    return out


def check(archive: Path) -> int:
    archive = Path(archive)
    try:
        with zipfile.ZipFile(archive) as zf:
            bad = zf.testzip()
            count = len(zf.namelist())
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(f"{archive} is not a readable archive ({e})") from None
    if bad:
        raise UserError(f"{archive}: {bad} fails its checksum")
    print(f"{archive}: {count} files, checksums good")
    return count


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=cli.existing, help="folders to pack (or archives with --unpack/--check)")
    parser.add_argument("--unpack", action="store_true", help="extract archives into folders, keeping the archives")
    parser.add_argument("--check", action="store_true", help="test that archives open and their checksums hold; write nothing")
    parser.add_argument("--out", type=cli.place, help="with --unpack of one archive: the folder to extract into")
    parser.add_argument("--max-bytes", type=cli.count, default=MAX_BYTES, help="with --unpack: the most it writes")
    args = parser.parse_args(argv)
    if args.unpack and args.check:
        raise UserError("--unpack and --check are two different jobs; pass one")
    if args.out and not (args.unpack and len(args.paths) == 1):
        raise UserError("--out names where one archive is unpacked; pass it with --unpack and one archive")
    if args.check:
        return [check(p) for p in args.paths]
    if args.unpack:
        return [unpack(p, args.out, args.max_bytes) for p in args.paths]
    for p in args.paths:  # every folder is checked before any is packed
        if not p.is_dir():
            raise UserError(f"{p} is not a folder; pass the folder a sweep wrote its runs to")
        _refuse_unpackable(p)
    return [pack(p) for p in args.paths]


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
