"""Private mean estimation: clipped Laplace/Gaussian means, COINPRESS, and their stratified forms.

Paper 003 (Rosenblatt, Stoyanovich, Musco, AAAI 2024), "Stratified Private Mean Estimation"
(eqs. 1-4) and Sec. 5 (COINPRESS vs StratCOINPRESS); COINPRESS is Biswas, Dong, Kamath and
Ullman (NeurIPS 2020), with the constants of its reference code (``twistedcubic/coin-press``).

Everything here is a pure function of ``(key, data, hyperparameters)``; ``num_groups`` and the
number of COINPRESS steps are static, privacy budgets, radii, ranges and weights are traced, so a
Monte Carlo study is ``vmap`` over keys and budgets inside one ``jit``. Group statistics are
``jax.ops.segment_sum`` over integer group ids; a global estimator is the one-group case of the
stratified one (``s = 0``), so both share one code path.

Empty groups get the prior centre (COINPRESS) or 0 (clipped means) as their estimate, weight 0
in the recombination and a ``present = False`` flag; they never produce NaN.

Neighbouring relations (``relation=``):

- ``"replace_one"`` (default; the paper's and the reference code's sensitivity ``2 range / n``):
  one record is replaced by another **in the same stratum**, so group sizes are identical in
  neighbouring data sets and are public by construction of the relation (the paper: "access to
  public weights"). The exact sizes are then used as denominators and weights (eqs. 2-3 as
  printed), and the spend is the estimator's own budget.
- ``"add_remove"``: one record is added or removed, so one group size changes by 1 and exact
  sizes would tell the neighbours apart with certainty (released in ``sizes`` and ``radius``, and
  through every clip width, noise scale and denominator that depends on them). Under add/remove
  the sizes are **always** released as Gaussian noisy counts ``n~_g = n_g + N(0, 1/(2 count_rho))``
  (sensitivity 1), and ``n~_g`` replaces ``|G_g|`` everywhere: denominators, clip widths, Laplace
  scales, COINPRESS radii, recombination weights and the returned ``sizes``. This departs from
  eq. (2) (``p_i = sum clip(x) / |G_i| + Lap(...)`` with the exact ``|G_i|``). ``count_rho`` defaults
  to :data:`DEFAULT_COUNT_FRACTION` x the estimator's own zCDP budget (``sum(rhos)``, ``rho`` or
  ``epsilon^2/2``; :func:`resolve_count_rho`), charged **on top** of it: the run is
  ``(budget + count_rho)``-zCDP, which :func:`stratified_privacy`, :func:`gaussian_privacy` and
  :func:`laplace_privacy` report. The clipped sum of centred values has sensitivity ``C`` (half of
  replace-one).

``count_rho`` may also be passed under replace-one (counts noised with sensitivity ``sqrt 2``, so
that a record may move between strata); ``weights=`` takes public recombination weights (e.g.
:func:`public_weights` of a disjoint public half, the paper's Pub-StratCOINPRESS).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy.mechanisms import gaussian_noise, laplace_noise
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "RELATIONS",
    "DEFAULT_COUNT_FRACTION",
    "StratifiedEstimate",
    "clip_halfwidth",
    "laplace_mean",
    "gaussian_mean",
    "stratified_laplace_mean",
    "stratified_gaussian_mean",
    "gaussian_tailbound",
    "coinpress_clip_radius",
    "coinpress_mean",
    "stratified_coinpress",
    "coinpress_rhos",
    "public_weights",
    "noisy_counts",
    "resolve_count_rho",
    "stratified_ledger",
    "stratified_privacy",
    "gaussian_privacy",
    "laplace_privacy",
    "reference_code_stratified_mean",
]

RELATIONS = ("replace_one", "add_remove")
# Under add/remove the group sizes are noised with count_rho = DEFAULT_COUNT_FRACTION x the
# estimator's own zCDP budget unless count_rho is given (charged on top of that budget).
DEFAULT_COUNT_FRACTION = 0.1
REFERENCE_BETA = 0.01  # COINPRESS reference: gaussian_tailbound(d, 0.01)
REFERENCE_LOG_TERM = 3.0  # reference "3 in place of sqrt(log(2/beta))"


class StratifiedEstimate(NamedTuple):
    """Output of the stratified estimators.

    ``estimate [d]``: the recombined global estimate ``sum_g w_g mu_g`` (eq. 3);
    ``group_means [k, d]``: the private per-group estimates (the released group statistics);
    ``weights [k]``: the recombination weights (sum to 1 over present groups);
    ``sizes [k]``: the sizes used as denominators: exact (replace-one, public sizes) or the noisy
    counts (add/remove, or ``count_rho`` given), set to 0 where a noisy count is below 1;
    ``present [k]``: bool, the group has at least one member (or a noisy count >= 1);
    ``radius [k]``: COINPRESS's final radius per group (the clip half-width for clipped means).
    """

    estimate: jax.Array
    group_means: jax.Array
    weights: jax.Array
    sizes: jax.Array
    present: jax.Array
    radius: jax.Array


# ------------------------------------------------------------------------------------------------
# host-side checks
# ------------------------------------------------------------------------------------------------
def _as_2d(x: Any) -> tuple[jax.Array, bool]:
    x = jnp.asarray(x, jnp.float32)
    if x.ndim == 1:
        return x[:, None], True
    if x.ndim != 2:
        raise ValueError(f"x must have shape [n] or [n, d], got {x.shape}.")
    return x, False


def _check_data(x: Any, s: Any = None, num_groups: int = 1) -> None:
    if np.ndim(x) not in (1, 2):
        raise ValueError(f"x must have shape [n] or [n, d], got {np.shape(x)}.")
    if np.shape(x)[0] == 0:
        raise ValueError("x is empty; pass at least one row.")
    v.check_finite("x", x)
    if s is not None:
        v.check_int("num_groups", num_groups, minimum=1)
        v.check_shape("s", s, ndim=1)
        v.check_same_length(x=x, s=s)
        v.check_group_ids(s, num_groups, "s")


def _check_relation(relation: Any) -> str:
    """The relation's record name (``"add_remove"``/``"replace_one"``); "swap" is refused."""
    return rel.relation_name(relation)


