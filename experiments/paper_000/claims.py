"""Paper 000: the two readings of stage 2 and the verdict rule shared by every claim.

The paper does not specify DPSE's stage-2 weighting (Algorithm 2 line 10 divides by n_k, Algorithm 3
sums): :data:`READINGS` names both, :func:`by_reading` records a claim under both (holds, fails, or a
reconstruction with the :func:`mixing_weight` between them), and :func:`ratio_stat` gives the MSPE
reductions with their 95% intervals that the figure and table claims test.
"""

from __future__ import annotations

import math

import numpy as np

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


def reading_settings(config: dict, n_total: int) -> dict:
    """The settings of one reading: ``scaling="paper"`` with the step divided by ``n_total``."""
    if config.get("scaling", "group_mean") == "paper":
        return dict(config, learning_rate=float(config["learning_rate"]) / float(n_total))
    return config


def reduction(df, method, baseline, group, where=None):
    """Mean over the selected rows of 1 - MSPE(method)/MSPE(baseline) for one group."""
    keys = ["ratio", "beta1", "beta2", "noise_sd", "rho", "group"]
    a = df[(df.method == method) & (df.group == group)].set_index(keys).mspe
    b = df[(df.method == baseline) & (df.group == group)].set_index(keys).mspe
    red = 1.0 - a / b
    if where is not None:
        red = red[where(red.index.to_frame(index=False)).to_numpy()]
    return float(red.mean()) if len(red) else float("nan"), red


def _paired_cells(df, method, baseline, group, keys, where=None):
    """The rows of ``method`` and ``baseline`` for one group, aligned on ``keys`` (inner join) and
    filtered by ``where`` (a predicate on the key frame); ``None`` when no cell is left."""
    a = df[(df.method == method) & (df.group == group)].set_index(keys)
    b = df[(df.method == baseline) & (df.group == group)].set_index(keys)
    a, b = a.align(b, join="inner")
    if where is not None and len(a):
        sel = where(a.index.to_frame(index=False)).to_numpy()
        a, b = a[sel], b[sel]
    return (a, b) if len(a) else None


def ratio_stat(df, method, baseline, group, keys, where=None, *, reduction: bool = True) -> dict | None:
    """Mean over cells of ``1 - MSPE(method)/MSPE(baseline)`` (or ``MSPE ratio - 1`` when not
    ``reduction``) for one group, with a 95% interval: per cell the delta method on the two means'
    standard errors (treated as independent, which is conservative for the paired trials), then the
    mean over cells. ``None`` when no cell is selected."""
    cells = _paired_cells(df, method, baseline, group, keys, where)
    if cells is None:
        return None
    a, b = cells
    q = a.mspe / b.mspe
    var = q**2 * ((a.se / a.mspe) ** 2 + (b.se / b.mspe) ** 2)
    val = (1.0 - q) if reduction else (q - 1.0)
    mean = float(val.mean())
    half = 1.96 * float(np.sqrt(var.sum())) / len(val)
    return {"value": mean, "ci": [mean - half, mean + half], "cells": int(len(val))}


def pointwise_fraction(df, method, baseline, group, keys, where=None) -> dict | None:
    """The fraction of cells where ``method``'s MSPE is below ``baseline``'s for one group, with the
    range that the cells' 95% intervals allow: per cell the reduction ``1 - MSPE(method)/MSPE(baseline)``
    with the delta-method interval of :func:`ratio_stat`; the interval is ``[significantly lower,
    1 - significantly higher]`` (a cell whose interval contains 0 is a tie, counted on both sides).
    ``None`` when no cell is selected."""
    cells = _paired_cells(df, method, baseline, group, keys, where)
    if cells is None:
        return None
    a, b = cells
    q = (a.mspe / b.mspe).to_numpy()
    half = 1.96 * q * np.sqrt((a.se / a.mspe).to_numpy() ** 2 + (b.se / b.mspe).to_numpy() ** 2)
    red = 1.0 - q
    n = len(red)
    lower, higher = int(np.sum(red - half > 0)), int(np.sum(red + half < 0))
    return {"value": float(np.mean(red > 0)), "ci": [lower / n, 1.0 - higher / n], "cells": n,
            "significantly_lower": lower, "significantly_higher": higher, "ties": n - lower - higher}


def min_ratio_over(sub, group: int, by: str = "rho") -> dict | None:
    """``min`` over ``by`` (the budgets) of ``MSPE(dpnose) / MSPE(dpse)`` for one group, with the
    interval of the minimum ``[min_r lo_r, min_r hi_r]`` from each budget's 95% delta-method interval
    (the two means' standard errors treated as independent): above 1 at every budget exactly when
    its low end is. ``sub``: rows with ``method, group, mspe, se`` and ``by``."""
    g = sub[sub.group == group]
    a = g[g.method == "dpse"].set_index(by)
    b = g[g.method == "dpnose"].set_index(by)
    a, b = a.align(b, join="inner")
    if not len(a):
        return None
    r = (b.mspe / a.mspe).to_numpy()
    half = 1.96 * r * np.sqrt((a.se / a.mspe).to_numpy() ** 2 + (b.se / b.mspe).to_numpy() ** 2)
    i = int(np.argmin(r))
    return {"value": float(r[i]), "ci": [float(np.min(r - half)), float(np.min(r + half))],
            f"{by}_at_min": float(a.index[i]), "ci_at_min": [float(r[i] - half[i]), float(r[i] + half[i])],
            "budgets": int(len(r))}


def _fmt(r: dict) -> str:
    return f"{r['value']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if "ci" in r else f"{r['value']:.4g}"


def interval(v: dict) -> tuple[float, float]:
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
    corners = [mixing_weight(x, y, lo_t, hi_t) for x in interval(a) for y in interval(b)]
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


def by_reading(ctx, cid: str, statement: str, results: dict, target: str, test, *, why_fails: str,
                skip_reason: str, paper: tuple[float, float] | None = None, paper_value: float | None = None,
                note: str | None = None, on_interval: bool = False) -> None:
    """Record a claim evaluated under each stage-2 reading (``results[reading]``: a value dict or
    ``None`` when the reading's cells are absent; ``test(value) -> bool``).

    Both readings meet the target: holds. Otherwise, with ``paper = (lo, hi)`` the paper's range for
    the value (infinite for a one-sided target): the claim fails only when every reading's 95%
    interval lies wholly on the same side of that range; when the readings bracket the paper's value
    (or one of them ties with its edge) the outcome depends on the weighting the paper does not
    specify, and the row is a reconstruction with both intervals and the mixing weight
    (:func:`mixing_weight`) that would give the paper's value (``paper_value``, else the range).
    Without ``paper``, disagreeing readings are a reconstruction and agreeing misses fail. A single
    reading is a reconstruction. ``note`` is appended to every reason (e.g. what holds by construction).
    ``on_interval``: a reading meets the target only when both ends of its 95% interval do (a value
    whose interval reaches the paper's edge is a tie, never a hold); the default tests the point value."""
    got = {r: v for r, v in results.items() if v is not None and np.isfinite(v["value"])}
    if not got:
        ctx.skip_claim(cid, statement, skip_reason, target=target)
        return
    tail = f"; {note}" if note else ""
    if on_interval:
        oks = {r: all(bool(test(x)) for x in interval(v)) for r, v in got.items()}
    else:
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
        ivs = [interval(v) for v in got.values()]
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
