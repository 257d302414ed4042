"""Paper 002 (Alabi): the cost of a reductions approach to private fair optimization.

The paper has no experiments; these studies check its algorithms and bounds numerically.

Registered experiments (``dpfair run NAME [--quick]``):

* ``reductions_synthetic_bgl``: private fair regression with a bounded group loss constraint on two
  synthetic groups (a small group with a different slope). Decisions are a public grid of linear
  predictors ``(w, b)``; per-example losses are clipped squared errors ``min(1, (pred - y)^2 / B)``
  (so loss vectors lie in ``[0,1]^K``, Lemma 5.1). ``f`` = population loss (sum of itemized group
  losses), ``g`` = bounded group loss with the worst-off group's mean loss capped halfway between
  its unconstrained value and its best value on the grid. Methods: Algorithm 1 (exponential
  sampling, pure eps), Algorithm 2 with the exponential-mechanism LOPT and privatized weights
  ((eps, delta)), non-private Frank-Wolfe (Alg. 3-4), and fairlearn's ExponentiatedGradient
  (non-private reference; skipped with a note when fairlearn is missing). Objective excess over
  the exact CGOO optimum (an LP over grid mixtures, SciPy) and constraint violation vs epsilon,
  all seeds x epsilons in one compiled program per method.
* ``reductions_law_bgl``: the same on Law school (race: white vs black; target zfya), decisions
  a grid over the LSAT and UGPA coefficients and the intercept.
* ``reductions_sample_complexity``: sample-complexity crossover (Cor. 8.9 reduction vs Jagielski
  et al.'s Cor. C.2) over alpha, |A| and r; and an empirical check of the lower-bound instance
  (Lemmas 6.3-6.4): the excess risk of the Gaussian (Laplace) mechanism on the hard instance scales
  as ``sqrt(K)/(eps n)`` (``K/(eps n)``). It also records the paper's findings as rows: Lemma 5.8
  audited on the printed Algorithm 2 (:func:`lemma58_audit`), Fig. 2's G-/H-mean formulas
  (:func:`figure2_check`) and Cor. B.5's round count (:func:`corollary_b5_check`).

* ``reductions_adult_eo`` / ``reductions_credit_eo``: equalized odds through the reduction
  (Cor. 8.9) over a grid of half-planes in two features: Algorithm 1 vs epsilon, non-private
  Frank-Wolfe, the exact LP optimum, and (``dpfermi=true``) DP-FERMI's EO variant.

Privacy: neighbouring datasets differ in one record (replace-one), which covers Def. 1.1
(changing one sensitive attribute). Every study first splits its (training) data at random into a
public split (``public_fraction`` of the rows, default 0.2) and a private split (the rest): the
split depends on the row count only, so the private ``n`` is public by construction (and fixed
under replace-one). Everything the private algorithms take besides the private loss matrix is
computed from the public split only: the bounded-group-loss thresholds ``eta``, the worst-group
index and the group proportions behind them (:func:`bgl_problem`), and, for equalized odds, the
cell proportions ``q_{a,y}`` that turn itemized counts into rates (and set the constraint's
Lipschitz constant). The private split never enters them, so the recorded epsilon is the
mechanism's own; ``privacy.json`` says so in its ``notes``. Diagnostics (objective excess over the
exact optimum, worst-group loss, the non-private references) read the private split and are not
released by the mechanisms.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from dpfair_jax.runner import Experiment, plots, register
from dpfair_jax.studies.bgl import bgl_problem, public_private_split
from dpfair_jax.studies.grids import candidate_grid, clipped_square_losses, halfplane_grid
from dpfair_jax.studies.tradeoff import tradeoff_study

from . import figures
from .config import CONFIGS

__all__ = ["bgl_study", "run_bgl", "run_sample_complexity", "scaling_table", "run_scaling", "eo_loss_vectors",
           "eo_exact_frame", "run_eo", "lemma58_audit", "figure2_check", "corollary_b5_check", "EXPERIMENTS"]

_INF = float("inf")


# ------------------------------------------------------------------------------------------------
# building blocks
# ------------------------------------------------------------------------------------------------
def _lp_optimum(L: np.ndarray, eta: np.ndarray) -> float:
    from scipy import optimize

    M = L.shape[0]
    res = optimize.linprog(L.sum(1), A_ub=L.T, b_ub=eta, A_eq=np.ones((1, M)), b_eq=[1.0], bounds=(0, 1),
                           method="highs")
    if res.status != 0:
        raise ValueError(f"the CGOO instance is infeasible over the grid's mixtures ({res.message}).")
    return float(res.fun)


def _fairlearn_row(x, y, s, bound, cap, K):
    """ExponentiatedGradient with BoundedGroupLoss (fairlearn; one cap ``cap * bound`` on every
    group's mean squared loss), evaluated with the study's clipped itemized losses."""
    from fairlearn.reductions import BoundedGroupLoss, ExponentiatedGradient, SquareLoss
    from sklearn.linear_model import LinearRegression

    import warnings

    lo, hi = float(np.min(y)), float(np.max(y))
    eg = ExponentiatedGradient(LinearRegression(), constraints=BoundedGroupLoss(SquareLoss(lo, hi),
                               upper_bound=float(cap) * bound), eps=0.01, max_iter=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fairlearn's pandas deprecation warnings
        eg.fit(np.asarray(x), np.asarray(y), sensitive_features=np.asarray(s))
    preds = np.stack([p.predict(np.asarray(x)) for p in eg.predictors_])
    w = np.asarray(eg.weights_, float)
    per = np.minimum(1.0, (preds - np.asarray(y)[None]) ** 2 / bound)
    onehot = np.eye(K)[np.asarray(s)]
    Lp = per @ onehot / len(y)
    return w @ Lp


def bgl_study(x, y, s, num_groups: int, cfg: dict, seed: int, log=print, *, public: tuple) -> tuple[pd.DataFrame, dict]:
    """Run the four methods on the private split ``(x, y, s)``; one row per (method, epsilon, seed).
    ``public = (x_pub, y_pub, s_pub)``: the held-out public split the thresholds come from.
    Returns (frame, facts)."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax import montecarlo as MC
    from dpfair_jax.algorithms import reductions as R

    K = num_groups
    x = np.asarray(x, np.float32)
    y = np.asarray(y, np.float32)
    s = np.asarray(s, np.int32)
    n = len(y)  # public by construction (public_private_split)
    cands = candidate_grid(x.shape[1], cfg["grid_per_axis"], cfg["grid_radius"], cfg["intercepts"])
    per = clipped_square_losses(cands, x, y, cfg["loss_bound"])
    L = np.asarray(R.group_losses(per, s, K), np.float32)
    sizes = np.bincount(s, minlength=K).astype(float)  # private: diagnostics only
    xp, yp, sp = (np.asarray(a) for a in public)
    sp = sp.astype(np.int32)
    L_pub = np.asarray(R.group_losses(clipped_square_losses(cands, xp, yp, cfg["loss_bound"]), sp, K), np.float64)
    sizes_pub = np.bincount(sp, minlength=K).astype(float)
    prob, eta, worst, tau = bgl_problem(L_pub, sizes_pub, cfg["slack"], cfg["temperature"])
    f_star = _lp_optimum(L.astype(np.float64), eta.astype(np.float64))
    alpha = float(cfg["alpha"])
    G = R.penalty_weight(alpha, K, prob.f.lipschitz)
    hvals = np.asarray(jax.vmap(lambda l: R.penalized(prob, l, G))(jnp.asarray(L)))
    eps = [float(e) for e in cfg["epsilons"]]
    delta, T = float(cfg["delta"]), int(cfg["steps"])
    budgets = [R.algorithm2_budget(e, delta, T, n=n, num_groups=K) for e in eps]
    oe = jnp.asarray([b.oracle_epsilon for b in budgets], jnp.float32)
    ls = jnp.asarray([b.laplace_scale for b in budgets], jnp.float32)
    ej = jnp.asarray(eps, jnp.float32)
    Lj = jnp.asarray(L)

    def trial(key):
        k1, k2 = jax.random.split(key)
        idx = jax.vmap(lambda k, e: R.exponential_sampling(k, Lj, prob, G=G, epsilon=e, n=n))(
            jax.random.split(k1, len(eps)), ej)
        a2 = jax.vmap(lambda k, o, sc: R.private_cgoo(k, Lj, prob, G=G, steps=T, oracle_epsilon=o,
                                                      laplace_scale=sc, n=n, smoothing=cfg["penalty_smoothing"]).loss)(
            jax.random.split(k2, len(eps)), oe, ls)
        return {"alg1": Lj[idx], "alg1_index": idx, "alg2": a2}

    out = MC.run_trials(trial, jax.random.key(seed), int(cfg["seeds"]))
    rows = []

    def add(method, e, seed_id, l):
        l = np.asarray(l, np.float64)
        fval = float(l.sum())
        gval = float(np.max(l - eta))
        h = fval + G * max(0.0, gval)
        rows.append({"method": method, "epsilon": e, "seed": seed_id, "objective": fval,
                     "excess": fval - f_star, "constraint": gval, "violation": max(0.0, gval),
                     "h": h, "worst_group_loss": float(l[worst] * n / sizes[worst])})

    A1, A2, A1i = np.asarray(out["alg1"]), np.asarray(out["alg2"]), np.asarray(out["alg1_index"])
    for t in range(A1.shape[0]):
        for j, e in enumerate(eps):
            add("exp_sampling", e, t, A1[t, j])
            rows[-1]["h_grid_excess"] = float(hvals[A1i[t, j]] - hvals.min())  # Thm 3.6's quantity
            add("lopt_alg2", e, t, A2[t, j])
    fw = R.frank_wolfe(Lj, prob, G=G, steps=int(cfg["fw_steps"]), smoothing=cfg["penalty_smoothing"])
    add("frank_wolfe", _INF, 0, fw.loss)
    hinge = {}  # the paper's hinge penalty G max(0, g) (no smoothing): excess at T/10, T/3 and T
    for T_h in sorted({max(3, int(cfg["fw_steps"]) // 10), max(3, int(cfg["fw_steps"]) // 3), int(cfg["fw_steps"])}):
        lh = np.asarray(R.frank_wolfe(Lj, prob, G=G, steps=T_h).loss, np.float64)
        hinge[T_h] = {"excess": float(lh.sum() - f_star), "constraint": float(np.max(lh - eta))}
    note = None
    try:
        if not cfg.get("fairlearn", True):
            raise ImportError("disabled by config (fairlearn=false)")
        lfl = _fairlearn_row(x, y, s, cfg["loss_bound"], tau[worst], K)
        add("fairlearn_eg", _INF, 0, lfl)
    except ImportError as err:
        note = f"fairlearn unavailable ({err}); its row is skipped"
        log(note)
    df = pd.DataFrame(rows)
    # Algorithm 1's exact output law at every epsilon (its claims read these, not the Monte Carlo rows)
    from dpfair_jax.analysis import sample_complexity as S
    from . import scaling as SC

    probs = SC.alg1_probs(L, prob, G, n, eps)  # [E, M]
    sens = float(R.h_sensitivity(prob, n, G))
    alg1_exact = {}
    for j, e in enumerate(eps):
        bound = 2.0 * sens * math.log(len(cands) / 0.1) / e  # Thm 3.6, rho = 0.1
        alg1_exact[e] = {"p_within_thm36": float(probs[j] @ (hvals - hvals.min() <= bound)),
                         "expected_h": float(probs[j] @ hvals.astype(np.float64))}
    facts_t55 = S.theorem55_parameters(K, alpha, G=G)
    facts = {"n": n, "n_public": len(sp), "K": K, "M": len(cands), "G": G, "alpha": alpha, "f_star": f_star,
             "alg1_exact": alg1_exact, "theorem55_T": int(facts_t55["T"]), "steps": T,
             "eta": eta.tolist(), "worst_group": worst, "pi_public": (sizes_pub / sizes_pub.sum()).tolist(),
             "h_min_grid": float(hvals.min()), "h_sens": R.h_sensitivity(prob, n, G),
             "ledger": {e: R.algorithm2_ledger(b) for e, b in zip(eps, budgets)},
             "budgets": {e: b._asdict() for e, b in zip(eps, budgets)}, "delta": delta, "fairlearn_note": note,
             "fw_hinge": hinge}
    return df, facts


def alg2_ledger_check(target_epsilon: float, delta: float, budget: dict, ledger: dict, *, n: int,
                      num_groups: int) -> dict[str, Any]:
    """Algorithm 2's ledger against Lemma A.4 (paper 002; Dwork, Rothblum, Vadhan 2010) written out
    here, not through :mod:`dpfair_jax.algorithms.reductions.theory`.

    Per round the run spends the oracle's ``eps_o`` (the EM of ``private_cgoo``) and the Laplace
    release of the loss vector (l1 sensitivity ``K/n`` at scale ``b``: ``eps_w = (K/n)/b``), so
    ``eps' = eps_o + eps_w``; ``T`` adaptive rounds with pure oracles (``delta' = 0``) and slack
    ``delta_bar = delta`` are ``(eps' sqrt(2T log(1/delta_bar)) + T eps'(e^eps' - 1), T delta' +
    delta_bar)``-DP. Returns the errors of ``ledger`` against that, ``hand / target`` and
    ``passed``."""
    T = int(budget["steps"])
    eps_w = (num_groups / n) / float(budget["laplace_scale"])
    e1 = float(budget["oracle_epsilon"]) + eps_w
    d1, dbar = float(budget["oracle_delta"]), float(delta)
    hand_eps = e1 * math.sqrt(2.0 * T * math.log(1.0 / dbar)) + T * e1 * math.expm1(e1)
    hand_delta = T * d1 + dbar
    rel = abs(float(ledger["epsilon"]) - hand_eps) / hand_eps
    dd = abs(float(ledger["delta"]) - hand_delta)
    ratio = hand_eps / float(target_epsilon)
    return {"epsilon_hand": hand_eps, "delta_hand": hand_delta, "rel_err_epsilon": rel, "abs_err_delta": dd,
            "hand_over_target": ratio, "passed": bool(rel <= 1e-9 and dd <= 1e-15 and ratio <= 1.0 + 1e-9)}


def crossover_check(rs: list[float]) -> dict[str, Any]:
    """Sec. 8's crossover from the two sample complexities written out here.

    Over a grid of ``|A|`` (2..200), ``alpha`` (1e-3..0.5), VC dimension and epsilon:
    ``jagielski_n0 / eo_reduction_n0`` (Cor. C.2 over Cor. 8.9) must equal ``alpha^-r / |A|``
    (hand-written), so must ``jagielski_over_reduction``, and the ratio must exceed 1 exactly where
    ``|A| < crossover_num_groups(alpha, r)`` (points on the boundary excluded)."""
    from dpfair_jax.analysis import sample_complexity as S

    A, a, vc, e = (g.ravel() for g in np.meshgrid(np.arange(2, 201, dtype=np.float64), np.geomspace(1e-3, 0.5, 25),
                                                  [1.0, 7.5], [0.3, 2.0], indexing="ij"))
    worst_rel, disagree, points = 0.0, 0, 0
    for r in rs:
        hand = a ** (-float(r)) / A
        ratio = S.jagielski_n0(A, vc, e, a, r) / S.eo_reduction_n0(A, vc, e, a)
        helper = S.jagielski_over_reduction(A, a, r)
        worst_rel = max(worst_rel, float(np.max(np.abs(ratio - hand) / hand)),
                        float(np.max(np.abs(helper - hand) / hand)))
        cross = S.crossover_num_groups(a, r)
        off = np.abs(A - cross) > 1e-9 * cross
        disagree += int(np.sum((ratio > 1.0)[off] != (A < cross)[off]))
        points += int(off.sum())
    return {"max_rel_err": worst_rel, "sign_disagreements": disagree, "points": points,
            "passed": bool(worst_rel <= 1e-9 and disagree == 0)}


def _claims_bgl(df: pd.DataFrame, facts: dict, cfg: dict, ctx, prefix: str) -> None:
    rho = 0.1
    eps = [float(e) for e in cfg["epsilons"]]
    exact = {float(k): v for k, v in facts["alg1_exact"].items()}
    probs = {f"{e:g}": exact[e]["p_within_thm36"] for e in eps}
    ctx.add_claim(f"{prefix}_alg1_em_utility",
                  "Algorithm 1's excess h over the grid minimum is within 2 Delta_h log(M/rho)/eps "
                  f"with probability >= 1 - rho (Thm 3.6, rho = {rho}) at every epsilon; exact probabilities "
                  "from the output law (softmax over the grid), no Monte Carlo",
                  measured=probs, target=f">= {1 - rho}", passed=bool(min(probs.values()) >= 1 - rho),
                  reason=WHY_NOT["alg1_em_utility"])
    a1 = pd.Series({e: exact[e]["expected_h"] for e in sorted(eps)})
    statement = ("Algorithm 1's expected penalized objective h (exact, under its output law) decreases from the "
                 "smallest to the largest epsilon")
    if len(a1) < 2:
        ctx.skip_claim(f"{prefix}_alg1_improves_with_epsilon", statement,
                       f"needs two epsilons, the config has {len(a1)}", target="h(max eps) < h(min eps)")
    else:
        ctx.add_claim(f"{prefix}_alg1_improves_with_epsilon", statement,
                      measured={"h_at_min_eps": float(a1.iloc[0]), "h_at_max_eps": float(a1.iloc[-1])},
                      target="h(max eps) < h(min eps)", passed=bool(a1.iloc[-1] < a1.iloc[0]),
                      reason=WHY_NOT["alg1_improves_with_epsilon"])
    fw = df[df.method == "frank_wolfe"].iloc[0]
    alpha = facts["alpha"]
    ctx.add_claim(f"{prefix}_frank_wolfe_cgoo",
                  "Non-private Frank-Wolfe (Alg. 3-4 with G of Cor. 4.2) solves the CGOO: objective within "
                  "alpha of the exact LP optimum and constraint <= alpha",
                  measured={"excess": float(fw.excess), "constraint": float(fw.constraint)},
                  target=f"excess <= {alpha}, constraint <= {alpha}",
                  passed=bool(fw.excess <= alpha and fw.constraint <= alpha), reason=WHY_NOT["frank_wolfe_cgoo"])
    hinge = {int(k): v for k, v in facts["fw_hinge"].items()}
    Ts = sorted(hinge)
    first, last = hinge[Ts[0]]["excess"], hinge[Ts[-1]]["excess"]
    falls = last < 0.5 * first  # Lemma B.4's log(T)/T falls by > 4x from T/10 to T
    ctx.add_claim(f"{prefix}_frank_wolfe_hinge",
                  "Lemma B.4 / Cor. B.5 on the reduction's own penalty h = f + G max(0, g) (Cor. 4.2's hinge, no "
                  "smoothing): Frank-Wolfe's objective excess over the exact LP optimum falls with T like log(T)/T; "
                  f"measured at T = {Ts} (deterministic: no sampling, the interval is the point)",
                  measured={"hinge": {str(t): hinge[t] for t in Ts}, "smoothed_excess_at_T": float(fw.excess),
                            "lemma_b4_rate_ratio": math.log(Ts[-1]) / Ts[-1] / (math.log(Ts[0]) / Ts[0])},
                  target="excess at the largest T below half the excess at the smallest", passed=bool(falls),
                  reason=(f"Frank-Wolfe stalls at the hinge's kink: excess {first:.4f} at T = {Ts[0]} and {last:.4f} "
                          f"at T = {Ts[-1]} (Lemma B.4 needs a smooth h; the hinge is not), against "
                          f"{float(fw.excess):.4f} with the softplus-smoothed penalty the experiments use"))
    checks = [alg2_ledger_check(e, facts["delta"], facts["budgets"][e], facts["ledger"][e], n=facts["n"],
                                num_groups=facts["K"]) for e in eps]
    ctx.add_check(f"{prefix}_alg2_ledger",
                  "Algorithm 2's ledger (algorithm2_ledger) equals Lemma A.4 written out by hand, eps' sqrt(2T "
                  "log(1/delta_bar)) + T eps'(e^eps' - 1) and T delta' + delta_bar, for the per-round budget the "
                  "run uses (oracle epsilon plus the Laplace weight release's (K/n)/scale), and is at most the "
                  "target epsilon, at every epsilon",
                  measured={"max_rel_err_epsilon": max(c["rel_err_epsilon"] for c in checks),
                            "max_abs_err_delta": max(c["abs_err_delta"] for c in checks),
                            "max_hand_over_target": max(c["hand_over_target"] for c in checks)},
                  target="relative error <= 1e-9, delta error <= 1e-15, hand / target <= 1 + 1e-9",
                  passed=all(c["passed"] for c in checks))
    a2 = df[df.method == "lopt_alg2"].groupby("epsilon")["h"]
    a2_mean, a2_se = a2.mean(), a2.std(ddof=1) / np.sqrt(a2.count())
    diffs = {f"{e:g}": ctx.comparison(exact[e]["expected_h"], float(a2_mean.loc[e]),
                                      ci=(exact[e]["expected_h"] - float(a2_mean.loc[e]) - 1.96 * float(a2_se.loc[e]),
                                          exact[e]["expected_h"] - float(a2_mean.loc[e]) + 1.96 * float(a2_se.loc[e])),
                                      names=("alg1_exact_E_h", "alg2_mean_h"))
             for e in eps}
    better = int(sum(d["ci"][1] < 0 for d in diffs.values()))
    ctx.add_claim(f"{prefix}_alg1_vs_alg2",
                  "Exponential sampling (n0 = O(KP/(eps alpha^2))) reaches lower expected h than the LOPT-based "
                  f"Algorithm 2 (n0 = O~(K^4 P/(eps alpha^3))) at most epsilons (Sec. 5); Alg. 1 exact, Alg. 2 at "
                  f"T = {facts['steps']} rounds over the seeds (95% interval of the difference; the analysis's round "
                  f"count, Thm 5.5's T = {facts['theorem55_T']:.3g}, cannot be run)",
                  measured={"epsilons_alg1_better": better, "of": len(eps), "differences": diffs},
                  target=">= half (difference's interval below 0)", passed=bool(better >= len(eps) / 2),
                  reason=WHY_NOT["alg1_vs_alg2"])


#: Why each claim does not hold when it does not (recorded with the claim; see the page).
WHY_NOT = {
    "alg1_em_utility": ("Algorithm 1's exact probability of exceeding Thm 3.6's bound is above rho: a coding "
                        "error in the exponential mechanism or its sensitivity"),
    "alg1_improves_with_epsilon": ("the expected objective does not fall with epsilon: a coding error in the "
                                   "mechanism (the exact expectation of h is non-increasing in epsilon)"),
    "frank_wolfe_cgoo": "Frank-Wolfe did not reach alpha of the LP optimum in fw_steps iterations",
    "alg1_vs_alg2": ("Algorithm 2 beats exponential sampling at most epsilons: the sample complexities of Sec. 5 "
                     "are orders (constants hidden), so at this n the ordering need not show"),
    "lower_bound_instance": ("the fitted slopes are off the rates of Thm 6.1-6.2 by more than 0.1, or the worst "
                             "case sits at the edge of the norm grid (the grid is too narrow)"),
    "cgoo_guarantee": ("the O(.) of Thm 5.2 / Cor. 8.9 hides constants that matter at this n: the guarantee "
                       "holds on Credit at eps = 30 and fails on Adult, whose private split is smaller"),
    "eo_frank_wolfe": "Frank-Wolfe on the smoothed EO problem did not reach alpha in fw_steps iterations",
}


def _skip_bgl(ctx, prefix: str, reason: str) -> None:
    """The bounded-group-loss study's claims and ledger check, skipped with ``reason``."""
    for suffix, statement in (("alg1_em_utility", "Algorithm 1's excess h over the grid minimum is within "
                               "2 Delta_h log(M/rho)/eps with probability >= 1 - rho (Thm 3.6)"),
                              ("alg1_improves_with_epsilon", "Algorithm 1's mean penalized objective h decreases "
                               "from the smallest to the largest epsilon"),
                              ("frank_wolfe_cgoo", "Non-private Frank-Wolfe solves the CGOO within alpha"),
                              ("frank_wolfe_hinge", "Lemma B.4 / Cor. B.5 on the hinge penalty: Frank-Wolfe's "
                               "objective excess falls with T"),
                              ("alg1_vs_alg2", "Exponential sampling reaches lower mean h than Algorithm 2 at most "
                               "epsilons (Sec. 5)")):
        ctx.skip_claim(f"{prefix}_{suffix}", statement, reason)
    ctx.skip_claim(f"{prefix}_alg2_ledger", "Algorithm 2's ledger equals Lemma A.4 written out by hand", reason,
                   kind="formula")


def run_bgl(config: dict[str, Any], ctx: Any) -> pd.DataFrame:
    """Bounded group loss study (synthetic or Law school); see the module docstring."""
    import jax

    from dpfair_jax import data as D

    name = config["dataset"]
    if name == "synthetic":
        from dpfair_jax.data import synthetic

        syn = synthetic.ols_mixture(jax.random.key(ctx.seed), tuple(config["group_sizes"]), config["slopes"],
                                    config["noise_sd"], dim=1, intercepts=config["group_intercepts"])
        x, y, s, K = syn.data.x, syn.data.y, syn.data.s, syn.data.num_groups
    else:
        try:
            train, _ = D.load(name, groups=config["groups"], target=config["target"], seed=ctx.seed)
        except (ImportError, FileNotFoundError) as err:
            reason = f"{name} unavailable ({type(err).__name__}: {err})"
            ctx.log(f"{reason}; study skipped.")
            _skip_bgl(ctx, config["claim_prefix"], reason)
            return pd.DataFrame()
        cols = [train.info.feature_names.index(c) for c in config["features"]]
        x, y, s, K = np.asarray(train.x)[:, cols], np.asarray(train.y), np.asarray(train.s), train.num_groups
    x, y, s = np.asarray(x), np.asarray(y), np.asarray(s)
    priv, pub = public_private_split(len(y), config["public_fraction"], ctx.seed)
    public = (x[pub], y[pub], s[pub])
    x, y, s = x[priv], y[priv], s[priv]

    def compute(chunk: dict) -> pd.DataFrame:
        df, facts = bgl_study(x, y, s, K, config, ctx.seed + chunk["block"], log=ctx.log, public=public)
        compute.facts = facts
        return df

    compute.facts = None
    df = ctx.map_chunks([{"block": 0}], compute, desc="bgl")
    if compute.facts is None:  # resumed from saved chunks: the facts are deterministic, recompute them cheaply
        _, compute.facts = bgl_study(x, y, s, K, dict(config, seeds=1), ctx.seed, log=ctx.log, public=public)
    facts = compute.facts
    ctx.log(f"n={facts['n']} (public split {facts['n_public']}) K={facts['K']} grid M={facts['M']} "
            f"G={facts['G']:.3g} f*={facts['f_star']:.4f}")
    _claims_bgl(df, facts, config, ctx, config["claim_prefix"])
    note = (f"thresholds eta, worst group ({facts['worst_group']}) and group proportions from a held-out public "
            f"split ({facts['n_public']} rows, fraction {config['public_fraction']:g}, disjoint from the private "
            f"n={facts['n']}; random split of the row indices); n public by construction (replace-one; a record "
            "may move to another group: the group losses divide by the total n, no group size)")
    for e, led in facts["ledger"].items():
        ctx.record_privacy(f"lopt_alg2_eps{e:g}", {"relation": "replace_one", "epsilon": led["epsilon"],
                                                  "delta": led["delta"], "unit": "example",
                                                  "notes": note + "; loss vectors read by line 10 released "
                                                  "with Laplace noise and charged (advanced composition)"})
        ctx.record_privacy(f"exp_sampling_eps{e:g}", {"relation": "replace_one", "epsilon": e, "delta": 0.0,
                                                     "unit": "example", "notes": note})
    figures.bgl(df, ctx, config["title"])
    return df


# ------------------------------------------------------------------------------------------------
# sample complexity: crossover and the lower-bound instance
# ------------------------------------------------------------------------------------------------
#: Public grid of instance norms ||sum_i x_i|| of the lower-bound family (the same for every K and
#: epsilon; never set from a mechanism's noise scale): 10^0 .. 10^6, 16 points per decade.
LOWER_BOUND_NORMS = np.geomspace(1.0, 1e6, 97)


def _lower_bound_mc(Ks, epsilons, n, trials, delta, seed, mechanism, norms=None):
    """Worst-case excess risk of the Gaussian (Laplace) mechanism over the hard instances of
    Lemmas 6.3-6.4.

    Instance: ``f(c) = -(1/n) sum_i <c, x_i>`` on the unit sphere with ``sum_i x_i = M e_1``; the
    mechanism releases ``sum_i x_i`` plus noise (replace-one sensitivity 2 in l2: classical Gaussian
    calibration; ``2 sqrt(K)`` in l1 over ``B_2^K``: Laplace ``2 sqrt(K)/eps`` per coordinate) and
    outputs its direction ``c``; the excess is ``M/(2n) ||c - e_1||^2``. For each ``(K, eps)`` the
    mean excess over ``trials`` draws is measured at every norm ``M`` of ``norms`` (default
    :data:`LOWER_BOUND_NORMS`, common noise draws across ``M``) and the worst case over ``M`` is
    reported (``excess``, its ``se``, ``worst_norm``; ``at_grid_edge`` when the worst case sits on
    the grid's boundary, i.e. the grid missed it). The worst-case ``M`` is found by the sweep, not
    set from the noise scale, so the scaling of ``excess`` in ``K`` and ``eps`` is measured."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.privacy import accounting as acc

    grid = np.asarray(LOWER_BOUND_NORMS if norms is None else norms, np.float64)
    if grid.ndim != 1 or grid.size < 3 or np.any(grid <= 0) or np.any(np.diff(grid) <= 0):
        raise ValueError("norms must be an increasing 1-D grid of at least 3 positive instance norms.")

    @jax.jit
    def excess_curve(noise):  # [trials, K] -> mean and std of the excess at every norm
        def at(m):
            noisy = noise.at[:, 0].add(m)
            c = noisy / jnp.linalg.norm(noisy, axis=1, keepdims=True)
            ex = m / (2.0 * n) * (jnp.sum(c[:, 1:] ** 2, axis=1) + (c[:, 0] - 1.0) ** 2)
            return jnp.mean(ex), jnp.std(ex)

        return jax.lax.map(at, jnp.asarray(grid, jnp.float32))

    rows = []
    for K in Ks:
        for e in epsilons:
            if mechanism == "gaussian":
                scale = acc.classical_gaussian_sigma(e, delta, sensitivity=2.0)  # eps < 1
                noise_norm = scale * math.sqrt(K)
            else:
                scale = 2.0 * math.sqrt(K) / e
                noise_norm = scale * math.sqrt(2.0 * K)
            key = jax.random.fold_in(jax.random.key(seed), K * 1000 + int(round(e * 100)))
            z = (jax.random.normal if mechanism == "gaussian" else jax.random.laplace)(key, (trials, K))
            mean, std = (np.asarray(v, np.float64) for v in excess_curve(scale * z))
            i = int(np.argmax(mean))
            rows.append({"mechanism": mechanism, "K": K, "epsilon": e, "n": n, "excess": float(mean[i]),
                         "se": float(std[i] / math.sqrt(trials)), "worst_norm": float(grid[i]),
                         "noise_norm": noise_norm, "at_grid_edge": bool(i in (0, grid.size - 1))})
    return pd.DataFrame(rows)


def run_sample_complexity(config: dict[str, Any], ctx: Any) -> pd.DataFrame:
    """Crossover plots and the lower-bound scaling check (module docstring)."""
    from dpfair_jax.analysis import sample_complexity as S
    alphas = np.geomspace(1e-3, 0.5, 60)
    A, vc, e = 2, 1.0, 1.0
    fig, axes = plots.new_figure(2, 1, panel_size=(4.2, 3.2))
    ax = axes[0]
    ax.loglog(alphas, S.eo_reduction_n0(A, vc, e, alphas), label="reduction (Cor. 8.9) |A|^4 VC/(eps a^3)")
    for r in config["rs"]:
        ax.loglog(alphas, S.jagielski_n0(A, vc, e, alphas, r), "--", label=f"Jagielski et al. r={r}")
    ax.loglog(alphas, S.lower_bound_n_approx(3 * A, e, alphas), ":", label="lower bound sqrt(K)/(eps a)")
    ax.set_xlabel("alpha")
    ax.set_ylabel("n_0 (constants 1, logs omitted)")
    ax.set_title(f"|A|={A}, VC={vc:g}, eps={e:g}")
    ax.legend(fontsize=6)
    ax = axes[1]
    groups = np.arange(2, 200)
    for r in config["rs"]:
        ax.loglog(groups, S.jagielski_over_reduction(groups, 0.01, r), label=f"r={r}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("|A|")
    ax.set_ylabel("n_0 Jagielski / n_0 reduction")
    ax.set_title("alpha = 0.01: reduction better above 1")
    ax.legend(fontsize=6)
    ctx.save_figure(fig, "crossover")
    chk = crossover_check(config["rs"])
    ctx.add_check("p002_crossover",
                  "Sec. 8: n0 of Jagielski et al. (Cor. C.2) over n0 of the reduction (Cor. 8.9) equals alpha^-r/|A| "
                  "(written out by hand; jagielski_over_reduction too) and exceeds 1 exactly where |A| < "
                  "crossover_num_groups(alpha, r), over |A| in 2..200, alpha in [1e-3, 0.5], two VC dimensions and "
                  f"two epsilons, r in {list(config['rs'])}",
                  measured={k: v for k, v in chk.items() if k != "passed"},
                  target="relative error <= 1e-9, no sign disagreement", passed=chk["passed"])

    frames = []
    for mech in ("gaussian", "laplace"):
        frames.append(_lower_bound_mc(config["Ks"], config["epsilons"], config["n"], config["trials"],
                                      config["delta"], ctx.seed, mech))
    lb = pd.concat(frames, ignore_index=True)
    ctx.save_table(lb, "lower_bound_instance")
    for mech, want_k in (("gaussian", 0.5), ("laplace", 1.0)):
        sub = lb[lb.mechanism == mech]
        slope_k = np.mean([np.polyfit(np.log(g.K), np.log(g.excess), 1)[0] for _, g in sub.groupby("epsilon")])
        slope_e = np.mean([np.polyfit(np.log(g.epsilon), np.log(g.excess), 1)[0] for _, g in sub.groupby("K")])
        edge = int(sub["at_grid_edge"].sum())
        ok = abs(slope_k - want_k) <= 0.1 and abs(slope_e + 1.0) <= 0.1 and edge == 0
        bound = "sqrt(K)/(eps n)" if mech == "gaussian" else "K/(eps n)"
        ctx.add_check(f"p002_lower_bound_instance_{mech}",
                      f"Formula consistency (not a test of the lower bound itself, which holds for every "
                      f"mechanism): on the hard instances of Lemmas 6.3-6.4, the {mech} mechanism's worst-case "
                      f"excess risk "
                      f"over a public grid of instance norms ||sum x|| (10^0..10^6, not set from the noise) "
                      f"scales as {bound} (Thm 6.{2 if mech == 'gaussian' else 1})",
                      measured={"slope_log_K": float(slope_k), "slope_log_eps": float(slope_e),
                                "worst_at_grid_edge": edge},
                      target=f"slope_K = {want_k} +- 0.1, slope_eps = -1 +- 0.1, no worst case at the grid edge",
                      passed=bool(ok), reason=WHY_NOT["lower_bound_instance"])
    lb["K_label"] = lb["K"].astype(str)
    fig = plots.tradeoff(lb, "epsilon", "excess", hue="K_label", panel="mechanism", band=None, logx=True, logy=True,
                         xlabel="epsilon", ylabel="excess risk f(c) - f(c*)", title="lower-bound instance")
    ctx.save_figure(fig, "lower_bound_instance")
    _finding_rows(config, ctx)
    return lb



# ------------------------------------------------------------------------------------------------
# findings: Lemma 5.8 (printed Algorithm 2 audited), Fig. 2's means, Cor. B.5's T, the hinge
# ------------------------------------------------------------------------------------------------
#: The Lemma 5.8 audit instance: itemized group losses ``[M = 2, K = 2]`` of two decisions, ``A``
#: (group 1 at the public threshold) and ``C`` (good for group 0, bad for group 1). One record of
#: group 1 with loss 0 under both decisions (``D0``) or 1 under both (``D1``) moves group 1's loss
#: by ``1/n``; the public threshold sits half a record above ``A``'s group-1 loss in ``D0``, so the
#: indicator ``1[g(ell(A, D)) >= 0]`` of line 10 is off in ``D0`` and on in ``D1``.
LEMMA58_LOSSES = np.array([[0.30, 0.20], [0.05, 0.45]])

#: Sizes of the Lemma 5.8 audit (``config["lemma58"]`` overrides): trials per world, rounds ``T``,
#: private ``n``, and whether to audit the kit's corrected Algorithm 2 on the same pair as a control.
LEMMA58_DEFAULTS = {"trials": 1000, "steps": 10, "n": 2000, "control": False}


def lemma58_audit(*, epsilon: float = 1.0, delta: float = 1e-6, steps: int = 10, n: int = 2000,
                  trials: int = 2000, seed: int = 0, variant: str = "paper") -> dict[str, Any]:
    """Audit Algorithm 2 as printed (``PrivateCGOOConfig(variant="paper")``: line 10 reads the
    private losses without noise) against Lemma 5.8's claim, through the public audit entry point
    (:class:`~dpfair_jax.audit.FitSpendGame` on ``reductions.fit``, :func:`~dpfair_jax.audit.audit_mechanism`).

    Instance :data:`LEMMA58_LOSSES`, ``f = sum``, ``g(l) = l_1 - eta_1`` (a bounded group loss on
    group 1, ``eta`` public), ``init_index = 0`` (``A``). The run uses the paper's per-round budget
    ``eps' = epsilon / (2 sqrt(2 T log(1/delta)))`` (lines 4-5, pure LOPT) and the claim is the
    paper's ``(epsilon, delta)``. Statistic: the number of rounds that pick ``A`` (the weight
    ``grad f + 1[g >= 0] grad g`` turns toward ``A`` once the indicator is on, which one record
    decides). ``variant="corrected"`` runs the kit's default (Laplace-released losses, the budget of
    ``reductions.calibrate``) on the same pair as a control. Returns the audit row plus the claim's
    ``paper_epsilon`` and the ledger's ``spend_epsilon`` (``inf`` for the printed algorithm)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from dpfair_jax.algorithms import reductions as R
    from dpfair_jax.audit import FitSpendGame, audit_mechanism

    K, L0 = 2, jnp.asarray(LEMMA58_LOSSES, jnp.float32)
    eta1 = float(LEMMA58_LOSSES[0, 1]) + 0.5 / n
    prob = R.CGOO(R.sum_objective(K), R.GroupFunction(lambda l: l[..., 1] - eta1, 1.0, 0.0, "group1_loss"), K)
    G = 1.0
    canary = jnp.asarray([[0.0, 1.0], [0.0, 1.0]], jnp.float32) / n
    config = R.PrivateCGOOConfig(problem=prob, steps=int(steps), delta=float(delta), point="last", init_index=0)
    if variant == "paper":
        b = R.algorithm2_budget(epsilon, delta, steps, n=n, num_groups=K, privatize_weights=False, variant="paper")
        config = dataclasses.replace(config, variant="paper")
        hp = R.PrivateCGOOHparams(G=G, oracle_epsilon=float(b.oracle_epsilon), laplace_scale=0.0)
        paper_eps = float(epsilon)  # Lemma 5.8's claim (the ledger's oracle-only figure is below it)
    else:
        hp = R.calibrate(config, n, (epsilon, delta), hparams=R.PrivateCGOOHparams(G=G))
        paper_eps = float(R.spend(config, n, hp).epsilon)
    game = FitSpendGame(algorithm=R, config=config, hparams=hp,
                        neighbours=lambda flag: R.GridData(L0 + flag.astype(jnp.float32) * canary, n),
                        statistic=lambda res: jnp.sum(res.params[0] == 0).astype(jnp.float32),
                        sizes=(n, n), relation="replace_one", claimed_epsilon=paper_eps)
    fn, info = game.build()
    row = audit_mechanism(fn, jax.random.key(seed), mechanism=f"algorithm2_{variant}", claimed_epsilon=paper_eps,
                          delta=float(info["delta"]), num_trials=int(trials))
    row.update(paper_epsilon=paper_eps, spend_epsilon=float(info["spend_epsilon"]), steps=int(steps), n=int(n),
               oracle_epsilon=float(hp.oracle_epsilon))
    return row


def figure2_check(classes: tuple[int, ...] = (2, 3, 4, 5, 6)) -> dict[str, Any]:
    """Sec. 8.1's G-mean and H-mean formulas (as printed; :func:`figure2_means`) on Figure 2's two
    families of confusion matrices: uniform (a) and row-major geometric with ratio 1/3 (b).
    The figure's text says H-mean > G-mean in both panels; returns the values, ``h_minus_g`` per
    panel and ``contradicts`` (the formulas never give H-mean > G-mean on these classes)."""
    from dpfair_jax.algorithms import reductions as R

    out: dict[str, Any] = {"classes": list(classes)}
    for panel, w in (("a_uniform", "uniform"), ("b_geometric", "geometric")):
        vals = [R.figure2_means(L, w) for L in classes]
        out[panel] = {"g_mean": [v["g_mean"] for v in vals], "h_mean": [v["h_mean"] for v in vals],
                      "h_minus_g": [v["h_mean"] - v["g_mean"] for v in vals]}
    worst = max(max(out[p]["h_minus_g"]) for p in ("a_uniform", "b_geometric"))
    out["max_h_minus_g"] = worst
    out["contradicts"] = bool(worst <= 1e-6)  # float32 ties in panel (a)
    return out


def corollary_b5_check(cs: tuple[float, ...] = (12.0, 100.0, 1.0e4)) -> dict[str, Any]:
    """Cor. B.5's round count ``T = c log c`` (``c = 2K(beta_f + G beta_g)/alpha``) against Lemma
    B.4's bound ``alpha c log(T)/T``: ``bound_over_alpha = c log(T)/T`` at the printed ``T`` (it must
    be <= 1 for the corollary to follow) and the smallest ``T`` that makes it so (Lambert W)."""
    from dpfair_jax.analysis import sample_complexity as S

    rows = []
    for c in cs:
        # K = 1, beta_f = c/2, beta_g = 0, alpha = 1 gives c = 2K(beta_f + G beta_g)/alpha
        tp = float(S.frank_wolfe_steps(1, 1.0, c / 2.0, 0.0, G=1.0, variant="paper"))
        tc = float(S.frank_wolfe_steps(1, 1.0, c / 2.0, 0.0, G=1.0))
        rows.append({"c": c, "T_paper": tp, "bound_over_alpha_at_T_paper": c * math.log(tp) / tp,
                     "T_sufficient": tc, "bound_over_alpha_at_T_sufficient": c * math.log(tc) / tc})
    return {"cells": rows, "paper_T_suffices": bool(all(r["bound_over_alpha_at_T_paper"] <= 1.0 for r in rows))}


def _finding_rows(config: dict[str, Any], ctx: Any) -> None:
    """Lemma 5.8 (audit of the printed Algorithm 2), Fig. 2's means and Cor. B.5's T (rows)."""
    aud = dict(LEMMA58_DEFAULTS, **config.get("lemma58", {}))
    kw = {"trials": int(aud["trials"]), "steps": int(aud["steps"]), "n": int(aud["n"])}
    row = lemma58_audit(seed=ctx.seed, **kw)
    keep = ("claimed_epsilon", "delta", "epsilon_lower_bound", "confidence", "trials", "threshold")
    measured = {"printed": {k: row[k] for k in keep}, "ledger_epsilon": row["spend_epsilon"],
                "oracle_epsilon": row["oracle_epsilon"]}
    control = ""
    if aud["control"]:  # the kit's corrected Algorithm 2 on the same pair (full config)
        ctl = lemma58_audit(seed=ctx.seed + 1, variant="corrected", **kw)
        measured["control_corrected"] = {k: ctl[k] for k in keep}
        control = (f"; the kit's corrected Algorithm 2 (Laplace-released losses, charged) on the same pair gives "
                   f"{ctl['epsilon_lower_bound']:.3g} <= {ctl['claimed_epsilon']:.4g}")
    lb, claim = row["epsilon_lower_bound"], row["paper_epsilon"]
    ctx.add_claim("p002_lemma58_alg2_privacy",
                  "Lemma 5.8: Algorithm 2 as printed (line 10's weight r_t from the private losses, no noise; only "
                  f"the T = {row['steps']} LOPT calls charged, eps' = eps/(2 sqrt(2T log(1/delta)))) is (eps, delta)-DP; "
                  f"audited through the public audit entry point (FitSpendGame on reductions.fit, variant='paper', "
                  f"n = {row['n']}, one record flips line 10's indicator), 95% lower bound on epsilon",
                  measured=measured,
                  target=f"epsilon lower bound <= the paper's epsilon {claim:.4g}", passed=bool(lb <= claim),
                  reason=(f"the printed algorithm leaks the data through line 10's unnoised weight: the audit's 95% "
                          f"lower bound {lb:.3g} ({row['trials']} trials per world) exceeds the claimed epsilon "
                          f"{claim:.4g}; the ledger gives no finite epsilon ({row['spend_epsilon']}){control}"))
    fig = figure2_check()
    a, b = fig["a_uniform"], fig["b_geometric"]
    ctx.add_claim("p002_fig2_means",
                  "Sec. 8.1 / Fig. 2: 'the H-mean performance measure is larger than the G-mean' for balanced (a, "
                  "uniform C) and unbalanced (b, entries decreasing by 1/3, row-major) confusion matrices; "
                  "measured: the paper's printed G-mean and H-mean formulas on both families, L = "
                  f"{fig['classes'][0]}..{fig['classes'][-1]} (exact)",
                  measured=fig, target="H-mean > G-mean in both panels", passed=not fig["contradicts"],
                  kind="formula",
                  reason=(f"the printed formulas contradict the figure (a finding about the paper, not a coding "
                          f"error): uniform C gives G = H = 1/L exactly (L = 2: {a['g_mean'][0]:.3g} vs "
                          f"{a['h_mean'][0]:.3g}), geometric C gives H far below G (L = 2: G {b['g_mean'][0]:.3g}, "
                          f"H {b['h_mean'][0]:.3g}; L = 3: G {b['g_mean'][1]:.3g}, H {b['h_mean'][1]:.2g}); the "
                          "figure used other definitions or orderings (footnote 16 calls it an illustration)"))
    b5 = corollary_b5_check()
    c12 = b5["cells"][0]
    ctx.add_claim("p002_corB5_rounds",
                  "Cor. B.5: T >= c log c rounds (c = 2K(beta_f + G beta_g)/alpha) make Lemma B.4's objective bound "
                  "alpha c log(T)/T at most alpha; measured: c log(T)/T at the printed T, exact",
                  measured=b5, target="c log(T)/T <= 1 at T = ceil(c log c)", passed=b5["paper_T_suffices"],
                  kind="formula",
                  reason=(f"the printed T is too small (a finding about the paper): at c = {c12['c']:g} it gives T = "
                          f"{c12['T_paper']:.0f} and a bound of {c12['bound_over_alpha_at_T_paper']:.3f} alpha; the "
                          f"smallest sufficient T is {c12['T_sufficient']:.0f} (about c log c + c log log c, Lambert "
                          "W); log(T)/T > 1/c at T = c log c for every c > e"))


# ------------------------------------------------------------------------------------------------
# sample complexities: Thm 5.2 (Algorithm 1) vs Cor. 5.11 (Algorithm 2), exact
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# equalized odds through the reduction (Cor. 8.9) on Adult / Credit
# ------------------------------------------------------------------------------------------------
def eo_loss_vectors(cands: np.ndarray, x2: Any, y: Any, s: Any, num_groups: int) -> np.ndarray:
    """Itemized ``(FP_1..FP_A, TP_1..TP_A, FN_1..FN_A)`` of every candidate (Cor. 8.9): ``[M, 3A]``."""
    import jax
    import jax.numpy as jnp

    x2 = jnp.asarray(x2, jnp.float32)
    yhat = (jnp.asarray(cands[:, :2]) @ x2.T > jnp.asarray(cands[:, 2:])).astype(jnp.float32)  # [M, n]
    y = jnp.asarray(y, jnp.float32)
    oh = jax.nn.one_hot(jnp.asarray(s), num_groups, dtype=jnp.float32)
    n = x2.shape[0]
    fp = yhat @ (oh * (1 - y)[:, None]) / n
    tp = yhat @ (oh * y[:, None]) / n
    fn = (1 - yhat) @ (oh * y[:, None]) / n
    return np.asarray(jnp.concatenate([fp, tp, fn], axis=1), np.float64)


def _cell_props(y, s, A):
    y, s = np.asarray(y), np.asarray(s)
    return np.stack([[np.mean((s == a) & (y == v)) for v in (0, 1)] for a in range(A)])


def _eo_lp(L: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """Exact CGOO optimum over grid mixtures with the hard EO constraint (an LP)."""
    from scipy import optimize

    M, K = L.shape
    A = K // 3
    rows = []
    for col in range(2):  # FP rates, TP rates
        r = L[:, col * A:(col + 1) * A] / q[:, col]
        for i in range(A):
            for j in range(i + 1, A):
                rows += [r[:, i] - r[:, j], r[:, j] - r[:, i]]
    cost = L[:, :A].sum(1) + L[:, 2 * A:].sum(1)
    res = optimize.linprog(cost, A_ub=np.stack(rows), b_ub=np.full(len(rows), alpha), A_eq=np.ones((1, M)),
                           b_eq=[1.0], bounds=(0, 1), method="highs")
    if res.status != 0:
        raise ValueError(f"the EO instance is infeasible over the grid ({res.message}).")
    return float(res.fun)


def _eo_skip(ctx, name: str, reason: str) -> None:
    ctx.skip_claim(f"p002_eo_{name}_cgoo_guarantee", "Alg. 1 solves the CGOO with probability >= 9/10 once "
                   "epsilon n is large enough (Thm 5.2 / Cor. 8.9; exact output law)", reason)
    ctx.skip_claim(f"p002_eo_{name}_frank_wolfe", "Non-private Frank-Wolfe is within alpha of the "
                   "EO-constrained optimum", reason)


def eo_exact_frame(probs: np.ndarray, eps: np.ndarray, values: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per epsilon: the exact expectation under Algorithm 1's output law ``probs [E, M]`` of
    every per-decision column of ``values`` (``[M]`` each; an indicator gives a probability)."""
    rows = {"method": "exp_sampling", "epsilon": np.asarray(eps, np.float64), "seed": 0}
    for k, v in values.items():
        rows[k] = probs @ np.asarray(v, np.float64)
    return pd.DataFrame(rows)


def run_eo(config: dict[str, Any], ctx: Any) -> pd.DataFrame:
    """Equalized odds via the reduction on Adult or Credit: Algorithm 1's exact output law across an
    epsilon grid (success probability, expected train/test error and EO gap), non-private
    Frank-Wolfe and the exact LP optimum; DP-FERMI's EO variant at the same epsilons when
    ``config["dpfermi"]``."""
    import jax.numpy as jnp

    from dpfair_jax import data as D
    from dpfair_jax.algorithms import reductions as R
    from . import scaling as SC

    name = config["dataset"]
    try:
        train, test = D.load(name, groups=config["groups"], target=config["target"], seed=ctx.seed)
    except (ImportError, FileNotFoundError) as err:
        reason = f"{name} unavailable ({type(err).__name__}: {err})"
        ctx.log(f"{reason}; study skipped.")
        _eo_skip(ctx, name, reason)
        return pd.DataFrame()
    A = train.num_groups
    priv, pub = public_private_split(train.n, config["public_fraction"], ctx.seed)
    public, train = train.take(pub), train.take(priv)  # the private algorithms see `train` only
    cols = [train.info.feature_names.index(c) for c in config["features"]]
    cands = halfplane_grid(config["num_angles"], config["thresholds"])
    Ltr = eo_loss_vectors(cands, np.asarray(train.x)[:, cols], train.y, train.s, A)
    Lte = eo_loss_vectors(cands, np.asarray(test.x)[:, cols], test.y, test.s, A)
    # normalizers of the EO constraint (and its Lipschitz constant) from the public split only
    q_tr, q_te = _cell_props(public.y, public.s, A), _cell_props(test.y, test.s, A)
    if np.any(q_tr <= 0):
        raise ValueError(f"the public split has an empty (group, label) cell: q = {q_tr.tolist()}; "
                         "raise public_fraction.")
    alpha, a_eo = float(config["alpha"]), float(config["eo_bound"])
    f = R.equalized_odds_objective(A)
    prob = R.CGOO(f, R.equalized_odds_constraint(A, a_eo, eta=None, normalizers=q_tr), 3 * A)
    smooth = R.CGOO(f, R.equalized_odds_constraint(A, a_eo, eta=config["eta"], mu=0.002, normalizers=q_tr), 3 * A)
    G = R.penalty_weight(alpha, 3 * A, f.lipschitz)
    f_mix = _eo_lp(Ltr, q_tr, a_eo)  # best mixture of grid decisions
    n = train.n
    M = len(cands)
    eps = [float(e) for e in config["epsilons"]]
    level = 0.9
    # Thm 5.2 on a finite grid with its constants: Thm 3.6 (excess h <= 2 Delta_h log(M/rho)/eps w.p.
    # 1 - rho) and Cor. 4.2 (excess h <= alpha solves the CGOO): eps_bound = 2 Delta_h log(M/rho)/alpha
    eps_bound = 2.0 * float(R.h_sensitivity(prob, n, G)) * math.log(M / (1.0 - level)) / alpha
    grid = np.unique(np.r_[np.geomspace(*config["exact_epsilon_range"], int(config["exact_epsilon_points"])),
                          eps, eps_bound])
    mask_grid, f_grid = SC.success_mask(Ltr, prob, alpha)
    fv = Ltr[:, :A].sum(1) + Ltr[:, 2 * A:].sum(1)
    gv = np.asarray(_grid_g(prob, Ltr), np.float64)
    mask_mix = (fv <= f_mix + alpha) & (gv <= alpha)
    fr, tr_ = Lte[:, :A] / q_te[:, 0], Lte[:, A:2 * A] / q_te[:, 1]
    values = {"p_success": mask_grid.astype(float), "p_success_vs_mixture": mask_mix.astype(float),
              "train_error": fv, "train_g": gv, "excess": fv - f_grid, "excess_vs_mixture": fv - f_mix,
              "test_error": Lte[:, :A].sum(1) + Lte[:, 2 * A:].sum(1),
              "test_eo_gap": np.maximum(fr.max(1) - fr.min(1), tr_.max(1) - tr_.min(1))}

    def compute(chunk: dict) -> pd.DataFrame:
        probs = SC.alg1_probs(Ltr, prob, G, n, grid)
        df = eo_exact_frame(probs, grid, values)
        rows = []

        def add(method, wts_idx):
            ltr = sum(w * Ltr[i] for i, w in wts_idx)
            lte = sum(w * Lte[i] for i, w in wts_idx)
            fr_, tr2 = lte[:A] / q_te[:, 0], lte[A:2 * A] / q_te[:, 1]
            rows.append({"method": method, "epsilon": _INF, "seed": 0,
                         "train_error": float(f(jnp.asarray(ltr))), "train_g": float(prob.g(jnp.asarray(ltr))),
                         "excess": float(f(jnp.asarray(ltr))) - f_grid,
                         "excess_vs_mixture": float(f(jnp.asarray(ltr))) - f_mix,
                         "test_error": float(lte[:A].sum() + lte[2 * A:].sum()),
                         "test_eo_gap": float(max(fr_.max() - fr_.min(), tr2.max() - tr2.min()))})

        fw = R.frank_wolfe(jnp.asarray(Ltr, jnp.float32), smooth, G=G, steps=int(config["fw_steps"]),
                           smoothing=config["penalty_smoothing"])
        add("frank_wolfe", list(zip(np.asarray(fw.indices).tolist(), np.asarray(fw.weights).tolist())))
        add("unconstrained", [(int(np.argmin(fv)), 1.0)])
        return pd.concat([df, pd.DataFrame(rows)], ignore_index=True)

    df = ctx.map_chunks([{"part": "reduction_exact"}], compute, desc="eo_reduction")
    if config["dpfermi"]:
        try:
            from dpfair_jax import models as Mo

            hp = {k: config["fermi"][k] for k in ("lr_theta", "lr_w", "clip_theta", "clip_w", "radius")}
            fe = tradeoff_study(train, test, method="dpfermi", model=Mo.logistic(), fairness="eo",
                                lams=config["fermi"]["lams"], epsilons=eps, seeds=config["fermi"]["seeds"],
                                epochs=config["fermi"]["epochs"], batch_size=config["fermi"]["batch_size"],
                                delta=1.0 / train.n ** 1.1, hp=hp, seed=ctx.seed, map_chunks=ctx.map_chunks)
            fe = fe.rename(columns={"error": "test_error", "eo_violation": "test_eo_gap"})
            fe["method"] = "dpfermi_lam" + fe["lam"].map(lambda v: f"{v:g}")
            df = pd.concat([df, fe[["method", "epsilon", "seed", "test_error", "test_eo_gap"]]], ignore_index=True)
        except Exception as err:  # noqa: BLE001 - the comparison is optional
            ctx.log(f"DP-FERMI comparison skipped ({type(err).__name__}: {err}).")
    ctx.log(f"{name}: n={n} (public split {public.n}) grid M={M} G={G:.3g} f*(grid)={f_grid:.4f} "
            f"f*(mixtures)={f_mix:.4f} eps_bound={eps_bound:.4g}")
    ctx.save_table(df, "exact_law")
    # claims
    a1 = df[df.method == "exp_sampling"].set_index("epsilon")
    p = a1["p_success"]
    ok = (p >= level).to_numpy()
    eps90 = SC.smallest_n(p.index.to_numpy(), ok, p.to_numpy(), level)  # smallest epsilon from which P >= 0.9
    at_bound = float(p.iloc[int(np.argmin(np.abs(p.index.to_numpy() - eps_bound)))])
    at = {f"{e:g}": float(p.iloc[int(np.argmin(np.abs(p.index.to_numpy() - e)))]) for e in eps}
    measured = {"eps_bound": eps_bound, "p_at_eps_bound": at_bound, "eps_90": eps90,
                "n0_at_eps1": float(n * eps90),
                "p_at": at,
                "p_vs_mixture_optimum_at_largest_eps": float(a1["p_success_vs_mixture"].iloc[-1]),
                "f_star_grid": f_grid, "f_star_mixtures": f_mix}
    ctx.add_claim(f"p002_eo_{name}_cgoo_guarantee",
                  f"Thm 5.2 / Cor. 8.9 on the finite grid with its constants (Thm 3.6 + Cor. 4.2): at epsilon >= "
                  f"2 Delta_h log(M/0.1)/alpha (n = {n} fixed; the output law depends on epsilon n only) Alg. 1 "
                  f"solves the CGOO (f <= f* + alpha, g <= alpha, alpha = {alpha}, f* the best feasible grid "
                  "decision) with probability >= 9/10; exact probabilities from the output law, no Monte Carlo",
                  measured=measured, target="P(success) at eps_bound >= 0.9",
                  passed=bool(measured["p_at_eps_bound"] >= level))
    fw = df[df.method == "frank_wolfe"].iloc[0]
    ctx.add_claim(f"p002_eo_{name}_frank_wolfe",
                  "Non-private Frank-Wolfe (smoothed EO, smoothed penalty) is within alpha of the EO-constrained "
                  "optimum over mixtures of grid decisions (LP)",
                  measured={"excess": float(fw.excess_vs_mixture), "train_g": float(fw.train_g)},
                  target=f"excess <= {alpha}, g <= {alpha}",
                  passed=bool(fw.excess_vs_mixture <= alpha and fw.train_g <= alpha))
    ctx.record_privacy("exp_sampling", {
        "relation": "replace_one", "epsilon": max(eps), "delta": 0.0, "unit": "example",
        "notes": f"each epsilon of the grid is a separate release; EO normalizers q_(a,y) from a held-out public "
                 f"split ({public.n} rows, fraction {config['public_fraction']:g}, disjoint from the private "
                 f"n={n}; random split of the row indices); n public by construction (replace-one; a record may "
                 "move to another group: the losses divide by the total n, no group size); the "
                 "study evaluates the output law exactly and draws no sample"})
    figures.eo_exact(df, ctx, name, eps_bound=eps_bound, level=level)
    return df


def _grid_g(problem: Any, L: np.ndarray) -> Any:
    """``g`` of every grid decision (float32, as the mechanism evaluates it)."""
    import jax
    import jax.numpy as jnp

    return jax.vmap(problem.g)(jnp.asarray(L, jnp.float32))


# ------------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------------
EXPERIMENTS = [
    register(Experiment("reductions_synthetic_bgl", "002",
                        "Private fair regression (bounded group loss), synthetic groups: Alg. 1 vs Alg. 2 vs "
                        "Frank-Wolfe vs fairlearn EG, objective and violation vs epsilon",
                        CONFIGS["reductions_synthetic_bgl"], run_bgl)),
    register(Experiment("reductions_law_bgl", "002",
                        "Private fair regression (bounded group loss) on Law school (race)",
                        CONFIGS["reductions_law_bgl"], run_bgl)),
    register(Experiment("reductions_sample_complexity", "002",
                        "Sample-complexity crossover (reduction vs Jagielski et al.) and the lower-bound instance",
                        CONFIGS["reductions_sample_complexity"], run_sample_complexity)),
    register(Experiment("reductions_scaling", "002",
                        "Sample complexities: Algorithm 1's exact n0 (Thm 5.2) vs Algorithm 2's analysis (Cor. 5.11) "
                        "over alpha and K, fitted exponents",
                        CONFIGS["reductions_scaling"], run_scaling)),
    register(Experiment("reductions_adult_eo", "002",
                        "Equalized odds via the reduction (Alg. 1, Frank-Wolfe) on Adult (sex), vs DP-FERMI EO",
                        CONFIGS["reductions_adult_eo"], run_eo)),
    register(Experiment("reductions_credit_eo", "002",
                        "Equalized odds via the reduction (Alg. 1, Frank-Wolfe) on Credit (sex), vs DP-FERMI EO",
                        CONFIGS["reductions_credit_eo"], run_eo)),
]
