"""Group-aware privacy budget tailoring: DPSE and DPNoSE (paper 000).

"Privacy Budget Tailoring in Private Data Analysis" splits a total zCDP budget ``rho = tau + mu``:

* **Stage 1** (Algorithm 1, ``tau``-zCDP): a private pooled OLS fit from noisy sufficient statistics
  (Lemma C.1, Analyze-Gauss), then a noisy clipped residual sum per group, giving per-group
  standard errors ``s_k`` normalised to ``sum_k s_k^2 = 1``.
* **Stage 2** (Algorithm 2 with the fairness Lagrangian ``h = f(l) + G max(0, g(l))``, eqs. 1-2, or
  Algorithm 3 without it, ``mu``-zCDP): projected gradient descent on per-group clipped gradient
  (and loss) sums, where group ``k`` gets the share ``mu s_k^2 / T`` of the budget per iteration,
  so groups with larger standard errors receive *less* noise (group-weighted Gaussian noise).

DPSE is stage 1 followed by stage 2. The baselines are DPNoSE, "standard DP gradient descent with
the whole budget rho" (``method="pooled"``: pooled clipped-sum gradient, one noise draw), the equal
split ``s_k = 1/sqrt(K)`` with the whole budget (``method="equal"``) and the same descent without
noise (``method="nonprivate"``), plus closed-form least squares (:func:`least_squares`).

Everything is a pure function of ``(key, data, hyperparameters)``: :class:`Hyperparams` holds the
traced (sweepable) quantities, :class:`Config` the static choices. The hot loop keeps one vector per
feature (``xs: [d, n]``), forms per-example gradients as one scalar per example times ``x``
(squared and logistic loss are generalized linear models), clips with the exact per-example norm
``|dloss| * ||x||`` and forms group sums with one matmul against the one-hot group matrix.

Departures from the paper (corrected default, literal behaviour behind an option):

* ``scaling="group_mean"`` (default): noise is calibrated to the *clipped sum* (sensitivity
  ``Delta`` for gradients, ``Delta^2`` for losses) and the noisy sum is then divided by the public
  group size ``n_k`` (post-processing), so ``f = sum_k`` (group-mean loss). ``scaling="paper"``:
  Algorithm 2 lines 10-14 literally (group *mean* gradient plus noise of std ``Delta/sqrt(2 mu_T)``,
  loss ``(1/n) * clipped group sum`` plus noise), and Algorithm 3 line 8-12 literally (noisy sum,
  no normalisation). For ``method="pooled"`` the default divides by ``n`` after noise.
* Algorithm 1 line 17 clips squared residuals to ``[0, Delta]`` but adds noise of variance
  ``Delta^4 / (2 tau_k)``; the default clips to ``[0, Delta^2]`` (``stage1_clip="delta_sq"``), the
  literal ``[0, Delta]`` is ``stage1_clip="paper"`` (same noise, so both are private).
* Standard error denominator: ``n_k`` (Algorithm 1, line 21, default) or ``n_k - d`` (text),
  ``se_denominator="n_minus_d"``.
* Lemma C.1's noise scale ``U^2`` assumes ``||x|| <= U`` and ``|y| <= U``; here the rows of ``X``
  are clipped to norm ``stats_bound_x`` and ``y`` to ``[-stats_bound_y, stats_bound_y]`` before the
  statistics are formed, with sensitivities ``U_x^2`` (``X^T X``) and ``U_x U_y`` (``X^T y``).
* ``g = max_k l_k`` (section 6) is always >= 0 for squared losses, so the indicator in eq. (2) is
  always on. The default ``g="bgl"`` is ``max_k (l_k - eta_k)`` with thresholds ``eta_k``
  (``Hyperparams.thresholds``); with thresholds 0 it is the paper's ``g``.

Privacy (whole DPSE run): ``rho``-zCDP with ``rho = tau + mu`` by composition (Lemma D.1), for the
neighbouring relation ``neighbour``: ``"add_remove"`` (one record added or removed; sensitivities
``Delta``, ``Delta^2``, ``U^2``) or ``"swap"`` (one record replaced; every sensitivity doubled).
Group sizes ``n_k`` and ``n`` are treated as public, as in the paper. The per-group charges of
stage 2 are summed over groups (the paper's accounting, Lemmas B.2-B.3); as the groups are disjoint
this is an upper bound. :func:`budget_ledger` itemises the charges and checks they add up to rho.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "Config",
    "Hyperparams",
    "Diagnostics",
    "METHODS",
    "fit",
    "fit_arrays",
    "fit_many",
    "fit_many_from_draws",
    "fit_many_prepared",
    "prepare",
    "Prepared",
    "ClippedSumTable",
    "clipped_sum_table",
    "table_group_sums",
    "num_draws",
    "stage1_standard_errors",
    "stage2_descent",
    "group_noise_stds",
    "noisy_group_release",
    "least_squares",
    "population_mspe",
    "group_mspe",
    "budget_ledger",
    "privacy",
    "zcdp_to_epsilon",
    "epsilon_to_rho",
    "BudgetLedger",
]

METHODS = ("dpse", "equal", "pooled", "nonprivate")
_F_NAMES = ("sum", "mean", "max")
_G_NAMES = ("bgl", "max")


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Config:
    """Static choices of a budget-tailoring run (shapes and branches; hashable, not traced).

    Attributes:
      method: ``"dpse"`` (stage 1 + stage 2), ``"equal"`` (DPNoSE equal split ``s_k = 1/sqrt K``,
        whole budget to stage 2), ``"pooled"`` (DPNoSE as standard DP-GD with the whole budget on
        the pooled clipped gradient sum; Algorithm 3 only), ``"nonprivate"`` (same descent, no
        noise, equal weights).
      fairness: ``True`` runs Algorithm 2 (Lagrangian with noisy group losses), ``False``
        Algorithm 3.
      steps: number of gradient iterations ``T``.
      loss: ``"squared"`` (OLS, the paper) or ``"logistic"`` (Appendix A; labels in {0, 1}).
      f, g: group-agnostic and group-deviation losses of eq. (1): names (``f`` in
        ``"sum" | "mean" | "max"``, ``g`` in ``"bgl" | "max"``) or callables ``f(l)`` and
        ``g(l, thresholds)`` of the K group losses (differentiated with ``jax.grad``).
      scaling: ``"group_mean"`` (default, noise on clipped sums then divide by ``n_k``) or
        ``"paper"`` (Algorithm 2 lines 10-14 / Algorithm 3 line 8 literally).
      neighbour: ``"add_remove"`` or ``"swap"`` (doubles every sensitivity).
      stage1_clip: ``"delta_sq"`` (clip squared residuals to ``[0, Delta^2]``) or ``"paper"``
        (``[0, Delta]``, Algorithm 1 line 17 literally).
      se_denominator: ``"n"`` (Algorithm 1 line 21) or ``"n_minus_d"`` (the text).
      fit_intercept: append a constant feature (it counts in ``||x||`` for clipping).
      box: projection onto ``[-box, box]^P`` (the paper's ``C_P = [-5, 5]^P``); ``inf`` for none.
    """

    method: str = "dpse"
    fairness: bool = False
    steps: int = 50
    loss: str = "squared"
    f: str | Callable = "sum"
    g: str | Callable = "bgl"
    scaling: str = "group_mean"
    neighbour: str = "add_remove"
    stage1_clip: str = "delta_sq"
    se_denominator: str = "n"
    fit_intercept: bool = False
    box: float = 5.0

    def validate(self) -> "Config":
        v.check_choice("method", self.method, METHODS)
        v.check_int("steps", self.steps, minimum=1)
        v.check_choice("loss", self.loss, ("squared", "logistic"))
        if not callable(self.f):
            v.check_choice("f", self.f, _F_NAMES)
        if not callable(self.g):
            v.check_choice("g", self.g, _G_NAMES)
        v.check_choice("scaling", self.scaling, ("group_mean", "paper"))
        v.check_choice("neighbour", self.neighbour, ("add_remove", "swap"))
        v.check_choice("stage1_clip", self.stage1_clip, ("delta_sq", "paper"))
        v.check_choice("se_denominator", self.se_denominator, ("n", "n_minus_d"))
        v.check_positive("box", self.box, allow_inf=True)
        if self.fairness and self.method == "pooled":
            raise ValueError(
                "method='pooled' has no group losses, so it cannot run the fairness Lagrangian "
                "(fairness=True); use method='equal' as the DPNoSE baseline with fairness."
            )
        return self


class Hyperparams(NamedTuple):
    """Traced (sweepable) hyperparameters; every field may be a JAX array under ``vmap``.

    ``rho``: total zCDP budget (``inf`` allowed: no noise). ``tau_fraction``: share of rho spent by
    stage 1 (paper: 0.2). ``learning_rate``: constant step ``eta_t``. ``clip``: ``Delta``, the
    per-example gradient norm bound (losses are clipped to ``[0, Delta^2]``). ``fairness_weight``:
    ``G``. ``thresholds``: BGL thresholds ``eta_k`` (scalar or ``[K]``). ``stats_bound_x`` and
    ``stats_bound_y``: ``U`` of Lemma C.1 for the rows of X and for y.
    """

    rho: Any = 1.0
    tau_fraction: Any = 0.2
    learning_rate: Any = 0.1
    clip: Any = 2.0
    fairness_weight: Any = 1.0
    thresholds: Any = 0.0
    stats_bound_x: Any = 3.0
    stats_bound_y: Any = 30.0


class Diagnostics(NamedTuple):
    """What a run reports besides the parameters (all arrays; traced-friendly)."""

    se: jax.Array  # [K] normalised standard errors used for the allocation
    fallback: jax.Array  # bool: stage 1 returned the equal allocation
    beta_stage1: jax.Array  # [P] private pooled OLS of stage 1 (zeros when stage 1 is skipped)
    noise_std: jax.Array  # [K] std of the noise added to each group's gradient sum
    rho_stage1: jax.Array  # zCDP spent by stage 1
    rho_stage2: jax.Array  # zCDP spent by stage 2 (sum of the per-group charges)
    fraction_clipped: jax.Array  # mean fraction of clipped per-example gradients over the run


# --------------------------------------------------------------------------------------------
# Small zCDP helpers (closed forms, Bun & Steinke 2016)
# --------------------------------------------------------------------------------------------


def zcdp_to_epsilon(rho: Any, delta: float) -> np.ndarray:
    """epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016, Prop. 1.3; paper section 2)."""
    v.check_rho(rho, allow_inf=True)
    v.check_delta(delta)
    rho = np.asarray(rho, dtype=np.float64)
    return rho + 2.0 * np.sqrt(rho * math.log(1.0 / delta))


def epsilon_to_rho(epsilon: Any) -> np.ndarray:
    """The paper's budget convention ``rho = epsilon^2 / 2`` (pure epsilon-DP => zCDP)."""
    v.check_epsilon(epsilon)
    return np.asarray(epsilon, dtype=np.float64) ** 2 / 2.0


