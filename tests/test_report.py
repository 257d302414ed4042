"""Tests of the Markdown report built from the results store."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpfair_jax.runner import plots, report
from dpfair_jax.runner.context import comparison, run_experiment
from dpfair_jax.runner.registry import Experiment


def _good(config, ctx):
    df = pd.DataFrame({"eps": [1.0, 1.0, 2.0, 2.0], "seed": [0, 1, 0, 1], "err": [0.5, 0.7, 0.2, 0.3]})
    ctx.save_table(df, "sweep")
    ctx.save_figure(plots.error_vs_budget(df, "eps", "err"), "err_vs_eps")
    ctx.add_claim("r_pass", "error falls with epsilon", measured=0.35, target="< 0.6", passed=True,
                  reason="kept only if it failed")
    ctx.add_claim("r_fail", "error | below 0.1", measured=ctx.comparison(np.float64(0.124), 0.130, ci=(-0.010, -0.002)),
                  target=0.1, passed=False, reason="the paper's margin is below the test split's standard error")
    ctx.add_claim("r_recon", "mitigation is fairer", measured={"gap": 0.2281, "gap_before": 0.259}, target="lower",
                  passed=True, status="reconstruction", reason="the paper does not specify the statistics release")
    ctx.add_claim("r_untest", "GEM lowers parity error", measured=None, target="lower", passed=False,
                  status="untestable", reason="no GEM port")
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


def _rows(text: str, start: str, end: str, key: int = 1) -> dict[str, list[str]]:
    part = text[text.index(start):text.index(end)]
    out = {}
    for line in part.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]  # escaped pipes stay in cells
        if len(cells) > 2 and not set(cells[0]) <= {"-"} and cells[0] not in ("status", "id", "experiment"):
            out[cells[key]] = cells
    return out


def test_report_opens_with_the_size_then_what_does_not_hold(tmp_path, monkeypatch):
    study = tmp_path / "experiments" / "paper_001"
    study.mkdir(parents=True)
    (study / "README.md").write_text("# Paper 001\n\n## Reproduction (measured)\n\ntext\n\n## Fig 12\n\n"
                                     "The reconstruction r_recon is explained here.\n")
    monkeypatch.setenv("DPFAIR_EXPERIMENTS", str(tmp_path / "experiments"))
    root = tmp_path / "results"
    _make_runs(root)
    path = report.build_report(root, import_errors={"dpfair_experiments.paper_004.study": "ImportError: x"})
    assert path == root / "report" / "REPORT.md"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ")
    intro = lines[2]
    assert intro.startswith("**Quick size.**") and "smoke checks at small size" in intro
    assert "dpfair run NAME" in intro and "experiments/paper_001/README.md" not in intro.split("](")[0]
    assert "[paper_001/README.md](../../experiments/paper_001/README.md)" in intro
    # statuses counted apart: skipped and labelled rows are not failures
    assert ("6 claims in 2 experiment runs: **2 hold, 1 fail, 1 untestable, 1 reconstructions, 1 skipped** "
            "(skipped: a grid cell or optional data set absent from the run; not failures); 2 formula checks: "
            "**1 hold, 1 fail**.") in text
    order = [text.index(h) for h in ("## Claims that do not hold", "## Skipped claims", "## Claims\n",
                                     "## Formula checks", "## Modules that failed to import",
                                     "## Runs that did not complete", "## Run times", "## Experiments")]
    assert order == sorted(order)
    assert "###" not in text[:order[0]] and "![" not in text[:order[2]]
    open_rows = _rows(text, "## Claims that do not hold", "## Skipped claims")
    assert set(open_rows) == {"r_fail", "r_recon", "r_untest", "r_formula_bad"}
    fail = open_rows["r_fail"]
    assert fail[0] == "**fails**" and fail[2] == "error \\| below 0.1"  # pipes escaped inside cells
    assert fail[3] == "0.124 vs 0.130 (diff -0.006, 95% CI [-0.010, -0.002])"
    assert fail[5] == "the paper's margin is below the test split's standard error"
    assert fail[6] == "[paper_001/README.md](../../experiments/paper_001/README.md#reproduction-measured)"
    recon = open_rows["r_recon"]
    assert recon[0] == "reconstruction" and recon[3] == "gap 0.228, gap_before 0.259"
    assert recon[6].endswith("#fig-12)")  # the heading above the line that names the claim
    assert open_rows["r_untest"][0] == "untestable" and open_rows["r_untest"][5] == "no GEM port"
    assert open_rows["r_formula_bad"][0] == "**fails** (formula check)"
    skipped = _rows(text, "## Skipped claims", "## Claims\n", key=0)
    assert skipped["r_skip"][3] == "the grid has no K = 5 cell"
    claims = _rows(text, "## Claims\n", "## Formula checks")
    assert set(claims) == {"r_pass", "r_fail", "r_recon", "r_untest", "r_skip", "r_partial"}
    assert claims["r_pass"][0] == "holds" and claims["r_skip"][0] == "skipped"
    assert claims["r_skip"][5] == "n/a (the grid has no K = 5 cell)"
    assert claims["r_partial"][2] == "002"
    checks = _rows(text, "## Formula checks", "## Modules that failed")
    assert checks["r_formula"][0] == "holds" and checks["r_formula"][5] == "1e-15"
    assert "Claims: 1 hold, 1 fail, 1 untestable, 1 reconstructions, 1 skipped; formula checks: 1/2 hold." in text
    # papers first, kit last
    assert text.index("### r_good") < text.index("### r_bad")
    assert "Status: **failed**" in text and "bad config value" in text
    # every privacy row names its unit and relation
    assert "| name | unit | relation | epsilon | delta | rho | notes |" in text
    assert "| training | sensitive attribute only | replace-one | 2 | 1e-05 | n/a |  |" in text
    assert "paper_004" in text
    # wall, CPU, compiles, compile seconds, persistent-cache loads, chunks computed and reused
    assert re.search(r"\| r_good \| quick \| complete \| \d+\.\d s \| \d+\.\d s \| \d+ \| [^|]+ \| \d+ \| 0 \| 0 \|", text)
    figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figs == ["../runs/r_good/figures/err_vs_eps.png"]
    assert (path.parent / figs[0]).resolve().is_file()
    assert "[sweep.csv](../runs/r_good/sweep.csv)" in text


@pytest.mark.parametrize("value, text", [
    (None, "n/a"),
    (0.12345, "0.123"),
    (5e-8, "5e-08"),
    (12345.6, "12346"),
    (100000, "100000"),
    ([108175552, 943489814335488], "[1.08e+08, 9.43e+14]"),
    (True, "yes"),
    ("inf", "inf"),
    ({"max_abs_z": 1.1049, "at_sigma": 2.0}, "max_abs_z 1.1, at_sigma 2"),
    ({"a": {"b": 0.5}}, "a (b 0.5)"),
    (list(range(10)), "[0, 1, 2, 3, 4, 5, 6, 7, ... 2 more]"),
    (comparison(0.124, 0.13), "0.124 vs 0.130 (diff -0.006)"),
    (comparison(12.0, 3.5, ci=(7.1, 9.9), level=0.9, names=["dpfermi", "pfld"]),
     "dpfermi 12.0 vs pfld 3.5 (diff 8.5, 90% CI [7.1, 9.9])"),
])
def test_measured_is_readable(value, text):
    assert report.format_measured(value) == text


def test_comparison_validates_its_interval():
    with pytest.raises(ValueError, match="low <= high"):
        comparison(1.0, 2.0, ci=(0.5, -0.5))


def test_report_without_runs(tmp_path):
    text = report.build_report(tmp_path).read_text()
    assert "0 claims in 0 experiment runs" in text and "No claims recorded yet" in text
    assert "No formula checks recorded." in text


def test_report_reads_rows_written_before_statuses(tmp_path):
    """claims.json rows without kind/status, or with the former "passed"/"failed": claims that hold or fail."""
    d = tmp_path / "runs" / "old_run"
    d.mkdir(parents=True)
    (d / "claims.json").write_text('[{"id": "a", "paper": "000", "statement": "s", "measured": 1, "target": 1, '
                                   '"passed": true}, {"id": "b", "paper": "000", "statement": "s", "measured": 0, '
                                   '"target": 1, "passed": false}, {"id": "c", "paper": "000", "statement": "s", '
                                   '"measured": 0, "target": 1, "passed": false, "status": "failed"}]')
    text = report.build_report(tmp_path).read_text()
    assert "3 claims in 1 experiment runs: **1 hold, 2 fail, 0 skipped**; 0 formula checks" in text
    assert "| holds | a |" in text and "| **fails** | b |" in text and "| **fails** | c |" in text
    assert "no reason recorded" in text


def test_report_tolerates_partial_run_directory(tmp_path):
    _make_runs(tmp_path)
    (tmp_path / "runs" / "r_killed").mkdir()
    (tmp_path / "runs" / "r_killed" / "claims.json").write_text("[{\"id\": \"half")  # torn by hand
    text = report.build_report(tmp_path).read_text()
    assert "`r_killed`: no meta.json" in text


def test_full_size_intro(tmp_path):
    run_experiment(Experiment("r_full", "kit", "Full.", {"quick": {}, "full": {}}, lambda c, x: None), size="full",
                   root=tmp_path, progress=False)
    assert report.build_report(tmp_path).read_text().splitlines()[2].startswith("**Full size.**")
