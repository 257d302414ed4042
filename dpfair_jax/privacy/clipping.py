# Kept as one module (~730 lines): its vmap, ghost and dispatch sections share private helpers, and the
# mutation catalog (tests/mutation/privacy_arithmetic.py) addresses its code by this file.
"""Per-example gradients, L2 clipping (whole pytree and per layer), ghost norms, and the kit's one
per-example clipped-gradient dispatcher (:func:`clipped_grad_sum`).

Notation (Abadi et al. 2016; paper 001, Lemma 1): the clipped gradient of example ``i`` is
``g_i * min(1, C / ||g_i||)``, where ``||g_i||`` is the L2 norm over the whole parameter pytree.
Clipping bounds the L2 sensitivity of the *sum* of clipped gradients by ``C`` under add/remove-one
neighbours (``2 C`` under replace-one), which is what the Gaussian noise is scaled to.

Two ways to get per-example norms:

* ``vmap(grad)`` (:func:`per_example_grads`): any loss, any pytree; materializes ``[B, ...]``.
* ghost norms: exact norms without per-example gradients. For a dense layer with per-example input
  row ``a_i`` and output gradient ``g_i = dl_i/dz_i``, the weight gradient is ``a_i^T g_i`` so
  ``||a_i^T g_i||_F^2 = ||a_i||^2 ||g_i||^2`` (plus ``||g_i||^2`` for the bias). A GLM is one such
  layer (:func:`glm_per_example_norms`, :func:`glm_clipped_grad_sum`); a dense MLP is a stack of
  them (:func:`mlp_clipped_grad_sum`, "book-keeping" ghost clipping: one backward pass for the
  output gradients of every layer, then the clipped sum is assembled from the stored activations,
  with no second backward pass).

The dispatcher :func:`clipped_grad_sum` takes a per-example loss or a ``models.Model`` and picks
the path from what the model declares about its layers (``Model.layers``): ``"glm"`` (one dense
layer), ``"mlp"`` (a dense stack), ``"cnn"`` (conv layers and a dense head,
``privacy.ghost``), or ``vmap(grad)`` for anything else. The ghost paths read every layer's input
from the model's own forward pass (``Model.forward``, defined once in ``dpfair_jax.models``). Its
result carries the clip norm, hence its sensitivity under each neighbouring relation
(``ClippedGradSum.sensitivity``), as jax-privacy's clipped-gradient callables do.

``clip_norm=inf`` means "do not clip" everywhere (factor 1; sensitivity inf, so only a noiseless
path may use it). All functions are pure and jit/vmap-able; ``clip_norm`` may be a traced scalar.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.privacy import bounding as _bounding
from dpfair_jax.privacy import ghost as _ghost
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "per_example_grads",
    "per_example_norms",
    "clip_factors",
    "example_size",
    "clip_per_example",
    "clip_per_layer",
    "per_layer_sensitivity",
    "weighted_sum",
    "clip_tree",
    "PATHS",
    "ClippedGradSum",
    "per_example_path",
    "clipped_grad_sum",
    "glm_per_example_norms",
    "glm_clipped_grad_sum",
    "dense_ghost_norm_sq",
    "mlp_forward",
    "mlp_clipped_grad_sum",
    "cnn_clipped_grad_sum",
]

PyTree = Any


# ------------------------------------------------------------------------------------------------
# Generic (vmap) path
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# Ghost norms
# ------------------------------------------------------------------------------------------------
def _sq_rows(a: jax.Array) -> jax.Array:
    return jnp.sum(jnp.square(a), axis=-1) if a.ndim > 1 else jnp.square(a)


@full_precision
def glm_per_example_norms(
    x: jax.Array,
    dloss_dlogits: jax.Array,
    fit_intercept: bool = True,
    *,
    x_sq_norms: jax.Array | None = None,
) -> jax.Array:
    """Exact per-example gradient norms of a GLM ``z_i = x_i W + b`` without per-example gradients.

    ``grad_W l_i = x_i^T (dl/dz_i)`` so ``||grad_i||^2 = ||x_i||^2 ||dl/dz_i||^2`` (``+ ||dl/dz_i||^2``
    for the intercept). ``dloss_dlogits`` is ``[B]`` (one output: linear, logistic) or ``[B, k]``
    (multinomial). ``x_sq_norms`` (``||x_i||^2``, ``[B]``) may be passed when precomputed once for
    the whole dataset (they do not change during training). Returns ``[B]``.
    """
    v.check_shape("x", x, ndim=2)
    v.check_same_length(x=x, dloss_dlogits=dloss_dlogits, x_sq_norms=x_sq_norms)
    x = jnp.asarray(x)
    g = jnp.asarray(dloss_dlogits)
    g_sq = _sq_rows(g)
    x_sq = jnp.sum(jnp.square(x), axis=1) if x_sq_norms is None else jnp.asarray(x_sq_norms, g_sq.dtype)
    total = x_sq * g_sq + (g_sq if fit_intercept else 0.0)
    return jnp.sqrt(total)


@full_precision
def glm_clipped_grad_sum(
    x: jax.Array,
    dloss_dlogits: jax.Array,
    clip_norm: Any,
    mask: jax.Array | None = None,
    fit_intercept: bool = True,
    *,
    x_sq_norms: jax.Array | None = None,
) -> tuple[dict[str, jax.Array], jax.Array]:
    """Sum of clipped per-example GLM gradients from ghost norms: ``({"w", "b"}, norms)``.

    ``w`` has shape ``[d]`` (for ``[B]`` logit gradients) or ``[d, k]``; ``b`` is a scalar or ``[k]``
    (zeros when ``fit_intercept`` is False). The per-example weight ``c_i = mask_i min(1, C/||g_i||)``
    is folded into the logit gradients, so the sum is ``(c * dl/dz) @ x``: no ``[B, d]`` gradient
    array is formed. ``x_sq_norms`` as in :func:`glm_per_example_norms`.

    Privacy: L2 sensitivity ``clip_norm`` under add/remove-one (``2 clip_norm`` replace-one).
    """
    v.check_clip_norm(clip_norm, allow_inf=True)
    return _glm_clipped(x, dloss_dlogits, clip_norm, mask, fit_intercept, x_sq_norms)


def _glm_clipped(x, dloss_dlogits, clip_norm, mask, fit_intercept, x_sq_norms):
    """:func:`glm_clipped_grad_sum` on a checked clip norm."""
    norms = glm_per_example_norms(x, dloss_dlogits, fit_intercept, x_sq_norms=x_sq_norms)
    x = jnp.asarray(x)
    g = jnp.asarray(dloss_dlogits, x.dtype)
    c = clip_factors(norms, clip_norm, _glm_size(x, g, fit_intercept)) * _mask_weights(mask, norms.shape[0], norms.dtype)
    if g.ndim == 1:
        cg = c * g
        w = cg @ x
        b = jnp.sum(cg)
    else:
        cg = g * c[:, None]
        w = (cg.T @ x).T  # [k, B] @ [B, d]: the fast "c @ x" form, then a small transpose
        b = jnp.sum(cg, axis=0)
    if not fit_intercept:
        b = jnp.zeros_like(b)
    return {"w": w, "b": b}, norms


def _glm_size(x: jax.Array, g: jax.Array, fit_intercept: bool) -> int:
    """Parameter count ``d k (+ k)`` of a GLM: bounds the terms its ghost norm sums (``d + k + 2``)."""
    k = 1 if jnp.ndim(g) == 1 else int(jnp.shape(g)[1])
    return int(jnp.shape(x)[1]) * k + (k if fit_intercept else 0) + 2


@full_precision
def dense_ghost_norm_sq(a: jax.Array, g: jax.Array) -> jax.Array:
    """Per-example ``||A_i^T G_i||_F^2`` of a dense layer's weight gradient, without forming it.

    ``a``: inputs ``[B, d_in]`` (one row per example: ``||a_i||^2 ||g_i||^2``) or ``[B, T, d_in]``
    (sequences: ``<A_i A_i^T, G_i G_i^T>_F``); ``g``: output gradients ``[B, d_out]`` /
    ``[B, T, d_out]``. Add ``||sum_t g_it||^2`` yourself for the bias.
    """
    a = jnp.asarray(a)
    g = jnp.asarray(g)
    if a.ndim == 2:
        return jnp.sum(jnp.square(a), 1) * jnp.sum(jnp.square(g), 1)
    if a.ndim == 3:
        aa = jnp.einsum("bti,bsi->bts", a, a)
        gg = jnp.einsum("bto,bso->bts", g, g)
        return jnp.sum(aa * gg, axis=(1, 2))
    raise ValueError(f"a must have shape [B, d_in] or [B, T, d_in], got {a.shape}.")


def _check_mlp_params(params: Sequence[dict]) -> None:
    if not isinstance(params, (list, tuple)) or not params:
        raise ValueError("params must be a non-empty list of dense layers {'w': [in, out], 'b': [out]}.")
    for i, layer in enumerate(params):
        if not isinstance(layer, dict) or set(layer) != {"w", "b"}:
            raise ValueError(f"params[{i}] must be a dict with keys 'w' and 'b'.")
        if jnp.ndim(layer["w"]) != 2 or jnp.shape(layer["b"]) != jnp.shape(layer["w"])[1:]:
            raise ValueError(
                f"params[{i}] must have w [in, out] and b [out], got {jnp.shape(layer['w'])} "
                f"and {jnp.shape(layer['b'])}."
            )
        if i and jnp.shape(params[i - 1]["w"])[1] != jnp.shape(layer["w"])[0]:
            raise ValueError(f"params[{i}]['w'] input size does not match params[{i - 1}] output size.")


def mlp_forward(
    params: Sequence[dict],
    x: jax.Array,
    activation: Callable[[jax.Array], jax.Array] = jnp.tanh,
    probes: Sequence[jax.Array] | None = None,
) -> tuple[jax.Array, list[jax.Array]]:
    """Dense MLP ``z_l = a_l W_l + b_l (+ probe_l)``, ``a_{l+1} = activation(z_l)``; linear output,
    for ``params`` given as a list of ``{"w", "b"}`` layers (``models.dense_stack_forward``, the
    forward pass of ``models.mlp``).

    Returns the output ``z_L`` and the list of layer inputs ``[a_0 = x, a_1, ...]``.
    """
    return _models.dense_stack_forward([(layer["w"], layer["b"]) for layer in params], x, activation, probes)


def _dense_ghost(total_loss: Callable, probes: list[jax.Array], clip_norm: Any, weights: jax.Array,
                 public_loss: Callable | None = None) -> tuple[list[dict], jax.Array, jax.Array, Any, Any]:
    """Book-keeping ghost clipping of a dense stack: ``total_loss(probes) -> (sum of losses,
    (losses [B], layer inputs, outputs))``; one backward pass to the probes gives every layer's
    output gradients. ``public_loss(probes) -> sum_i w_i public_i`` (optional): its output gradients
    give the exact public sums from the same stored inputs. Returns ``([{"w", "b"} per layer], norms [B], losses [B],
    outputs, public sums or None)``."""
    (_, (losses, inputs, out)), out_grads = jax.value_and_grad(total_loss, has_aux=True)(probes)
    sq = sum((jnp.sum(jnp.square(a), 1) + 1.0) * jnp.sum(jnp.square(g), 1) for a, g in zip(inputs, out_grads))
    norms = jnp.sqrt(sq)
    size = sum((int(a.shape[1]) + 1) * int(g.shape[1]) for a, g in zip(inputs, out_grads)) + 2 * len(inputs)
    c = clip_factors(norms, clip_norm, size) * weights
    pub_grads = None if public_loss is None else jax.grad(public_loss)(probes)
    grads, pub = [], None if public_loss is None else []
    for l, (a, g) in enumerate(zip(inputs, out_grads)):
        cg = g * c[:, None]
        if public_loss is None:
            grads.append({"w": (cg.T @ a).T, "b": jnp.sum(cg, axis=0)})
            continue
        pg = pub_grads[l]
        grads.append({"w": (cg.T @ a).T, "b": jnp.sum(cg, axis=0)})
        pub.append({"w": (pg.T @ a).T, "b": jnp.sum(pg, axis=0)})
    return grads, norms, losses, out, pub


@full_precision
def mlp_clipped_grad_sum(
    params: Sequence[dict],
    x: jax.Array,
    y: jax.Array,
    output_loss: Callable[[jax.Array, jax.Array], jax.Array],
    clip_norm: Any,
    *,
    activation: Callable[[jax.Array], jax.Array] = jnp.tanh,
    mask: jax.Array | None = None,
) -> tuple[list[dict], jax.Array, jax.Array]:
    """Ghost clipping for a dense MLP: ``(clipped gradient sum, norms [B], losses [B])``.

    ``params`` is a list of ``{"w": [in, out], "b": [out]}``; ``output_loss(outputs [B, out], y)``
    returns the per-example losses ``[B]``. One backward pass, taken with respect to zero "probes"
    added to every pre-activation, gives the per-example output gradients ``g_{l,i}`` of every layer
    (example ``i``'s loss depends only on row ``i``). Then (dense-layer identity)
    ``||grad_i||^2 = sum_l (||a_{l,i}||^2 + 1) ||g_{l,i}||^2`` and the clipped sum is
    ``sum_i c_i a_{l,i}^T g_{l,i} = (c * g_l)^T a_l`` per layer, from stored activations.

    Privacy: L2 sensitivity ``clip_norm`` under add/remove-one (``2 clip_norm`` replace-one).
    """
    v.check_clip_norm(clip_norm, allow_inf=True)
    _check_mlp_params(params)
    v.check_shape("x", x, ndim=2)
    v.check_same_length(x=x, y=y, mask=mask)
    x = jnp.asarray(x)
    bsz = x.shape[0]
    probes = [jnp.zeros((bsz, layer["w"].shape[1]), x.dtype) for layer in params]

    def total_loss(pr):
        out, inputs = mlp_forward(params, x, activation, pr)
        losses = output_loss(out, y)
        return jnp.sum(losses), (losses, inputs, out)

    return _dense_ghost(total_loss, probes, clip_norm, _mask_weights(mask, bsz, x.dtype))[:3]


@full_precision
def cnn_clipped_grad_sum(model: Any, params: Any, x: jax.Array, y: jax.Array, output_loss: Any,
                         clip_norm: Any, *, mask: jax.Array | None = None, method: str = "auto"):
    """Ghost clipping for the kit's CNN (:func:`dpfair_jax.models.cnn`): ``(clipped sum, norms [B], losses [B])``.

    :func:`~dpfair_jax.privacy.ghost.cnn_ghost_backward` (one backward pass with respect to zero
    probes on every pre-activation of ``model.forward``; norms from the unfolded conv patches and
    the dense head), then ``sum_i c_i grad_i`` layer by layer
    (:func:`~dpfair_jax.privacy.ghost.cnn_weighted_grad`) with ``c_i = mask_i min(1, C / ||grad_i||)``;
    the result has the structure of ``params``. ``output_loss(outputs, y) -> [B]``.

    Privacy: L2 sensitivity ``clip_norm`` under add/remove-one (``2 clip_norm`` replace-one).
    Norms, clip factors and sums are computed in float32; mixed-precision models
    (``compute_dtype`` set) are refused (their norms would be rounded; use ``vmap(grad)``).
    """
    v.check_clip_norm(clip_norm, allow_inf=True)
    sums, gh = _cnn_sum(model, params, x, y, output_loss, clip_norm, mask, method)
    return sums, gh.norms, gh.losses


def _cnn_sum(model, params, x, y, output_loss, clip_norm, mask, method="auto"):
    """The CNN ghost pass and its clipped sum: ``(sums, CnnGhost)``; ``y`` any pytree of ``[B, ...]``."""
    if getattr(model, "layers", None) == "cnn":
        v.check_same_length(x=jnp.reshape(jnp.asarray(x), (-1, *model.hparams["image_shape"])),
                            y=jax.tree_util.tree_leaves(y)[0], mask=mask)
    gh = _ghost.cnn_ghost_backward(model, params, x, y, output_loss, method=method)
    c = clip_factors(gh.norms, clip_norm, _param_count(params))
    if mask is not None:
        c = c * jnp.asarray(mask, c.dtype)
    return _ghost.cnn_weighted_grad(model, gh, c), gh


# ------------------------------------------------------------------------------------------------
# The per-example clipped-gradient dispatcher
# ------------------------------------------------------------------------------------------------
PATHS = ("auto", "vmap", "ghost")


class ClippedGradSum(NamedTuple):
    """One batch's clipped gradient sum (:func:`clipped_grad_sum`).

    ``sums``: ``sum_i w_i clip(g_i, C)`` in the structure of the parameters; ``norms [B]``: the
    unclipped per-example gradient norms; ``losses [B]``: per-example losses (both computed from
    the private batch and **not** private); ``clip_norm``: ``C``; ``public``: the exact sum
    ``sum_i w_i grad public_i`` of a public loss part (``None`` without one; not clipped, not
    covered by the sensitivity); ``outputs``: the model's outputs on the batch (ghost paths of a
    model; ``None`` otherwise; not private). With per-part clip norms ``(C_1, ..., C_k)``, ``sums``,
    ``norms``, ``clip_norm`` and the sensitivities are tuples, one entry per part. A pytree
    (jit/vmap-able).
    """

    sums: PyTree
    norms: jax.Array
    losses: jax.Array
    clip_norm: Any
    public: PyTree = None
    outputs: Any = None

    def sensitivity(self, relation: Any = "add_remove") -> Any:
        """L2 sensitivity of ``sums`` under ``relation``: ``C`` (add/remove one), ``2 C`` (replace
        one), ``inf`` for ``C = inf``; a traced value when ``C`` is traced; a tuple (one per part)
        for per-part clip norms."""
        if isinstance(self.clip_norm, tuple):
            return tuple(_part_sensitivity(c, relation) for c in self.clip_norm)
        return _part_sensitivity(self.clip_norm, relation)

    @property
    def sensitivities(self) -> Any:
        """The sensitivity under both relations (``relations.clipped_sum_sensitivity(C)``; ``C``
        must be concrete); a tuple for per-part clip norms."""
        if isinstance(self.clip_norm, tuple):
            return tuple(_rel.clipped_sum_sensitivity(np.asarray(c, np.float64)) for c in self.clip_norm)
        return _rel.clipped_sum_sensitivity(np.asarray(self.clip_norm, np.float64))


def _part_sensitivity(clip_norm: Any, relation: Any) -> Any:
    if isinstance(clip_norm, jax.core.Tracer):
        return clip_norm * _rel.replace_factor(relation)
    return _rel.clipped_sum_sensitivity(np.asarray(clip_norm, np.float64)).under(relation)


def per_example_path(loss_or_model: Any, path: str = "auto") -> str:
    """How :func:`clipped_grad_sum` gets per-example gradients: ``"glm"``, ``"mlp"``, ``"cnn"``
    (ghost norms, from ``Model.layers``) or ``"vmap"``.

    ``path="auto"``: the model's declaration (``vmap`` for loss functions and models that declare
    none); ``"ghost"``: the same, but raises if there is no ghost path; ``"vmap"``: always
    ``vmap(grad)``.
    """
    v.check_choice("path", path, PATHS)
    kind = loss_or_model.layers if isinstance(loss_or_model, _models.Model) else None
    if kind is not None and (kind not in _models.LAYER_KINDS or loss_or_model.forward is None):
        raise ValueError(f"model declares layers={kind!r} but ghost norms need one of "
                         f"{_models.LAYER_KINDS} and a forward(params, x, probes) function.")
    if path == "vmap":
        return "vmap"
    if kind is None:
        if path == "ghost":
            raise ValueError(
                "path='ghost' needs a model that declares its layers (models.linear, logistic, "
                "multinomial_logistic, mlp, or a float32 cnn); use path='auto' or 'vmap' for other "
                "models and loss functions.")
        return "vmap"
    return kind


def _check_weights(weights: Any) -> None:
    if weights is None or isinstance(weights, jax.core.Tracer):
        return
    arr = np.asarray(weights, np.float64)
    if arr.ndim != 1 or not np.all((arr >= 0) & (arr <= 1)):
        raise ValueError("weights must be a [B] array with entries in [0, 1] (a mask or sampling "
                         "weights; the sensitivity C assumes each example's weight is at most 1).")


def _glm_sum(model, params, x, y, out_loss, clip_norm, w, x_sq, public=None):
    """GLM ghost norms: the logit gradients from one backward pass of ``model.forward``; with a
    public part, both parts' logit gradients from the one forward pass (``vjp``) and the public
    sum as ``(w g_pub)^T x``."""
    x = jnp.asarray(x)
    fit_intercept = "b" in params
    probe = jnp.zeros((x.shape[0], params["w"].shape[1]), x.dtype)
    if public is None:
        def total(pr):
            out, _ = model.forward(params, x, pr)
            losses = out_loss(out, y)
            return jnp.sum(losses), (losses, out)

        (dz,), (losses, out) = jax.grad(total, has_aux=True)([probe])
        sums, norms = _glm_clipped(x, dz, clip_norm, w, fit_intercept, x_sq)
        grads = {"w": sums["w"]}
        if fit_intercept:
            grads["b"] = sums["b"]
        return grads, norms, losses, out, None
    out, back = jax.vjp(lambda pr: model.forward(params, x, pr)[0], [probe])
    losses = out_loss(out, y)
    (dz,), = back(jax.grad(lambda o: jnp.sum(out_loss(o, y)))(out))
    (dzp,), = back(jax.grad(lambda o: jnp.sum(w * public(o, y)))(out))
    norms = glm_per_example_norms(x, dz, fit_intercept, x_sq_norms=x_sq)
    cg = dz * (clip_factors(norms, clip_norm, _glm_size(x, dz, fit_intercept)) * w)[:, None]
    grads, pub = {"w": (cg.T @ x).T}, {"w": (dzp.T @ x).T}
    if fit_intercept:
        grads["b"], pub["b"] = jnp.sum(cg, axis=0), jnp.sum(dzp, axis=0)
    return grads, norms, losses, out, pub


def _mlp_sum(model, params, x, y, out_loss, clip_norm, w, public=None):
    """Dense-stack ghost norms from ``model.forward`` (``{"layers": {i: {"kernel", "bias"}}}``)."""
    x = jnp.asarray(x)
    keys = sorted(params["layers"])
    probes = [jnp.zeros((x.shape[0], params["layers"][k]["kernel"].shape[1]), x.dtype) for k in keys]

    def total(pr):
        out, inputs = model.forward(params, x, pr)
        losses = out_loss(out, y)
        return jnp.sum(losses), (losses, inputs, out)

    pub_loss = None if public is None else (
        lambda pr: jnp.sum(w * public(model.forward(params, x, pr)[0], y)))
    grads, norms, losses, out, pub = _dense_ghost(total, probes, clip_norm, w, pub_loss)

    def layout(gs):
        return {"layers": {k: {"kernel": g["w"], "bias": g["b"]} for k, g in zip(keys, gs)}}

    return layout(grads), norms, losses, out, None if pub is None else layout(pub)


def _vmap_sum(loss_fn, params, batch, clip_norm, w, public=None):
    """``vmap(value_and_grad)``: any per-example loss ``loss_fn(params, *example)``; a tuple of
    clip norms clips each part of a tuple ``params`` on its own. ``public(params, *example)``:
    its weighted sum as one batched gradient."""
    in_axes = (None,) + (0,) * len(batch)
    losses, grads = jax.vmap(jax.value_and_grad(loss_fn), in_axes=in_axes)(params, *batch)
    if isinstance(clip_norm, tuple):  # each part scaled by its factors, then summed with the weights
        norms = tuple(per_example_norms(g) for g in grads)
        sums = tuple(weighted_sum(_scale_rows(g, clip_factors(nm, c, example_size(g))), w)
                     for g, nm, c in zip(grads, norms, clip_norm))
    else:
        norms = per_example_norms(grads)
        sums = weighted_sum(grads, clip_factors(norms, clip_norm, example_size(grads)) * w)
    pub = None
    if public is not None:
        pub = jax.grad(lambda p: jnp.sum(jax.vmap(public, in_axes=in_axes)(p, *batch) * w))(params)
    return sums, norms, losses, pub


def _model_public_sum(model, params, x, y, public, w):
    """``sum_i w_i grad public(outputs_i, y_i)`` as one batched gradient through ``model.forward``
    (``model.apply`` where the model declares no layers)."""
    fwd = (lambda p: model.forward(p, x)[0]) if model.forward is not None else (lambda p: model.apply(p, x))
    return jax.grad(lambda p: jnp.sum(w * public(fwd(p), y)))(params)


def _check_part_clips(clip_norm: Any, params: Any, is_model: bool) -> tuple:
    if is_model:
        raise ValueError("per-part clip norms (a tuple clip_norm) need a per-example loss function, "
                         "not a models.Model; pass one clip norm.")
    if not isinstance(params, tuple) or len(params) != len(clip_norm) or not clip_norm:
        raise ValueError(f"a tuple clip_norm of {len(clip_norm)} needs params as a tuple of as many "
                         f"parts (one clip norm per part), got {type(params).__name__}.")
    for c in clip_norm:
        _check_clip(c)
    return tuple(clip_norm)


def _check_clip(clip_norm: Any) -> None:
    """The dispatcher's clip norm: ``> 0``, ``inf`` (no clipping) or ``0`` (every example
    contributes zero: sensitivity 0, e.g. a part scaled by a zero weight)."""
    v.check_positive("clip_norm", clip_norm, allow_inf=True, allow_zero=True)


@full_precision
def clipped_grad_sum(
    loss_or_model: Any,
    params: PyTree,
    batch: Any,
    *,
    clip_norm: Any,
    weights: jax.Array | None = None,
    path: str = "auto",
    loss: Any = None,
    x_sq_norms: jax.Array | None = None,
    public: Any = None,
) -> ClippedGradSum:
    """``sum_i w_i clip(grad_i, C)`` over one batch, with the per-example path chosen from the model.

    Args:
      loss_or_model: a per-example loss ``loss(params, *example) -> scalar`` (``vmap(grad)``), or
        a ``models.Model``: ghost norms when it declares its layers (``Model.layers``: ``"glm"``,
        ``"mlp"``, ``"cnn"``; activations from ``Model.forward``), ``vmap(grad)`` of ``apply``
        otherwise.
      params: the parameters (any pytree for a loss; the model's layout for a model).
      batch: for a model ``(x, y)``; for a loss a tuple of arrays (or one array) with a leading
        batch axis, passed to the loss example by example.
      clip_norm: ``C > 0`` (may be traced); ``inf`` = no clipping (sensitivity inf); ``0``: every
        example contributes zero (sensitivity 0).
      weights: ``[B]`` in ``[0, 1]`` (padding mask, sampling mask); default all ones.
      path: ``"auto"``, ``"ghost"`` (raise when the model has no ghost path) or ``"vmap"``.
      loss: with a model, the per-example output loss ``(outputs, y) -> [B]`` (default
        ``models.output_loss(model)``).
      x_sq_norms: GLM path only: precomputed ``||x_i||^2`` ``[B]``.
      public: a part of the loss whose gradients are summed exactly, not clipped
        (``ClippedGradSum.public``): with a model an output loss ``(outputs, y) -> [B]``, with a
        loss function a per-example loss of the same signature. On the dense ghost paths its
        sum comes from its output gradients and the stored layer inputs; otherwise one batched
        gradient.

    ``clip_norm`` may also be a tuple ``(C_1, ..., C_k)`` when ``loss_or_model`` is a loss function
    and ``params`` a tuple of ``k`` parts: each part's per-example gradient is clipped to its own
    norm (min-max methods that noise each part separately, ``algorithms.sgda``).

    Returns:
      :class:`ClippedGradSum` ``(sums, norms, losses, clip_norm, public, outputs)`` with
      ``.sensitivity(relation)``.

    Privacy: L2 sensitivity ``C`` under add/remove-one neighbours, ``2 C`` under replace-one
    (``ClippedGradSum.sensitivity``; per part for per-part clip norms), for weights in ``[0, 1]``;
    ghost norms are exact identities, so every path has the same sensitivity. Not private until
    noise is added (``privacy.mechanisms``). ``public`` is outside the sensitivity: its sum shows
    which examples carry weight, so it must not depend on the protected data and its release
    voids amplification by subsampling.

    Long only by this docstring: the code is under 50 lines.
    """
    is_model = isinstance(loss_or_model, _models.Model)
    parts = isinstance(clip_norm, (tuple, list))
    if parts:
        clip_norm = _check_part_clips(clip_norm, params, is_model)
    else:
        _check_clip(clip_norm)
    _check_weights(weights)
    mode = per_example_path(loss_or_model, path)
    if not is_model and not callable(loss_or_model):
        raise ValueError("loss_or_model must be a models.Model or a per-example loss function.")
    if not is_model and loss is not None:
        raise ValueError("loss= is only used with a models.Model; loss_or_model is already a loss.")
    if public is not None and not callable(public):
        raise ValueError("public must be a per-example loss (a callable) or None.")
    if is_model:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ValueError("with a models.Model, batch must be (x, y).")
        batch = tuple(batch)
        out_loss = _models.output_loss(loss_or_model, None, loss)
    else:
        batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
    n = v.check_same_length(**{f"batch[{i}]": jax.tree_util.tree_leaves(b)[0] for i, b in enumerate(batch)})
    dt = jnp.result_type(jax.tree_util.tree_leaves(batch[0])[0])
    dt = jnp.promote_types(dt, jnp.float32) if jnp.issubdtype(dt, jnp.floating) else jnp.float32
    w = jnp.ones((n,), dt) if weights is None else jnp.asarray(weights, dt)
    clip = tuple(jnp.asarray(c, dt) for c in clip_norm) if parts else jnp.asarray(clip_norm, dt)
    out, pub = None, None
    if mode == "vmap":
        if is_model:
            sums, norms, losses, _ = _vmap_sum(_models.example_loss(loss_or_model, out_loss), params, batch,
                                               clip, w)
            if public is not None:
                pub = _model_public_sum(loss_or_model, params, *batch, public, w)
        else:
            sums, norms, losses, pub = _vmap_sum(loss_or_model, params, batch, clip, w, public)
    elif mode == "glm":
        sums, norms, losses, out, pub = _glm_sum(loss_or_model, params, *batch, out_loss, clip, w, x_sq_norms,
                                                 public)
    elif mode == "mlp":
        sums, norms, losses, out, pub = _mlp_sum(loss_or_model, params, *batch, out_loss, clip, w, public)
    else:
        sums, gh = _cnn_sum(loss_or_model, params, *batch, out_loss, clip, w)
        norms, losses, out = gh.norms, gh.losses, gh.outputs
        if public is not None:
            pub = _model_public_sum(loss_or_model, params, *batch, public, w)
    return ClippedGradSum(sums, norms, losses, clip, pub, out)