# --------------------------------------------------------------------------------------------
# Pieces shared by the stages
# --------------------------------------------------------------------------------------------


def _sens_mult(neighbour: str) -> float:
    return 2.0 if neighbour == "swap" else 1.0


def _dloss_and_loss(pred: jax.Array, y: jax.Array, loss: str) -> tuple[jax.Array, jax.Array]:
    """Per-example d loss / d prediction and loss (both [n]); gradient wrt theta is dloss * x."""
    if loss == "squared":
        r = pred - y
        return 2.0 * r, r * r
    # logistic with labels in {0, 1}: loss = softplus(pred) - y pred
    return jax.nn.sigmoid(pred) - y, jax.nn.softplus(pred) - y * pred


def _resolve_f(f):
    if callable(f):
        return f
    return {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max}[f]


def _resolve_g(g):
    if callable(g):
        return g
    if g == "max":
        return lambda l, thresholds: jnp.max(l)
    return lambda l, thresholds: jnp.max(l - thresholds)


def group_noise_stds(se: Any, mu: Any, steps: int, clip: Any, *, fairness: bool = False,
                     neighbour: str = "add_remove") -> tuple[jax.Array, jax.Array]:
    """Per-group Gaussian noise stds on the clipped gradient and loss sums (Algorithms 2 and 3).

    Algorithm 3 gives group k the budget ``mu_T = mu s_k^2 / T`` per iteration, so the gradient
    noise std is ``Delta / sqrt(2 mu_T) = Delta sqrt(T / (2 mu s_k^2))``. Algorithm 2 halves it
    between gradient and loss (``mu_T = mu s_k^2 / (2T)`` each): std ``Delta sqrt(T/(mu s_k^2))``
    and ``Delta^2 sqrt(T/(mu s_k^2))``. Swap neighbours double both. Returns (grad_std, loss_std).

    Privacy: per iteration these are ``sum_k mu s_k^2 / T = mu / T``-zCDP (Gaussian mechanism,
    Bun & Steinke Lemma 2.5), so ``mu``-zCDP over T iterations when ``sum_k s_k^2 = 1``.
    """
    se = jnp.asarray(se)
    m = _sens_mult(neighbour)
    share = jnp.asarray(mu) * se**2 / steps  # mu_T per group, both halves together
    per_release = share / 2.0 if fairness else share
    inv = jnp.where(per_release > 0, 1.0 / jnp.sqrt(2.0 * per_release), jnp.inf)
    grad_std = m * clip * inv
    loss_std = m * clip**2 * inv
    return grad_std, loss_std


def _prepare(x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int, weights: jax.Array | None,
             fit_intercept: bool):
    """Structure-of-arrays view: xs [P, n], row norms [n], one-hot [n, K] (masked), n_k [K]."""
    xs = jnp.asarray(x, jnp.float32).T
    if fit_intercept:
        xs = jnp.concatenate([xs, jnp.ones((1, xs.shape[1]), xs.dtype)], axis=0)
    y = jnp.asarray(y, xs.dtype)
    onehot = jax.nn.one_hot(s, num_groups, dtype=xs.dtype)
    if weights is not None:
        onehot = onehot * jnp.asarray(weights, xs.dtype)[:, None]
    n_k = jnp.sum(onehot, axis=0)
    xnorm = jnp.sqrt(jnp.sum(xs * xs, axis=0))
    return xs, y, onehot, n_k, xnorm


# --------------------------------------------------------------------------------------------
# Stage 1: Algorithm 1
# --------------------------------------------------------------------------------------------


