"""Every figure function renders on small synthetic inputs with a title, axis labels, legend
entries from the public vocabulary (``runner.plots.LABELS`` / ``plots.is_public``) and interval
artists inside the plotted quantity's range."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from dpfair_jax.fairness import frontier as FR
from dpfair_jax.runner import plots

RNG_SEED = 0


class _Ctx:
    """The part of a run context the figure functions use: ``save_figure`` keeps the figure."""

    def __init__(self) -> None:
        self.figures: dict[str, Any] = {}

    def save_figure(self, fig: Any, name: str) -> None:
        plots.finish(fig)
        fig.canvas.draw()
        self.figures[name] = fig


def _legend_texts(fig: Any) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def _interval_ys(fig: Any) -> np.ndarray:
    """The y coordinates of every band (fill_between) and error-bar segment of ``fig``."""
    ys = []
    for ax in fig.axes:
        for coll in ax.collections:
            if isinstance(coll, PolyCollection):
                ys += [np.asarray(p.vertices, dtype=float).reshape(-1, 2)[:, 1] for p in coll.get_paths()]
            elif isinstance(coll, LineCollection):
                ys += [np.asarray(seg, dtype=float).reshape(-1, 2)[:, 1] for seg in coll.get_segments()]
    return np.concatenate(ys) if ys else np.zeros(0)


def check_figure(fig: Any, *, low: float = 0.0, high: float = np.inf) -> None:
    """A title on every visible axes (or a suptitle), x and y labels, public legend entries, and
    intervals within [low, high]."""
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert axes
    for ax in axes:
        assert ax.get_title() or suptitle, "an axes without a title"
        assert ax.get_xlabel(), f"no x label on {ax.get_title()!r}"
        assert ax.get_ylabel(), f"no y label on {ax.get_title()!r}"
    for text in _legend_texts(fig):
        assert plots.is_public(text), f"legend entry {text!r} is not from the public vocabulary"
    ys = _interval_ys(fig)
    ys = ys[np.isfinite(ys)]
    if ys.size:
        assert ys.min() >= low - 1e-12, f"an interval reaches {ys.min()} below {low}"
        assert ys.max() <= high + 1e-12, f"an interval reaches {ys.max()} above {high}"


def _check_all(ctx: _Ctx, **kw: Any) -> None:
    assert ctx.figures
    for fig in ctx.figures.values():
        check_figure(fig, **kw)


# ------------------------------------------------------------------------------------------------
# the vocabulary


def test_is_public_rejects_internal_names():
    for bad in ("strat", "pub_strat", "strat_add_remove", "reference_code", "pfld_epoch", "dpfermi"):
        assert not plots.is_public(bad)
        assert plots.is_public(plots.label(bad))
    assert plots.is_public("DPNoSE (equal), group 2")
    assert plots.label(0.5) == "0.5"


def test_pareto_mask_against_brute_force():
    rng = np.random.default_rng(RNG_SEED)
    e, v = rng.uniform(size=40), rng.uniform(size=40)
    want = np.array([not any((e[j] <= e[i]) and (v[j] <= v[i]) and (e[j] < e[i] or v[j] < v[i])
                             for j in range(40)) for i in range(40)])
    np.testing.assert_array_equal(plots.pareto_mask(e, v), want)
    assert plots.pareto_mask([0.1, np.nan], [0.1, 0.0]).tolist() == [True, False]


# ------------------------------------------------------------------------------------------------
# the shared helpers


def _tradeoff_rows(n_eps: int = 4) -> pd.DataFrame:
    """4 methods x 8 lambdas x ``n_eps`` epsilons x 3 replicates with violations near 0, so a
    t-interval over 3 replicates reaches far below 0 and above 1 unless clipped."""
    rng = np.random.default_rng(RNG_SEED)
    rows = []
    for m in ("dpfermi", "pfld_epoch", "pfld_stochastic", "dpsgd"):
        for e in (0.5, 1.0, 3.0, np.inf)[:n_eps]:
            for lam in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0):
                for r in range(3):
                    rows.append({"method": m, "epsilon": e, "lam": lam, "replicate": r,
                                 "error": rng.uniform(0.1, 0.5),
                                 "violation": float(rng.choice([0.0, 0.9, 1.0]))})
    return pd.DataFrame(rows)


def test_plot_frontiers_pareto_clipped_marked():
    df = _tradeoff_rows()
    ft = FR.frontier_table(df)
    ft["degenerate"] = ft["error_mean"] > 0.4
    ft["converged"] = ft["lam"] < 40
    assert (ft["violation_hi"] > 1).any()  # frontier_table clips at [0, inf) only: the plot must clip at 1
    fig = FR.plot_frontiers(ft, unit="example-level", violation_label="DP violation", title="demo")
    check_figure(fig, low=0.0, high=1.0)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4 and all("epsilon" in ax.get_title() or "non-private" in ax.get_title() for ax in axes)
    texts = _legend_texts(fig)
    assert any("degenerate" in t for t in texts) and any("not converged" in t for t in texts)
    assert {"DP-FERMI", "PF-LD (Tran et al.)"} <= set(texts)
    assert not any(ax.get_legend() for ax in fig.axes)  # the legend is off the data (below the panels)
    # each method's line joins its Pareto set only, in error order (no zig-zags)
    ax0 = axes[0]
    sub = ft[(ft.method == "dpfermi") & (ft.epsilon == 0.5)]
    keep = plots.pareto_mask(sub.error_mean.to_numpy(), sub.violation_mean.to_numpy())
    joined = [ln for ln in ax0.get_lines() if ln.get_linestyle() not in ("None", "none", "")]
    xs = joined[0].get_xdata()
    assert len(xs) == keep.sum() and np.all(np.diff(xs) >= 0)
    # knobs written sparingly: at most two per method and panel
    assert len(ax0.texts) <= 2 * 4


def test_tradeoff_error_vs_budget_bars_in_range():
    df = _tradeoff_rows(3)
    df = df[df.lam == 1.0]
    check_figure(plots.tradeoff(df, "error", "violation", hue="method", panel="epsilon", bounds=(0, 1),
                                title="t"), high=1.0)
    check_figure(plots.error_vs_budget(df, "epsilon", "violation", hue="method", bounds=(0, 1), title="t"),
                 high=1.0)
    check_figure(plots.grouped_bars(df, "method", "violation", bounds=(0, 1), title="t"), high=1.0)
    # a DP violation is a rate: the default bounds clip its band at 1 as well as at 0
    dv = df.rename(columns={"violation": "dp_violation"})
    check_figure(plots.error_vs_budget(dv, "epsilon", "dp_violation", hue="method", title="t"), high=1.0)


# ------------------------------------------------------------------------------------------------
# the studies' figure functions


def test_paper_000_two_group():
    from experiments.paper_000 import figures

    rows = []
    for b1, b2 in ((1.0, -1.0), (-1.0, 1.0)):
        for m in ("dpse", "dpnose", "equal", "dpse_fair", "equal_fair"):
            for g in (1, 2):
                for rho in (0.01, 0.1, 1.0):
                    rows.append({"ratio": 20, "noise_sd": 1.0, "beta1": b1, "beta2": b2, "method": m, "group": g,
                                 "rho": rho, "mspe": 0.01 / rho, "se": 0.02 / rho})
    ctx = _Ctx()
    figures.two_group(pd.DataFrame(rows), ctx)
    _check_all(ctx)
    titles = [ax.get_title() for fig in ctx.figures.values() for ax in fig.axes]
    assert all(t.startswith("slopes") for t in titles)


def test_paper_001_figures():
    from experiments.paper_001 import figures

    rows = [{"clip_norm": c, "normalization": nm, "group": a, "epsilon": e, "risk": 0.01 * e, "risk_se": 0.05,
             "checkpoint": 1, "grad_norm": 1.0} for c in (1.0, 4.0) for nm in ("standard", "group")
            for a in (0, 1) for e in (0.5, 1.0, 2.0)]
    dec = pd.DataFrame([{"group": a, "epsilon": e, "r_clip": 0.1, "psi_term": 0.2} for a in (0, 1)
                        for e in (0.5, 1.0)])
    ratio = pd.DataFrame([{"group": a, "ratio": r, "risk": 0.01, "risk_se": 0.05} for a in (0, 1) for r in (1, 4)])
    ctx = _Ctx()
    rng = np.random.default_rng(RNG_SEED)
    figures.dpsgd(ctx, pd.DataFrame(rows), dec, ratio, rng.uniform(size=20), rng.uniform(size=20), 1.0)
    f9 = pd.DataFrame([{"dataset": d, "epsilon": e, **{f"{q}_{n}": 0.01 for q in ("gap", "mean_risk")
                                                       for n in ("standard", "group")},
                        **{f"{q}_{n}_se": 0.05 for q in ("gap", "mean_risk") for n in ("standard", "group")}}
                       for d in ("adult", "credit") for e in (0.5, 1.0)])
    figures.fig9(ctx, f9)
    gammas = [0.0, 1.0]
    agg = pd.DataFrame([{"split": "test", "gamma1": g1, "gamma2": g2, "gap": 0.1, "accuracy": 0.8}
                        for g1 in gammas for g2 in gammas])
    figures.mitigation(ctx, agg, gammas, (0.0, 1.0))
    _check_all(ctx)


def test_paper_002_figures():
    from experiments.paper_002 import figures

    rng = np.random.default_rng(RNG_SEED)
    rows = [{"method": m, "epsilon": e, "seed": s, "excess": rng.uniform(0, 0.05), "violation": rng.uniform(0, 0.02),
             "h": rng.uniform(0, 1)} for m in ("exp_sampling", "lopt_alg2") for e in (0.5, 1.0, 2.0) for s in range(3)]
    rows.append({"method": "frank_wolfe", "epsilon": np.inf, "seed": 0, "excess": 0.0, "violation": 0.0, "h": 0.1})
    ctx = _Ctx()
    figures.bgl(pd.DataFrame(rows), ctx, "law school")
    eo = [{"method": "exp_sampling", "epsilon": e, "p_success": 0.5, "p_success_vs_mixture": 0.4,
           "test_error": 0.2, "test_eo_gap": 0.1, "seed": 0} for e in (0.5, 1.0, 2.0)]
    eo += [{"method": "frank_wolfe", "epsilon": np.inf, "test_error": 0.2, "test_eo_gap": 0.05, "seed": 0}]
    eo += [{"method": "dpfermi_lam1", "epsilon": e, "test_error": 0.25, "test_eo_gap": 0.1, "seed": 0}
           for e in (0.5, 1.0)]
    figures.eo_exact(pd.DataFrame(eo), ctx, "adult", eps_bound=3.0)
    sc = pd.DataFrame([{"K": K, "inv_alpha": a, "n0_alg1": a * K, "n0_alg1_bound": 2 * a * K,
                        "n0_alg2_analysis": 3 * a * K} for K in (2, 4) for a in (2.0, 4.0, 8.0)])
    figures.scaling(sc, ctx)
    _check_all(ctx)


def test_paper_003_figures():
    from experiments.paper_003 import figures

    th = [{"check": "thm9", "k": k, "alpha": a, "theory": 1.0, "measured": 1.0, "se": 0.01}
          for k in (2, 4) for a in (0.1, 1.0)]
    th += [{"check": "prop8", "gamma_q": g, "k": k, "normalized": 1.0} for g in (0.05, 0.1) for k in (2, 4)]
    ctx = _Ctx()
    figures.theory(pd.DataFrame(th), ctx)
    names = ("coinpress", "strat", "pub_strat", "strat_add_remove", "reference_code")
    mix = pd.DataFrame([{"n_tot": n, "k": k, "alpha": np.float32(a), **{m: 0.1 + i for i, m in enumerate(names)}}
                        for n in (100, 200, 400) for k in (2, 4) for a in (0.1, 1.0)])
    figures.mixture(mix, ctx, {"alphas": [0.1, 1.0], "ks": [2, 4]})
    st = pd.DataFrame([{"variable": v, "k": k, "err_coinpress": 0.1, "err_strat": 0.2, "err_pub_strat": 0.3,
                        "parity_coinpress": 0.1, "parity_strat": 0.2} for v in ("age", "hours-per-week")
                       for k in (1, 2, 4)])
    figures.strata(st, ctx, ["age", "hours-per-week"])
    syn = pd.DataFrame([{"variant": v, "epsilon": e, "accuracy": 0.8, "parity_error": 0.1, "dp_ratio": 0.9}
                        for v in ("vanilla", "sex", "sex_race") for e in (1.0, 5.0)])
    figures.synthesis(syn, ctx)
    _check_all(ctx)
    mixture = ctx.figures["mixture"]
    assert mixture._suptitle is not None and all(ax.get_ylabel() for ax in mixture.axes)
    assert "StratCOINPRESS" in _legend_texts(mixture)


@pytest.mark.parametrize("name", sorted(plots.LABELS))
def test_labels_are_public(name):
    assert plots.is_public(plots.LABELS[name])


def test_paper_001_fig8_draws_the_monte_carlo_and_theorem_1():
    from experiments.paper_001 import figures

    rows = [{"dataset": d, "group": a, "epsilon": e, "risk_mc": (1 + a) / e ** 2, "risk_mc_se": 0.6 * (1 + a) / e ** 2,
             "risk_thm1": 1.1 * (1 + a) / e ** 2, "trace_exact": 1.0 + 3 * a}
            for d in ("synthetic", "adult") for a in (0, 1) for e in (0.5, 1.0, 2.0)]
    df = pd.DataFrame(rows)
    ctx = _Ctx()
    fig = figures.fig8(ctx, df)
    assert set(ctx.figures) == {"fig8_output_perturbation"}
    check_figure(fig, low=0.0)
    ax = fig.axes[0]
    assert ax.get_title() == "Fig 8: synthetic" and ax.get_yscale() == "log" and ax.get_xscale() == "log"
    lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    lines.update({c.get_label(): c[0] for c in ax.containers})  # error-bar series: their data line
    g1 = df[(df.dataset == "synthetic") & (df.group == 1)]
    np.testing.assert_allclose(lines["group 1, Theorem 1"].get_ydata(), g1.risk_thm1)
    mc = lines["group 1, Monte Carlo (Tr H = 4)"]
    np.testing.assert_allclose(mc.get_ydata(), g1.risk_mc)
    # +-2 SE bars: the upper end at mean + 2 SE, the lower end above 0 (a log axis) even where 2 SE > mean
    ys = _interval_ys(fig)
    assert ys.min() > 0
    np.testing.assert_allclose(ys.max(), (df.risk_mc + 2 * df.risk_mc_se).max())


def test_paper_002_crossover_draws_the_closed_forms():
    from dpfair_jax.analysis import sample_complexity as S
    from experiments.paper_002 import figures

    ctx = _Ctx()
    fig = figures.crossover(ctx, [1.0, 2.0])
    assert set(ctx.figures) == {"crossover"}
    check_figure(fig)
    left, right = fig.axes
    lines = {ln.get_label(): ln for ln in left.get_lines()}
    alphas = lines["Jagielski et al. (Cor. C.2), r = 2"].get_xdata()
    np.testing.assert_allclose(lines["Jagielski et al. (Cor. C.2), r = 2"].get_ydata(),
                               S.jagielski_n0(2, 1.0, 1.0, alphas, 2.0))
    np.testing.assert_allclose(lines["reduction (Cor. 8.9): |A|^4 VC / (epsilon alpha^3)"].get_ydata(),
                               S.eo_reduction_n0(2, 1.0, 1.0, alphas))
    ratio = {ln.get_label(): ln for ln in right.get_lines()}["r = 1"]
    np.testing.assert_allclose(ratio.get_ydata(), S.jagielski_over_reduction(ratio.get_xdata(), 0.01, 1.0))
    assert "alpha" in left.get_xlabel() and "groups" in right.get_xlabel() and fig._suptitle is not None


def _seeds(rng, n_seeds, **cells):
    return [dict(cells, seed=s) for s in range(n_seeds)]


def test_paper_004_official_curves_means_and_intervals():
    from scipy import stats

    from experiments.paper_004 import figures

    rng = np.random.default_rng(RNG_SEED)
    rows = [{"cell0": c, "cell0_group": g, "lam": lam, "seed": s, "error": 0.2 + 0.01 * lam + rng.normal(0, 0.01),
             "dp_violation": max(0.0, 0.05 / (1 + lam) + rng.normal(0, 0.03)),
             "degenerate": int(c == "advantaged" and lam == 10.0 and s == 0)}
            for c, g in (("advantaged", "White"), ("disadvantaged", "Non-White")) for lam in (0.0, 1.0, 10.0)
            for s in range(3)]
    df = pd.DataFrame(rows)
    ctx = _Ctx()
    fig = figures.official_curves(df, ctx)
    assert set(ctx.figures) == {"official_code_curves"}
    check_figure(fig, low=0.0, high=1.0)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "test error (mean)" and ax.get_ylabel() == "DP violation (mean)"
    texts = _legend_texts(fig)
    assert "cell 0 = White (advantaged group)" in texts and "cell 0 = Non-White (disadvantaged group)" in texts
    line = {c.get_label(): c[0] for c in ax.containers}["cell 0 = White (advantaged group)"]
    part = df[df.cell0 == "advantaged"].groupby("lam")
    np.testing.assert_allclose(line.get_xdata(), part.error.mean())  # lambda order, as the paper joins them
    np.testing.assert_allclose(line.get_ydata(), part.dp_violation.mean())
    # vertical bars: the 95% t-interval over 3 seeds, clipped at 0
    half = stats.t.ppf(0.975, 2) * part.dp_violation.std() / np.sqrt(3)
    want = np.r_[np.clip(part.dp_violation.mean() - half, 0, 1), part.dp_violation.mean() + half]
    ys = _interval_ys(fig)
    assert np.isin(np.round(want, 12), np.round(ys, 12)).all()
    assert [t.get_text() for t in ax.texts][:2] == ["lambda = 0", "lambda = 10"]
    # the one (cell 0, lambda) point with a degenerate seed is crossed and named in the legend
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert len(crosses) == 1 and "degenerate in some seed" in texts
    np.testing.assert_allclose(crosses[0].get_xdata(), [part.error.mean().loc[10.0]])


def test_paper_004_sgda_gap_means_and_band():
    from experiments.paper_004 import figures

    rng = np.random.default_rng(RNG_SEED)
    rows = [{"n": n, "epsilon": e, "seed": s, "gap": np.exp(rng.normal(0, 0.5)) / (e * n) if np.isfinite(e)
             else np.exp(rng.normal(0, 0.5)) / n ** 2}
            for n in (100, 400, 1600) for e in (0.5, 2.0, np.inf) for s in range(4)]
    df = pd.DataFrame(rows)
    ctx = _Ctx()
    fig = figures.sgda_gap(df, ctx)
    assert set(ctx.figures) == {"sgda_gap"}
    check_figure(fig, low=0.0)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and "n" in ax.get_xlabel()
    assert "Theorem E.3" in fig._suptitle.get_text()
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"0.5", "2", "inf"}
    np.testing.assert_allclose(lines["2"].get_ydata(), df[df.epsilon == 2.0].groupby("n").gap.mean())
    assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 3  # one band per epsilon
    assert any("95%" in t for t in _legend_texts(fig))