def _check_gamma(gamma: Any) -> None:
    if isinstance(gamma, jax.core.Tracer):
        return
    g = np.asarray(gamma, np.float64)
    if np.any(~np.isfinite(g)) or np.any(g <= 0) or np.any(g >= 1):
        raise ValueError(f"gamma must lie in (0, 1) (a failure probability), got {gamma!r}.")


def _check_weights(weights: Any, num_groups: int) -> None:
    if weights is None:
        return
    if np.shape(weights) != (num_groups,):
        raise ValueError(f"weights must have shape ({num_groups},), one per group, got {np.shape(weights)}.")
    v.check_positive("weights", weights, allow_zero=True)
    if not isinstance(weights, jax.core.Tracer) and float(np.sum(weights)) <= 0:
        raise ValueError("weights sum to 0; pass public group weights with a positive sum.")


def resolve_count_rho(relation: str, budget_rho: Any, count_rho: Any = None) -> Any:
    """The count budget a run actually spends on its group sizes.

    ``count_rho`` if given (any relation); otherwise, under ``"add_remove"``,
    ``DEFAULT_COUNT_FRACTION * budget_rho`` (``budget_rho`` is the estimator's own zCDP budget:
    ``sum(rhos)`` for COINPRESS, ``rho`` for the Gaussian mean, ``epsilon^2 / 2`` for the Laplace
    mean; traced budgets give a traced count budget); under ``"replace_one"``, ``None`` (exact
    sizes, public by the relation). Estimators and spend functions share this one rule.

    Privacy: the returned budget is what the noisy counts cost (``count_rho``-zCDP, Gaussian,
    sensitivity 1 under add/remove, ``sqrt 2`` under replace-one), charged on top of ``budget_rho``.
    """
    relation = _check_relation(relation)
    if count_rho is not None:
        return count_rho
    if relation == "add_remove":
        return DEFAULT_COUNT_FRACTION * budget_rho
    return None


# ------------------------------------------------------------------------------------------------
# group sizes and weights
# ------------------------------------------------------------------------------------------------
def _counts(s: jax.Array, num_groups: int) -> jax.Array:
    return jax.ops.segment_sum(jnp.ones(s.shape, jnp.float32), s, num_segments=num_groups)


def public_weights(s_public: Any, num_groups: int) -> jax.Array:
    """Group proportions of a disjoint public sample (Pub-StratCOINPRESS): ``[num_groups]``.

    Privacy: computed from public data only; costs nothing. Groups absent from the public sample
    get weight 0 (their private estimates are then released but not recombined).
    """
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_shape("s_public", s_public, ndim=1)
    if np.shape(s_public)[0] == 0:
        raise ValueError("s_public is empty; pass the group ids of the public sample.")
    v.check_group_ids(s_public, num_groups, "s_public")
    c = _counts(jnp.asarray(s_public, jnp.int32), num_groups)
    return c / jnp.sum(c)


@full_precision
def noisy_counts(key: jax.Array, s: Any, num_groups: int, count_rho: Any, *,
                 relation: str = "add_remove") -> jax.Array:
    """Group counts plus ``N(0, sigma^2)`` with ``sigma = Delta / sqrt(2 count_rho)`` (not rounded).

    Privacy: ``count_rho``-zCDP. ``Delta = 1`` under add/remove (one count changes by 1) and
    ``sqrt 2`` under replace-one (a record may move between strata: two counts change by 1).
    """
    v.check_threefry_key(key)
    relation = _check_relation(relation)
    v.check_rho(count_rho, "count_rho")
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_group_ids(s, num_groups, "s")
    return _noisy_counts(key, jnp.asarray(s, jnp.int32), num_groups, count_rho, relation)


