"""Run a product command that reads runs on the study's packed scans: its run paths may lie inside
study/results/runs/*.zip (study/pack.py resolves them, and does the shell's globbing inside archives).

    python -m study.packed plot_curves study/results/runs/tiny/w64_800/*/ --group optimizer --out out/curves
    python -m study.packed sweep config/repro/cpu_adams.py --grid learning_rate=1e-3,2e-3 --out study/results/runs/tiny/adams --summarize
    python -m study.packed grpo --table 'study/results/runs/grpo/*/'

The command is scripts.<name>; what it reads from an archive is read in place, and a packed scan's table is
printed, never written (unpack it with ``python -m study.pack --unpack`` for the files).
"""

from __future__ import annotations

import importlib

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
    if known.command == "sweep" and out and isinstance(pack.resolve(out), pack.Packed):
        archive = pack.resolve(out).root.filename
        print(f"{out} is packed in {archive}: its summary is printed, not written (for the files: "
              f"python -m study.pack --unpack {archive} --out DIR, then summarize the folder there)")
    module = importlib.import_module(f"scripts.{known.command}")
    return module.main(argv, expand=pack.expand)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
