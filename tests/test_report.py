"""Tests of the Markdown report built from the results store."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from dpfair_jax.runner import plots, report
from dpfair_jax.runner.context import run_experiment
from dpfair_jax.runner.registry import Experiment


def _good(config, ctx):
    df = pd.DataFrame({"eps": [1.0, 1.0, 2.0, 2.0], "seed": [0, 1, 0, 1], "err": [0.5, 0.7, 0.2, 0.3]})
    ctx.save_table(df, "sweep")
    ctx.save_figure(plots.error_vs_budget(df, "eps", "err"), "err_vs_eps")
    ctx.add_claim("r_pass", "error falls with epsilon", measured=0.35, target="< 0.6", passed=True)
    ctx.add_claim("r_fail", "error | below 0.1", measured=np.float64(0.25), target=0.1, passed=False)
    ctx.skip_claim("r_skip", "needs the K = 5 cell", "the grid has no K = 5 cell", target="> 0.1")
    ctx.add_check("r_formula", "closed form equals SciPy", measured=1e-15, target="<= 1e-12", passed=True)
    ctx.add_check("r_formula_bad", "ledger equals Lemma A.4 by hand", measured=None, target="importable",
                  passed=False, reason="accounting failed to import")
    ctx.record_privacy("training", {"epsilon": 2.0, "delta": 1e-5, "relation": "replace_one",
                                    "unit": "sensitive_attribute"})


def _bad(config, ctx):
    ctx.add_claim("r_partial", "recorded before the crash", measured=1, target=1, passed=True, paper="002")
    raise ValueError("bad config value")


def _make_runs(root: Path) -> None:
    run_experiment(Experiment("r_good", "001", "A good run.", {"quick": {"seed": 5}}, _good), root=root,
                   progress=False)
    run_experiment(Experiment("r_bad", "kit", "A failing run.", {"quick": {}}, _bad), root=root,
                   progress=False, raise_errors=False)


def test_report_claims_table_first_then_sections(tmp_path):
    _make_runs(tmp_path)
    path = report.build_report(tmp_path, import_errors={"dpfair_experiments.paper_004.study": "ImportError: x"})
    assert path == tmp_path / "report" / "REPORT.md"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ")
    # skipped claims are counted apart from failures; formula checks apart from claims
    assert ("4 claims in 2 experiment runs: **2 passed, 1 failed, 1 skipped**; 2 formula checks: "
            "**1 passed, 1 failed**.") in text
    claims_at = text.index("## Claims")
    table_at = text.index("| | id | paper |")
    formula_at = text.index("## Formula checks")
    sections_at = text.index("## Experiments")
    assert claims_at < table_at < formula_at < sections_at
    assert text.index("## Modules that failed to import") > formula_at
    assert text.index("## Runs that did not complete") > formula_at
    # nothing but the summary comes before the claims table
    assert "###" not in text[:table_at] and "![" not in text[:table_at]
    claim_rows = [ln for ln in text[claims_at:formula_at].splitlines() if ln[:6] in ("| PASS", "| FAIL", "| SKIP")]
    check_rows = [ln for ln in text[formula_at:sections_at].splitlines() if ln[:6] in ("| PASS", "| FAIL")]
    assert len(claim_rows) == 4 and len(check_rows) == 2
    row = {r.split("|")[2].strip(): r for r in claim_rows}
    assert set(row) == {"r_pass", "r_fail", "r_skip", "r_partial"}  # no formula check among the claims
    assert row["r_pass"].startswith("| PASS") and row["r_fail"].startswith("| FAIL")
    assert row["r_skip"].startswith("| SKIP") and "skipped: the grid has no K = 5 cell" in row["r_skip"]
    check = {r.split("|")[2].strip(): r for r in check_rows}
    assert check["r_formula"].startswith("| PASS") and check["r_formula_bad"].startswith("| FAIL")
    assert "failed: accounting failed to import" in check["r_formula_bad"]
    assert "Claims: 1/3 passed, 1 skipped; formula checks: 1/2 passed." in text
    assert "error \\| below 0.1" in row["r_fail"]  # pipes escaped inside cells
    assert row["r_partial"].split("|")[3].strip() == "002"
    # papers first, kit last
    assert text.index("### r_good") < text.index("### r_bad")
    assert "Status: **failed**" in text and "bad config value" in text
    assert "| training | 2 | 1e-05 | n/a | replace_one | sensitive_attribute |" in text
    assert "paper_004" in text
    figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figs == ["../runs/r_good/figures/err_vs_eps.png"]
    assert (path.parent / figs[0]).resolve().is_file()
    assert "[sweep.csv](../runs/r_good/sweep.csv)" in text


def test_report_without_runs(tmp_path):
    text = report.build_report(tmp_path).read_text()
    assert "0 claims in 0 experiment runs" in text and "No claims recorded yet" in text
    assert "No formula checks recorded." in text


def test_report_reads_rows_without_kind_or_status(tmp_path):
    """claims.json written before rows had kind/status: claims, passed or failed by ``passed``."""
    d = tmp_path / "runs" / "old_run"
    d.mkdir(parents=True)
    (d / "claims.json").write_text('[{"id": "a", "paper": "000", "statement": "s", "measured": 1, "target": 1, '
                                   '"passed": true}, {"id": "b", "paper": "000", "statement": "s", "measured": 0, '
                                   '"target": 1, "passed": false}]')
    text = report.build_report(tmp_path).read_text()
    assert "2 claims in 1 experiment runs: **1 passed, 1 failed, 0 skipped**; 0 formula checks" in text
    assert "| PASS | a |" in text and "| FAIL | b |" in text


def test_report_tolerates_partial_run_directory(tmp_path):
    _make_runs(tmp_path)
    (tmp_path / "runs" / "r_killed").mkdir()
    (tmp_path / "runs" / "r_killed" / "claims.json").write_text("[{\"id\": \"half")  # torn by hand
    text = report.build_report(tmp_path).read_text()
    assert "`r_killed`: no meta.json" in text