def _noisy_counts(key, s, num_groups, count_rho, relation):
    delta = rel.histogram_sensitivity("l2").under(relation)  # 1 (add/remove), sqrt 2 (replace one)
    sigma = delta / jnp.sqrt(2.0 * jnp.asarray(count_rho, jnp.float32))
    return _counts(s, num_groups) + gaussian_noise(key, (num_groups,), sigma)


def _sizes_and_weights(key, s, num_groups, weights, count_rho, relation):
    """(denominators [k], present [k], weights [k]); denominators >= 1 where present."""
    exact = _counts(s, num_groups)
    if count_rho is None:
        sizes = exact
        present = exact > 0
    else:
        sizes = _noisy_counts(key, s, num_groups, count_rho, relation)
        present = sizes >= 1.0
        sizes = jnp.where(present, sizes, 0.0)
    if weights is None:
        w = jnp.where(present, sizes, 0.0)
    else:
        w = jnp.where(present, jnp.asarray(weights, jnp.float32), 0.0)
    total = jnp.sum(w)
    w = jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 0.0)
    return sizes, present, w


def _recombine(group_means: jax.Array, w: jax.Array) -> jax.Array:
    return w @ group_means


# ------------------------------------------------------------------------------------------------
# clipped Laplace and Gaussian means (paper eq. 1-3; notes A1-A3)
# ------------------------------------------------------------------------------------------------
def clip_halfwidth(n: Any, R: Any, gamma: Any) -> jax.Array:
    """``R + s`` with ``s = sqrt(log(n / gamma))`` (paper Sec. 4; ``s = sqrt(log n/gamma)`` read as
    ``log(n/gamma)``, consistent with Prop. 8's ``log(n/(k gamma))``). ``n`` may be an array."""
    n = jnp.maximum(jnp.asarray(n, jnp.float32), 1.0)
    return jnp.asarray(R, jnp.float32) + jnp.sqrt(jnp.log(n / jnp.asarray(gamma, jnp.float32)))


def _interval(n, R, gamma, variant):
    hw = clip_halfwidth(n, R, gamma)
    if variant == "paper":
        # As printed: [R - s, R + s] (width 2s, though the noise uses the width 2R + 2s).
        s_ = hw - jnp.asarray(R, jnp.float32)
        return jnp.asarray(R, jnp.float32) - s_, hw, hw
    return -hw, hw, hw


def _laplace_core(key, x, s, num_groups, R, gamma, epsilon, weights, relation, variant,
                  count_key, count_rho):
    sizes, present, w = _sizes_and_weights(count_key, s, num_groups, weights, count_rho, relation)
    den = jnp.maximum(sizes, 1.0)
    lo, hi, hw = _interval(den, R, gamma, variant)  # per group [k]
    xc = jnp.clip(x, lo[s][:, None], hi[s][:, None])
    sums = jax.ops.segment_sum(xc, s, num_segments=num_groups)
    d = x.shape[1]
    # L1 sensitivity of the clipped sum: d * width (replace-one) or d * max|value| (add/remove).
    sens = d * rel.replace_factor(relation) * hw
    scale = sens / jnp.asarray(epsilon, jnp.float32)
    noise = laplace_noise(key, sums.shape, scale[:, None])
    means = jnp.where(present[:, None], (sums + noise) / den[:, None], 0.0)
    return StratifiedEstimate(_recombine(means, w), means, w, sizes, present, hw)


def _common_checks(key, x, s, num_groups, weights, relation, count_rho) -> str:
    """Validate the shared arguments; returns the relation's record name."""
    v.check_threefry_key(key)
    _check_data(x, s, num_groups)
    relation = _check_relation(relation)
    _check_weights(weights, num_groups)
    if count_rho is not None:
        v.check_rho(count_rho, "count_rho")
    return relation


def _laplace_budget(epsilon: Any) -> Any:
    """The zCDP budget of an ``epsilon``-DP release: ``epsilon^2 / 2`` (Bun and Steinke, Prop. 1.4)."""
    return 0.5 * jnp.square(jnp.asarray(epsilon, jnp.float32))


