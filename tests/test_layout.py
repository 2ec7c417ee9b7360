"""The house's shape, read from the code itself: the product imports nothing from the study, no module imports
itself round a circle (lazy imports inside functions included), and nothing edits sys.path."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = {".venv", "venv", ".git", "build", "out", "__pycache__"}


def python_files(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py")
                  if not SKIP & set(p.relative_to(REPO).parts) and "egg-info" not in str(p))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "optim":
        parts[0] = "adams_optim"  # the name everything imports it by
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever in the file (top level or inside a function)."""
    tree = ast.parse(path.read_text())
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args \
                and isinstance(node.args[0], ast.Constant):
            found.add(node.args[0].value)
    return found


def product_files() -> list[Path]:
    return [p for p in python_files("") if p.relative_to(REPO).parts[0] != "study"]


def test_the_product_imports_nothing_from_the_study():
    arrows = [f"{p.relative_to(REPO)} imports {m}" for p in product_files() for m in sorted(imports(p))
              if m == "study" or m.startswith("study.")]
    assert not arrows, "the product must work with study/ deleted:\n" + "\n".join(arrows)


def test_no_import_circle_among_the_repositorys_modules():
    files = python_files("")
    modules = {module_name(p): p for p in files}
    graph = {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}
    for name in graph:  # "from pkg import mod" names pkg.mod; a package's __init__ is not an edge to its own modules
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    circles, seen, stack = [], set(), []

    def visit(node):
        if node in stack:
            circles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        stack.pop()

    for node in sorted(graph):
        visit(node)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_nothing_edits_sys_path():
    edits = [f"{p.relative_to(REPO)}:{n.lineno}" for p in python_files("") for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Attribute) and n.attr in ("insert", "append", "extend")
             and isinstance(n.value, ast.Attribute) and n.value.attr == "path"
             and isinstance(n.value.value, ast.Name) and n.value.value.id == "sys"]
    assert not edits, "sys.path edits (install the project instead: pip install -e .):\n" + "\n".join(edits)


def test_the_install_adds_only_adams_optim_and_a_users_own_modules_change_nothing(tmp_path, data_dir):
    """Installing adds one name, adams_optim: `import config` from another folder fails (a user's own config is
    theirs), and train.py run by its path from a folder holding the user's own config/, data/ and metrics.py
    imports the repository's modules, not theirs."""
    import subprocess
    import sys

    import tomllib

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["packages"] == ["adams_optim"] and "py-modules" not in setup
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    for name in ("config", "metrics", "train", "scripts", "data", "study"):
        found = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, env=env, capture_output=True,
                               text=True)
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, f"{name} is installed"
    for name in ("config", "data"):  # the user's own packages, which would break the run if imported
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise RuntimeError('the user\'s own module was imported')\n")
    (tmp_path / "metrics.py").write_text("raise RuntimeError('the user\'s own module was imported')\n")
    result = subprocess.run([sys.executable, str(REPO / "train.py"), "--n_layer=1", "--n_embd=16", "--n_head=1",
                             "--block_size=16", "--batch_size=2", "--max_iters=2", "--eval_interval=2", "--eval_iters=1",
                             "--warmup_iters=1", "--lr_decay_iters=2", "--sample_tokens=0", "--device=cpu",
                             "--dataset=tiny", f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'run'}"], cwd=tmp_path,
                            env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


def test_the_top_level_holds_what_users_expect_and_nothing_else():
    """What git tracks at the root: the product's modules, its folders, README, LICENSE, pyproject and the
    CI script's folder. A figure or table written into the root by a command run from there (a stray
    ``--out NAME``) fails here instead of landing in a commit."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    top = {name.split("/", 1)[0] for name in tracked}
    folders = {"config", "data", "optim", "scripts", "study", "tests", "results", ".ci"}
    files = {"README.md", "LICENSE", "pyproject.toml", ".gitignore"}
    stray = sorted(name for name in top if name not in folders | files and not name.endswith(".py"))
    assert not stray, f"unexpected files at the repository's root (outputs of a command run from there?): {stray}"
