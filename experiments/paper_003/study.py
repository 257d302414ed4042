"""Paper 003, "A Simple and Practical Method for Reducing the Disparate Impact of Differential
Privacy" (Rosenblatt, Stoyanovich, Musco, AAAI 2024): stratified private estimation.

One registered experiment, ``paper_003``, with quick and full configs and four parts:

* **theory** (Sec. 4): Monte Carlo checks of Theorem 9's Dirichlet identity
  ``E sum log(n g_i) = k (psi(alpha) - psi(k alpha) + log n)`` (equality, within 3 SE), the Laplace
  tail ``P(|Y| >= a b) = e^-a`` (Def. 5), the stratified Laplace and Gaussian noise variances
  against their closed forms (notes A2, A3), the stratified/global Laplace noise variance ratio
  by Monte Carlo of both estimators (<= k, equal to ``sum (R+s_i)^2/(R+s)^2``), and Proposition
  8's shape (the (1 - gamma)-quantile of the stratified error over ``log(1/gamma) (2/(n eps))
  sqrt(sum (R+s_i)^2)`` is O(1) in k and gamma; the stratified/global quantile ratio is <= sqrt k).
  Theorem 9's closed form against SciPy, its monotonicity in alpha and Jensen's bound
  ``k log(n/k)`` are a formula check (deterministic), not a claim.
* **mixture** (Fig. 3 and the k / alpha sweeps): Gaussian mixture with Dirichlet(alpha) group
  sizes, ``n_tot`` rows split at random into a private and a public half; COINPRESS on the
  private half, private StratCOINPRESS (exact private sizes as weights, as the paper),
  Pub-StratCOINPRESS (public-half weights), and the public code's non-private "StratCOINPRESS"
  (``reference_code``) for comparison. Error ``|estimate - mean(private half)|``. COINPRESS's
  scale is checked on unit Gaussian data against its last step's noise std written out from
  Biswas et al. (:func:`coinpress_noise_std`; window derived in :func:`_coinpress_calibration`:
  4 standard errors at the grid's trial count, narrow enough that a 2x noise error fails). The whole grid
  (n x k x alpha x runs) is ONE compiled program: rows are padded to ``max(n)`` and groups to
  ``max(k)`` (padding rows sit in an extra group with weight 0), so ``n``, ``k`` and ``alpha`` are
  traced.
* **strata** (Fig. 2): Adult's hours-per-week, education-num and age, strata from every non-empty
  subset of the configured categorical columns (the combinations seen in the public half,
  :func:`public_strata_ids`; age buckets over Adult's public age range) (the folktables ACS CSV works the same way through
  ``acs_path``); global error and parity error vs number of strata, all combinations x variables
  x runs in one program (groups padded to the largest k). "Stratification can sometimes improve
  the global mean" is tested per cell with a one-sided paired t test, Bonferroni over the cells
  (:func:`strata_improvement_test`).

A claim whose part is left out of ``parts``, whose data are missing or whose grid cell is absent
is recorded as skipped with the reason (never left out of ``claims.json``).
* **synthesis** (Figs. 4, 5, 7): vanilla vs stratified (by sex, race, both) private synthetic
  data from :mod:`dpfair_jax.algorithms.synthesis` (the kit's **MST-like** JAX marginal
  synthesizer: all one- and two-way marginals at once, no exponential-mechanism tree selection, no
  inference, so not MST; smartnoise-synth's MST with ``synthesizer="mst"``), downstream classifier
  accuracy, parity error of column means (Def. 10) and demographic parity of the classifier. The
  paper's Fig. 5 rests on GEM and AIM: GEM is recorded as untestable (no port), AIM runs through
  smartnoise-synth where the ``synth`` extra is installed (:mod:`dpfair_jax.studies.aim`; skipped
  with the reason otherwise).

Departures (see ``README.md`` in this folder): results are private (the public code stores non-private
group means as StratCOINPRESS results); the private half is a Bernoulli(1/2) split (size
Binomial(n, 1/2)) rather than an exact half; strata dropped for being small (<= 0.001 n) are
decided on the public half, not the private one; COINPRESS on real variables runs on values
divided by a public scale (``variable_scale``; the paper's code uses raw units while assuming unit
variance: ``scale_mode="paper"`` keeps that).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import montecarlo as mc
from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.analysis import stratification_theory as th
from dpfair_jax.runner import Experiment, register
from dpfair_jax.studies.stratification import mixture_trial

from . import figures
from .config import FULL, QUICK

__all__ = ["run_theory", "run_mixture", "run_strata", "run_synthesis", "run", "public_strata_ids", "ratio_trend",
           "strata_source", "aim_skip_reason",
           "coinpress_noise_std", "strata_improvement_test", "part_claims", "EXPERIMENT", "QUICK", "FULL"]

#: Why each claim does not hold when it does not (recorded with the claim; the page's "Reproduction"
#: gives the numbers).
_MC = "a Monte Carlo estimate more than 3 standard errors from its closed form: a coding error, or a 0.3% chance draw"
WHY_NOT = {
    "thm9_identity": _MC,
    "thm9_practical": ("off the paper's 'about 80%' by more than 0.1; the paper's reading of its formula is "
                       "ambiguous (0.72 with (k-1) + log(n-k), natural logs)"),
    "laplace_tail": _MC,
    "strat_var": _MC,
    "strat_var_ratio_le_k": _MC,
    "prop8_shape": "the normalized quantile varies by more than 2x across k and gamma at this n",
    "prop8_sqrt_k": "the stratified error quantile exceeds sqrt(k) times the global one beyond the Monte Carlo slack",
    "mixture_1pct": ("the 1% error needs more rows per stratum than the grid's n gives at small alpha (unequal "
                     "strata) and large k: the notes expect k = 3 to hold and k = 12 not"),
    "reference_code_bug": "the stored estimates are not far below the private ones on these seeds",
    "coinpress_scale": ("COINPRESS's last-step noise differs from Biswas et al.'s sigma_T beyond 4 SE: a noise-scale "
                        "error in the kit"),
    "mixture_one_program": "the grid took more than 60 s of CPU (a loaded machine, or a recompilation per cell)",
    "strata_parity": "stratification does not lower the parity error in 90% of the (variable, strata) cells",
    "strata_global_error": "no cell's improvement is significant at the family-wise level",
    "synthesis_parity": (
        "measured with the kit's MST-like JAX marginal synthesizer (all one- and two-way marginals at once, no "
        "exponential-mechanism selection of the tree, no inference; not MST): each stratum's marginals get the "
        "whole table's noise, so small strata are swamped; its verdict is no evidence for or against the paper, "
        "whose claim rests on GEM and AIM (the authors' stored MST results also show stratification raising "
        "parity error)"),
    "synthesis_accuracy": ("measured with the kit's MST-like JAX marginal synthesizer (not MST, GEM or AIM): its "
                           "verdict is no evidence for or against the paper"),
    "synthesis_parity_gem": ("the kit has no GEM port (GEM's public code also passes the user epsilon as its "
                             "per-round budget, see the page): untestable until a port exists"),
    "synthesis_parity_aim": "stratified AIM does not have lower parity error than vanilla AIM in most cells",
    "synthesis_workload_fig9": (
        "not run: Fig. 9's statements are about GEM (no port in the kit) and AIM (the optional synth extra, "
        "smartnoise-synth, is not installed here), and the paper does not say how the all-3-way-marginal workload "
        "error (McKenna et al. 2022) enters Def. 10 as its f (per stratum against the real stratum, or the global "
        "error; not in the authors' repository either). The kit's MST-like JAX synthesizer measures one- and two-way "
        "marginals only, so a 3-way workload error of its output would measure what it never fits and test "
        "neither synthesizer of the figure"),
}

FIG9_STATEMENT = ("Fig. 9 (supplement): with the all-3-way-marginal workload error as f, stratified GEM reaches low "
                  "parity error; vanilla AIM's parity error is far above stratified AIM's at epsilon < 1")


# ------------------------------------------------------------------------------------------------
# theory
# ------------------------------------------------------------------------------------------------
def _var_and_se(samples: np.ndarray) -> tuple[float, float]:
    x = np.asarray(samples, np.float64)
    c = (x - x.mean()) ** 2
    return float(c.mean()), float(c.std(ddof=1) / math.sqrt(c.size))


def run_theory(config: dict, ctx: Any):
    import pandas as pd

    key = jax.random.key(int(config["seed"]))
    k_thm, k_tail, k_var, k_gv, k_p8 = jax.random.split(key, 5)
    rows = []

    # Theorem 9 (masked groups: one program for every k and alpha)
    ks, alphas = list(config["thm9_ks"]), list(config["thm9_alphas"])
    kmax, n = max(ks), float(config["thm9_n"])

    draws = int(config["thm9_draws"])

    @jax.jit
    def thm9(kk, k_arr, a_arr):  # [K, A, draws] in one program; groups beyond k are masked
        shape = (k_arr.shape[0], a_arr.shape[0], draws, kmax)
        L = jax.random.loggamma(kk, jnp.broadcast_to(a_arr[None, :, None, None], shape))
        active = jnp.arange(kmax) < k_arr[:, None, None, None]
        L = jnp.where(active, L, -jnp.inf)
        logp = L - jax.nn.logsumexp(L, axis=-1, keepdims=True)
        return jnp.sum(jnp.where(active, math.log(n) + logp, 0.0), axis=-1)

    S = np.asarray(thm9(k_thm, jnp.asarray(ks, jnp.int32), jnp.asarray(alphas, jnp.float32)), np.float64)
    for i, k in enumerate(ks):
        for j, a in enumerate(alphas):
            m, se = S[i, j].mean(), S[i, j].std(ddof=1) / math.sqrt(S.shape[2])
            theory = float(th.dirichlet_expected_log_sizes(n, k, a))
            rows.append({"check": "thm9", "k": k, "alpha": a, "measured": m, "se": se, "theory": theory,
                         "z": (m - theory) / se, "worst": float(th.worst_case_log_sizes(n, k)),
                         "best": float(th.best_case_log_sizes(n, k))})
    thm = pd.DataFrame([r for r in rows if r["check"] == "thm9"])
    zmax = float(thm["z"].abs().max())
    ctx.add_claim("thm9_identity", "Theorem 9: E sum_i log(n g_i) = k(psi(alpha) - psi(k alpha) + log n) "
                  "for g ~ Dir(alpha 1_k) (an equality), every (k, alpha), within 3 standard errors",
                  measured=f"max |z| = {zmax:.2f}", target="<= 3", passed=bool(zmax <= 3),
                  reason=WHY_NOT["thm9_identity"])
    # formula check: the closed form against SciPy's digamma, its monotonicity and Jensen's bound
    from scipy import special

    scipy_form = thm["k"] * (special.psi(thm["alpha"]) - special.psi(thm["k"] * thm["alpha"]) + math.log(n))
    rel = float(np.max(np.abs(thm["theory"] - scipy_form) / np.abs(scipy_form)))
    mono = bool(all(np.all(np.diff(thm[thm.k == k].sort_values("alpha")["theory"]) > 0) for k in ks))
    below = bool(np.all(thm["theory"] <= thm["k"] * np.log(n / thm["k"]) + 1e-9))
    ctx.add_check("thm9_bounds", "Theorem 9's closed form (dirichlet_expected_log_sizes) equals k(psi(alpha) - "
                  "psi(k alpha) + log n) by SciPy, increases in alpha and is <= k log(n/k) (Jensen)",
                  measured={"max_rel_err_vs_scipy": rel, "increasing": mono, "below_k_log_n_over_k": below},
                  target="relative error <= 1e-6, both true", passed=bool(rel <= 1e-6 and mono and below))
    frac = float(th.fraction_toward_best(196967, 9, 0.13))
    ctx.add_claim("thm9_practical", "ACS NY race example (k=9, alpha~0.13): expected error 'about 80% "
                  "better' than the worst case, relative to the best case (natural logs)",
                  measured=round(frac, 3), target="~0.8 (paper); 0.72 with (k-1)+log(n-k)",
                  passed=bool(abs(frac - 0.8) <= 0.1), reason=WHY_NOT["thm9_practical"])

    # Laplace tails (Def. 5): P(|Y| >= a b) = exp(-a)
    from dpfair_jax.privacy.mechanisms import laplace_mechanism

    nd = int(config["tail_draws"])
    y = np.asarray(laplace_mechanism(k_tail, jnp.zeros(nd), 1.0))
    zt = []
    for a in (1.0, 2.0, 3.0):
        p = float(np.mean(np.abs(y) >= a))
        se = math.sqrt(math.exp(-a) * (1 - math.exp(-a)) / nd)
        zt.append(abs(p - math.exp(-a)) / se)
        rows.append({"check": "laplace_tail", "a": a, "measured": p, "se": se, "theory": math.exp(-a),
                     "z": (p - math.exp(-a)) / se})
    ctx.add_claim("laplace_tail", "Def. 5: P(|Lap(b)| >= a b) = e^-a (a = 1, 2, 3; equality)",
                  measured=f"max |z| = {max(zt):.2f}", target="<= 3", passed=bool(max(zt) <= 3),
                  reason=WHY_NOT["laplace_tail"])

    # stratified Laplace noise variance (notes A2) and Gaussian (A3)
    sizes = [int(s) for s in config["var_sizes"]]
    nv, R, gamma, eps = sum(sizes), float(config["R"]), float(config["gamma"]), float(config["epsilon"])
    s_ids = jnp.asarray(np.repeat(np.arange(len(sizes)), sizes).astype(np.int32))
    xv = 0.1 * jax.random.normal(jax.random.key(7), (nv,))  # well inside the clip range
    K = len(sizes)

    def strat_lap(kk):
        return {"err": me.stratified_laplace_mean(kk, xv, s_ids, K, R=R, gamma=gamma, epsilon=eps)
                .estimate[0] - jnp.mean(xv)}

    def strat_gauss(kk):
        return {"err": me.stratified_gaussian_mean(kk, xv, s_ids, K, center=0.0, clip=2.0, rho=0.5)
                .estimate[0] - jnp.mean(xv)}

    draws = int(config["var_draws"])
    for name, fn, theory in (
        ("strat_laplace_var", strat_lap, th.stratified_laplace_noise_variance(sizes, R, gamma, eps)),
        ("strat_gaussian_var", strat_gauss, th.stratified_gaussian_noise_variance(nv, [2.0] * K, 0.5)),
    ):
        err = np.asarray(mc.run_trials(fn, k_var if "lap" in name else k_gv, draws, chunk_size=500)["err"])
        var, se = _var_and_se(err)
        if name == "strat_laplace_var":
            lap_var = (var, se)
        z = (var - theory) / se
        rows.append({"check": name, "measured": var, "se": se, "theory": theory, "z": z})
        ctx.add_claim(name, f"{name}: Monte Carlo variance of the stratified estimate's noise equals "
                      "its closed form (sizes " + str(sizes) + ")",
                      measured=f"{var:.4e} (z = {z:.2f})", target=f"{theory:.4e} within 3 SE",
                      passed=bool(abs(z) <= 3), reason=WHY_NOT["strat_var"])
    # stratified / global Laplace noise variance by Monte Carlo: the global estimator is the
    # one-stratum case on the same data (Prop. 8's sqrt k, in variance)
    def glob_lap(kk):
        return {"err": me.stratified_laplace_mean(kk, xv, jnp.zeros_like(s_ids), 1, R=R, gamma=gamma, epsilon=eps)
                .estimate[0] - jnp.mean(xv)}

    g_err = np.asarray(mc.run_trials(glob_lap, jax.random.fold_in(k_var, 1), draws, chunk_size=500)["err"])
    s_var, s_se = lap_var
    g_var, g_se = _var_and_se(g_err)
    ratio = s_var / g_var
    ratio_se = ratio * math.sqrt((s_se / s_var) ** 2 + (g_se / g_var) ** 2)  # independent draws
    closed = float(th.stratified_laplace_noise_variance(sizes, R, gamma, eps)
                   / th.global_laplace_noise_variance(nv, R, gamma, eps))
    z_ratio = (ratio - closed) / ratio_se
    rows.append({"check": "laplace_var_ratio", "measured": ratio, "se": ratio_se, "theory": closed, "z": z_ratio,
                 "bound": len(sizes)})
    ctx.add_claim("strat_var_ratio_le_k", "Monte Carlo variance of the stratified Laplace estimate's noise over "
                  "the global one's (same data, sizes " + str(sizes) + ") is <= k (the sqrt k of Prop. 8, in "
                  "variance) and equals sum (R+s_i)^2/(R+s)^2 (notes A2)",
                  measured={"ratio": round(ratio, 4), "se": round(ratio_se, 4), "z_vs_closed_form": round(z_ratio, 2)},
                  target=f"ratio <= {len(sizes)} and |ratio - {closed:.4f}| <= 3 SE",
                  passed=bool(ratio <= len(sizes) and abs(z_ratio) <= 3), reason=WHY_NOT["strat_var_ratio_le_k"])

    # Proposition 8's shape: equal groups, k traced (masked groups), quantiles of |error|
    n8, kmax8 = int(config["prop8_n"]), max(config["prop8_ks"])
    x8 = 0.1 * jax.random.normal(jax.random.key(8), (n8,))

    def p8(kk, k):
        s = (jnp.arange(n8) % k).astype(jnp.int32)
        st = me.stratified_laplace_mean(kk, x8, s, kmax8, R=R, gamma=gamma, epsilon=eps).estimate[0]
        return {"err": jnp.abs(st - jnp.mean(x8))}

    res8 = mc.sweep(p8, k_p8, {"k": np.array(config["prop8_ks"], np.int32)}, int(config["prop8_draws"]),
                    chunk_size=500)
    err8 = np.asarray(res8.values["err"], np.float64)
    norm_q, ratios = [], []
    for i, k in enumerate(config["prop8_ks"]):
        sz = np.full(k, n8 // k) + (np.arange(k) < n8 % k)
        hw = th.laplace_halfwidth(sz, R, gamma)
        for g in (0.1, 0.05, 0.01):
            q = float(np.quantile(err8[i], 1 - g))
            scale = math.log(1 / g) * (2 / (n8 * eps)) * math.sqrt(float(np.sum(hw ** 2)))
            q1 = float(np.quantile(err8[0], 1 - g))
            norm_q.append(q / scale)
            ratios.append((q / q1) / math.sqrt(k))
            rows.append({"check": "prop8", "k": k, "gamma_q": g, "measured": q, "theory": scale,
                         "normalized": q / scale, "ratio_to_global_over_sqrt_k": (q / q1) / math.sqrt(k),
                         "bound_shape": float(th.prop8_bound(n8, k, R, g, eps))})
    spread = max(norm_q) / min(norm_q)
    ctx.add_claim("prop8_shape", "Prop. 8: the (1-gamma)-quantile of |p_strat - p| over "
                  "log(1/gamma)(2/(n eps))sqrt(sum(R+s_i)^2) is O(1) across k in "
                  f"{config['prop8_ks']} and gamma in (0.1, 0.05, 0.01)",
                  measured=f"range [{min(norm_q):.2f}, {max(norm_q):.2f}] (max/min {spread:.2f})",
                  target="max/min <= 2", passed=bool(spread <= 2), reason=WHY_NOT["prop8_shape"])
    if int(config["prop8_ks"][0]) != 1:
        ctx.skip_claim("prop8_sqrt_k", "Prop. 8: stratified error quantile / global <= sqrt(k)",
                       f"the global estimator is the k = 1 cell; prop8_ks starts at {config['prop8_ks'][0]}")
    else:
        ctx.add_claim("prop8_sqrt_k", "Prop. 8: stratified error quantile / global <= sqrt(k)",
                      measured=f"max ratio/sqrt(k) = {max(ratios):.3f}", target="<= 1.05 (MC slack)",
                      passed=bool(max(ratios) <= 1.05), reason=WHY_NOT["prop8_sqrt_k"])
    df = pd.DataFrame(rows)
    ctx.save_table(df, "theory")
    figures.theory(df, ctx)
    return df


# ------------------------------------------------------------------------------------------------
# mixture (Fig. 3)
# ------------------------------------------------------------------------------------------------
def coinpress_noise_std(n: Any, rhos: Any, radius: float = 3.0, relation: str = "replace_one_within_group",
                       beta: float = 0.01) -> np.ndarray:
    """Std of the last COINPRESS step's Gaussian noise on the mean, written out from Biswas et al.
    (2020) Alg. 1 in one dimension with the reference code's constants (independent of the kit's
    helpers): ``gamma = sqrt(1 + 2 sqrt(log(1/beta)) + 2 log(1/beta))`` (3.808185 at beta = 0.01),
    ``r_0 = radius``, and per step ``t`` with budget ``rho_t``:
    ``C_t = min(sqrt(r^2 + 6 r + gamma^2), r + gamma)``, ``sigma_t = Delta C_t / (n sqrt(2 rho_t))``
    (``Delta = 2`` under either replace-one relation, 1 add/remove), ``r_t = gamma sqrt(1/n + sigma_t^2)``. The radii do
    not depend on the data, so ``sigma_T`` is a function of ``n`` alone. Vectorized over ``n``."""
    n = np.asarray(n, np.float64)
    lb = math.log(1.0 / beta)
    gamma = math.sqrt(1.0 + 2.0 * math.sqrt(lb) + 2.0 * lb)
    delta_sens = 1.0 if relation == "add_remove" else 2.0
    r = np.full_like(n, float(radius))
    sigma = np.zeros_like(n)
    for rho_t in np.asarray(rhos, np.float64).ravel():
        c = np.minimum(np.sqrt(r * r + 6.0 * r + gamma * gamma), r + gamma)
        sigma = delta_sens * c / (n * math.sqrt(2.0 * rho_t))
        r = gamma * np.sqrt(1.0 / n + sigma * sigma)
    return sigma


#: Standard deviation of |Z| / E|Z| for Z ~ N(0, 1): sqrt(pi/2 - 1).
_HALF_NORMAL_REL_SD = math.sqrt(math.pi / 2.0 - 1.0)


def _coinpress_spend(config: dict, num_groups: int, relation: str):
    """The spend of one (Strat)COINPRESS release at the study's budget: ``mean_estimation.spend``
    (``rho`` split by ``rho_split``, stated at delta = 1e-6; the spend depends on the number of
    strata, not on their sizes)."""
    cfg = me.MeanConfig(method="coinpress", num_groups=num_groups, relation=relation,
                        split=tuple(float(f) for f in config["rho_split"]), delta=1e-6)
    return me.spend(cfg, (1,) * num_groups, me.MeanHparams(rho=float(config["rho"])))


def _coinpress_calibration(config: dict, rhos: np.ndarray, num_trials: int) -> dict[str, Any]:
    """COINPRESS on unit Gaussian data at the private-half sizes ``n_tot // 2`` of the config, with
    ``num_trials`` draws in all (split evenly over the sizes; one program, rows padded to the
    largest size). Returns the statistic ``T = mean(|err| / (sqrt(2/pi) sigma_T(n)))`` of
    :func:`coinpress_noise_std` and its standard error.

    Derivation of the window: on unit data clipping at ``C_T ~ 3.9`` moves the mean by far less than
    the noise, so ``err ~ N(0, sigma_T^2)`` and each ratio ``|err| / (sqrt(2/pi) sigma_T)`` has mean 1
    and standard deviation ``sqrt(pi/2 - 1) = 0.756``; ``T`` over ``N`` independent draws has
    ``SE = 0.756 / sqrt(N)`` and passes when ``|T - 1| <= 4 SE``. A noise std off by a factor ``f``
    gives ``E T = f``; ``f = 2`` fails when ``1 + 4 SE < 2 - 8 SE`` and ``f = 1/2`` when
    ``1/2 + 2 SE < 1 - 4 SE``, both whenever ``SE < 1/12`` (``N >= 83``); with fewer draws the claim
    is skipped."""
    ns = sorted({int(n) // 2 for n in config["ns"]})
    reps = max(1, num_trials // len(ns))
    n_max = max(ns)
    center, radius = float(config["center"]), float(config["radius"])
    rhos_j = jnp.asarray(rhos, jnp.float32)

    def trial(key, n):
        kx, kc = jax.random.split(key)
        valid = jnp.arange(n_max) < n
        x = jnp.where(valid, jax.random.normal(kx, (n_max,)), 0.0)
        s = jnp.where(valid, 0, 1).astype(jnp.int32)
        est = me.stratified_coinpress(kc, x, s, 2, weights=jnp.array([1.0, 0.0]), center=center, radius=radius,
                                      rhos=rhos_j, relation=config["relation"]).estimate[0]
        return {"err": jnp.abs(est - jnp.sum(x) / n)}

    res = mc.sweep(trial, jax.random.key(int(config["seed"]) + 11), {"n": np.array(ns, np.int32)}, reps,
                   chunk_size=int(config["chunk_size"]))
    err = np.asarray(res.values["err"], np.float64)  # [len(ns), reps]
    sigma = coinpress_noise_std(np.array(ns), rhos, radius, config["relation"])
    ratio = err / (math.sqrt(2.0 / math.pi) * sigma[:, None])
    N = ratio.size
    return {"T": float(ratio.mean()), "se": _HALF_NORMAL_REL_SD / math.sqrt(N), "draws": N,
            "sample_sd": float(ratio.std(ddof=1)), "n_private": ns,
            "sigma_T": [float(v) for v in sigma], "mean_abs_err": [float(v) for v in err.mean(axis=1)]}


def run_mixture(config: dict, ctx: Any):
    import functools

    ns = [int(n) for n in config["ns"]]
    ks = [int(k) for k in config["ks"]]
    rhos = me.coinpress_rhos(float(config["rho"]), config["rho_split"])
    fn = functools.partial(mixture_trial, n_max=max(ns), k_max=max(ks), rhos=jnp.asarray(rhos, jnp.float32),
                           center=float(config["center"]), radius=float(config["radius"]),
                           relation=config["relation"])

    def trial(key, n_tot, k, alpha):
        return fn(key, n_tot, k, alpha)

    t0, c0 = time.perf_counter(), time.process_time()
    res = mc.sweep(trial, jax.random.key(int(config["seed"]) + 1),
                   {"n_tot": np.array(ns, np.float32), "k": np.array(ks, np.int32),
                    "alpha": np.array(config["alphas"], np.float32)},
                   int(config["runs"]), chunk_size=int(config["chunk_size"]))
    jax.block_until_ready(res.values)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    ctx.log(f"mixture grid: {len(ns) * len(ks) * len(config['alphas']) * int(config['runs'])} runs "
            f"in one program, {seconds:.1f} s wall, {cpu:.1f} s CPU (compile included)")
    df = res.to_frame()
    df["n_tot"] = df["n_tot"].round().astype(int)
    df["grid_seconds"] = seconds
    df["grid_cpu_seconds"] = cpu
    ctx.save_table(df, "mixture")
    # each method is one release on the private half (the methods are compared, not combined)
    k_rec = max(ks) + 1  # the strata plus the group of rows outside the private half
    ctx.record_privacy("coinpress_and_stratcoinpress_rho",
                       _coinpress_spend(config, k_rec, config["relation"]))
    ctx.record_privacy("stratcoinpress_add_remove",
                       _coinpress_spend(config, k_rec, "add_remove"))
    calib = _coinpress_calibration(config, rhos, len(ns) * len(ks) * len(config["alphas"]) * int(config["runs"]))
    _claims_mixture(df, ctx, config, calib)
    figures.mixture(df, ctx, config)
    return df


def ratio_trend(df: Any, *, num: str = "strat", den: str = "coinpress", boots: int = 2000, seed: int = 0,
                per: float = 10000.0) -> dict[str, Any]:
    """Fig. 3's trend: the least-squares slope over ``n`` (per ``per`` rows, the figure's linear axis) of
    the ratio of mean errors ``mean(num) / mean(den)`` in each ``(k, alpha)`` cell, averaged over the
    cells; ``effect = -slope`` (positive: the ratio falls as ``n`` grows, the paper's side). Its
    standard error is a bootstrap over the independent runs of every ``(n, k, alpha)`` cell
    (``boots`` resamples, one vectorized draw, fixed ``seed``). Needs the full grid and >= 2 sizes."""
    ns = np.sort(df.n_tot.unique())
    cells = df[["k", "alpha"]].drop_duplicates().sort_values(["k", "alpha"]).to_numpy()
    if len(ns) < 2:
        raise ValueError(f"the trend needs two sizes n, the grid has {ns.tolist()}.")
    d = df.sort_values(["n_tot", "k", "alpha", "trial"])
    R = int(d.groupby(["n_tot", "k", "alpha"]).size().min())
    shape = (len(ns), len(cells), R)
    if len(d) != int(np.prod(shape)):
        raise ValueError("the trend needs the same number of runs in every (n, k, alpha) cell.")
    a = d[num].to_numpy(np.float64).reshape(shape)
    b = d[den].to_numpy(np.float64).reshape(shape)
    x = (ns - ns.mean()) / per
    w = x / np.sum(x * x)  # slope = sum w_i y_i

    ratio = a.mean(-1) / b.mean(-1)  # [n, cell]
    point = -float(np.mean(np.einsum("i,ic->c", w, ratio)))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, R, size=(boots,) + shape)
    ma = np.take_along_axis(np.broadcast_to(a, idx.shape), idx, -1).mean(-1)
    mb = np.take_along_axis(np.broadcast_to(b, idx.shape), idx, -1).mean(-1)
    draws = np.einsum("i,bic->bc", w, ma / mb)  # [boots, cell] slopes
    se = float((-draws.mean(-1)).std(ddof=1))
    return {"effect": point, "se": se, "runs": R, "ns": ns.tolist(), "per_rows": per,
            "cells": [f"k={int(k)},alpha={al:g}" for k, al in cells],
            "cell_slopes": np.einsum("i,ic->c", w, ratio).round(4).tolist(),
            "ratio_at_min_n": ratio[0].round(3).tolist(), "ratio_at_max_n": ratio[-1].round(3).tolist()}


def _claims_mixture(df, ctx, config, calib):
    ns = sorted(df.n_tot.unique())
    agg = df.groupby(["n_tot", "k", "alpha"]).agg(
        coinpress=("coinpress", "mean"), strat=("strat", "mean"), strat_median=("strat", "median"),
        pub=("pub_strat", "mean"), strat_add_remove=("strat_add_remove", "mean"),
        ref=("reference_code", "mean")).reset_index()
    ctx.save_table(agg, "mixture_summary")
    statement = ("Fig. 3: 'stratified variants converge to performance of non-stratified COINPRESS as n grows': the "
                 "ratio of StratCOINPRESS's mean error to COINPRESS's falls with n; effect = minus its least-squares "
                 "slope per 10,000 rows over the grid's n, averaged over the (k, alpha) cells, bootstrap interval "
                 "over the runs")
    if len(ns) < 2 or int(config["runs"]) < 2:
        ctx.skip_claim("mixture_converges", statement, f"needs two sizes n and two runs, the grid has n = {ns}, "
                       f"runs = {config['runs']}", target="slope's interval below 0")
    else:
        from dpfair_jax.runner.verdict import Estimate, PaperEffect, directional_verdict

        tr = ratio_trend(df, seed=int(config["seed"]))
        v = directional_verdict(Estimate(tr["effect"], tr["se"], math.inf, tr["runs"]),
                                PaperEffect(source="Fig. 3 caption and text (p. 5): stratified variants converge to "
                                            "COINPRESS as n grows; direction only, no rate stated"))
        ctx.add_verdict("mixture_converges", statement, v,
                        extra={k: tr[k] for k in ("ns", "per_rows", "cells", "cell_slopes", "ratio_at_min_n",
                                                  "ratio_at_max_n")})
    big = agg[agg.n_tot >= 10000]
    for k in sorted(agg.k.unique()):
        sub = big[big.k == k]
        ok = sub[sub.strat <= 0.01]
        where = ", ".join(f"n={int(r.n_tot)},a={r.alpha:g}" for r in sub[sub.strat > 0.01].itertuples())
        statement = f"Fig. 3: StratCOINPRESS mean error <= 0.01 for n >= 10000 (k={k})"
        target = "all cells (paper); notes expect k=3 yes, k=12 no"
        if sub.empty:
            ctx.skip_claim(f"mixture_1pct_k{k}", statement, f"no cell with n >= 10000 in the grid (ns = {ns})",
                           target=target)
            continue
        ctx.add_claim(f"mixture_1pct_k{k}", f"{statement}; fails at: {where or 'none'}",
                      measured=f"{len(ok)}/{len(sub)} cells", target=target, passed=bool(len(ok) == len(sub)),
                      reason=WHY_NOT["mixture_1pct"])
    ratio_ref = float((agg["strat"] / agg["ref"]).median())
    ctx.add_claim("reference_code_bug", "The public code's stored 'StratCOINPRESS' (non-private group "
                  "means of globally clipped data) has errors far below any private stratified "
                  "estimate: median ratio private/stored-semantics", measured=round(ratio_ref, 1),
                  target=">= 5 (notes: 10-50x on the code's seeds)", passed=bool(ratio_ref >= 5),
                  reason=WHY_NOT["reference_code_bug"])
    cp = float(agg["coinpress"].median())
    statement = (f"COINPRESS's error on unit Gaussian data (rho={config['rho']:g}, split {list(config['rho_split'])}, "
                 f"private-half sizes {calib['n_private']}) is its last step's noise: mean of |err| / (sqrt(2/pi) "
                 "sigma_T(n)), sigma_T written out from Biswas et al. Alg. 1, is 1 within 4 SE (SE = "
                 "sqrt(pi/2 - 1)/sqrt(draws); a 2x or 1/2x noise error fails); the mixture grid's median cell "
                 "error is reported beside it")
    window = [1.0 - 4.0 * calib["se"], 1.0 + 4.0 * calib["se"]]
    measured = {"T": round(calib["T"], 4), "se": round(calib["se"], 4), "draws": calib["draws"],
                "sample_sd_of_ratio": round(calib["sample_sd"], 3),
                "mean_abs_err_unit_data": [float(f"{v:.3g}") for v in calib["mean_abs_err"]],
                "mixture_median_cell_error": float(f"{cp:.3g}")}
    if calib["se"] >= 1.0 / 12.0:
        ctx.skip_claim("coinpress_scale", statement, f"{calib['draws']} draws give SE {calib['se']:.3f} >= 1/12: "
                       "too few to tell a 2x noise error (needs >= 83 draws)", target="|T - 1| <= 4 SE")
    else:
        ctx.add_claim("coinpress_scale", statement, measured=measured,
                      target=f"T in [{window[0]:.3f}, {window[1]:.3f}]",
                      passed=bool(window[0] <= calib["T"] <= window[1]), reason=WHY_NOT["coinpress_scale"])
    secs, cpu = float(df["grid_seconds"].iloc[0]), float(df["grid_cpu_seconds"].iloc[0])
    ctx.add_claim("mixture_one_program", "The whole Fig. 3 grid (all n, k, alpha, runs) runs as one "
                  "compiled program in seconds (process CPU time incl. compile; wall time depends on "
                  "the machine's load)", measured=f"{cpu:.1f} s CPU ({secs:.1f} s wall)",
                  target="< 60 s CPU", passed=bool(cpu < 60), reason=WHY_NOT["mixture_one_program"])


# ------------------------------------------------------------------------------------------------
# strata (Fig. 2)
# ------------------------------------------------------------------------------------------------
def _strata_frame(config):
    import pandas as pd

    if config.get("acs_path"):
        f = pd.read_csv(config["acs_path"])
        if "AGEP" in f.columns and "AGEP_bucket" not in f.columns:
            f["AGEP_bucket"] = pd.cut(f["AGEP"], bins=5, labels=False)
        return f
    from dpfair_jax.data.tabular import adult_strata

    return adult_strata(path=config.get("adult_path"))


def strata_source(config: dict) -> str:
    """Which data Fig. 2's rows ran on: the paper's ACS (a CSV at ``acs_path``) or Adult, labelled a
    stand-in (folktables' ACS NY 2018 needs a download)."""
    if config.get("acs_path"):
        return f"on the ACS CSV at acs_path ({config['acs_path']}), the paper's data"
    return ("on Adult, a stand-in for the paper's ACS NY 2018 (Folktables needs a download; set acs_path to run "
            "the paper's data): Adult's variables and strata, not the figure's")


def public_strata_ids(frame: Any, columns: Sequence[str], private: np.ndarray) -> tuple[np.ndarray, int]:
    """Stratum ids ``[n]`` and their number ``k``: the value combinations of ``columns`` seen in the
    public rows (``~private``), sorted; a row whose combination no public row has gets id ``k`` (the
    group outside every stratum). A function of the public rows and of each row's own values only,
    so a private record changes no other row's id and not ``k``."""
    key = frame[list(columns)].astype(str).agg("|".join, axis=1).to_numpy()
    names = np.unique(key[~np.asarray(private, bool)])
    g = np.searchsorted(names, key)
    found = (g < len(names)) & (names[np.minimum(g, max(len(names) - 1, 0))] == key) if len(names) else g < 0
    return np.where(found, g, len(names)).astype(np.int32), int(len(names))


def run_strata(config: dict, ctx: Any):
    import pandas as pd

    from dpfair_jax.fairness.metrics import parity_error

    try:
        frame = _strata_frame(config)
    except (ImportError, FileNotFoundError) as err:
        ctx.log(f"strata part skipped: {type(err).__name__}: {err}")
        _skip_part(ctx, "strata", config, f"data unavailable ({type(err).__name__}: {err})")
        return None
    variables, cols = list(config["variables"]), list(config["strata_columns"])
    frame = frame.dropna(subset=variables + cols).reset_index(drop=True)
    n = len(frame)
    rng = np.random.default_rng(int(config["seed"]))
    priv = rng.permutation(n) < n // 2
    combos = [c for r in range(1, len(cols) + 1) for c in itertools.combinations(cols, r)]
    ids, pub_w, ks = [], [], []
    for combo in combos:
        g, k = public_strata_ids(frame, combo, priv)
        ids.append(g)
        ks.append(k)
    K = max(ks) + 1  # + the "public half" group
    S = np.full((len(combos), n), K - 1, np.int32)
    W = np.zeros((len(combos), K), np.float32)
    kept_k = []
    for i, g in enumerate(ids):
        pub_counts = np.bincount(g[~priv], minlength=K)
        keep = pub_counts > float(config["min_stratum_fraction"]) * (~priv).sum()
        keep[K - 1] = False
        S[i] = np.where(priv & keep[g], g, K - 1)
        W[i] = np.where(keep, pub_counts, 0)
        kept_k.append(int(keep.sum()))
    X = np.stack([frame[v].to_numpy(np.float64) for v in variables]).astype(np.float32)
    prior = np.array([config["variable_prior"][v] for v in variables], np.float32)  # [V, 3]
    scale = prior[:, 2] if config["scale_mode"] == "public_scale" else np.ones(len(variables), np.float32)
    Xs = X / scale[:, None]
    c0, r0 = jnp.asarray(prior[:, 0] / scale), jnp.asarray(prior[:, 1] / scale)
    scale = jnp.asarray(scale)
    rhos = jnp.asarray(me.coinpress_rhos(float(config["rho"]), config["rho_split"]), jnp.float32)
    Sj, Wj, Xj = jnp.asarray(S), jnp.asarray(W), jnp.asarray(Xs)
    glob_s = jnp.asarray(np.where(priv, 0, 1).astype(np.int32))
    runs = int(config["strata_runs"])

    arrays = {"X": Xj, "S": Sj, "W": Wj, "glob": glob_s, "c0": c0, "r0": r0, "scale": scale}
    public_sizes = config["relation"] == "replace_one_within_group"  # exact sizes public only within a group

    def one(key, data, combo, variable):  # data passed as arguments (not baked-in constants)
        combo_idx, var_idx = combo, variable
        Xj, Sj, Wj, glob_s = data["X"], data["S"], data["W"], data["glob"]
        c0, r0, scale = data["c0"], data["r0"], data["scale"]
        x = Xj[var_idx]
        s = Sj[combo_idx]
        k1, k2 = jax.random.split(key)
        opts = dict(center=c0[var_idx], radius=r0[var_idx], rhos=rhos, relation=config["relation"])
        g = me.stratified_coinpress(k1, x, glob_s, 2, weights=jnp.array([1.0, 0.0]), **opts).estimate[0]
        counts = jax.ops.segment_sum(jnp.ones_like(x), s, num_segments=K)
        w_exact = jnp.where(jnp.arange(K) < K - 1, counts, 0.0)
        # replace-one within a group: exact private-half sizes (public by the relation); add/remove
        # and replace-one: the noisy counts, renormalized over the strata kept on the public half
        st = me.stratified_coinpress(k2, x, s, K, weights=w_exact if public_sizes else None, **opts)
        if public_sizes:
            st_est = st.estimate[0]
        else:
            w_noisy = jnp.where(Wj[combo_idx] > 0, st.weights, 0.0)
            st_est = (w_noisy / jnp.maximum(jnp.sum(w_noisy), 1e-12)) @ st.group_means[:, 0]
        wp = jnp.where(st.present, Wj[combo_idx], 0.0)
        pub = (wp / jnp.maximum(jnp.sum(wp), 1e-12)) @ st.group_means[:, 0]
        true_g = jax.ops.segment_sum(x, s, num_segments=K) / jnp.maximum(counts, 1.0)
        true = jnp.sum(jnp.where(glob_s == 0, x, 0.0)) / jnp.sum(glob_s == 0)
        mask = (st.present & (jnp.arange(K) < K - 1)).astype(jnp.float32)
        sc = scale[var_idx]
        pe = {}
        for name, est_g in (("coinpress", jnp.full((K,), g)), ("strat", st.group_means[:, 0])):
            pe[name] = parity_error(true_g * sc, est_g * sc, normalize=False, group_mask=mask)
            pe[name + "_def10"] = parity_error(true_g * sc, est_g * sc, true * sc,
                                               (g if name == "coinpress" else st_est) * sc,
                                               group_mask=mask)
        return {"err_coinpress": jnp.abs(g - true) * sc, "err_strat": jnp.abs(st_est - true) * sc,
                "err_pub_strat": jnp.abs(pub - true) * sc,
                "parity_coinpress": pe["coinpress"], "parity_strat": pe["strat"],
                "parity10_coinpress": pe["coinpress_def10"], "parity10_strat": pe["strat_def10"]}

    t0 = time.perf_counter()
    res = mc.sweep(one, jax.random.key(int(config["seed"]) + 2),
                   {"combo": np.arange(len(combos), dtype=np.int32),
                    "variable": np.arange(len(variables), dtype=np.int32)}, runs, chunk_size=64,
                   data=arrays)
    jax.block_until_ready(res.values)
    ctx.log(f"strata: {len(combos)} combinations x {len(variables)} variables x {runs} runs, "
            f"K={K}, {time.perf_counter() - t0:.1f} s")
    # each (method, combination, variable) is one release on the private half
    ctx.record_privacy("strata_coinpress_and_stratcoinpress_rho",
                       _coinpress_spend(config, K, config["relation"]))
    df = res.to_frame()
    df["strata"] = [",".join(combos[i]) for i in df["combo"]]
    df["k"] = [kept_k[i] for i in df["combo"]]
    df["variable"] = [variables[i] for i in df["variable"]]
    ctx.save_table(df, "strata")
    agg = df.groupby(["variable", "strata", "k"]).mean(numeric_only=True).reset_index()
    ctx.save_table(agg, "strata_summary")
    parity_frac = float(np.mean(agg.parity_strat < agg.parity_coinpress))
    source = strata_source(config)
    ctx.add_claim("strata_parity", "Fig. 2: StratCOINPRESS has lower parity error (sum of absolute "
                  "stratum errors) than one global COINPRESS estimate, per (variable, strata "
                  f"combination); {source}", measured=round(parity_frac, 3), target=">= 0.9",
                  passed=bool(parity_frac >= 0.9), reason=WHY_NOT["strata_parity"])
    sig = strata_improvement_test(df)
    statement = ("Fig. 2: stratification 'can sometimes improve' the global mean: in at least one (variable, strata "
                 "combination) StratCOINPRESS's mean |error| of the global estimate is below COINPRESS's by more than "
                 "the one-sided t critical value (paired by run, family-wise level 0.05, Bonferroni over all cells); "
                 + strata_source(config))
    if sig["runs"] < 3:
        ctx.skip_claim("strata_global_error", statement, f"{sig['runs']} runs per cell: too few for a t test "
                       "(needs >= 3)", target=">= 1 significant cell")
    else:
        ctx.add_claim("strata_global_error", statement,
                      measured={k: v for k, v in sig.items() if k != "significant_cells"}
                      | {"significant_cells": sig["significant_cells"][:5]},
                      target=">= 1 significant cell", passed=bool(sig["num_significant"] >= 1),
                      reason=WHY_NOT["strata_global_error"])
    figures.strata(agg, ctx, variables)
    return df


def strata_improvement_test(df, level: float = 0.05) -> dict[str, Any]:
    """Cells (variable, strata combination) where the stratified global estimate beats COINPRESS.

    Per cell, ``d_r = err_coinpress_r - err_strat_r`` over the ``R`` runs (run ``r`` shares its key
    across cells, so the pairs are by run); a cell is significant when ``mean(d) / (sd(d)/sqrt(R))``
    exceeds the one-sided Student t quantile ``t_{1 - level/m, R-1}`` (Bonferroni over the ``m``
    cells), so under "stratification never helps" (every cell's mean ``d <= 0``) the chance of one
    or more significant cells is at most ``level``."""
    from scipy import stats

    cols = ["variable", "strata"]
    d = df.assign(d=df["err_coinpress"] - df["err_strat"]).groupby(cols)["d"]
    cells = d.agg(["mean", "std", "count"]).reset_index()
    runs = int(cells["count"].min()) if len(cells) else 0
    m = len(cells)
    if runs < 2 or m == 0:
        return {"runs": runs, "cells": m, "num_significant": 0, "significant_cells": [], "t_crit": None,
                "max_t": None}
    t = cells["mean"] / (cells["std"] / np.sqrt(cells["count"]))
    t = t.where(cells["std"] > 0, np.inf * np.sign(cells["mean"]))
    t_crit = float(stats.t.ppf(1.0 - level / m, runs - 1))
    sig = cells[t > t_crit].assign(t=t[t > t_crit]).sort_values("t", ascending=False)
    return {"runs": runs, "cells": m, "t_crit": round(t_crit, 3), "max_t": round(float(t.max()), 3),
            "num_significant": int(len(sig)),
            "significant_cells": [f"{r.variable}: {r.strata} (t={r.t:.1f})" for r in sig.itertuples()]}


# ------------------------------------------------------------------------------------------------
# synthesis (Figs. 4, 5, 7)
# ------------------------------------------------------------------------------------------------
def run_synthesis(config: dict, ctx: Any):
    from dpfair_jax.studies import synthesis as syn

    try:
        table = syn.adult_synthesis_table(path=config.get("adult_path"))
    except (ImportError, FileNotFoundError) as err:
        ctx.log(f"synthesis part skipped: {type(err).__name__}: {err}")
        _skip_part(ctx, "synthesis", config, f"data unavailable ({type(err).__name__}: {err})")
        return None
    df = syn.synthesis_study(
        table, epsilons=config["synth_epsilons"], variants=config["synth_variants"],
        seeds=int(config["synth_seeds"]), synthesizer=config["synthesizer"],
        delta=float(config["synth_delta"]), max_rows=int(config["synth_rows"]) or None,
        trees=int(config["classifier_trees"]), seed=int(config["seed"]),
        domains=syn.adult_synthesis_domains())  # public schema (documented categories and ranges)
    ctx.save_table(df, "synthesis")
    agg = df.groupby(["variant", "epsilon"]).mean(numeric_only=True).reset_index()
    ctx.save_table(agg, "synthesis_summary")
    piv = agg.pivot(index="epsilon", columns="variant", values="parity_error")
    strat_cols = [c for c in piv.columns if c != "vanilla"]
    if "vanilla" not in piv.columns or not strat_cols:
        _skip_part(ctx, "synthesis", config, f"needs 'vanilla' and a stratified variant, the config has "
                   f"{list(config['synth_variants'])}")
        figures.synthesis(agg, ctx)
        for eps in config["synth_epsilons"]:
            ctx.record_privacy(f"synth_eps_{eps:g}", syn.study_spend(float(eps), float(config["synth_delta"])))
        return df
    wins = float(np.mean([(piv[c] < piv["vanilla"]).mean() for c in strat_cols])) if strat_cols else float("nan")
    cells = {f"{c}@{e:g}": bool(piv.loc[e, c] < piv.loc[e, "vanilla"]) for c in strat_cols for e in piv.index}
    ctx.add_claim("synthesis_parity", "Fig. 5: stratified synthesizers have lower parity error "
                  "(Def. 10 on column means, omega = 1/12) than vanilla (fraction of (variant, epsilon)); measured "
                  "with the MST-like JAX marginal synthesizer",
                  measured={"fraction": round(wins, 3), "cells": len(cells), "lower": [k for k, v in cells.items() if v]},
                  target=">= 0.5 (most)", passed=bool(wins >= 0.5), status="reconstruction",
                  reason=WHY_NOT["synthesis_parity"])
    acc = agg.pivot(index="epsilon", columns="variant", values="accuracy")
    drop = float(np.max([(acc["vanilla"] - acc[c]).max() for c in strat_cols])) if strat_cols else float("nan")
    ctx.add_claim("synthesis_accuracy", "Fig. 4: stratification costs little downstream accuracy "
                  "(largest accuracy drop vs vanilla over epsilon); measured with the MST-like JAX marginal "
                  "synthesizer", measured=round(drop, 4), target="<= 0.05", passed=bool(drop <= 0.05),
                  status="reconstruction", reason=WHY_NOT["synthesis_accuracy"])
    ctx.add_claim("synthesis_parity_gem", "Fig. 5: stratified GEM reduces parity error (by >= 200%) and gives the "
                  "best parity error at nearly every epsilon", measured=None, target="GEM stratified < GEM vanilla",
                  passed=False, status="untestable", reason=WHY_NOT["synthesis_parity_gem"])
    _aim(table, config, ctx)
    ctx.add_claim("synthesis_workload_fig9", FIG9_STATEMENT, measured=None,
                  target="stratified < vanilla 3-way workload parity error (GEM; AIM at epsilon < 1)", passed=False,
                  status="untestable", reason=WHY_NOT["synthesis_workload_fig9"])
    figures.synthesis(agg, ctx)
    for eps in config["synth_epsilons"]:
        ctx.record_privacy(f"synth_eps_{eps:g}", syn.study_spend(float(eps), float(config["synth_delta"])))
    return df


AIM_STATEMENT = ("Fig. 5: stratified AIM has lower parity error than vanilla AIM at higher budgets (fraction of "
                 "(variant, epsilon); smartnoise-synth's AIM)")


def aim_skip_reason(why: str) -> str:
    """The skipped AIM row's reason: the optional extra is absent (``why``), nothing is installed,
    and what the kit's own synthesizer covers in its place."""
    return (f"skipped: the optional synth extra (smartnoise-synth) is not installed here ({why}); the row "
            "needs AIM itself. The kit's MST-like JAX marginal synthesizer covers only the vanilla vs stratified "
            "comparison on Adult with all one- and two-way marginals measured at once (rows synthesis_parity and "
            "synthesis_accuracy, labelled reconstructions): none of AIM's workload- and budget-adaptive selection, "
            "so it says nothing about this row's claim")


def _aim(table: Any, config: dict, ctx: Any) -> None:
    """The optional AIM run (smartnoise-synth, the ``synth`` extra): skipped with the reason when the
    extra is absent or the config turns it off."""
    from dpfair_jax.studies import aim
    from dpfair_jax.studies import synthesis as syn

    if not config.get("synth_aim", True):
        ctx.skip_claim("synthesis_parity_aim", AIM_STATEMENT, "AIM turned off in this config (synth_aim = false)")
        return
    ok, why = aim.aim_available()
    if not ok:
        ctx.log(f"AIM skipped: {why}")
        ctx.skip_claim("synthesis_parity_aim", AIM_STATEMENT, aim_skip_reason(why))
        return
    variants = list(config["aim_variants"])
    df = ctx.map_chunks([{"synthesizer": "aim"}], lambda chunk: syn.synthesis_study(
        table, epsilons=config["aim_epsilons"], variants=variants, seeds=int(config["synth_seeds"]),
        synthesizer="aim", delta=float(config["synth_delta"]), max_rows=int(config["aim_rows"]) or None,
        trees=int(config["classifier_trees"]), seed=int(config["seed"]),
        domains=syn.adult_synthesis_domains()), desc="synthesis_aim")
    ctx.save_table(df, "synthesis_aim")
    piv = df.groupby(["variant", "epsilon"]).parity_error.mean().unstack("variant")
    strat = [c for c in piv.columns if c != "vanilla"]
    if "vanilla" not in piv.columns or not strat:
        ctx.skip_claim("synthesis_parity_aim", AIM_STATEMENT, f"needs 'vanilla' and a stratified variant in "
                       f"aim_variants {variants}")
        return
    wins = float(np.mean([(piv[c] < piv["vanilla"]).mean() for c in strat]))
    ctx.add_claim("synthesis_parity_aim", AIM_STATEMENT,
                  measured={"fraction": round(wins, 3), "parity_error": piv.round(4).to_dict()},
                  target=">= 0.5 (most)", passed=bool(wins >= 0.5), reason=WHY_NOT["synthesis_parity_aim"])
    for eps in config["aim_epsilons"]:
        ctx.record_privacy(f"synth_aim_eps_{eps:g}", syn.study_spend(float(eps), float(config["synth_delta"])))


# ------------------------------------------------------------------------------------------------
def part_claims(part: str, config: dict) -> list[tuple[str, str, str]]:
    """``(id, statement, kind)`` of every claim and formula check ``part`` records (for the
    skipped rows of a part the config leaves out or whose data are missing)."""
    table = {
        "theory": [("thm9_identity", "Theorem 9: E sum_i log(n g_i) = k(psi(alpha) - psi(k alpha) + log n)", "claim"),
                   ("thm9_bounds", "Theorem 9's closed form against SciPy, increasing in alpha, <= k log(n/k)",
                    "formula"),
                   ("thm9_practical", "ACS NY race example: expected error about 80% better than the worst case",
                    "claim"),
                   ("laplace_tail", "Def. 5: P(|Lap(b)| >= a b) = e^-a", "claim"),
                   ("strat_laplace_var", "Monte Carlo variance of the stratified Laplace noise equals its closed form",
                    "claim"),
                   ("strat_gaussian_var", "Monte Carlo variance of the stratified Gaussian noise equals its closed "
                    "form", "claim"),
                   ("strat_var_ratio_le_k", "Stratified/global Laplace noise variance (Monte Carlo) <= k", "claim"),
                   ("prop8_shape", "Prop. 8: normalized error quantile is O(1) in k and gamma", "claim"),
                   ("prop8_sqrt_k", "Prop. 8: stratified error quantile / global <= sqrt(k)", "claim")],
        "mixture": [("mixture_converges", "Fig. 3: the stratified/COINPRESS error ratio falls as n grows (interval "
                     "on the slope)", "claim")]
        + [(f"mixture_1pct_k{int(k)}", f"Fig. 3: StratCOINPRESS mean error <= 0.01 for n >= 10000 (k={int(k)})",
            "claim") for k in sorted(set(config["ks"]))]
        + [("reference_code_bug", "The public code's stored 'StratCOINPRESS' has errors far below any private "
            "stratified estimate", "claim"),
           ("coinpress_scale", "COINPRESS's error on unit data is its last step's noise (within 4 SE)", "claim"),
           ("mixture_one_program", "The whole Fig. 3 grid runs as one compiled program in seconds", "claim")],
        "strata": [("strata_parity", "Fig. 2: StratCOINPRESS has lower parity error than global COINPRESS; "
                    + strata_source(config), "claim"),
                   ("strata_global_error", "Fig. 2: stratification can sometimes improve the global mean "
                    "(significant in at least one cell); " + strata_source(config), "claim")],
        "synthesis": [("synthesis_parity", "Fig. 5: stratified synthesizers have lower parity error than vanilla "
                       "(MST-like JAX marginal synthesizer)", "claim"),
                      ("synthesis_accuracy", "Fig. 4: stratification costs little downstream accuracy", "claim"),
                      ("synthesis_parity_gem", "Fig. 5: stratified GEM reduces parity error", "claim"),
                      ("synthesis_parity_aim", AIM_STATEMENT, "claim"),
                      ("synthesis_workload_fig9", FIG9_STATEMENT, "claim")],
    }
    return table[part]


def _skip_part(ctx: Any, part: str, config: dict, reason: str) -> None:
    for cid, statement, kind in part_claims(part, config):
        ctx.skip_claim(cid, statement, reason, kind=kind)


def run(config: dict, ctx: Any):
    parts = list(config["parts"])
    unknown = set(parts) - {"theory", "mixture", "strata", "synthesis"}
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from theory, mixture, strata, synthesis.")
    if config["relation"] not in me.RELATIONS:
        raise ValueError(f"relation must be one of {me.RELATIONS}, got {config['relation']!r}.")
    out = None
    for part, fn in (("theory", run_theory), ("mixture", run_mixture), ("strata", run_strata),
                     ("synthesis", run_synthesis)):
        if part not in parts:
            _skip_part(ctx, part, config, f"part {part!r} not in this config's parts {parts}")
            continue
        # quick runs compile fast (the runner's compile_mode); theory (the loggamma sampler) and
        # strata (393 strata x 48,842 rows per trial) are run-bound: measured faster optimized
        if part in ("mixture", "synthesis"):
            res = fn(config, ctx)
        else:
            with ctx.optimized_build():
                res = fn(config, ctx)
        if part == "mixture":
            out = res
    return out


EXPERIMENT = register(Experiment(
    name="paper_003",
    paper="003",
    description="Stratified private estimation: Thm 9 / Prop 8 checks, COINPRESS vs StratCOINPRESS "
                "on the Gaussian mixture (Fig 3), Adult strata (Fig 2), stratified synthesis (Figs 4-5)",
    configs={"quick": QUICK, "full": FULL},
    run=run,
))
