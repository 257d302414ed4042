"""The :class:`Model` type, activations, losses, predictions and size helpers shared by the kit's models
(``dpfair_jax.models``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dpfair_jax import _validation as v

Params = Any  # nested dict of jax.Array


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


def resolve_input_dim(name: str, given: Any, default: int | None) -> int:
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


def check_key(key: Any) -> None:
    v.check_threefry_key(key, "key")


def maybe_squeeze(out: jax.Array, num_outputs: int) -> jax.Array:
    return out[..., 0] if num_outputs == 1 else out


INITS = ("zeros", "lecun_normal")



# ------------------------------------------------------------------------------------------------
# building blocks of the factories
# ------------------------------------------------------------------------------------------------


def nnx_init(build: Callable[[nnx.Rngs], nnx.Module]) -> Callable[[jax.Array], Params]:
    """Pure ``init(key) -> params`` (plain dict) from an nnx module builder.

    jit: eager nnx construction dispatches op by op (seconds for the CNN)."""

    def init_from_key(key: jax.Array) -> Params:
        _, state = nnx.split(build(nnx.Rngs(params=key)))
        return nnx.to_pure_dict(state)

    return jax.jit(init_from_key)


def batched(forward: Callable, x: jax.Array, example_ndim: int) -> jax.Array:
    """``forward``'s outputs for a batch ``[n, ...]`` or for one example (``example_ndim`` dims)."""
    x = jnp.asarray(x)
    single = x.ndim == example_ndim
    out = forward(x[None] if single else x)
    return out[0] if single else out


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
