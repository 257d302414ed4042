"""Algorithm 1 of paper 002 (exponential sampling over a grid) and the linear optimization oracles
LOPT: exact and private over a grid, weighted least squares and its DP gradient-descent version.

Privacy: :func:`exponential_sampling` and :func:`lopt_grid_private` are pure epsilon-DP,
:func:`dp_weighted_least_squares` is (epsilon, delta)-DP with :func:`dp_gd_noise_std`, all under
replace-one (the size ``n`` public).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.privacy.clipping import glm_clipped_grad_sum
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.relations import as_relation

from .problem import CGOO, _check_loss_matrix, h_sensitivity, penalized

__all__ = [
    "exponential_sampling_logits", "exponential_sampling_probs", "exponential_sampling", "lopt_grid",
    "lopt_grid_private", "LinearParams", "weighted_least_squares", "dp_gd_noise_std", "dp_weighted_least_squares",
]

Array = jax.Array


# =============================================================================================
# Algorithm 1: exponential sampling
# =============================================================================================


def exponential_sampling_logits(losses: Array, problem: CGOO, *, G: Any, epsilon: Any, sensitivity: Any
                                ) -> Array:
    """Logits ``-epsilon h(ell(c_m, D)) / (2 Delta_h)`` of Alg. 1 line 3 over the grid (``[M]``)."""
    h = jax.vmap(lambda l: penalized(problem, l, G))(jnp.asarray(losses, jnp.float32))
    return _mech.exponential_mechanism_logits(h, epsilon=epsilon, sensitivity=sensitivity)


def exponential_sampling_probs(losses: Array, problem: CGOO, *, G: Any, epsilon: Any, n: int,
                               variant: str = "corrected") -> Array:
    """Output distribution of :func:`exponential_sampling` (softmax of the logits)."""
    _check_loss_matrix(losses, problem.num_groups)
    V.check_epsilon(epsilon)
    sens = h_sensitivity(problem, n, G, variant=variant)
    return jax.nn.softmax(exponential_sampling_logits(losses, problem, G=G, epsilon=epsilon,
                                                      sensitivity=sens))


def exponential_sampling(key: Array, losses: Array, problem: CGOO, *, G: Any, epsilon: Any, n: int,
                         variant: str = "corrected") -> Array:
    """Algorithm 1 (paper 002): sample grid index ``m`` with probability
    ``prop. exp(-epsilon h(ell(c_m, D)) / (2 Delta_h))``, ``h = f + G max(0, g)``.

    ``losses: [M, K]`` are the itemized loss vectors of a public candidate grid; ``G`` and
    ``epsilon`` may be traced (a vmapped epsilon grid is one program). Returns an ``int32`` index.
    Utility: with probability ``1 - rho`` the excess ``h`` is at most ``2 Delta_h log(M/rho)/epsilon``
    (Thm. 3.6).

    Privacy: ``epsilon``-DP (pure) under replace-one of a record (so also of a sensitive
    attribute, Def. 1.1): ``h`` moves by at most ``Delta_h`` = :func:`h_sensitivity` per candidate.
    This holds for a public ``problem`` and ``G``: thresholds, normalizers and group proportions
    inside ``f``/``g`` must not be computed from the private data (derive them from a disjoint
    public split, as the paper-002 experiments do, or release them with noise and charge it).
    """
    V.check_threefry_key(key)
    _check_loss_matrix(losses, problem.num_groups)
    V.check_epsilon(epsilon)
    V.check_choice("variant", variant, ("corrected", "paper"))
    V.check_positive("G", G, allow_zero=True)
    return _exponential_sampling(key, jnp.asarray(losses, jnp.float32), jnp.asarray(G, jnp.float32),
                                 jnp.asarray(epsilon, jnp.float32), problem=problem, n=int(n), variant=variant)


@partial(jax.jit, static_argnames=("problem", "n", "variant"))
def _exponential_sampling(key, losses, G, epsilon, *, problem, n, variant):
    sens = h_sensitivity(problem, n, G, variant=variant)
    h = jax.vmap(lambda l: penalized(problem, l, G))(losses)
    return _mech.exponential_mechanism(key, h, epsilon=epsilon, sensitivity=sens)


# =============================================================================================
# Linear optimization oracles
# =============================================================================================


def lopt_grid(losses: Array, weights: Array) -> Array:
    """Exact LOPT over a grid (Def. 1.3 with ``tau = 0``): ``argmin_m w . ell(c_m, D)``."""
    return jnp.argmin(jnp.asarray(losses) @ jnp.asarray(weights, jnp.float32)).astype(jnp.int32)


def _lopt_scores(losses, weights):
    """``w . ell(c_m, D) / ||w||`` per candidate (sensitivity ``Delta_l`` by Cauchy-Schwarz)."""
    w = jnp.asarray(weights, jnp.float32)
    norm = jnp.linalg.norm(w)
    return jnp.asarray(losses, jnp.float32) @ (w / jnp.maximum(norm, 1e-30))


@full_precision
def lopt_grid_private(key: Array, losses: Array, weights: Array, *, epsilon: Any, loss_sens: Any
                      ) -> Array:
    """LOPT_{eps,0} by the exponential mechanism (Thm. 5.10): sample ``m`` with probability
    ``prop. exp(-epsilon w.ell(c_m,D) / (2 ||w|| Delta_l))``, ``Delta_l = sqrt(K)/n``.

    Privacy: ``epsilon``-DP (replace-one) for a data-independent (or already privatized) ``w``:
    ``|w.(l - l')| <= ||w|| Delta_l`` by Cauchy-Schwarz. A zero ``w`` gives the uniform draw."""
    V.check_threefry_key(key)
    V.check_epsilon(epsilon)
    V.check_positive("loss_sens", loss_sens)
    return _mech.exponential_mechanism(key, _lopt_scores(losses, weights), epsilon=jnp.asarray(epsilon, jnp.float32),
                                       sensitivity=jnp.asarray(loss_sens, jnp.float32))


class LinearParams(NamedTuple):
    w: Array
    b: Array


def _design(x, fit_intercept):
    x = jnp.asarray(x, jnp.float32)
    if fit_intercept:
        return jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], axis=1)
    return x


