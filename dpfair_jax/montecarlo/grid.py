"""``sweep``: trials x the Cartesian product of a hyperparameter grid, checked on the host (grid,
hparams fields, ``fn``'s outputs) and evaluated by the engine of ``run_trials``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from dpfair_jax import _validation as V
from dpfair_jax.montecarlo.engine import _chunk_from_budget, _engine, _field_names, _Item
from dpfair_jax.montecarlo.keys import _check_scalar_key, _key_data
from dpfair_jax.montecarlo.plan import _mesh_devices, plan_chunks
from dpfair_jax.montecarlo.results import SweepResult

PyTree = Any
_RESERVED = ("key", "trial", "metric", "count", "mean", "sd", "se", "ci_low", "ci_high")


def _check_grid(grid: Any) -> dict[str, np.ndarray]:
    if not isinstance(grid, Mapping):
        raise ValueError(f"grid must be a dict name -> 1-D array of values, got {type(grid).__name__}.")
    if len(grid) == 0:
        raise ValueError("grid is empty; give at least one hyperparameter, or use run_trials for plain trials.")
    out: dict[str, np.ndarray] = {}
    for name, values in grid.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"grid names must be Python identifiers (they become keyword arguments), got {name!r}.")
        if name in _RESERVED:
            raise ValueError(f"grid name {name!r} is reserved (used for result columns); rename it.")
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise ValueError(f"grid[{name!r}] must be 1-D (a list of values), got shape {arr.shape}; flatten it or split it into several names.")
        if arr.size == 0:
            raise ValueError(f"grid[{name!r}] is empty; give at least one value.")
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"grid[{name!r}] must hold numbers (they are traced), got dtype {arr.dtype}.")
        out[name] = arr
    return out


def sweep(
    fn: Callable[..., Mapping[str, Any]],
    key: jax.Array,
    grid: Mapping[str, Any],
    num_trials: int,
    *,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    memory_budget_bytes: int | None = None,
    data: PyTree = None,
    hparams: PyTree = None,
) -> "SweepResult":
    """Trials x the Cartesian product of ``grid``, as one jitted program.

    With ``hparams`` (an algorithm's hyperparameter pytree: a dataclass registered as a pytree, a
    NamedTuple or a dict), ``grid`` names its fields and ``fn(key[, data], hparams_at_point)``
    receives ``hparams`` with those fields replaced by the point's traced values (the other fields
    are program arguments too), so any algorithm's ``fit(key, data, hparams, config)`` can be swept
    without hand-written meshgrids::

        sweep(lambda k, d, hp: metrics(fermi.fit(k, d, hp, config)), key,
              {"lam": lams, "noise_theta": zs}, seeds, data=train, hparams=FermiHparams(...))

    ``fn(key, **point) -> dict[str, scalar or array]`` receives each hyperparameter as a traced
    0-d array (float32 for floats, int32 for integers), so the grid's values can change without
    recompiling and ``fn`` is traced once for the whole sweep. Grid point x trial items are flattened
    to one axis and evaluated like ``run_trials`` (chunks of at most ``chunk_size`` items per
    device, sharded over ``mesh``). With ``data`` (a pytree of arrays shared by all items, passed as
    a program argument as in ``run_trials``), ``fn(key, data, **point)`` is called.

    Common random numbers: trial ``t`` gets ``trial_keys(key, num_trials)[t]`` at every grid point.

    Returns:
      ``SweepResult`` whose ``values[name]`` has shape ``[*grid_shape, num_trials, *metric_shape]``
      with the grid axes in the order of ``grid``'s keys.

    """
    num_trials, g, devices = _check_sweep_args(fn, key, grid, num_trials, mesh, chunk_size, memory_budget_bytes)
    names = list(g)
    grid_shape = tuple(len(v) for v in g.values())
    points = _grid_points(g)
    V.check_finite("data", data)
    item = _Item(fn, num_trials, True, data is not None, hparams is not None)
    if hparams is not None:
        _check_hparams(hparams, names)
        data = (data, hparams)
    _check_outputs(item, points, data, num_trials, names)

    num_items = math.prod(grid_shape) * num_trials
    if memory_budget_bytes is not None:
        chunk_size = _chunk_from_budget(fn, key, points, data, memory_budget_bytes, -(-num_items // devices))
    plan = plan_chunks(num_items, devices, chunk_size)
    flat = _engine(item, _key_data(key), points, data, plan=plan, mesh=mesh)
    values = {k: v.reshape(grid_shape + (num_trials,) + v.shape[1:]) for k, v in flat.items()}
    return SweepResult(values=values, grid=g, num_trials=num_trials)


def _check_sweep_args(fn: Any, key: Any, grid: Any, num_trials: Any, mesh: Mesh | None, chunk_size: Any,
                      memory_budget_bytes: Any) -> tuple[int, dict[str, np.ndarray], int]:
    """``(num_trials, grid, devices)`` after the checks of ``sweep``'s arguments (before any compile)."""
    _check_scalar_key(key)
    num_trials = V.check_int("num_trials", num_trials, minimum=1)
    if not callable(fn):
        raise ValueError(f"fn must be callable fn(key, **point) -> dict, got {type(fn).__name__}.")
    g = _check_grid(grid)
    devices = _mesh_devices(mesh)
    if chunk_size is not None and memory_budget_bytes is not None:
        raise ValueError("pass either chunk_size or memory_budget_bytes, not both.")
    if chunk_size is not None:
        V.check_int("chunk_size", chunk_size, minimum=1)
    return num_trials, g, devices


def _grid_points(g: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """The grid's Cartesian product, row-major over ``g``'s keys: one flat array of values per name."""
    mesh_axes = np.meshgrid(*g.values(), indexing="ij")
    return {n: jnp.asarray(a.ravel()) for n, a in zip(g, mesh_axes)}


def _check_hparams(hparams: PyTree, names: list[str]) -> None:
    """Every grid name is a field of ``hparams``; no concrete leaf of ``hparams`` is NaN."""
    fields = _field_names(hparams)
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise ValueError(f"grid names {unknown} are not fields of {type(hparams).__name__} "
                         f"(fields: {list(fields)}).")
    for leaf in jax.tree_util.tree_leaves(hparams):
        if not isinstance(leaf, jax.core.Tracer) and np.any(np.isnan(np.asarray(leaf, dtype=float))):
            raise ValueError(f"hparams ({type(hparams).__name__}) contains NaN.")


def _check_outputs(item: _Item, points: dict, data: PyTree, num_trials: int, names: list[str]) -> None:
    """Check ``fn``'s output on the host (``jax.eval_shape``) before compiling the whole sweep: a dict of
    arrays or scalars whose names clash with no grid name and no result column."""
    out_shape = jax.eval_shape(item, jax.ShapeDtypeStruct((), jnp.int32),
                               jax.ShapeDtypeStruct((num_trials,), jax.random.key(0).dtype), points,
                               data)
    if not isinstance(out_shape, Mapping) or not all(isinstance(k, str) for k in out_shape):
        raise ValueError("fn must return a dict mapping metric names (str) to scalars or arrays, "
                         f"got {type(out_shape).__name__}.")
    for k, v in out_shape.items():
        if not hasattr(v, "shape"):
            raise ValueError(f"metric {k!r} returned by fn must be an array or scalar, got a nested {type(v).__name__}.")
        if k in names or k == "trial":
            raise ValueError(f"metric name {k!r} clashes with a grid name or a result column; rename it.")
