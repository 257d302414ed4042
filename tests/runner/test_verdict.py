"""The verdict rule (``dpfair_jax.runner.verdict``) against SciPy and against its own Monte Carlo.

The intervals are SciPy's ``t`` intervals; the minimum detectable effect is checked by simulation
(a true effect equal to it is detected at about the stated power); the status table is written out
case by case from the rule's statement; ``add_verdict`` writes the record the report prints.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from dpfair_jax.runner import verdict as V
from dpfair_jax.runner.context import RunContext
from dpfair_jax.runner.registry import Experiment
from dpfair_jax.runner.report import format_measured

PAPER = V.PaperEffect(source="Fig. 1, Adult DP, eps = 1", value=0.02)


def test_estimate_matches_scipy_t_interval():
    x = np.random.default_rng(0).normal(0.01, 0.03, size=9)
    est = V.estimate_from_replicates(x)
    lo, hi = est.interval(0.99)
    ref = stats.t.interval(0.99, df=8, loc=x.mean(), scale=stats.sem(x))
    assert est.replicates == 9 and est.df == 8
    np.testing.assert_allclose([lo, hi], ref, rtol=1e-12)


def test_bonferroni_level():
    est = V.Estimate(0.0, 1.0, 7.0, 8)
    v = V.directional_verdict(est, PAPER, alpha=0.05, comparisons=4)
    assert v.level == pytest.approx(1 - 0.05 / 4)
    assert v.interval[1] == pytest.approx(stats.t.ppf(1 - 0.05 / 8, 7))


def test_mde_formula_and_replicates_needed():
    se, df = 0.01, 11.0
    mde = V.minimum_detectable_effect(se, df, alpha=0.05, power=0.8, comparisons=3)
    assert mde == pytest.approx((stats.t.ppf(1 - 0.05 / 6, df) + stats.t.ppf(0.8, df)) * se)
    sd, margin = 0.05, 0.02
    r = V.replicates_needed(sd, margin, comparisons=3)
    assert V.minimum_detectable_effect(sd / math.sqrt(r), r - 1, comparisons=3) <= margin
    assert V.minimum_detectable_effect(sd / math.sqrt(r - 1), r - 2, comparisons=3) > margin
    assert V.replicates_needed(sd, 1e-6, max_replicates=100) is None
    assert V.replicates_needed(0.0, margin) == 2


def test_power_by_simulation():
    """A true effect equal to the detectable effect is detected (interval above 0) in about
    ``power`` of the runs; tolerance: 4 binomial standard errors over 4000 simulated studies."""
    rng = np.random.default_rng(1)
    sd, reps, power = 1.0, 30, 0.8
    mde = V.minimum_detectable_effect(sd / math.sqrt(reps), reps - 1, power=power)
    sims = 4000
    data = rng.normal(mde, sd, size=(sims, reps))
    holds = [V.directional_verdict(V.estimate_from_replicates(row), PAPER).status == "holds" for row in data]
    rate = float(np.mean(holds))
    se = math.sqrt(power * (1 - power) / sims)
    # The normal approximation to the noncentral t is slightly optimistic at df = 29 (about 1 point).
    assert abs(rate - power) < 4 * se + 0.015, rate


@pytest.mark.parametrize(
    "value, se, paper_value, status",
    [
        (0.05, 0.01, 0.02, "holds"),          # above 0
        (0.005, 0.001, 0.02, "holds"),        # above 0 but below the paper's effect (noted)
        (-0.05, 0.01, 0.02, "fails"),         # the other side
        (0.0, 0.002, 0.02, "fails"),          # powered, no effect, the paper's effect ruled out
        (0.0, 0.05, 0.02, "underpowered"),    # the detectable effect exceeds the paper's
        (0.0, 0.05, None, "underpowered"),    # direction only: never "fails" without a detected sign
    ],
)
def test_directional_status_table(value, se, paper_value, status):
    paper = V.PaperEffect(source="x", value=paper_value)
    v = V.directional_verdict(V.Estimate(value, se, 7.0, 8), paper)
    assert v.status == status
    assert (v.reason is None) == (status == "holds")
    if status == "underpowered" and paper_value is not None:
        assert v.minimum_detectable_effect > paper_value and "too small" in v.reason
    if (value, se) == (0.005, 0.001):
        assert "significantly smaller" in v.note


def test_range_status_table():
    paper = V.PaperEffect(source="Fig. 6", low=0.10, high=0.50)
    assert V.range_verdict(V.Estimate(0.3, 0.02, 9.0), paper).status == "holds"
    assert V.range_verdict(V.Estimate(0.8, 0.02, 9.0), paper).status == "fails"
    assert V.range_verdict(V.Estimate(0.02, 0.005, 9.0), paper).status == "fails"
    assert V.range_verdict(V.Estimate(0.1, 0.1, 9.0), paper).status == "underpowered"
    around0 = V.PaperEffect(source="no difference", low=-0.01, high=0.01)
    assert V.range_verdict(V.Estimate(0.0, 0.001, 9.0), around0).status == "holds"
    assert V.range_verdict(V.Estimate(0.0, 0.02, 9.0), around0).status == "underpowered"
    with pytest.raises(ValueError, match="stated range"):
        V.range_verdict(V.Estimate(0.0, 0.02, 9.0), PAPER)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: V.estimate_from_replicates([1.0]), "at least 2"),
        (lambda: V.estimate_from_replicates([1.0, float("nan")]), "finite"),
        (lambda: V.PaperEffect(source="", value=0.1), "source"),
        (lambda: V.PaperEffect(source="x", value=-0.1), "> 0"),
        (lambda: V.PaperEffect(source="x", low=0.1), "together"),
        (lambda: V.minimum_detectable_effect(1.0, 5.0, alpha=1.5), "alpha"),
        (lambda: V.minimum_detectable_effect(1.0, 5.0, comparisons=0), "comparisons"),
        (lambda: V.replicates_needed(1.0, 0.0), "margin > 0"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_add_verdict_writes_the_record(tmp_path):
    exp = Experiment(name="verdict_demo", paper="004", description="d", configs={"quick": {}},
                     run=lambda c, ctx: None)
    ctx = RunContext(exp, {}, tmp_path / "run", progress=False)
    v = V.directional_verdict(V.Estimate(0.0, 0.05, 7.0, 8), PAPER, comparisons=4)
    row = ctx.add_verdict("p004_demo", "DP-FERMI's violation is below PF-LD's", v, reason="Adult DP")
    assert row["status"] == "underpowered" and not row["passed"]
    assert row["reason"].startswith("Adult DP; the detectable effect")
    saved = json.loads((tmp_path / "run" / "claims.json").read_text())[0]
    assert saved["measured"]["mde"] == pytest.approx(v.minimum_detectable_effect)
    assert saved["target"]["source"] == PAPER.source
    text = format_measured(saved["measured"])
    assert text.startswith("effect 0 (98.75% CI [") and "8 replicates" in text and "detectable" in text
    assert format_measured(saved["target"]) == "0.02 (Fig. 1, Adult DP, eps = 1)"
    held = ctx.add_verdict("p004_demo2", "s", V.directional_verdict(V.Estimate(0.5, 0.01, 7.0, 8), PAPER))
    assert held["status"] == "holds" and held["passed"]
    with pytest.raises(ValueError, match="Verdict"):
        ctx.add_verdict("p004_demo3", "s", {"status": "holds"})
    more = ctx.add_verdict("p004_demo4", "s", v, extra={"replicates_needed": 31, "sd": 0.14})
    assert more["measured"]["replicates_needed"] == 31 and more["measured"]["mde"] == v.minimum_detectable_effect
    assert format_measured(more["measured"]).endswith("; needs 31 replicates)")
    over = dict(more["measured"], replicates_needed=None, max_replicates=32)
    assert format_measured(over).endswith("; needs more than 32 replicates)")
    with pytest.raises(ValueError, match="cannot replace"):
        ctx.add_verdict("p004_demo5", "s", v, extra={"mde": 0.0})