@full_precision
def stratified_laplace_mean(key: jax.Array, x: Any, s: Any, num_groups: int, *, R: Any,
                            gamma: Any, epsilon: Any, weights: Any = None,
                            relation: str = "replace_one", variant: str = "corrected",
                            count_rho: Any = None) -> StratifiedEstimate:
    """Stratified clipped Laplace mean (paper eqs. 2-3): per group, clip to ``[-(R+s_g), R+s_g]``
    with ``s_g = sqrt(log(n_g / gamma))``, sum, add ``Lap(d Delta_g / epsilon)`` with ``Delta_g = 2(R+s_g)``
    (replace-one) or ``R+s_g`` (add/remove), divide by ``n_g``; recombine ``sum_g w_g mu_g``.

    ``n_g`` is the exact size under replace-one (eq. 2 as printed). Under add/remove it is the
    noisy count ``n~_g = n_g + N(0, 1/(2 count_rho))`` (departure from eq. 2, whose exact ``|G_i|``
    differs between neighbours), used for ``s_g``, the Laplace scale, the denominator, the weights
    and the returned ``sizes``; ``count_rho`` defaults to ``DEFAULT_COUNT_FRACTION * epsilon^2 / 2``.
    With exact sizes the recombined noise is ``sum_g Lap(2(R+s_g)/(n eps))`` (the size cancels;
    variance ``8 sum_g (R+s_g)^2 / (n eps)^2``, :mod:`~dpfair_jax.analysis.stratification_theory`).
    ``variant="paper"`` clips to the interval as printed, ``[R - s, R + s]``.

    Privacy: replace-one within a stratum (public sizes), no ``count_rho``: ``epsilon``-DP (pure)
    per group with the full budget, so ``epsilon``-DP overall by parallel composition (Prop. 7).
    Add/remove, or ``count_rho`` given: ``(epsilon^2 / 2 + count_rho)``-zCDP (the Laplace releases
    as ``epsilon^2/2``-zCDP, plus the Gaussian counts); :func:`laplace_privacy` gives the spend.
    """
    relation = _common_checks(key, x, s, num_groups, weights, relation, count_rho)
    v.check_epsilon(epsilon)
    v.check_positive("R", R, allow_zero=True)
    _check_gamma(gamma)
    v.check_choice("variant", variant, ("corrected", "paper"))
    count_rho = resolve_count_rho(relation, _laplace_budget(epsilon), count_rho)
    return _laplace_run(key, x, s, num_groups, R=R, gamma=gamma, epsilon=epsilon, weights=weights,
                        relation=relation, variant=variant, count_rho=count_rho)


def _laplace_run(key, x, s, num_groups, *, R, gamma, epsilon, weights, relation, variant, count_rho):
    """The estimator after validation; ``count_rho=None`` uses the exact sizes (public sizes)."""
    x2, _ = _as_2d(x)
    kn, kc = jax.random.split(key)
    return _laplace_core(kn, x2, jnp.asarray(s, jnp.int32), num_groups, R, gamma, epsilon, weights,
                         relation, variant, kc, count_rho)


@full_precision
def laplace_mean(key: jax.Array, x: Any, *, R: Any, gamma: Any, epsilon: Any,
                 relation: str = "replace_one", variant: str = "corrected",
                 count_rho: Any = None) -> jax.Array:
    """Global clipped Laplace mean ``p_hat`` (paper Sec. 4, eq. 1): ``[d]`` (or a scalar for 1-D ``x``).

    ``sum(clip(x, [-(R+s), R+s])) / n + Lap(d Delta / (n eps))``, ``s = sqrt(log(n/gamma))``,
    ``Delta = 2(R+s)`` (replace-one; the paper) or ``R+s`` (add/remove). Under add/remove ``n`` is
    the noisy count ``n + N(0, 1/(2 count_rho))`` everywhere it enters (eq. 1 uses the exact ``n``,
    which differs between neighbours); see :func:`stratified_laplace_mean`.

    Privacy: replace-one (``n`` public): ``epsilon``-DP. Add/remove: ``(epsilon^2/2 +
    count_rho)``-zCDP, ``count_rho`` defaulting to ``DEFAULT_COUNT_FRACTION * epsilon^2 / 2``
    (:func:`laplace_privacy`).
    """
    v.check_threefry_key(key)
    _check_data(x)
    n = np.shape(x)[0]
    out = stratified_laplace_mean(key, x, jnp.zeros((n,), jnp.int32), 1, R=R, gamma=gamma,
                                  epsilon=epsilon, relation=relation, variant=variant,
                                  count_rho=count_rho)
    return out.estimate[0] if np.ndim(x) == 1 else out.estimate


def _gaussian_core(key, x, s, num_groups, center, C, rho, weights, relation, count_key, count_rho):
    sizes, present, w = _sizes_and_weights(count_key, s, num_groups, weights, count_rho, relation)
    den = jnp.maximum(sizes, 1.0)
    c = jnp.broadcast_to(jnp.asarray(center, jnp.float32), (num_groups, x.shape[1]))
    Cg = jnp.broadcast_to(jnp.asarray(C, jnp.float32), (num_groups,))
    sums = _centered_clipped_sums(x, s, num_groups, c, Cg)
    sigma = rel.replace_factor(relation) * Cg / jnp.sqrt(2.0 * jnp.asarray(rho, jnp.float32))
    noisy = sums + gaussian_noise(key, sums.shape, sigma[:, None])
    means = jnp.where(present[:, None], c + noisy / den[:, None], c)
    return StratifiedEstimate(_recombine(means, w), means, w, sizes, present, Cg)


def _centered_clipped_sums(x, s, num_groups, c, C):
    """``sum_{i in g} clip_{C_g}(x_i - c_g)`` (L2 projection onto the ball), shape ``[k, d]``."""
    diff = x - c[s]
    norm = jnp.sqrt(jnp.sum(diff * diff, axis=1))
    Ci = C[s]
    scale = jnp.where(norm > Ci, Ci / jnp.where(norm > 0, norm, 1.0), 1.0)
    return jax.ops.segment_sum(diff * scale[:, None], s, num_segments=num_groups)


