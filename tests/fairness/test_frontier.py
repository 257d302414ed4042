"""Tradeoff frontiers (dpfair_jax.fairness.frontier) against brute force and closed forms."""

import itertools

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpfair_jax.fairness import frontier as F


def _table(methods: dict, seeds: int, noise: float, rng) -> pd.DataFrame:
    """Rows (method, epsilon, lam, seed, error, violation) around exact (error, violation) curves."""
    rows = []
    for m, pts in methods.items():
        for (lam, (e, v)), s in itertools.product(enumerate(pts), range(seeds)):
            rows.append({"method": m, "epsilon": 1.0, "lam": float(lam), "seed": s,
                         "error": e + noise * rng.standard_normal(),
                         "violation": v + noise * rng.standard_normal()})
    return pd.DataFrame(rows)


def test_frontier_curve_matches_brute_force():
    rng = np.random.default_rng(0)
    e, v = rng.uniform(0, 1, 7), rng.uniform(0, 1, 7)
    levels = np.linspace(-0.1, 1.1, 25)
    got = F.frontier_curve(e, v, levels)
    want = [min([vi for ei, vi in zip(e, v) if ei <= lv], default=np.inf) for lv in levels]
    np.testing.assert_array_equal(got, want)
    assert np.all(np.diff(got[np.isfinite(got)]) <= 0)  # non-increasing


def test_frontier_table_means_and_t_intervals():
    rng = np.random.default_rng(1)
    df = _table({"a": [(0.2, 0.10), (0.25, 0.05)]}, seeds=5, noise=0.01, rng=rng)
    tab = F.frontier_table(df)
    sub = df[df.lam == 0.0]
    row = tab[tab.lam == 0.0].iloc[0]
    half = stats.t.ppf(0.975, 4) * sub.error.std() / np.sqrt(5)
    assert row.error_mean == pytest.approx(sub.error.mean())
    assert row.error_hi - row.error_mean == pytest.approx(half)
    assert row.n == 5 and (tab.violation_lo >= 0).all()


def test_violation_at_error_and_reach():
    rng = np.random.default_rng(2)
    df = _table({"a": [(0.20, 0.10), (0.30, 0.02)]}, seeds=40, noise=0.002, rng=rng)
    out = F.violation_at_error(df, [0.1, 0.25, 0.35], bootstrap=400)
    assert np.isinf(out.violation[0]) and out.reached[0] == 0.0  # level below every point
    assert out.violation[1] == pytest.approx(0.10, abs=0.003) and out.reached[1] == 1.0
    assert out.violation[2] == pytest.approx(0.02, abs=0.003)
    assert out.lo[2] <= out.violation[2] <= out.hi[2]


def test_area_between_known_step_frontiers():
    """a: violation 0.10 on [0.2, 0.3), 0.05 from 0.3; b: 0.04 on [0.2, 0.3), 0.03 from 0.3. Over
    [0.2, 0.4] the exact area is 0.1*0.06 + 0.1*0.02 = 0.008 (up to the grid's step placement)."""
    rng = np.random.default_rng(3)
    df = _table({"a": [(0.2, 0.10), (0.3, 0.05)], "b": [(0.2, 0.04), (0.3, 0.03)]}, seeds=60,
                noise=0.001, rng=rng)
    res = F.area_between(df, "a", "b", 1.0, error_range=(0.2 + 1e-3, 0.4), bootstrap=400, grid=2001)
    assert res["area"] == pytest.approx(0.008, rel=0.03)
    assert res["lo"] <= res["area"] <= res["hi"] and res["finite_fraction"] == 1.0
    flipped = F.area_between(df, "b", "a", 1.0, error_range=(0.2 + 1e-3, 0.4), bootstrap=50, grid=2001)
    assert flipped["area"] == pytest.approx(-res["area"])


def test_interval_shrinks_with_replicates():
    widths = []
    for seeds in (10, 160):
        df = _table({"a": [(0.2, 0.10), (0.3, 0.05)], "b": [(0.2, 0.04), (0.3, 0.03)]}, seeds=seeds,
                    noise=0.01, rng=np.random.default_rng(seeds))
        r = F.area_between(df, "a", "b", 1.0, error_range=(0.25, 0.4), bootstrap=400)
        widths.append(r["hi"] - r["lo"])
    assert widths[1] < widths[0] / 2.5  # ~ 1/sqrt(16) = 1/4


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="missing"):
        F.frontier_table(pd.DataFrame({"method": ["a"], "epsilon": [1.0]}))
    df = _table({"a": [(0.2, 0.1)]}, 2, 0.0, np.random.default_rng(0))
    df.loc[0, "error"] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        F.frontier_table(df)


