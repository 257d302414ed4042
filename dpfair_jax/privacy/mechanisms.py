"""Device-side noise mechanisms: Gaussian, Laplace, noisy sufficient statistics, exponential.

Every function here is pure in ``(key, value, scale)``, jit- and vmap-able, and takes its scales
(``std``, ``scale``, ``epsilon``) as traced arrays so a whole privacy grid is one program. The
scales are computed on the host by :mod:`dpfair_jax.privacy.accounting` (sigma = noise_multiplier x
sensitivity); these functions only draw the noise.

Public names: :func:`gaussian_noise`, :func:`laplace_noise` (the raw draws every noisy release of
the kit is built from), :func:`add_gaussian`, :func:`add_laplace` (a value plus noise scaled to its
:class:`~dpfair_jax.privacy.relations.Sensitivity` under a neighbouring relation),
:func:`gaussian_mechanism`, :func:`laplace_mechanism`, :func:`noisy_sufficient_statistics`,
:func:`noisy_histogram`, :func:`symmetric_gaussian_noise`, :func:`exponential_mechanism`,
:func:`exponential_mechanism_probs`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "gaussian_noise",
    "laplace_noise",
    "add_gaussian",
    "add_laplace",
    "gaussian_mechanism",
    "laplace_mechanism",
    "symmetric_gaussian_noise",
    "noisy_sufficient_statistics",
    "noisy_histogram",
    "exponential_mechanism_logits",
    "exponential_mechanism_probs",
    "exponential_mechanism",
]

PyTree = Any


def _check_key(key: Any) -> None:
    v.check_threefry_key(key)


def _tree_noise(key: jax.Array, tree: PyTree, sampler) -> PyTree:
    """One independent draw per leaf (the key is split once per leaf)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    keys = jax.random.split(key, max(len(leaves), 1))
    noisy = [sampler(k, jnp.asarray(leaf)) for k, leaf in zip(keys, leaves)]
    return jax.tree_util.tree_unflatten(treedef, noisy)


def _float_dtype(leaf: jax.Array):
    return leaf.dtype if jnp.issubdtype(leaf.dtype, jnp.floating) else jnp.float32


def gaussian_noise(key: jax.Array, shape: tuple[int, ...], std: Any, dtype=jnp.float32) -> jax.Array:
    """``std * N(0, I)`` of ``shape``: exactly ``std * jax.random.normal(key, shape, dtype)``.

    ``std`` (>= 0) may be a traced scalar or an array broadcastable to ``shape`` (one std per
    entry, e.g. per group or per grid point); the key is used as given (not split).

    Privacy: added to a query of L2 sensitivity ``Delta``, this is the Gaussian mechanism with noise
    multiplier ``std / Delta``: ``Delta^2 / (2 std^2)``-zCDP under the relation of ``Delta``.
    """
    _check_key(key)
    v.check_positive("std", std, allow_zero=True)
    return std * jax.random.normal(key, shape, dtype)


def laplace_noise(key: jax.Array, shape: tuple[int, ...], scale: Any, dtype=jnp.float32) -> jax.Array:
    """``scale * Laplace(0, 1)`` of ``shape``: exactly ``scale * jax.random.laplace(key, shape, dtype)``.

    ``scale`` (>= 0) may be a traced scalar or an array broadcastable to ``shape``; the key is used
    as given (not split).

    Privacy: added to a query of L1 sensitivity ``Delta``, this is the Laplace mechanism:
    ``Delta / scale``-DP (pure) under the relation of ``Delta``.
    """
    _check_key(key)
    v.check_positive("scale", scale, allow_zero=True)
    return scale * jax.random.laplace(key, shape, dtype)


