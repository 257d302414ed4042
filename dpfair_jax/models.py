"""Models with a pure ``apply(params, x)``: linear, logistic, multinomial logistic, MLP, small CNN.

Every factory returns a :class:`Model`, a small NamedTuple of pure functions (optax style):

- ``init(key, input_dim_or_shape=None) -> params``: params are a *plain* pytree (nested ``dict`` of
  ``jax.Array``), so they work with optax, ``jax.grad`` and ``jax.vmap`` over init keys
  (``jax.vmap(lambda k: model.init(k, d))(keys)``).
- ``apply(params, x) -> outputs``: works on a batch ``x [n, ...]`` and on a *single example*
  ``x [...]`` (no batch axis), so per-example gradients are
  ``jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y)`` with ``loss(params, x_i, y_i)``.
  Models with one output (``num_outputs == 1``: regression, binary logistic) return outputs
  *without* a trailing class axis (``[n]`` for a batch, a scalar for one example); models with
  several outputs return ``[n, num_outputs]`` (or ``[num_outputs]``).

Parameter layouts (the contract other modules read):

- ``linear``/``logistic``/``multinomial_logistic``: ``{"w": f32[d, out], "b": f32[out]}``
  (``"b"`` absent when ``fit_intercept=False``); ``apply = x @ w + b``. Ghost-norm code for
  generalized linear models reads this layout.
- ``mlp``: ``{"layers": {i: {"kernel": f32[in, out], "bias": f32[out]}}}`` for i = 0..len(hidden)
  (flax nnx ``Linear`` layers; the last one is the output layer).
- ``cnn``: ``{"convs": {i: {"kernel": f32[3, 3, cin, cout], "bias": f32[cout]}},
  "head": {"kernel": f32[flat, num_classes], "bias": f32[num_classes]}}``; float32 parameters
  and outputs also with ``compute_dtype=jnp.bfloat16`` (mixed precision, meant for GPUs).

Every model's forward pass is written once, as a pure function of the parameter dict
(:attr:`Model.forward`): ``apply`` is its output, and the ghost-norm code of
``dpfair_jax.privacy.clipping`` reads the inputs of every layer from the same function
(:attr:`Model.layers` says which per-example gradient identity applies: ``"glm"``, ``"mlp"``,
``"cnn"``, or ``None`` for ``vmap(grad)``). The MLP's and CNN's parameters are created by flax nnx
layers (LeCun normal kernels, zero biases) and handed out as a plain dict (``nnx.to_pure_dict``).
:func:`from_nnx` and :func:`from_apply` wrap a user's own nnx module or pure ``apply`` as a
``Model`` (per-example gradients by ``vmap(grad)``). No batch normalization anywhere (it mixes
examples, which breaks per-example clipping and the DP-SGD sensitivity analysis).

Losses are per-example (no reduction): :func:`binary_logistic_loss`, :func:`softmax_cross_entropy`,
:func:`squared_loss`; :func:`output_loss` picks one for a model, :class:`ExampleLoss` turns a model
and an output loss into ``loss(params, x_i, y_i)``. Helpers: :func:`predict_proba`, :func:`predict_label`, :func:`param_count`,
:func:`flops_per_example`.

Privacy: models carry no privacy guarantee of their own. Training privately means clipping each
example's gradient of these pure functions (``dpfair_jax.privacy.clipping``), which is why no layer
mixes examples within a batch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dpfair_jax import _validation as v

Params = Any  # nested dict of jax.Array

__all__ = [
    "Model",
    "LAYER_KINDS",
    "from_nnx",
    "from_apply",
    "dense_stack_forward",
    "output_loss",
    "ExampleLoss",
    "example_loss",
    "linear",
    "logistic",
    "multinomial_logistic",
    "mlp",
    "cnn",
    "binary_logistic_loss",
    "softmax_cross_entropy",
    "squared_loss",
    "predict_proba",
    "predict_label",
    "param_count",
    "flops_per_example",
    "ACTIVATIONS",
]


class Model(NamedTuple):
    """A model as pure functions.

    Attributes:
      init: ``init(key, input_dim_or_shape=None) -> params`` (plain nested dict). When the factory
        was given ``input_dim`` (or, for the CNN, ``image_shape``), the second argument may be
        omitted, so ``jax.vmap(model.init)(keys)`` works.
      apply: ``apply(params, x) -> outputs`` on a batch ``[n, ...]`` or one example ``[...]``.
      name: ``"linear"``, ``"logistic"``, ``"multinomial_logistic"``, ``"mlp"`` or ``"cnn"``.
      num_outputs: number of outputs (1 = no trailing class axis on the outputs).
      input_shape: shape of one example (``(d,)`` or ``(H, W, C)``), or ``None`` if given at init.
      config: the factory's hyperparameters as hashable ``(name, value)`` pairs (e.g.
        ``("activation", "tanh")``); :attr:`hparams` gives them as a dict.
      layers: which per-example gradient identity the layer structure admits (``LAYER_KINDS``):
        ``"glm"`` (one dense layer ``x @ w + b``), ``"mlp"`` (a stack of dense layers with an
        elementwise activation), ``"cnn"`` (the kit's float32 CNN), or ``None`` (no declaration:
        per-example gradients by ``vmap(grad)``). ``dpfair_jax.privacy.clipping`` dispatches on it.
      forward: ``forward(params, x, probes=None) -> (outputs, layer_inputs)`` on a batch ``x [B, ...]``
        (``None`` when ``layers`` is ``None``): the function ``apply`` evaluates (same outputs), with
        ``probes`` (one zero array per layer, the shape of its pre-activation ``[B, ..., out]``)
        added to every pre-activation, so that one gradient with respect to the probes gives each
        layer's per-example output gradients; ``layer_inputs`` are the inputs of every layer, in
        order (the CNN's last one is the flattened input of its dense head).
    """

    init: Callable[..., Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    name: str
    num_outputs: int
    input_shape: tuple[int, ...] | None = None
    config: tuple[tuple[str, Any], ...] = ()
    layers: str | None = None
    forward: Callable[..., tuple[jax.Array, tuple]] | None = None

    @property
    def hparams(self) -> dict[str, Any]:
        """The factory's hyperparameters (``fit_intercept``, ``hidden``, ``activation``, ...)."""
        return dict(self.config)


LAYER_KINDS = ("glm", "mlp", "cnn")

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "elu": jax.nn.elu,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "identity": lambda z: z,
}


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def _resolve_input_dim(name: str, given: Any, default: int | None) -> int:
    dim = default if given is None else given
    if dim is None:
        raise ValueError(
            f"{name}.init needs the input dimension: call init(key, d) or build the model with "
            f"{name}(..., input_dim=d)."
        )
    if isinstance(dim, (tuple, list)):
        if len(dim) != 1:
            raise ValueError(
                f"input_dim_or_shape for {name} must be an int d or a shape (d,), got {dim!r}."
            )
        dim = dim[0]
    return v.check_int("input_dim_or_shape", dim, minimum=1)


