"""Paper 002, bounded group loss (``reductions_synthetic_bgl``, ``reductions_law_bgl``).

Private fair regression under a bounded group loss constraint (Sec. 3-5): Algorithm 1 (exponential
sampling, Thm 3.6), Algorithm 2 (LOPT, Lemma A.4's ledger), non-private Frank-Wolfe (Alg. 3-4,
Lemma B.4 / Cor. B.5 on the hinge) and fairlearn's ExponentiatedGradient, against the exact CGOO
optimum over grid mixtures (an LP).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from dpfair_jax.studies.bgl import bgl_problem, public_private_split
from dpfair_jax.studies.grids import candidate_grid, clipped_square_losses

from . import figures
from .claims import WHY_NOT

_INF = float("inf")

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


def _bgl_trials(Lj, prob, G: float, n: int, eps: list, budgets: list, cfg: dict, seed: int) -> dict:
    """Algorithm 1 (exponential sampling) and Algorithm 2 (private CGOO) at every epsilon, over
    ``cfg["seeds"]`` trials in one compiled program: the chosen loss vectors (and Alg. 1's index)."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax import montecarlo as MC
    from dpfair_jax.algorithms import reductions as R

    oe = jnp.asarray([b.oracle_epsilon for b in budgets], jnp.float32)
    ls = jnp.asarray([b.laplace_scale for b in budgets], jnp.float32)
    ej = jnp.asarray(eps, jnp.float32)
    T = int(cfg["steps"])

    def trial(key):
        k1, k2 = jax.random.split(key)
        idx = jax.vmap(lambda k, e: R.exponential_sampling(k, Lj, prob, G=G, epsilon=e, n=n))(
            jax.random.split(k1, len(eps)), ej)
        a2 = jax.vmap(lambda k, o, sc: R.private_cgoo(k, Lj, prob, G=G, steps=T, oracle_epsilon=o,
                                                      laplace_scale=sc, n=n, smoothing=cfg["penalty_smoothing"]).loss)(
            jax.random.split(k2, len(eps)), oe, ls)
        return {"alg1": Lj[idx], "alg1_index": idx, "alg2": a2}

    return MC.run_trials(trial, jax.random.key(seed), int(cfg["seeds"]))


def _bgl_row(method: str, e: float, seed_id: int, l, *, eta, G: float, f_star: float, worst: int, n: int,
             sizes) -> dict:
    """One row of the study's frame: objective, excess over the LP optimum, constraint, violation,
    penalized objective ``h`` and the worst group's mean loss of the loss vector ``l``."""
    l = np.asarray(l, np.float64)
    fval = float(l.sum())
    gval = float(np.max(l - eta))
    h = fval + G * max(0.0, gval)
    return {"method": method, "epsilon": e, "seed": seed_id, "objective": fval,
            "excess": fval - f_star, "constraint": gval, "violation": max(0.0, gval),
            "h": h, "worst_group_loss": float(l[worst] * n / sizes[worst])}


def _bgl_references(Lj, prob, G: float, f_star: float, eta, data: tuple, bound: float, cap: float, K: int,
                    cfg: dict, log) -> tuple[dict, dict, Any, str | None]:
    """The non-private references: Frank-Wolfe on the smoothed penalty, Frank-Wolfe on the paper's
    hinge ``G max(0, g)`` at T/10, T/3 and T (Lemma B.4), and fairlearn's ExponentiatedGradient
    (``None`` with a note when unavailable). Returns ``(fw_loss, hinge, fairlearn_loss, note)``."""
    from dpfair_jax.algorithms import reductions as R

    fw = R.frank_wolfe(Lj, prob, G=G, steps=int(cfg["fw_steps"]), smoothing=cfg["penalty_smoothing"])
    hinge = {}  # the paper's hinge penalty G max(0, g) (no smoothing): excess at T/10, T/3 and T
    for T_h in sorted({max(3, int(cfg["fw_steps"]) // 10), max(3, int(cfg["fw_steps"]) // 3), int(cfg["fw_steps"])}):
        lh = np.asarray(R.frank_wolfe(Lj, prob, G=G, steps=T_h).loss, np.float64)
        hinge[T_h] = {"excess": float(lh.sum() - f_star), "constraint": float(np.max(lh - eta))}
    note, lfl = None, None
    try:
        if not cfg.get("fairlearn", True):
            raise ImportError("disabled by config (fairlearn=false)")
        lfl = _fairlearn_row(*data, bound, cap, K)
    except ImportError as err:
        note = f"fairlearn unavailable ({err}); its row is skipped"
        log(note)
    return fw.loss, hinge, lfl, note


def _alg1_exact(L, prob, G: float, n: int, eps: list, hvals, num_candidates: int) -> dict:
    """Algorithm 1's exact output law at every epsilon (its claims read these, not the Monte Carlo
    rows): the probability of Thm 3.6's event (rho = 0.1) and the expected ``h``."""
    from dpfair_jax.algorithms import reductions as R

    from . import scaling as SC

    probs = SC.alg1_probs(L, prob, G, n, eps)  # [E, M]
    sens = float(R.h_sensitivity(prob, n, G))
    alg1_exact = {}
    for j, e in enumerate(eps):
        bound = 2.0 * sens * math.log(num_candidates / 0.1) / e  # Thm 3.6, rho = 0.1
        alg1_exact[e] = {"p_within_thm36": float(probs[j] @ (hvals - hvals.min() <= bound)),
                         "expected_h": float(probs[j] @ hvals.astype(np.float64))}
    return alg1_exact


def bgl_study(x, y, s, num_groups: int, cfg: dict, seed: int, log=print, *, public: tuple) -> tuple[pd.DataFrame, dict]:
    """Run the four methods on the private split ``(x, y, s)``; one row per (method, epsilon, seed).
    ``public = (x_pub, y_pub, s_pub)``: the held-out public split the thresholds come from.
    Returns (frame, facts)."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.algorithms import reductions as R
    from dpfair_jax.analysis import sample_complexity as S

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
    Lj = jnp.asarray(L)
    out = _bgl_trials(Lj, prob, G, n, eps, budgets, cfg, seed)
    kw = dict(eta=eta, G=G, f_star=f_star, worst=worst, n=n, sizes=sizes)
    rows = []
    A1, A2, A1i = np.asarray(out["alg1"]), np.asarray(out["alg2"]), np.asarray(out["alg1_index"])
    for t in range(A1.shape[0]):
        for j, e in enumerate(eps):
            rows.append(_bgl_row("exp_sampling", e, t, A1[t, j], **kw))
            rows[-1]["h_grid_excess"] = float(hvals[A1i[t, j]] - hvals.min())  # Thm 3.6's quantity
            rows.append(_bgl_row("lopt_alg2", e, t, A2[t, j], **kw))
    fw_loss, hinge, lfl, note = _bgl_references(Lj, prob, G, f_star, eta, (x, y, s), cfg["loss_bound"], tau[worst],
                                                K, cfg, log)
    rows.append(_bgl_row("frank_wolfe", _INF, 0, fw_loss, **kw))
    if lfl is not None:
        rows.append(_bgl_row("fairlearn_eg", _INF, 0, lfl, **kw))
    df = pd.DataFrame(rows)
    alg1_exact = _alg1_exact(L, prob, G, n, eps, hvals, len(cands))
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
