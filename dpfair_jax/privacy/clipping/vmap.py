"""Per-example clipping by materialized per-example gradients (the ``vmap(grad)`` path of
:func:`dpfair_jax.privacy.clipping.clipped_grad_sum`): per-example gradients, their L2 norms over the
whole pytree, the clip factors ``min(1, C / ||g_i||)`` (with the rounding margin of
``privacy.bounding``), clipping of the whole pytree and per layer, and weighted sums.

Privacy: the sum over examples of rows clipped to ``C`` has L2 sensitivity ``C`` under
add/remove-one neighbours (``2 C`` under replace-one); per-layer clipping ``sqrt(sum_l C_l^2)``.
Import these names from :mod:`dpfair_jax.privacy.clipping` (the public path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import bounding as _bounding
from dpfair_jax.privacy.precision import full_precision

PyTree = Any


@full_precision
def per_example_grads(loss_fn: Callable[..., jax.Array], params: PyTree, *batch: Any) -> PyTree:
    """Per-example gradients ``[B, ...]`` of ``loss_fn(params, *example)`` (the loss of ONE example).

    ``batch`` are arrays (or pytrees) with a leading batch axis; ``vmap(grad(loss_fn))`` over it.
    """
    if not batch:
        raise ValueError("per_example_grads needs at least one batch array after params.")
    v.check_same_length(**{f"batch[{i}]": jax.tree_util.tree_leaves(b)[0] for i, b in enumerate(batch)})
    in_axes = (None,) + (0,) * len(batch)
    return jax.vmap(jax.grad(loss_fn), in_axes=in_axes)(params, *batch)


def _leaf_sq_norms(leaf: jax.Array) -> jax.Array:
    leaf = jnp.asarray(leaf)
    return jnp.sum(jnp.square(leaf.reshape(leaf.shape[0], -1)), axis=1)


@full_precision
def per_example_norms(tree: PyTree) -> jax.Array:
    """L2 norm of each example's slice of ``tree`` (leaves ``[B, ...]``) over the whole pytree: ``[B]``."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError("tree has no leaves; pass per-example gradients with a leading batch axis.")
    v.check_same_length(**{f"leaf{i}": leaf for i, leaf in enumerate(leaves)})
    return jnp.sqrt(sum(_leaf_sq_norms(leaf) for leaf in leaves))


def clip_factors(norms: jax.Array, clip_norm: Any, size: int = 1) -> jax.Array:
    """``min(1, C' / norm)`` with ``C' = C (1 - m)``, ``m = bounding.clip_margin(size, dtype)``:
    exactly 1 where ``norm <= C'`` (so for ``C = inf``, no clipping, and for zero gradients, also
    at ``C = 0``), else ``C' / norm``.

    ``size``: how many squared terms each norm sums (the per-example parameter count). The margin
    ``m = (size + 8) 2^-24`` in float32 covers the rounding of such a norm and of the scaling, so
    a vector scaled by its factor has true L2 norm ``<= C`` (rounding errs on the safe side)."""
    norms = jnp.asarray(norms)
    c = _bounding.safe_clip_norm(clip_norm, size, norms.dtype)
    return jnp.where(norms <= c, jnp.ones_like(norms), c / jnp.maximum(norms, c))


def _param_count(params: PyTree) -> int:
    """Entries of an (unbatched) parameter pytree (static)."""
    return max(1, sum(int(np.prod(jnp.shape(leaf), dtype=np.int64)) for leaf in jax.tree_util.tree_leaves(params)))


def example_size(tree: PyTree) -> int:
    """Entries per example of a tree with leaves ``[B, ...]`` (static): the ``size`` to pass to
    :func:`clip_factors` for norms of that tree's rows."""
    return max(1, sum(int(np.prod(jnp.shape(leaf)[1:], dtype=np.int64)) for leaf in jax.tree_util.tree_leaves(tree)))


def _scale_rows(tree: PyTree, factors: jax.Array) -> PyTree:
    def scale(leaf):
        f = factors.reshape((-1,) + (1,) * (leaf.ndim - 1)).astype(leaf.dtype)
        return leaf * f

    return jax.tree_util.tree_map(scale, tree)


@full_precision
def clip_per_example(tree: PyTree, clip_norm: Any) -> tuple[PyTree, jax.Array]:
    """Clip every example of ``tree`` (leaves ``[B, ...]``) to L2 norm ``<= clip_norm`` over the pytree.

    Returns ``(clipped_tree, norms)`` with the *unclipped* norms ``[B]``.

    Privacy: the sum over examples of the clipped tree has L2 sensitivity ``clip_norm`` under
    add/remove-one neighbours (``2 * clip_norm`` under replace-one); ``clip_norm=inf`` returns the
    tree unchanged (infinite sensitivity).
    """
    v.check_clip_norm(clip_norm, allow_inf=True)
    norms = per_example_norms(tree)
    return _scale_rows(tree, clip_factors(norms, clip_norm, example_size(tree))), norms


