"""Tests of the Markdown report built from the results store."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpfair_jax.runner import plots, report
from dpfair_jax.runner.papers import PAPERS, citation
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


def test_report_reads_like_an_appendix(tmp_path, monkeypatch):
    study = tmp_path / "experiments" / "paper_001"
    study.mkdir(parents=True)
    (study / "README.md").write_text("# Paper 001\n\n## Reproduction (measured)\n\ntext\n")
    monkeypatch.setenv("DPFAIR_EXPERIMENTS", str(tmp_path / "experiments"))
    root = tmp_path / "results"
    _make_runs(root)
    path = report.build_report(root, import_errors={"dpfair_experiments.paper_004.study": "ImportError: x"})
    assert path == root / "report" / "REPORT.md"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ") and max(map(len, lines)) <= 200
    intro = lines[2]
    assert intro.startswith("**Quick size.**") and "smoke checks at small size" in intro
    assert "dpfair run NAME" in text.split("\n\n")[1]
    # statuses counted apart; the skipped one named as a grid cell left out
    summary = " ".join(text.split("\n\n")[2].splitlines())
    assert ("6 claims in 2 experiment runs: **2 hold, 1 fail, 1 untestable, 1 reconstruction, 1 skipped** "
            "(1 grid cell this size leaves out; not failures); 2 formula checks: **1 hold, 1 fail**.") in summary
    # one section per paper, headed by its title and citation, the study page linked
    sec = text[text.index("## Paper 001: " + PAPERS["001"]["title"]):text.index("## Kit checks")]
    assert PAPERS["001"]["authors"] in sec and PAPERS["001"]["link"] in sec
    assert "[paper_001/README.md](../../experiments/paper_001/README.md)" in sec
    assert text.index("## Paper 001") < text.index("## Kit checks") < text.index("## Modules that failed to import")
    assert text.index("## Runs that did not complete") < text.index("## Run times")
    good = sec[sec.index("### r_good"):]
    assert "[details.md](../runs/r_good/details.md)" in good
    rows = _rows(good, "| claim |", "![", key=0)
    rows.pop("claim")  # the header
    assert set(rows) == {"error falls with epsilon", "error \\| below 0.1", "mitigation is fairer",
                         "GEM lowers parity error", "needs the K = 5 cell", "ledger equals Lemma A.4 by hand"}
    fail = rows["error \\| below 0.1"]
    assert fail[1:] == ["0.1", "0.124 vs 0.13, diff -0.006 [-0.01, -0.002]", "**fails**",
                        "the paper's margin is below the test split's standard error"]
    assert rows["mitigation is fairer"][2:4] == ["gap = 0.228, gap_before = 0.259", "reconstruction"]
    assert rows["needs the K = 5 cell"][2:] == ["n/a", "skipped", "left out at this size: the grid has no K = 5 cell"]
    assert rows["ledger equals Lemma A.4 by hand"][3] == "**fails** (formula)"
    assert "closed form equals SciPy" not in good  # a formula check that holds is counted, not listed
    assert "Formula checks: 1/2 hold" in good or "formula checks: 1/2 hold" in good
    # privacy: unit and relation named
    assert "unit sensitive attribute only, replace-one, epsilon 2, delta 1e-05" in " ".join(good.split())
    figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figs == ["../runs/r_good/figures/err_vs_eps.png"]
    assert (path.parent / figs[0]).resolve().is_file()
    assert "Status: **failed**" in text and "bad config value" in text
    # the raw values live in the run folder
    details = (root / "runs" / "r_good" / "details.md").read_text()
    assert "r_fail" in details and "| training | sensitive attribute only | replace-one |" in details
    assert "[sweep.csv](sweep.csv)" in details and '"seed": 5' in details
    assert re.search(r"\| r_good \| quick \| complete \| \d+\.\d s \| \d+\.\d s \| \d+ \| [^|]+ \| \d+ \| 0 \| 0 \|", text)


def _skipped_run(config, ctx):
    ctx.skip_claim("p_gain", "DP-FERMI is fairer on Parkinsons", "Parkinsons CSV not given (set config path=...)")
    ctx.skip_claim("p_gain2", "second", "Parkinsons CSV not given (set config path=...)")


def _delta_run(config, ctx):
    ctx.add_claim("d", "a claim", measured={"effect": 0.01, "ci": [-0.02, 0.04], "mde": 0.03, "level": 0.95},
                  target={"value": 0.0064, "low": None, "high": None, "source": "Fig 3"}, passed=False,
                  status="underpowered", reason="too few replicates. More text that is not shown.")
    ctx.skip_claim("g", "a grid claim", "needs two finite epsilons, the grid has 1")
    ctx.record_privacy("fit", {"epsilon": 1.0, "delta": 1e-6, "relation": "add_remove", "unit": "example"})


def test_skipped_run_and_delta_zero(tmp_path):
    """A run that skipped every claim for missing data reads "skipped" with its reason (not "complete");
    skipped cells are told apart from missing data; config delta 0 is explained as 1/n^2."""
    run_experiment(Experiment("p_skip", "004", "Parkinsons.", {"quick": {"delta": 0.0}}, _skipped_run), root=tmp_path,
                   progress=False)
    run_experiment(Experiment("p_delta", "004", "Adult.", {"quick": {"delta": 0.0}}, _delta_run), root=tmp_path,
                   progress=False)
    text = report.build_report(tmp_path).read_text()
    start = text.index("### p_skip")
    block = text[start:text.index("\n#", start + 1)]
    assert "Status: **skipped** (Parkinsons CSV not given" in " ".join(block.split())
    assert "**complete**" not in block and "1/n^2" not in block  # no spend recorded: nothing to explain
    assert "1 run(s) skipped" in " ".join(text.split())
    assert "(1 grid cell this size leaves out, 2 missing data or packages; not failures)" in " ".join(text.split())
    row = next(line for line in text.splitlines() if line.startswith("| a claim |"))
    assert _rows(row + "\n", "| a claim", "\n", key=0)["a claim"][1:] == [
        "0.0064", "effect 0.01 [-0.02, 0.04]", "underpowered", "too few replicates"]
    assert "`delta: 0` means delta = 1/n^2" in " ".join(text.split())
    assert "1/n^2" in (tmp_path / "runs" / "p_delta" / "details.md").read_text()
    runs_row = next(line for line in text.splitlines() if line.startswith("| p_skip | quick |"))
    assert runs_row.split("|")[3].strip() == "skipped"


@pytest.mark.parametrize("value, text", [
    (None, "n/a"),
    (0.5, "0.5"),
    ({"effect": 0.0015, "ci": [-0.346, 0.349], "mde": 0.36, "level": 0.9833, "per_split": [0.01, -0.007]},
     "effect 0.0015 [-0.346, 0.349] (98.3%)"),
    ({"group_mean": {"cells": 9, "ci": [0.53, 0.55], "value": 0.54}, "summed": {"value": 0.0}},
     "group_mean: 0.54 [0.53, 0.55]; +1 more"),
    ({"a": 1.0, "b": 2, "c": "x", "d": 4.0, "e": {"f": 1}}, "a = 1, b = 2, c = x, +2 more"),
    ({"r": {"s": {"t": 1}, "u": 2.0}}, "r: u = 2, +1 more"),
    ([1, 2, 3, 4, 5, 6], "[1, 2, 3, 4, ... 2 more]"),
])
def test_format_short_has_no_nested_dumps(value, text):
    assert report.format_short(value) == text


def test_citations_come_from_one_table():
    assert set(PAPERS) == {"000", "001", "002", "003", "004"}
    for pid, p in PAPERS.items():
        assert p["title"] and p["authors"] and p["venue"]
        assert p["title"] in citation(pid)
    with pytest.raises(ValueError, match="unknown paper"):
        citation("999")


def test_skip_kind():
    assert report.skip_kind("'law' not in this config's real_datasets []") == "grid"
    assert report.skip_kind("AIM needs smartnoise-synth: pip install 'dpfair_jax[synth]'") == "data"
    assert report.skip_kind("Parkinsons CSV not given") == "data"


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
    assert "3 claims in 1 experiment run: **1 hold, 2 fail, 0 skipped**; 0 formula checks" in text
    assert "| s | 1 | 1 | holds |  |" in text and text.count("| s | 1 | 0 | **fails** | no reason recorded |") == 2


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


def _appendix_run(config, ctx):
    per_eps = {f"eps={e}": {"level": 0.17, **{b: {"value": 0.1, "vs": 0.12, "diff": -0.02, "ci": [-0.05, 0.01],
                                                  "status": st, "names": ["dpfermi", b]}
                                              for b, st in (("dpsgd", "lower"), ("pfld", "unresolved"))}}
               for e in (0.5, 1, 3)}
    long_reason = "not resolved at this size: " + "; ".join(f"eps {e} vs pfld: unresolved, diff +0.01" for e in range(12))
    ctx.add_claim("c_long", "At every finite epsilon DP-FERMI reaches a lower violation than each baseline at equal "
                  "error (paired bootstrap over splits)", measured=per_eps, target="lower", passed=False,
                  reason=long_reason)
    ctx.add_claim("c_short", "lambda = 0 is converged", measured=0.1, target="<= 0.2", passed=True)


def test_report_notes_tallies_old_figures_predates_and_terms(tmp_path):
    """What a reader of the appendix needs: nested comparisons counted by status (not a dict dump),
    a cut statement or reason given in full in a numbered note below the table, figures stored in
    the run folder itself inlined, stored results that predate the code said so, the terms used
    explained, and counts in the singular when there is one."""
    run_experiment(Experiment("p_app", "004", "Tradeoff.", {"quick": {}}, _appendix_run), root=tmp_path,
                   progress=False)
    d = tmp_path / "runs" / "p_app"
    fig = plots.error_vs_budget(pd.DataFrame({"eps": [1.0, 2.0], "seed": [0, 0], "err": [0.3, 0.2]}), "eps", "err")
    fig.savefig(d / "tradeoff_old.png")
    (tmp_path / "runs" / "PREDATES.json").write_text('{"reason": "computed by an earlier study version"}')
    text = report.build_report(tmp_path).read_text()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 200
    assert "2 claims in 1 experiment run:" in text and "0 formula checks" in text
    row = next(ln for ln in lines if ln.startswith("| At every finite epsilon"))
    assert "| 6 comparisons: 3 lower, 3 unresolved |" in row and row.endswith(" [1] |")
    notes = " ".join(ln for ln in text[text.index("- [1] "):].split("\n\n")[0].splitlines())
    assert notes.startswith("- [1] Claim: At every finite epsilon DP-FERMI reaches a lower violation than each "
                            "baseline at equal error (paired bootstrap over splits). Reason: not resolved")
    assert "eps 11 vs pfld" in notes  # the reason's list in full (it fits the note's length)
    assert "| lambda = 0 is converged | <= 0.2 | 0.1 | holds |  |" in lines  # nothing cut: no note
    assert "![tradeoff_old](../runs/p_app/tradeoff_old.png)" in text
    assert "Stored results that predate the current code**: computed by an earlier study version." in " ".join(lines)
    terms = " ".join(text[text.index("Terms: "):].split("\n\n")[0].split())
    assert "DP-FERMI: paper 004's method" in terms and "lambda: the fairness weight" in terms
    assert "PF-LD" not in terms and "R_clip" not in terms and "add/remove" not in terms  # not used here
