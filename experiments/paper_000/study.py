"""Paper 000, "Privacy Budget Tailoring in Private Data Analysis": DPSE vs DPNoSE.

Experiments (one registered experiment, ``paper_000``, with quick and full configs):

* **Two groups, synthetic** (Figs. 2, 3, 4, 6): majority/minority size ratios, slope pairs
  ``(beta_1, beta_2)``, noise ``sigma_e``, ``rho = eps^2/2`` over an epsilon grid; MSPE per group
  for DPSE and the DPNoSE baselines, with and without the fairness Lagrangian. All trials x slope
  pairs x budgets of one ratio are one compiled program (``montecarlo.run_trials``).
* **K groups** (Tables 1-3, Sec. 6.1): K = 5 on the tables' "20x" design only (10,000 and 500 rows;
  the text's 5,000 -> 100 contradicts every caption), with the middle group sizes and slopes that
  reproduce the paper's DPNoSE column (:func:`kgroup_design`; the paper gives only the extremes, and
  its group-1 MSPE of 1.01-1.02 leaves room for middle groups of about 100 rows, not geometric ones);
  K in {10, 15, 20} with the same extremes and middle size; rho in {2, 4.5, 8}.
* **Two readings of stage 2** (:data:`READINGS`): the paper does not specify DPSE's stage-2
  weighting (Algorithm 2 line 10 divides by n_k, Algorithm 3 sums); every part runs under the kit's
  group means (``scaling="group_mean"``) and under the sums (``scaling="paper"``, step divided by
  n). A claim holds when both readings meet the paper's target. It fails only when every reading's
  interval misses the paper's range on the same side. Readings that bracket the paper's value, or
  tie with its edge, give a reconstruction row with both intervals and the mixing weight between
  them that gives the paper's value (:func:`mixing_weight`).
* **Theory and Sec. 6**: Lemma 3.1's expected loss (closed form against Monte Carlo, a formula
  check); Theorems 5.1/5.2 (untestable: lower bounds over every mechanism); the MNIST 8-vs-2
  second stage as a labelled reconstruction on scikit-learn's 8x8 digits (full config).
* **Real data** (Table 4, Fig. 5): Law school (race; first-year average) and credit-card default
  (sex; credit limit), when their loaders can read the data.

Choices the paper leaves open, made once here and exposed in the config (notes C.5):

* ``x ~ N(0, 1)``, one feature, no intercept (the slopes are scalars); the test protocol is the
  *population* MSPE ``(theta - beta_k)^2 + sigma_k^2`` (exact expected MSPE on fresh data from the
  same group; no test-set noise).
* Minority group of ``minority`` = 100 rows, majority ``ratio * minority`` (Sec. 6.1 uses 5,000 vs
  100 for 50x).
* ``T = steps`` = 50 iterations, constant learning rate 0.1, ``theta_1 = 0``, ``C_P = [-5, 5]``,
  ``Delta = 2`` for gradients and losses (as in the paper), ``tau = 0.2 rho``.
* Fairness: ``G = 1`` and ``g = max_k (l_k - eta_k)`` with ``eta_k = 0``, i.e. the paper's
  ``g = max_k l_k``.
* DPNoSE is reported two ways: ``dpnose`` = standard pooled DP-GD with the whole budget (the
  paper's text) and ``equal`` = Algorithm 3 with ``s_k = 1/sqrt(K)`` and the whole budget. With the
  fairness constraint DPNoSE is Algorithm 2 with the equal split (``equal_fair``), the pooled
  gradient having no group losses.
* Common random numbers: a trial's key draws its data once per scenario; every budget and method
  uses that data with its own noise key (paired comparisons).
* Privacy: every run is ``rho``-zCDP under ``relation="replace_one_within_group"`` (the kit's
  default and the paper's setting): group membership and sizes are public, a neighbour replaces one
  record by another of the same group, so clipped gradient sums have sensitivity ``2 Delta``; a
  record moving to another group is not covered (the exact sizes differ). The budgets
  and the spend recorded in ``privacy.json`` (one entry per method and budget) are those of
  :func:`budget_tailoring.spend`. ``--set relation=add_remove`` runs the add/remove variant
  (noisy group counts, ``count_fraction`` of each budget).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.privacy.accounting import zcdp_to_dp
from dpfair_jax.runner import Experiment, register
from dpfair_jax.studies.allocation import (
    PRIVATE_METHODS,
    hyperparams_from,
    method_configs,
    trial_chunk_size,
    two_group_study,
)

from . import figures
from .config import FULL, QUICK

__all__ = [
    "kgroup_sizes",
    "kgroup_slopes",
    "run",
    "EXPERIMENT",
    "QUICK",
    "FULL",
    "TWO_GROUP_CLAIMS",
    "KGROUP_CLAIMS",
    "READINGS",
    "PAPER_DPNOSE",
    "PAPER_DPSE",
    "kgroup_design",
]

# ---------------------------------------------------------------------------------------------
# K groups
# ---------------------------------------------------------------------------------------------


def kgroup_sizes(k: int, largest: int, smallest: int) -> tuple[int, ...]:
    """Geometric group sizes from ``largest`` (group 1) down to ``smallest`` (group K).

    The paper gives only the extremes (10,000 and 500, or 5,000 and 100); geometric spacing is the
    kit's choice.
    """
    if k == 1:
        return (int(largest),)
    return tuple(int(round(v)) for v in np.geomspace(largest, smallest, k))


def kgroup_slopes(k: int, base: float = 0.0, spread: tuple[float, float] = (4.0, 4.6),
                  alternate: bool = False) -> np.ndarray:
    """Slopes for K groups (the paper does not give them): group 1 ``base``, the others at
    ``base + d`` with ``d`` spread over ``spread`` (MSPE ~ 17-22 under a fit to group 1, as in
    Tables 1-3). With ``alternate`` the offsets alternate in sign; then a single slope cannot move
    towards all the smaller groups at once (P = 1), and DPSE and DPNoSE nearly coincide."""
    d = np.linspace(spread[0], spread[1], max(k - 1, 1))[: k - 1]
    signs = np.where(np.arange(k - 1) % 2 == 0, 1.0, -1.0) if alternate else np.ones(k - 1)
    return np.r_[base, base + signs * d]


# ---------------------------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------------------------

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


def _two_group(config: dict, ctx: Any, *, ratios, slope_pairs, noise_sds, desc: str):
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
                              scen_slopes, scen_sds, rhos, sizes=sizes, settings=_reading_settings(config, sum(sizes)),
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


#: Stage 2's weighting, which the paper does not specify: Algorithm 2 line 10 divides each group's
#: noisy gradient by n_k, Algorithm 3 sums the noisy group sums. "group_mean" (the kit's default,
#: ``scaling="group_mean"``: clip, sum, noise, then divide by n_k) and "summed" (``scaling="paper"``:
#: Algorithm 3's noisy sums; the step is divided by the public n so that the iteration scale
#: matches). Every method of a reading uses its weighting (DPNoSE pooled: mean or sum).
READINGS = ("group_mean", "summed")

#: What the weighting decides, recorded with every claim whose outcome depends on it.
WEIGHTING = ("the paper does not specify stage 2's weighting (Alg. 2 line 10 divides by n_k, Alg. 3 sums); the "
             "kit's default 1/n_k (group means) weights every group equally in the fit, the summed reading weights "
             "them by n_k like DPNoSE, and this choice, not the budget allocation, decides the size of the effect")


def _reading_settings(config: dict, n_total: int) -> dict:
    """The settings of one reading: ``scaling="paper"`` with the step divided by ``n_total``."""
    if config.get("scaling", "group_mean") == "paper":
        return dict(config, learning_rate=float(config["learning_rate"]) / float(n_total))
    return config


def _reduction(df, method, baseline, group, where=None):
    """Mean over the selected rows of 1 - MSPE(method)/MSPE(baseline) for one group."""
    keys = ["ratio", "beta1", "beta2", "noise_sd", "rho", "group"]
    a = df[(df.method == method) & (df.group == group)].set_index(keys).mspe
    b = df[(df.method == baseline) & (df.group == group)].set_index(keys).mspe
    red = 1.0 - a / b
    if where is not None:
        red = red[where(red.index.to_frame(index=False)).to_numpy()]
    return float(red.mean()) if len(red) else float("nan"), red


def _ratio_stat(df, method, baseline, group, keys, where=None, *, reduction: bool = True) -> dict | None:
    """Mean over cells of ``1 - MSPE(method)/MSPE(baseline)`` (or ``MSPE ratio - 1`` when not
    ``reduction``) for one group, with a 95% interval: per cell the delta method on the two means'
    standard errors (treated as independent, which is conservative for the paired trials), then the
    mean over cells. ``None`` when no cell is selected."""
    a = df[(df.method == method) & (df.group == group)].set_index(keys)
    b = df[(df.method == baseline) & (df.group == group)].set_index(keys)
    a, b = a.align(b, join="inner")
    if where is not None and len(a):
        sel = where(a.index.to_frame(index=False)).to_numpy()
        a, b = a[sel], b[sel]
    if not len(a):
        return None
    q = a.mspe / b.mspe
    var = q**2 * ((a.se / a.mspe) ** 2 + (b.se / b.mspe) ** 2)
    val = (1.0 - q) if reduction else (q - 1.0)
    mean = float(val.mean())
    half = 1.96 * float(np.sqrt(var.sum())) / len(val)
    return {"value": mean, "ci": [mean - half, mean + half], "cells": int(len(val))}


def _fmt(r: dict) -> str:
    return f"{r['value']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if "ci" in r else f"{r['value']:.4g}"


def _interval(v: dict) -> tuple[float, float]:
    """A value's 95% interval (the point twice when it has none)."""
    ci = v.get("ci")
    return (float(ci[0]), float(ci[1])) if ci else (float(v["value"]), float(v["value"]))


