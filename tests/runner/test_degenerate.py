"""The report's degenerate-run section and the per-run CPU seconds and compile counts in meta.json."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax.runner import degenerate, report
from dpfair_jax.runner.context import run_experiment
from dpfair_jax.runner.registry import Experiment

_RNG = np.random.default_rng(3)
_N = 9
# a tradeoff-like table: the flags as fairness.evaluate writes them (constant_predictions, at_base_rate)
_TABLE = pd.DataFrame({
    "method": ["dpfermi", "dpsgd", "pfld_epoch"] * 3,
    "epsilon": [1.0] * 6 + [float("inf")] * 3,
    "lam": [1.0, 8.0, 8.0] * 3,
    "replicate": [0, 0, 0, 1, 1, 1, 0, 0, 0],
    "error": _RNG.uniform(0.1, 0.4, _N).round(3),
    "base_error": [0.247] * _N,
    "constant_predictions": [False, False, True, False, False, False, False, False, True],
    "at_base_rate": [False, True, True, False, False, True, False, False, False],
})
_TABLE["degenerate"] = _TABLE["constant_predictions"] | _TABLE["at_base_rate"]


def _flagged(config, ctx):
    ctx.save_table(_TABLE, "results")
    # a summary whose degenerate column is a fraction: not a per-run flag, left out
    ctx.save_table(_TABLE.groupby("method")[["degenerate"]].mean().reset_index(), "summary")
    ctx.add_claim("tradeoff_holds", "the frontier is lower", measured=0.1, target="< 0.2", passed=True)
    ctx.add_claim("tradeoff_fails", "the frontier is much lower", measured=0.1, target="< 0.01", passed=False,
                  reason="too few splits")
    ctx.skip_claim("tradeoff_skipped", "needs the Parkinsons data", "data absent")


def _clean(config, ctx):
    ctx.save_table(_TABLE.assign(degenerate=False, constant_predictions=False, at_base_rate=False), "results")
    f = jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0)
    f(jnp.arange(3.0)).block_until_ready()
    ctx.add_claim("clean_claim", "a claim on non-degenerate runs", measured=1, target=1, passed=True)


def _plain(config, ctx):
    ctx.add_claim("plain_claim", "a claim with no flagged table", measured=1, target=1, passed=True)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_report_lists_degenerate_runs_and_marks_their_claims(tmp_path):
    root = tmp_path / "results"
    for name, fn in (("flagged", _flagged), ("clean", _clean), ("plain", _plain)):
        run_experiment(Experiment(name, "004", f"{name} run", {"quick": {"seed": 0}}, fn), root=root, progress=False)
    text = report.build_report(root).read_text()
    expect = int(_TABLE["degenerate"].sum())
    constant = int((_TABLE["degenerate"] & _TABLE["constant_predictions"]).sum())
    assert (expect, constant) == (4, 2)  # the fixture as intended: 2 constant, 2 at base rate only
    assert "1 run(s) have degenerate training runs" in text
    sec = text[text.index("## Degenerate runs"):text.index("## Run times")]
    assert degenerate.EXPLANATION in " ".join(sec.split())  # the report wraps it at 160 characters
    rows = {c[0]: c for c in map(_cells, sec.splitlines()) if c and c[0].startswith("[")}
    assert set(rows) == {"[flagged](#flagged)", "[clean](#clean)"}  # the plain run has no flagged table
    flagged = rows["[flagged](#flagged)"]
    assert flagged[1:4] == [f"{expect} of {_N}", str(constant), str(expect - constant)]
    by = {m: (int(_TABLE[_TABLE.method == m].degenerate.sum()), int((_TABLE.method == m).sum()))
          for m in _TABLE.method.unique()}
    assert flagged[4] == ", ".join(f"{m} {d}/{n}" for m, (d, n) in by.items())
    assert rows["[clean](#clean)"][1] == f"0 of {_N}"
    details = (root / "runs" / "flagged" / "details.md").read_text()  # the rows themselves: in the run folder
    listing = details[details.index("## Degenerate rows"):]
    for _, r in _TABLE[_TABLE.degenerate].iterrows():
        assert (f"method {r.method}, epsilon {r.epsilon:g}, lam {r.lam:g}, replicate {r.replicate}: "
                f"{'constant predictions' if r.constant_predictions else 'at base rate'}, error {r.error:.3f} "
                "vs base rate 0.247") in listing
    assert "summary:" not in sec and "- `clean`" not in sec
    # the flagged run's block says its claims rest on degenerate rows; the other runs' blocks do not
    note = f"{expect} of {_N} rows degenerate"

    def block(name: str) -> str:
        start = text.index(f"### {name}")
        return " ".join(text[start:text.index("\n#", start + 1)].split())

    assert note in block("flagged") and "tradeoff_fails" not in block("flagged")
    assert "rows degenerate" not in block("clean") and "rows degenerate" not in block("plain")


def test_scan_run_without_flags_and_the_claim_note(tmp_path):
    assert degenerate.scan_run(tmp_path) is None
    pd.DataFrame({"a": [1, 2]}).to_csv(tmp_path / "t.csv", index=False)
    assert degenerate.scan_run(tmp_path) is None
    assert degenerate.claim_note(None) == "" and degenerate.claim_note({"degenerate": 0, "rows": 4}) == ""
    _TABLE.to_csv(tmp_path / "results.csv", index=False)
    sc = degenerate.scan_run(tmp_path, max_listed=1)
    assert (sc["degenerate"], sc["rows"], len(sc["listed"]), sc["more"]) == (4, _N, 1, 3)
    assert degenerate.report_lines([]) == []


def test_meta_records_cpu_seconds_and_compiles(tmp_path):
    root = tmp_path / "results"
    run_experiment(Experiment("clean", "004", "clean run", {"quick": {"seed": 0}}, _clean), root=root,
                   progress=False)
    meta = json.loads((root / "runs" / "clean" / "meta.json").read_text())
    assert meta["compiles"] >= 1 and meta["compile_seconds"] > 0  # the jitted function, compiled in the run
    assert 0 < meta["cpu_seconds"] and meta["compile_cache_hits"] >= 0
    text = report.build_report(root).read_text()
    row = next(_cells(line) for line in text[text.index("## Run times"):].splitlines() if line.startswith("| clean"))
    assert row[5] == str(meta["compiles"]) and row[4] != "n/a"
