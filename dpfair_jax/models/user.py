"""A user's own model as a :class:`Model`: any pure ``apply`` (:func:`from_apply`) or a flax nnx
module (:func:`from_nnx`); per-example gradients by ``vmap(grad)``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from dpfair_jax import _validation as v
from dpfair_jax.models.base import Model, Params


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