def _check_key(key: Any) -> None:
    v.check_threefry_key(key, "key")


def _maybe_squeeze(out: jax.Array, num_outputs: int) -> jax.Array:
    return out[..., 0] if num_outputs == 1 else out


_INITS = ("zeros", "lecun_normal")


# ------------------------------------------------------------------------------------------------
# generalized linear models (pure JAX; layout {"w": [d, out], "b": [out]})
# ------------------------------------------------------------------------------------------------


def _glm(
    name: str, out: int, fit_intercept: bool, input_dim: int | None, init_scheme: str
) -> Model:
    v.check_int("out", out, minimum=1)
    v.check_choice("init", init_scheme, _INITS)
    if input_dim is not None:
        v.check_int("input_dim", input_dim, minimum=1)
    if not isinstance(fit_intercept, bool):
        raise ValueError(f"fit_intercept must be True or False, got {fit_intercept!r}.")

    def init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
        _check_key(key)
        d = _resolve_input_dim(name, input_dim_or_shape, input_dim)
        if init_scheme == "zeros":
            w = jnp.zeros((d, out), jnp.float32)
        else:
            w = nnx.initializers.lecun_normal()(key, (d, out), jnp.float32)
        params = {"w": w}
        if fit_intercept:
            params["b"] = jnp.zeros((out,), jnp.float32)
        return params

    def forward(params: Params, x: jax.Array, probes: Sequence[jax.Array] | None = None):
        x = jnp.asarray(x)
        z = x @ params["w"]
        if "b" in params:
            z = z + params["b"]
        if probes is not None:
            z = z + probes[0]
        return _maybe_squeeze(z, out), (x,)

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return forward(params, x)[0]

    return Model(init, apply, name, out, None if input_dim is None else (int(input_dim),),
                 (("fit_intercept", fit_intercept), ("init", init_scheme)), "glm", forward)