def test_plot_names_the_unit_and_every_series():
    df = _table({"dpfermi": [(0.2, 0.10), (0.3, 0.05)], "dpsgd": [(0.19, 0.12)]}, 3, 0.01,
                np.random.default_rng(4))
    fig = F.plot_frontiers(F.frontier_table(df), unit="example-level")
    ax = fig.axes[0]
    assert "example-level" in ax.get_title()
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]  # one legend, off the panels
    assert {"DP-FERMI", "DP-SGD (lambda = 0)"} <= set(labels)


def _curve(points, epsilon=1.0):
    return pd.DataFrame([{"epsilon": epsilon, "lam": float(k), "error_mean": e, "violation_mean": v}
                         for k, (e, v) in enumerate(points)])


def test_relative_violation_gain_hand_computed():
    """first: (0.10, 0.20) -> (0.12, 0.10) -> (0.16, 0.02) in knob order. At error 0.11 the linear
    curve is 0.15, at 0.14 it is 0.06; 0.09 and 0.20 are outside its range. The step frontier
    (smallest violation with error <= level) is 0.20, 0.10, none, 0.02."""
    first = _curve([(0.10, 0.20), (0.12, 0.10), (0.16, 0.02)])
    base = _curve([(0.11, 0.30), (0.14, 0.09), (0.09, 0.40), (0.20, 0.05)])
    g = F.relative_violation_gain(first, base)
    np.testing.assert_allclose(g.first_violation, [0.15, 0.06, np.nan, np.nan])
    np.testing.assert_allclose(g.gain, [1.0, 0.5, np.nan, np.nan])  # (v_b - v_f) / v_f
    assert g.reached.tolist() == [True, True, False, False]
    assert g.baseline_knob.tolist() == [0.0, 1.0, 2.0, 3.0]
    rel_b = F.relative_violation_gain(first, base, relative_to="baseline")
    np.testing.assert_allclose(rel_b.gain, [0.5, 1 / 3, np.nan, np.nan])  # (v_b - v_f) / v_b
    step = F.relative_violation_gain(first, base, interpolation="step")
    np.testing.assert_allclose(step.first_violation, [0.20, 0.10, np.nan, 0.02])
    np.testing.assert_allclose(step.gain, [0.5, -0.1, np.nan, 1.5])
    # the paper's summary: mean and median over the reached rows
    assert g.gain[g.reached].mean() == pytest.approx(0.75)


def test_relative_violation_gain_follows_the_plotted_curve_and_groups():
    """A curve that turns back in error is read on its first segment (in knob order) containing the
    level, not on the points sorted by error: at 0.14 the segment (0.12, 0.10) -> (0.15, 0.05)
    gives 0.1 - 0.05 * 2/3; sorted by error it would be 0.10."""
    first = pd.concat([_curve([(0.10, 0.20), (0.13, 0.15), (0.12, 0.10), (0.15, 0.05)], 1.0),
                       _curve([(0.10, 0.08)], 3.0)])
    base = pd.concat([_curve([(0.14, 0.10), (0.125, 0.2)], 1.0), _curve([(0.10, 0.04)], 3.0),
                      _curve([(0.12, 0.1)], 9.0)])
    g = F.relative_violation_gain(first, base)
    np.testing.assert_allclose(g.first_violation,
                               [0.1 - 0.05 * 2 / 3, 0.20 - 0.05 * 0.025 / 0.03, 0.08, np.nan])
    np.testing.assert_allclose(g.epsilon, [1.0, 1.0, 3.0, 9.0])
    assert g.gain[2] == pytest.approx(-0.5) and not g.reached[3]  # epsilon 9: no curve for first
    one = F.relative_violation_gain(first[first.epsilon == 3.0], base[base.epsilon == 3.0], by=())
    assert one.gain.tolist() == pytest.approx([-0.5])


def test_relative_violation_gain_refuses_bad_input():
    first = _curve([(0.10, 0.20), (0.12, 0.10)])
    with pytest.raises(ValueError, match="interpolation"):
        F.relative_violation_gain(first, first, interpolation="cubic")
    with pytest.raises(ValueError, match="relative_to"):
        F.relative_violation_gain(first, first, relative_to="both")
    with pytest.raises(ValueError, match="several rows"):
        F.relative_violation_gain(pd.concat([first, first]), first)
    with pytest.raises(ValueError, match="missing"):
        F.relative_violation_gain(first.drop(columns="epsilon"), first)