def per_layer_sensitivity(clip_norms: PyTree) -> jax.Array:
    """L2 sensitivity ``sqrt(sum_l C_l^2)`` of a per-layer clipped sum (one ``C_l`` per leaf)."""
    leaves = [jnp.asarray(c) for c in jax.tree_util.tree_leaves(clip_norms)]
    return jnp.sqrt(sum(jnp.square(c) for c in leaves))


@full_precision
def clip_per_layer(tree: PyTree, clip_norms: Any) -> tuple[PyTree, PyTree]:
    """Clip each leaf of each example separately: leaf ``l`` to norm ``<= C_l``.

    ``clip_norms`` is a pytree with the structure of ``tree`` holding one scalar per leaf, or a
    single scalar used for every leaf. Returns ``(clipped_tree, norms_tree)`` (unclipped norms,
    one ``[B]`` array per leaf).

    Privacy: the sum of the clipped tree has L2 sensitivity ``sqrt(sum_l C_l^2)``
    (:func:`per_layer_sensitivity`; with a scalar ``C`` and ``L`` leaves, ``C sqrt(L)``) under
    add/remove-one neighbours; scale the noise to that.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(clip_norms)):
        if jnp.ndim(clip_norms) != 0:
            raise ValueError(f"clip_norms must be a scalar or a pytree like tree, got shape {jnp.shape(clip_norms)}.")
        c_leaves = [clip_norms] * len(leaves)
    else:
        c_tree_def = jax.tree_util.tree_structure(clip_norms)
        if c_tree_def != treedef:
            raise ValueError(
                "clip_norms must be a scalar or a pytree with the structure of tree "
                f"({treedef}), got {c_tree_def}."
            )
        c_leaves = jax.tree_util.tree_leaves(clip_norms)
    for c in c_leaves:
        v.check_clip_norm(c, "clip_norms", allow_inf=True)
    norms = [jnp.sqrt(_leaf_sq_norms(leaf)) for leaf in leaves]
    clipped = [
        leaf * clip_factors(n, c, example_size(leaf)).reshape((-1,) + (1,) * (leaf.ndim - 1)).astype(leaf.dtype)
        for leaf, n, c in zip(leaves, norms, c_leaves)
    ]
    return treedef.unflatten(clipped), treedef.unflatten(norms)


@full_precision
def weighted_sum(tree: PyTree, weights: jax.Array) -> PyTree:
    """``sum_i w_i tree_i`` for leaves ``[B, ...]``, as ``w @ leaf`` (a row-vector contraction)."""

    def contract(leaf):
        flat = leaf.reshape(leaf.shape[0], -1)
        return (weights.astype(leaf.dtype) @ flat).reshape(leaf.shape[1:])

    return jax.tree_util.tree_map(contract, tree)


def _mask_weights(mask, n: int, dtype) -> jax.Array:
    if mask is None:
        return jnp.ones((n,), dtype)
    return jnp.asarray(mask, dtype)


_TINY = 1e-30


def _tree_sq_norm(tree: PyTree) -> jax.Array:
    """Per-example squared norms of a tree with leading batch axis ``[B, ...]``."""
    leaves = jax.tree_util.tree_leaves(tree)
    return sum(jnp.sum(jnp.reshape(x * x, (x.shape[0], -1)), axis=1) for x in leaves)


def clip_tree(tree: PyTree, clip: Any) -> tuple[PyTree, jax.Array]:
    """Clip each example (leading axis) to L2 norm ``<= clip`` over the whole tree.

    Factor ``1`` when ``norm <= clip`` (so ``clip = inf`` and zero gradients are exact), else
    ``clip / norm``; ``clip = 0`` zeroes every example. Returns ``(clipped, clipped_indicator)``.

    Privacy: the sum over examples of the clipped tree has L2 sensitivity ``clip`` under
    add/remove-one (``2 clip`` under replace-one).
    """
    norm = jnp.sqrt(_tree_sq_norm(tree))
    clip = _bounding.safe_clip_norm(clip, example_size(tree), norm.dtype)  # margin: bounding.clip_margin
    factor = jnp.where(norm <= clip, 1.0, clip / jnp.maximum(norm, _TINY))
    out = jax.tree_util.tree_map(lambda x: x * factor.reshape((-1,) + (1,) * (x.ndim - 1)), tree)
    return out, (norm > clip).astype(norm.dtype)
