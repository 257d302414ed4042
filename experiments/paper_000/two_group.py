"""Paper 000, two groups on synthetic data (Figs. 2, 3, 4 and 6; the appendix's sd of MSPE).

Majority/minority size ratios, slope pairs ``(beta_1, beta_2)``, noise ``sigma_e`` and ``rho =
eps^2/2`` over an epsilon grid; MSPE per group for DPSE and the DPNoSE baselines, with and without
the fairness Lagrangian, under each stage-2 reading. All trials x slope pairs x budgets of one ratio
are one compiled program (``montecarlo.run_trials``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import numpy as np

from dpfair_jax.privacy.accounting import zcdp_to_dp
from dpfair_jax.studies.allocation import PRIVATE_METHODS, trial_chunk_size, two_group_study

from . import figures
from .claims import READINGS, WHY_NOT, by_reading, pointwise_fraction, ratio_stat, reading_settings
from .config import FULL

def _epsilon(rho: float) -> float:
    """The (epsilon, 1e-5)-DP of ``rho``-zCDP (Bun & Steinke); ``inf`` for the non-private limit."""
    return math.inf if math.isinf(rho) else float(zcdp_to_dp(rho, 1e-5, method="bun_steinke"))


def _frame_two_group(out, ratio, slopes, sds, rhos, eps, minority):
    """Tidy frame: one row per (scenario, budget, method, group) with mean/sd/se over trials."""
    import pandas as pd

    rows = []
    mspe = out["mspe"]  # [T, S, R, M, K]
    t = mspe.shape[0]
    mean, sd = mspe.mean(0), mspe.std(0, ddof=1)
    fb = out["fallback"].mean(0)  # [S, R]
    se_mean = out["se"].mean(0)  # [S, R, K]
    k = mspe.shape[-1]
    for j, (b, sdv) in enumerate(zip(slopes, sds)):
        base = dict(ratio=ratio, n_major=ratio * minority, n_minor=minority, beta1=float(b[0]),
                    beta2=float(b[1]), noise_sd=float(sdv), trials=t)
        for r, (rho, e) in enumerate(zip(rhos, eps)):
            for m, name in enumerate(PRIVATE_METHODS):
                for g in range(k):
                    rows.append(dict(base, rho=float(rho), epsilon_paper=float(e),
                                     epsilon=_epsilon(float(rho)), method=name,
                                     group=g + 1, mspe=float(mean[j, r, m, g]),
                                     sd=float(sd[j, r, m, g]), se=float(sd[j, r, m, g] / math.sqrt(t)),
                                     dpse_share=float(se_mean[j, r, g] ** 2),
                                     fallback_rate=float(fb[j, r])))
    return pd.DataFrame(rows)


def two_group_frame(config: dict, ctx: Any, *, ratios, slope_pairs, noise_sds, desc: str):
    """Run the two-group sweep for the given ratios (one program per ratio) via map_chunks."""
    import pandas as pd

    eps = np.r_[np.asarray(config["epsilons"], np.float64), np.inf]  # inf: non-private limit
    rhos = eps**2 / 2.0
    scen_slopes = [b for b in slope_pairs for _ in noise_sds]
    scen_sds = [sd for _ in slope_pairs for sd in noise_sds]

    def compute(chunk):
        ratio = int(chunk["ratio"])
        sizes = (ratio * int(config["minority"]), int(config["minority"]))
        t0 = time.perf_counter()
        out = two_group_study(jax.random.fold_in(jax.random.key(int(config["seed"])), ratio),
                              scen_slopes, scen_sds, rhos, sizes=sizes, settings=reading_settings(config, sum(sizes)),
                              num_trials=int(config["trials"]),
                              chunk_size=trial_chunk_size(sum(sizes), config["chunk_size"]))
        ctx.log(f"{desc}: ratio {ratio}x ({sizes}) {len(scen_slopes)} scenarios x {len(rhos)} "
                f"budgets x {config['trials']} trials in {time.perf_counter() - t0:.1f} s")
        df = _frame_two_group(out, ratio, scen_slopes, scen_sds, rhos, eps, int(config["minority"]))
        df["seconds"] = time.perf_counter() - t0
        return df

    if not ratios:
        return pd.DataFrame()
    return ctx.map_chunks([{"ratio": int(r)} for r in ratios], compute, desc=desc)


#: The two-group claims (id, statement) whose rows are skipped when the sweep has no cells.
TWO_GROUP_CLAIMS = (
    ("fig6_smallest_group_reduction", "DPSE lowers the smallest group's MSPE by 10-50% vs DPNoSE (pooled DP-GD) at "
     "reasonable privacy (eps in [1, 10]); mean over ratios, slope pairs and budgets"),
    ("fig6_reduction_vs_equal_split", "the budget allocation itself (DPSE vs the equal split s_k = 1/sqrt(K), same "
     "stage-2 weighting) gives the paper's 10-50% for the smallest group (eps in [1, 10])"),
    ("fig6_reduction_with_fairness", "with the fairness constraint (G=1, g=max_k l_k) DPSE still lowers the smallest "
     "group's MSPE by 10-50% vs DPNoSE (Algorithm 2 with the equal split)"),
    ("fig2_opposite_slopes_over_50pct", "slopes (-10, 10) and (10, -10): DPSE lowers the smallest group's MSPE by "
     "> 50%"),
    ("fig2_small_gain_for_-10_-1", "slopes (-10, -1): the gain becomes small, i.e. smaller than for the opposite "
     "slopes (-10, 10), (10, -10) (difference of the mean reductions)"),
    ("mc_sd_below_10pct", "the sd of MSPE across trials is below 10% of its mean (mean over all grid points, "
     "methods and groups)"),
    ("fig4_larger_group_cost_small", "at the largest ratio the larger group's relative MSPE increase is smaller "
     "than the smallest group's relative decrease"),
)


_KEYS2 = ["ratio", "beta1", "beta2", "noise_sd", "rho"]


def claims_two_group(frames: dict, ctx, config):
    """The two-group claims, each under both readings (``frames[reading]``: the sweep's frame)."""
    text = dict(TWO_GROUP_CLAIMS)
    smallest = 2
    reasonable = lambda f: (f.rho >= 0.5) & (f.rho <= 50.0)  # noqa: E731 - eps in [1, 10]
    no_budget = "no budget with eps in [1, 10] (rho in [0.5, 50]) in the grid"
    live = {r: df for r, df in frames.items() if len(df)}

    def each(fn):
        return {r: (fn(df) if r in live else None) for r, df in frames.items()}

    red = lambda m, b, where: each(lambda df: ratio_stat(df, m, b, smallest, _KEYS2, where))  # noqa: E731
    in_range = lambda v: 0.10 <= v <= 0.50  # noqa: E731
    for cid, m, b in (("fig6_smallest_group_reduction", "dpse", "dpnose"),
                      ("fig6_reduction_vs_equal_split", "dpse", "equal"),
                      ("fig6_reduction_with_fairness", "dpse_fair", "equal_fair")):
        by_reading(ctx, cid, text[cid], red(m, b, reasonable), "0.10 to 0.50 (paper)", in_range,
                    why_fails=WHY_NOT[cid], skip_reason=no_budget, paper=(0.10, 0.50))
    opp = lambda f: reasonable(f) & (f.beta1 == -f.beta2) & (f.beta1.abs() == 10)  # noqa: E731
    by_reading(ctx, "fig2_opposite_slopes_over_50pct", text["fig2_opposite_slopes_over_50pct"],
                red("dpse", "dpnose", opp), "> 0.50 (paper)", lambda v: v > 0.5,
                why_fails=WHY_NOT["fig2_opposite_slopes_over_50pct"],
                skip_reason="no cell with slopes (-10, 10) or (10, -10) and eps in [1, 10] in the grid",
                paper=(0.50, math.inf))
    small_case = lambda f: reasonable(f) & (f.beta1 == -10) & (f.beta2 == -1)  # noqa: E731

    def gap(df):
        a = ratio_stat(df, "dpse", "dpnose", smallest, _KEYS2, small_case)
        b = ratio_stat(df, "dpse", "dpnose", smallest, _KEYS2, opp)
        if a is None or b is None:
            return None
        half = float(np.hypot(a["ci"][1] - a["value"], b["ci"][1] - b["value"]))
        d = a["value"] - b["value"]
        return {"value": d, "ci": [d - half, d + half], "gain_-10_-1": a["value"], "gain_opposite": b["value"]}

    by_reading(ctx, "fig2_small_gain_for_-10_-1", text["fig2_small_gain_for_-10_-1"], each(gap),
                "difference < 0 (the paper states no threshold for 'small')", lambda v: v < 0,
                why_fails=WHY_NOT["fig2_small_gain_for_-10_-1"],
                skip_reason="needs slopes (-10, -1) and (-10, 10) or (10, -10) with eps in [1, 10] in the grid",
                paper=(-math.inf, 0.0))

    _claim_mc_sd(frames, ctx, config, text["mc_sd_below_10pct"])

    def cost(df):
        big = df[df.ratio == df.ratio.max()]
        inc = ratio_stat(big, "dpse", "dpnose", 1, _KEYS2, reasonable, reduction=False)
        dec = ratio_stat(big, "dpse", "dpnose", smallest, _KEYS2, reasonable)
        if inc is None or dec is None:
            return None
        half = float(np.hypot(inc["ci"][1] - inc["value"], dec["ci"][1] - dec["value"]))
        d = inc["value"] - dec["value"]
        return {"value": d, "ci": [d - half, d + half], "larger_group_increase": inc["value"],
                "smallest_group_decrease": dec["value"], "ratio": int(big.ratio.max())}

    by_reading(ctx, "fig4_larger_group_cost_small", text["fig4_larger_group_cost_small"], each(cost),
                "increase - decrease < 0", lambda v: v < 0, why_fails=WHY_NOT["fig4_larger_group_cost_small"],
                skip_reason=no_budget, paper=(-math.inf, 0.0))


def paper_grid_cells(df, config: dict):
    """The rows of ``df`` on the paper's epsilon grid (the full config's ``epsilons``; finite budgets)
    and whether ``config``'s grid covers all of it."""
    paper = np.round(np.asarray(FULL["epsilons"], np.float64), 4)
    ran = np.round(np.asarray(config["epsilons"], np.float64), 4)
    covers = bool(np.isin(paper, ran).all())
    return df[np.isin(np.round(df.epsilon_paper.to_numpy(), 4), paper)], covers


def _claim_mc_sd(frames: dict, ctx, config: dict, statement: str) -> None:
    """The appendix's "sd of MSPE < 10% of its mean", on the paper's epsilon grid (every ratio, slope
    pair, method and group of the sweep). A config whose grid is not the paper's (quick) records
    the value on its own grid as a smoke check (status skipped: the paper's grid cells are absent)."""
    def sd_ratio(cells):
        priv = cells[cells.method.isin(PRIVATE_METHODS) & np.isfinite(cells.rho)]
        if not len(priv):
            return None
        r = (priv.sd / priv.mspe)
        return {"value": float(r.mean()), "max": float(r.max()), "cells": int(len(r)),
                "grid": sorted({round(float(e), 4) for e in priv.epsilon_paper})}

    live = {r: df for r, df in frames.items() if len(df)}
    if not live:
        ctx.skip_claim("mc_sd_below_10pct", statement, "no two-group sweep ran", target="< 0.10")
        return
    on_paper = {r: paper_grid_cells(df, config) for r, df in live.items()}
    if all(cov for _, cov in on_paper.values()):
        vals = {r: sd_ratio(cells) for r, (cells, _) in on_paper.items()}
        vals.update({r: None for r in READINGS if r not in vals})
        by_reading(ctx, "mc_sd_below_10pct", statement + " (on the paper's epsilon grid)", vals,
                    "< 0.10 (paper, Appendix)", lambda v: v < 0.10, why_fails=WHY_NOT["mc_sd_below_10pct"],
                    skip_reason="no two-group sweep ran")
        return
    vals = {r: sd_ratio(df) for r, df in live.items()}
    ctx.add_claim("mc_sd_below_10pct", statement, measured={r: v for r, v in vals.items() if v}, target="< 0.10",
                  passed=False, status="skipped",
                  reason=("quick-grid smoke check only: this config's epsilon grid "
                          f"{sorted(config['epsilons'])} is not the paper's (the full config's "
                          f"{len(FULL['epsilons'])} budgets, eps 0.1 to 10), and the appendix's statement is over "
                          "the paper's grid, where the smallest budgets dominate the sd; the full config tests it "
                          "(the last full run of an earlier design gave 0.194); the values here are no verdict"))


#: Fig. 3's statement (the fraction of its grid points where DPSE is lower for the smallest group).
FIG3_TEXT = ("slopes (+-1, -+1), sigma_e varied, 20x-100x: DPSE lowers the smallest group's MSPE in all "
             "regimes (fraction of grid points)")


def claim_fig3(fig3s: dict, ctx: Any) -> None:
    """Fig. 3 under each reading: the fraction of grid points where DPSE lowers the smallest group's
    MSPE, with the range its per-point 95% intervals allow (:func:`claims.pointwise_fraction`), set
    against the paper's "all regimes" (1.0) on the interval, so a tie is no failure."""
    vals = {r: (pointwise_fraction(f, "dpse", "dpnose", 2, _KEYS2) if len(f) else None) for r, f in fig3s.items()}
    by_reading(ctx, "fig3_all_regimes", FIG3_TEXT, vals,
               "1.0 (paper: all regimes; interval [significantly lower, 1 - significantly higher])",
               lambda v: v >= 1.0, why_fails=WHY_NOT["fig3_all_regimes"],
               skip_reason="no Fig. 3 ratio in this config (fig3_ratios = [])", paper=(1.0, 1.0), on_interval=True,
               note="per grid point a 95% delta-method interval of 1 - MSPE(DPSE)/MSPE(DPNoSE); a point whose "
                    "interval contains 0 is a tie")


def run_two_group(settings: dict, readings: list, ctx: Any):
    """The two-group sweep (Figs. 2, 4, 6) and Fig. 3's noise sweep under each stage-2 reading in
    ``readings``: the sweep at ``ratios`` (group means) and ``summed_ratios`` (sums); saves the
    ``two_group`` table, records the two-group and Fig. 3 claims and draws the figure. Returns the
    saved table (empty when nothing ran)."""
    import pandas as pd

    slopes = [list(map(float, p)) for p in settings["slope_pairs"]]
    frames, fig3s = {}, {}
    for r in READINGS:
        frames[r] = fig3s[r] = pd.DataFrame()
        if r not in readings:
            continue
        summed = r == "summed"
        rs = dict(settings, scaling="paper" if summed else "group_mean",
                  trials=int(settings.get("summed_trials") or settings["trials"]) if summed else settings["trials"])
        ratios = settings.get("summed_ratios", settings["ratios"]) if summed else settings["ratios"]
        tag = "_summed" if summed else ""
        frames[r] = two_group_frame(rs, ctx, ratios=ratios, slope_pairs=slopes,
                                    noise_sds=[float(settings["noise_sd"])], desc="two_group" + tag)
        fig3s[r] = two_group_frame(rs, ctx, ratios=settings["fig3_ratios"], slope_pairs=settings["fig3_slope_pairs"],
                                   noise_sds=list(map(float, settings["fig3_noise_sds"])), desc="fig3_noise" + tag)
        for f in (frames[r], fig3s[r]):
            if len(f):
                f["reading"] = r
    both = pd.concat([f for f in list(frames.values()) + list(fig3s.values()) if len(f)], ignore_index=True) \
        if any(len(f) for f in list(frames.values()) + list(fig3s.values())) else pd.DataFrame()
    if len(both):
        ctx.save_table(both, "two_group")
    if any(len(f) for f in frames.values()):
        claims_two_group(frames, ctx, settings)
    else:
        for cid, st in TWO_GROUP_CLAIMS:
            ctx.skip_claim(cid, st, "the two-group sweep has no ratio (ratios = [])")
    claim_fig3(fig3s, ctx)
    if len(frames["group_mean"]):
        figures.two_group(frames["group_mean"], ctx)
    return both
