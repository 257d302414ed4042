"""The public tradeoff study's frontier plot (``TradeoffStudy.plot``) on a study table built by hand:
the plotted lines are the Pareto sets of ``TradeoffStudy.frontier()``'s means, the bands its
intervals clipped to [0, 1], degenerate points marked, panels and axes named, legend public."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from dpfair_jax.runner import plots
from dpfair_jax.studies.tradeoff import TradeoffStudy, plot_study

LABEL = {"dpfermi": "DP-FERMI", "pfld_epoch": "PF-LD (Tran et al.)", "dpsgd": "DP-SGD (lambda = 0)"}


def _table(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for m, lams in (("dpfermi", (0.5, 2.0, 8.0, 40.0)), ("pfld_epoch", (0.5, 2.0, 8.0, 40.0)), ("dpsgd", (0.0,))):
        for e in (1.0, np.inf):
            for lam in lams:
                for r in range(4):
                    err = 0.2 + 0.02 * np.log1p(lam) + rng.normal(0, 0.01)
                    vio = max(0.0, 0.3 / (1 + lam) + rng.normal(0, 0.05))  # near 0: the t-interval dips below 0
                    rows.append({"method": m, "epsilon": e, "lam": lam, "replicate": r, "error": err,
                                 "violation": vio, "degenerate": bool(m == "pfld_epoch" and lam == 40.0 and r == 0),
                                 "unit": "example-level", "metric": "dp_violation"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def study() -> TradeoffStudy:
    return TradeoffStudy(_table(), spends={}, fairness="dp")


def _lines(ax):
    joined = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "none", "")]
    return {ln.get_label(): ln for ln in joined}


def test_lines_are_the_pareto_sets_of_the_frontier_table(study):
    fig = study.plot(title="toy study")
    ft = study.frontier()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["epsilon = 1, example-level unit", "non-private, example-level unit"]
    for ax, eps in zip(axes, (1.0, np.inf)):
        assert ax.get_xlabel() == "test error (mean)" and ax.get_ylabel() == "DP violation (mean)"
        joined = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "none", "")]
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        methods = sorted(LABEL, key=lambda m: LABEL[m])  # the plot orders methods by their public name
        assert len(joined) == len(methods) == len(bands)
        for line, band, m in zip(joined, bands, methods):
            sub = ft[(ft.method == m) & (ft.epsilon == eps)]
            keep = plots.pareto_mask(sub.error_mean.to_numpy(), sub.violation_mean.to_numpy())
            order = np.argsort(sub.error_mean.to_numpy()[keep])
            np.testing.assert_allclose(line.get_xdata(), sub.error_mean.to_numpy()[keep][order])
            np.testing.assert_allclose(line.get_ydata(), sub.violation_mean.to_numpy()[keep][order])
            ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
            lo = np.clip(sub.violation_lo.to_numpy()[keep][order], 0, 1)
            hi = np.clip(sub.violation_hi.to_numpy()[keep][order], 0, 1)
            assert ys.min() >= 0.0 and ys.max() <= 1.0
            np.testing.assert_allclose([ys.min(), ys.max()], [lo.min(), hi.max()])
    texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert set(LABEL.values()) <= set(texts) and all(plots.is_public(t) for t in texts)
    assert any("degenerate" in t for t in texts) and any("95% CI" in t for t in texts)
    assert fig._suptitle.get_text() == "toy study"


def test_degenerate_cross_marks_the_points_with_a_degenerate_replicate(study):
    fig = study.plot()
    ax = fig.axes[0]
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert len(crosses) == 1
    ft = study.frontier()
    row = ft[(ft.method == "pfld_epoch") & (ft.epsilon == 1.0) & (ft.lam == 40.0)]
    np.testing.assert_allclose(crosses[0].get_xdata(), row.error_mean)
    np.testing.assert_allclose(crosses[0].get_ydata(), row.violation_mean)


def test_plot_study_draws_the_interval_asked_for(study):
    """``plot_study(table, confidence=...)`` bands are ``frontier(confidence)``'s intervals."""
    for conf in (0.8, 0.99):
        fig = plot_study(study.table, confidence=conf)
        ft = study.frontier(conf)
        sub = ft[(ft.method == "dpfermi") & (ft.epsilon == 1.0)]
        keep = plots.pareto_mask(sub.error_mean.to_numpy(), sub.violation_mean.to_numpy())
        band = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)][0]  # DP-FERMI sorts first
        ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
        want = np.clip(np.r_[sub.violation_lo.to_numpy()[keep], sub.violation_hi.to_numpy()[keep]], 0, 1)
        np.testing.assert_allclose([ys.min(), ys.max()], [want.min(), want.max()])
        assert any(f"{conf:.0%} CI" in t.get_text() for lg in fig.legends for t in lg.get_texts())


