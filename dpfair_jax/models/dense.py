"""The MLP: a stack of dense layers (``Model.layers = "mlp"``); its forward pass
:func:`dense_stack_forward`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from dpfair_jax import _validation as v
from dpfair_jax.models.base import (ACTIVATIONS, Model, Params, batched, check_key, maybe_squeeze, nnx_init,
                                    resolve_input_dim)


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
        check_key(key)
        d = resolve_input_dim("mlp", input_dim_or_shape, input_dim)
        if d not in inits:
            inits[d] = nnx_init(lambda rngs, d=d: _MLPParams((d, *hidden, out), rngs))
        return inits[d](key)

    def forward(params: Params, x: jax.Array, probes: Sequence[jax.Array] | None = None):
        z, inputs = dense_stack_forward(_mlp_layer_pairs(params), jnp.asarray(x), act, probes)
        return maybe_squeeze(z, out), tuple(inputs)

    @jax.jit
    def apply(params: Params, x: jax.Array) -> jax.Array:
        return batched(lambda xb: forward(params, xb)[0], x, 1)

    return Model(init, apply, "mlp", out, None if input_dim is None else (int(input_dim),),
                 (("hidden", hidden), ("activation", activation)), "mlp", forward)