def mixing_weight(a: float, b: float, lo: float, hi: float) -> tuple[float, float] | None:
    """The weights ``w`` in [0, 1] with ``w a + (1 - w) b`` in ``[lo, hi]`` (``a``: the group-mean
    reading's value, ``b``: the summed reading's), as ``(w_min, w_max)``; ``None`` when no weight
    does. ``lo``/``hi`` may be infinite (a one-sided target)."""
    if a == b:
        return (0.0, 1.0) if lo <= a <= hi else None
    ends = [(t - b) / (a - b) for t in (lo, hi) if math.isfinite(t)]
    # w -> value is monotone: the feasible set is an interval between the ends (or a ray)
    cand = sorted(ends + [0.0, 1.0])
    ok = [w for w in cand if 0.0 <= w <= 1.0 and lo - 1e-12 <= w * a + (1 - w) * b <= hi + 1e-12]
    return (min(ok), max(ok)) if ok else None


def _weight_text(got: dict, lo: float, hi: float, paper_value: float | None) -> tuple[str, dict]:
    """Which weighting between the two readings gives the paper's value: the mixing weight ``w``
    (``w`` group_mean + (1 - w) summed) for the point values, and its range over the readings'
    intervals (every corner of the two intervals)."""
    a, b = got["group_mean"], got["summed"]
    lo_t, hi_t = (paper_value, paper_value) if paper_value is not None else (lo, hi)
    point = mixing_weight(a["value"], b["value"], lo_t, hi_t)
    corners = [mixing_weight(x, y, lo_t, hi_t) for x in _interval(a) for y in _interval(b)]
    corners = [c for c in corners if c is not None]
    info = {"target": [lo_t, hi_t], "w_point": list(point) if point else None,
            "w_over_intervals": [min(c[0] for c in corners), max(c[1] for c in corners)] if corners else None}
    what = f"the paper's {paper_value:g}" if paper_value is not None else f"the paper's [{lo:g}, {hi:g}]"
    if point is None and not corners:
        return f"no weighting w * group_mean + (1 - w) * summed with w in [0, 1] gives {what}", info
    pt = (f"w = {point[0]:.3f}" if point and abs(point[1] - point[0]) < 1e-9 else
          f"w in [{point[0]:.3f}, {point[1]:.3f}]" if point else "no w at the point values")
    rng = info["w_over_intervals"]
    return (f"the weighting w * group_mean + (1 - w) * summed gives {what} at {pt} (w in [{rng[0]:.3f}, "
            f"{rng[1]:.3f}] over the readings' 95% intervals)"), info


def _by_reading(ctx, cid: str, statement: str, results: dict, target: str, test, *, why_fails: str,
                skip_reason: str, paper: tuple[float, float] | None = None, paper_value: float | None = None,
                note: str | None = None) -> None:
    """Record a claim evaluated under each stage-2 reading (``results[reading]``: a value dict or
    ``None`` when the reading's cells are absent; ``test(value) -> bool``).

    Both readings meet the target: holds. Otherwise, with ``paper = (lo, hi)`` the paper's range for
    the value (infinite for a one-sided target): the claim fails only when every reading's 95%
    interval lies wholly on the same side of that range; when the readings bracket the paper's value
    (or one of them ties with its edge) the outcome depends on the weighting the paper does not
    specify, and the row is a reconstruction with both intervals and the mixing weight
    (:func:`mixing_weight`) that would give the paper's value (``paper_value``, else the range).
    Without ``paper``, disagreeing readings are a reconstruction and agreeing misses fail. A single
    reading is a reconstruction. ``note`` is appended to every reason (e.g. what holds by construction)."""
    got = {r: v for r, v in results.items() if v is not None and np.isfinite(v["value"])}
    if not got:
        ctx.skip_claim(cid, statement, skip_reason, target=target)
        return
    tail = f"; {note}" if note else ""
    oks = {r: bool(test(v["value"])) for r, v in got.items()}
    values = "; ".join(f"{r}: {_fmt(v)}" for r, v in got.items())
    measured = {r: v for r, v in got.items()}
    if len(got) < len(READINGS):
        missing = [r for r in READINGS if r not in got]
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=all(oks.values()),
                      status="reconstruction",
                      reason=f"measured only under the {', '.join(got)} reading ({values}; the {', '.join(missing)} "
                             f"reading did not run here): {WEIGHTING}{tail}")
        return
    if all(oks.values()):
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=True,
                      reason=note)
        return
    if paper is not None:
        lo, hi = paper
        ivs = [_interval(v) for v in got.values()]
        all_below = all(h < lo for _, h in ivs)
        all_above = all(low > hi for low, _ in ivs)
        if all_below or all_above:
            ctx.add_claim(cid, statement, measured=measured, target=target, passed=False,
                          reason=f"{why_fails} (both readings of stage 2's weighting, every 95% interval "
                                 f"{'below' if all_below else 'above'} the paper's range: {values}){tail}")
            return
        wtext, winfo = _weight_text(got, lo, hi, paper_value)
        measured = dict(measured, mixing_weight=winfo)
        kind = ("the readings bracket the paper's value" if any(oks.values()) or
                (min(v["value"] for v in got.values()) <= hi and max(v["value"] for v in got.values()) >= lo)
                else "a reading's interval reaches the paper's range (a tie, not a failure)")
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=False, status="reconstruction",
                      reason=f"{kind} ({values}): {WEIGHTING}; {wtext}{tail}")
        return
    if not any(oks.values()):
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=False,
                      reason=f"{why_fails} (both readings of stage 2's weighting: {values}){tail}")
    else:
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=False, status="reconstruction",
                      reason=f"the readings disagree ({values}): {WEIGHTING}{tail}")


