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
from dpfair_jax.privacy import ghost as _ghost
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "per_example_grads",
    "per_example_norms",
    "clip_factors",
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


def clip_factors(norms: jax.Array, clip_norm: Any) -> jax.Array:
    """``min(1, C / norm)``: exactly 1 where ``norm <= C`` (so for ``C = inf``, no clipping, and for
    zero gradients, also at ``C = 0``), else ``C / norm``."""
    norms = jnp.asarray(norms)
    c = jnp.asarray(clip_norm, norms.dtype)
    return jnp.where(norms <= c, jnp.ones_like(norms), c / jnp.maximum(norms, c))


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
    return _scale_rows(tree, clip_factors(norms, clip_norm)), norms


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
        leaf * clip_factors(n, c).reshape((-1,) + (1,) * (leaf.ndim - 1)).astype(leaf.dtype)
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
    clip = jnp.asarray(clip, norm.dtype)
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
    norms = glm_per_example_norms(x, dloss_dlogits, fit_intercept, x_sq_norms=x_sq_norms)
    x = jnp.asarray(x)
    g = jnp.asarray(dloss_dlogits, x.dtype)
    c = clip_factors(norms, clip_norm) * _mask_weights(mask, norms.shape[0], norms.dtype)
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


def _dense_ghost(total_loss: Callable, probes: list[jax.Array], clip_norm: Any, weights: jax.Array
                 ) -> tuple[list[dict], jax.Array, jax.Array]:
    """Book-keeping ghost clipping of a dense stack: ``total_loss(probes) -> (sum of losses,
    (losses [B], layer inputs))``; one backward pass to the probes gives every layer's output
    gradients. Returns ``([{"w", "b"} per layer], norms [B], losses [B])``."""
    (_, (losses, inputs)), out_grads = jax.value_and_grad(total_loss, has_aux=True)(probes)
    sq = sum((jnp.sum(jnp.square(a), 1) + 1.0) * jnp.sum(jnp.square(g), 1) for a, g in zip(inputs, out_grads))
    norms = jnp.sqrt(sq)
    c = clip_factors(norms, clip_norm) * weights
    grads = []
    for a, g in zip(inputs, out_grads):
        cg = g * c[:, None]
        grads.append({"w": (cg.T @ a).T, "b": jnp.sum(cg, axis=0)})
    return grads, norms, losses


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
        return jnp.sum(losses), (losses, inputs)

    return _dense_ghost(total_loss, probes, clip_norm, _mask_weights(mask, bsz, x.dtype))


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
    if getattr(model, "layers", None) == "cnn":
        v.check_same_length(x=jnp.reshape(jnp.asarray(x), (-1, *model.hparams["image_shape"])),
                            y=y, mask=mask)
    gh = _ghost.cnn_ghost_backward(model, params, x, y, output_loss, method=method)
    c = clip_factors(gh.norms, clip_norm)
    if mask is not None:
        c = c * jnp.asarray(mask, c.dtype)
    return _ghost.cnn_weighted_grad(model, gh, c), gh.norms, gh.losses


# ------------------------------------------------------------------------------------------------
# The per-example clipped-gradient dispatcher
# ------------------------------------------------------------------------------------------------
PATHS = ("auto", "vmap", "ghost")


class ClippedGradSum(NamedTuple):
    """One batch's clipped gradient sum (:func:`clipped_grad_sum`).

    ``sums``: ``sum_i w_i clip(g_i, C)`` in the structure of the parameters; ``norms [B]``: the
    unclipped per-example gradient norms; ``losses [B]``: per-example losses (both computed from
    the private batch and **not** private); ``clip_norm``: ``C``. A pytree (jit/vmap-able).
    """

    sums: PyTree
    norms: jax.Array
    losses: jax.Array
    clip_norm: Any

    def sensitivity(self, relation: Any = "add_remove") -> Any:
        """L2 sensitivity of ``sums`` under ``relation``: ``C`` (add/remove one), ``2 C`` (replace
        one), ``inf`` for ``C = inf``; a traced value when ``C`` is traced."""
        if isinstance(self.clip_norm, jax.core.Tracer):
            return self.clip_norm * _rel.replace_factor(relation)
        return _rel.clipped_sum_sensitivity(np.asarray(self.clip_norm, np.float64)).under(relation)

    @property
    def sensitivities(self) -> _rel.Sensitivity:
        """The sensitivity under both relations (``relations.clipped_sum_sensitivity(C)``; ``C``
        must be concrete)."""
        return _rel.clipped_sum_sensitivity(np.asarray(self.clip_norm, np.float64))


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


