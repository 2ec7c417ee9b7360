"""Rewrite the README's configuration table from configurator.TrainConfig (defaults and comments).

    python -m scripts.config_table          # tests/test_docs.py fails until the README is in sync
"""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def table() -> str:
    source = (REPO / "configurator.py").read_text()
    body = source[source.index("class TrainConfig"):source.index("CHOICES")]
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for line in body.splitlines():
        match = re.match(r"\s+(\w+): (\w+) = (.+?)(?:\s+#\s*(.*))?$", line)
        if match:
            key, _, default, comment = match.groups()
            rows.append(f"| `{key}` | `{default}` | {(comment or '').replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def main():
    path = REPO / "README.md"
    text = path.read_text()
    start = text.index("\n", text.index("<!-- config-table")) + 1
    end = text.index("<!-- /config-table -->")
    path.write_text(text[:start] + table() + text[end:])
    print(f"updated the configuration table in {path}")


if __name__ == "__main__":
    main()