#: Why each claim does not hold when both readings of stage 2 miss its target (values appended).
WHY_NOT = {
    "fig6_smallest_group_reduction": "outside the paper's 10-50% under both readings",
    "fig6_reduction_vs_equal_split": (
        "the budget allocation alone (DPSE vs the equal split s_k = 1/sqrt(K), same weighting) changes the "
        "smallest group's MSPE by far less than the paper's 10-50%: the allocation only moves stage-2 noise between "
        "groups; under the summed reading (Alg. 3) the equal split minimizes the variance of the summed noise "
        "(sum_k 1/s_k^2 with sum_k s_k^2 = 1 is smallest at s_k^2 = 1/K, Cauchy-Schwarz), and under the group-mean "
        "reading the noise, whatever its split, is small next to the bias of one slope for two groups at these "
        "budgets; the kit's larger DPSE-vs-DPNoSE gain comes from the per-group normalization (1/n_k), the kit's "
        "choice, which DPSE and the equal split share"),
    "fig6_reduction_with_fairness": (
        "with the constraint DPNoSE is Algorithm 2 with the equal split, so only the allocation differs; the "
        "allocation alone moves the smallest group's MSPE by far less than 10% (see fig6_reduction_vs_equal_split)"),
    "fig2_opposite_slopes_over_50pct": "not above 50% under either reading",
    "fig2_small_gain_for_-10_-1": "the gain for (-10, -1) is not smaller than for the opposite slopes",
    "mc_sd_below_10pct": (
        "the trial-to-trial sd exceeds 10% of the mean at the smallest budgets, where the replace-one noise "
        "(twice the former add/remove noise) dominates; the paper does not say over which budgets its 10% holds"),
    "fig4_larger_group_cost_small": (
        "the larger group's relative MSPE increase is not smaller than the smallest group's relative decrease"),
    "fig3_all_regimes": "DPSE is not lower at every grid point of Fig. 3",
    "table1_3_group1_higher": (
        "neither reading reproduces the paper's +24% on the design calibrated to its DPNoSE column: the group-mean "
        "reading weights the five groups equally and moves the fit far towards groups 2-5 (group 1 pays much "
        "more), the summed reading weights them by n_k like DPNoSE (almost no change); the paper's DPSE column "
        "implies a shift of about 0.38 towards groups 2-5, between the two"),
    "table1_3_groups2_5_lower": (
        "neither reading reproduces the paper's -16% on the design calibrated to its DPNoSE column (see "
        "table1_3_group1_higher)"),
    "table1_3_flat_in_rho": "DPSE's MSPE moves over rho by more than the paper's tables do (1.6%)",
    "kgroup_smallest_at_least_10pct": "the smallest group gains less than 10% for some K",
    "real_smallest_group_gain": "the smallest group's test MSPE is not lower with DPSE at every Table-4 budget",
    "real_gain_larger_for_smallest": "the smallest group's gain is not the largest at every Table-4 budget",
}


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


