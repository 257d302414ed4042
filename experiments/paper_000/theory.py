"""Paper 000, theory and Sec. 6: Lemma 3.1's expected loss (closed form against Monte Carlo),
Theorems 5.1/5.2 (untestable lower bounds) and Sec. 6's MNIST 8-vs-2 as a labelled reconstruction on
scikit-learn's 8x8 digits (full config).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.privacy.accounting import zcdp_to_dp
from dpfair_jax.studies.allocation import hyperparams_from, method_configs

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


def claims_theory(config: dict, ctx) -> None:
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


def claim_digits(config: dict, ctx) -> None:
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
