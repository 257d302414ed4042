"""Paper 002, sample-complexity exponents (``reductions_scaling``): Algorithm 1's exact n0 (Thm 5.2)
against Algorithm 2's analysis (Thm 5.5, Cor. 5.11) over alpha and K, with fitted exponents
(exact output laws from :mod:`.scaling`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import figures

#: How far a fitted exponent may sit from an O(.) statement's on a finite grid of cells (pre-asymptotic
#: curvature; the explicit Thm 3.6 bound's own exponents on the quick cells are 0.03-0.05 off (2, 1)).
EXPONENT_TOL = 0.1


def scaling_table(config: dict[str, Any]) -> pd.DataFrame:
    """One row per ``(K, alpha)``: Algorithm 1's exact ``n0`` (smallest ``n`` with success probability
    >= ``level``), its explicit sufficient ``n`` (Thm 3.6 + Cor. 4.2) and the ``n`` Algorithm 2's
    analysis needs at Thm 5.5's round count with the oracle's exact law (:mod:`.scaling`)."""
    from . import scaling as SC

    n_grid = np.geomspace(float(config["n_range"][0]), float(config["n_range"][1]), int(config["n_points"]))
    eps, delta, level = float(config["epsilon"]), float(config["delta"]), float(config["level"])
    rows = []
    for K in config["Ks"]:
        inst = SC.multitask_instance(int(K), int(config["num_decisions"]), noise_var=float(config["noise_var"]),
                                     slack=float(config["slack"]))
        for a in config["alphas"]:
            a1 = SC.alg1_n0(inst, float(a), eps, n_grid, level=level)
            a2 = SC.alg2_analysis_n0(inst, float(a), eps, delta, n_grid, level=level)
            rows.append({"K": int(K), "alpha": float(a), "inv_alpha": 1.0 / float(a), "G": a1["G"],
                         "n0_alg1": a1["n0"], "n0_alg1_bound": SC.alg1_bound_n0(inst, float(a), eps, level=level),
                         "successful_decisions": a1["successful_decisions"], "n0_alg2_analysis": a2["n0"],
                         "T_thm55": a2["T"], "tau": a2["tau"], "oracle_epsilon": a2["oracle_epsilon"]})
    return pd.DataFrame(rows)


def run_scaling(config: dict[str, Any], ctx: Any) -> pd.DataFrame:
    """Sample-complexity exponents of Thm 5.2 and Cor. 5.11 on the K-coordinate family (exact laws)."""
    from . import scaling as SC

    df = ctx.map_chunks([{"part": "scaling"}], lambda chunk: scaling_table(config), desc="scaling")
    ctx.save_table(df, "sample_complexity")
    pred = {"inv_alpha": "inv_alpha", "K": "K"}
    fits = {col: SC.fit_exponents(df, col, pred) for col in ("n0_alg1", "n0_alg1_bound", "n0_alg2_analysis",
                                                              "T_thm55")}
    ratio = df.assign(r=df.n0_alg2_analysis / df.n0_alg1)
    fits["ratio"] = SC.fit_exponents(ratio, "r", pred)
    short = lambda f: {k: v for k, v in f.items() if k in ("inv_alpha", "K")}  # noqa: E731
    ctx.log("exponents (1/alpha, K): " + "; ".join(
        f"{c} {f['inv_alpha']['exponent']:.3f}, {f['K']['exponent']:.3f}" for c, f in fits.items()))
    cells = f"K in {list(config['Ks'])}, alpha in {list(config['alphas'])}, epsilon = {config['epsilon']:g}"
    worst = float((df.n0_alg1 / df.n0_alg1_bound).max())
    ctx.add_claim("p002_thm52_sufficient_n",
                  "Thm 5.2 on a finite grid with its constants (Thm 3.6 + Cor. 4.2): n >= 2 (L_f + G) sqrt(K) "
                  "log(M/0.1)/(eps alpha) suffices for Alg. 1 to solve the CGOO with probability >= 0.9; the exact "
                  f"smallest n (output law, no Monte Carlo) is below it at every cell ({cells})",
                  measured={"max_n0_over_bound": worst, "cells": len(df)}, target="<= 1 at every cell",
                  passed=bool(worst <= 1.0), reason="a cell needs more than the explicit sufficient n: a coding "
                  "error in the exponential mechanism, its sensitivity or the success test")
    e1 = fits["n0_alg1"]
    ok1 = abs(e1["inv_alpha"]["exponent"] - 2.0) <= EXPONENT_TOL and abs(e1["K"]["exponent"] - 1.0) <= EXPONENT_TOL
    ctx.add_claim("p002_thm52_exponents",
                  "Thm 5.2: Algorithm 1's sample complexity grows as K/(eps alpha^2): exponents of the exact n0 "
                  f"fitted over {cells} (95% intervals of the least-squares fit)",
                  measured={"exact": short(e1), "explicit_bound": short(fits["n0_alg1_bound"])},
                  target=f"exponents within {EXPONENT_TOL} of (2, 1)", passed=bool(ok1),
                  reason="the exact n0 grows faster than K/alpha^2 on these cells")
    e2 = fits["n0_alg2_analysis"]
    ok2 = e2["inv_alpha"]["exponent"] <= 3.0 + EXPONENT_TOL and e2["K"]["exponent"] <= 4.0 + EXPONENT_TOL
    tfit = fits["T_thm55"]
    ctx.add_claim("p002_cor511_exponents",
                  "Cor. 5.11: Algorithm 2 (LOPT_{eps',0} by the exponential mechanism, T = O(K^4/alpha^2) rounds) "
                  "needs n0 = O~(K^4/(eps alpha^3)); measured: the n its analysis needs (Thm 5.5's tau and round "
                  "count T, the kit's per-round oracle budget, union bound over the T calls) with the oracle's exact "
                  f"law, exponents fitted over {cells}",
                  measured={"n0_exponents": short(e2), "T_exponents": short(tfit),
                            "T_range": [int(df.T_thm55.min()), int(df.T_thm55.max())]},
                  target=f"exponents at most (3, 4) + {EXPONENT_TOL}", passed=bool(ok2),
                  reason=(f"Thm 5.5's explicit round count T >= 36(1+K)K^2(1+G)^2(3+alpha)^2/alpha^2 grows as "
                          f"alpha^-{tfit['inv_alpha']['exponent']:.2f} (95% CI {tfit['inv_alpha']['ci'][0]:.2f}-"
                          f"{tfit['inv_alpha']['ci'][1]:.2f}; (1+G)^2 ~ K/alpha^2 times 1/alpha^2), not the "
                          "O(K^4/alpha^2) its proof states and Cor. 5.11 substitutes; with the explicit T the analysis "
                          f"needs alpha^-{e2['inv_alpha']['exponent']:.2f} (95% CI {e2['inv_alpha']['ci'][0]:.2f}-"
                          f"{e2['inv_alpha']['ci'][1]:.2f}), one power of 1/alpha more than alpha^-3"))
    low = float(ratio.r.min())
    ctx.add_claim("p002_reduction_cost",
                  "Sec. 5: the LOPT reduction (Algorithm 2) costs more samples than exponential sampling (Algorithm "
                  "1): the n Algorithm 2's analysis needs over Algorithm 1's exact n0, at every cell",
                  measured={"min_ratio": low, "ratio_exponents": short(fits["ratio"])},
                  target="ratio > 1 at every cell", passed=bool(low > 1.0),
                  reason="Algorithm 2's analysis needs fewer samples than Algorithm 1 at some cell")
    figures.scaling(df, ctx)
    return df
