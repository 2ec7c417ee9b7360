"""A sharded (FSDP) run's latest checkpoint as one .pt file in a new run folder, which train.py
(--init_from=resume), sample.py and export.py read in one process:

    python -m consolidate RUN NEW_RUN
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import checkpoint
import cli
import contents
import folders
import metrics
from errors import UserError


def consolidate(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Write the latest checkpoint of a sharded run ``src`` (a ``.dcp`` folder) as one ``.pt`` file in a new
    run folder ``dst``, with the run's config.json and metrics.jsonl beside it, so that train.py,
    sample.py and export.py read it in one process (and ``torch.load(weights_only=True)`` does too).
    ``dst`` must be new or empty; it is written beside and swapped in whole."""
    src, dst = Path(src), Path(dst)
    path = checkpoint.latest(src)
    if path is None:
        raise UserError(f"no checkpoint in {src / checkpoint.FOLDER}; give the out_dir of a run trained with fsdp=True")
    if not path.is_dir():
        raise UserError(f"{path} is already one .pt file; train.py, sample.py and export.py read it as it is")
    with folders.Destination(dst, makes=contents.RUN, option="DST", command="python -m consolidate") as dest:
        if dest.found.kind not in (contents.ABSENT, contents.EMPTY):
            raise UserError(f"DST {dst} holds {dest.found.what}; choose a new folder for the consolidated run")
        meta = checkpoint.load_file(path)
        meta.pop("dcp_path")
        tensors = checkpoint.load_dcp(path, {}, in_one_process=True)
        staged = dest.stage()
        for name in ("config.json", metrics.FILE):
            if (src / name).is_file():
                shutil.copy2(src / name, staged / name)
        checkpoint.save(staged, dict(meta, model=tensors["model"], optimizer=tensors["optimizer"]))
        dest.swap(staged)
    return checkpoint.latest(dst)


def main(argv=None) -> Path:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=cli.folder, help="the out_dir of a run trained with fsdp=True")
    parser.add_argument("dst", type=cli.place, help="a new folder for the consolidated run")
    args = parser.parse_args(argv)
    path = consolidate(args.src, args.dst)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
