"""Paper 000, "Privacy Budget Tailoring in Private Data Analysis": DPSE vs DPNoSE.

Experiments (one registered experiment, ``paper_000``, with quick and full configs):

* **Two groups, synthetic** (Figs. 2, 3, 4, 6): majority/minority size ratios, slope pairs
  ``(beta_1, beta_2)``, noise ``sigma_e``, ``rho = eps^2/2`` over an epsilon grid; MSPE per group
  for DPSE and the DPNoSE baselines, with and without the fairness Lagrangian. All trials x slope
  pairs x budgets of one ratio are one compiled program (``montecarlo.run_trials``).
* **K groups** (Tables 1-3, Sec. 6.1): K in {5, 10, 15, 20}, sizes geometric from the largest to
  the smallest group (10,000 -> 500, "20x"; 5,000 -> 100, "50x"), rho in {2, 4.5, 8}.
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
* Privacy: every run is ``rho``-zCDP under ``relation="replace_one"`` (the kit's default and the
  paper's setting): group membership and sizes are public, a neighbour replaces one record by
  another of the same group, so clipped gradient sums have sensitivity ``2 Delta``. The budgets
  and the spend recorded in ``privacy.json`` (one entry per method and budget) are those of
  :func:`budget_tailoring.privacy`. ``--set relation=add_remove`` runs the add/remove variant
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
                                     epsilon=float(bt.zcdp_to_epsilon(rho, 1e-5)), method=name,
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
                              scen_slopes, scen_sds, rhos, sizes=sizes, settings=config,
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


def _reduction(df, method, baseline, group, where=None):
    """Mean over the selected rows of 1 - MSPE(method)/MSPE(baseline) for one group."""
    keys = ["ratio", "beta1", "beta2", "noise_sd", "rho", "group"]
    a = df[(df.method == method) & (df.group == group)].set_index(keys).mspe
    b = df[(df.method == baseline) & (df.group == group)].set_index(keys).mspe
    red = 1.0 - a / b
    if where is not None:
        red = red[where(red.index.to_frame(index=False)).to_numpy()]
    return float(red.mean()) if len(red) else float("nan"), red


#: Why each claim does not hold when it does not (recorded with the claim; see the page's
#: "Reproduction" and "Reading" for the numbers).
WHY_NOT = {
    "fig6_smallest_group_reduction": (
        "outside the paper's 10-50%: the kit's gain (51-58% for every slope pair) comes from stage 2's group-mean "
        "weighting, which the paper does not specify (Alg. 2 l.10 divides by n_k, Alg. 3 sums); the kit's 1/n_k "
        "choice sets the size of the effect"),
    "fig6_reduction_vs_equal_split": (
        "the budget allocation alone changes MSPE by < 0.1%: the DP noise is small next to the bias of one slope "
        "for two groups, and the equal split minimizes the variance of the summed noise; the gain comes from the "
        "per-group normalization the kit chose, which DPSE and the equal split share"),
    "fig6_reduction_with_fairness": (
        "with the constraint both methods use Algorithm 2's group-mean weighting, so only the allocation differs, "
        "and the allocation alone changes MSPE by < 0.1% (see fig6_reduction_vs_equal_split)"),
    "fig2_opposite_slopes_over_50pct": (
        "the gain comes from stage 2's group-mean weighting (the kit's 1/n_k choice; the paper does not specify it)"),
    "fig2_small_gain_for_-10_-1": (
        "the kit's gain for slopes (-10, -1) is as large as for the other pairs (it comes from stage 2's group-mean "
        "weighting, the kit's choice); the paper states no 10% threshold for a small gain"),
    "mc_sd_below_10pct": (
        "the trial-to-trial sd exceeds 10% of the mean at the smallest budgets, where the replace-one noise "
        "(twice the former add/remove noise) dominates; the paper does not say over which budgets its 10% holds"),
    "fig4_larger_group_cost_small": (
        "the larger group pays a large relative MSPE increase (+146-150% at every ratio, full size): the group-mean "
        "weighting moves the fit away from the majority's slope"),
    "table1_3_group1_higher": (
        "the paper's K = 5 magnitudes depend on group slopes and middle group sizes it does not give; with the "
        "kit's geometric sizes and same-sign slopes the direction matches (group 1 worse) but not the size"),
    "table1_3_groups2_5_lower": (
        "the paper's K = 5 magnitudes depend on group slopes and middle group sizes it does not give; with the "
        "kit's geometric sizes and same-sign slopes the direction matches (groups 2-5 better) but not the size"),
    "table1_3_flat_in_rho": "MSPE moves by more than 5% over rho: the DP noise is not small next to the slope bias",
    "kgroup_smallest_at_least_10pct": "the smallest group gains less than 10% for some (K, design)",
    "fig3_all_regimes": (
        "not lower in every regime: at the smallest budgets with large noise (full size: eps = 0.1, sigma_e = 4) "
        "DPSE is 0.3-0.9% above DPNoSE, where the replace-one noise matters"),
    "ablation_paper_scaling_gain": (
        "with the literal scaling (noisy sums, no group normalization) DPSE differs from DPNoSE only through "
        "noise, which is never smaller in total (Cauchy-Schwarz, notes A.6): the paper's gain needs the group-mean "
        "weighting it does not specify"),
    "real_smallest_group_gain": "the smallest group's test MSPE is not lower with DPSE at every Table-4 budget",
    "real_gain_larger_for_smallest": "the smallest group's gain is not the largest at every Table-4 budget",
}


def _claim_or_skip(ctx, cid: str, statement: str, measured: float, target: str, passed: bool,
                   reason: str) -> None:
    """``ctx.add_claim`` unless ``measured`` is NaN (the claim's grid cells are absent): then a
    skipped row with ``reason``."""
    if isinstance(measured, float) and math.isnan(measured):
        ctx.skip_claim(cid, statement, reason, target=target)
    else:
        ctx.add_claim(cid, statement, measured=measured, target=target, passed=passed, reason=WHY_NOT[cid])


#: The two-group claims (id, statement) whose rows are skipped when the sweep has no cells.
TWO_GROUP_CLAIMS = (
    ("fig6_smallest_group_reduction", "DPSE lowers the smallest group's MSPE by 10-50% vs DPNoSE (pooled DP-GD) at "
     "reasonable privacy (eps in [1, 10]); mean over ratios, slope pairs and budgets"),
    ("fig6_reduction_vs_equal_split", "DPSE vs the equal split (same group-mean weighting, s_k = 1/sqrt(K)): the "
     "effect of the allocation alone on the smallest group (paper: part of the 10-50% gain)"),
    ("fig6_reduction_with_fairness", "with the fairness constraint (G=1, g=max_k l_k) DPSE still lowers the smallest "
     "group's MSPE vs DPNoSE (Algorithm 2 with the equal split)"),
    ("fig2_opposite_slopes_over_50pct", "slopes (-10, 10) and (10, -10): DPSE lowers the smallest group's MSPE by "
     "> 50%"),
    ("fig2_small_gain_for_-10_-1", "slopes (-10, -1): the gain is small (below 10%)"),
    ("mc_sd_below_10pct", "the sd of MSPE across trials is below 10% of its mean (mean over all grid points, "
     "methods and groups)"),
    ("fig4_larger_group_cost_small", "at the largest ratio the larger group's relative MSPE increase is smaller "
     "than the smallest group's relative decrease"),
)


def _claims_two_group(df, ctx, config):
    text = dict(TWO_GROUP_CLAIMS)
    smallest = 2
    reasonable = lambda f: (f.rho >= 0.5) & (f.rho <= 50.0)  # noqa: E731 - eps in [1, 10]
    no_budget = "no budget with eps in [1, 10] (rho in [0.5, 50]) in the grid"
    overall, _ = _reduction(df, "dpse", "dpnose", smallest, reasonable)
    _claim_or_skip(ctx, "fig6_smallest_group_reduction", text["fig6_smallest_group_reduction"], overall,
                   "0.10 to 0.50", bool(0.10 <= overall <= 0.50), no_budget)
    eq, _ = _reduction(df, "dpse", "equal", smallest, reasonable)
    _claim_or_skip(ctx, "fig6_reduction_vs_equal_split", text["fig6_reduction_vs_equal_split"], eq, "> 0.05",
                   bool(eq > 0.05), no_budget)
    fair, _ = _reduction(df, "dpse_fair", "equal_fair", smallest, reasonable)
    _claim_or_skip(ctx, "fig6_reduction_with_fairness", text["fig6_reduction_with_fairness"], fair,
                   "> 0.10 (paper: persists, 10-50%)", bool(fair > 0.10), no_budget)
    opp = lambda f: reasonable(f) & (f.beta1 == -f.beta2) & (f.beta1.abs() == 10)  # noqa: E731
    big, _ = _reduction(df, "dpse", "dpnose", smallest, opp)
    _claim_or_skip(ctx, "fig2_opposite_slopes_over_50pct", text["fig2_opposite_slopes_over_50pct"], big, "> 0.50",
                   bool(big > 0.5), "no cell with slopes (-10, 10) or (10, -10) and eps in [1, 10] in the grid")
    small_case = lambda f: reasonable(f) & (f.beta1 == -10) & (f.beta2 == -1)  # noqa: E731
    sm, _ = _reduction(df, "dpse", "dpnose", smallest, small_case)
    _claim_or_skip(ctx, "fig2_small_gain_for_-10_-1", text["fig2_small_gain_for_-10_-1"], sm, "< 0.10",
                   bool(sm < 0.10), "no cell with slopes (-10, -1) and eps in [1, 10] in the grid")
    priv = df[df.method.isin(PRIVATE_METHODS)]
    ratio_sd = float((priv.sd / priv.mspe).mean())
    ctx.add_claim("mc_sd_below_10pct", text["mc_sd_below_10pct"], measured=ratio_sd, target="< 0.10",
                  passed=bool(ratio_sd < 0.10), reason=WHY_NOT["mc_sd_below_10pct"])
    keys = ["ratio", "beta1", "beta2", "noise_sd", "rho"]
    big_ratio = df[(df.ratio == df.ratio.max())]
    a = big_ratio[(big_ratio.method == "dpse") & (big_ratio.group == 1)].set_index(keys).mspe
    b = big_ratio[(big_ratio.method == "dpnose") & (big_ratio.group == 1)].set_index(keys).mspe
    sel = (a / b - 1.0)[reasonable(a.index.to_frame(index=False)).to_numpy()]
    inc = float(sel.mean()) if len(sel) else float("nan")
    red2, _ = _reduction(big_ratio, "dpse", "dpnose", smallest, reasonable)
    _claim_or_skip(ctx, "fig4_larger_group_cost_small",
                   f"at the largest ratio ({int(df.ratio.max())}x) the larger group's relative MSPE increase is "
                   "smaller than the smallest group's relative decrease", inc, f"< {red2:.3f}", bool(inc < red2),
                   no_budget)


def _kgroup(config, ctx):
    """Tables 1-3: K groups, geometric sizes, rho in kgroup_rhos; one program per (K, design)."""
    import pandas as pd

    rhos = np.asarray(config["kgroup_rhos"], np.float64)
    chunks = [{"k": int(k), "largest": int(d[0]), "smallest": int(d[1])}
              for d in config["kgroup_designs"] for k in config["kgroup_ks"]]

    def compute(chunk):
        k = chunk["k"]
        sizes = kgroup_sizes(k, chunk["largest"], chunk["smallest"])
        slopes = kgroup_slopes(k)
        t0 = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(int(config["seed"]) + 1), k * 100003 + sizes[0])
        out = two_group_study(key, slopes[None], [float(config["noise_sd"])], rhos, sizes=sizes,
                              settings=config, num_trials=int(config["kgroup_trials"]),
                              chunk_size=trial_chunk_size(sum(sizes), config["chunk_size"]))
        mspe = out["mspe"][:, 0]  # [T, R, M, K]
        rows = []
        t = mspe.shape[0]
        for r, rho in enumerate(rhos):
            for m, name in enumerate(PRIVATE_METHODS):
                for g in range(k):
                    vals = mspe[:, r, m, g]
                    rows.append(dict(k=k, largest=chunk["largest"], smallest=chunk["smallest"],
                                     rho=float(rho), method=name, group=g + 1, n=sizes[g],
                                     slope=float(slopes[g]), mspe=float(vals.mean()),
                                     se=float(vals.std(ddof=1) / math.sqrt(t)), trials=t))
        ctx.log(f"kgroup K={k} sizes {sizes[0]}..{sizes[-1]}: {time.perf_counter() - t0:.1f} s")
        return pd.DataFrame(rows)

    if not chunks:
        return pd.DataFrame()
    return ctx.map_chunks(chunks, compute, desc="kgroup")


#: The K-group claims (id, statement) and the K they need.
KGROUP_CLAIMS = (
    ("table1_3_group1_higher", "K=5: DPSE raises group 1's (largest) MSPE by about 24% vs DPNoSE", "K = 5"),
    ("table1_3_groups2_5_lower", "K=5: DPSE lowers groups 2-5's MSPE by about 16% vs DPNoSE", "K = 5"),
    ("table1_3_flat_in_rho", "K=5: DPSE's MSPE is nearly flat in rho in {2, 4.5, 8} (max relative change over rho, "
     "per group)", "K = 5"),
    ("kgroup_smallest_at_least_10pct", "K in {10, 15, 20}: at least a 10% reduction for the smallest group (min over "
     "K and designs)", "K > 5"),
)


def _claims_kgroup(df, ctx):
    text = {cid: st for cid, st, _ in KGROUP_CLAIMS}
    ks = sorted(int(k) for k in df.k.unique()) if len(df) else []
    if 5 not in ks:
        for cid, st, need in KGROUP_CLAIMS[:3]:
            ctx.skip_claim(cid, st, f"the K-group grid has no {need} cell (kgroup_ks = {ks})")
    keys = ["k", "largest", "smallest", "rho", "group"]
    if 5 in ks:
        a = df[df.method == "dpse"].set_index(keys).mspe
        b = df[df.method == "dpnose"].set_index(keys).mspe
        ratio = (a / b).reset_index(name="ratio")
        sub = ratio[(ratio.k == 5)]
        g1 = float(sub[sub.group == 1].ratio.mean() - 1.0)
        rest = float(1.0 - sub[sub.group > 1].ratio.mean())
        ctx.add_claim("table1_3_group1_higher", text["table1_3_group1_higher"], measured=g1,
                      target="about +0.24 (0.10 to 0.40)", passed=bool(0.10 <= g1 <= 0.40),
                      reason=WHY_NOT["table1_3_group1_higher"])
        ctx.add_claim("table1_3_groups2_5_lower", text["table1_3_groups2_5_lower"], measured=rest,
                      target="about 0.16 (0.08 to 0.30)", passed=bool(0.08 <= rest <= 0.30),
                      reason=WHY_NOT["table1_3_groups2_5_lower"])
        d = df[(df.k == 5) & (df.method == "dpse")].groupby(["largest", "group"]).mspe
        flat = float((d.max() / d.min() - 1.0).max())
        ctx.add_claim("table1_3_flat_in_rho", text["table1_3_flat_in_rho"], measured=flat, target="< 0.05",
                      passed=bool(flat < 0.05), reason=WHY_NOT["table1_3_flat_in_rho"])
    if not any(k > 5 for k in ks):
        cid, st, need = KGROUP_CLAIMS[3]
        ctx.skip_claim(cid, st, f"the K-group grid has no {need} cell (kgroup_ks = {ks})", target=">= 0.10")
        return
    a = df[df.method == "dpse"].set_index(keys).mspe
    b = df[df.method == "dpnose"].set_index(keys).mspe
    ratio = (a / b).reset_index(name="ratio")
    many = ratio[ratio.k > 5]
    smallest = many.groupby(["k", "largest"]).apply(
        lambda f: float(1.0 - f[f.group == f.group.max()].ratio.mean()), include_groups=False)
    worst = float(smallest.min())
    ctx.add_claim("kgroup_smallest_at_least_10pct", text["kgroup_smallest_at_least_10pct"], measured=worst,
                  target=">= 0.10", passed=bool(worst >= 0.10), reason=WHY_NOT["kgroup_smallest_at_least_10pct"])


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
    """Table 4 / Fig. 5: DPSE vs DPNoSE on real data at the Table 4 budgets (noise trials only)."""
    import pandas as pd

    names = list(config.get("real_datasets") or [])
    if not names:
        return pd.DataFrame()
    rhos = np.asarray(config["real_rhos"], np.float64)
    settings = dict(config, steps=int(config["real_steps"]), learning_rate=float(config["real_lr"]),
                    stats_bound_x=1.5, stats_bound_y=3.0)

    def compute(chunk):
        name = chunk["dataset"]
        t0 = time.perf_counter()
        try:
            tr, te = _real_data(name, int(config["seed"]))
        except Exception as err:  # noqa: BLE001 - data absent or loader failure: report and skip
            ctx.log(f"real data {name!r} unavailable: {err}")
            return pd.DataFrame()
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
                    rows.append(dict(dataset=name, rho=float(rho), method=meth, group=g + 1,
                                     group_name=tr.info.group_names[g] if tr.info.group_names else g,
                                     n_train=int(sizes[g]), mspe=float(v_.mean()),
                                     se=float(v_.std(ddof=1) / math.sqrt(len(v_)))))
        ctx.log(f"real data {name}: {time.perf_counter() - t0:.1f} s")
        return pd.DataFrame(rows)

    return ctx.map_chunks([{"dataset": n} for n in names], compute, desc="real")


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
        sub = df[(df.dataset == name) & np.isfinite(df.rho)]
        small = int(sub.loc[sub.n_train.idxmin(), "group"])
        piv = sub.pivot_table(index=["rho", "group"], columns="method", values="mspe")
        ratio = (piv["dpnose"] / piv["dpse"]).unstack("group")  # DPNoSE / DPSE per rho, group
        gain_small = ratio[small]
        ctx.add_claim(gain_id, gain_st, measured=float(gain_small.min()), target="> 1",
                      passed=bool(gain_small.min() > 1), reason=WHY_NOT["real_smallest_group_gain"])
        other = ratio[[g for g in ratio.columns if g != small]].mean(axis=1)
        more = float((gain_small > other).mean())
        ctx.add_claim(more_id, more_st, measured=more, target="1.0", passed=bool(more == 1.0),
                      reason=WHY_NOT["real_gain_larger_for_smallest"])


def run(config: dict, ctx: Any):
    """Run every part of the paper-000 study named in ``config`` and record claims and privacy."""
    import pandas as pd

    settings = dict(config)
    slopes = [list(map(float, p)) for p in settings["slope_pairs"]]
    main = _two_group(settings, ctx, ratios=settings["ratios"], slope_pairs=slopes,
                      noise_sds=[float(settings["noise_sd"])], desc="two_group")
    fig3 = _two_group(settings, ctx, ratios=settings["fig3_ratios"],
                      slope_pairs=settings["fig3_slope_pairs"],
                      noise_sds=list(map(float, settings["fig3_noise_sds"])), desc="fig3_noise")
    both = pd.concat([main, fig3], ignore_index=True) if len(fig3) else main
    if len(both):
        ctx.save_table(both, "two_group")
    if len(main):
        _claims_two_group(main, ctx, settings)
    else:
        for cid, st in TWO_GROUP_CLAIMS:
            ctx.skip_claim(cid, st, "the two-group sweep has no ratio (ratios = [])")
    ab_ratios = settings.get("ablation_ratios") or []
    ab_text = ("with the paper's literal scaling (noisy sums, not group means) DPSE still lowers the smallest "
               "group's MSPE vs DPNoSE by 10-50% (eps in [1, 10])")
    if not ab_ratios:
        ctx.skip_claim("ablation_paper_scaling_gain", ab_text, "no ablation ratio in this config (ablation_ratios "
                       "= [])", target="0.10 to 0.50")
    if ab_ratios:
        # Literal scaling (Alg. 2 l.10-13, Alg. 3 l.8): noisy sums, no group normalisation; the
        # step is divided by the public n so the iteration scale matches the default.
        n_ab = int(ab_ratios[0]) * int(settings["minority"]) + int(settings["minority"])
        ab_settings = dict(settings, scaling="paper",
                           learning_rate=float(settings["learning_rate"]) / n_ab,
                           trials=int(settings.get("ablation_trials") or settings["trials"]))
        ab = _two_group(ab_settings, ctx, ratios=ab_ratios[:1], slope_pairs=slopes,
                        noise_sds=[float(settings["noise_sd"])], desc="ablation_paper_scaling")
        if len(ab):
            ctx.save_table(ab, "ablation_paper_scaling")
            reasonable = lambda f: (f.rho >= 0.5) & (f.rho <= 50.0)  # noqa: E731
            red, _ = _reduction(ab, "dpse", "dpnose", 2, reasonable)
            _claim_or_skip(ctx, "ablation_paper_scaling_gain", ab_text, red, "0.10 to 0.50",
                           bool(0.10 <= red <= 0.50), "no budget with eps in [1, 10] in the grid")
    fig3_text = ("slopes (+-1, -+1), sigma_e varied, 20x-100x: DPSE lowers the smallest group's MSPE in all "
                 "regimes (fraction of grid points)")
    if len(fig3):
        frac = float((_reduction(fig3, "dpse", "dpnose", 2)[1] > 0).mean())
        ctx.add_claim("fig3_all_regimes", fig3_text, measured=frac, target="1.0", passed=bool(frac == 1.0),
                      reason=WHY_NOT["fig3_all_regimes"])
    else:
        ctx.skip_claim("fig3_all_regimes", fig3_text, "no Fig. 3 ratio in this config (fig3_ratios = [])",
                       target="1.0")
    if len(main):
        figures.two_group(main, ctx)
    kg = _kgroup(settings, ctx)
    if len(kg):
        ctx.save_table(kg, "kgroup")
    _claims_kgroup(kg, ctx)
    real = _real(settings, ctx)
    if len(real):
        ctx.save_table(real, "real")
    _claims_real(real, ctx, settings)
    # What each run spends, per method and budget, under the configured relation (every budget a
    # study used: the epsilon grid, the K-group budgets and, when real data ran, Table 4's).
    rhos = (np.asarray(settings["epsilons"]) ** 2 / 2).tolist() + list(settings["kgroup_rhos"])
    if len(real):
        rhos += list(settings["real_rhos"])
    cfgs = method_configs(settings)
    for rho in sorted(set(float(r) for r in rhos)):
        for name in PRIVATE_METHODS:
            spend = bt.privacy(cfgs[name], rho, float(settings["delta"]))
            ctx.record_privacy(f"{name}_rho_{rho:.6g}", spend)
    return both


EXPERIMENT = register(Experiment(
    name="paper_000",
    paper="000",
    description="Privacy budget tailoring (DPSE vs DPNoSE): two-group synthetic sweeps "
                "(Figs 2-4, 6), K-group tables (Tables 1-3)",
    configs={"quick": QUICK, "full": FULL},
    run=run,
))
