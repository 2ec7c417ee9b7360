"""Rewrite config/README.md's table of every key from configurator.TrainConfig (defaults and comments).

    python -m scripts.config_table          # tests/test_docs.py fails until the README is in sync
"""

from pathlib import Path

import cli
import folders
from configurator import documented_fields

REPO = Path(__file__).resolve().parents[1]


def table() -> str:
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{key}` | `{default}` | {comment.replace('|', '/')} |" for key, default, comment in documented_fields()]
    return "\n".join(rows) + "\n"


def main(argv=None):
    cli.Parser(description="Rewrite config/README.md's table of every key from configurator.py.").parse_args(argv)
    path = REPO / "config" / "README.md"
    text = path.read_text()
    start = text.index("\n", text.index("<!-- config-table")) + 1
    end = text.index("<!-- /config-table -->")
    folders.write_atomic(path, (text[:start] + table() + text[end:]).encode())
    print(f"updated the configuration table in {path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