def _claims_two_group(frames: dict, ctx, config):
    """The two-group claims, each under both readings (``frames[reading]``: the sweep's frame)."""
    text = dict(TWO_GROUP_CLAIMS)
    smallest = 2
    reasonable = lambda f: (f.rho >= 0.5) & (f.rho <= 50.0)  # noqa: E731 - eps in [1, 10]
    no_budget = "no budget with eps in [1, 10] (rho in [0.5, 50]) in the grid"
    live = {r: df for r, df in frames.items() if len(df)}

    def each(fn):
        return {r: (fn(df) if r in live else None) for r, df in frames.items()}

    red = lambda m, b, where: each(lambda df: _ratio_stat(df, m, b, smallest, _KEYS2, where))  # noqa: E731
    in_range = lambda v: 0.10 <= v <= 0.50  # noqa: E731
    for cid, m, b in (("fig6_smallest_group_reduction", "dpse", "dpnose"),
                      ("fig6_reduction_vs_equal_split", "dpse", "equal"),
                      ("fig6_reduction_with_fairness", "dpse_fair", "equal_fair")):
        _by_reading(ctx, cid, text[cid], red(m, b, reasonable), "0.10 to 0.50 (paper)", in_range,
                    why_fails=WHY_NOT[cid], skip_reason=no_budget, paper=(0.10, 0.50))
    opp = lambda f: reasonable(f) & (f.beta1 == -f.beta2) & (f.beta1.abs() == 10)  # noqa: E731
    _by_reading(ctx, "fig2_opposite_slopes_over_50pct", text["fig2_opposite_slopes_over_50pct"],
                red("dpse", "dpnose", opp), "> 0.50 (paper)", lambda v: v > 0.5,
                why_fails=WHY_NOT["fig2_opposite_slopes_over_50pct"],
                skip_reason="no cell with slopes (-10, 10) or (10, -10) and eps in [1, 10] in the grid",
                paper=(0.50, math.inf))
    small_case = lambda f: reasonable(f) & (f.beta1 == -10) & (f.beta2 == -1)  # noqa: E731

    def gap(df):
        a = _ratio_stat(df, "dpse", "dpnose", smallest, _KEYS2, small_case)
        b = _ratio_stat(df, "dpse", "dpnose", smallest, _KEYS2, opp)
        if a is None or b is None:
            return None
        half = float(np.hypot(a["ci"][1] - a["value"], b["ci"][1] - b["value"]))
        d = a["value"] - b["value"]
        return {"value": d, "ci": [d - half, d + half], "gain_-10_-1": a["value"], "gain_opposite": b["value"]}

    _by_reading(ctx, "fig2_small_gain_for_-10_-1", text["fig2_small_gain_for_-10_-1"], each(gap),
                "difference < 0 (the paper states no threshold for 'small')", lambda v: v < 0,
                why_fails=WHY_NOT["fig2_small_gain_for_-10_-1"],
                skip_reason="needs slopes (-10, -1) and (-10, 10) or (10, -10) with eps in [1, 10] in the grid",
                paper=(-math.inf, 0.0))

    _claim_mc_sd(frames, ctx, config, text["mc_sd_below_10pct"])

    def cost(df):
        big = df[df.ratio == df.ratio.max()]
        inc = _ratio_stat(big, "dpse", "dpnose", 1, _KEYS2, reasonable, reduction=False)
        dec = _ratio_stat(big, "dpse", "dpnose", smallest, _KEYS2, reasonable)
        if inc is None or dec is None:
            return None
        half = float(np.hypot(inc["ci"][1] - inc["value"], dec["ci"][1] - dec["value"]))
        d = inc["value"] - dec["value"]
        return {"value": d, "ci": [d - half, d + half], "larger_group_increase": inc["value"],
                "smallest_group_decrease": dec["value"], "ratio": int(big.ratio.max())}

    _by_reading(ctx, "fig4_larger_group_cost_small", text["fig4_larger_group_cost_small"], each(cost),
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
        _by_reading(ctx, "mc_sd_below_10pct", statement + " (on the paper's epsilon grid)", vals,
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


def _claim_or_skip(ctx, cid: str, statement: str, measured: float, target: str, passed: bool,
                   reason: str) -> None:
    """``ctx.add_claim`` unless ``measured`` is NaN (the claim's grid cells are absent): then a
    skipped row with ``reason``."""
    if isinstance(measured, float) and math.isnan(measured):
        ctx.skip_claim(cid, statement, reason, target=target)
    else:
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=passed, reason=WHY_NOT.get(cid))


#: The paper's DPNoSE columns of Tables 1-3 (K = 5, "20x": 10,000 ... 500; group 1 largest), rho 2/4.5/8.
PAPER_DPNOSE = {2.0: (1.02, 18.71, 21.09, 21.35, 18.11), 4.5: (1.01, 18.69, 21.07, 21.34, 18.09),
                8.0: (1.01, 18.64, 21.02, 21.29, 18.05)}
#: The paper's DPSE columns of Tables 1-3.
PAPER_DPSE = {2.0: (1.27, 15.75, 17.75, 17.94, 15.29), 4.5: (1.26, 15.73, 17.73, 17.93, 15.28),
              8.0: (1.25, 15.71, 17.71, 17.91, 15.26)}


def kgroup_design(config: dict) -> dict:
    """The K = 5 design of Tables 1-3: the paper's extremes (``kgroup_designs[0]``: 10,000 and 500,
    the tables' "20x" caption) with ``kgroup_middle``: ``"calibrated"`` (the common middle size and
    the slopes that reproduce the paper's DPNoSE column, mean over its three tables;
    :func:`.kgroup_design.calibrate_middle_size`) or ``"geometric"`` (the former
    choice: geometric sizes, :func:`kgroup_slopes`)."""
    from .kgroup_design import calibrate_middle_size

    largest, smallest = (int(v) for v in config["kgroup_designs"][0])
    if config.get("kgroup_middle", "calibrated") == "geometric":
        return {"sizes": kgroup_sizes(5, largest, smallest), "slopes": kgroup_slopes(5).tolist(), "middle": None}
    col = np.mean([PAPER_DPNOSE[r] for r in sorted(PAPER_DPNOSE)], axis=0)
    cal = calibrate_middle_size(col, largest, smallest, noise_sd=float(config["noise_sd"]),
                                clip=float(config["clip"]), box=float(config["box"]))
    return cal


def _kgroup(config, ctx, design: dict):
    """Tables 1-3 (K = 5 on ``design``) and Sec. 6.1 (K > 5: the extremes with the calibrated middle
    size for every middle group, :func:`kgroup_slopes`), under each stage-2 reading; one program per
    (K, reading)."""
    import pandas as pd

    rhos = np.asarray(config["kgroup_rhos"], np.float64)
    largest, smallest = (int(v) for v in config["kgroup_designs"][0])
    readings = list(config.get("readings") or ["group_mean"])
    chunks = [{"k": int(k), "largest": largest, "smallest": smallest, "reading": r}
              for r in readings for k in config["kgroup_ks"]]
    mid = int(design["middle"]) if design.get("middle") is not None else None

    def compute(chunk):
        k = chunk["k"]
        if k == 5:
            sizes, slopes = tuple(design["sizes"]), np.asarray(design["slopes"], np.float64)
        elif mid is not None:
            sizes, slopes = (largest,) + (mid,) * (k - 2) + (smallest,), kgroup_slopes(k)
        else:
            sizes, slopes = kgroup_sizes(k, largest, smallest), kgroup_slopes(k)
        settings = dict(config, scaling="paper" if chunk["reading"] == "summed" else "group_mean")
        t0 = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(int(config["seed"]) + 1), k * 100003 + sizes[0])
        out = two_group_study(key, slopes[None], [float(config["noise_sd"])], rhos, sizes=sizes,
                              settings=_reading_settings(settings, sum(sizes)),
                              num_trials=int(config["kgroup_trials"]),
                              chunk_size=trial_chunk_size(sum(sizes), config["chunk_size"]))
        mspe = out["mspe"][:, 0]  # [T, R, M, K]
        rows = []
        t = mspe.shape[0]
        for r, rho in enumerate(rhos):
            for m, name in enumerate(PRIVATE_METHODS):
                for g in range(k):
                    vals = mspe[:, r, m, g]
                    rows.append(dict(k=k, largest=chunk["largest"], smallest=chunk["smallest"],
                                     reading=chunk["reading"], rho=float(rho), method=name, group=g + 1,
                                     n=sizes[g], slope=float(slopes[g]), mspe=float(vals.mean()),
                                     se=float(vals.std(ddof=1) / math.sqrt(t)), trials=t))
        ctx.log(f"kgroup K={k} ({chunk['reading']}) sizes {sizes}: {time.perf_counter() - t0:.1f} s")
        return pd.DataFrame(rows)

    if not chunks:
        return pd.DataFrame()
    return ctx.map_chunks(chunks, compute, desc="kgroup")


#: What the K = 5 rows test, given that the design is fitted to the paper's DPNoSE column.
BY_CONSTRUCTION = ("the K = 5 design (middle group size and slopes) is solved from the paper's DPNoSE column, so the "
                   "kit's DPNoSE column matches the paper's by construction (measured: dpnose_column) and is no "
                   "evidence; what is tested is DPSE's column relative to DPNoSE on that design, i.e. how far "
                   "stage 2 moves the fit from the pooled one")


#: The K-group claims (id, statement) and the K they need.
KGROUP_CLAIMS = (
    ("table1_3_group1_higher", "K=5: DPSE raises group 1's (largest) MSPE by about 24% vs DPNoSE (Tables 1-3, "
     "on the design that reproduces the paper's DPNoSE column)", "K = 5"),
    ("table1_3_groups2_5_lower", "K=5: DPSE lowers groups 2-5's MSPE by about 16% vs DPNoSE (Tables 1-3, on the "
     "design that reproduces the paper's DPNoSE column)", "K = 5"),
    ("table1_3_flat_in_rho", "K=5: DPSE's MSPE is as flat in rho as in the paper's tables (max relative change over "
     "the budgets, per group; the paper's DPSE column moves by at most 1.6%, group 1 from 1.27 to 1.25)", "K = 5"),
    ("kgroup_smallest_at_least_10pct", "K in {10, 15, 20}: at least a 10% reduction for the smallest group (min over "
     "K)", "K > 5"),
)