@full_precision
def stratified_gaussian_mean(key: jax.Array, x: Any, s: Any, num_groups: int, *, center: Any,
                             clip: Any, rho: Any, weights: Any = None,
                             relation: str = "replace_one", count_rho: Any = None
                             ) -> StratifiedEstimate:
    """Stratified Gaussian mean: per group ``c + (sum clip_C(x - c) + N(0, sigma^2 I)) / n_g`` with
    ``sigma = Delta / sqrt(2 rho)``, ``Delta = 2C`` (replace-one) or ``C`` (add/remove); recombined
    with weights ``w`` (notes A3: with exact sizes the recombined noise variance is
    ``sum_g (Delta_g/n)^2 / (2 rho)``, ``k`` times the global one for equal clips).

    ``n_g`` is the exact size under replace-one, the noisy count ``n_g + N(0, 1/(2 count_rho))``
    under add/remove (denominator, weights and returned ``sizes``; ``count_rho`` defaults to
    ``DEFAULT_COUNT_FRACTION * rho``). ``clip`` is a scalar or ``[k]`` (traced); ``center`` is
    ``[d]`` or ``[k, d]``.

    Privacy: replace-one within a stratum (public sizes): ``rho``-zCDP per group and overall
    (parallel composition). Add/remove, or ``count_rho`` given: ``(rho + count_rho)``-zCDP
    (:func:`gaussian_privacy`).
    """
    relation = _common_checks(key, x, s, num_groups, weights, relation, count_rho)
    v.check_rho(rho)
    v.check_clip_norm(clip, "clip")
    v.check_finite("center", center)
    count_rho = resolve_count_rho(relation, jnp.asarray(rho, jnp.float32), count_rho)
    x2, _ = _as_2d(x)
    kn, kc = jax.random.split(key)
    return _gaussian_core(kn, x2, jnp.asarray(s, jnp.int32), num_groups, center, clip, rho, weights,
                          relation, kc, count_rho)


@full_precision
def gaussian_mean(key: jax.Array, x: Any, *, center: Any, clip: Any, rho: Any,
                  relation: str = "replace_one", count_rho: Any = None) -> jax.Array:
    """Global Gaussian mean: ``c + (sum clip_C(x - c) + N(0, sigma^2 I)) / n``, ``sigma = Delta/sqrt(2 rho)``,
    ``Delta = 2C`` (replace-one, ``n`` public) or ``C`` (add/remove, ``n`` replaced by the noisy
    count ``n + N(0, 1/(2 count_rho))``).

    Privacy: replace-one: ``rho``-zCDP; add/remove: ``(rho + count_rho)``-zCDP, ``count_rho``
    defaulting to ``DEFAULT_COUNT_FRACTION * rho`` (:func:`gaussian_privacy`).
    """
    v.check_threefry_key(key)
    _check_data(x)
    n = np.shape(x)[0]
    out = stratified_gaussian_mean(key, x, jnp.zeros((n,), jnp.int32), 1, center=center, clip=clip,
                                   rho=rho, relation=relation, count_rho=count_rho)
    return out.estimate[0] if np.ndim(x) == 1 else out.estimate


# ------------------------------------------------------------------------------------------------
# COINPRESS (Biswas et al. 2020; reference code constants)
# ------------------------------------------------------------------------------------------------
def gaussian_tailbound(d: int, beta: float = REFERENCE_BETA) -> float:
    """``sqrt(d + 2 sqrt(d log(1/beta)) + 2 log(1/beta))`` (reference ``gaussian_tailbound``;
    ``d = 1, beta = 0.01`` gives 3.808185)."""
    d = v.check_int("d", d, minimum=1)
    if not 0 < beta < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}.")
    lb = math.log(1.0 / beta)
    return math.sqrt(d + 2.0 * math.sqrt(d * lb) + 2.0 * lb)


def coinpress_clip_radius(r: Any, gamma: Any, log_term: Any = REFERENCE_LOG_TERM) -> jax.Array:
    """Projection radius of one COINPRESS step: ``min(sqrt(r^2 + 2 r log_term + gamma^2), r + gamma)``
    (reference ``multivariate_mean_step``; ``r = 3, gamma = 3.808185`` gives 6.4422)."""
    r = jnp.asarray(r, jnp.float32)
    g = jnp.asarray(gamma, jnp.float32)
    return jnp.minimum(jnp.sqrt(r * r + 2.0 * r * log_term + g * g), r + g)


def coinpress_rhos(rho: float, split: Sequence[float] = (0.25, 0.75)) -> np.ndarray:
    """Per-step budgets ``rho * split`` (the paper's ``[rho/4, 3 rho/4]``); the split must sum to 1."""
    v.check_rho(rho)
    split = np.asarray(split, np.float64)
    if split.ndim != 1 or split.size == 0 or np.any(split <= 0):
        raise ValueError(f"split must be a non-empty list of positive fractions, got {split!r}.")
    if not math.isclose(float(split.sum()), 1.0, rel_tol=1e-9):
        raise ValueError(f"split must sum to 1, got {split.tolist()} (sum {split.sum()}).")
    return float(rho) * split