@full_precision
def weighted_least_squares(x: Array, y: Array, s: Array, group_weights: Array, *, num_groups: int,
                           ridge: Any = 0.0, fit_intercept: bool = True) -> LinearParams:
    """Exact LOPT for squared loss (Sec. 1.3.1): ``argmin_c (1/n) sum_i w_{s_i} (<c, x_i> - y_i)^2 +
    ridge ||c||^2`` in closed form (non-negative group weights ``w``; not private)."""
    V.check_shape("x", x, ndim=2)
    V.check_same_length(x=x, y=y, s=s)
    V.check_group_ids(s, num_groups)
    V.check_shape("group_weights", group_weights, shape=(num_groups,))
    if not V.is_traced(group_weights) and np.any(np.asarray(group_weights) < 0):
        raise ValueError("group_weights must be >= 0 (the weighted least-squares LOPT needs W in R^K_{>=0}).")
    X = _design(x, fit_intercept)
    n = X.shape[0]
    a = jnp.asarray(group_weights, jnp.float32)[jnp.asarray(s)] / n
    A = (a * X.T) @ X + jnp.asarray(ridge, jnp.float32) * jnp.eye(X.shape[1]) + 1e-9 * jnp.eye(X.shape[1])
    beta = jnp.linalg.solve(A, (a * jnp.asarray(y, jnp.float32)) @ X)
    if fit_intercept:
        return LinearParams(beta[:-1], beta[-1])
    return LinearParams(beta, jnp.zeros((), jnp.float32))