def _claims_kgroup(df, ctx, design: dict, readings):
    text = {cid: st for cid, st, _ in KGROUP_CLAIMS}
    ks = sorted(int(k) for k in df.k.unique()) if len(df) else []
    keys = ["k", "rho"]
    frames = {r: (df[df.reading == r] if len(df) else df) for r in READINGS}
    if 5 not in ks:
        for cid, st, need in KGROUP_CLAIMS[:3]:
            ctx.skip_claim(cid, st, f"the K-group grid has no {need} cell (kgroup_ks = {ks})")
    else:
        paper_g1 = float(np.mean([PAPER_DPSE[r][0] / PAPER_DPNOSE[r][0] - 1 for r in PAPER_DPSE]))
        paper_rest = float(np.mean([1 - np.mean(np.asarray(PAPER_DPSE[r][1:]) / np.asarray(PAPER_DPNOSE[r][1:]))
                                    for r in PAPER_DPSE]))

        def stat(fn):
            return {r: (fn(f[f.k == 5]) if len(f) and (f.k == 5).any() else None) for r, f in frames.items()}

        def dpnose_fit(f):
            d = f[(f.method == "dpnose")].groupby("group").mspe.mean()
            col = np.mean([PAPER_DPNOSE[r] for r in sorted(PAPER_DPNOSE)], axis=0)
            return {"kit": d.round(3).tolist(), "paper_mean_of_tables": np.round(col, 3).tolist(),
                    "max_rel_dev": float(np.max(np.abs(d.to_numpy() / col - 1)))}

        design_note = {"sizes": list(design["sizes"]), "slopes": [round(v, 3) for v in design["slopes"]],
                       "fit_shift": design.get("shift"), "paper_shift": design.get("target_shift"),
                       "shift_at_zero_middle": design.get("shift_at_zero")}

        def g1(f):
            r = _ratio_stat(f, "dpse", "dpnose", 1, keys, reduction=False)
            return None if r is None else dict(r, dpnose_column=dpnose_fit(f), design=design_note)

        def rest(f):
            parts = [_ratio_stat(f, "dpse", "dpnose", g, keys) for g in range(2, 6)]
            if any(p is None for p in parts):
                return None
            v = float(np.mean([p["value"] for p in parts]))
            half = float(np.sqrt(sum((p["ci"][1] - p["value"]) ** 2 for p in parts))) / 4
            return {"value": v, "ci": [v - half, v + half], "dpnose_column": dpnose_fit(f)}

        _by_reading(ctx, "table1_3_group1_higher", text["table1_3_group1_higher"], stat(g1),
                    f"about +{paper_g1:.2f} (0.10 to 0.40)", lambda v: 0.10 <= v <= 0.40,
                    why_fails=WHY_NOT["table1_3_group1_higher"], skip_reason="no K = 5 cell",
                    paper=(0.10, 0.40), paper_value=paper_g1, note=BY_CONSTRUCTION)
        _by_reading(ctx, "table1_3_groups2_5_lower", text["table1_3_groups2_5_lower"], stat(rest),
                    f"about {paper_rest:.2f} (0.08 to 0.30)", lambda v: 0.08 <= v <= 0.30,
                    why_fails=WHY_NOT["table1_3_groups2_5_lower"], skip_reason="no K = 5 cell",
                    paper=(0.08, 0.30), paper_value=paper_rest, note=BY_CONSTRUCTION)
        paper_flat = max(abs(PAPER_DPSE[2.0][g] / PAPER_DPSE[8.0][g] - 1) for g in range(5))

        def flat(f):
            d = f[f.method == "dpse"].groupby("group").mspe
            if f.rho.nunique() < 2:
                return None
            return {"value": float((d.max() / d.min() - 1.0).max())}

        _by_reading(ctx, "table1_3_flat_in_rho", text["table1_3_flat_in_rho"], stat(flat),
                    f"<= {paper_flat:.3f} (the paper's tables)", lambda v: v <= paper_flat + 1e-12,
                    why_fails=WHY_NOT["table1_3_flat_in_rho"], skip_reason="one budget only",
                    paper=(-math.inf, paper_flat + 1e-12), note=BY_CONSTRUCTION)
    cid, st, need = KGROUP_CLAIMS[3]
    if not any(k > 5 for k in ks):
        ctx.skip_claim(cid, st, f"the K-group grid has no {need} cell (kgroup_ks = {ks})", target=">= 0.10")
        return

    def many(f):
        vals = []
        for k in sorted(f.k.unique()):
            if k <= 5:
                continue
            r = _ratio_stat(f[f.k == k], "dpse", "dpnose", int(k), keys)
            if r is not None:
                vals.append(dict(r, k=int(k)))
        if not vals:
            return None
        worst = min(vals, key=lambda v: v["value"])
        return dict(worst, per_k={v["k"]: round(v["value"], 4) for v in vals})

    _by_reading(ctx, cid, st, {r: (many(f) if len(f) else None) for r, f in frames.items()}, ">= 0.10 (paper)",
                lambda v: v >= 0.10, why_fails=WHY_NOT[cid], skip_reason="no K > 5 cell", paper=(0.10, math.inf))


def _real_data(name: str, seed: int):
    """Load, standardize (train statistics) and bound rows to ``||x|| <= 1``; y standardized.

    Law school: race (white / black), target the first-year average (``zfya``). Credit-card
    default (UCI): sex, target the credit limit (``limit_bal``); the paper's income filter and
    group sizes (11,480 M / 2,937 F) do not apply to this data set (here 8,968 M / 13,532 F in
    the training split).
    """
    from dpfair_jax.data import load
    from dpfair_jax.data.preprocessing import bound_row_norms, standardize

    if name == "law":
        tr, te = load("law", groups="race", target="zfya", seed=seed)
    elif name == "credit":
        tr, te = load("credit", groups="sex", target="limit_bal", seed=seed)
    else:
        raise ValueError(f"unknown real data set {name!r}; use 'law' or 'credit'.")
    tr, te = standardize(tr, te)
    mu, sd = float(np.mean(tr.y)), float(np.std(tr.y))
    fix = lambda d: d.replace(x=jnp.asarray(bound_row_norms(d.x, 1.0)),  # noqa: E731
                              y=(jnp.asarray(d.y) - mu) / sd)
    return fix(tr), fix(te)