def _min_eig_and_solve(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Smallest eigenvalue of the symmetric ``a`` and ``a^-1 b``; closed forms for P <= 2."""
    p = a.shape[0]
    if p == 1:
        return a[0, 0], b / a[0, 0]
    if p == 2:
        h, c, o = 0.5 * (a[0, 0] + a[1, 1]), 0.5 * (a[0, 0] - a[1, 1]), a[0, 1]
        lam = h - jnp.sqrt(c * c + o * o)
        det = a[0, 0] * a[1, 1] - o * o
        sol = jnp.stack([a[1, 1] * b[0] - o * b[1], a[0, 0] * b[1] - o * b[0]]) / det
        return lam, sol
    return jnp.linalg.eigvalsh(a)[0], jnp.linalg.solve(a, b)


def _stage1(z_all, xs, y, onehot, n_k, xnorm, tau, hp: Hyperparams, cfg: Config,
            table: ClippedSumTable | None = None):
    """Algorithm 1 on structure-of-arrays inputs. Returns (se [K], fallback, beta [P]).

    With a :class:`ClippedSumTable` valid for every theta (``domain=None``; one feature) and
    ``stage1_clip="delta_sq"`` the clipped residual sums ``sum_k min(r_i^2, Delta^2)`` are the
    table's loss sums at ``beta``; a table restricted to the descent's box cannot serve ``beta``
    (unbounded), and the sums are then taken over the examples."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    m = _sens_mult(cfg.neighbour)
    tau_k = tau / (k_groups + 1)  # line 7
    # Lemma C.1 on bounded rows: clip ||x|| <= U_x, |y| <= U_y.
    a = 1.0 / jnp.maximum(1.0, xnorm / hp.stats_bound_x)
    xa = xs * a
    yc = jnp.clip(y, -hp.stats_bound_y, hp.stats_bound_y)
    w = jnp.sum(onehot, axis=1)  # row weights (mask)
    xtx = (xa * w) @ xa.T
    xty = (xa * w) @ yc
    # Lines 8-9: budget tau_k / 2 each, std = sens / sqrt(2 * tau_k / 2) = sens / sqrt(tau_k).
    std_xx = m * hp.stats_bound_x**2 / jnp.sqrt(tau_k)
    std_xy = m * hp.stats_bound_x * hp.stats_bound_y / jnp.sqrt(tau_k)
    z = z_all[: p * p].reshape(p, p)
    z = jnp.triu(z) + jnp.triu(z, 1).T  # symmetric: upper triangle i.i.d., mirrored
    xtx_n = xtx + std_xx * z
    xty_n = xty + std_xy * z_all[p * p: p * p + p]
    lam_min, beta = _min_eig_and_solve(xtx_n, xty_n)  # lines 11 and 15
    # Line 17: sensitivity Delta^2 (noise variance Delta^4 / (2 tau_k)).
    std_res = m * hp.clip**2 / jnp.sqrt(2.0 * tau_k)
    if table is not None and table.domain is None and cfg.stage1_clip == "delta_sq":
        clean = table_group_sums(table, jnp.where(jnp.isfinite(beta[0]), beta[0], 0.0))[1]
        clean = jnp.where(jnp.isfinite(beta[0]), clean, jnp.inf)
    else:
        r2 = (beta @ xs - y) ** 2
        upper = hp.clip if cfg.stage1_clip == "paper" else hp.clip**2
        clean = jnp.clip(r2, 0.0, upper) @ onehot
    s_sum = clean + std_res * z_all[p * p + p:]
    denom = n_k - p if cfg.se_denominator == "n_minus_d" else n_k
    se = jnp.sqrt(jnp.maximum(s_sum, 0.0) / jnp.maximum(denom, 1.0))
    se = se / jnp.sqrt(jnp.sum(se**2))  # line 23
    fallback = (lam_min <= 0) | jnp.any(s_sum <= 0) | ~jnp.all(jnp.isfinite(se))  # lines 11, 18
    equal = jnp.full((k_groups,), 1.0 / math.sqrt(k_groups), xs.dtype)
    se = jnp.where(fallback, equal, se)
    beta = jnp.where(jnp.all(jnp.isfinite(beta)), beta, 0.0)
    return se, fallback, beta


@full_precision
def stage1_standard_errors(key: jax.Array, data: Dataset, hparams: Hyperparams,
                           config: Config = Config()) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Algorithm 1: ``tau``-zCDP per-group standard errors, ``tau = tau_fraction * rho``.

    Noisy ``X^T X`` (symmetric noise) and ``X^T y`` with ``tau_k/2`` each (Lemma C.1), ``tau_k =
    tau/(K+1)``; the pooled fit ``beta = (X^T X)^-1 X^T y``; per group the clipped residual sum plus
    ``N(0, Delta^4/(2 tau_k))`` noise; ``s_k = sqrt(S_k/n_k)`` normalised to ``sum s_k^2 = 1``. The
    fallbacks (``lambda_min <= 0`` or some ``S_k <= 0``: return ``1/sqrt(K)``) are ``jnp.where``.
    Returns ``(se [K], fallback, beta [P])``.

    Privacy: ``tau``-zCDP (Lemma 4.1/B.1) under ``config.neighbour``; group sizes are public.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, n_k, xnorm = _prepare(data.x, data.y, data.s, data.num_groups, data.mask,
                                         config.fit_intercept)
    tau = jnp.asarray(hparams.rho) * hparams.tau_fraction
    z1, _ = _split_draws(_run_draws(key, config.steps, xs.shape[0], data.num_groups, xs.dtype),
                         config.steps, xs.shape[0], data.num_groups)
    return _stage1(z1, xs, y, onehot, n_k, xnorm, tau, hparams, config)


# --------------------------------------------------------------------------------------------
# Stage 2: Algorithms 2 and 3 (and the pooled DPNoSE baseline)
# --------------------------------------------------------------------------------------------


def _noise_stds(se, mu, hp: Hyperparams, cfg: Config, dtype):
    """(grad_std, loss_std) on the clipped *sums*, [K] ([1] for pooled); zero when not private."""
    m = _sens_mult(cfg.neighbour)
    if cfg.method == "pooled":
        # DPNoSE (standard DP-GD): budget rho/T per iteration on the pooled clipped sum.
        grad_std = m * hp.clip * jnp.sqrt(cfg.steps / (2.0 * mu)) * jnp.ones((1,), dtype)
        loss_std = jnp.zeros((1,), dtype)
    else:
        grad_std, loss_std = group_noise_stds(se, mu, cfg.steps, hp.clip, fairness=cfg.fairness,
                                              neighbour=cfg.neighbour)
    off = jnp.isinf(jnp.asarray(mu)) | (cfg.method == "nonprivate")  # rho = inf: no noise
    grad_std = jnp.where(off, 0.0, grad_std).astype(dtype)
    loss_std = jnp.where(off, 0.0, loss_std).astype(dtype)
    return grad_std, loss_std


class _Release(NamedTuple):
    """How one iteration's release is formed from the clipped group sums (all [K], traced):
    ``M1[:, k] = gscale_k * gsum_k + gstd_k * z``, ``M2_k = lscale_k * lsum_k + lstd_k * z'``."""

    gscale: jax.Array
    gstd: jax.Array
    lscale: jax.Array
    lstd: jax.Array


def _release_params(se, mu, n_k, hp: Hyperparams, cfg: Config) -> tuple[_Release, jax.Array]:
    """Scales and effective noise stds of the method (this is where ``scaling`` acts)."""
    dtype = n_k.dtype
    k_groups = n_k.shape[0]
    n = jnp.sum(n_k)
    paper = cfg.scaling == "paper"
    grad_std, loss_std = _noise_stds(se, mu, hp, cfg, dtype)
    ones = jnp.ones((k_groups,), dtype)
    zeros = jnp.zeros((k_groups,), dtype)
    if cfg.method == "pooled":
        scale = ones if paper else ones / n
        # one draw for the pooled sum: put it on the first column, M1 1_K is then the noisy sum
        gstd = zeros.at[0].set(grad_std[0] * scale[0])
        return _Release(scale, gstd, zeros, zeros), jnp.broadcast_to(grad_std, (k_groups,))
    if paper and cfg.fairness:
        gscale, gstd = 1.0 / n_k, grad_std  # Alg. 2 lines 10-11: group mean, noise for the sum
    elif paper:
        gscale, gstd = ones, grad_std  # Alg. 3 lines 8-9: noisy sum
    else:
        gscale, gstd = 1.0 / n_k, grad_std / n_k  # clip, sum, noise, then normalise
    if cfg.fairness:
        lscale, lstd = (ones / n, loss_std) if paper else (1.0 / n_k, loss_std / n_k)
    else:
        lscale, lstd = zeros, zeros
    return _Release(gscale, gstd, lscale, lstd), grad_std


# --------------------------------------------------------------------------------------------
# Exact clipped group sums of a one-feature OLS problem as piecewise functions of theta
# --------------------------------------------------------------------------------------------


class ClippedSumTable(NamedTuple):
    """Per-group clipped gradient and loss sums of ``y ~ theta x`` (one feature, squared loss)
    tabulated as exact piecewise polynomials of ``theta`` (built by :func:`clipped_sum_table`).

    Example ``i``'s clipped gradient ``clip(a_i theta - b_i, -Delta, Delta)`` (``a = 2x^2``,
    ``b = 2xy``) is ``-Delta`` below ``lo_i = (b_i - Delta)/a_i``, linear up to ``hi_i = (b_i +
    Delta)/a_i`` and ``+Delta`` above; its clipped loss ``min((theta x_i - y_i)^2, Delta^2)`` is
    ``Delta^2`` outside ``y_i/x_i -+ Delta/|x_i|`` and quadratic inside. Both are continuous, so
    a group sum is a base value plus, for every breakpoint ``t_e <= theta``, a polynomial change
    (``alpha_e theta + beta_e`` for gradients, ``q2 theta^2 + q1 theta + q0`` for losses): sorted
    breakpoints and prefix sums of the coefficients give every sum at any ``theta`` with one
    binary search, ``O(K log n)`` instead of ``O(n K)`` per evaluation (exact up to float
    rounding). ``grad_keys``/``loss_keys`` are sortable int32 keys of the breakpoints;
    ``grad_prefix [2n+1, 3, K]`` holds prefix sums of (alpha, beta, clipped-count change),
    ``loss_prefix [2n+1, 3, K]`` of (q2, q1, q0); ``grad_base [2, K]`` is (``-Delta W_k``,
    ``W_k``) and ``loss_base [K]`` the sums at ``theta -> -inf``; ``clip`` is ``Delta``.
    ``domain`` (``[lo, hi]`` or None): when set, breakpoints outside it were moved just outside
    it (same sums for every theta in ``[lo, hi]``, wrong outside), which makes the sort several
    times cheaper when most breakpoints lie outside the projection box of the descent.
    """

    grad_keys: jax.Array
    grad_prefix: jax.Array
    grad_base: jax.Array
    loss_keys: jax.Array
    loss_prefix: jax.Array
    loss_base: jax.Array
    clip: jax.Array
    domain: jax.Array | None = None


def _sortable_key(v: jax.Array) -> jax.Array:
    """Monotone map float32 -> int32 (integer order equals float order; sorts 4x faster on CPU)."""
    bits = jax.lax.bitcast_convert_type(jnp.asarray(v, jnp.float32), jnp.int32)
    return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)