def _glm_sum(model, params, x, y, out_loss, clip_norm, w, x_sq):
    """GLM ghost norms: the logit gradients from one backward pass of ``model.forward``."""
    x = jnp.asarray(x)

    def total(pr):
        out, _ = model.forward(params, x, pr)
        losses = out_loss(out, y)
        return jnp.sum(losses), losses

    probe = jnp.zeros((x.shape[0], params["w"].shape[1]), x.dtype)
    (dz,), losses = jax.grad(total, has_aux=True)([probe])
    sums, norms = glm_clipped_grad_sum(x, dz, clip_norm, w, fit_intercept="b" in params, x_sq_norms=x_sq)
    grads = {"w": sums["w"]}
    if "b" in params:
        grads["b"] = sums["b"]
    return grads, norms, losses


def _mlp_sum(model, params, x, y, out_loss, clip_norm, w):
    """Dense-stack ghost norms from ``model.forward`` (``{"layers": {i: {"kernel", "bias"}}}``)."""
    x = jnp.asarray(x)
    keys = sorted(params["layers"])
    probes = [jnp.zeros((x.shape[0], params["layers"][k]["kernel"].shape[1]), x.dtype) for k in keys]

    def total(pr):
        out, inputs = model.forward(params, x, pr)
        losses = out_loss(out, y)
        return jnp.sum(losses), (losses, inputs)

    grads, norms, losses = _dense_ghost(total, probes, clip_norm, w)
    sums = {"layers": {k: {"kernel": g["w"], "bias": g["b"]} for k, g in zip(keys, grads)}}
    return sums, norms, losses


def _vmap_sum(loss_fn, params, batch, clip_norm, w):
    """``vmap(value_and_grad)``: any per-example loss ``loss_fn(params, *example)``."""
    in_axes = (None,) + (0,) * len(batch)
    losses, grads = jax.vmap(jax.value_and_grad(loss_fn), in_axes=in_axes)(params, *batch)
    norms = per_example_norms(grads)
    c = clip_factors(norms, clip_norm) * w
    return weighted_sum(grads, c), norms, losses


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
      clip_norm: ``C > 0`` (may be traced); ``inf`` = no clipping (sensitivity inf).
      weights: ``[B]`` in ``[0, 1]`` (padding mask, sampling mask); default all ones.
      path: ``"auto"``, ``"ghost"`` (raise when the model has no ghost path) or ``"vmap"``.
      loss: with a model, the per-example output loss ``(outputs, y) -> [B]`` (default
        ``models.output_loss(model)``).
      x_sq_norms: GLM path only: precomputed ``||x_i||^2`` ``[B]``.

    Returns:
      :class:`ClippedGradSum` ``(sums, norms, losses, clip_norm)`` with ``.sensitivity(relation)``.

    Privacy: L2 sensitivity ``C`` under add/remove-one neighbours, ``2 C`` under replace-one
    (``ClippedGradSum.sensitivity``), for weights in ``[0, 1]``; ghost norms are exact identities,
    so every path has the same sensitivity. Not private until noise is added
    (``privacy.mechanisms``).
    """
    v.check_clip_norm(clip_norm, allow_inf=True)
    _check_weights(weights)
    mode = per_example_path(loss_or_model, path)
    is_model = isinstance(loss_or_model, _models.Model)
    if not is_model and not callable(loss_or_model):
        raise ValueError("loss_or_model must be a models.Model or a per-example loss function.")
    if not is_model and loss is not None:
        raise ValueError("loss= is only used with a models.Model; loss_or_model is already a loss.")
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
    clip = jnp.asarray(clip_norm, dt)
    if mode == "vmap":
        loss_fn = _models.example_loss(loss_or_model, out_loss) if is_model else loss_or_model
        sums, norms, losses = _vmap_sum(loss_fn, params, batch, clip, w)
    elif mode == "glm":
        sums, norms, losses = _glm_sum(loss_or_model, params, *batch, out_loss, clip, w, x_sq_norms)
    elif mode == "mlp":
        sums, norms, losses = _mlp_sum(loss_or_model, params, *batch, out_loss, clip, w)
    else:
        sums, norms, losses = cnn_clipped_grad_sum(loss_or_model, params, *batch, out_loss, clip, mask=w)
    return ClippedGradSum(sums, norms, losses, clip)
