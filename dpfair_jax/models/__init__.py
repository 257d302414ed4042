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

Layout of the package: :mod:`~dpfair_jax.models.base` (``Model``, activations, losses, size),
:mod:`~dpfair_jax.models.glm`, :mod:`~dpfair_jax.models.dense` (MLP),
:mod:`~dpfair_jax.models.conv` (CNN), :mod:`~dpfair_jax.models.user` (your own models); import
everything from ``dpfair_jax.models``.

Losses are per-example (no reduction): :func:`binary_logistic_loss`, :func:`softmax_cross_entropy`,
:func:`squared_loss`; :func:`output_loss` picks one for a model, :class:`ExampleLoss` turns a model
and an output loss into ``loss(params, x_i, y_i)``. Helpers: :func:`predict_proba`, :func:`predict_label`, :func:`param_count`,
:func:`flops_per_example`.

Privacy: models carry no privacy guarantee of their own. Training privately means clipping each
example's gradient of these pure functions (``dpfair_jax.privacy.clipping``), which is why no layer
mixes examples within a batch.
"""

from dpfair_jax.models.base import (  # noqa: F401
    ACTIVATIONS,
    LAYER_KINDS,
    ExampleLoss,
    Model,
    Params,
    binary_logistic_loss,
    example_loss,
    flops_per_example,
    output_loss,
    param_count,
    predict_label,
    predict_proba,
    softmax_cross_entropy,
    squared_loss,
)
from dpfair_jax.models.conv import cnn  # noqa: F401
from dpfair_jax.models.dense import dense_stack_forward, mlp  # noqa: F401
from dpfair_jax.models.glm import linear, logistic, multinomial_logistic  # noqa: F401
from dpfair_jax.models.user import from_apply, from_nnx  # noqa: F401

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