def _real(config, ctx):
    """Table 4 / Fig. 5: DPSE vs DPNoSE on real data at the Table 4 budgets (noise trials only),
    under each stage-2 reading."""
    import pandas as pd

    names = list(config.get("real_datasets") or [])
    if not names:
        return pd.DataFrame()
    rhos = np.asarray(config["real_rhos"], np.float64)
    readings = list(config.get("readings") or ["group_mean"])

    def compute(chunk):
        name = chunk["dataset"]
        t0 = time.perf_counter()
        try:
            tr, te = _real_data(name, int(config["seed"]))
        except Exception as err:  # noqa: BLE001 - data absent or loader failure: report and skip
            ctx.log(f"real data {name!r} unavailable: {err}")
            return pd.DataFrame()
        settings = dict(config, steps=int(config["real_steps"]), learning_rate=float(config["real_lr"]),
                        stats_bound_x=1.5, stats_bound_y=3.0,
                        scaling="paper" if chunk["reading"] == "summed" else "group_mean")
        settings = _reading_settings(settings, int(tr.n))
        cfgs = {k: dataclasses.replace(c, fit_intercept=True)
                for k, c in method_configs(settings).items()}
        configs = tuple(cfgs[m] for m in PRIVATE_METHODS)
        k = tr.num_groups

        def one(key, rho):
            keys = jax.vmap(lambda m: jax.random.fold_in(key, m))(jnp.arange(len(configs)))
            th, _ = bt.fit_many(keys, tr.x, tr.y, tr.s, k, hyperparams_from(settings, rho), configs)
            return jax.vmap(lambda t_: bt.group_mspe(t_, te.x, te.y, te.s, k, True))(th)

        keys = jax.random.split(jax.random.key(int(config["seed"]) + 7), int(config["real_trials"]))
        prog = jax.jit(lambda ks, rs: jax.lax.map(
            lambda kk: jax.vmap(lambda r: one(kk, r))(rs), ks, batch_size=2))
        out = np.asarray(prog(keys, jnp.asarray(np.r_[rhos, np.inf], jnp.float32)))  # [T, R, M, K]
        rows = []
        sizes = tr.group_sizes()
        for r, rho in enumerate(np.r_[rhos, np.inf]):
            for m, meth in enumerate(PRIVATE_METHODS):
                for g in range(k):
                    v_ = out[:, r, m, g]
                    rows.append(dict(dataset=name, reading=chunk["reading"], rho=float(rho), method=meth,
                                     group=g + 1,
                                     group_name=tr.info.group_names[g] if tr.info.group_names else g,
                                     n_train=int(sizes[g]), mspe=float(v_.mean()),
                                     se=float(v_.std(ddof=1) / math.sqrt(len(v_)))))
        ctx.log(f"real data {name} ({chunk['reading']}): {time.perf_counter() - t0:.1f} s")
        return pd.DataFrame(rows)

    return ctx.map_chunks([{"dataset": n, "reading": r} for n in names for r in readings], compute, desc="real")


#: Real data sets of Table 4 (the loaders :func:`_real_data` knows).
REAL_DATASETS = ("law", "credit")


def _real_claim_text(name: str) -> tuple[tuple[str, str], tuple[str, str]]:
    return ((f"real_{name}_smallest_group_gain", f"{name}: DPSE lowers the smallest group's test MSPE vs DPNoSE at "
             "every Table-4 budget (min over rho of DPNoSE/DPSE)"),
            (f"real_{name}_gain_larger_for_smallest", f"{name}: the DPNoSE/DPSE ratio is larger for the smallest "
             "group than for the others (fraction of budgets)"))


def _claims_real(df, ctx, config):
    ran = set(df.dataset.unique()) if len(df) else set()
    wanted = list(config.get("real_datasets") or [])
    for name in REAL_DATASETS:
        if name not in ran:
            reason = (f"data set {name!r} unavailable (see the run log)" if name in wanted
                      else f"{name!r} not in this config's real_datasets {wanted}")
            for cid, st in _real_claim_text(name):
                ctx.skip_claim(cid, st, reason)
            continue
        (gain_id, gain_st), (more_id, more_st) = _real_claim_text(name)
        gains, mores = {}, {}
        for reading in READINGS:
            sub = df[(df.dataset == name) & (df.reading == reading) & np.isfinite(df.rho)]
            if not len(sub):
                gains[reading] = mores[reading] = None
                continue
            small = int(sub.loc[sub.n_train.idxmin(), "group"])
            piv = sub.pivot_table(index=["rho", "group"], columns="method", values="mspe")
            ratio = (piv["dpnose"] / piv["dpse"]).unstack("group")  # DPNoSE / DPSE per rho, group
            gain_small = ratio[small]
            other = ratio[[g for g in ratio.columns if g != small]].mean(axis=1)
            gains[reading] = {"value": float(gain_small.min())}
            mores[reading] = {"value": float((gain_small > other).mean())}
        _by_reading(ctx, gain_id, gain_st, gains, "> 1", lambda v: v > 1, why_fails=WHY_NOT["real_smallest_group_gain"],
                    skip_reason=f"{name}: no rows")
        _by_reading(ctx, more_id, more_st, mores, "1.0", lambda v: v == 1.0,
                    why_fails=WHY_NOT["real_gain_larger_for_smallest"], skip_reason=f"{name}: no rows")


def lemma31_expected_loss(c: float, x1: np.ndarray, x2: np.ndarray, beta1: np.ndarray, beta2: np.ndarray,
                          sigma1: float, sigma2: float) -> float:
    """Lemma 3.1 (= Lemma C.2) in expectation: the randomized predictor (``beta_1`` w.p. ``c``, else
    ``beta_2``) on the mixture ``c N(X_1 beta_1, sigma_1^2 I) + (1 - c) N(X_2 beta_2, sigma_2^2 I)``
    has expected loss ``c^2 n_1 sigma_1^2 + (1-c)^2 n_2 sigma_2^2 + c(1-c)(E Gamma_1 + E Gamma_2)``
    with ``E Gamma_1 = ||X_2 (beta_2 - beta_1)||^2 + n_2 sigma_2^2`` and ``E Gamma_2 = ||X_1 (beta_1 -
    beta_2)||^2 + n_1 sigma_1^2`` (E C = 1 for ``C ~ chi^2_1``)."""
    n1, n2 = x1.shape[0], x2.shape[0]
    g1 = float(np.sum((x2 @ (beta2 - beta1)) ** 2)) + n2 * sigma2**2
    g2 = float(np.sum((x1 @ (beta1 - beta2)) ** 2)) + n1 * sigma1**2
    return c**2 * n1 * sigma1**2 + (1 - c) ** 2 * n2 * sigma2**2 + c * (1 - c) * (g1 + g2)


def _lemma31_monte_carlo(draws: int, seed: int) -> dict:
    """Monte Carlo of Lemma 3.1's loss: fresh ``Y_1, Y_2``, the mixture's component ``J ~ Bern(c)`` and
    the predictor's ``B ~ Bern(c)`` drawn independently; loss ``||Y_J - X_J beta_B||^2``. Also the
    variance of ``||Y_1 - X_1 beta_1||^2``: ``2 n_1 sigma_1^4`` (``sigma_1^2 chi^2_{n_1}``), not the
    proof's ``n_1 sigma_1^2 chi^2_1`` (variance ``2 n_1^2 sigma_1^4``)."""
    rng = np.random.default_rng(seed)
    c, n1, n2, d, s1, s2 = 0.7, 60, 12, 3, 1.0, 2.0
    x1, x2 = rng.normal(size=(n1, d)), rng.normal(size=(n2, d))
    b1, b2 = np.array([1.0, -0.5, 0.3]), np.array([-1.0, 0.5, 0.8])
    e1, e2 = rng.normal(0, s1, (draws, n1)), rng.normal(0, s2, (draws, n2))
    y1, y2 = x1 @ b1 + e1, x2 @ b2 + e2
    j, b = rng.random(draws) < c, rng.random(draws) < c  # component 1, predictor beta_1
    loss = np.where(j, np.where(b, ((y1 - x1 @ b1) ** 2).sum(1), ((y1 - x1 @ b2) ** 2).sum(1)),
                    np.where(b, ((y2 - x2 @ b1) ** 2).sum(1), ((y2 - x2 @ b2) ** 2).sum(1)))
    closed = lemma31_expected_loss(c, x1, x2, b1, b2, s1, s2)
    mc, se = float(loss.mean()), float(loss.std(ddof=1) / math.sqrt(draws))
    r1 = (e1**2).sum(1)
    return {"closed_form": closed, "monte_carlo": mc, "se": se, "ci": [mc - 1.96 * se, mc + 1.96 * se],
            "var_resid_mc": float(r1.var(ddof=1)), "var_chi2_n1": 2 * n1 * s1**4,
            "var_paper_n1_chi2_1": 2 * n1**2 * s1**4, "n1": n1, "draws": draws}


