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

The MLP and CNN are flax nnx modules; ``nnx.split``/``nnx.merge`` convert between the module and
the pure dict at the boundary. No batch normalization anywhere (it mixes examples, which breaks
per-example clipping and the DP-SGD sensitivity analysis).

Losses are per-example (no reduction): :func:`binary_logistic_loss`, :func:`softmax_cross_entropy`,
:func:`squared_loss`. Helpers: :func:`predict_proba`, :func:`predict_label`, :func:`param_count`,
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
    """

    init: Callable[..., Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    name: str
    num_outputs: int
    input_shape: tuple[int, ...] | None = None
    config: tuple[tuple[str, Any], ...] = ()

    @property
    def hparams(self) -> dict[str, Any]:
        """The factory's hyperparameters (``fit_intercept``, ``hidden``, ``activation``, ...)."""
        return dict(self.config)


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

    def apply(params: Params, x: jax.Array) -> jax.Array:
        z = jnp.asarray(x) @ params["w"]
        if "b" in params:
            z = z + params["b"]
        return _maybe_squeeze(z, out)

    return Model(init, apply, name, out, None if input_dim is None else (int(input_dim),),
                 (("fit_intercept", fit_intercept), ("init", init_scheme)))


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
# nnx modules -> pure functions
# ------------------------------------------------------------------------------------------------


def _pure_model(
    build: Callable[[nnx.Rngs], nnx.Module],
    name: str,
    num_outputs: int,
    input_shape: tuple[int, ...],
    prepare: Callable[[jax.Array], tuple[jax.Array, bool]],
) -> tuple[Callable[..., Params], Callable[[Params, jax.Array], jax.Array]]:
    """Turn an nnx module builder into pure (init, apply) over a plain dict of params."""
    graphdef, abstract_state = nnx.split(nnx.eval_shape(lambda: build(nnx.Rngs(0))))

    def init_from_key(key: jax.Array) -> Params:
        module = build(nnx.Rngs(params=key))
        _, state = nnx.split(module)
        return nnx.to_pure_dict(state)

    def apply(params: Params, x: jax.Array) -> jax.Array:
        state = copy.deepcopy(abstract_state)
        nnx.replace_by_pure_dict(state, params)
        module = nnx.merge(graphdef, state)
        xb, single = prepare(jnp.asarray(x))
        out = _maybe_squeeze(module(xb), num_outputs)
        return out[0] if single else out

    # jit: eager nnx construction dispatches op by op (seconds for the CNN); nested under an outer
    # jit/vmap/grad these are ordinary inlined calls.
    return jax.jit(init_from_key), jax.jit(apply)


class _MLP(nnx.Module):
    def __init__(self, sizes: Sequence[int], activation: str, rngs: nnx.Rngs):
        self.activation = activation
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])]
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for layer in self.layers[:-1]:
            x = act(layer(x))
        return self.layers[-1](x)


def mlp(
    hidden: Sequence[int] = (256,),
    out: int = 1,
    activation: str = "tanh",
    *,
    input_dim: int | None = None,
) -> Model:
    """Fully connected network ``d -> hidden[0] -> ... -> out`` with ``activation`` between layers.

    Params ``{"layers": {i: {"kernel": [in, out], "bias": [out]}}}`` (flax nnx ``Linear``, LeCun
    normal kernels, zero biases). Outputs ``[n]`` when ``out == 1`` else ``[n, out]``.
    Activations: see ``ACTIVATIONS``.
    """
    hidden = tuple(hidden)
    for i, h in enumerate(hidden):
        v.check_int(f"hidden[{i}]", h, minimum=1)
    v.check_int("out", out, minimum=1)
    v.check_choice("activation", activation, ACTIVATIONS)
    if input_dim is not None:
        v.check_int("input_dim", input_dim, minimum=1)

    def build_for(d: int) -> Callable[[nnx.Rngs], nnx.Module]:
        return lambda rngs: _MLP((d, *hidden, out), activation, rngs)

    def prepare(x: jax.Array) -> tuple[jax.Array, bool]:
        return (x[None], True) if x.ndim == 1 else (x, False)

    cache: dict[int, tuple] = {}

    def fns(d: int) -> tuple:
        if d not in cache:
            cache[d] = _pure_model(build_for(d), "mlp", out, (d,), prepare)
        return cache[d]

    def init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
        _check_key(key)
        d = _resolve_input_dim("mlp", input_dim_or_shape, input_dim)
        return fns(d)[0](key)

    def apply(params: Params, x: jax.Array) -> jax.Array:
        d = int(params["layers"][0]["kernel"].shape[-2])
        return fns(d)[1](params, x)

    return Model(init, apply, "mlp", out, None if input_dim is None else (int(input_dim),),
                 (("hidden", hidden), ("activation", activation)))


class _CNN(nnx.Module):
    def __init__(
        self, image_shape: tuple[int, int, int], channels: Sequence[int], num_classes: int,
        activation: str, rngs: nnx.Rngs, compute_dtype: Any = None,
    ):
        h, w, c = image_shape
        self.activation = activation
        self.compute_dtype = compute_dtype
        convs = []
        # dtype= is the computation dtype (flax casts inputs, kernel and bias to it); the
        # parameters themselves stay float32 (param_dtype).
        for cout in channels:
            convs.append(nnx.Conv(c, cout, kernel_size=(3, 3), padding="SAME", dtype=compute_dtype,
                                  rngs=rngs))
            c = cout
            h, w = h // 2, w // 2
        self.convs = nnx.List(convs)
        self.head = nnx.Linear(h * w * c, num_classes, dtype=compute_dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for conv in self.convs:
            x = nnx.avg_pool(act(conv(x)), window_shape=(2, 2), strides=(2, 2))
        out = self.head(x.reshape(x.shape[0], -1))
        # Mixed precision: logits go back to float32, so losses and everything computed from
        # them (gradients w.r.t. the float32 parameters, clipping, noise) are float32.
        return out if self.compute_dtype is None else out.astype(jnp.float32)


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
    float32. ``dpsgd.train`` computes the per-example norms of such a model with ``vmap(grad)``
    (the float32 ghost-norm forward pass does not reproduce a bfloat16 ``apply``).
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

    init_from_key, apply = _pure_model(
        lambda rngs: _CNN(image_shape, channels, num_classes, activation, rngs,
                          None if compute_dtype is None else jnp.dtype(compute_dtype)),
        "cnn", num_classes, image_shape, prepare,
    )

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
                  ("compute_dtype", compute_dtype)))


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
