"""Ghost norms and clipped-gradient sums for dense, embedding and 2-D convolution layers.

A layer whose pre-activation for example ``i`` is linear in the parameters has a per-example
weight gradient ``A_i^T G_i``, where ``A_i [T, p]`` are the (unfolded) layer inputs at the ``T``
positions the weight is applied to and ``G_i [T, o]`` the loss gradients of the outputs there
(Goodfellow 2015; Li et al. 2022, "ghost clipping"; Bu et al. 2023, "book-keeping"). Its squared
Frobenius norm is, without forming the gradient,

    ||A_i^T G_i||_F^2 = <A_i A_i^T, G_i G_i^T>_F = sum_{t,s} <a_t, a_s> <g_t, g_s>       (Gram identity)

which costs ``O(T^2 (p + o))`` against ``O(T p o)`` for the direct per-example gradient; the
``method="auto"`` rule picks the cheaper one (Gram when ``T^2 < p o``).

* dense: ``T = 1`` (``||a_i||^2 ||g_i||^2``) or sequences ``[B, T, d]``;
* embedding (table ``E [V, D]``, token ids ``[B, T]``): ``A_i`` is one-hot, so ``<a_t, a_s>`` is
  ``[id_t == id_s]`` and ``||grad_i E||^2 = sum_{t,s: id_t = id_s} <g_t, g_s>`` (repeated tokens
  add their gradients before squaring);
* conv2d (NHWC inputs, HWIO kernel, as ``flax.nnx.Conv``): ``A_i`` are the unfolded patches
  ``[H' W', kh kw C_in]`` (:func:`conv2d_patches`, the layout of
  ``lax.conv_general_dilated_patches``), ``G_i`` the output gradients
  ``[H' W', C_out]``.

Biases: ``||sum_t g_t||^2`` (:func:`bias_norm_sq`). The total per-example norm of a model is the
square root of the sum over its layers; clipping factors ``c_i = min(1, C / ||grad_i||)`` then give
the clipped sum layer by layer as ``sum_i c_i A_i^T G_i`` (the ``*_weighted_grad`` functions), one
contraction, no ``[B, ...]`` per-example gradient array.

The kit's CNN (:func:`dpfair_jax.models.cnn`): :func:`cnn_ghost_backward` gets every layer's
per-example output gradients from one backward pass with respect to zero probes on the
pre-activations of the model's own forward pass (``Model.forward``; book-keeping),
:func:`cnn_weighted_grad` assembles the clipped sum in the params' structure;
``privacy.clipping.cnn_clipped_grad_sum`` does both, and ``clipping.clipped_grad_sum`` (the
dispatcher ``dpsgd.fit`` uses) takes that path for float32 CNNs (``Model.layers == "cnn"``).

Privacy: these are exact identities (no approximation), so a clipped sum assembled from them has
the same L2 sensitivity as with ``vmap`` per-example gradients: ``C`` under add/remove-one
neighbours, ``2 C`` under replace-one. All functions are pure and jit/vmap-able.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax import _validation as v
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "METHODS",
    "gram_norm_sq",
    "dense_norm_sq",
    "bias_norm_sq",
    "embedding_norm_sq",
    "conv2d_patches",
    "conv2d_norm_sq",
    "dense_weighted_grad",
    "embedding_weighted_grad",
    "conv2d_weighted_grad",
    "total_norms",
    "cnn_forward",
    "CnnGhost",
    "cnn_ghost_backward",
    "cnn_weighted_grad",
    "cnn_matches_apply",
]

METHODS = ("auto", "gram", "direct")


def _check_batch_pair(a_name: str, a: Any, g_name: str, g: Any, ndim: Sequence[int]) -> None:
    a_shape, g_shape = jnp.shape(a), jnp.shape(g)
    if len(a_shape) not in ndim:
        raise ValueError(f"{a_name} must have {' or '.join(map(str, ndim))} dimensions, got shape {a_shape}.")
    if a_shape[:-1] != g_shape[:-1] or len(g_shape) != len(a_shape):
        raise ValueError(
            f"{a_name} {a_shape} and {g_name} {g_shape} must agree on every axis but the last "
            "(batch and positions); pass the output gradients of the same layer call."
        )


@full_precision
def gram_norm_sq(a: jax.Array, g: jax.Array, method: str = "auto") -> jax.Array:
    """Per-example ``||A_i^T G_i||_F^2`` for ``a [B, T, p]``, ``g [B, T, o]``: ``[B]``.

    ``method="gram"``: ``<A_i A_i^T, G_i G_i^T>`` (``O(T^2 (p + o))``); ``"direct"``: form
    ``A_i^T G_i`` and square (``O(T p o)``); ``"auto"``: Gram when ``T^2 < p o``.
    """
    v.check_choice("method", method, METHODS)
    _check_batch_pair("a", a, "g", g, (3,))
    a = jnp.asarray(a)
    g = jnp.asarray(g, a.dtype)
    t, p, o = a.shape[1], a.shape[2], g.shape[2]
    if method == "auto":
        method = "gram" if t * t < p * o else "direct"
    if method == "gram":
        aa = jnp.einsum("bti,bsi->bts", a, a)
        gg = jnp.einsum("bto,bso->bts", g, g)
        return jnp.sum(aa * gg, axis=(1, 2))
    per = jnp.einsum("bti,bto->bio", a, g)
    return jnp.sum(jnp.square(per), axis=(1, 2))


@full_precision
def dense_norm_sq(a: jax.Array, g: jax.Array, *, bias: bool = True, method: str = "auto") -> jax.Array:
    """Dense layer ``z = a W (+ b)``: per-example squared gradient norm of ``(W, b)``: ``[B]``.

    ``a [B, d_in]`` / ``g [B, d_out]``: ``||a_i||^2 ||g_i||^2 (+ ||g_i||^2)``; sequences
    ``[B, T, d_in]`` / ``[B, T, d_out]`` (weights shared over positions): the Gram identity
    (:func:`gram_norm_sq`) plus ``||sum_t g_it||^2`` for the bias.
    """
    _check_batch_pair("a", a, "g", g, (2, 3))
    a = jnp.asarray(a)
    g = jnp.asarray(g, a.dtype)
    if a.ndim == 2:
        g_sq = jnp.sum(jnp.square(g), 1)
        return jnp.sum(jnp.square(a), 1) * g_sq + (g_sq if bias else 0.0)
    w = gram_norm_sq(a, g, method)
    return w + (bias_norm_sq(g) if bias else 0.0)


def bias_norm_sq(g: jax.Array) -> jax.Array:
    """Per-example squared norm of a bias gradient ``sum over positions of g``: ``[B]``.

    ``g [B, o]``, ``[B, T, o]`` or ``[B, H', W', o]`` (conv: the bias is shared by all positions).
    """
    g = jnp.asarray(g)
    if g.ndim < 2:
        raise ValueError(f"g must have a batch and a feature axis, got shape {g.shape}.")
    s = jnp.sum(g.reshape(g.shape[0], -1, g.shape[-1]), axis=1)
    return jnp.sum(jnp.square(s), axis=1)


def _check_ids(ids: Any, g: Any) -> None:
    ids_shape, g_shape = jnp.shape(ids), jnp.shape(g)
    if not jnp.issubdtype(jnp.result_type(ids), jnp.integer):
        raise ValueError(f"ids must be integer token ids, got dtype {jnp.result_type(ids)}.")
    if len(ids_shape) not in (1, 2) or g_shape[:-1] != ids_shape or len(g_shape) != len(ids_shape) + 1:
        raise ValueError(
            f"ids [B] or [B, T] and g [B, D] or [B, T, D] must match, got ids {ids_shape} and g {g_shape}; "
            "g is the gradient of the loss with respect to the looked-up embeddings."
        )


@full_precision
def embedding_norm_sq(ids: jax.Array, g: jax.Array) -> jax.Array:
    """Embedding table ``E [V, D]`` looked up at ``ids``: per-example ``||grad_i E||_F^2``: ``[B]``.

    ``ids [B, T]`` (integers), ``g [B, T, D]`` the loss gradients of the looked-up rows. Rows of
    repeated tokens add up: ``sum_{t,s} [ids_it == ids_is] <g_it, g_is>`` (``O(T^2 D)``, no ``V``).
    ``ids [B]`` / ``g [B, D]`` (one token per example): ``||g_i||^2``.
    """
    _check_ids(ids, g)
    g = jnp.asarray(g)
    if g.ndim == 2:
        return jnp.sum(jnp.square(g), axis=1)
    ids = jnp.asarray(ids)
    same = (ids[:, :, None] == ids[:, None, :]).astype(g.dtype)
    gg = jnp.einsum("btd,bsd->bts", g, g)
    return jnp.sum(same * gg, axis=(1, 2))


def _conv_args(kernel_size: Sequence[int], strides: Sequence[int] | None, padding: Any):
    ks = tuple(int(k) for k in kernel_size)
    if len(ks) != 2 or min(ks) < 1:
        raise ValueError(f"kernel_size must be two positive ints (kh, kw), got {kernel_size!r}.")
    st = (1, 1) if strides is None else tuple(int(s) for s in strides)
    if len(st) != 2 or min(st) < 1:
        raise ValueError(f"strides must be two positive ints, got {strides!r}.")
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"padding must be 'SAME', 'VALID' or ((lo, hi), (lo, hi)), got {padding!r}.")
        padding = padding.upper()
    return ks, st, padding


def _pad_and_size(size: int, k: int, stride: int, padding: Any) -> tuple[tuple[int, int], int]:
    """(low, high) padding and output size of one spatial axis, with XLA's SAME/VALID rules."""
    if padding == "VALID":
        return (0, 0), (size - k) // stride + 1
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + k - size, 0)
        return (total // 2, total - total // 2), out
    lo, hi = (int(p) for p in padding)
    return (lo, hi), (size + lo + hi - k) // stride + 1


def conv2d_patches(x: jax.Array, kernel_size: Sequence[int], strides: Sequence[int] | None = None,
                   padding: Any = "SAME") -> jax.Array:
    """Unfold NHWC images into patches ``[B, H' W', C_in kh kw]`` (feature order: channel-major,
    as ``lax.conv_general_dilated_patches``).

    Built from ``kh kw`` strided slices of the padded input (pure data movement, the same values as
    ``lax.conv_general_dilated_patches``, which runs a convolution with a one-hot kernel and on
    XLA's CPU backend costs more than the layer's own convolution).
    """
    v.check_shape("x", x, ndim=4)
    ks, st, pad = _conv_args(kernel_size, strides, padding)
    x = jnp.asarray(x)
    b, h, w, c = x.shape
    if isinstance(pad, str):
        pads = [_pad_and_size(n, k, s, pad) for n, k, s in zip((h, w), ks, st)]
    else:
        pad = tuple(tuple(p) for p in pad)
        if len(pad) != 2 or any(len(p) != 2 for p in pad):
            raise ValueError(f"padding must be 'SAME', 'VALID' or ((lo, hi), (lo, hi)), got {padding!r}.")
        pads = [_pad_and_size(n, k, s, p) for n, k, s, p in zip((h, w), ks, st, pad)]
    (ph, oh), (pw, ow) = pads
    if oh < 1 or ow < 1:
        raise ValueError(f"kernel_size {ks} does not fit images of size {(h, w)} with padding {padding!r}.")
    xp = jnp.pad(x, ((0, 0), ph, pw, (0, 0)))
    cols = [xp[:, i: i + (oh - 1) * st[0] + 1: st[0], j: j + (ow - 1) * st[1] + 1: st[1], :]
            for i in range(ks[0]) for j in range(ks[1])]
    return jnp.stack(cols, axis=-1).reshape(b, oh * ow, c * ks[0] * ks[1])


@full_precision
def conv2d_norm_sq(x: jax.Array, g: jax.Array, kernel_size: Sequence[int], *,
                   strides: Sequence[int] | None = None, padding: Any = "SAME", bias: bool = True,
                   method: str = "auto") -> jax.Array:
    """2-D convolution (NHWC, kernel HWIO): per-example squared gradient norm of (kernel, bias): ``[B]``.

    ``x [B, H, W, C_in]`` the layer inputs, ``g [B, H', W', C_out]`` the output gradients.
    ``||A_i^T G_i||^2`` on the unfolded patches (:func:`gram_norm_sq`; Gram identity when
    ``(H' W')^2 < kh kw C_in C_out``, else the direct per-example gradient), plus
    ``||sum_{h,w} g_i[h, w]||^2`` for the bias.
    """
    v.check_shape("g", g, ndim=4)
    a = conv2d_patches(x, kernel_size, strides, padding)
    g = jnp.asarray(g, a.dtype)
    if g.shape[0] != a.shape[0] or g.shape[1] * g.shape[2] != a.shape[1]:
        raise ValueError(
            f"g {g.shape} does not match the conv output positions of x {jnp.shape(x)} "
            f"({a.shape[1]} positions); check kernel_size, strides and padding."
        )
    gf = g.reshape(g.shape[0], -1, g.shape[-1])
    w = gram_norm_sq(a, gf, method)
    return w + (bias_norm_sq(gf) if bias else 0.0)


def _weights(c: Any, n: int, dtype) -> jax.Array:
    c = jnp.asarray(c, dtype)
    if c.shape != (n,):
        raise ValueError(f"c must be one weight per example, shape ({n},), got {c.shape}.")
    return c


@full_precision
def dense_weighted_grad(a: jax.Array, g: jax.Array, c: jax.Array) -> dict[str, jax.Array]:
    """``sum_i c_i grad_i`` of a dense layer: ``{"w": [d_in, d_out], "b": [d_out]}``.

    ``a``/``g`` as in :func:`dense_norm_sq`; ``c [B]`` the clip factors times the mask.
    """
    _check_batch_pair("a", a, "g", g, (2, 3))
    a = jnp.asarray(a)
    g = jnp.asarray(g, a.dtype)
    c = _weights(c, a.shape[0], a.dtype)
    cg = g * c.reshape((-1,) + (1,) * (g.ndim - 1))
    a2 = a.reshape(-1, a.shape[-1])
    cg2 = cg.reshape(-1, g.shape[-1])
    return {"w": (cg2.T @ a2).T, "b": jnp.sum(cg2, axis=0)}


@full_precision
def embedding_weighted_grad(ids: jax.Array, g: jax.Array, c: jax.Array, vocab_size: int) -> jax.Array:
    """``sum_i c_i grad_i E`` of an embedding table ``[vocab_size, D]`` (one ``segment_sum``)."""
    _check_ids(ids, g)
    vocab_size = v.check_int("vocab_size", vocab_size, minimum=1)
    g = jnp.asarray(g)
    c = _weights(c, g.shape[0], g.dtype)
    cg = g * c.reshape((-1,) + (1,) * (g.ndim - 1))
    return jax.ops.segment_sum(cg.reshape(-1, g.shape[-1]), jnp.asarray(ids).reshape(-1),
                               num_segments=vocab_size)


@full_precision
def conv2d_weighted_grad(x: jax.Array, g: jax.Array, c: jax.Array, kernel_size: Sequence[int], *,
                         strides: Sequence[int] | None = None,
                         padding: Any = "SAME") -> dict[str, jax.Array]:
    """``sum_i c_i grad_i`` of a conv layer: ``{"kernel": [kh, kw, C_in, C_out], "bias": [C_out]}``."""
    v.check_shape("g", g, ndim=4)
    a = conv2d_patches(x, kernel_size, strides, padding)
    g = jnp.asarray(g, a.dtype)
    c = _weights(c, a.shape[0], a.dtype)
    cg = (g * c[:, None, None, None]).reshape(-1, g.shape[-1])
    w = (cg.T @ a.reshape(-1, a.shape[-1])).T  # [C_in kh kw, C_out], channel-major rows
    kh, kw = (int(k) for k in kernel_size)
    cin = jnp.shape(x)[-1]
    kernel = w.reshape(cin, kh, kw, -1).transpose(1, 2, 0, 3)
    return {"kernel": kernel, "bias": jnp.sum(cg, axis=0)}


def total_norms(*norm_sqs: jax.Array) -> jax.Array:
    """Per-example norm over several layers: ``sqrt(sum_l ||grad_{l,i}||^2)``: ``[B]``."""
    if not norm_sqs:
        raise ValueError("total_norms needs at least one [B] array of squared layer norms.")
    return jnp.sqrt(sum(jnp.asarray(s) for s in norm_sqs))


def cnn_forward(model: Any, params: Any, x: jax.Array, probes: Sequence[jax.Array] | None = None):
    """The forward pass of :func:`dpfair_jax.models.cnn` (``model.forward``), with optional zero
    "probes" added to every pre-activation (conv outputs, then the head's logits).

    Returns ``(outputs, conv_inputs, head_input)``; outputs as ``model.apply`` (one logit squeezed).
    Reverse-mode differentiable (on CPU the convolutions carry a custom VJP that keeps their
    gradient fast inside ``lax.scan``, ``models.conv._conv2d_same``); use ``model.apply`` for
    forward-mode autodiff (``jax.jvp``, ``jax.hessian``).
    """
    if getattr(model, "forward", None) is None or getattr(model, "name", None) != "cnn":
        raise ValueError("model must be dpfair_jax.models.cnn(...).")
    out, inputs = model.forward(params, x, probes)
    return out, list(inputs[:-1]), inputs[-1]


class CnnGhost(NamedTuple):
    """One ghost backward pass of :func:`dpfair_jax.models.cnn` (:func:`cnn_ghost_backward`).

    ``norms [B]`` per-example gradient norms over all parameters, ``losses [B]``, ``outputs``
    (as ``model.apply``), and per layer what :func:`cnn_weighted_grad` needs: the conv inputs
    ``conv_inputs [B, H, W, C_in]``, the output gradients ``conv_grads [B, T, C_out]`` (``T = H W``
    positions), the per-example kernel gradients ``conv_per_example [B, 9 C_in, C_out]``
    (channel-major rows, as :func:`conv2d_patches`) where the direct method formed them (``None``
    where the Gram identity was used), the head's input ``head_input [B, F]`` and logit gradients
    ``head_grad [B, num_classes]``.
    """

    norms: jax.Array
    losses: jax.Array
    outputs: jax.Array
    conv_inputs: tuple
    conv_grads: tuple
    conv_per_example: tuple
    head_input: jax.Array
    head_grad: jax.Array


@full_precision
def cnn_ghost_backward(model: Any, params: Any, x: jax.Array, y: Any, output_loss: Any, *,
                       method: str = "auto") -> CnnGhost:
    """Per-example gradient norms of ``sum_i output_loss(model.apply(params, x), y)_i`` for the
    kit's CNN, without per-example gradients of the dense head: :class:`CnnGhost`.

    One backward pass with respect to zero probes on every pre-activation gives each layer's
    per-example output gradients (book-keeping, Bu et al. 2023). Conv layers use
    :func:`gram_norm_sq` on the unfolded patches (``method``; the per-example kernel gradients the
    direct method forms are kept for the weighted sum), the head ``||a_i||^2 ||g_i||^2``.
    ``output_loss(outputs, y) -> [B]`` (``y`` may be any pytree, e.g. a batch dict). Computes in
    float32; mixed-precision models (``compute_dtype`` set) are refused, since this forward pass
    would differentiate a different function than their ``apply``.
    """
    v.check_choice("method", method, METHODS)
    if getattr(model, "name", None) != "cnn":
        raise ValueError("model must be dpfair_jax.models.cnn(...); use clipping.clipped_grad_sum otherwise.")
    hp = model.hparams
    if hp.get("compute_dtype") is not None or model.layers != "cnn":
        raise ValueError(
            f"CNN ghost norms compute in float32 and do not reproduce a model built with "
            f"compute_dtype={hp['compute_dtype']!r}; use vmap(grad) per-example gradients "
            "(dpsgd.fit with per_example='auto' or 'vmap')."
        )
    x = jnp.asarray(x).reshape((-1, *hp["image_shape"]))
    bsz = x.shape[0]
    _, conv_in, _ = jax.eval_shape(lambda xx: cnn_forward(model, params, xx), x)
    probes = [jnp.zeros(ci.shape[:-1] + (c,), x.dtype) for ci, c in zip(conv_in, hp["channels"])]
    probes.append(jnp.zeros((bsz, params["head"]["kernel"].shape[1]), x.dtype))

    def total(pr):
        out, ins, fl = cnn_forward(model, params, x, pr)
        losses = output_loss(out, y)
        return jnp.sum(losses), (losses, out, ins, fl)

    (_, (losses, out, ins, fl)), grads = jax.value_and_grad(total, has_aux=True)(probes)
    sq = dense_norm_sq(fl, grads[-1])
    gflat, pers = [], []
    for a_in, g in zip(ins, grads[:-1]):
        gf = g.reshape(g.shape[0], -1, g.shape[-1]).astype(a_in.dtype)
        t, p, o = gf.shape[1], 9 * a_in.shape[-1], gf.shape[2]
        if method == "gram" or (method == "auto" and t * t < p * o):
            per = None
            sq = sq + gram_norm_sq(conv2d_patches(a_in, (3, 3)), gf, "gram")
        else:
            per = _conv3x3_per_example_grads(a_in, gf)
            sq = sq + jnp.sum(jnp.square(per), axis=(1, 2))
        sq = sq + bias_norm_sq(gf)
        gflat.append(gf)
        pers.append(per)
    return CnnGhost(jnp.sqrt(sq), losses, out, tuple(ins), tuple(gflat), tuple(pers), fl, grads[-1])


def _conv3x3_per_example_grads(x: jax.Array, gf: jax.Array) -> jax.Array:
    """Per-example kernel gradients of a 3x3 SAME stride-1 conv: ``[B, 9 C_in, C_out]``
    (channel-major rows, as :func:`conv2d_patches`), from inputs ``x [B, H, W, C_in]`` and output
    gradients ``gf [B, H W, C_out]``.

    With few input channels, one contraction with the unfolded patches; otherwise nine
    contractions with shifted views of the padded input, which skips the ``[B, H W, 9 C_in]``
    patch array (about twice as fast on XLA's CPU backend from 8 input channels; same values).
    """
    b, h, w, c = x.shape
    if c < 8:
        return jnp.einsum("bti,bto->bio", conv2d_patches(x, (3, 3)), gf)
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    per = [jnp.einsum("btc,bto->bco", xp[:, i: i + h, j: j + w, :].reshape(b, h * w, c), gf)
           for i in range(3) for j in range(3)]
    return jnp.stack(per, axis=2).reshape(b, 9 * c, gf.shape[-1])


@full_precision
def cnn_weighted_grad(model: Any, ghost: CnnGhost, c: jax.Array) -> Any:
    """``sum_i c_i grad_i`` from :func:`cnn_ghost_backward`, in the structure of the CNN's params
    (``{"convs": {l: {"kernel", "bias"}}, "head": {"kernel", "bias"}}``). ``c [B]``: clip factors
    times the mask (or any per-example weights)."""
    c = _weights(c, ghost.norms.shape[0], ghost.norms.dtype)
    convs = {}
    for l, (x_in, gf, per) in enumerate(zip(ghost.conv_inputs, ghost.conv_grads, ghost.conv_per_example)):
        cin = x_in.shape[-1]
        if per is not None:
            w = jnp.tensordot(c, per, axes=1)  # [9 C_in, C_out]
        else:
            a = conv2d_patches(x_in, (3, 3))
            cg = (gf * c[:, None, None]).reshape(-1, gf.shape[-1])
            w = (cg.T @ a.reshape(-1, a.shape[-1])).T
        kernel = w.reshape(cin, 3, 3, -1).transpose(1, 2, 0, 3)
        convs[l] = {"kernel": kernel, "bias": c @ jnp.sum(gf, axis=1)}
    head = dense_weighted_grad(ghost.head_input, ghost.head_grad, c)
    return {"convs": convs, "head": {"kernel": head["w"], "bias": head["b"]}}


def cnn_matches_apply(model: Any, params: Any) -> bool:
    """Whether the CNN ghost norms (:func:`cnn_ghost_backward`) apply to ``model`` with parameters
    shaped like ``params``: a float32 :func:`dpfair_jax.models.cnn` (``model.layers == "cnn"``;
    its ``forward`` is the function ``apply`` evaluates) whose parameters fit its layout.
    False for other models and for mixed-precision CNNs (``compute_dtype`` set)."""
    if getattr(model, "name", None) != "cnn" or getattr(model, "layers", None) != "cnn":
        return False
    try:
        x = jax.ShapeDtypeStruct((1, *model.hparams["image_shape"]), jnp.float32)
        out = jax.eval_shape(lambda p, xx: model.forward(p, xx)[0], params, x)
    except (KeyError, TypeError, ValueError, IndexError):
        return False
    return tuple(out.shape) in ((1,), (1, model.num_outputs))
