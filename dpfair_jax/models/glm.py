"""Generalized linear models: ``linear``, ``logistic``, ``multinomial_logistic`` (layout
``{"w": [d, out], "b": [out]}``; ``Model.layers = "glm"``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from dpfair_jax import _validation as v
from dpfair_jax.models.base import INITS, Model, Params, check_key, maybe_squeeze, resolve_input_dim


def _glm(
    name: str, out: int, fit_intercept: bool, input_dim: int | None, init_scheme: str
) -> Model:
    v.check_int("out", out, minimum=1)
    v.check_choice("init", init_scheme, INITS)
    if input_dim is not None:
        v.check_int("input_dim", input_dim, minimum=1)
    if not isinstance(fit_intercept, bool):
        raise ValueError(f"fit_intercept must be True or False, got {fit_intercept!r}.")

    def init(key: jax.Array, input_dim_or_shape: Any = None) -> Params:
        check_key(key)
        d = resolve_input_dim(name, input_dim_or_shape, input_dim)
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
        return maybe_squeeze(z, out), (x,)

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