def test_plot_tradeoff_draws_the_sweeps_frontiers():
    """The fixed-hyperparameter engine's plot: per epsilon, each method's Pareto set of its seed means,
    in error order (no zig-zag in lambda order), the unit in the title, names from the public vocabulary."""
    from dpfair_jax.studies.tradeoff import plot_tradeoff

    rng = np.random.default_rng(1)
    rows = [{"method": m, "unit": "all_features", "epsilon": e, "lam": lam, "seed": s,
             "error": 0.2 + 0.03 * np.sin(3 * lam) + rng.normal(0, 0.01), "dp_violation": rng.uniform(0, 0.2)}
            for m in ("dpfermi", "pfld") for e in (0.5, 2.0) for lam in (0.0, 0.5, 1.0, 2.0, 4.0) for s in range(3)]
    df = pd.DataFrame(rows)
    fig = plot_tradeoff(df, "dp_violation", "sweep")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["epsilon = 0.5, example-level unit", "epsilon = 2, example-level unit"]
    means = df.groupby(["method", "epsilon", "lam"])[["error", "dp_violation"]].mean()
    for ax, eps in zip(axes, (0.5, 2.0)):
        assert ax.get_ylabel() == "DP violation (mean)"
        joined = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "none", "")]
        for line, m in zip(joined, ("dpfermi", "pfld")):
            sub = means.loc[(m, eps)]
            keep = plots.pareto_mask(sub.error.to_numpy(), sub.dp_violation.to_numpy())
            np.testing.assert_allclose(line.get_xdata(), np.sort(sub.error.to_numpy()[keep]))
            assert np.all(np.diff(line.get_xdata()) >= 0)
    texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert {"DP-FERMI", "PF-LD"} <= set(texts) and all(plots.is_public(t) for t in texts)
    assert not any(ax.get_legend() for ax in fig.axes)  # the legend is below the panels, off the data


def test_unconverged_points_are_marked_and_the_frontier_carries_the_share():
    """``converged`` (a nullable boolean per row): ``frontier()`` gives the share of converged replicates
    per point (NaN where no replicate has a flag), and the plot draws a hollow square on exactly the
    points with an unconverged replicate; points without a criterion are not marked."""
    t = _table(2)
    flag = pd.Series(True, index=t.index, dtype="boolean")
    flag[(t.method == "pfld_epoch") & (t.epsilon == 1.0)] = False  # every replicate unconverged
    flag[(t.method == "dpfermi") & (t.epsilon == 1.0) & (t.lam == 2.0) & (t.replicate == 1)] = False
    flag[t.method == "dpsgd"] = pd.NA  # no criterion: not assessed
    t["converged"] = flag
    st = TradeoffStudy(t, spends={}, fairness="dp")
    ft = st.frontier()
    share = ft.set_index(["method", "epsilon", "lam"])["converged"]
    assert (share.loc["pfld_epoch", 1.0] == 0.0).all() and (share.loc["pfld_epoch", np.inf] == 1.0).all()
    assert share.loc[("dpfermi", 1.0, 2.0)] == 0.75 and share.loc[("dpfermi", 1.0, 0.5)] == 1.0
    assert share.loc["dpsgd"].isna().all()
    fig = st.plot()
    for ax, eps in zip(fig.axes, (1.0, np.inf)):
        squares = [ln for ln in ax.get_lines() if ln.get_marker() == "s" and ln.get_markerfacecolor() == "none"]
        got = sorted(zip(np.concatenate([ln.get_xdata() for ln in squares]) if squares else [],
                         np.concatenate([ln.get_ydata() for ln in squares]) if squares else []))
        want = ft[(ft.epsilon == eps) & (ft.converged < 1.0)]
        assert got == sorted(zip(want.error_mean, want.violation_mean))
        assert len(got) == (5 if eps == 1.0 else 0)
    texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "not converged" in texts and all(plots.is_public(x) for x in texts)