def _event_prefix(lo, hi, pay_lo, pay_hi, onehot, domain=None):
    """Sorted keys of the 2n breakpoints and prefix sums of their per-group coefficients.

    Returns ``keys [2n]`` (ascending) and ``prefix [2n+1, C, K]`` with ``prefix[j]`` the sum over
    the breakpoints of rank ``< j`` (rows, so a lookup gathers one contiguous row). Sorting the
    int32 keys alone and placing each event at its rank (binary search, then a scatter-add that
    merges exact ties) is 2-3x faster on CPU than sorting the keys with a permutation operand;
    the prefix sums are a pairwise (associative) scan, 30% faster than ``cumsum`` on XLA:CPU and
    more accurate. With ``domain = [a, b]`` the breakpoints below ``a`` are summed up front
    (pairwise, so no long float32 chain at one rank) and those above ``b`` dropped; their keys
    move to ``a - 1`` / ``b + 1``, ties that sort fast.
    """
    t = jnp.concatenate([lo, hi])
    pay = jnp.concatenate([pay_lo, pay_hi], axis=0)  # [2n, C]
    member = jnp.concatenate([onehot, onehot], axis=0)  # [2n, K]
    per_group = (pay[:, :, None] * member[:, None, :]).reshape(t.shape[0], -1)  # [2n, C*K]
    base = None
    if domain is not None:
        below, above = t < domain[0], t > domain[1]
        base = jnp.sum(jnp.where(below[:, None], per_group, 0.0), axis=0)
        per_group = jnp.where((below | above)[:, None], 0.0, per_group)
        t = jnp.clip(t, domain[0] - 1.0, domain[1] + 1.0)
    keys = _sortable_key(t)
    sorted_keys = jax.lax.sort(keys, is_stable=False)
    rank = jnp.searchsorted(sorted_keys, keys, side="left", method="scan_unrolled")
    # Row 0 stays zero: prefix[j] sums the events of rank < j.
    placed = jnp.zeros((t.shape[0] + 1, per_group.shape[1]), per_group.dtype).at[rank + 1].add(per_group)
    prefix = jax.lax.associative_scan(jnp.add, placed, axis=0)
    if base is not None:
        prefix = prefix + base
    return sorted_keys, prefix.reshape(prefix.shape[0], pay.shape[1], member.shape[1])


@full_precision
def clipped_sum_table(x: jax.Array, y: jax.Array, onehot: jax.Array, clip: Any, *,
                      domain: tuple[float, float] | None = None) -> ClippedSumTable:
    """Build the :class:`ClippedSumTable` of one-feature data ``x [n]``, ``y [n]`` with weighted
    group membership ``onehot [n, K]`` and clip bound ``clip`` (``Delta``). ``O(n log n)``, once
    per dataset; then :func:`table_group_sums` evaluates the clipped sums at any ``theta`` (any
    ``theta`` in ``domain = (lo, hi)`` when given). jit/vmap-able (one table per trial under
    ``vmap``)."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, x.dtype)
    onehot = jnp.asarray(onehot, x.dtype)
    c = jnp.asarray(clip, x.dtype)
    nz = x != 0
    xs_ = jnp.where(nz, x, 1.0)
    # Gradients (x = 0: gradient 0, never clipped: zero coefficients, base count 0).
    a, b = 2.0 * xs_ * xs_, 2.0 * xs_ * y
    g_lo = jnp.where(nz, (b - c) / a, 0.0)
    g_hi = jnp.where(nz, (b + c) / a, 0.0)
    pay_lo = jnp.stack([jnp.where(nz, a, 0.0), jnp.where(nz, c - b, 0.0), jnp.where(nz, -1.0, 0.0)], 1)
    pay_hi = jnp.stack([jnp.where(nz, -a, 0.0), jnp.where(nz, c + b, 0.0), jnp.where(nz, 1.0, 0.0)], 1)
    count0 = (nz.astype(x.dtype)) @ onehot  # clipped below every lo
    dom = None if domain is None else jnp.asarray(domain, x.dtype)
    grad_keys, grad_prefix = _event_prefix(g_lo, g_hi, pay_lo, pay_hi, onehot, dom)
    grad_base = jnp.stack([-c * count0, count0])
    # Losses (x = 0: constant min(y^2, Delta^2), folded into the base).
    ratio, half = y / xs_, c / jnp.abs(xs_)
    l_lo = jnp.where(nz, ratio - half, 0.0)
    l_hi = jnp.where(nz, ratio + half, 0.0)
    q = jnp.stack([xs_ * xs_, -2.0 * xs_ * y, y * y - c * c], 1) * nz[:, None]
    loss_keys, loss_prefix = _event_prefix(l_lo, l_hi, q, -q, onehot, dom)
    loss_base = jnp.where(nz, c * c, jnp.minimum(y * y, c * c)) @ onehot
    return ClippedSumTable(grad_keys, grad_prefix, grad_base, loss_keys, loss_prefix, loss_base, c,
                           dom)


def _lookup(keys: jax.Array, prefix: jax.Array, theta: jax.Array) -> jax.Array:
    """Prefix row of the breakpoints ``<= theta``: ``[C, K]``."""
    j = jnp.searchsorted(keys, _sortable_key(theta), side="right", method="scan_unrolled")
    return prefix[j]


@full_precision
def table_group_sums(table: ClippedSumTable, theta: Any, *, losses: bool = True
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-group clipped sums at scalar ``theta``: (gradient sums ``[K]``, loss sums ``[K]``,
    weighted count of clipped gradients ``[K]``); equal (up to float rounding) to summing
    ``clip(2 (theta x_i - y_i) x_i, -Delta, Delta)``, ``min((theta x_i - y_i)^2, Delta^2)`` and
    ``1[|2 (theta x_i - y_i) x_i| > Delta]`` over each group's examples."""
    theta = jnp.asarray(theta, table.grad_prefix.dtype)
    g = _lookup(table.grad_keys, table.grad_prefix, theta)
    gsum = table.grad_base[0] + theta * g[0] + g[1]
    clipped = table.grad_base[1] + g[2]
    if losses:
        lq = _lookup(table.loss_keys, table.loss_prefix, theta)
        lsum = table.loss_base + theta * theta * lq[0] + theta * lq[1] + lq[2]
    else:
        lsum = jnp.zeros_like(gsum)
    return gsum, lsum, clipped


