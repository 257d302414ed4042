"""Exact success probabilities and sample complexities of paper 002's algorithms (Alabi).

Algorithm 1 (exponential sampling over a finite public grid) has a known output law: the softmax
of ``-epsilon h(ell(c_m, D)) / (2 Delta_h)`` over the grid, ``Delta_h = (L_f + G L_g) sqrt(K)/n``.
Its probability of solving the CGOO (``f <= f* + alpha`` and ``g <= alpha``, Def. 1.2) is therefore
a finite sum, computed here exactly (no Monte Carlo) for any epsilon and ``n``. The private
linear-optimization oracle ``LOPT_{eps,0}`` of Algorithm 2 (Thm. 5.10) is an exponential mechanism
too, so its probability of missing the ``tau ||w||`` accuracy of Def. 1.3 is also exact.

On a fixed empirical distribution (the loss matrix held fixed while ``n`` grows, i.e. the data
replicated), ``n`` enters both laws only through the sensitivity ``~ 1/n``; the smallest ``n``
that reaches a success level is then found on a log grid of ``n`` (``smallest_n``). The paper
treats empirical risk only (no generalization), so this isolates the price of privacy that its
sample complexities (Thm. 5.2: ``n0 = O(K P / (eps alpha^2))``; Cor. 5.11: ``O~(K^4 P /
(eps alpha^3))``) describe.

Public names: :class:`ScalingInstance`, :func:`multitask_instance`, :func:`success_mask`,
:func:`alg1_log_success`, :func:`lopt_log_failure`, :func:`smallest_n`, :func:`alg1_n0`,
:func:`alg1_bound_n0`, :func:`alg2_analysis_n0`, :func:`fit_exponents`.

Privacy: nothing here releases data; the functions evaluate the output laws of the kit's
mechanisms (:func:`dpfair_jax.algorithms.reductions.exponential_sampling_logits`,
:func:`dpfair_jax.privacy.mechanisms.exponential_mechanism_logits`, the sensitivities of
:func:`~dpfair_jax.algorithms.reductions.h_sensitivity` and
:func:`~dpfair_jax.algorithms.reductions.loss_sensitivity`) at the budgets the algorithms spend.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.algorithms import reductions as R
from dpfair_jax.privacy import mechanisms as _mech

__all__ = [
    "ScalingInstance",
    "multitask_instance",
    "success_mask",
    "alg1_probs",
    "alg1_log_success",
    "lopt_log_failure",
    "smallest_n",
    "alg1_n0",
    "alg1_bound_n0",
    "alg2_analysis_n0",
    "fit_exponents",
]


class ScalingInstance(NamedTuple):
    """A CGOO instance on a public decision grid: ``losses [M, K]`` in ``[0, 1]``, the ``problem``
    (``f``, ``g`` 1-Lipschitz, non-decreasing), the thresholds ``eta [K]`` and the ``decisions [M]``."""

    losses: np.ndarray
    problem: Any
    eta: np.ndarray
    decisions: np.ndarray


def multitask_instance(num_groups: int, num_decisions: int = 1001, *, noise_var: float = 0.05,
                       slack: float = 0.5) -> ScalingInstance:
    """The K-coordinate family of the sample-complexity sweep.

    Every example carries ``K`` targets ``y_k`` with mean ``mu_k = linspace(0, 1, K)_k`` and variance
    ``noise_var``; the decision is a scalar ``c`` on ``linspace(0, 1, num_decisions)`` and the
    per-example loss vector is ``((c - y_k)^2 + noise_var) / (1 + noise_var)``-scaled so that the
    population loss ``l_k(c) = ((c - mu_k)^2 + noise_var) / (1 + noise_var)`` lies in ``[0, 1]``.
    Every coordinate is an average over all ``n`` examples, so Lemma 5.1's ``sqrt(K)/n`` is the
    actual sensitivity (not a loose bound, as it is for itemized group losses).

    ``f(l) = sum_k l_k / sqrt(K)`` and ``g(l) = l_K - eta_K`` (a cap on the last coordinate, set
    ``slack`` of the way from its best value to its value at the unconstrained optimum; the other
    coordinates get the inactive cap 1): convex, 1-Lipschitz and non-decreasing, as Thm. 5.2 and
    Cor. 5.11 assume. Public: nothing here depends on private data."""
    K = int(num_groups)
    M = int(num_decisions)
    if K < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups!r}.")
    if M < 3:
        raise ValueError(f"num_decisions must be >= 3, got {num_decisions!r}.")
    if not 0.0 < float(slack) < 1.0:
        raise ValueError(f"slack must lie in (0, 1), got {slack!r}.")
    if not float(noise_var) >= 0.0:
        raise ValueError(f"noise_var must be >= 0, got {noise_var!r}.")
    c = np.linspace(0.0, 1.0, M)
    mu = np.linspace(0.0, 1.0, K) if K > 1 else np.ones(1)
    L = ((c[:, None] - mu[None, :]) ** 2 + float(noise_var)) / (1.0 + float(noise_var))
    f = R.linear_objective(np.full(K, 1.0 / math.sqrt(K)), name="mean_over_sqrtK")
    best = L[:, -1].min()
    at_unconstrained = L[int(np.argmin(L.sum(1))), -1]
    eta = np.ones(K)
    eta[-1] = best + float(slack) * (at_unconstrained - best)
    problem = R.CGOO(f, R.bounded_group_loss(eta), K)
    return ScalingInstance(L, problem, eta, c)


def success_mask(losses: Any, problem: Any, alpha: float) -> tuple[np.ndarray, float]:
    """Which grid decisions solve the CGOO to ``alpha`` (Def. 1.2): ``f <= f* + alpha`` and
    ``g <= alpha``, with ``f*`` the best feasible grid decision (the set Algorithm 1 samples from).
    Returns ``(mask [M], f_star)``; ``f`` and ``g`` are evaluated as the mechanisms do (float32)."""
    L = jnp.asarray(losses, jnp.float32)
    fv = np.asarray(jax.vmap(problem.f)(L), np.float64)
    gv = np.asarray(jax.vmap(problem.g)(L), np.float64)
    if not np.any(gv <= 0):
        raise ValueError("no grid decision satisfies g <= 0: the CGOO instance is infeasible on the grid.")
    f_star = float(fv[gv <= 0].min())
    return (fv <= f_star + float(alpha)) & (gv <= float(alpha)), f_star


def _log_mass(logits: jax.Array, mask: Any) -> jax.Array:
    """``log sum_{m in mask} softmax(logits)_m`` over the last axis (log space: tiny masses stay finite)."""
    m = jnp.asarray(mask, bool)
    return (jax.nn.logsumexp(jnp.where(m, logits, -jnp.inf), axis=-1)
            - jax.nn.logsumexp(logits, axis=-1))


def alg1_probs(losses: Any, problem: Any, G: float, n: int, epsilon: Any) -> np.ndarray:
    """Algorithm 1's output law ``[E, M]`` at each ``epsilon`` (``[E]``) for a data set of ``n`` rows:
    the softmax of :func:`~dpfair_jax.algorithms.reductions.exponential_sampling_logits` with
    ``Delta_h`` = :func:`~dpfair_jax.algorithms.reductions.h_sensitivity` (the law
    :func:`~dpfair_jax.algorithms.reductions.exponential_sampling` draws from)."""
    eps = np.atleast_1d(np.asarray(epsilon, np.float64))
    sens = R.h_sensitivity(problem, int(n), G)
    logits = R.exponential_sampling_logits(jnp.asarray(losses, jnp.float32), problem, G=G,
                                           epsilon=jnp.asarray(eps, jnp.float32), sensitivity=sens)
    return np.asarray(jax.nn.softmax(logits, axis=-1), np.float64)


def alg1_log_success(losses: Any, problem: Any, G: float, mask: Any, epsilon: Any, n: Any) -> np.ndarray:
    """``log P[Algorithm 1 returns a decision in mask]``, exact, for every ``(epsilon, n)`` of the
    broadcast arrays: the output law is the softmax of
    :func:`~dpfair_jax.algorithms.reductions.exponential_sampling_logits` with ``Delta_h`` =
    :func:`~dpfair_jax.algorithms.reductions.h_sensitivity` at ``n`` (``(L_f + G L_g) sqrt(K)/n``)."""
    eps, nn = np.broadcast_arrays(np.asarray(epsilon, np.float64), np.asarray(n, np.float64))
    sens = R.h_sensitivity(problem, 1, G) / nn  # Delta_h at n: the n = 1 value over n
    logits = R.exponential_sampling_logits(jnp.asarray(losses, jnp.float32), problem, G=G,
                                           epsilon=jnp.asarray(eps.ravel(), jnp.float32),
                                           sensitivity=jnp.asarray(sens.ravel(), jnp.float32))
    return np.asarray(_log_mass(logits, mask), np.float64).reshape(eps.shape)


def lopt_log_failure(losses: Any, weights: Any, tau: float, epsilon: Any, n: Any) -> np.ndarray:
    """``log P[LOPT_{eps,0}(w) misses tau ||w||]``, exact: the oracle of Thm. 5.10 (the kit's
    :func:`~dpfair_jax.algorithms.reductions.lopt_grid_private`) samples ``m`` with logits
    ``-eps (w/||w||) . ell_m / (2 sqrt(K)/n)``; it fails when ``w . ell_m > min_m' w . ell_m' +
    tau ||w||`` (Def. 1.3). Broadcast over ``epsilon`` and ``n``."""
    L = np.asarray(losses, np.float64)
    w = np.asarray(weights, np.float64)
    norm = float(np.linalg.norm(w))
    if not norm > 0:
        raise ValueError("weights must be a nonzero vector.")
    score = L @ (w / norm)
    fail = score > score.min() + float(tau)
    eps, nn = np.broadcast_arrays(np.asarray(epsilon, np.float64), np.asarray(n, np.float64))
    sens = R.loss_sensitivity(1, L.shape[1]) / nn
    logits = _mech.exponential_mechanism_logits(jnp.asarray(score, jnp.float32),
                                                epsilon=jnp.asarray(eps.ravel(), jnp.float32),
                                                sensitivity=jnp.asarray(sens.ravel(), jnp.float32))
    return np.asarray(_log_mass(logits, fail), np.float64).reshape(eps.shape)


def smallest_n(n_grid: Any, ok: Any, score: Any | None = None, threshold: float | None = None) -> float:
    """The smallest ``n`` from which ``ok`` holds at every larger grid point (``inf`` if it fails
    at the largest). With ``score``/``threshold`` (``ok = score >= threshold``) the crossing is
    interpolated linearly in ``log n`` between the last failing and the first passing grid point."""
    n = np.asarray(n_grid, np.float64)
    good = np.asarray(ok, bool)
    if n.ndim != 1 or n.size < 2 or np.any(np.diff(n) <= 0):
        raise ValueError("n_grid must be an increasing 1-D grid of at least 2 sizes.")
    if good.shape != n.shape:
        raise ValueError(f"ok must have the grid's shape {n.shape}, got {good.shape}.")
    if not good[-1]:
        return math.inf
    bad = np.flatnonzero(~good)
    if bad.size == 0:
        return float(n[0])
    i = int(bad[-1])  # last failing point; i + 1 passes and every later point passes
    if score is None:
        return float(n[i + 1])
    s = np.asarray(score, np.float64)
    lo, hi = s[i] - float(threshold), s[i + 1] - float(threshold)
    t = 1.0 if hi == lo else float(np.clip(-lo / (hi - lo), 0.0, 1.0))
    return float(np.exp(np.log(n[i]) + t * (np.log(n[i + 1]) - np.log(n[i]))))


def alg1_n0(inst: ScalingInstance, alpha: float, epsilon: float, n_grid: Any, *, level: float = 0.9
            ) -> dict[str, Any]:
    """Algorithm 1's exact sample complexity on ``inst``: the smallest ``n`` from which it solves the
    CGOO to ``alpha`` with probability ``>= level`` (Thm. 5.2's event), ``G`` of Cor. 4.2.
    Returns ``n0``, ``G``, ``f_star``, the number of successful grid decisions and the probability
    at the largest grid ``n``."""
    prob = inst.problem
    G = R.penalty_weight(alpha, prob.num_groups, prob.f.lipschitz)
    mask, f_star = success_mask(inst.losses, prob, alpha)
    n = np.asarray(n_grid, np.float64)
    logp = alg1_log_success(inst.losses, prob, G, mask, epsilon, n)
    p = np.exp(logp)
    n0 = smallest_n(n, p >= level, p, level)
    return {"n0": n0, "G": G, "f_star": f_star, "successful_decisions": int(mask.sum()),
            "p_at_largest_n": float(p[-1])}


def alg1_bound_n0(inst: ScalingInstance, alpha: float, epsilon: float, *, level: float = 0.9) -> float:
    """The explicit sufficient ``n`` behind Thm. 5.2 on a finite grid: Thm. 3.6 (excess ``h`` at most
    ``2 Delta_h log(M / rho) / epsilon`` with probability ``1 - rho``) with ``rho = 1 - level`` and
    Lemma 4.1 / Cor. 4.2 (excess ``h <= alpha`` solves the CGOO): ``n = 2 (L_f + G L_g) sqrt(K)
    log(M / rho) / (epsilon alpha)``."""
    prob = inst.problem
    G = R.penalty_weight(alpha, prob.num_groups, prob.f.lipschitz)
    M = inst.losses.shape[0]
    sens1 = R.h_sensitivity(prob, 1, G)
    return float(2.0 * sens1 * math.log(M / (1.0 - level)) / (float(epsilon) * float(alpha)))


def alg2_analysis_n0(inst: ScalingInstance, alpha: float, epsilon: float, delta: float, n_grid: Any, *,
                     level: float = 0.9) -> dict[str, Any]:
    """The sample size Algorithm 2's analysis needs on ``inst`` (Thm. 5.5 + Thm. 5.10 + Lemma 5.8 ->
    Cor. 5.11), with the oracle's exact law instead of Bassily et al.'s tail bound.

    Thm. 5.5 sets ``tau = alpha / (6 K (1 + G))`` and ``T = ceil(36 (1+K) K^2 (1+G)^2 (3+alpha)^2 /
    alpha^2)`` (:func:`dpfair_jax.analysis.sample_complexity.theorem55_parameters`, ``G`` of
    Cor. 4.2); each of the ``T`` oracle calls gets the kit's per-round oracle budget
    (:func:`~dpfair_jax.algorithms.reductions.algorithm2_budget`, Laplace-released weights, pure
    oracle, advanced composition to ``(epsilon, delta)``); the union bound over the calls (Cor. 5.11's
    proof) asks each call to miss ``tau ||w||`` with probability at most ``(1 - level) / T``. On this
    instance line 10's weight takes two values only, ``grad f`` and ``grad f + G grad g`` (``g`` is
    a cap on one coordinate), so the requirement is checked for both. Returns ``n0`` (smallest grid
    ``n``, ``inf`` if none), ``T``, ``tau``, ``G``, ``oracle_epsilon``."""
    from dpfair_jax.analysis import sample_complexity as S

    prob = inst.problem
    K = prob.num_groups
    G = R.penalty_weight(alpha, K, prob.f.lipschitz)
    par = S.theorem55_parameters(K, alpha, G=G)
    T, tau = int(par["T"]), float(par["tau"])
    n = np.asarray(n_grid, np.float64)
    budget = R.algorithm2_budget(float(epsilon), float(delta), T, n=int(n[0]), num_groups=K)
    gf = np.full(K, 1.0 / math.sqrt(K))
    gg = np.zeros(K)
    gg[-1] = 1.0
    allowed = math.log((1.0 - level) / T)
    worst = np.max(np.stack([lopt_log_failure(inst.losses, w, tau, budget.oracle_epsilon, n)
                             for w in (gf, gf + G * gg)]), axis=0)
    n0 = smallest_n(n, worst <= allowed, -worst, -allowed)
    return {"n0": n0, "T": T, "tau": tau, "G": G, "oracle_epsilon": float(budget.oracle_epsilon)}


def fit_exponents(frame: Any, response: str, predictors: dict[str, str], *, level: float = 0.95) -> dict[str, Any]:
    """Least-squares exponents of ``log(response) = a + sum_j b_j log(x_j)`` over the finite rows of
    ``frame``, with ``level`` t-intervals (the residuals measure how far the rows are from one power
    law; the values themselves are exact). ``predictors`` maps a name to a column; ``b_j`` is the
    exponent of that column. Returns ``{name: {"exponent", "ci"}, "rows", "max_abs_residual"}``."""
    from scipy import stats

    y = np.asarray(frame[response], np.float64)
    cols = [np.asarray(frame[c], np.float64) for c in predictors.values()]
    keep = np.isfinite(y) & (y > 0)
    for c in cols:
        keep &= np.isfinite(c) & (c > 0)
    X = np.column_stack([np.ones(int(keep.sum()))] + [np.log(c[keep]) for c in cols])
    yy = np.log(y[keep])
    dof = len(yy) - X.shape[1]
    if dof < 1:
        raise ValueError(f"fit_exponents: {len(yy)} finite rows for {X.shape[1]} coefficients; need more rows.")
    coef, *_ = np.linalg.lstsq(X, yy, rcond=None)
    resid = yy - X @ coef
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(X.T @ X)
    t = float(stats.t.ppf(0.5 + level / 2.0, dof))
    out: dict[str, Any] = {"rows": int(len(yy)), "max_abs_residual": float(np.max(np.abs(resid)))}
    for j, name in enumerate(predictors, start=1):
        half = t * math.sqrt(max(cov[j, j], 0.0))
        out[name] = {"exponent": float(coef[j]), "ci": [float(coef[j] - half), float(coef[j] + half)]}
    return out
