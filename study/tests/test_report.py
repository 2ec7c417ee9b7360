"""The study's report holds what its commands print: each pasted table is the table the command prints today."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STUDY_DOCS = [REPO / "study" / "README.md", *sorted((REPO / "study" / "report").glob("*.md"))]


def study_text() -> str:
    return "\n".join(path.read_text() for path in STUDY_DOCS)


def github_anchor(title: str) -> str:
    """The #fragment GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", ["depth.md", "llama.md", "gpu.md"])
def test_the_report_links_every_section_of_its_long_parts(doc):
    # the study (study/README.md and study/report/) lists each section of study/report/<doc> as a link by GitHub's anchor
    text = (REPO / "study" / "report" / doc).read_text()
    titles = re.findall(r"^##+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), flags=re.M)
    anchors = {github_anchor(title) for title in titles}
    links = re.findall(rf"\((?:\.\./)?(?:report/)?{re.escape(doc)}#([^)]+)\)", study_text())
    assert sorted(set(links)) == sorted(anchors), f"study/README.md's list of the sections in study/report/{doc} is out of date"


def test_the_report_holds_the_lr_table_lr_ratio_prints(tmp_path, capsys, lr_ratio):
    # study/report/every_scan.md's "Every lr scan at once" table is lr_ratio.py's output over the committed tables
    lr_ratio.main(["--out", str(tmp_path / "lr_ratio")])
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    results = study_text()
    assert printed[0] in results, "study/report/every_scan.md lacks lr_ratio's table header: run python -m study.lr_ratio"
    shown = results[results.index(printed[0]):].splitlines()[:len(printed)]
    assert shown == printed, "study/report/every_scan.md's lr table is stale: paste python -m study.lr_ratio's table"


def test_the_report_holds_the_tables_start_lr_prints(tmp_path, capsys, start_lr):
    # study/report/every_scan.md's "Where to start AdamS from a tuned AdamW" tables are start_lr.py's output
    start_lr.main(["--out", str(tmp_path / "start_lr")])
    tables = [block.strip() for block in capsys.readouterr().out.split("\n\n") if block.startswith("|")]
    results = study_text()
    assert len(tables) == 3
    for table in tables:
        assert table in results, "study/report/every_scan.md's start_lr tables are stale: paste python -m study.start_lr's tables"


def test_the_report_holds_the_tables_lr_sensitivity_prints(tmp_path, capsys, lr_sensitivity):
    # study/report/every_scan.md's "How much a ×2 miss costs" tables are lr_sensitivity.py's output
    lr_sensitivity.main(["--out", str(tmp_path / "lr_sensitivity")])
    tables = [block.strip() for block in capsys.readouterr().out.split("\n\n") if block.startswith("|")]
    results = study_text()
    assert len(tables) == 2
    for table in tables:
        assert table in results, "study/report/every_scan.md's lr_sensitivity tables are stale: paste python -m study.lr_sensitivity's tables"


def test_the_report_holds_the_tables_optimum_drift_prints(tmp_path, capsys, optimum_drift):
    # study/report/every_scan.md's "How far each optimum moves with run length" tables and summaries are optimum_drift.py's output
    optimum_drift.main(["--out", str(tmp_path / "optimum_drift")])
    blocks = [block.strip() for block in capsys.readouterr().out.split("\n\n")]
    results = study_text()
    shown = [b for b in blocks if b.startswith("|") or b.startswith("AdamS's spread") or b.startswith("within ")]
    assert len(shown) == 4
    for block in shown:
        assert block in results, "study/report/every_scan.md's optimum_drift table is stale: paste python -m study.optimum_drift's output"


def test_the_report_holds_the_tables_crossing_fit_prints(tmp_path, capsys, crossing_fit):
    # study/report/run_length_and_size.md's "When AdamW's lr carries over" fit lines and tables are crossing_fit.py's output, for the
    # crossing and for the ratio of the optima
    results = study_text()
    for of in ("crossing", "ratio"):
        crossing_fit.main(["--out", str(tmp_path / of), "--of", of, "--params", "820352", "--params", "124e6"])
        blocks = [block.strip() for block in capsys.readouterr().out.split("\n\n") if block.startswith(("|", "log2 "))]
        assert len(blocks) == 3
        for block in blocks:
            assert block in results, f"study/report/run_length_and_size.md's crossing_fit --of {of} tables are stale: paste its output"


def test_the_report_holds_the_seed_spread_table_of_the_law_tests(capsys, seed_spread):
    # study/report/summary.md's "Were the misses seed noise?" table is seed_spread.py's output over the tests' scans
    depth = "4l_100 4l_200 4l 4l_800 4l_1600 6l_100 6l_200 6l_400 6l_800 8l_200 8l 8l_800 16l_100 16l_200 16l_400 4l_w32_100 4l_w32_200 4l_w32_400 6l_w32_100"
    tables = ["study/results/lr_transfer/lr_transfer_law_0.8m.csv", *(f"study/results/lr_transfer/lr_transfer_depth_{d}.csv" for d in depth.split())]
    seed_spread.main([str(REPO / t) for t in tables])
    (table,) = [block.strip() for block in capsys.readouterr().out.split("\n\n") if block.startswith("|")]
    results = study_text()
    assert f"_{{{depth.replace(' ', ',')}}}.csv" in results, "study/report/summary.md's seed_spread command lists other scans than this test"
    assert table in results, "study/report/summary.md's seed_spread table is stale: paste python -m study.seed_spread's table"