def _scalar_ols(xs, cfg: Config) -> bool:
    """One feature, squared loss: the clipped gradient is ``clip(theta a_i - b_i, -D, D)``."""
    return xs.shape[0] == 1 and cfg.loss == "squared"


def _release(theta, xs, y, onehot, xnorm, rel: _Release, zg, zl, hp: Hyperparams, cfg: Config,
             pre=None, table: ClippedSumTable | None = None):
    """One iteration's private release: (M1 [P, K], M2 [K], fraction clipped).

    Clip each example's gradient to norm ``Delta`` (exact norm ``|dloss| ||x||``) and its loss
    to ``[0, Delta^2]``, sum per group (one matmul with the one-hot matrix), add the group's
    Gaussian noise (``zg [P, K]``, ``zl [K]`` standard normal draws) and normalise (the scales of
    :func:`_release_params`). With one feature and squared loss (``pre = (2 x^2, 2 x y)``) the
    clipped gradient ``2 (theta x - y) x`` clipped to norm ``Delta`` is the scalar clamp
    ``clip(theta a - b, -Delta, Delta)`` (same value, fewer operations per example). With a
    :class:`ClippedSumTable` (built for ``hp.clip``) the sums come from the table in
    ``O(K log n)``.
    """
    k_groups = onehot.shape[1]
    w = jnp.sum(onehot, axis=1)
    if table is not None:
        gs, ls, cnt = table_group_sums(table, theta[0], losses=cfg.fairness)
        gsum = gs[None, :]
        clipped = jnp.sum(cnt) / jnp.sum(w)
        loss = None
    elif pre is not None:
        g = theta[0] * pre[0] - pre[1]
        gsum = jnp.clip(g, -hp.clip, hp.clip)[None, :] @ onehot
        clipped = jnp.sum(w * (jnp.abs(g) > hp.clip)) / jnp.sum(w)
        loss = (theta[0] * xs[0] - y) ** 2 if cfg.fairness else None
    else:
        pred = theta @ xs
        dl, loss = _dloss_and_loss(pred, y, cfg.loss)
        gnorm = jnp.abs(dl) * xnorm
        u = dl / jnp.maximum(1.0, gnorm / hp.clip)
        gsum = (xs * u) @ onehot  # [P, K] clipped per-group gradient sums
        clipped = jnp.sum(w * (gnorm > hp.clip)) / jnp.sum(w)
    m1 = gsum * rel.gscale + rel.gstd * zg
    if cfg.fairness:
        # [K] (Alg. 2 line 13)
        lsum = ls if table is not None else jnp.clip(loss, 0.0, hp.clip**2) @ onehot
        m2 = lsum * rel.lscale + rel.lstd * zl
    else:
        m2 = jnp.zeros((k_groups,), xs.dtype)
    return m1, m2, clipped


def num_draws(steps: int, p: int, k_groups: int) -> int:
    """Standard normal draws one run consumes: stage 1 (``p^2 + p + K``) then T x (``pK + K``)."""
    return p * p + p + k_groups + steps * (p * k_groups + k_groups)


def _run_draws(key, steps: int, p: int, k_groups: int, dtype):
    """All of a run's standard normal draws, from one ``jax.random.normal`` call.

    Drawing once, outside the scan, keeps the compiled program small (each threefry call costs
    compile time) and lets a Monte Carlo study draw a whole trial's noise at once.
    """
    return jax.random.normal(key, (num_draws(steps, p, k_groups),), dtype)


def _split_draws(z, steps: int, p: int, k_groups: int):
    """(stage-1 draws [p^2 + p + K], descent draws ([T, p, K], [T, K]))."""
    s1 = p * p + p + k_groups
    rest = z[s1:].reshape(steps, p * k_groups + k_groups)
    return z[:s1], (rest[:, : p * k_groups].reshape(steps, p, k_groups), rest[:, p * k_groups:])


def _descent(z2, xs, y, onehot, xnorm, rel: _Release, hp: Hyperparams, cfg: Config,
             table: ClippedSumTable | None = None):
    """Projected noisy GD (Alg. 2 or 3) given the release parameters. Returns (theta, clipped)."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    f_fn = _resolve_f(cfg.f)
    g_fn = _resolve_g(cfg.g)
    thresholds = jnp.broadcast_to(jnp.asarray(hp.thresholds, xs.dtype), (k_groups,))
    box = cfg.box

    pre = (2.0 * xs[0] * xs[0], 2.0 * xs[0] * y) if _scalar_ols(xs, cfg) and table is None else None

    def step(theta, z):
        m1, m2, clipped = _release(theta, xs, y, onehot, xnorm, rel, z[0], z[1], hp, cfg, pre,
                                   table)
        if cfg.fairness:
            wf = jax.grad(f_fn)(m2)
            gval, wg = jax.value_and_grad(g_fn)(m2, thresholds)
            w = wf + hp.fairness_weight * (gval >= 0) * wg  # eq. (1)-(2); Alg. 2 line 17
            grad = m1 @ w
        else:
            grad = jnp.sum(m1, axis=1)  # M 1_K (Alg. 3 line 12)
        theta = theta - hp.learning_rate * grad
        if math.isfinite(box):
            theta = jnp.clip(theta, -box, box)  # projection onto C_P
        return theta, clipped

    theta0 = jnp.zeros((p,), xs.dtype)
    theta, clipped = jax.lax.scan(step, theta0, z2)
    return theta, jnp.mean(clipped)


def _stage2(z2, xs, y, onehot, n_k, xnorm, se, mu, hp: Hyperparams, cfg: Config):
    """Projected noisy GD. Returns (theta [P], grad noise std [K], mean fraction clipped)."""
    rel, std = _release_params(se, mu, n_k, hp, cfg)
    theta, clipped = _descent(z2, xs, y, onehot, xnorm, rel, hp, cfg)
    return theta, std, clipped


@full_precision
def noisy_group_release(key: jax.Array, data: Dataset, theta: Any, se: Any,
                        hparams: Hyperparams, config: Config = Config()
                        ) -> tuple[jax.Array, jax.Array]:
    """One stage-2 iteration's release at ``theta``: ``(M1 [P, K], M2 [K])`` (Alg. 2 lines 6-16).

    ``M1[:, k]`` is group k's clipped gradient sum plus ``N(0, grad_std_k^2)`` noise, divided by
    ``n_k`` (default scaling); ``M2[k]`` the same for the clipped loss (zeros for Algorithm 3). For
    ``method="pooled"`` ``M1`` has one column (the noisy pooled sum, normalised). The noise stds
    are :func:`group_noise_stds`.

    Privacy: ``mu/T``-zCDP (one of T iterations) under ``config.neighbour``.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, n_k, xnorm = _prepare(data.x, data.y, data.s, data.num_groups, data.mask,
                                         config.fit_intercept)
    se = jnp.asarray(se, xs.dtype)
    rel, _ = _release_params(se, _mu(hparams, config), n_k, hparams, config)
    _, (zg, zl) = _split_draws(_run_draws(key, 1, xs.shape[0], data.num_groups, xs.dtype), 1,
                               xs.shape[0], data.num_groups)
    m1, m2, _ = _release(jnp.asarray(theta, xs.dtype), xs, y, onehot, xnorm, rel, zg[0], zl[0],
                         hparams, config)
    if config.method == "pooled":
        m1 = jnp.sum(m1, axis=1, keepdims=True)
    return m1, m2


