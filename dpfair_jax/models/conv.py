"""The kit's small CNN (``Model.layers = "cnn"`` in float32): 3x3 SAME convolutions, 2x2 average
pooling, a dense head; one layer sequence (:func:`_cnn_pass`) for ``apply`` and ``forward``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dpfair_jax import _validation as v
from dpfair_jax.models.base import ACTIVATIONS, Model, Params, check_key, maybe_squeeze, nnx_init


class _CNNParams(nnx.Module):
    """The CNN's parameters: ``nnx.Conv`` 3x3 layers and an ``nnx.Linear`` head."""

    def __init__(self, image_shape: tuple[int, int, int], channels: Sequence[int], num_classes: int,
                 rngs: nnx.Rngs):
        h, w, c = image_shape
        convs = []
        for cout in channels:
            convs.append(nnx.Conv(c, cout, kernel_size=(3, 3), padding="SAME", rngs=rngs))
            c = cout
            h, w = h // 2, w // 2
        self.convs = nnx.List(convs)
        self.head = nnx.Linear(h * w * c, num_classes, rngs=rngs)


_NHWC = ("NHWC", "HWIO", "NHWC")


@jax.custom_vjp
def _conv2d_same_cpu(x: jax.Array, kernel: jax.Array) -> jax.Array:
    return jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=_NHWC)


def _conv2d_same_fwd(x, kernel):
    return _conv2d_same_cpu(x, kernel), (x, kernel)


def _conv2d_same_bwd(res, g):
    # Both gradients as forward-layout (NHWC x HWIO -> NHWC) convolutions: the input gradient
    # correlates g with the kernel rotated by 180 degrees (in/out swapped); the kernel gradient
    # treats input channels as the batch, the batch as features and the image as the window.
    x, kernel = res
    kh, kw = kernel.shape[:2]
    lo_h, lo_w = (kh - 1) // 2, (kw - 1) // 2
    hi_h, hi_w = kh - 1 - lo_h, kw - 1 - lo_w
    k_rot = jnp.flip(kernel, (0, 1)).swapaxes(2, 3)
    dx = jax.lax.conv_general_dilated(g, k_rot, (1, 1), ((hi_h, lo_h), (hi_w, lo_w)),
                                      dimension_numbers=_NHWC)
    dk = jax.lax.conv_general_dilated(jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(g, (1, 2, 0, 3)),
                                      (1, 1), ((lo_h, hi_h), (lo_w, hi_w)), dimension_numbers=_NHWC)
    return dx.astype(x.dtype), jnp.transpose(dk, (1, 2, 0, 3)).astype(kernel.dtype)


_conv2d_same_cpu.defvjp(_conv2d_same_fwd, _conv2d_same_bwd)


def _conv2d_same(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """Stride-1 SAME convolution, NHWC inputs, HWIO kernel (the values of ``nnx.Conv``).

    On XLA's CPU backend its reverse-mode gradient is written as two forward-layout convolutions
    (same values; ``jax.custom_vjp``, so no forward-mode autodiff through it). Inside a
    ``lax.scan`` body, as in ``dpsgd.fit`` and ``fermi.fit``, XLA:CPU leaves the backward
    convolutions of plain autodiff in layouts its fast convolution path does not take: a CNN
    gradient step ran ~20x slower than the same step outside the loop (measured with jax 0.10.2).
    Other backends use plain autodiff.
    """
    if jax.default_backend() == "cpu":
        return _conv2d_same_cpu(x, kernel)
    return jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=_NHWC)


def _conv2d_same_plain(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same convolution with JAX's own derivatives (forward and reverse mode)."""
    return jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=_NHWC)


def _avg_pool_flax(a: jax.Array) -> jax.Array:
    """2x2 average pooling as ``nnx.avg_pool`` computes it (``lax.reduce_window`` sum / 4)."""
    return nnx.avg_pool(a, window_shape=(2, 2), strides=(2, 2))


