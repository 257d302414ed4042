"""The one compiled program of ``run_trials`` and ``sweep``: work item ``i`` (``_Item``), chunks per
device (``lax.map`` of ``vmap``), sharding over a mesh (``_engine``), the memory budget
(``estimate_trial_memory``), ``run_trials`` and ``sweep`` (trials x the Cartesian product of a
hyperparameter grid, checked on the host before the one compile)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dpfair_jax import _validation as V
from dpfair_jax.montecarlo.plan import Plan, plan_chunks
from dpfair_jax.montecarlo.results import SweepResult

PyTree = Any
_RESERVED = ("key", "trial", "metric", "count", "mean", "sd", "se", "ci_low", "ci_high")


def _check_scalar_key(key: Any) -> None:
    V.check_threefry_key(key)
    typed = jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
    shape = tuple(np.shape(key))
    if (typed and shape != ()) or (not typed and shape != (2,)):
        raise ValueError(
            f"key must be a single PRNG key (shape () typed, or (2,) raw), got shape {shape}; "
            "pass jax.random.key(seed), not an array of keys."
        )


def _key_data(key: jax.Array) -> jax.Array:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return jnp.asarray(key, jnp.uint32)


def _mesh_devices(mesh: Mesh | None) -> int:
    if mesh is None:
        return 1
    if not isinstance(mesh, Mesh):
        raise ValueError(
            f"mesh must be a jax.sharding.Mesh (e.g. dpfair_jax.montecarlo.trial_mesh()), got {type(mesh).__name__}."
        )
    return int(mesh.devices.size)


@dataclasses.dataclass(frozen=True)
class _Item:
    """Item ``i`` -> ``fn(keys[i % T], **{name: grid[name][i // T]})`` (hashable by ``fn``)."""

    fn: Callable[..., PyTree]
    num_trials: int
    swept: bool  # False: fn(key[, data]); True: fn(key[, data], **point)
    with_data: bool = False
    with_hparams: bool = False  # True: data is (data, hparams) and fn(key[, data], hparams_at_point)

    def __call__(self, i: jax.Array, keys: jax.Array, points: dict[str, jax.Array], data: PyTree = None) -> PyTree:
        if self.with_hparams:
            data, base = data
        args = (keys[i % self.num_trials],) + ((data,) if self.with_data else ())
        if not self.swept:
            return self.fn(*args)
        point = {name: values[i // self.num_trials] for name, values in points.items()}
        if self.with_hparams:
            return self.fn(*args, _replace_fields(base, point))
        return self.fn(*args, **point)


def _field_names(tree: Any) -> tuple[str, ...]:
    """The replaceable top-level fields of an hparams pytree (dataclass, NamedTuple or dict)."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return tuple(f.name for f in dataclasses.fields(tree))
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return tuple(tree._fields)
    if isinstance(tree, Mapping):
        return tuple(str(k) for k in tree)
    raise ValueError(f"hparams must be a dataclass, NamedTuple or dict pytree, got {type(tree).__name__}.")


def _replace_fields(tree: Any, point: Mapping[str, Any]) -> Any:
    """``tree`` with the fields named in ``point`` replaced (traced values inside the program)."""
    if dataclasses.is_dataclass(tree):
        return dataclasses.replace(tree, **point)
    if isinstance(tree, tuple) and hasattr(tree, "_replace"):
        return tree._replace(**point)
    return type(tree)({**tree, **point}) if not isinstance(tree, dict) else {**tree, **point}


def _device_chunks(item: _Item, plan: Plan, idx: jax.Array, keys: jax.Array, points: dict, data: PyTree) -> PyTree:
    """Evaluate this device's ``plan.per_device`` items chunk by chunk (lax.map of vmap)."""
    batched = jax.vmap(item, in_axes=(0, None, None, None))
    if plan.num_chunks == 1:
        return batched(idx, keys, points, data)
    out = jax.lax.map(lambda c: batched(c, keys, points, data), idx.reshape(plan.num_chunks, plan.chunk))
    return jax.tree.map(lambda a: a.reshape((plan.per_device,) + a.shape[2:]), out)


@functools.partial(jax.jit, static_argnames=("item", "plan", "mesh"))
def _engine(item: _Item, key_data: jax.Array, points: dict, data: PyTree, *, plan: Plan,
            mesh: Mesh | None) -> PyTree:
    keys = jax.random.split(jax.random.wrap_key_data(key_data, impl="threefry2x32"), item.num_trials)
    # padded items repeat the last real item; their results are sliced off below
    idx = jnp.minimum(jnp.arange(plan.padded, dtype=jnp.int32), plan.num_items - 1)
    if mesh is None:
        out = _device_chunks(item, plan, idx, keys, points, data)
    else:
        spec = PartitionSpec(tuple(mesh.axis_names))
        idx = jax.lax.with_sharding_constraint(idx, NamedSharding(mesh, spec))
        body = functools.partial(_device_chunks, item, plan)
        out = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(spec, PartitionSpec(), PartitionSpec(), PartitionSpec()),
            out_specs=spec,
            check_vma=False,
        )(idx, keys, points, data)
    return jax.tree.map(lambda a: a[: plan.num_items], out)


# ----------------------------------------------------------------------------------- memory budget


def estimate_trial_memory(
    fn: Callable[..., PyTree],
    key: jax.Array,
    points: Mapping[str, Any] | None = None,
    data: PyTree = None,
) -> tuple[int, int]:
    """Estimate ``(bytes_per_trial, fixed_bytes)`` of ``vmap(fn)`` from XLA's memory analysis.

    Compiles the vmapped trial for 4 and 8 trials and takes the difference of
    ``temp + output`` bytes (``Compiled.memory_analysis()``). Where the backend gives no analysis,
    falls back to the output size of one trial from ``jax.eval_shape`` (a lower bound).
    ``points`` (a dict of 1-D grid values) estimates a sweep item instead of a plain trial, and
    ``data`` one that takes ``fn(key, data, ...)``. Depends on shapes only (cached).
    """
    _check_scalar_key(key)
    pts = {k: jnp.asarray(v) for k, v in (points or {}).items()}
    leaves, treedef = jax.tree.flatten(data)
    data_sig = (treedef, tuple((np.shape(x), str(jnp.asarray(x).dtype)) for x in leaves))
    signature = tuple((k, v.shape, str(v.dtype)) for k, v in pts.items())
    return _estimate_cached(fn, points is not None, data is not None, signature, data_sig)


@functools.lru_cache(maxsize=64)
def _estimate_cached(fn: Callable[..., PyTree], swept: bool, with_data: bool, signature: tuple,
                     data_sig: tuple) -> tuple[int, int]:
    """The estimate depends on fn and the shapes only (cached: it costs two compiles)."""
    pts = {k: jax.ShapeDtypeStruct(shape, dtype) for k, shape, dtype in signature}
    treedef, leaf_sig = data_sig
    data = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(sh, dt) for sh, dt in leaf_sig])
    item = _Item(fn, 8, swept, with_data)
    keys = jax.ShapeDtypeStruct((8,), jax.random.key(0).dtype)

    def nbytes(b: int) -> int | None:
        f = jax.jit(jax.vmap(item, in_axes=(0, None, None, None)))
        try:
            ma = f.lower(jax.ShapeDtypeStruct((b,), jnp.int32), keys, pts, data).compile().memory_analysis()
        except Exception:  # noqa: BLE001 - backends without memory analysis
            return None
        if ma is None:
            return None
        return int(ma.temp_size_in_bytes + ma.output_size_in_bytes)

    m4, m8 = nbytes(4), nbytes(8)
    if m4 is None or m8 is None:
        out = jax.eval_shape(item, jax.ShapeDtypeStruct((), jnp.int32), keys, pts, data)
        per = sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(out))
        return max(per, 1), 0
    per = max((m8 - m4) // 4, 1)
    return per, max(m4 - 4 * per, 0)


def _chunk_from_budget(item_fn, key, points, data, budget: int, per_device: int) -> int:
    budget = V.check_int("memory_budget_bytes", budget, minimum=1)
    per, fixed = estimate_trial_memory(item_fn, key, points, data)
    chunk = (budget - fixed) // per
    if chunk < 1:
        raise ValueError(
            f"memory_budget_bytes={budget} is below what one trial needs (about {per + fixed} bytes); "
            "raise the budget or pass chunk_size explicitly."
        )
    return int(min(chunk, per_device))


# ---------------------------------------------------------------------------------------- run_trials


def run_trials(
    fn: Callable[[jax.Array], PyTree],
    key: jax.Array,
    num_trials: int,
    *,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    memory_budget_bytes: int | None = None,
    data: PyTree = None,
) -> PyTree:
    """Evaluate ``fn(k)`` for ``k in trial_keys(key, num_trials)`` as one compiled program.

    Args:
      fn: pure function of one threefry key returning a pytree of arrays (must be vmap-able).
        Its identity keys the compile cache: pass the same function object to reuse the program.
      key: a single threefry2x32 key.
      num_trials: number of independent trials (>= 1).
      chunk_size: this many trials are vmapped at once per device (``lax.map`` over chunks); need
        not divide ``num_trials`` (the last chunk is padded, see the module docstring). ``None``:
        one vmap over all of a device's trials.
      mesh: shard the trial axis over all devices of this ``jax.sharding.Mesh`` (padding to a
        multiple of the device count). ``None``: the default device.
      memory_budget_bytes: choose ``chunk_size`` so that one chunk's temporaries fit this many bytes
        per device (estimated with ``estimate_trial_memory``); exclusive with ``chunk_size``.
      data: optional pytree of arrays (e.g. a ``Dataset``) shared by all trials: then
        ``fn(key, data)`` is called and ``data`` enters the program as an argument (replicated on
        every device) instead of being baked into it as constants, so new data of the same shapes
        does not recompile.

    Returns:
      ``fn``'s pytree with a leading ``[num_trials]`` axis; row ``t`` is trial ``t``.
    """
    _check_scalar_key(key)
    num_trials = V.check_int("num_trials", num_trials, minimum=1)
    if not callable(fn):
        raise ValueError(f"fn must be callable fn(key) -> pytree, got {type(fn).__name__}.")
    devices = _mesh_devices(mesh)
    if chunk_size is not None and memory_budget_bytes is not None:
        raise ValueError("pass either chunk_size or memory_budget_bytes, not both.")
    if chunk_size is not None:
        V.check_int("chunk_size", chunk_size, minimum=1)
    V.check_finite("data", data)
    item = _Item(fn, num_trials, False, data is not None)
    if memory_budget_bytes is not None:
        chunk_size = _chunk_from_budget(fn, key, None, data, memory_budget_bytes, -(-num_trials // devices))
    plan = plan_chunks(num_trials, devices, chunk_size)
    return _engine(item, _key_data(key), {}, data, plan=plan, mesh=mesh)


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