#: Rows the kit cannot test, with the reason (id, statement, reason).
UNTESTABLE = (
    ("thm5_1_pure_dp_lower_bound", "Theorem 5.1: every eps-DP mechanism solving the constrained problem to within "
     "alpha needs alpha >= Omega(K / (eps n)) on some data set in B_2^K (probability >= 1/2)",
     "a lower bound over every eps-DP mechanism, shown by reduction to 1-way marginals: a simulation of the kit's "
     "finitely many mechanisms cannot test a statement about all mechanisms, and Omega(.) fixes no constant to "
     "compare a measured error with"),
    ("thm5_2_approx_dp_lower_bound", "Theorem 5.2: every (eps, delta)-DP mechanism (delta = o(1/n)) needs alpha >= "
     "Omega(sqrt(K) / (eps n)) on some data set in B_2^K (probability >= 1/3)",
     "a lower bound over every (eps, delta)-DP mechanism (reduction to 1-way marginals): no finite simulation tests "
     "a statement about all mechanisms, and Omega(.) fixes no constant"),
)


def _claims_theory(config: dict, ctx) -> None:
    """Lemma 3.1 (closed form against Monte Carlo) and the untestable theorems 5.1 and 5.2."""
    draws = int(config.get("lemma31_draws", 20000))
    r = _lemma31_monte_carlo(draws, int(config["seed"]))
    half = 3.29 * r["se"]  # 99.9%: a deterministic check at a fixed seed
    ok = abs(r["monte_carlo"] - r["closed_form"]) <= half
    ctx.add_check("lemma3_1_expected_loss", "Lemma 3.1: the randomized predictor's expected loss on the 2-mixture is "
                  "c^2 n_1 sigma_1^2 + (1-c)^2 n_2 sigma_2^2 + c(1-c)(E Gamma_1 + E Gamma_2) (closed form vs Monte "
                  f"Carlo, {draws} draws, c = 0.7, d = 3)",
                  measured=dict(ctx.comparison(r["monte_carlo"], r["closed_form"],
                                               ci=[r["monte_carlo"] - r["closed_form"] - 1.96 * r["se"],
                                                   r["monte_carlo"] - r["closed_form"] + 1.96 * r["se"]],
                                               names=["monte carlo", "closed form"]),
                                **{k: r[k] for k in ("var_resid_mc", "var_chi2_n1", "var_paper_n1_chi2_1", "n1")}),
                  target="closed form inside the Monte Carlo mean +- 3.29 se", passed=ok,
                  reason=("the expectation holds; the proof's distribution n_1 sigma_1^2 chi^2_1 for ||Y_1 - X_1 "
                          f"beta_1||^2 is wrong: it is sigma_1^2 chi^2_(n_1) (variance {r['var_resid_mc']:.1f} by "
                          f"Monte Carlo vs {r['var_chi2_n1']:.0f} for chi^2_(n_1) and {r['var_paper_n1_chi2_1']:.0f} "
                          "for the proof's form); the expectations agree") if ok else None)
    for cid, st, why in UNTESTABLE:
        ctx.add_claim(cid, st, measured=None, target="Omega(.) lower bound", passed=False, status="untestable",
                      reason=why)


#: Section 6's MNIST "8-vs-2" (Bagdasaryan et al. 2019): total epsilon and the paper's reduction of the
#: minority '8' class's error (against Bagdasaryan et al.'s numbers).
DIGITS_EPSILON, DIGITS_PAPER_REDUCTION = 5.73, 0.64

_DIGITS_TEXT = ("Sec. 6, MNIST 8-vs-2: tailoring the budget from a first-stage logistic regression lowers the minority "
                "'8' class's classification error by 64% (total eps = 5.73)")


def digits_eight_vs_two(config: dict) -> dict | None:
    """A labelled reconstruction of Section 6's MNIST 8-vs-2 on scikit-learn's bundled 8x8 digits
    (no MNIST offline): classes 2 and 8, groups = classes, '8' the minority (``digits_minority``
    training rows of it, ``digits_majority`` of '2'), pixels / 16 centred and bounded to ``||x|| <=
    1``; DPSE and DPNoSE both logistic in both stages (the paper's second stage is LeNet) at
    ``rho`` with ``(eps, 1e-5)`` = (5.73, 1e-5) (Bun & Steinke; the paper states no delta), each
    ``rho``-zCDP under replace-one within a group. Returns the per-trial test error per method and
    class, or ``None`` without scikit-learn."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    from scipy.optimize import brentq

    d = load_digits()
    x_all, lab = d.data / 16.0, d.target
    rng = np.random.default_rng(int(config["seed"]))
    i2, i8 = rng.permutation(np.flatnonzero(lab == 2)), rng.permutation(np.flatnonzero(lab == 8))
    n2, n8 = int(config["digits_majority"]), int(config["digits_minority"])
    if not (0 < n2 < len(i2) and 0 < n8 < len(i8)):
        raise ValueError(f"digits_majority and digits_minority must leave test rows: 0 < {n2} < {len(i2)} ('2') and "
                         f"0 < {n8} < {len(i8)} ('8').")
    tr, te = np.r_[i2[:n2], i8[:n8]], np.r_[i2[n2:], i8[n8:]]
    mu = x_all[tr].mean(0)

    def prep(idx):
        x = x_all[idx] - mu
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)
        y = (lab[idx] == 8).astype(np.float32)
        return jnp.asarray(x, jnp.float32), jnp.asarray(y), jnp.asarray(y.astype(np.int32))

    (xtr, ytr, s_tr), (xte, yte, s_te) = prep(tr), prep(te)
    rho = float(brentq(lambda r: float(zcdp_to_dp(r, 1e-5, method="bun_steinke")) - DIGITS_EPSILON, 1e-4, 50.0))
    st = dict(config, steps=int(config["digits_steps"]), learning_rate=float(config["digits_lr"]),
              stats_bound_x=1.0, stats_bound_y=1.0)
    cfgs = method_configs(st)
    names = ("dpse", "dpnose")
    configs = tuple(dataclasses.replace(cfgs[m], loss="logistic", fit_intercept=True) for m in names)
    onehot = jax.nn.one_hot(s_te, 2)

    def one(key):
        keys = jax.vmap(lambda m: jax.random.fold_in(key, m))(jnp.arange(len(configs)))
        th, _ = bt.fit_many(keys, xtr, ytr, s_tr, 2, hyperparams_from(st, rho), configs)
        err = ((th[:, :-1] @ xte.T + th[:, -1:] > 0).astype(jnp.float32) != yte[None]).astype(jnp.float32)
        return (err @ onehot) / onehot.sum(0)  # [M, K]: test error per method and class (2, 8)

    keys = jax.random.split(jax.random.key(int(config["seed"]) + 11), int(config["digits_trials"]))
    out = np.asarray(jax.jit(jax.vmap(one))(keys))  # [T, M, K]
    return {"errors": out, "methods": names, "rho": rho, "n_train": (n2, n8), "n_test": (len(i2) - n2, len(i8) - n8)}


def _claim_digits(config: dict, ctx) -> None:
    """Section 6's MNIST 8-vs-2 as a labelled reconstruction on the 8x8 digits (full config only)."""
    if not config.get("digits", False):
        ctx.skip_claim("sec6_mnist_8_vs_2", _DIGITS_TEXT, "the digits reconstruction runs in the full config only "
                       "(digits = false here)", target=f"-{DIGITS_PAPER_REDUCTION:.2f}")
        return
    r = digits_eight_vs_two(config)
    if r is None:
        ctx.skip_claim("sec6_mnist_8_vs_2", _DIGITS_TEXT, "scikit-learn is not installed (its bundled 8x8 digits are "
                       "the offline stand-in for MNIST)", target=f"-{DIGITS_PAPER_REDUCTION:.2f}")
        return
    e8 = r["errors"][:, :, 1]  # [T, M]: the '8' class
    dpse, dpnose = e8[:, 0], e8[:, 1]
    t = len(dpse)
    red = 1.0 - dpse.mean() / dpnose.mean()
    # delta method on the paired trials: var of (dpse - red' dpnose) / mean(dpnose)
    q = dpse.mean() / dpnose.mean()
    se = float(np.std(dpse - q * dpnose, ddof=1) / math.sqrt(t) / dpnose.mean())
    measured = {"value": float(red), "ci": [float(red) - 1.96 * se, float(red) + 1.96 * se],
                "error_8": {"dpse": float(dpse.mean()), "dpnose": float(dpnose.mean())},
                "error_2": {"dpse": float(r["errors"][:, 0, 0].mean()), "dpnose": float(r["errors"][:, 1, 0].mean())},
                "rho": r["rho"], "n_train_2_8": list(r["n_train"]), "trials": t}
    ctx.add_claim("sec6_mnist_8_vs_2", _DIGITS_TEXT, measured=measured,
                  target=f"reduction {DIGITS_PAPER_REDUCTION:.2f} (paper, vs Bagdasaryan et al.)",
                  passed=bool(measured["ci"][0] > 0), status="reconstruction",
                  reason=("a labelled reconstruction, no evidence for or against the paper: MNIST is not available "
                          "offline, so scikit-learn's 8x8 digits stand in (classes 2 and 8, '8' the minority); the "
                          "second stage is the kit's logistic regression, not LeNet; the paper's baseline is "
                          "Bagdasaryan et al.'s DP-SGD numbers, here DPNoSE on the same model; the paper gives "
                          "neither the class imbalance, delta, the DP-SGD settings nor the group definition "
                          f"(here groups = classes, delta = 1e-5); DPSE lowers the '8' error by {red:.3f} "
                          f"[{measured['ci'][0]:.3f}, {measured['ci'][1]:.3f}] vs DPNoSE"))


