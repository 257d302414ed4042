"""Privatized aggregation: clip, sum, add Gaussian noise, then normalize.

Pure functions and optax ``GradientTransformation``s over *per-example* gradient pytrees (leaves
``[B, ...]``). Two flavours:

* one noise scale: ``noisy sum = sum_i clip(g_i) + N(0, (sigma C)^2 I)``, divided by a public
  denominator (the expected batch size under Poisson sampling, the fixed batch size otherwise);
* group-weighted noise: per-group clipped sums ``S_k = sum_{i: s_i = k} clip(g_i)`` via
  ``jax.ops.segment_sum`` over integer group ids, each with its own noise std ``sigma_k C``, then
  recombined with public weights ``sum_k w_k (S_k + noise_k) / n_k``, ``n_k`` public (required:
  realized group counts of the batch are private and are never used as denominators).

Everything after the noise is post-processing. Noise scales, clip norms and weights may be traced
arrays (a whole grid under one ``jit(vmap(...))``). ``clip_norm=inf`` (concrete) means "do not
clip": its sensitivity is infinite, so it is accepted only with noise multipliers that are
concretely 0 (the noiseless path, e.g. a non-private baseline of the same code).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpfair_jax import _validation as v
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "gaussian_std",
    "noisy_sum",
    "noised_mean",
    "private_sum",
    "private_mean",
    "group_clipped_sums",
    "group_counts",
    "group_weighted_noisy_sums",
    "combine_group_means",
    "group_weighted_private_mean",
    "DPAggregateState",
    "dp_aggregate",
    "group_weighted_dp_aggregate",
]

PyTree = Any


def noisy_sum(key: jax.Array, sum_tree: PyTree, std: Any) -> PyTree:
    """``sum_tree + N(0, std^2 I)`` leaf-wise (the Gaussian mechanism on a clipped sum).

    Privacy: with ``std = noise_multiplier * clip_norm`` and a clipped sum of sensitivity
    ``clip_norm`` (add/remove-one), this is the Gaussian mechanism with that noise multiplier.
    """
    return _mech.gaussian_mechanism(key, sum_tree, std)


def gaussian_std(noise_multiplier: Any, sensitivity: Any, dtype: Any = None) -> jax.Array:
    """The Gaussian mechanism's noise std ``z * Delta`` for multiplier ``z`` and L2 sensitivity
    ``Delta``, in ``dtype`` (default: that of the inputs); 0 where ``z = 0`` (also for
    ``Delta = inf``, the noiseless path of an unclipped query). Traced values are fine.

    Privacy: ``N(0, std^2)`` noise on a query of sensitivity ``Delta`` is the Gaussian mechanism
    with multiplier ``z``: ``1 / (2 z^2)``-zCDP under the relation of ``Delta``.
    """
    z = jnp.asarray(noise_multiplier, dtype)
    d = jnp.asarray(sensitivity, dtype)
    return jnp.where(z == 0, jnp.zeros((), jnp.result_type(z, d)), z * d)


def noised_mean(key: jax.Array, clipped_sum: PyTree, *, sensitivity: Any, noise_multiplier: Any,
                denominator: Any) -> PyTree:
    """``(S + N(0, std^2 I)) / denominator`` leaf-wise with ``std = noise_multiplier * sensitivity``
    (:func:`gaussian_std`, in the sum's float dtype): the noise-and-normalize half of DP-SGD's
    step, after the clipped sum ``S`` (``privacy.clipping.clipped_grad_sum``, :func:`private_sum`).
    Lower level: use an algorithm's ``fit`` (``dpsgd``, ``mitigation``); records no spend, validates
    nothing beyond the mechanism's own checks. ``denominator`` must be public (the expected batch
    size under Poisson sampling, never the realized one). jit/vmap-able, traced values fine.

    Privacy: with ``S`` of L2 sensitivity ``sensitivity`` (add/remove-one: ``C`` for a clipped sum),
    the Gaussian mechanism with multiplier ``noise_multiplier`` (``1 / (2 z^2)``-zCDP); the
    division is post-processing.
    """
    leaf = jax.tree_util.tree_leaves(clipped_sum)[0]
    dt = leaf.dtype if jnp.issubdtype(leaf.dtype, jnp.floating) else jnp.float32
    noisy = noisy_sum(key, clipped_sum, gaussian_std(noise_multiplier, sensitivity, dt))
    return jax.tree_util.tree_map(lambda t: t / jnp.asarray(denominator, t.dtype), noisy)


def _unclipped(clip_norm: Any) -> bool:
    """Whether ``clip_norm`` is concretely ``inf`` (no clipping)."""
    if isinstance(clip_norm, jax.core.Tracer):
        return False
    return bool(np.all(np.isinf(np.asarray(clip_norm, np.float64))))


def _check_clip(clip_norm: Any, noise_multiplier: Any, name: str = "noise_multiplier") -> None:
    """``clip_norm > 0``; ``inf`` only where every noise multiplier is concretely 0."""
    v.check_clip_norm(clip_norm, allow_inf=True)
    if isinstance(clip_norm, jax.core.Tracer):
        return
    if np.any(np.isinf(np.asarray(clip_norm, np.float64))):
        if not _unclipped(clip_norm):
            raise ValueError(f"clip_norm={clip_norm!r} mixes inf with finite values; pass one.")
        nm = noise_multiplier
        if isinstance(nm, jax.core.Tracer) or np.any(np.asarray(nm, np.float64) != 0):
            raise ValueError(f"clip_norm=inf (no clipping) has infinite sensitivity; it is accepted "
                             f"only with {name}=0 (a noiseless, non-private path).")


def _clip_weights(norms: jax.Array, clip_norm: Any, size: int) -> jax.Array:
    """Per-example clip factors of norms over ``size`` entries; all ones for ``clip_norm=inf``."""
    if _unclipped(clip_norm):
        return jnp.ones_like(norms)
    return _clip.clip_factors(norms, clip_norm, size)


def _noise_std(noise_multiplier: Any, clip_norm: Any, dtype) -> jax.Array:
    """``noise_multiplier * clip_norm`` (0 on the noiseless unclipped path, not ``0 * inf``)."""
    if _unclipped(clip_norm):
        return jnp.zeros(jnp.shape(noise_multiplier), dtype)
    return jnp.asarray(noise_multiplier, dtype) * jnp.asarray(clip_norm, dtype)


def _check_common(clip_norm, noise_multiplier, per_example_tree, mask) -> None:
    v.check_noise_multiplier(noise_multiplier)
    _check_clip(clip_norm, noise_multiplier)
    leaves = jax.tree_util.tree_leaves(per_example_tree)
    if not leaves:
        raise ValueError("per_example_tree has no leaves.")
    v.check_same_length(**{f"per_example_tree leaf {i}": l for i, l in enumerate(leaves)}, mask=mask)
    v.check_finite("per_example_tree", per_example_tree)


@full_precision
def private_sum(
    key: jax.Array,
    per_example_tree: PyTree,
    *,
    clip_norm: Any,
    noise_multiplier: Any,
    mask: jax.Array | None = None,
) -> tuple[PyTree, jax.Array]:
    """Clip each example to ``clip_norm``, sum (masked rows dropped), add ``N(0, (sigma C)^2)``.

    Returns ``(noisy_sum_tree, unclipped_norms [B])``.

    Privacy: Gaussian mechanism with noise multiplier ``noise_multiplier`` w.r.t. add/remove-one
    neighbours (sensitivity ``clip_norm``); for replace-one the effective multiplier is halved.
    """
    _check_common(clip_norm, noise_multiplier, per_example_tree, mask)
    total, norms = _masked_clipped_sum(per_example_tree, clip_norm, mask)
    std = _noise_std(noise_multiplier, clip_norm, norms.dtype)
    return noisy_sum(key, total, std), norms


def _masked_clipped_sum(per_example_tree: PyTree, clip_norm: Any, mask: Any) -> tuple[PyTree, jax.Array]:
    """``(sum_i mask_i clip(g_i, C), unclipped norms [B])`` (no clipping for ``C = inf``)."""
    norms = _clip.per_example_norms(per_example_tree)
    w = _clip_weights(norms, clip_norm, _clip.example_size(per_example_tree))
    if mask is not None:
        w = w * jnp.asarray(mask, w.dtype)
    return _clip.weighted_sum(per_example_tree, w), norms


@full_precision
def private_mean(
    key: jax.Array,
    per_example_tree: PyTree,
    *,
    clip_norm: Any,
    noise_multiplier: Any,
    denominator: Any,
    mask: jax.Array | None = None,
) -> PyTree:
    """Clip, sum, add noise, divide by the public ``denominator``: DP-SGD's gradient estimate.

    Use the *expected* batch size ``q n`` under Poisson sampling (dividing by the realized size
    would leak it) and the fixed batch size under fixed-size sampling.

    Privacy: as :func:`private_sum` (the division is post-processing).
    """
    v.check_positive("denominator", denominator)
    _check_common(clip_norm, noise_multiplier, per_example_tree, mask)
    total, _ = _masked_clipped_sum(per_example_tree, clip_norm, mask)
    return noised_mean(key, total, sensitivity=clip_norm, noise_multiplier=noise_multiplier,
                       denominator=denominator)


# ------------------------------------------------------------------------------------------------
# Group-weighted noise
# ------------------------------------------------------------------------------------------------
def _check_groups(s, num_groups: int, n: int | None = None) -> None:
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_shape("s", s, ndim=1)
    if n is not None and jnp.shape(s)[0] != n:
        raise ValueError(f"s has {jnp.shape(s)[0]} rows but the per-example tree has {n}.")
    v.check_group_ids(s, num_groups, "s")


@full_precision
def group_clipped_sums(
    per_example_tree: PyTree,
    s: jax.Array,
    num_groups: int,
    clip_norm: Any,
    mask: jax.Array | None = None,
) -> PyTree:
    """Per-group sums of clipped per-example values: leaves ``[num_groups, ...]``.

    ``S_k = sum_{i: s_i = k} mask_i clip(g_i, C)`` via ``jax.ops.segment_sum`` (``num_groups`` static).
    Empty groups give exact zeros.

    Privacy: adding or removing one example changes one ``S_k`` by at most ``C`` in L2, so the
    stacked sums have sensitivity ``C`` (add/remove-one). With group-weighted noise, the example's
    own group's noise ``sigma_k`` determines its privacy (each group is its own Gaussian
    mechanism; the guarantee for everyone is that of ``min_k sigma_k``).
    """
    leaves = jax.tree_util.tree_leaves(per_example_tree)
    if not leaves:
        raise ValueError("per_example_tree has no leaves.")
    _check_groups(s, num_groups, jnp.shape(leaves[0])[0])
    v.check_clip_norm(clip_norm, allow_inf=True)  # inf: the sums are unclipped (no noise may follow)
    v.check_same_length(s=s, mask=mask)
    if _unclipped(clip_norm):
        clipped = jax.tree_util.tree_map(jnp.asarray, per_example_tree)
    else:
        clipped, _ = _clip.clip_per_example(per_example_tree, clip_norm)
    if mask is not None:
        m = jnp.asarray(mask)
        clipped = jax.tree_util.tree_map(
            lambda l: l * m.reshape((-1,) + (1,) * (l.ndim - 1)).astype(l.dtype), clipped
        )
    s = jnp.asarray(s, jnp.int32)
    return jax.tree_util.tree_map(
        lambda l: jax.ops.segment_sum(l, s, num_segments=num_groups), clipped
    )


def group_counts(s: jax.Array, num_groups: int, mask: jax.Array | None = None) -> jax.Array:
    """Number of (unmasked) rows per group ``[num_groups]`` (float32).

    Privacy: none. These are exact counts of the private batch; do not use them as denominators
    or release them without noise (see :func:`group_weighted_dp_aggregate`)."""
    _check_groups(s, num_groups)
    w = jnp.ones(jnp.shape(s), jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
    return jax.ops.segment_sum(w, jnp.asarray(s, jnp.int32), num_segments=num_groups)


def group_weighted_noisy_sums(key: jax.Array, group_sums_tree: PyTree, stds: Any) -> PyTree:
    """Add ``N(0, stds[k]^2)`` to row ``k`` of every leaf ``[K, ...]`` (one noise scale per group).

    Privacy: row ``k`` is a Gaussian mechanism with noise multiplier ``stds[k] / C`` for the
    members of group ``k`` (add/remove-one, sensitivity ``C`` of the clipped group sum).
    """
    v.check_threefry_key(key)
    v.check_positive("stds", stds, allow_zero=True)
    leaves, treedef = jax.tree_util.tree_flatten(group_sums_tree)
    if not leaves:
        raise ValueError("group_sums_tree has no leaves.")
    k = jnp.shape(leaves[0])[0]
    if jnp.ndim(stds) != 1 or jnp.shape(stds)[0] != k:
        raise ValueError(f"stds must have shape [{k}] (one per group), got {jnp.shape(stds)}.")
    keys = jax.random.split(key, len(leaves))
    out = []
    for kk, leaf in zip(keys, leaves):
        sd = jnp.asarray(stds, leaf.dtype).reshape((-1,) + (1,) * (leaf.ndim - 1))
        out.append(leaf + _mech.gaussian_noise(kk, leaf.shape, sd, leaf.dtype))
    return treedef.unflatten(out)


@full_precision
def combine_group_means(
    noisy_group_sums: PyTree, group_weights: Any, denominators: Any
) -> PyTree:
    """``sum_k w_k S~_k / n_k`` with ``n_k`` public; groups with ``n_k == 0`` contribute 0 (no NaN)."""
    w = jnp.asarray(group_weights)
    den = jnp.asarray(denominators)

    def comb(leaf):
        dt = leaf.dtype
        d = den.astype(dt)
        coef = jnp.where(d > 0, w.astype(dt) / jnp.where(d > 0, d, 1.0), 0.0)
        flat = leaf.reshape(leaf.shape[0], -1)
        return (coef @ flat).reshape(leaf.shape[1:])

    return jax.tree_util.tree_map(comb, noisy_group_sums)


@full_precision
def group_weighted_private_mean(
    key: jax.Array,
    per_example_tree: PyTree,
    s: jax.Array,
    num_groups: int,
    *,
    clip_norm: Any,
    noise_multipliers: Any,
    group_weights: Any,
    denominators: Any,
    mask: jax.Array | None = None,
) -> PyTree:
    """Group-weighted private mean ``sum_k w_k (S_k + N(0, (sigma_k C)^2 I)) / n_k``.

    ``noise_multipliers``, ``group_weights`` and ``denominators`` (public group sizes, e.g. expected
    per-group batch sizes) have shape ``[num_groups]``. Empty groups (``n_k = 0``) are dropped from
    the combination instead of producing NaN.

    Privacy: each member of group ``k`` is protected by a Gaussian mechanism with noise multiplier
    ``sigma_k`` (add/remove-one, sensitivity ``C``); the weights and denominators must be public.
    """
    v.check_noise_multiplier(noise_multipliers, "noise_multipliers")
    for name, arr in (("group_weights", group_weights), ("denominators", denominators),
                      ("noise_multipliers", noise_multipliers)):
        if jnp.ndim(arr) != 1 or jnp.shape(arr)[0] != num_groups:
            raise ValueError(f"{name} must have shape [{num_groups}] (one per group), got {jnp.shape(arr)}.")
    v.check_positive("denominators", denominators, allow_zero=True)
    v.check_finite("group_weights", group_weights)
    _check_clip(clip_norm, noise_multipliers, "noise_multipliers")
    sums = group_clipped_sums(per_example_tree, s, num_groups, clip_norm, mask)
    stds = _noise_std(noise_multipliers, clip_norm, jnp.float32)
    noisy = group_weighted_noisy_sums(key, sums, stds)
    return combine_group_means(noisy, group_weights, denominators)


# ------------------------------------------------------------------------------------------------
# optax GradientTransformations
# ------------------------------------------------------------------------------------------------
class DPAggregateState(NamedTuple):
    """State of the DP aggregators: the PRNG key for the next step's noise."""

    key: jax.Array