def _coinpress_core(key, x, s, num_groups, center, radius, rhos, weights, relation, clip_mode,
                    beta, count_key, count_rho):
    d = x.shape[1]
    gamma = gaussian_tailbound(d, beta)
    sizes, present, w = _sizes_and_weights(count_key, s, num_groups, weights, count_rho, relation)
    den = jnp.maximum(sizes, 1.0)
    c0 = jnp.broadcast_to(jnp.asarray(center, jnp.float32), (num_groups, d))
    r0 = jnp.broadcast_to(jnp.asarray(radius, jnp.float32), (num_groups,))
    factor = rel.replace_factor(relation)
    t = rhos.shape[0]
    keys = jax.random.split(key, t)

    def step(carry, inp):
        xs, c, r = carry
        k_t, rho_t = inp
        C = coinpress_clip_radius(r, gamma)
        diff = xs - c[s]
        norm = jnp.sqrt(jnp.sum(diff * diff, axis=1))
        Ci = C[s]
        scale = jnp.where(norm > Ci, Ci / jnp.where(norm > 0, norm, 1.0), 1.0)
        proj = diff * scale[:, None]
        sums = jax.ops.segment_sum(proj, s, num_segments=num_groups)
        sigma_sum = factor * C / jnp.sqrt(2.0 * rho_t)  # noise std on the centred clipped sum
        noise = gaussian_noise(k_t, sums.shape, sigma_sum[:, None])
        c_new = jnp.where(present[:, None], c + (sums + noise) / den[:, None], c)
        sigma_mean = sigma_sum / den  # the reference's sigma = (2C/n)/sqrt(2 rho)
        r_new = jnp.where(present, jnp.sqrt(1.0 / den + sigma_mean ** 2) * gamma, r)
        xs_new = c[s] + proj if clip_mode == "cumulative" else xs
        return (xs_new, c_new, r_new), None

    (_, c, r), _ = jax.lax.scan(step, (x, c0, r0), (keys, rhos))
    return StratifiedEstimate(_recombine(c, w), c, w, sizes, present, r)


def _check_coinpress(center, radius, rhos, clip_mode, beta):
    v.check_finite("center", center)
    v.check_positive("radius", radius)
    if np.ndim(rhos) != 1 or np.shape(rhos)[0] < 1:
        raise ValueError(f"rhos must be a 1-D array of per-step budgets (t >= 1), got shape {np.shape(rhos)}.")
    v.check_rho(rhos, "rhos")
    v.check_choice("clip_mode", clip_mode, ("fresh", "cumulative"))
    if not 0 < float(beta) < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}.")


@full_precision
def stratified_coinpress(key: jax.Array, x: Any, s: Any, num_groups: int, *, center: Any = 0.0,
                         radius: Any = 3.0, rhos: Any = (0.125, 0.375), weights: Any = None,
                         relation: str = "replace_one", clip_mode: str = "fresh",
                         beta: float = REFERENCE_BETA, count_rho: Any = None) -> StratifiedEstimate:
    """StratCOINPRESS (paper Sec. 5): COINPRESS on every group at once with the full budget.

    Each of the ``t = len(rhos)`` steps, for every group ``g`` (segment sums, ``num_groups`` static):
    project rows onto ``B(c_g, C_g)``, ``C_g = min(sqrt(r_g^2 + 6 r_g + gamma^2), r_g + gamma)``,
    ``gamma = gaussian_tailbound(d, beta)``; ``c_g <- c_g + (sum clip(x - c_g) + N(0, sigma^2 I)) / n_g``
    with ``sigma = Delta C_g / sqrt(2 rho_t)`` (``Delta = 2`` replace-one, the reference; ``1``
    add/remove); ``r_g <- gamma sqrt(1/n_g + (sigma/n_g)^2)``. Returns the groups' final centres
    and their recombination ``sum_g w_g c_g`` (eq. 3) with ``w`` = size fractions
    (StratCOINPRESS) or public ``weights`` (Pub-StratCOINPRESS).

    ``n_g``: the exact size under replace-one (the reference code); under add/remove the noisy count
    ``n~_g = n_g + N(0, 1/(2 count_rho))`` in every step's update, radius and weight and in the
    returned ``sizes`` (departure from the reference's exact ``n``, which differs between
    add/remove neighbours); ``count_rho`` defaults to ``DEFAULT_COUNT_FRACTION * sum(rhos)``.

    ``clip_mode="fresh"`` (default) projects the raw data at every step; ``"cumulative"`` projects
    the previous step's projected rows (the reference modifies ``X`` in place).

    Privacy: replace-one within a stratum (default; public sizes): ``sum(rhos)``-zCDP per group and
    overall (parallel composition over disjoint strata). Add/remove, or ``count_rho`` given:
    ``(sum(rhos) + count_rho)``-zCDP. :func:`stratified_privacy` reports either.
    """
    relation = _common_checks(key, x, s, num_groups, weights, relation, count_rho)
    _check_coinpress(center, radius, rhos, clip_mode, beta)
    rhos = jnp.asarray(rhos, jnp.float32)
    count_rho = resolve_count_rho(relation, jnp.sum(rhos), count_rho)
    return _coinpress_run(key, x, s, num_groups, center=center, radius=radius, rhos=rhos,
                          weights=weights, relation=relation, clip_mode=clip_mode, beta=beta,
                          count_rho=count_rho)