def _traced(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


def _sensitivity_under(sensitivity: Any, relation: Any) -> Any:
    if not isinstance(sensitivity, _rel.Sensitivity):
        raise ValueError("sensitivity must be a dpfair_jax.privacy.relations.Sensitivity (one value "
                         f"per neighbouring relation), got {type(sensitivity).__name__}.")
    return sensitivity.under(relation)


def _refuse_infinite(name: str, sens: Any, noisy: Any) -> None:
    """Refuse noise scaled to an infinite sensitivity (an unclipped query) unless the noise is
    concretely off (``noisy`` is False everywhere)."""
    if not np.any(np.isinf(np.asarray(sens, dtype=np.float64))):
        return
    if _traced(noisy) or np.any(np.asarray(noisy)):
        raise ValueError(f"{name}: the sensitivity is infinite (an unclipped query, clip_norm=inf), "
                         "which only a noiseless release may use; clip the rows or set the noise "
                         "to zero.")


def add_gaussian(key: jax.Array, value: jax.Array, sensitivity: _rel.Sensitivity, relation: Any,
                 noise_multiplier: Any) -> jax.Array:
    """``value + gaussian_noise(std)`` with ``std = noise_multiplier * sensitivity.under(relation)``.

    ``value`` is one array (one release; the key is used as given); ``sensitivity`` its L2
    sensitivity (:mod:`dpfair_jax.privacy.relations`). ``noise_multiplier`` (>= 0) may be traced
    or an array broadcastable against ``value``. An infinite sensitivity is refused unless
    ``noise_multiplier`` is concretely 0 (the noiseless path, where ``std = 0``).

    Privacy: the Gaussian mechanism with noise multiplier ``z = noise_multiplier`` under
    ``relation``: ``1 / (2 z^2)``-zCDP (``dp_accounting.GaussianDpEvent(z)``).
    """
    _check_key(key)
    v.check_positive("noise_multiplier", noise_multiplier, allow_zero=True, allow_inf=True)
    sens = _sensitivity_under(sensitivity, relation)
    value = jnp.asarray(value)
    dt = _float_dtype(value)
    if _traced(noise_multiplier):
        _refuse_infinite("add_gaussian", sens, noise_multiplier)
        std = noise_multiplier * sens
    else:
        z = np.asarray(noise_multiplier, dtype=np.float64)
        _refuse_infinite("add_gaussian", sens, z > 0)
        with np.errstate(invalid="ignore"):  # inf * 0 where the noise is off
            std = np.where(z > 0, z * np.asarray(sens, dtype=np.float64), 0.0)
    return value.astype(dt) + gaussian_noise(key, value.shape, jnp.asarray(std, dt), dt)


def add_laplace(key: jax.Array, value: jax.Array, sensitivity: _rel.Sensitivity, relation: Any,
                epsilon: Any) -> jax.Array:
    """``value + laplace_noise(scale)`` with ``scale = sensitivity.under(relation) / epsilon``.

    ``value`` is one array (the key is used as given); ``sensitivity`` its L1 sensitivity.
    ``epsilon > 0`` may be traced or an array broadcastable against ``value``; ``epsilon = inf``
    (concrete) is the noiseless path (``scale = 0``), the only one an infinite sensitivity may use.

    Privacy: the Laplace mechanism, ``epsilon``-DP (pure) under ``relation``.
    """
    _check_key(key)
    v.check_epsilon(epsilon, allow_inf=True)
    sens = _sensitivity_under(sensitivity, relation)
    value = jnp.asarray(value)
    dt = _float_dtype(value)
    if _traced(epsilon):
        _refuse_infinite("add_laplace", sens, epsilon)
        scale = sens / epsilon
    else:
        eps = np.asarray(epsilon, dtype=np.float64)
        _refuse_infinite("add_laplace", sens, np.isfinite(eps))
        with np.errstate(invalid="ignore"):  # inf / inf where the noise is off
            scale = np.where(np.isfinite(eps), np.asarray(sens, dtype=np.float64) / eps, 0.0)
    return value.astype(dt) + laplace_noise(key, value.shape, jnp.asarray(scale, dt), dt)


def gaussian_mechanism(key: jax.Array, value_tree: PyTree, std: Any) -> PyTree:
    """Add i.i.d. ``N(0, std^2)`` noise to every entry of every leaf of ``value_tree``.

    ``std`` is a (traced) scalar, or an array broadcastable against every leaf.

    Privacy: if ``value_tree`` (flattened) has L2 sensitivity ``Delta`` under the chosen
    neighbouring relation, the output is ``(Delta/std)^2 / 2``-zCDP, i.e. a Gaussian mechanism with
    noise multiplier ``std / Delta`` (account it with ``accounting.dpsgd_event`` or
    ``gaussian_rho``). The neighbouring relation is that of the sensitivity bound.
    """
    _check_key(key)
    v.check_positive("std", std, allow_zero=True)
    v.check_finite("value_tree", value_tree)

    def sample(k, leaf):
        dt = _float_dtype(leaf)
        return leaf.astype(dt) + jnp.asarray(std, dt) * jax.random.normal(k, leaf.shape, dt)

    return _tree_noise(key, value_tree, sample)


def laplace_mechanism(key: jax.Array, value: PyTree, scale: Any) -> PyTree:
    """Add i.i.d. ``Laplace(0, scale)`` noise to every entry of ``value`` (array or pytree).

    Privacy: if ``value`` has L1 sensitivity ``Delta``, ``scale = Delta / epsilon`` gives
    ``epsilon``-DP (pure DP) under the relation of the sensitivity bound.
    """
    _check_key(key)
    v.check_positive("scale", scale, allow_zero=True)
    v.check_finite("value", value)

    def sample(k, leaf):
        dt = _float_dtype(leaf)
        return leaf.astype(dt) + jnp.asarray(scale, dt) * jax.random.laplace(k, leaf.shape, dt)

    return _tree_noise(key, value, sample)


def symmetric_gaussian_noise(key: jax.Array, dim: int, std: Any, dtype=jnp.float32) -> jax.Array:
    """A symmetric ``[dim, dim]`` matrix whose upper triangle (diagonal included) is i.i.d. N(0, std^2).

    This is the noise of the "analyze Gauss" mechanism: only ``dim (dim + 1) / 2`` independent draws,
    mirrored below the diagonal, so every entry (diagonal and off-diagonal) has std ``std``.
    """
    z = jax.random.normal(key, (dim, dim), dtype)
    upper = jnp.triu(z)
    return jnp.asarray(std, dtype) * (upper + jnp.triu(z, 1).T)


@full_precision
def noisy_sufficient_statistics(
    key: jax.Array,
    x: jax.Array,
    y: jax.Array,
    *,
    sigma_xx: Any,
    sigma_xy: Any,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Noisy ``(X^T X + E, X^T y + e)`` for private least squares (sufficient-statistics perturbation).

    ``E`` is symmetric with i.i.d. ``N(0, sigma_xx^2)`` entries on and above the diagonal
    (:func:`symmetric_gaussian_noise`); ``e ~ N(0, sigma_xy^2 I)``. ``y`` may be ``[n]`` or ``[n, k]``.
    Rows with ``mask == 0`` are left out.

    Privacy: if every row satisfies ``||x_i|| <= B_x`` and ``|y_i| <= B_y`` (bound them first, e.g.
    ``data.preprocessing.bound_row_norms``), adding or removing one row changes ``X^T X`` by
    ``x_i x_i^T`` (Frobenius norm ``<= B_x^2``; the upper triangle, which is all that is released
    independently, has L2 norm ``<= B_x^2``) and ``X^T y`` by ``<= B_x B_y``. The release is then
    ``B_x^4/(2 sigma_xx^2) + B_x^2 B_y^2/(2 sigma_xy^2)``-zCDP under add/remove-one neighbours
    (double both sensitivities for replace-one).
    """
    _check_key(key)
    v.check_shape("x", x, ndim=2)
    v.check_same_length(x=x, y=y, mask=mask)
    if jnp.ndim(y) not in (1, 2):
        raise ValueError(f"y must have shape [n] or [n, k], got {tuple(jnp.shape(y))}.")
    v.check_finite("x", x)
    v.check_finite("y", y)
    v.check_positive("sigma_xx", sigma_xx, allow_zero=True)
    v.check_positive("sigma_xy", sigma_xy, allow_zero=True)
    x = jnp.asarray(x)
    dt = _float_dtype(x)
    x = x.astype(dt)
    y = jnp.asarray(y, dt)
    xw = x if mask is None else x * jnp.asarray(mask, dt)[:, None]
    # Contract over rows with dot_general (no explicit transpose).
    xtx = jax.lax.dot_general(xw, x, (((0,), (0,)), ((), ())))
    xty = jax.lax.dot_general(xw, y, (((0,), (0,)), ((), ())))
    k_xx, k_xy = jax.random.split(key)
    xtx_noisy = xtx + symmetric_gaussian_noise(k_xx, x.shape[1], sigma_xx, dt)
    xty_noisy = xty + jnp.asarray(sigma_xy, dt) * jax.random.normal(k_xy, xty.shape, dt)
    return xtx_noisy, xty_noisy


def histogram_sensitivity(relation: Any) -> float:
    """L2 sensitivity of a histogram of counts under ``relation`` (a name or
    :class:`~dpfair_jax.privacy.relations.NeighboringRelation`): ``1`` under add/remove-one (one
    cell moves by 1), ``sqrt(2)`` under replace-one (one cell -1, another +1); the value of
    ``relations.histogram_sensitivity("l2")``."""
    return _rel.histogram_sensitivity("l2").under(relation)


@full_precision
def noisy_histogram(key: jax.Array, cells: jax.Array, num_cells: int, *, noise_multiplier: Any,
                    relation: str = "add_remove", weights: jax.Array | None = None) -> jax.Array:
    """Counts of the integer ``cells`` in ``[0, num_cells)`` plus ``N(0, sigma^2)`` per cell, with
    ``sigma = noise_multiplier * histogram_sensitivity(relation)`` (not rounded, may be negative).
    ``weights`` (0/1, e.g. a padding mask) select the rows counted.

    Privacy: a Gaussian mechanism with noise multiplier ``noise_multiplier`` under ``relation``
    (``dp_accounting.GaussianDpEvent(noise_multiplier)``), i.e. ``1 / (2 z^2)``-zCDP.
    """
    _check_key(key)
    v.check_positive("noise_multiplier", noise_multiplier, allow_zero=True)
    cells = jnp.asarray(cells, jnp.int32)
    w = jnp.ones(cells.shape, jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
    counts = jax.ops.segment_sum(w, cells, num_segments=num_cells)
    std = jnp.asarray(noise_multiplier, jnp.float32) * histogram_sensitivity(relation)
    return counts + std * jax.random.normal(key, counts.shape, jnp.float32)


def _check_em(scores, epsilon, sensitivity) -> None:
    if jnp.ndim(scores) < 1 or jnp.shape(scores)[-1] < 1:
        raise ValueError(
            f"scores must have at least one candidate on its last axis, got shape {jnp.shape(scores)}."
        )
    v.check_finite("scores", scores)
    v.check_epsilon(epsilon, allow_inf=False)
    v.check_positive("sensitivity", sensitivity)


def exponential_mechanism_logits(
    scores: jax.Array, *, epsilon: Any, sensitivity: Any, minimize: bool = True
) -> jax.Array:
    """Logits ``-/+ epsilon * score / (2 * sensitivity)`` of the exponential mechanism (last axis)."""
    scores = jnp.asarray(scores)
    dt = _float_dtype(scores)
    sign = -1.0 if minimize else 1.0
    eps = jnp.asarray(epsilon, dt)
    sens = jnp.asarray(sensitivity, dt)
    eps = eps[..., None] if eps.ndim else eps
    sens = sens[..., None] if sens.ndim else sens
    return sign * eps * scores.astype(dt) / (2.0 * sens)


def exponential_mechanism_probs(
    scores: jax.Array, *, epsilon: Any, sensitivity: Any, minimize: bool = True
) -> jax.Array:
    """Selection probabilities ``p_j ∝ exp(-/+ epsilon * score_j / (2 * sensitivity))`` (last axis).

    McSherry & Talwar (2007); the ``2 * sensitivity`` form is the general one (valid for any score
    whose per-candidate sensitivity is ``sensitivity``). Computed with a stable softmax.
    """
    _check_em(scores, epsilon, sensitivity)
    return jax.nn.softmax(
        exponential_mechanism_logits(scores, epsilon=epsilon, sensitivity=sensitivity, minimize=minimize),
        axis=-1,
    )


def exponential_mechanism(
    key: jax.Array,
    scores: jax.Array,
    *,
    epsilon: Any,
    sensitivity: Any,
    minimize: bool = True,
    return_probs: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Sample a candidate index from the exponential mechanism over a finite grid.

    ``scores[..., j]`` is the score (a loss if ``minimize``, a utility otherwise) of candidate ``j``;
    leading axes are independent problems. Returns ``int32`` indices of shape ``scores.shape[:-1]``.
    Sampling is ``jax.random.categorical`` on :func:`exponential_mechanism_logits`; the matching
    probabilities are :func:`exponential_mechanism_probs` (returned too with ``return_probs=True``:
    ``(index, probs)``; the probabilities are data-dependent and not private themselves).

    Privacy: ``epsilon``-DP (pure) when every candidate's score changes by at most ``sensitivity``
    between neighbouring datasets (under whichever relation that bound holds for). The candidate
    grid must be public (data-independent).
    """
    _check_key(key)
    _check_em(scores, epsilon, sensitivity)
    logits = exponential_mechanism_logits(
        scores, epsilon=epsilon, sensitivity=sensitivity, minimize=minimize
    )
    idx = jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
    if return_probs:
        return idx, jax.nn.softmax(logits, axis=-1)
    return idx