def dp_gd_noise_std(epsilon: float, delta: float, steps: int, clip_norm: float, *,
                    relation: Any = "replace_one") -> float:
    """Per-step Gaussian std on the clipped gradient sum so that ``steps`` full-batch steps are
    ``(epsilon, delta)``-DP: ``rho = dp_to_rho(eps, delta)`` (CKS), ``rho/steps`` per step, l2
    sensitivity ``2 C`` under replace-one.

    Privacy: replace-one only. :func:`dp_weighted_least_squares` divides the noisy sum by the
    number of rows ``n``, which add/remove changes (a private count), so ``relation="add_remove"``
    is refused. A record moving to another group changes its weight ``w_{s_i}`` but its gradient
    stays clipped to ``C``, so ``2 C`` covers that replacement too."""
    steps = V.check_int("steps", steps)
    V.check_clip_norm(clip_norm)
    sens = _rn.normalized_clipped_sum_sensitivity(clip_norm).under(as_relation(relation))
    if math.isinf(sens):
        raise ValueError("dp_gd_noise_std: relation='add_remove' is not supported: the DP-GD oracle "
                         "divides the noisy gradient sum by the private row count n; use 'replace_one' "
                         "(n fixed and public).")
    return _rn.gaussian_std_over_steps(epsilon, delta, steps, sens)


@full_precision
def dp_weighted_least_squares(key: Array, x: Array, y: Array, s: Array, group_weights: Array, *,
                              num_groups: int, noise_std: Any, steps: int, clip_norm: Any,
                              learning_rate: Any, radius: Any = 1.0, fit_intercept: bool = True
                              ) -> LinearParams:
    """LOPT_{eps,delta} by a DP gradient method (Bassily et al. 2014; Sec. 1.3.1): full-batch
    projected noisy GD on ``(1/n) sum_i w_{s_i} (<c, x_i> + b - y_i)^2`` with per-example clipping
    (ghost norms), Gaussian noise on the clipped sum, then division by ``n``, and projection onto the
    l2 ball of ``radius`` (the paper's footnote 8 projects onto the sphere; the ball is the convex
    set the analysis needs).

    Privacy: with ``noise_std = dp_gd_noise_std(eps, delta, steps, clip_norm)`` the ``steps``
    releases are ``(eps, delta)``-DP under replace-one (zCDP composition, CKS conversion), for a
    data-independent ``group_weights`` (privatize it first, as :func:`private_cgoo` does).
    """
    V.check_threefry_key(key)
    V.check_shape("x", x, ndim=2)
    V.check_same_length(x=x, y=y, s=s)
    V.check_group_ids(s, num_groups)
    steps = V.check_int("steps", steps)
    V.check_clip_norm(clip_norm)
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    n, d = x.shape
    a = jnp.asarray(group_weights, jnp.float32)[jnp.asarray(s)]
    std = jnp.asarray(noise_std, jnp.float32)
    lr = jnp.asarray(learning_rate, jnp.float32)
    R = jnp.asarray(radius, jnp.float32)

    def project(p):
        norm = jnp.sqrt(jnp.sum(p.w**2) + p.b**2)
        f = 1.0 / jnp.maximum(1.0, norm / R)
        return LinearParams(p.w * f, p.b * f)

    def step(p, k):
        resid = x @ p.w + p.b - y
        grads, _ = glm_clipped_grad_sum(x, 2.0 * a * resid, clip_norm, fit_intercept=fit_intercept)
        if not fit_intercept:
            grads = {"w": grads["w"]}
        noisy = _mech.gaussian_mechanism(k, grads, std)  # l2 sensitivity 2C (replace-one)
        gw = noisy["w"] / n
        gb = noisy["b"] / n if fit_intercept else 0.0 * p.b
        return project(LinearParams(p.w - lr * gw, p.b - lr * gb)), None

    p0 = LinearParams(jnp.zeros((d,), jnp.float32), jnp.zeros((), jnp.float32))
    p, _ = jax.lax.scan(step, p0, jax.random.split(key, steps))
    return p
