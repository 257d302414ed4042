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
  ``Delta^4 / (2 tau_k)``, i.e. calibrated to sensitivity ``Delta^2``: for ``Delta < 1`` the sum
  of values in ``[0, Delta]`` moves by up to ``Delta > Delta^2`` and the true charge is
  ``(Delta / Delta^2)^2`` times the stated one. The default clips to ``[0, Delta^2]``
  (``stage1_clip="delta_sq"``, sensitivity ``Delta^2``, the paper's noise); the literal
  ``[0, Delta]`` is ``stage1_clip="paper"``, whose noise is calibrated to ``max(Delta, Delta^2)``
  (the paper's ``Delta^2`` for ``Delta >= 1``, the true sensitivity ``Delta`` below), so both
  are private for every ``Delta``.
* Standard error denominator: ``n_k`` (Algorithm 1, line 21, default) or ``n_k - d`` (text),
  ``se_denominator="n_minus_d"``.
* Lemma C.1's noise scale ``U^2`` assumes ``||x|| <= U`` and ``|y| <= U``; here the rows of ``X``
  are clipped to norm ``stats_bound_x`` and ``y`` to ``[-stats_bound_y, stats_bound_y]`` before the
  statistics are formed, with sensitivities ``U_x^2`` (``X^T X``) and ``U_x U_y`` (``X^T y``).
* ``g = max_k l_k`` (section 6) is always >= 0 for squared losses, so the indicator in eq. (2) is
  always on. The default ``g="bgl"`` is ``max_k (l_k - eta_k)`` with thresholds ``eta_k``
  (``Hyperparams.thresholds``); with thresholds 0 it is the paper's ``g``.

Neighbouring relation (``Config.relation``, the names of ``dp_accounting.NeighboringRelation`` and
``dpfair_jax.privacy.accounting.RELATIONS``):

* ``"replace_one"`` (default; the paper's bounded DP with its public group sizes, Sec. 2): group
  membership and the sizes ``n_k`` (so ``n``) are public, and a neighbour replaces one record by
  another record *of the same group*. The sizes are then the same in both worlds and dividing by
  them is post-processing. Sensitivities (``dpfair_jax.privacy.paper_formulas``): clipped
  gradient sums ``2 Delta``, ``X^T y`` ``2 U_x U_y``, the upper triangle of ``X^T X``
  ``sqrt(2) U_x^2``, sums of values in ``[0, B]`` (clipped losses, squared residuals) ``B``.
* ``"add_remove"``: one record added or removed. Then ``n_k`` differs between neighbours and
  a release divided by the exact ``n_k`` is not zCDP (the mean moves by up to twice the
  clipped-sum sensitivity and its variance changes). Every run therefore first releases noisy
  group counts ``n_k + N(0, 1 / (2 rho_c))`` (sensitivity 1), ``rho_c = count_fraction * rho``,
  charged to the ledger, and uses ``max(noisy n_k, 1)`` wherever the paper uses ``n_k`` (stage-1
  standard errors, stage-2 normalisation, ``n`` of the pooled baseline); stage 1 and stage 2
  share the remaining ``(1 - count_fraction) rho``. Sensitivities: ``Delta``, ``U_x U_y``,
  ``U_x^2``, ``B``.

Privacy (whole DPSE run): ``rho``-zCDP, ``rho = rho_c + tau + mu`` by composition (Lemma D.1;
``rho_c = 0`` under replace-one), under ``Config.relation``. The per-group charges of stage 2
are summed over groups (the paper's accounting, Lemmas B.2-B.3); as the groups are disjoint this
is an upper bound. :func:`budget_ledger` itemises the charges and checks they add up to rho;
:func:`privacy` states the spend and its relation. ``Diagnostics.fraction_clipped`` is computed
from the data without noise: a diagnostic for the analyst, not covered by the guarantee.
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
from dpfair_jax.privacy import paper_formulas as _pf
from dpfair_jax.privacy.accounting import RELATIONS
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
    "stage1_release",
    "Stage1Release",
    "stage1_noise_stds",
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
      relation: ``"replace_one"`` (default: public group membership and sizes, one record
        replaced by another of the same group) or ``"add_remove"`` (noisy group counts, charged
        ``count_fraction * rho``, as denominators); see the module docstring.
      stage1_clip: ``"delta_sq"`` (clip squared residuals to ``[0, Delta^2]``, noise for
        ``Delta^2``) or ``"paper"`` (``[0, Delta]``, Algorithm 1 line 17 literally; noise for
        ``max(Delta, Delta^2)``).
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
    relation: str = "replace_one"
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
        if self.relation == "swap":
            raise ValueError("relation='swap' is retired: use relation='replace_one' (a record "
                             "replaced by another record of the same group, group sizes public).")
        v.check_choice("relation", self.relation, RELATIONS)
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
    ``stats_bound_y``: ``U`` of Lemma C.1 for the rows of X and for y. ``count_fraction``: share
    of rho spent on the noisy group counts under ``relation="add_remove"`` (unused, and not
    charged, under ``"replace_one"``).
    """

    rho: Any = 1.0
    tau_fraction: Any = 0.2
    learning_rate: Any = 0.1
    clip: Any = 2.0
    fairness_weight: Any = 1.0
    thresholds: Any = 0.0
    stats_bound_x: Any = 3.0
    stats_bound_y: Any = 30.0
    count_fraction: Any = 0.05


class Diagnostics(NamedTuple):
    """What a run reports besides the parameters (all arrays; traced-friendly)."""

    se: jax.Array  # [K] normalised standard errors used for the allocation
    fallback: jax.Array  # bool: stage 1 returned the equal allocation
    beta_stage1: jax.Array  # [P] private pooled OLS of stage 1 (zeros when stage 1 is skipped)
    noise_std: jax.Array  # [K] std of the noise added to each group's gradient sum
    rho_stage1: jax.Array  # zCDP spent by stage 1
    rho_stage2: jax.Array  # zCDP spent by stage 2 (sum of the per-group charges)
    fraction_clipped: jax.Array  # mean fraction of clipped gradients (non-private diagnostic)
    rho_counts: jax.Array  # zCDP spent on the noisy group counts (0 under replace-one)
    counts: jax.Array  # [K] group sizes used as denominators (noisy, clamped >= 1, under add/remove)


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


class _Sens(NamedTuple):
    """Sensitivities per unit bound under a relation (``dpfair_jax.privacy.paper_formulas``)."""

    vector: float  # sum of vectors clipped to norm 1 (gradient sums, X^T y): 1 or 2
    gram: float  # upper triangle of sum_i x_i x_i^T, ||x_i|| <= 1: 1 or sqrt(2)
    bounded: float  # sum of scalars in [0, 1] (clipped losses, squared residuals): 1 under both


def _sens(relation: str) -> _Sens:
    return _Sens(_pf.clipped_sum_sensitivity(1.0, relation), _pf.gram_sensitivity(1.0, relation),
                 _pf.bounded_scalar_sum_sensitivity(0.0, 1.0, relation))


def _budget(hp: Hyperparams, cfg: Config, dtype=jnp.float32):
    """Split of ``rho`` into (counts, stage 1, stage 2): ``(rho_c, tau, mu)``.

    Under add/remove ``rho_c = count_fraction * rho`` goes to the noisy counts and the rest is
    split as in the paper; under replace-one ``rho_c = 0``. ``tau = tau_fraction * rest`` and
    ``mu = rest - tau`` for DPSE, ``tau = 0`` and ``mu = rest`` for the baselines (written as
    products so that ``rho = inf`` gives ``inf`` everywhere)."""
    rho = jnp.asarray(hp.rho, dtype)
    if cfg.relation == "add_remove":
        rho_c, rest = rho * hp.count_fraction, rho * (1.0 - hp.count_fraction)
    else:
        rho_c, rest = 0.0 * rho, rho
    if cfg.method == "dpse":
        return rho_c, rest * hp.tau_fraction, rest * (1.0 - hp.tau_fraction)
    return rho_c, 0.0 * rest, rest


def _denominators(zc: jax.Array, n_k: jax.Array, rho_c: Any, cfg: Config) -> jax.Array:
    """Group sizes as used by the method: the public ``n_k`` under replace-one; under add/remove
    the noisy counts ``max(n_k + z / sqrt(2 rho_c), 1)`` (Gaussian mechanism, sensitivity 1 for
    the count vector; exact when ``rho_c = inf`` or for the non-private method)."""
    if cfg.relation != "add_remove" or cfg.method == "nonprivate":
        return n_k
    rho_c = jnp.asarray(rho_c, n_k.dtype)
    std = jnp.where(jnp.isinf(rho_c), 0.0, 1.0 / jnp.sqrt(2.0 * rho_c))
    return jnp.maximum(n_k + std * zc, 1.0)


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
                     relation: str = "replace_one") -> tuple[jax.Array, jax.Array]:
    """Per-group Gaussian noise stds on the clipped gradient and loss sums (Algorithms 2 and 3).

    Algorithm 3 gives group k the budget ``mu_T = mu s_k^2 / T`` per iteration, so the gradient
    noise std is ``sens_g / sqrt(2 mu_T) = sens_g sqrt(T / (2 mu s_k^2))``. Algorithm 2 halves it
    between gradient and loss (``mu_T = mu s_k^2 / (2T)`` each): std ``sens_g sqrt(T/(mu s_k^2))``
    and ``sens_l sqrt(T/(mu s_k^2))``. Sensitivities of a group's clipped sums: ``sens_g = 2
    Delta`` (replace-one within the group) or ``Delta`` (add/remove); ``sens_l = Delta^2`` under
    both (losses clipped to ``[0, Delta^2]``). Returns (grad_std, loss_std).

    Privacy: per iteration these are ``sum_k mu s_k^2 / T = mu / T``-zCDP (Gaussian mechanism,
    Bun & Steinke Lemma 2.5) under ``relation``, so ``mu``-zCDP over T iterations when
    ``sum_k s_k^2 = 1``.
    """
    v.check_choice("relation", relation, RELATIONS)
    se = jnp.asarray(se)
    sens = _sens(relation)
    share = jnp.asarray(mu) * se**2 / steps  # mu_T per group, both halves together
    per_release = share / 2.0 if fairness else share
    inv = jnp.where(per_release > 0, 1.0 / jnp.sqrt(2.0 * per_release), jnp.inf)
    grad_std = sens.vector * clip * inv
    loss_std = sens.bounded * clip**2 * inv
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


class Stage1Release(NamedTuple):
    """The noisy releases of Algorithm 1 (lines 8, 9 and 17) and the pooled fit computed from them.

    ``xtx [P, P]``: ``X^T X`` plus symmetric Gaussian noise (upper triangle i.i.d., mirrored);
    ``xty [P]``: ``X^T y`` plus noise; ``residual_sums [K]``: per group the clipped squared
    residual sum at ``beta`` plus noise; ``beta [P]``: ``(noisy X^T X)^-1 noisy X^T y`` (post-
    processing; non-finite when the noisy matrix is singular); ``lam_min``: the smallest eigenvalue
    of the noisy ``X^T X`` (line 11)."""

    xtx: jax.Array
    xty: jax.Array
    residual_sums: jax.Array
    beta: jax.Array
    lam_min: jax.Array


def stage1_noise_stds(tau: Any, num_groups: int, hparams: Hyperparams, config: Config = Config()
                      ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Noise stds of Algorithm 1's releases: ``(std_xx, std_xy, std_res)``.

    ``tau_k = tau / (K + 1)`` (line 7); ``X^T X`` and ``X^T y`` get ``tau_k / 2`` each (lines
    8-9, Lemma C.1), so ``std = sens / sqrt(tau_k)`` with ``sens_xx = U_x^2`` (add/remove) or
    ``sqrt(2) U_x^2`` (replace-one; Frobenius norm of ``x x^T - x' x'^T``) and ``sens_xy = U_x U_y``
    or ``2 U_x U_y``; each group's clipped residual sum gets ``tau_k`` (line 17), ``std_res = sens
    / sqrt(2 tau_k)`` with ``sens = Delta^2`` (``stage1_clip="delta_sq"``, residuals in ``[0,
    Delta^2]``) or ``max(Delta, Delta^2)`` (``"paper"``, residuals in ``[0, Delta]``: the true
    sensitivity ``Delta`` when ``Delta < 1``, the paper's ``Delta^2`` otherwise), the same under
    both relations. ``tau`` may be traced.

    Privacy: the three releases together are ``tau``-zCDP (Lemma 4.1) under ``config.relation``.
    """
    sens = _sens(config.relation)
    tau_k = jnp.asarray(tau) / (num_groups + 1)
    ux, uy, clip = hparams.stats_bound_x, hparams.stats_bound_y, hparams.clip
    std_xx = sens.gram * ux**2 / jnp.sqrt(tau_k)
    std_xy = sens.vector * ux * uy / jnp.sqrt(tau_k)
    bound = clip**2 if config.stage1_clip == "delta_sq" else jnp.maximum(clip, clip**2)
    std_res = sens.bounded * bound / jnp.sqrt(2.0 * tau_k)
    return std_xx, std_xy, std_res


def _stage1_release(z_all, xs, y, onehot, xnorm, tau, hp: Hyperparams, cfg: Config,
                    table: ClippedSumTable | None = None) -> Stage1Release:
    """Algorithm 1's noisy releases on structure-of-arrays inputs (see :class:`Stage1Release`).

    With a :class:`ClippedSumTable` valid for every theta (``domain=None``; one feature) and
    ``stage1_clip="delta_sq"`` the clipped residual sums ``sum_k min(r_i^2, Delta^2)`` are the
    table's loss sums at ``beta``; a table restricted to the descent's box cannot serve ``beta``
    (unbounded), and the sums are then taken over the examples."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    std_xx, std_xy, std_res = stage1_noise_stds(tau, k_groups, hp, cfg)
    # Lemma C.1 on bounded rows: clip ||x|| <= U_x, |y| <= U_y.
    a = 1.0 / jnp.maximum(1.0, xnorm / hp.stats_bound_x)
    xa = xs * a
    yc = jnp.clip(y, -hp.stats_bound_y, hp.stats_bound_y)
    w = jnp.sum(onehot, axis=1)  # row weights (mask)
    xtx = (xa * w) @ xa.T
    xty = (xa * w) @ yc
    z = z_all[: p * p].reshape(p, p)
    z = jnp.triu(z) + jnp.triu(z, 1).T  # symmetric: upper triangle i.i.d., mirrored
    xtx_n = xtx + std_xx * z
    xty_n = xty + std_xy * z_all[p * p: p * p + p]
    lam_min, beta = _min_eig_and_solve(xtx_n, xty_n)  # lines 11 and 15
    if table is not None and table.domain is None and cfg.stage1_clip == "delta_sq":
        clean = table_group_sums(table, jnp.where(jnp.isfinite(beta[0]), beta[0], 0.0))[1]
        clean = jnp.where(jnp.isfinite(beta[0]), clean, jnp.inf)
    else:
        r2 = (beta @ xs - y) ** 2
        upper = hp.clip if cfg.stage1_clip == "paper" else hp.clip**2
        clean = jnp.clip(r2, 0.0, upper) @ onehot
    s_sum = clean + std_res * z_all[p * p + p:]  # line 17
    return Stage1Release(xtx_n, xty_n, s_sum, beta, lam_min)


def _stage1(z_all, xs, y, onehot, den, xnorm, tau, hp: Hyperparams, cfg: Config,
            table: ClippedSumTable | None = None):
    """Algorithm 1 on structure-of-arrays inputs. Returns (se [K], fallback, beta [P]).

    ``den [K]``: the group sizes of line 21 (public sizes, or the noisy counts under add/remove);
    everything after the releases of :func:`_stage1_release` is post-processing."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    rel = _stage1_release(z_all, xs, y, onehot, xnorm, tau, hp, cfg, table)
    s_sum, beta = rel.residual_sums, rel.beta
    denom = den - p if cfg.se_denominator == "n_minus_d" else den
    se = jnp.sqrt(jnp.maximum(s_sum, 0.0) / jnp.maximum(denom, 1.0))  # line 21
    se = se / jnp.sqrt(jnp.sum(se**2))  # line 23
    fallback = (rel.lam_min <= 0) | jnp.any(s_sum <= 0) | ~jnp.all(jnp.isfinite(se))  # l. 11, 18
    equal = jnp.full((k_groups,), 1.0 / math.sqrt(k_groups), xs.dtype)
    se = jnp.where(fallback, equal, se)
    beta = jnp.where(jnp.all(jnp.isfinite(beta)), beta, 0.0)
    return se, fallback, beta


def _standalone(key, data: Dataset, hparams: Hyperparams, config: Config, steps: int):
    """Shared set-up of the stage-level entry points: layout, draws, budget split, denominators."""
    xs, y, onehot, n_k, xnorm = _prepare(data.x, data.y, data.s, data.num_groups, data.mask,
                                         config.fit_intercept)
    z1, zc, z2 = _split_draws(_run_draws(key, steps, xs.shape[0], data.num_groups, xs.dtype),
                              steps, xs.shape[0], data.num_groups)
    rho_c, tau, mu = _budget(hparams, dataclasses.replace(config, method="dpse"), xs.dtype)
    if config.method != "dpse":
        mu = _budget(hparams, config, xs.dtype)[2]
    den = _denominators(zc, n_k, rho_c, config)
    return xs, y, onehot, xnorm, z1, z2, tau, mu, den


@full_precision
def stage1_release(key: jax.Array, data: Dataset, hparams: Hyperparams,
                   config: Config = Config()) -> Stage1Release:
    """Algorithm 1's noisy releases (lines 8, 9, 17) with ``tau = tau_fraction * rho`` (of the
    budget left after the counts under add/remove): noisy ``X^T X``, ``X^T y``, per-group clipped
    residual sums, and the pooled fit computed from them (:class:`Stage1Release`; the noise stds
    are :func:`stage1_noise_stds`). Uses the same draws as :func:`stage1_standard_errors`.

    Privacy: ``tau``-zCDP (Lemma 4.1/B.1) under ``config.relation``.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, z1, _, tau, _, _ = _standalone(key, data, hparams, config, config.steps)
    return _stage1_release(z1, xs, y, onehot, xnorm, tau, hparams, config)


@full_precision
def stage1_standard_errors(key: jax.Array, data: Dataset, hparams: Hyperparams,
                           config: Config = Config()) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Algorithm 1: ``tau``-zCDP per-group standard errors, ``tau = tau_fraction * rho`` (of
    ``(1 - count_fraction) rho`` under add/remove).

    Noisy ``X^T X`` (symmetric noise) and ``X^T y`` with ``tau_k/2`` each (Lemma C.1), ``tau_k =
    tau/(K+1)``; the pooled fit ``beta = (X^T X)^-1 X^T y``; per group the clipped residual sum plus
    ``N(0, std_res^2)`` noise (:func:`stage1_noise_stds`); ``s_k = sqrt(S_k/n_k)`` normalised to
    ``sum s_k^2 = 1``, with ``n_k`` the public size (replace-one) or the noisy count (add/remove).
    The fallbacks (``lambda_min <= 0`` or some ``S_k <= 0``: return ``1/sqrt(K)``) are
    ``jnp.where``. Returns ``(se [K], fallback, beta [P])``.

    Privacy: ``tau``-zCDP (Lemma 4.1/B.1) under ``config.relation``; under add/remove plus
    ``count_fraction * rho`` for the noisy counts.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, z1, _, tau, _, den = _standalone(key, data, hparams, config,
                                                           config.steps)
    return _stage1(z1, xs, y, onehot, den, xnorm, tau, hparams, config)


# --------------------------------------------------------------------------------------------
# Stage 2: Algorithms 2 and 3 (and the pooled DPNoSE baseline)
# --------------------------------------------------------------------------------------------


def _noise_stds(se, mu, hp: Hyperparams, cfg: Config, dtype):
    """(grad_std, loss_std) on the clipped *sums*, [K] ([1] for pooled); zero when not private."""
    if cfg.method == "pooled":
        # DPNoSE (standard DP-GD): budget mu/T per iteration on the pooled clipped sum, whose
        # sensitivity is that of one clipped vector (2 Delta under replace-one, Delta add/remove).
        sens = _sens(cfg.relation).vector
        grad_std = sens * hp.clip * jnp.sqrt(cfg.steps / (2.0 * mu)) * jnp.ones((1,), dtype)
        loss_std = jnp.zeros((1,), dtype)
    else:
        grad_std, loss_std = group_noise_stds(se, mu, cfg.steps, hp.clip, fairness=cfg.fairness,
                                              relation=cfg.relation)
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
    """Scales and effective noise stds of the method (this is where ``scaling`` acts).

    ``n_k [K]``: the group sizes the method divides by (:func:`_denominators`: public sizes, or
    noisy counts >= 1 under add/remove, so every division is post-processing of released values;
    dividing a release calibrated to a sum by a number >= 1 never raises its sensitivity)."""
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
    """Standard normal draws one run consumes: stage 1 (``p^2 + p + K``), the group counts
    (``K``, used under add/remove), then T x (``pK + K``)."""
    return p * p + p + 2 * k_groups + steps * (p * k_groups + k_groups)


def _run_draws(key, steps: int, p: int, k_groups: int, dtype):
    """All of a run's standard normal draws, from one ``jax.random.normal`` call.

    Drawing once, outside the scan, keeps the compiled program small (each threefry call costs
    compile time) and lets a Monte Carlo study draw a whole trial's noise at once.
    """
    return jax.random.normal(key, (num_draws(steps, p, k_groups),), dtype)


def _split_draws(z, steps: int, p: int, k_groups: int):
    """(stage-1 draws [p^2 + p + K], count draws [K], descent draws ([T, p, K], [T, K]))."""
    s1 = p * p + p + k_groups
    rest = z[s1 + k_groups:].reshape(steps, p * k_groups + k_groups)
    return z[:s1], z[s1: s1 + k_groups], (rest[:, : p * k_groups].reshape(steps, p, k_groups),
                                           rest[:, p * k_groups:])


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
    are :func:`group_noise_stds` (with ``mu`` as in :func:`fit` and ``config.steps``); ``n_k`` is
    the public group size under replace-one and a fresh noisy count (``>= 1``) under add/remove.

    Privacy: ``mu/T``-zCDP (one of T iterations) under ``config.relation``; under add/remove plus
    ``count_fraction * rho`` for the noisy counts this call draws.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, _, (zg, zl), _, mu, den = _standalone(key, data, hparams, config, 1)
    se = jnp.asarray(se, xs.dtype)
    rel, _ = _release_params(se, mu, den, hparams, config)
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

    Privacy: ``mu``-zCDP (Lemmas B.2, B.3) under ``config.relation``, given public ``se`` (from
    stage 1, a private release, or fixed); under add/remove plus ``count_fraction * rho`` for the
    noisy counts.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, _, z2, _, mu, den = _standalone(key, data, hparams, config, config.steps)
    theta, _, _ = _stage2(z2, xs, y, onehot, den, xnorm, jnp.asarray(se, xs.dtype), mu, hparams,
                          config)
    return theta


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
    z1, zc, z2 = jax.vmap(lambda zz: _split_draws(zz, steps, p, num_groups))(z)
    equal = jnp.full((num_groups,), 1.0 / math.sqrt(num_groups), xs.dtype)
    budgets = [_budget(hparams, c, xs.dtype) for c in configs]  # (rho_c, tau, mu) per method
    # group sizes per method: public, or that run's noisy counts (add/remove)
    dens = jnp.stack([_denominators(zc[m], n_k, budgets[m][0], c) for m, c in enumerate(configs)])
    is_dpse = np.array([c.method == "dpse" for c in configs])
    if is_dpse.any():
        tau = budgets[int(np.flatnonzero(is_dpse)[0])][1]
        dp_idx = np.flatnonzero(is_dpse)  # stage 1 runs only for the DPSE methods
        se_d, fb_d, beta_d = jax.vmap(
            lambda zz, dd: _stage1(zz, xs, yy, onehot, dd, xnorm, tau, hparams, base, table))(
                z1[dp_idx], dens[dp_idx])
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
    rels, stds, rho1, rho2, rhoc = [], [], [], [], []
    for m, c in enumerate(configs):  # host-side bookkeeping over the (few, static) methods
        rho_c, tau_m, mu = budgets[m]
        rel, std = _release_params(se[m], mu, dens[m], hparams, c)
        rels.append(rel)
        stds.append(std)
        r1, r2, rc = _spent(c, rho_c, tau_m, mu, se[m])
        rho1.append(r1)
        rho2.append(r2)
        rhoc.append(rc)
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
                       fraction_clipped=jnp.stack(clipped), rho_counts=jnp.stack(rhoc),
                       counts=dens)
    return jnp.stack(thetas), diag


def _spent(cfg: Config, rho_c, tau, mu, se):
    """zCDP a run spends: (stage 1, stage 2, counts); zeros for the non-private method."""
    if cfg.method == "nonprivate":
        return 0.0 * tau, 0.0 * mu, 0.0 * rho_c
    r2 = mu * (1.0 if cfg.method == "pooled" else jnp.sum(se**2))
    return tau, r2, rho_c


def _fit_soa(key, xs, y, onehot, n_k, xnorm, hp: Hyperparams, cfg: Config):
    z1, zc, z2 = _split_draws(_run_draws(key, cfg.steps, xs.shape[0], onehot.shape[1], xs.dtype),
                              cfg.steps, xs.shape[0], onehot.shape[1])
    k_groups = onehot.shape[1]
    equal = jnp.full((k_groups,), 1.0 / math.sqrt(k_groups), xs.dtype)
    rho_c, tau, mu = _budget(hp, cfg, xs.dtype)
    den = _denominators(zc, n_k, rho_c, cfg)
    if cfg.method == "dpse":
        se, fallback, beta1 = _stage1(z1, xs, y, onehot, den, xnorm, tau, hp, cfg)
    else:
        se, fallback, beta1 = equal, jnp.array(False), jnp.zeros((xs.shape[0],), xs.dtype)
    theta, std, clipped = _stage2(z2, xs, y, onehot, den, xnorm, se, mu, hp, cfg)
    rho1, rho2, rhoc = _spent(cfg, rho_c, tau, mu, se)
    diag = Diagnostics(se=se, fallback=fallback, beta_stage1=beta1, noise_std=std,
                       rho_stage1=rho1, rho_stage2=rho2, fraction_clipped=clipped,
                       rho_counts=rhoc, counts=den)
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
    cf = np.asarray(hp.count_fraction) if not isinstance(hp.count_fraction, jax.core.Tracer) else None
    if cfg.relation == "add_remove" and cf is not None and (np.any(cf <= 0) or np.any(cf >= 1)):
        raise ValueError(f"count_fraction must lie in (0, 1) under relation='add_remove' (the share "
                         f"of rho for the noisy group counts), got {hp.count_fraction!r}.")
    v.check_positive("learning_rate", hp.learning_rate)
    v.check_clip_norm(hp.clip, "clip")
    v.check_positive("fairness_weight", hp.fairness_weight, allow_zero=True)
    v.check_finite("thresholds", hp.thresholds)
    th = np.shape(hp.thresholds)
    if th not in ((), (data.num_groups,)):
        raise ValueError(f"thresholds must be a scalar or have shape ({data.num_groups},), got {th}.")
    v.check_positive("stats_bound_x", hp.stats_bound_x)
    v.check_positive("stats_bound_y", hp.stats_bound_y)
    if cfg.se_denominator == "n_minus_d" and cfg.relation == "replace_one":
        # public sizes only; under add/remove the noisy denominator is clamped (max(n_k - P, 1))
        p = data.d + int(cfg.fit_intercept)
        if np.min(data.group_sizes()) <= p:
            raise ValueError("se_denominator='n_minus_d' needs every group larger than the number "
                             f"of parameters ({p}); use se_denominator='n'.")


@full_precision
def fit(key: jax.Array, data: Dataset, hparams: Hyperparams = Hyperparams(),
        config: Config = Config()) -> tuple[jax.Array, Diagnostics]:
    """DPSE (``config.method="dpse"``) or a baseline on ``data``; returns ``(theta, diagnostics)``.

    DPSE: Algorithm 1 with ``tau = tau_fraction * rho`` then Algorithm 2/3 with ``mu = rho - tau``
    (under add/remove: noisy counts with ``rho_c = count_fraction * rho`` first, and ``tau``,
    ``mu`` split ``rho - rho_c`` the same way). ``theta`` has ``P = d (+1 with fit_intercept)``
    entries (intercept last). Pure in ``key`` and the traced fields of ``hparams``:
    ``jax.jit(jax.vmap(...))`` over keys and budgets works.

    Privacy: ``rho``-zCDP (Lemmas 4.1, 4.2, B.3 and composition) under ``config.relation``:
    ``"replace_one"`` (default) with public group membership and sizes, or ``"add_remove"`` with
    the sizes released as noisy counts inside the budget; ``method="nonprivate"`` is not private.
    :func:`privacy` states the spend; :func:`budget_ledger` itemises it.
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
    ``relation`` names the neighbouring relation the charges hold under.
    """

    def __init__(self, relation: str = "replace_one") -> None:
        v.check_choice("relation", relation, RELATIONS)
        self.relation = relation
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


def budget_ledger(rho: Any, se: Any, *, config: Config = Config(), tau_fraction: float = 0.2,
                  count_fraction: float = 0.05) -> BudgetLedger:
    """Itemise a run's zCDP spend from the released allocation ``se`` ([..., K]).

    Under ``relation="add_remove"``: ``counts`` gets ``count_fraction * rho`` (the noisy group
    counts) and the stages share the rest; under ``"replace_one"`` the sizes are public and
    nothing is charged for them. Stage 1: ``X^T X`` and ``X^T y`` get ``tau_k/2`` each and each
    group's SE ``tau_k``, ``tau_k = tau/(K+1)``. Stage 2: per group ``mu s_k^2`` over the T
    iterations (split in halves between gradient and loss for Algorithm 2). The result should sum
    to ``rho`` (checked with ``assert_total``); with a wrong allocation (``sum s^2 != 1``) it does
    not. ``ledger.relation`` is ``config.relation``.
    """
    config.validate()
    v.check_rho(rho)
    se = np.asarray(se, np.float64)
    k = se.shape[-1]
    rho = np.asarray(rho, np.float64)
    led = BudgetLedger(config.relation)
    if config.method == "nonprivate":
        raise ValueError("method='nonprivate' spends no privacy budget; nothing to itemise.")
    rest = rho
    if config.relation == "add_remove":
        if not 0.0 < float(count_fraction) < 1.0:
            raise ValueError(f"count_fraction must lie in (0, 1), got {count_fraction!r}.")
        led.charge("counts", count_fraction * rho)
        rest = rho * (1.0 - count_fraction)
    if config.method == "dpse":
        tau = tau_fraction * rest
        tau_k = tau / (k + 1)
        led.charge("stage1/xtx", tau_k / 2)
        led.charge("stage1/xty", tau_k / 2)
        for j in range(k):  # host-side bookkeeping, one entry per group
            led.charge(f"stage1/se[{j}]", tau_k)
        mu = rest * (1.0 - tau_fraction)
    else:
        mu = rest
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


def _privacy_notes(config: Config) -> str:
    if config.relation == "replace_one":
        rel = ("replace-one within a group: group membership and the sizes n_k are public, a "
               "record is replaced by another record of the same group (sensitivities 2 Delta, "
               "2 U_x U_y, sqrt(2) U_x^2; [0, B] sums B)")
    else:
        rel = ("add/remove-one: the group sizes are released as noisy counts (Gaussian, "
               "sensitivity 1, count_fraction x rho of the budget) and used as denominators "
               "clamped to >= 1 (sensitivities Delta, U_x U_y, U_x^2; [0, B] sums B)")
    clip = ("" if config.method != "dpse" else
            "; stage-1 squared residuals clipped to [0, Delta^2], noise for Delta^2"
            if config.stage1_clip == "delta_sq" else
            "; stage-1 squared residuals clipped to [0, Delta] (Alg. 1 l. 17), noise for "
            "max(Delta, Delta^2)")
    return f"paper 000 {config.method}: rho-zCDP under {rel}{clip}"


def privacy(config: Config, rho: Any, delta: float = 1e-5):
    """What one run spends: ``rho`` (zCDP, everything included) and the implied ``(epsilon,
    delta)``, under ``config.relation``.

    Returns ``accounting.PrivacySpend`` with ``relation = config.relation`` and notes that say what
    is public (replace-one: group membership and sizes) or paid for (add/remove: the noisy
    counts, inside ``rho``); the conversion is the paper's ``epsilon = rho + 2 sqrt(rho log
    1/delta)`` (Bun & Steinke 2016, Prop. 1.3).
    """
    config.validate()
    v.check_delta(delta)
    from dpfair_jax.privacy.accounting import PrivacySpend

    if config.method == "nonprivate":
        return PrivacySpend(epsilon=float("inf"), delta=delta, rho=float("inf"),
                            relation=config.relation, unit="example", accountant="zcdp",
                            notes="paper 000 non-private baseline: no guarantee")
    v.check_rho(rho)
    return PrivacySpend(epsilon=float(zcdp_to_epsilon(float(rho), delta)), delta=delta,
                        rho=float(rho), relation=config.relation, unit="example",
                        accountant="zcdp", notes=_privacy_notes(config))
