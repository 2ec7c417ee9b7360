"""Run a product command that reads runs on the study's packed scans: its run paths may lie inside
study/results/runs/*.zip (study/pack.py resolves them, and does the shell's globbing inside archives).

    python -m study.packed plot_curves study/results/runs/tiny/w64_800/*/ --group optimizer --out out/curves
    python -m study.packed sweep config/repro/cpu_adams.py --grid learning_rate=1e-3,2e-3 --out study/results/runs/tiny/adams --summarize
    python -m study.packed grpo --table 'study/results/runs/grpo/*/'

The command is scripts.<name>, given plain paths: each path or pattern that lies in an archive is extracted to a
temporary folder first (study/pack.py), and a packed scan's table is printed, never written (unpack it with
``python -m study.pack --unpack`` for the files).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import cli
from errors import UserError
from study import pack

COMMANDS = ("plot_curves", "sweep", "grpo")


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=COMMANDS, help="the product command (scripts.<command>)")
    parser.add_argument("args", nargs="*", help="its arguments, as for python -m scripts.<command>")
    known, rest = parser.parse_known_args(argv)
    if known.command not in COMMANDS:
        raise UserError(f"{known.command} reads no runs; choose one of {', '.join(COMMANDS)}")
    argv = [*known.args, *rest]
    out = next((a.split("=", 1)[1] if "=" in a else argv[i + 1] for i, a in enumerate(argv)
                if a.split("=", 1)[0] == "--out" and ("=" in a or i + 1 < len(argv))), None)
    archive = pack.packed_in(out) if known.command == "sweep" and out and not Path(out).exists() else None
    if archive is not None:
        print(f"{out} is packed in {archive}: its summary is printed, not written (for the files: "
              f"python -m study.pack --unpack {archive} --out DIR, then summarize the folder there)")
    module = importlib.import_module(f"scripts.{known.command}")
    return module.main(plain(argv, reads_out=known.command == "sweep"))


def plain(argv: list[str], reads_out: bool) -> list[str]:
    """The command line with every path that lies in an archive (and every pattern, globbed) as a plain path; an
    --out is a path the command reads only for the sweep's --summarize, else it stays as given."""
    out, after_out = [], False
    for arg in argv:
        if arg.startswith("-"):
            key, _, value = arg.partition("=")
            if key == "--out" and value and reads_out:
                arg = f"--out={pack.resolve(value)}"
            out.append(arg)
            after_out = key == "--out" and not value
            continue
        if after_out and not reads_out:
            out.append(arg)
        elif after_out:
            out.append(str(pack.resolve(arg)))
        else:
            out += [str(p) for p in pack.expand([arg])]
        after_out = False
    return out


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