def _state_key(key: Any) -> jax.Array:
    if isinstance(key, int):
        return jax.random.key(key)
    v.check_threefry_key(key)
    return key


def dp_aggregate(
    *, clip_norm: Any, noise_multiplier: Any, key: Any, denominator: Any = None
) -> optax.GradientTransformationExtraArgs:
    """optax transformation: per-example gradients ``[B, ...]`` in, private mean gradient out.

    ``update(per_example_grads, state, params=None, *, mask=None)`` splits the state key into
    ``(next_key, noise_key)`` and returns :func:`private_mean` with ``noise_key`` and
    ``denominator`` (default: the static leading dimension ``B`` of the update, a shape and hence
    public, right for fixed-size batches; never the realized ``sum(mask)``, which is private; pass
    the expected batch size for Poisson sampling). Chain it before any optax optimizer:
    ``optax.chain(dp_aggregate(...), optax.adam(lr))``. Hyperparameters may be traced arrays.

    Privacy: each update is a Gaussian mechanism with noise multiplier ``noise_multiplier``
    (add/remove-one neighbours, sensitivity ``clip_norm``); account it with
    ``accounting.dpsgd_event`` and the matching sampling scheme.
    """
    v.check_noise_multiplier(noise_multiplier)
    _check_clip(clip_norm, noise_multiplier)
    if denominator is not None:
        v.check_positive("denominator", denominator)
    key = _state_key(key)

    def init_fn(params):
        del params
        return DPAggregateState(key=key)

    def update_fn(updates, state, params=None, *, mask=None, **extra_args):
        del params, extra_args
        next_key, noise_key = jax.random.split(state.key)
        den = denominator
        if den is None:
            den = jnp.shape(jax.tree_util.tree_leaves(updates)[0])[0]
        out = private_mean(
            noise_key, updates, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
            denominator=den, mask=mask,
        )
        return out, DPAggregateState(key=next_key)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def group_weighted_dp_aggregate(
    *,
    clip_norm: Any,
    noise_multipliers: Any,
    group_weights: Any,
    num_groups: int,
    key: Any,
    denominators: Any = None,
) -> optax.GradientTransformationExtraArgs:
    """optax transformation with one noise scale per group (:func:`group_weighted_private_mean`).

    ``update(per_example_grads, state, params=None, *, groups, mask=None)``: ``groups`` is the
    int32 group id ``[B]`` of each example. ``denominators`` ``[num_groups]`` (required) are the
    public group denominators: the expected per-group batch sizes ``q n_k`` under Poisson sampling
    (with public group sizes ``n_k``), or the sizes of fixed per-group batches. There is no
    default: dividing by the realized (masked) group counts of the batch, the former default, is
    not private (one example changes its group's count, so the noisy mean moves by about
    ``2 C / n_k`` where ``C / n_k`` is accounted; the audit's planted bug
    ``"realized_denominator"`` measures epsilon >= 2.4 against a claim of 1). Group sizes that are
    not public must first be released as noisy counts (``privacy.mechanisms``) and charged to the
    spend by the caller. The state key is split exactly as in :func:`dp_aggregate`.

    Privacy: as :func:`group_weighted_private_mean` (public weights and denominators).
    """
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_noise_multiplier(noise_multipliers, "noise_multipliers")
    _check_clip(clip_norm, noise_multipliers, "noise_multipliers")
    if denominators is None:
        raise ValueError(
            "group_weighted_dp_aggregate needs public denominators=[num_groups] (e.g. the expected "
            "per-group batch sizes q * n_k); the realized group counts of a batch are private. "
            "Release noisy group counts and charge them if the group sizes are not public.")
    if jnp.ndim(denominators) != 1 or jnp.shape(denominators)[0] != num_groups:
        raise ValueError(f"denominators must have shape [{num_groups}] (one per group), "
                         f"got {jnp.shape(denominators)}.")
    v.check_positive("denominators", denominators, allow_zero=True)
    key = _state_key(key)

    def init_fn(params):
        del params
        return DPAggregateState(key=key)

    def update_fn(updates, state, params=None, *, groups=None, mask=None, **extra_args):
        del params, extra_args
        if groups is None:
            raise ValueError("group_weighted_dp_aggregate.update needs groups= (int group id per example).")
        next_key, noise_key = jax.random.split(state.key)
        out = group_weighted_private_mean(
            noise_key, updates, groups, num_groups, clip_norm=clip_norm,
            noise_multipliers=noise_multipliers, group_weights=group_weights,
            denominators=denominators, mask=mask,
        )
        return out, DPAggregateState(key=next_key)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