def linear(
    out: int = 1, fit_intercept: bool = True, *, input_dim: int | None = None, init: str = "zeros"
) -> Model:
    """Linear regression ``f(x) = x @ w + b`` (paper 001 Cor. 1, paper 000's OLS).

    Params ``{"w": [d, out], "b": [out]}``; outputs ``[n]`` when ``out == 1`` else ``[n, out]``.
    ``init="zeros"`` (default, deterministic: the problem is convex) or ``"lecun_normal"``.
    """
    return _glm("linear", out, fit_intercept, input_dim, init)


def logistic(
    fit_intercept: bool = True, *, input_dim: int | None = None, init: str = "zeros"
) -> Model:
    """Binary logistic regression: one logit ``x @ w + b`` (use :func:`binary_logistic_loss`).

    Params ``{"w": [d, 1], "b": [1]}``; outputs are logits ``[n]`` (scalar for one example).
    """
    return _glm("logistic", 1, fit_intercept, input_dim, init)


def multinomial_logistic(
    num_classes: int, fit_intercept: bool = True, *, input_dim: int | None = None,
    init: str = "zeros",
) -> Model:
    """Multinomial (softmax) logistic regression with ``num_classes >= 2`` logits.

    Params ``{"w": [d, num_classes], "b": [num_classes]}``; outputs ``[n, num_classes]``.
    """
    v.check_int("num_classes", num_classes, minimum=2)
    return _glm("multinomial_logistic", num_classes, fit_intercept, input_dim, init)


# ------------------------------------------------------------------------------------------------
# parameters from nnx layers; the one forward pass of each model
# ------------------------------------------------------------------------------------------------


def _nnx_init(build: Callable[[nnx.Rngs], nnx.Module]) -> Callable[[jax.Array], Params]:
    """Pure ``init(key) -> params`` (plain dict) from an nnx module builder.

    jit: eager nnx construction dispatches op by op (seconds for the CNN)."""

    def init_from_key(key: jax.Array) -> Params:
        _, state = nnx.split(build(nnx.Rngs(params=key)))
        return nnx.to_pure_dict(state)

    return jax.jit(init_from_key)


def _batched(forward: Callable, x: jax.Array, example_ndim: int) -> jax.Array:
    """``forward``'s outputs for a batch ``[n, ...]`` or for one example (``example_ndim`` dims)."""
    x = jnp.asarray(x)
    single = x.ndim == example_ndim
    out = forward(x[None] if single else x)
    return out[0] if single else out


class _MLPParams(nnx.Module):
    """The MLP's parameters: one ``nnx.Linear`` per layer (the forward is :func:`dense_stack_forward`)."""

    def __init__(self, sizes: Sequence[int], rngs: nnx.Rngs):
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])]
        )


def dense_stack_forward(
    layers: Sequence[tuple[jax.Array, jax.Array]],
    x: jax.Array,
    activation: Callable[[jax.Array], jax.Array] = jnp.tanh,
    probes: Sequence[jax.Array] | None = None,
) -> tuple[jax.Array, list[jax.Array]]:
    """Dense stack ``z_l = a_l W_l + b_l (+ probe_l)``, ``a_{l+1} = activation(z_l)``, linear output.

    ``layers``: ``(W_l [in, out], b_l [out])`` pairs; ``x [B, d]``. Returns the output ``z_L`` and
    the layer inputs ``[a_0 = x, a_1, ...]``. The forward pass of :func:`mlp` (its ``apply`` and
    the dense ghost norms of ``privacy.clipping`` both run this function).
    """
    a = x
    inputs = []
    for l, (w, b) in enumerate(layers):
        inputs.append(a)
        z = a @ w + b
        if probes is not None:
            z = z + probes[l]
        a = activation(z) if l < len(layers) - 1 else z
    return a, inputs