def _coinpress_run(key, x, s, num_groups, *, center, radius, rhos, weights, relation, clip_mode,
                   beta, count_rho):
    """The estimator after validation; ``count_rho=None`` uses the exact sizes (public sizes)."""
    x2, _ = _as_2d(x)
    kn, kc = jax.random.split(key)
    return _coinpress_core(kn, x2, jnp.asarray(s, jnp.int32), num_groups, center, radius,
                           jnp.asarray(rhos, jnp.float32), weights, relation, clip_mode, beta,
                           kc, count_rho)


@full_precision
def coinpress_mean(key: jax.Array, x: Any, *, center: Any = 0.0, radius: Any = 3.0,
                   rhos: Any = (0.125, 0.375), relation: str = "replace_one",
                   clip_mode: str = "fresh", beta: float = REFERENCE_BETA,
                   count_rho: Any = None) -> jax.Array:
    """COINPRESS (Biswas et al. 2020, ``multivariate_mean_iterative``): ``[d]`` (scalar for 1-D ``x``).

    The one-group case of :func:`stratified_coinpress`; defaults are the paper's: prior ball
    ``B(0, 3)``, two steps with ``rho = 0.5`` split ``[1/4, 3/4]``. Under add/remove ``n`` is the
    noisy count (see :func:`stratified_coinpress`).

    Privacy: replace-one (``n`` public): ``sum(rhos)``-zCDP; add/remove: ``(sum(rhos) +
    count_rho)``-zCDP, ``count_rho`` defaulting to ``DEFAULT_COUNT_FRACTION * sum(rhos)``.
    """
    v.check_threefry_key(key)
    _check_data(x)
    n = np.shape(x)[0]
    out = stratified_coinpress(key, x, jnp.zeros((n,), jnp.int32), 1, center=center, radius=radius,
                               rhos=rhos, relation=relation, clip_mode=clip_mode, beta=beta,
                               count_rho=count_rho)
    return out.estimate[0] if np.ndim(x) == 1 else out.estimate


# ------------------------------------------------------------------------------------------------
# accounting
# ------------------------------------------------------------------------------------------------
def _count_charge(relation: str, budget_rho: float, count_rho: float | None) -> float | None:
    c = resolve_count_rho(relation, float(budget_rho), count_rho)
    if c is not None:
        v.check_rho(c, "count_rho")
        c = float(c)
    return c


def _sizes_note(relation: str, count_rho: float | None) -> str:
    if count_rho is None:
        return "group sizes exact and public (replace-one within a stratum)"
    how = ("add/remove: sizes always noised" if relation == "add_remove"
           else "replace-one across strata (count sensitivity sqrt 2)")
    return f"group sizes released as Gaussian noisy counts, count_rho = {count_rho:g} ({how})"


def stratified_ledger(rhos: Sequence[float], num_groups: int, *, count_rho: float | None = None,
                      relation: str = "replace_one") -> acc.ZcdpLedger:
    """The zCDP ledger of one stratified COINPRESS run: one charge per step (each covers all
    ``num_groups`` disjoint groups at once: parallel composition, not ``num_groups`` charges),
    plus ``group_counts`` when sizes are released as noisy counts: whenever ``count_rho`` is given
    and, by default, under add/remove (:func:`resolve_count_rho`). Its total is global COINPRESS's
    ``sum(rhos)`` plus the count budget."""
    v.check_int("num_groups", num_groups, minimum=1)
    relation = _check_relation(relation)
    r = np.asarray(rhos, np.float64).ravel()
    v.check_rho(r, "rhos")
    ledger = acc.ZcdpLedger()
    for t, rt in enumerate(r):
        ledger.charge(f"coinpress_step_{t + 1} (parallel over {num_groups} groups)", float(rt))
    c = _count_charge(relation, math.fsum(r), count_rho)
    if c is not None:
        ledger.charge("group_counts", c)
    return ledger


def stratified_privacy(rhos: Sequence[float], num_groups: int, delta: float, *,
                       count_rho: float | None = None, relation: str = "replace_one"
                       ) -> acc.PrivacySpend:
    """:class:`~dpfair_jax.privacy.accounting.PrivacySpend` of a (stratified) COINPRESS run under
    ``relation`` (zCDP -> (eps, delta), CKS): ``sum(rhos)`` plus the count budget that the run
    spends (the add/remove default included)."""
    relation = _check_relation(relation)
    ledger = stratified_ledger(rhos, num_groups, count_rho=count_rho, relation=relation)
    c = ledger.charges.get("group_counts")
    notes = f"parallel composition over {num_groups} disjoint strata; " + _sizes_note(relation, c)
    return ledger.to_spend(delta, relation=relation, notes=notes)