def _avg_pool_reshape(a: jax.Array) -> jax.Array:
    """2x2 average pooling as a reshape and a mean (same values up to summation order; cheaper
    to differentiate inside ``lax.scan`` on XLA:CPU)."""
    b, h, w, c = a.shape
    a = a[:, : h // 2 * 2, : w // 2 * 2]
    return a.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def _cnn_pass(hp: tuple, conv: Callable, pool: Callable, params: Params, x: jax.Array,
              probes: Sequence[jax.Array] | None = None) -> tuple[jax.Array, tuple]:
    """The CNN's forward pass on a batch: ``(outputs, (conv inputs..., head input))``.

    Per conv layer ``a -> pool(act(conv(a, K) + b (+ probe)))``, then the dense head
    (``+ probe``); with a ``compute_dtype`` the inputs, kernels and biases are cast to it and the
    logits back to float32 (what ``nnx.Conv``/``nnx.Linear`` with ``dtype=`` compute). ``conv``
    and ``pool`` are the stride-1 SAME convolution and the 2x2 average pool, as one of two
    implementations with the same values: ``apply`` takes JAX's own (``lax`` convolution,
    ``nnx.avg_pool``), ``forward`` the ones whose reverse-mode gradient stays fast inside
    ``lax.scan`` on XLA:CPU (:func:`_conv2d_same`, :func:`_avg_pool_reshape`). Float rounding
    aside they compute one function; each keeps the arithmetic its path always had.
    """
    image_shape, n_convs, num_outputs, activation, compute_dtype = hp
    act = ACTIVATIONS[activation]
    cast = (lambda a: a) if compute_dtype is None else (lambda a: a.astype(compute_dtype))
    a = jnp.asarray(x).reshape((-1, *image_shape))
    if not jnp.issubdtype(a.dtype, jnp.floating):
        a = a.astype(jnp.result_type(params["head"]["kernel"]))
    a = cast(a)
    inputs = []
    for l in range(n_convs):
        layer = params["convs"][l]
        inputs.append(a)
        z = conv(a, cast(layer["kernel"])) + cast(layer["bias"])
        if probes is not None:
            z = z + probes[l]
        a = pool(act(z))
    flat = a.reshape(a.shape[0], -1)
    inputs.append(flat)
    out = flat @ cast(params["head"]["kernel"]) + cast(params["head"]["bias"])
    if probes is not None:
        out = out + probes[-1]
    # Mixed precision: logits go back to float32, so losses and everything computed from them
    # (gradients w.r.t. the float32 parameters, clipping, noise) are float32.
    if compute_dtype is not None:
        out = out.astype(jnp.float32)
    return maybe_squeeze(out, num_outputs), tuple(inputs)


_COMPUTE_DTYPES = ("bfloat16", "float16", "float32")


def _check_compute_dtype(compute_dtype: Any) -> str | None:
    """``None`` or the name of a floating compute dtype (``"bfloat16"``, ``"float16"``); float32 is
    the default computation, returned as ``None``."""
    if compute_dtype is None:
        return None
    try:
        name = jnp.dtype(compute_dtype).name
    except TypeError:
        name = None
    if name not in _COMPUTE_DTYPES:
        raise ValueError(
            f"compute_dtype must be None, jnp.bfloat16, jnp.float16 or jnp.float32, got {compute_dtype!r}."
        )
    return None if name == "float32" else name


def _check_cnn_args(num_classes: int, channels: Sequence[int], image_shape: Sequence[int], activation: str,
                    compute_dtype: Any) -> tuple[tuple[int, ...], tuple[int, ...], str | None]:
    """``cnn``'s arguments checked: ``(channels, image_shape, compute_dtype name or None)``."""
    v.check_int("num_classes", num_classes, minimum=1)
    channels = tuple(channels)
    for i, ch in enumerate(channels):
        v.check_int(f"channels[{i}]", ch, minimum=1)
    image_shape = tuple(image_shape)
    if len(image_shape) != 3:
        raise ValueError(f"image_shape must be (H, W, C), got {image_shape!r}.")
    for i, sz in enumerate(image_shape):
        v.check_int(f"image_shape[{i}]", sz, minimum=1)
    if min(image_shape[:2]) < 2 ** len(channels):
        raise ValueError(
            f"image_shape {image_shape} is too small for {len(channels)} 2x2 poolings; "
            "use fewer channels entries or larger images."
        )
    v.check_choice("activation", activation, ACTIVATIONS)
    return channels, image_shape, _check_compute_dtype(compute_dtype)


def _prepare_images(x: jax.Array, image_shape: tuple[int, ...], flat: int) -> tuple[jax.Array, bool]:
    """Inputs as a batch of images ``[n, H, W, C]`` and whether ``x`` was one example."""
    if x.shape[-3:] == image_shape and x.ndim in (3, 4):
        return (x[None], True) if x.ndim == 3 else (x, False)
    if x.shape[-1:] == (flat,) and x.ndim in (1, 2):
        xb = x.reshape((-1, *image_shape))
        return xb, x.ndim == 1
    raise ValueError(
        f"cnn expects inputs of shape [n, {flat}], [n, *{image_shape}] or one example; "
        f"got {x.shape}."
    )


def cnn(
    num_classes: int,
    channels: Sequence[int] = (16, 32),
    image_shape: Sequence[int] = (28, 28, 1),
    *,
    activation: str = "relu",
    compute_dtype: Any = None,
) -> Model:
    """Small CNN: per entry of ``channels`` a 3x3 SAME conv, ``activation``, 2x2 average pool;
    then a dense layer to ``num_classes`` logits (one logit, squeezed, when ``num_classes == 1``).

    Inputs are images ``[n, H, W, C]`` or rows flattened to ``[n, H*W*C]`` (the ``Dataset`` layout),
    or one example ``[H, W, C]`` / ``[H*W*C]``. No normalization layers (per-example clipping).

    ``compute_dtype`` (mixed precision): ``None`` (default) computes in float32; ``jnp.bfloat16``
    (or ``jnp.float16``) casts the inputs, kernels and biases to that dtype inside ``apply``, so
    the convolutions, the dense head and the activations between them run in it, and casts the
    logits back to float32. Parameters, their gradients and the outputs stay float32, so per-example
    gradient norms, clipping, noise and privacy accounting are float32 as without it; only the
    forward/backward arithmetic is rounded to ``compute_dtype`` (relative error ~1e-2 for bfloat16).
    It is meant for GPUs (tensor cores); on CPU bfloat16 convolutions are usually *slower* than
    float32. Such a model declares no ghost-norm layers (``layers=None``): per-example norms
    computed from bfloat16 activations would be rounded, so ``dpsgd.fit`` takes ``vmap(grad)``.

    ``forward`` (the ghost-norm pass) and ``apply`` run the same layer sequence
    (:func:`_cnn_pass`); ``forward``'s convolutions carry a custom reverse-mode gradient on CPU
    (fast inside ``lax.scan``, see ``_conv2d_same``), so forward-mode autodiff (``jax.jvp``,
    ``jax.hessian``) goes through ``apply``.
    """
    channels, image_shape, compute_dtype = _check_cnn_args(num_classes, channels, image_shape, activation,
                                                           compute_dtype)
    flat = int(np.prod(image_shape))
    hp = (image_shape, len(channels), num_classes, activation,
          None if compute_dtype is None else jnp.dtype(compute_dtype))

    def prepare(x: jax.Array) -> tuple[jax.Array, bool]:
        return _prepare_images(x, image_shape, flat)

    init_from_key = nnx_init(lambda rngs: _CNNParams(image_shape, channels, num_classes, rngs))

    def forward(params: Params, x: jax.Array, probes: Sequence[jax.Array] | None = None):
        return _cnn_pass(hp, _conv2d_same, _avg_pool_reshape, params, x, probes)

    @jax.jit
    def apply(params: Params, x: jax.Array) -> jax.Array:
        xb, single = prepare(jnp.asarray(x))
        out = _cnn_pass(hp, _conv2d_same_plain, _avg_pool_flax, params, xb)[0]
        return out[0] if single else out

    def init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
        check_key(key)
        if input_dim_or_shape is not None:
            given = input_dim_or_shape
            ok = given == flat if isinstance(given, (int, np.integer)) else (
                tuple(given) in (image_shape, (flat,))
            )
            if not ok:
                raise ValueError(
                    f"input_dim_or_shape {given!r} does not match image_shape {image_shape}; "
                    "build the model with cnn(..., image_shape=...)."
                )
        return init_from_key(key)

    return Model(init, apply, "cnn", num_classes, image_shape,
                 (("channels", channels), ("image_shape", image_shape), ("activation", activation),
                  ("compute_dtype", compute_dtype)),
                 "cnn" if compute_dtype is None else None, forward)