def _mlp_layer_pairs(params: Params) -> list[tuple[jax.Array, jax.Array]]:
    layers = params["layers"]
    return [(layers[k]["kernel"], layers[k]["bias"]) for k in sorted(layers)]


def mlp(
    hidden: Sequence[int] = (256,),
    out: int = 1,
    activation: str = "tanh",
    *,
    input_dim: int | None = None,
) -> Model:
    """Fully connected network ``d -> hidden[0] -> ... -> out`` with ``activation`` between layers.

    Params ``{"layers": {i: {"kernel": [in, out], "bias": [out]}}}`` (created by flax nnx
    ``Linear``: LeCun normal kernels, zero biases). Outputs ``[n]`` when ``out == 1`` else
    ``[n, out]``. Activations: see ``ACTIVATIONS``. ``layers="mlp"``: dense ghost norms.
    """
    hidden = tuple(hidden)
    for i, h in enumerate(hidden):
        v.check_int(f"hidden[{i}]", h, minimum=1)
    v.check_int("out", out, minimum=1)
    v.check_choice("activation", activation, ACTIVATIONS)
    if input_dim is not None:
        v.check_int("input_dim", input_dim, minimum=1)
    act = ACTIVATIONS[activation]
    inits: dict[int, Callable] = {}

    def init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
        _check_key(key)
        d = _resolve_input_dim("mlp", input_dim_or_shape, input_dim)
        if d not in inits:
            inits[d] = _nnx_init(lambda rngs, d=d: _MLPParams((d, *hidden, out), rngs))
        return inits[d](key)

    def forward(params: Params, x: jax.Array, probes: Sequence[jax.Array] | None = None):
        z, inputs = dense_stack_forward(_mlp_layer_pairs(params), jnp.asarray(x), act, probes)
        return _maybe_squeeze(z, out), tuple(inputs)

    @jax.jit
    def apply(params: Params, x: jax.Array) -> jax.Array:
        return _batched(lambda xb: forward(params, xb)[0], x, 1)

    return Model(init, apply, "mlp", out, None if input_dim is None else (int(input_dim),),
                 (("hidden", hidden), ("activation", activation)), "mlp", forward)


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
    ``lax.scan`` body, as in ``dpsgd.train`` and ``fermi.fit``, XLA:CPU leaves the backward
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
    return _maybe_squeeze(out, num_outputs), tuple(inputs)


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
    computed from bfloat16 activations would be rounded, so ``dpsgd.train`` takes ``vmap(grad)``.

    ``forward`` (the ghost-norm pass) and ``apply`` run the same layer sequence
    (:func:`_cnn_pass`); ``forward``'s convolutions carry a custom reverse-mode gradient on CPU
    (fast inside ``lax.scan``, see ``_conv2d_same``), so forward-mode autodiff (``jax.jvp``,
    ``jax.hessian``) goes through ``apply``.
    """
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
    compute_dtype = _check_compute_dtype(compute_dtype)
    flat = int(np.prod(image_shape))
    hp = (image_shape, len(channels), num_classes, activation,
          None if compute_dtype is None else jnp.dtype(compute_dtype))

    def prepare(x: jax.Array) -> tuple[jax.Array, bool]:
        if x.shape[-3:] == image_shape and x.ndim in (3, 4):
            return (x[None], True) if x.ndim == 3 else (x, False)
        if x.shape[-1:] == (flat,) and x.ndim in (1, 2):
            xb = x.reshape((-1, *image_shape))
            return xb, x.ndim == 1
        raise ValueError(
            f"cnn expects inputs of shape [n, {flat}], [n, *{image_shape}] or one example; "
            f"got {x.shape}."
        )

    init_from_key = _nnx_init(lambda rngs: _CNNParams(image_shape, channels, num_classes, rngs))

    def forward(params: Params, x: jax.Array, probes: Sequence[jax.Array] | None = None):
        return _cnn_pass(hp, _conv2d_same, _avg_pool_reshape, params, x, probes)

    @jax.jit
    def apply(params: Params, x: jax.Array) -> jax.Array:
        xb, single = prepare(jnp.asarray(x))
        out = _cnn_pass(hp, _conv2d_same_plain, _avg_pool_flax, params, xb)[0]
        return out[0] if single else out

    def init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
        _check_key(key)
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


# ------------------------------------------------------------------------------------------------
# losses and predictions
# ------------------------------------------------------------------------------------------------


def _squeeze_like(pred: jax.Array, y: jax.Array) -> jax.Array:
    """Drop a trailing size-1 output axis so that [n, 1] vs [n] never broadcasts to [n, n]."""
    if pred.ndim == y.ndim + 1 and pred.shape[-1] == 1:
        return pred[..., 0]
    return pred


def binary_logistic_loss(logits: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example logistic loss ``log(1 + exp(z)) - y z`` for labels ``y`` in {0, 1} (no mean).

    Numerically stable (``logaddexp``). A trailing size-1 axis on ``logits`` is dropped.
    """
    logits = jnp.asarray(logits)
    y = jnp.asarray(y)
    z = _squeeze_like(logits, y)
    return jnp.logaddexp(0.0, z) - y.astype(z.dtype) * z


