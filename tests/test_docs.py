"""The README matches the code: every config key with its default, and every file it names."""

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from configurator import TrainConfig

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
CONFIG_DOC = (REPO / "config" / "README.md").read_text()  # the table of every config key
# every Markdown file of the repository (the study's too, where it is there), for the checks that span them all
DOCS = [p for p in REPO.rglob("*.md") if not {".git", ".venv", "out"} & set(p.relative_to(REPO).parts)]


def test_config_table_is_the_one_config_table_py_writes():
    from scripts.config_table import table

    start = CONFIG_DOC.index("\n", CONFIG_DOC.index("<!-- config-table")) + 1
    assert CONFIG_DOC[start:CONFIG_DOC.index("<!-- /config-table -->")] == table(), "run python -m scripts.config_table"


def test_layout_table_names_every_module_and_script():
    layout = README[README.index("## Layout"):]
    for path in [*REPO.glob("*.py"), *REPO.glob("scripts/*.py")]:
        name = path.relative_to(REPO).as_posix()
        if path.name != "__init__.py":
            assert f"`{name}`" in layout, f"README's layout table does not name {name}"


def test_config_table_lists_every_key_with_its_default():
    table = CONFIG_DOC[CONFIG_DOC.index("<!-- config-table"):CONFIG_DOC.index("<!-- /config-table -->")]
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", table, flags=re.M))
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert set(rows) == set(fields)
    for key, default in fields.items():
        assert eval(rows[key]) == default, f"README says {key} = {rows[key]}, the code says {default!r}"


def test_files_the_readme_names_exist():
    for path in re.findall(r"`((?:config|scripts|data|tests|optim)/[\w./]+\.py)`", README):
        assert (REPO / path).is_file(), path
    for path in re.findall(r"train\.py (config/[\w.]+\.py)", README):
        assert (REPO / path).is_file(), path


def test_modules_the_docs_run_exist():
    for doc in (path.read_text() for path in DOCS):
        for module in re.findall(r"-m ((?:scripts|data|tests|study)\.[\w.]+)", doc):
            if module == "data.x.prepare":  # the troubleshooting table's example of a missing dataset
                continue
            assert (REPO / (module.replace(".", "/") + ".py")).is_file(), module


# a cited section: a Markdown file's name (or a link to it, or the bare word README), then the section's
# title in quotes, after a comma, a space, an opening parenthesis or "section"
SECTION_CITATION = re.compile(
    r"(?P<file>(?:[\w.-]+/)*[\w-]+\.md|\bREADME\b)`?(?:\]\((?P<link>[\w./-]+\.md)\))?"
    r"(?:, |,? \(| )(?:its |whose )?(?:section )?"
    r"(?:\"(?P<d>[^\"\n]{3,120})\"|“(?P<c>[^”\n]{3,120})”|'(?P<s>(?:[^'\n]|'(?=[a-z]))+)'(?![a-z]))")


def github_anchor(title: str) -> str:
    """The #fragment GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [re.sub(r"^\d+\.\s*", "", line.lstrip("#").strip()) for line in path.read_text().splitlines()
            if line.startswith("#")]


def test_every_cited_section_is_where_the_citation_says():
    # code and docs point users at sections by title ("study/report/vocabulary.md, 'GPT-2's vocabulary'");
    # when a section moves, every pointer to it must move too
    files = [p for p in REPO.rglob("*") if p.suffix in (".py", ".md", ".sh") and p.is_file()
             and not {".git", ".venv", "out", "runs"} & set(p.relative_to(REPO).parts) and "egg-info" not in str(p)]
    assert len(files) > 100
    missing = []
    for path in files:
        text = path.read_text()
        for m in SECTION_CITATION.finditer(text):
            title = (m["d"] or m["c"] or m["s"]).strip()
            if m["file"] == "README":  # bare "README": the front page
                target = REPO / "README.md"
            else:
                name = m["link"] or m["file"]
                target = next((c for c in (path.parent / name, REPO / name) if c.is_file()), None)
            where = f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}"
            if target is None:
                missing.append(f"{where}: cites {m['file']}, which does not exist")
            elif not any(h.startswith(title) for h in headings(target)):
                missing.append(f"{where}: {target.resolve().relative_to(REPO)} has no section {title!r}")
    assert not missing, "section pointers that lead nowhere:\n" + "\n".join(missing)


def test_every_relative_link_in_the_docs_resolves():
    # [text](path#anchor) in any tracked Markdown file: the path exists (packed runs are linked as their .zip) and
    # the anchor is one of its headings, as GitHub spells them
    def anchors(path: Path) -> set[str]:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
        return {github_anchor(title) for title in re.findall(r"^#+ (.+)$", text, flags=re.M)}

    broken = []
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            if m[1].startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = m[1].partition("#")
            target = doc.parent / path if path else doc
            where = f"{doc.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m[1]}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{where} (no such heading)")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


# --- every command the README shows parses as written ------------------------------------------------------

PLACEHOLDERS = {"<opt>": "adams", "<size>": "small", "<optimizer>": "adams"}


def readme_commands() -> list[list[str]]:
    """The python and torchrun commands of README.md's bash blocks and tables, as argument lists
    (comments dropped, continuation lines joined, '&&' chains split, placeholders filled in)."""
    import shlex

    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    tables = "\n".join(line for line in README.splitlines() if line.startswith("|"))  # whole commands, not mentions
    lines += re.findall(r"`((?:python|torchrun) [^`]+)`", tables)
    commands = []
    for line in lines:
        for part in line.split("#")[0].split("&&"):
            words = shlex.split(part.strip())
            for key, value in PLACEHOLDERS.items():
                words = [w.replace(key, value) for w in words]
            if words and words[0] in ("python", "torchrun", "accelerate") and any(w.endswith(".py") or w == "-m" for w in words):
                commands.append(words)
    return commands


class Parsed(Exception):
    pass


def test_every_readme_command_parses_as_written(monkeypatch):
    # each command's arguments go through its own parser (cli.Parser, or train.py's configurator), which
    # stops it right after parsing: a renamed option or a config file that is not there fails here
    import runpy
    import sys

    import cli
    import configurator

    def parsed(self, args=None, namespace=None):
        namespace = argparse.ArgumentParser.parse_args(self, args, namespace)
        raise Parsed

    monkeypatch.setattr(cli.Parser, "parse_args", parsed)
    for kind in (cli.file, cli.folder, cli.existing):  # the README's example paths (path/to/...) are not here
        monkeypatch.setattr(kind, "admits", lambda path: True)
    commands = readme_commands()
    assert len(commands) >= 25
    checked = 0
    for words in commands:
        if words[0] in ("torchrun", "accelerate"):  # its own options first, then the script or module
            words = ["python", *words[next(i for i, w in enumerate(words) if w.endswith(".py") or w == "-m"):]]
        if words[1] == "-m" and words[2] in ("pytest", "torchtitan.train"):
            continue  # not ours
        target, args = (words[2], words[3:]) if words[1] == "-m" else (words[1], words[2:])
        if target == "train.py":
            import plan

            planning, rest = plan.take_options(args)  # (--plan and its options are train.py's, not the config's)
            configurator.load_explicit(rest)
            checked += 1
            continue
        monkeypatch.setattr(sys, "argv", [target, *args])
        with pytest.raises(Parsed):
            if target.endswith(".py"):
                runpy.run_path(str(REPO / target), run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        checked += 1
    assert checked >= 20