@full_precision
def stage2_descent(key: jax.Array, data: Dataset, se: Any, hparams: Hyperparams,
                   config: Config = Config()) -> jax.Array:
    """Algorithm 2 (``config.fairness=True``) or 3: ``mu``-zCDP projected DP-GD, ``mu = (1 -
    tau_fraction) rho`` (the whole ``rho`` for ``method`` ``"equal"``/``"pooled"``), with the
    allocation ``se`` (``sum se^2 = 1``). Returns theta ``[P]``.

    Privacy: ``mu``-zCDP (Lemmas B.2, B.3) under ``config.neighbour``, given public ``se`` (from
    stage 1, a private release, or fixed).
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, n_k, xnorm = _prepare(data.x, data.y, data.s, data.num_groups, data.mask,
                                         config.fit_intercept)
    mu = _mu(hparams, config)
    _, z2 = _split_draws(_run_draws(key, config.steps, xs.shape[0], data.num_groups, xs.dtype),
                         config.steps, xs.shape[0], data.num_groups)
    theta, _, _ = _stage2(z2, xs, y, onehot, n_k, xnorm, jnp.asarray(se, xs.dtype), mu, hparams,
                          config)
    return theta


def _mu(hp: Hyperparams, cfg: Config):
    rho = jnp.asarray(hp.rho)
    return rho * (1.0 - hp.tau_fraction) if cfg.method == "dpse" else rho


# --------------------------------------------------------------------------------------------
# Whole method
# --------------------------------------------------------------------------------------------


@full_precision
def fit_arrays(key: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
               hparams: Hyperparams, config: Config, weights: jax.Array | None = None
               ) -> tuple[jax.Array, Diagnostics]:
    """:func:`fit` on raw arrays without host validation (for use inside jit/vmap programs)."""
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, config.fit_intercept)
    return _fit_soa(key, xs, yy, onehot, n_k, xnorm, hparams, config)


@full_precision
def fit_many(keys: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
             hparams: Hyperparams, configs: tuple[Config, ...], weights: jax.Array | None = None
             ) -> tuple[jax.Array, Diagnostics]:
    """Several methods on the same data as one batched computation: entry ``m`` equals
    ``fit_arrays(keys[m], x, y, s, num_groups, hparams, configs[m])``.

    The configs may differ only in ``method``, ``fairness`` and ``scaling``; the methods with the
    same ``fairness`` share one vmapped descent (the methods differ only in traced scales and noise
    stds), which keeps the compiled program small. No host validation (use inside jit/vmap).
    Returns ``theta [M, P]`` and stacked :class:`Diagnostics`.

    Privacy: each entry is that method's run (``rho``-zCDP each); releasing several entries
    composes their budgets.
    """
    configs = tuple(configs)
    base = dataclasses.replace(configs[0], method="dpse", fairness=False, scaling="group_mean")
    for c in configs:
        c.validate()
        if dataclasses.replace(c, method="dpse", fairness=False, scaling="group_mean") != base:
            raise ValueError("fit_many configs may differ only in method, fairness and scaling; "
                             "run the others separately.")
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, base.fit_intercept)
    z = jax.vmap(lambda k: _run_draws(k, base.steps, xs.shape[0], num_groups, xs.dtype))(keys)
    return _fit_many_soa(z, xs, yy, onehot, n_k, xnorm, hparams, configs)


@full_precision
def fit_many_from_draws(draws: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array,
                        num_groups: int, hparams: Hyperparams, configs: tuple[Config, ...],
                        weights: jax.Array | None = None) -> tuple[jax.Array, Diagnostics]:
    """:func:`fit_many` with the standard normal draws given (``[M, num_draws(T, P, K)]``).

    ``fit_many(keys, ...)`` is this with ``draws[m] = normal(keys[m], (num_draws,))``. A Monte
    Carlo study can draw a whole trial's randomness in one call and slice it (fewer threefry
    calls to compile). The draws must be fresh i.i.d. N(0, 1) for the privacy guarantee.
    """
    configs = tuple(configs)
    _check_same_but_method(configs)
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, configs[0].fit_intercept)
    return _fit_many_soa(draws, xs, yy, onehot, n_k, xnorm, hparams, configs)


class Prepared(NamedTuple):
    """A dataset in the layout the descent uses, built once and shared by many runs
    (:func:`prepare`): ``xs [P, n]``, ``y [n]``, weighted one-hot ``onehot [n, K]``, ``n_k [K]``,
    row norms ``xnorm [n]`` and, for one feature with squared loss, the exact
    :class:`ClippedSumTable` (else ``None``)."""

    xs: jax.Array
    y: jax.Array
    onehot: jax.Array
    n_k: jax.Array
    xnorm: jax.Array
    table: ClippedSumTable | None


@full_precision
def prepare(x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int, config: Config, *,
            clip: Any = None, weights: jax.Array | None = None,
            clipped_sums: str = "auto") -> Prepared:
    """Lay out one dataset for many runs (budgets, methods) of :func:`fit_many_prepared`.

    ``clipped_sums``: ``"table"`` builds the :class:`ClippedSumTable` (needs one feature, no
    intercept, squared loss, and ``clip``: the ``Delta`` every run on it will use), so that each
    descent step costs ``O(K log n)`` instead of ``O(nK)`` after one ``O(n log n)`` sort: worth it
    when many runs share the data (a Monte Carlo trial with a budget grid). ``"direct"`` sums
    over the examples at every step; ``"auto"`` builds the table whenever it applies and ``clip``
    is given. Results agree up to float rounding (tested). jit/vmap-able.
    """
    v.check_choice("clipped_sums", clipped_sums, ("auto", "table", "direct"))
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, config.fit_intercept)
    applies = _scalar_ols(xs, config) and clip is not None
    if clipped_sums == "table" and not applies:
        raise ValueError("clipped_sums='table' needs one feature (fit_intercept=False), "
                         "loss='squared' and the clip bound (clip=...); use 'direct' otherwise.")
    # The descent projects onto [-box, box] and starts at 0, so every lookup lies in the box.
    domain = (-config.box, config.box) if math.isfinite(config.box) else None
    table = (clipped_sum_table(xs[0], yy, onehot, clip, domain=domain)
             if applies and clipped_sums != "direct" else None)
    return Prepared(xs, yy, onehot, n_k, xnorm, table)


@full_precision
def fit_many_prepared(draws: jax.Array, prepared: Prepared, hparams: Hyperparams,
                      configs: tuple[Config, ...]) -> tuple[jax.Array, Diagnostics]:
    """:func:`fit_many_from_draws` on a :class:`Prepared` dataset (shared by many calls).

    With a clipped-sum table, every run uses the table's ``Delta``: ``hparams.clip`` is replaced
    by it (noise, clipping and stage 1 stay consistent, so the privacy guarantee is for that
    ``Delta``); a concrete ``hparams.clip`` that differs raises.
    """
    configs = tuple(configs)
    if prepared.table is not None:
        tc, hc = prepared.table.clip, hparams.clip
        if not isinstance(tc, jax.core.Tracer) and not isinstance(hc, jax.core.Tracer):
            if not np.allclose(np.asarray(tc), np.asarray(hc), rtol=1e-6):
                raise ValueError(f"hparams.clip={hc!r} differs from the clip the data were "
                                 f"prepared with ({float(tc)!r}); prepare again with that clip.")
        hparams = hparams._replace(clip=tc)
    return _fit_many_soa(draws, prepared.xs, prepared.y, prepared.onehot, prepared.n_k,
                         prepared.xnorm, hparams, configs, prepared.table)


def _check_same_but_method(configs):
    base = dataclasses.replace(configs[0], method="dpse", fairness=False, scaling="group_mean")
    for c in configs:
        c.validate()
        if dataclasses.replace(c, method="dpse", fairness=False, scaling="group_mean") != base:
            raise ValueError("fit_many configs may differ only in method, fairness and scaling; "
                             "run the others separately.")
    return base


def _fit_many_soa(z, xs, yy, onehot, n_k, xnorm, hparams, configs, table=None):
    base = _check_same_but_method(configs)
    num_groups = onehot.shape[1]
    m_count = len(configs)
    steps, p = base.steps, xs.shape[0]
    z1, z2 = jax.vmap(lambda zz: _split_draws(zz, steps, p, num_groups))(z)
    rho = jnp.asarray(hparams.rho, xs.dtype)
    equal = jnp.full((num_groups,), 1.0 / math.sqrt(num_groups), xs.dtype)
    is_dpse = np.array([c.method == "dpse" for c in configs])
    if is_dpse.any():
        tau = rho * hparams.tau_fraction
        dp_idx = np.flatnonzero(is_dpse)  # stage 1 runs only for the DPSE methods
        se_d, fb_d, beta_d = jax.vmap(
            lambda zz: _stage1(zz, xs, yy, onehot, n_k, xnorm, tau, hparams, base, table))(z1[dp_idx])
        se_all = jnp.broadcast_to(equal, (m_count, num_groups)).at[dp_idx].set(se_d)
        fb_all = jnp.zeros((m_count,), bool).at[dp_idx].set(fb_d)
        beta_all = jnp.zeros((m_count, xs.shape[0]), xs.dtype).at[dp_idx].set(beta_d)
    else:
        se_all = jnp.broadcast_to(equal, (m_count, num_groups))
        fb_all = jnp.zeros((m_count,), bool)
        beta_all = jnp.zeros((m_count, xs.shape[0]), xs.dtype)
    sel = jnp.asarray(is_dpse)
    se = jnp.where(sel[:, None], se_all, equal)
    fb = sel & fb_all
    beta1 = jnp.where(sel[:, None], beta_all, 0.0)
    rels, stds, rho1, rho2 = [], [], [], []
    for m, c in enumerate(configs):  # host-side bookkeeping over the (few, static) methods
        mu = _mu(hparams, c)
        rel, std = _release_params(se[m], mu, n_k, hparams, c)
        rels.append(rel)
        stds.append(std)
        private = c.method != "nonprivate"
        rho1.append(rho * hparams.tau_fraction if (c.method == "dpse" and private) else 0.0 * rho)
        r2 = mu * (1.0 if c.method == "pooled" else jnp.sum(se[m] ** 2))
        rho2.append(r2 if private else 0.0 * rho)
    thetas = [None] * m_count
    clipped = [None] * m_count
    for fair in (False, True):
        idx = [m for m, c in enumerate(configs) if c.fairness == fair]
        if not idx:
            continue
        cfg = dataclasses.replace(base, fairness=fair)
        rel = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[rels[m] for m in idx])
        sel_idx = np.asarray(idx)
        th, cl = jax.vmap(lambda za, zb, r: _descent((za, zb), xs, yy, onehot, xnorm, r, hparams,
                                                     cfg, table))(z2[0][sel_idx], z2[1][sel_idx],
                                                                  rel)
        for j, m in enumerate(idx):
            thetas[m], clipped[m] = th[j], cl[j]
    diag = Diagnostics(se=se, fallback=fb, beta_stage1=beta1, noise_std=jnp.stack(stds),
                       rho_stage1=jnp.stack(rho1), rho_stage2=jnp.stack(rho2),
                       fraction_clipped=jnp.stack(clipped))
    return jnp.stack(thetas), diag


def _fit_soa(key, xs, y, onehot, n_k, xnorm, hp: Hyperparams, cfg: Config):
    z1, z2 = _split_draws(_run_draws(key, cfg.steps, xs.shape[0], onehot.shape[1], xs.dtype),
                          cfg.steps, xs.shape[0], onehot.shape[1])
    k_groups = onehot.shape[1]
    rho = jnp.asarray(hp.rho, xs.dtype)
    equal = jnp.full((k_groups,), 1.0 / math.sqrt(k_groups), xs.dtype)
    if cfg.method == "dpse":
        tau = rho * hp.tau_fraction
        se, fallback, beta1 = _stage1(z1, xs, y, onehot, n_k, xnorm, tau, hp, cfg)
        rho1 = tau
    else:
        se, fallback, beta1 = equal, jnp.array(False), jnp.zeros((xs.shape[0],), xs.dtype)
        rho1 = jnp.zeros((), xs.dtype)
    mu = _mu(hp, cfg)
    theta, std, clipped = _stage2(z2, xs, y, onehot, n_k, xnorm, se, mu, hp, cfg)
    private = cfg.method != "nonprivate"
    rho2 = mu * (1.0 if cfg.method == "pooled" else jnp.sum(se**2)) if private else 0.0 * mu
    diag = Diagnostics(se=se, fallback=fallback, beta_stage1=beta1, noise_std=std,
                       rho_stage1=rho1 if private else 0.0 * rho1, rho_stage2=rho2,
                       fraction_clipped=clipped)
    return theta, diag


def _check_inputs(key, data: Dataset, hp: Hyperparams, cfg: Config) -> None:
    cfg.validate()
    v.check_threefry_key(key)
    if not isinstance(data, Dataset):
        raise ValueError("data must be a dpfair_jax.data.Dataset (use make_dataset(x, y, s)).")
    data.validate(min_group_size=1)
    if cfg.loss == "squared" and data.num_classes:
        raise ValueError("loss='squared' needs a regression dataset (num_classes=0); "
                         "build it with make_dataset(..., num_classes=0) or use loss='logistic'.")
    if cfg.loss == "logistic" and data.num_classes not in (0, 2):
        raise ValueError("loss='logistic' needs binary labels in {0, 1}.")
    v.check_rho(hp.rho, allow_inf=True)
    tf = np.asarray(hp.tau_fraction) if not isinstance(hp.tau_fraction, jax.core.Tracer) else None
    if tf is not None and (np.any(tf <= 0) or np.any(tf >= 1)):
        raise ValueError(f"tau_fraction must lie in (0, 1), got {hp.tau_fraction!r} "
                         "(the paper uses 0.2).")
    v.check_positive("learning_rate", hp.learning_rate)
    v.check_clip_norm(hp.clip, "clip")
    v.check_positive("fairness_weight", hp.fairness_weight, allow_zero=True)
    v.check_finite("thresholds", hp.thresholds)
    th = np.shape(hp.thresholds)
    if th not in ((), (data.num_groups,)):
        raise ValueError(f"thresholds must be a scalar or have shape ({data.num_groups},), got {th}.")
    v.check_positive("stats_bound_x", hp.stats_bound_x)
    v.check_positive("stats_bound_y", hp.stats_bound_y)
    if cfg.se_denominator == "n_minus_d":
        p = data.d + int(cfg.fit_intercept)
        if np.min(data.group_sizes()) <= p:
            raise ValueError("se_denominator='n_minus_d' needs every group larger than the number "
                             f"of parameters ({p}); use se_denominator='n'.")


@full_precision
def fit(key: jax.Array, data: Dataset, hparams: Hyperparams = Hyperparams(),
        config: Config = Config()) -> tuple[jax.Array, Diagnostics]:
    """DPSE (``config.method="dpse"``) or a baseline on ``data``; returns ``(theta, diagnostics)``.

    DPSE: Algorithm 1 with ``tau = tau_fraction * rho`` then Algorithm 2/3 with ``mu = rho - tau``.
    ``theta`` has ``P = d (+1 with fit_intercept)`` entries (intercept last). Pure in ``key`` and
    the traced fields of ``hparams``: ``jax.jit(jax.vmap(...))`` over keys and budgets works.

    Privacy: ``rho``-zCDP (Lemmas 4.1, 4.2, B.3 and composition) under ``config.neighbour``
    (``"add_remove"`` or ``"swap"``) with public group sizes; ``method="nonprivate"`` is not
    private. Convert with :func:`zcdp_to_epsilon`; itemise with :func:`budget_ledger`.
    """
    _check_inputs(key, data, hparams, config)
    return fit_arrays(key, data.x, data.y, data.s, data.num_groups, hparams, config, data.mask)


# --------------------------------------------------------------------------------------------
# References and metrics
# --------------------------------------------------------------------------------------------


def least_squares(data: Dataset, *, weighting: str = "pooled", fit_intercept: bool = False
                  ) -> np.ndarray:
    """Non-private (weighted) least squares, float64 on the host.

    ``weighting="pooled"``: OLS over all rows (what DPNoSE approaches as rho -> inf);
    ``"group_mean"``: weights ``1/n_k`` (minimiser of ``sum_k`` group-mean squared loss, what DPSE
    and the equal split approach with the default scaling when clipping and projection are
    inactive).
    """
    v.check_choice("weighting", weighting, ("pooled", "group_mean"))
    x = np.asarray(data.x, np.float64)
    if fit_intercept:
        x = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    y = np.asarray(data.y, np.float64)
    s = np.asarray(data.s)
    w = np.ones(len(y)) if data.mask is None else np.asarray(data.mask, np.float64)
    if weighting == "group_mean":
        sizes = data.group_sizes()
        w = w / np.maximum(sizes[s], 1.0)
    xw = x * w[:, None]
    return np.linalg.solve(xw.T @ x, xw.T @ y)


def population_mspe(theta: jax.Array, betas: jax.Array, noise_sd: jax.Array) -> jax.Array:
    """Expected MSPE per group on fresh data ``x ~ N(0, I)``, ``y = x^T beta_k + N(0, sd_k^2)``:
    ``||theta - beta_k||^2 + sd_k^2`` (the test protocol of the synthetic studies). ``betas`` is
    ``[K, P]``."""
    diff = theta[None, :] - betas
    return jnp.sum(diff * diff, axis=-1) + noise_sd**2


def group_mspe(theta: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
               fit_intercept: bool = False) -> jax.Array:
    """Empirical mean squared prediction error per group ([K]; 0 for an empty group)."""
    xs = jnp.asarray(x).T
    if fit_intercept:
        xs = jnp.concatenate([xs, jnp.ones((1, xs.shape[1]), xs.dtype)], axis=0)
    r2 = (theta @ xs - y) ** 2
    onehot = jax.nn.one_hot(s, num_groups, dtype=r2.dtype)
    n_k = jnp.sum(onehot, axis=0)
    return (r2 @ onehot) / jnp.maximum(n_k, 1.0)


# --------------------------------------------------------------------------------------------
# Accounting
# --------------------------------------------------------------------------------------------


class BudgetLedger:
    """Named zCDP charges that must add up to a total (host side, float64, vectorised over runs).

    A private stand-in with the interface of ``dpfair_jax.privacy.accounting.ZcdpLedger``
    (``charge``, ``total``, ``assert_total``); charges may be arrays (one entry per run).
    """

    def __init__(self) -> None:
        self.charges: dict[str, np.ndarray] = {}

    def charge(self, name: str, rho: Any) -> None:
        arr = np.asarray(rho, dtype=np.float64)
        if np.any(arr < 0) or np.any(np.isnan(arr)):
            raise ValueError(f"charge {name!r} must be >= 0, got {rho!r}.")
        self.charges[name] = self.charges.get(name, 0.0) + arr

    @property
    def total(self) -> np.ndarray:
        return sum(self.charges.values(), np.zeros(()))

    def assert_total(self, rho: Any, *, rtol: float = 1e-5) -> None:
        if not np.allclose(self.total, np.asarray(rho, np.float64), rtol=rtol, atol=0.0):
            raise AssertionError(f"ledger charges add up to {self.total}, not rho = {rho}.")


def budget_ledger(rho: Any, se: Any, *, config: Config = Config(), tau_fraction: float = 0.2
                  ) -> BudgetLedger:
    """Itemise a run's zCDP spend from the released allocation ``se`` ([..., K]).

    Stage 1: ``X^T X`` and ``X^T y`` get ``tau_k/2`` each and each group's SE ``tau_k``,
    ``tau_k = tau/(K+1)``. Stage 2: per group ``mu s_k^2`` over the T iterations (split in halves
    between gradient and loss for Algorithm 2). The result should sum to ``rho`` (checked with
    ``assert_total``); with a wrong allocation (``sum s^2 != 1``) it does not.
    """
    config.validate()
    v.check_rho(rho)
    se = np.asarray(se, np.float64)
    k = se.shape[-1]
    rho = np.asarray(rho, np.float64)
    led = BudgetLedger()
    if config.method == "nonprivate":
        raise ValueError("method='nonprivate' spends no privacy budget; nothing to itemise.")
    if config.method == "dpse":
        tau = tau_fraction * rho
        tau_k = tau / (k + 1)
        led.charge("stage1/xtx", tau_k / 2)
        led.charge("stage1/xty", tau_k / 2)
        for j in range(k):  # host-side bookkeeping, one entry per group
            led.charge(f"stage1/se[{j}]", tau_k)
        mu = rho - tau
    else:
        mu = rho
    if config.method == "pooled":
        led.charge("stage2/pooled_grad", mu)
        return led
    for j in range(k):
        share = mu * se[..., j] ** 2
        if config.fairness:
            led.charge(f"stage2/grad[{j}]", share / 2)
            led.charge(f"stage2/loss[{j}]", share / 2)
        else:
            led.charge(f"stage2/grad[{j}]", share)
    return led


def privacy(config: Config, rho: Any, delta: float = 1e-5):
    """What one run spends: ``rho`` (zCDP) and the implied ``(epsilon, delta)``.

    Returns ``accounting.PrivacySpend`` (a dict with its fields if that module is unavailable);
    the conversion is the paper's ``epsilon = rho + 2 sqrt(rho log 1/delta)`` (Bun & Steinke 2016,
    Prop. 1.3). Relation: ``"add_remove"`` or ``"replace_one"`` (``neighbour="swap"``).
    """
    config.validate()
    v.check_delta(delta)
    rel = "replace_one" if config.neighbour == "swap" else "add_remove"
    if config.method == "nonprivate":
        fields = dict(epsilon=float("inf"), delta=delta, rho=float("inf"), relation=rel,
                      unit="example", notes="paper 000 non-private baseline: no guarantee")
    else:
        v.check_rho(rho)
        fields = dict(epsilon=float(zcdp_to_epsilon(float(rho), delta)), delta=delta,
                      rho=float(rho), relation=rel, unit="example",
                      notes=f"paper 000 {config.method}: rho-zCDP, group sizes public")
    try:
        from dpfair_jax.privacy.accounting import PrivacySpend

        return PrivacySpend(accountant="zcdp", **fields)
    except ImportError:  # pragma: no cover - accounting has landed; kept for robustness
        return fields
