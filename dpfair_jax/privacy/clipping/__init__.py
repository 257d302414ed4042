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

The module is the public path of every name above; the code lives in three modules:
:mod:`~dpfair_jax.privacy.clipping.vmap` (materialized per-example gradients, clip factors),
:mod:`~dpfair_jax.privacy.clipping.ghost` (ghost norms of GLMs, dense stacks and the CNN) and this
one (the dispatcher :func:`clipped_grad_sum` and :class:`ClippedGradSum`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy.clipping.ghost import (  # noqa: F401  (re-exported: the public path)
    _cnn_sum,
    _dense_ghost,
    _glm_clipped,
    _glm_size,
    cnn_clipped_grad_sum,
    dense_ghost_norm_sq,
    glm_clipped_grad_sum,
    glm_per_example_norms,
    mlp_clipped_grad_sum,
    mlp_forward,
)
from dpfair_jax.privacy.clipping.vmap import (  # noqa: F401  (re-exported: the public path)
    _scale_rows,
    clip_factors,
    clip_per_example,
    clip_per_layer,
    clip_tree,
    example_size,
    per_example_grads,
    per_example_norms,
    per_layer_sensitivity,
    weighted_sum,
)
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

    Checks in :func:`_check_call`; paths ``_vmap_sum``, ``_glm_sum``, ``_mlp_sum``, ``_cnn_sum``.
    """
    is_model, parts, clip_norm, mode, batch, out_loss = _check_call(
        loss_or_model, params, batch, clip_norm, weights, path, loss, public)
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


def _check_call(loss_or_model: Any, params: Any, batch: Any, clip_norm: Any, weights: Any, path: str,
                loss: Any, public: Any) -> tuple:
    """:func:`clipped_grad_sum`'s checks, before any compute: ``(is_model, parts, clip_norm, mode,
    batch as a tuple, output loss or None)``."""
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
    out_loss = None
    if is_model:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ValueError("with a models.Model, batch must be (x, y).")
        batch = tuple(batch)
        out_loss = _models.output_loss(loss_or_model, None, loss)
    else:
        batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
    return is_model, parts, clip_norm, mode, batch, out_loss