def _pts(rows):
    return pd.DataFrame(rows, columns=["method", "epsilon", "lam", "replicate", "error", "violation"])


def test_violation_gap_readings_and_paired_effect_hand_computed():
    rows = []
    for r, shift in ((0, 0.0), (1, 0.01)):
        # A's frontier in replicate r: errors 0.10/0.12/0.14, violations 0.30/0.20/0.10 (+ shift)
        for lam, e, v in ((0.0, 0.10, 0.30), (1.0, 0.12, 0.20), (2.0, 0.14, 0.10)):
            rows.append(("A", 1.0, lam, r, e, v + shift))
        # B: two points, error 0.13 (v 0.25) and 0.09 (v 0.40: below every A error, unreached)
        rows.append(("B", 1.0, 1.0, r, 0.13, 0.25))
        rows.append(("B", 1.0, 2.0, r, 0.09, 0.40))
        # a second epsilon: B at error 0.15 (v 0.12); A's frontier there is 0.10 (+ shift)
        for lam, e, v in ((0.0, 0.10, 0.30), (1.0, 0.12, 0.20), (2.0, 0.14, 0.10)):
            rows.append(("A", 3.0, lam, r, e, v + shift))
        rows.append(("B", 3.0, 1.0, r, 0.15, 0.12))
        rows.append(("B", float("inf"), 1.0, r, 0.15, 0.12))  # eps = inf is left out by default
        rows.append(("A", float("inf"), 1.0, r, 0.15, 0.0))
    df = _pts(rows)
    rd = F.violation_gap_readings(df, "A", "B")
    assert len(rd) == 2 * 3 and rd["reached"].sum() == 4
    r0 = rd[(rd.replicate == 0) & rd.reached].sort_values(["epsilon"])
    np.testing.assert_allclose(r0["gap"], [0.25 - 0.20, 0.12 - 0.10])
    per = F.paired_violation_gap(df, "A", "B")
    np.testing.assert_allclose(per["effect"], [(0.05 + 0.02) / 2, (0.04 + 0.01) / 2])
    assert per["readings"].tolist() == [2, 2] and per["points"].tolist() == [3, 3]
    # a tolerance: B at 0.09 + 0.02 = 0.11 reaches A's 0.10 point (v 0.30): gap 0.40 - 0.30
    tol = F.paired_violation_gap(df, "A", "B", slack=0.02, epsilons=[1.0])
    np.testing.assert_allclose(tol["effect"], [((0.25 - 0.10) + 0.10) / 2, ((0.25 - 0.11) + 0.09) / 2])
    # the estimate of the verdict rule takes it as is
    from dpfair_jax.runner.verdict import estimate_from_replicates

    est = estimate_from_replicates(per["effect"])
    assert est.value == pytest.approx(0.03) and est.replicates == 2


def test_a_dominated_baseline_point_is_read_on_the_baselines_frontier():
    # B's point at error 0.14 has violation 0.50, but B also reaches 0.12 with 0.20: B(0.14) = 0.20
    df = _pts([("A", 1.0, 0.0, 0, 0.10, 0.30), ("A", 1.0, 1.0, 0, 0.13, 0.05),
               ("B", 1.0, 0.0, 0, 0.12, 0.20), ("B", 1.0, 1.0, 0, 0.14, 0.50)])
    rd = F.violation_gap_readings(df, "A", "B").sort_values("baseline_knob")
    np.testing.assert_allclose(rd["baseline_violation"], [0.20, 0.20])
    np.testing.assert_allclose(rd["gap"], [0.20 - 0.30, 0.20 - 0.05])
    assert F.paired_violation_gap(df, "A", "B")["effect"].tolist() == [pytest.approx(0.025)]


def test_paired_violation_gap_refuses_bad_input():
    df = _pts([("A", 1.0, 0.0, 0, 0.1, 0.1), ("B", 1.0, 0.0, 0, 0.1, 0.2)])
    with pytest.raises(ValueError, match="baseline='C' is not a method"):
        F.paired_violation_gap(df, "A", "C")
    with pytest.raises(ValueError, match="slack must be"):
        F.paired_violation_gap(df, "A", "B", slack=-0.1)
    assert F.paired_violation_gap(df, "A", "B")["effect"].tolist() == [pytest.approx(0.1)]