def gaussian_privacy(rho: float, delta: float, *, num_groups: int = 1,
                     count_rho: float | None = None, relation: str = "replace_one"
                     ) -> acc.PrivacySpend:
    """Spend of :func:`gaussian_mean` / :func:`stratified_gaussian_mean`: ``rho`` (parallel over
    ``num_groups`` strata) plus the count budget the run spends (:func:`resolve_count_rho`)."""
    relation = _check_relation(relation)
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_rho(rho)
    ledger = acc.ZcdpLedger()
    ledger.charge(f"gaussian_means (parallel over {num_groups} groups)", float(rho))
    c = _count_charge(relation, float(rho), count_rho)
    if c is not None:
        ledger.charge("group_counts", c)
    notes = f"parallel composition over {num_groups} disjoint strata; " + _sizes_note(relation, c)
    return ledger.to_spend(delta, relation=relation, notes=notes)


def laplace_privacy(epsilon: float, delta: float, *, num_groups: int = 1,
                    count_rho: float | None = None, relation: str = "replace_one"
                    ) -> acc.PrivacySpend:
    """Spend of :func:`laplace_mean` / :func:`stratified_laplace_mean`.

    Replace-one with public sizes: pure ``epsilon``-DP (``delta = 0``; ``rho = epsilon^2/2``
    recorded). With noisy counts (add/remove, or ``count_rho`` given): ``epsilon^2/2 + count_rho``
    zCDP, converted at ``delta`` (CKS).
    """
    relation = _check_relation(relation)
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_epsilon(epsilon)
    budget = 0.5 * float(epsilon) ** 2
    c = _count_charge(relation, budget, count_rho)
    if c is None:
        return acc.PrivacySpend(epsilon=float(epsilon), delta=0.0, rho=budget, relation=relation,
                                notes=f"pure epsilon-DP Laplace, parallel composition over "
                                      f"{num_groups} disjoint strata; " + _sizes_note(relation, None))
    ledger = acc.ZcdpLedger()
    ledger.charge(f"laplace_means (epsilon^2/2, parallel over {num_groups} groups)", budget)
    ledger.charge("group_counts", c)
    notes = f"parallel composition over {num_groups} disjoint strata; " + _sizes_note(relation, c)
    return ledger.to_spend(delta, relation=relation, notes=notes)


# ------------------------------------------------------------------------------------------------
# the reference code's (non-private) StratCOINPRESS, for reproduction only
# ------------------------------------------------------------------------------------------------
def reference_code_stratified_mean(key: jax.Array, x: Any, s: Any, num_groups: int, *,
                                   center: Any = 0.0, radius: Any = 3.0,
                                   rhos: Any = (0.125, 0.375), beta: float = REFERENCE_BETA,
                                   mask: Any = None) -> jax.Array:
    """What the paper's public code stored as "StratCOINPRESS" (NOT differentially private).

    ``coinpress_results.ipynb`` first runs global COINPRESS, which clips ``X`` in place, then
    appends the **non-private** group means of that clipped data (the private group estimate is
    computed but unused), recombined by exact sizes. Returned only to reproduce the stored
    numbers; never report it as a private result.

    ``mask [n]`` (optional) excludes rows (padding in a vectorized study).

    Privacy: none (the group means are exact).
    """
    v.check_threefry_key(key)
    _check_data(x, s, num_groups)
    _check_coinpress(center, radius, rhos, "cumulative", beta)
    x2, _ = _as_2d(x)
    s = jnp.asarray(s, jnp.int32)
    d = x2.shape[1]
    gamma = gaussian_tailbound(d, beta)
    c = jnp.broadcast_to(jnp.asarray(center, jnp.float32), (d,))
    r = jnp.asarray(radius, jnp.float32)
    xs = x2
    m = jnp.ones(x2.shape[0], jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    for t, k_t in enumerate(jax.random.split(key, np.shape(rhos)[0])):
        C = coinpress_clip_radius(r, gamma)
        diff = xs - c
        norm = jnp.sqrt(jnp.sum(diff * diff, axis=1))
        xs = c + diff * jnp.where(norm > C, C / jnp.where(norm > 0, norm, 1.0), 1.0)[:, None]
        sigma = (2.0 * C / n) / jnp.sqrt(2.0 * jnp.asarray(rhos, jnp.float32)[t])
        c = (m @ xs) / n + gaussian_noise(k_t, (d,), sigma)
        r = jnp.sqrt(1.0 / n + sigma ** 2) * gamma
    counts = jax.ops.segment_sum(m, s, num_segments=num_groups)
    sums = jax.ops.segment_sum(xs * m[:, None], s, num_segments=num_groups)
    gm = sums / jnp.maximum(counts, 1.0)[:, None]
    out = (counts / n) @ gm
    return out[0] if np.ndim(x) == 1 else out