def softmax_cross_entropy(logits: jax.Array, y_int: jax.Array) -> jax.Array:
    """Per-example cross-entropy ``logsumexp(z) - z[y]`` for integer labels (no mean).

    ``logits [..., C]``, ``y_int [...]``. Labels must lie in ``[0, C)`` (not checked under jit;
    out-of-range labels give a wrong value, not an error).
    """
    logits = jnp.asarray(logits)
    y_int = jnp.asarray(y_int).astype(jnp.int32)
    picked = jnp.take_along_axis(logits, y_int[..., None], axis=-1)[..., 0]
    return jax.nn.logsumexp(logits, axis=-1) - picked


def squared_loss(pred: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example squared error ``(pred - y)^2``, elementwise (no 1/2, no mean).

    This is paper 001's L2 loss (Cor. 1). A trailing size-1 axis on ``pred`` is dropped; for
    multi-output regression sum over the output axis yourself.
    """
    pred = jnp.asarray(pred)
    y = jnp.asarray(y)
    pred = _squeeze_like(pred, y)
    return (pred - y.astype(pred.dtype)) ** 2


def _proba_from_outputs(out: jax.Array, num_outputs: int) -> jax.Array:
    if num_outputs == 1:
        return jax.nn.sigmoid(out)
    return jax.nn.softmax(out, axis=-1)


def predict_proba(model: Model, params: Params, x: jax.Array) -> jax.Array:
    """Class probabilities: ``P(y = 1 | x)`` with shape ``[n]`` for one-logit models (sigmoid),
    ``[n, C]`` (softmax) for ``num_outputs >= 2``. Works on one example too."""
    return _proba_from_outputs(model.apply(params, x), model.num_outputs)


def predict_label(
    model: Model, params: Params, x: jax.Array, *, threshold: float = 0.5
) -> jax.Array:
    """Hard labels (int32): ``P(y=1|x) > threshold`` for one-logit models, argmax otherwise."""
    out = model.apply(params, x)
    if model.num_outputs == 1:
        return (jax.nn.sigmoid(out) > threshold).astype(jnp.int32)
    return jnp.argmax(out, axis=-1).astype(jnp.int32)


_OUTPUT_LOSSES = {
    "logistic": binary_logistic_loss,
    "cross_entropy": softmax_cross_entropy,
    "squared": squared_loss,
}


def output_loss(model: Model, num_classes: int | None = None, loss: Any = None) -> Callable:
    """Per-example loss ``(outputs, y) -> [B]`` for ``model``.

    ``loss`` may be a callable (returned as is), ``"logistic"``, ``"cross_entropy"`` or
    ``"squared"``; by default it follows the model (logistic -> logistic, multinomial ->
    cross-entropy, linear -> squared) and otherwise the data (``num_classes == 0``: squared; one
    output: logistic; else cross-entropy).
    """
    if callable(loss):
        return loss
    if loss is not None:
        return _OUTPUT_LOSSES[v.check_choice("loss", loss, _OUTPUT_LOSSES)]
    if model.name == "logistic":
        return binary_logistic_loss
    if model.name == "multinomial_logistic":
        return softmax_cross_entropy
    if model.name == "linear" or num_classes == 0:
        return squared_loss
    return binary_logistic_loss if model.num_outputs == 1 else softmax_cross_entropy


class ExampleLoss(NamedTuple):
    """``loss(params, x_i, y_i) = output_loss(apply(params, x_i), y_i)`` for ONE example (hashable,
    so it can key a compiled program). ``batch_axis``: call ``apply`` on ``x_i[None]`` (models whose
    ``apply`` needs a batch axis, :func:`from_nnx`/:func:`from_apply`)."""

    apply: Callable
    output_loss: Callable
    batch_axis: bool = False

    def __call__(self, params: Params, xi: jax.Array, yi: jax.Array) -> jax.Array:
        if self.batch_axis:
            return self.output_loss(self.apply(params, xi[None]), jnp.asarray(yi)[None])[0]
        return self.output_loss(self.apply(params, xi), yi)


def example_loss(model: Model, output_loss_fn: Callable) -> ExampleLoss:
    """The per-example loss of ``model`` under ``output_loss_fn`` (:class:`ExampleLoss`)."""
    return ExampleLoss(model.apply, output_loss_fn, bool(model.hparams.get("batched_apply", False)))


def _infer_num_outputs(apply: Callable, params: Params, input_shape: Sequence[int]) -> int:
    x = jax.ShapeDtypeStruct((1, *tuple(input_shape)), jnp.float32)
    try:
        out = jax.eval_shape(apply, params, x)
    except Exception as err:  # the user's function failed on a batch of one: say so
        raise ValueError(f"apply(params, x) failed on a batch of shape {x.shape}: {err}") from err
    shape = tuple(getattr(out, "shape", ()))
    if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
        return 1
    if len(shape) == 2:
        return int(shape[1])
    raise ValueError(f"apply must return outputs [B] or [B, k] for inputs [B, ...]; got shape {shape}.")


_USER_MODELS: dict[Any, Model] = {}


def _user_init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
    raise ValueError("a model made by from_apply/from_nnx has no init; pass its params (from_nnx "
                     "returns the module's).")


def from_apply(
    apply: Callable[[Params, jax.Array], jax.Array],
    params: Params,
    input_shape: Sequence[int],
    *,
    num_outputs: int | None = None,
    name: str = "apply",
) -> Model:
    """Wrap any pure ``apply(params, x [B, ...]) -> [B] | [B, k]`` as a :class:`Model`.

    ``num_outputs`` is read from the output shape on a batch of one (``input_shape``: one example's
    shape; ``params`` only gives the shapes) unless given. The model declares no layer structure
    (``layers=None``), so per-example gradients come from ``vmap(grad)`` of ``apply`` on batches
    of one. Outputs ``[B, 1]`` are squeezed to ``[B]`` (the kit's one-output convention). The same
    ``(apply, input_shape, num_outputs)`` gives the same ``Model`` object, so programs compiled for
    it are reused. It has no ``init`` (keep your params).

    Privacy: as for the kit's models; ``apply`` must not mix the examples of a batch (no batch
    normalization), or per-example clipping does not bound one example's influence.
    """
    if not callable(apply):
        raise ValueError(f"apply must be a function apply(params, x), got {type(apply).__name__}.")
    input_shape = tuple(int(s) for s in input_shape)
    k = _infer_num_outputs(apply, params, input_shape) if num_outputs is None else num_outputs
    k = v.check_int("num_outputs", k, minimum=1)
    cache_key = (apply, input_shape, k, name)
    if cache_key not in _USER_MODELS:
        def wrapped(p: Params, x: jax.Array) -> jax.Array:
            out = apply(p, x)
            return out[..., 0] if k == 1 and out.ndim == 2 else out

        _USER_MODELS[cache_key] = Model(_user_init, wrapped, name, k, input_shape,
                                        (("batched_apply", True),))
    return _USER_MODELS[cache_key]


_NNX_APPLY: dict[Any, Callable] = {}


def from_nnx(module: nnx.Module, input_shape: Sequence[int], *,
             num_outputs: int | None = None) -> tuple[Model, Params]:
    """A user's flax nnx module as ``(Model, params)``: ``params`` is the module's ``nnx.Param``
    state as a plain dict (``nnx.to_pure_dict``), ``apply(params, x)`` merges it into the module's
    graph and calls it on a batch ``x [B, *input_shape]`` (:func:`from_apply`; modules with the
    same graph share one ``Model``).

    Put trained parameters back with ``state = nnx.state(module, nnx.Param);
    nnx.replace_by_pure_dict(state, params); nnx.update(module, state)``. Modules holding other
    state (batch statistics, dropout RNG streams) are refused: their forward pass is not a pure
    function of the parameters, or mixes the examples of a batch.

    Privacy: per-example gradients by ``vmap(grad)`` (``layers=None``), clipped by the kit.
    """
    if not isinstance(module, nnx.Module):
        raise ValueError(f"module must be a flax.nnx.Module, got {type(module).__name__}.")
    graphdef, param_state, rest = nnx.split(module, nnx.Param, ...)
    others = sorted({type(var).__name__ for _, var in nnx.to_flat_state(rest)})
    if others:
        raise ValueError(
            f"the nnx module holds state other than parameters ({', '.join(others)}); DP-SGD needs a "
            "forward pass that is a pure function of the parameters and treats each example alone "
            "(no BatchNorm, no dropout RNGs): remove these layers or write a pure apply "
            "(models.from_apply)."
        )
    if graphdef not in _NNX_APPLY:
        template = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), param_state)

        def apply(p: Params, x: jax.Array) -> jax.Array:
            state = copy.deepcopy(template)
            nnx.replace_by_pure_dict(state, p)
            return nnx.merge(graphdef, state)(x)

        _NNX_APPLY[graphdef] = apply
    params = nnx.to_pure_dict(param_state)
    return from_apply(_NNX_APPLY[graphdef], params, input_shape, num_outputs=num_outputs, name="nnx"), params


# ------------------------------------------------------------------------------------------------
# size and cost
# ------------------------------------------------------------------------------------------------


def param_count(params: Params) -> int:
    """Total number of scalar parameters (of all leaves; a vmapped stack counts every copy)."""
    return int(sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(params)))


def _jaxpr_flops(jaxpr: Any) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        prim = eqn.primitive.name
        if prim == "dot_general":
            (contract_lhs, _), _ = eqn.params["dimension_numbers"]
            lhs_shape = eqn.invars[0].aval.shape
            k = int(np.prod([lhs_shape[i] for i in contract_lhs])) if contract_lhs else 1
            total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * k
        elif prim == "conv_general_dilated":
            rhs_shape = eqn.invars[1].aval.shape
            dn = eqn.params["dimension_numbers"]
            rhs_spec = dn.rhs_spec  # (out_feature, in_feature, spatial...)
            k = int(np.prod([rhs_shape[i] for i in rhs_spec[1:]]))
            total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * k
        for sub in _sub_jaxprs(eqn.params):
            total += _jaxpr_flops(sub)
    return total


def _sub_jaxprs(params: dict) -> list:
    subs = []
    for val in params.values():
        vals = val if isinstance(val, (tuple, list)) else (val,)
        for item in vals:
            if hasattr(item, "jaxpr") and hasattr(item, "consts"):  # ClosedJaxpr
                subs.append(item.jaxpr)
            elif hasattr(item, "eqns"):  # Jaxpr
                subs.append(item)
    return subs


def flops_per_example(model: Model, params: Params) -> int:
    """Forward-pass FLOPs for one example, counting matmuls and convolutions (2 per multiply-add).

    Elementwise work (activations, bias adds, pooling) is not counted; it is small next to the
    contractions for these models. One per-example gradient costs about 3x this (forward plus
    backward), which is the usual figure for a roofline estimate.
    """
    if model.input_shape is not None:
        shape = model.input_shape
    elif model.name in ("linear", "logistic", "multinomial_logistic"):
        shape = (int(params["w"].shape[0]),)
    elif model.name == "mlp":
        shape = (int(params["layers"][0]["kernel"].shape[-2]),)
    else:
        raise ValueError(f"cannot infer the input shape of model {model.name!r}.")
    x = jax.ShapeDtypeStruct((1, *shape), jnp.float32)
    closed = jax.make_jaxpr(model.apply)(params, x)
    return _jaxpr_flops(closed.jaxpr)
