"""Ghost norms: exact per-example gradient norms and clipped sums of dense layers without
per-example gradients (the GLM, dense-stack and CNN paths of
:func:`dpfair_jax.privacy.clipping.clipped_grad_sum`).

For a dense layer with per-example input row ``a_i`` and output gradient ``g_i = dl_i/dz_i`` the
weight gradient is ``a_i^T g_i``, so ``||a_i^T g_i||_F^2 = ||a_i||^2 ||g_i||^2`` (plus ``||g_i||^2``
for the bias). A GLM is one such layer; a dense MLP a stack of them ("book-keeping" ghost
clipping: one backward pass for every layer's output gradients, then the clipped sum from the
stored activations); the CNN's conv layers are in :mod:`dpfair_jax.privacy.ghost`.

Privacy: the norms are exact identities, so each clipped sum has L2 sensitivity ``C`` under
add/remove-one (``2 C`` replace-one), as on the ``vmap(grad)`` path. Import these names from
:mod:`dpfair_jax.privacy.clipping` (the public path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.privacy import ghost as _ghost
from dpfair_jax.privacy.clipping.vmap import _mask_weights, _param_count, clip_factors
from dpfair_jax.privacy.precision import full_precision


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