def run(config: dict, ctx: Any):
    """Run every part of the paper-000 study named in ``config`` and record claims and privacy.

    Each part runs under each stage-2 reading in ``config["readings"]`` (:data:`READINGS`): the
    two-group sweep at ``ratios`` (group means) and ``summed_ratios`` (sums), Fig. 3, the K-group
    tables and the real data."""
    import pandas as pd

    settings = dict(config)
    readings = list(settings.get("readings") or ["group_mean"])
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
        frames[r] = _two_group(rs, ctx, ratios=ratios, slope_pairs=slopes,
                               noise_sds=[float(settings["noise_sd"])], desc="two_group" + tag)
        fig3s[r] = _two_group(rs, ctx, ratios=settings["fig3_ratios"], slope_pairs=settings["fig3_slope_pairs"],
                              noise_sds=list(map(float, settings["fig3_noise_sds"])), desc="fig3_noise" + tag)
        for f in (frames[r], fig3s[r]):
            if len(f):
                f["reading"] = r
    both = pd.concat([f for f in list(frames.values()) + list(fig3s.values()) if len(f)], ignore_index=True) \
        if any(len(f) for f in list(frames.values()) + list(fig3s.values())) else pd.DataFrame()
    if len(both):
        ctx.save_table(both, "two_group")
    if any(len(f) for f in frames.values()):
        _claims_two_group(frames, ctx, settings)
    else:
        for cid, st in TWO_GROUP_CLAIMS:
            ctx.skip_claim(cid, st, "the two-group sweep has no ratio (ratios = [])")
    fig3_text = ("slopes (+-1, -+1), sigma_e varied, 20x-100x: DPSE lowers the smallest group's MSPE in all "
                 "regimes (fraction of grid points)")
    _by_reading(ctx, "fig3_all_regimes", fig3_text,
                {r: ({"value": float((_reduction(f, "dpse", "dpnose", 2)[1] > 0).mean())} if len(f) else None)
                 for r, f in fig3s.items()}, "1.0", lambda v: v == 1.0, why_fails=WHY_NOT["fig3_all_regimes"],
                skip_reason="no Fig. 3 ratio in this config (fig3_ratios = [])", paper=(1.0, 1.0))
    if len(frames["group_mean"]):
        figures.two_group(frames["group_mean"], ctx)
    design = kgroup_design(settings) if settings["kgroup_ks"] else {"sizes": (), "slopes": [], "middle": None}
    if design.get("middle") is not None:
        ctx.log(f"K = 5 design calibrated to the paper's DPNoSE column: sizes {design['sizes']}, slopes "
                f"{np.round(design['slopes'], 3).tolist()}, fit shift {design['shift']:.3f} (paper "
                f"{design['target_shift']:.3f}; {design['shift_at_zero']:.3f} with no middle rows)")
    kg = _kgroup(settings, ctx, design)
    if len(kg):
        ctx.save_table(kg, "kgroup")
    _claims_kgroup(kg, ctx, design, readings)
    real = _real(settings, ctx)
    if len(real):
        ctx.save_table(real, "real")
    _claims_real(real, ctx, settings)
    _claims_theory(settings, ctx)
    _claim_digits(settings, ctx)
    # What each run spends, per method, reading and budget, under the configured relation (every
    # budget a study used: the epsilon grid, the K-group budgets and, when real data ran, Table 4's).
    rhos = (np.asarray(settings["epsilons"]) ** 2 / 2).tolist() + list(settings["kgroup_rhos"])
    if len(real):
        rhos += list(settings["real_rhos"])
    for r in readings:
        cfgs = method_configs(dict(settings, scaling="paper" if r == "summed" else "group_mean"))
        tag = "_summed" if r == "summed" else ""
        for rho in sorted(set(float(v) for v in rhos)):
            for name in PRIVATE_METHODS:
                # the spend does not depend on the group sizes (rho-zCDP whatever they are)
                spend = bt.spend(dataclasses.replace(cfgs[name], delta=float(settings["delta"])),
                                 (int(settings["minority"]),) * 2, hyperparams_from(settings, rho))
                ctx.record_privacy(f"{name}{tag}_rho_{rho:.6g}", spend)
    return both


EXPERIMENT = register(Experiment(
    name="paper_000",
    paper="000",
    description="Privacy budget tailoring (DPSE vs DPNoSE): two-group synthetic sweeps "
                "(Figs 2-4, 6), K-group tables (Tables 1-3)",
    configs={"quick": QUICK, "full": FULL},
    run=run,
))
