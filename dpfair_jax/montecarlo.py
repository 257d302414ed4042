# Kept as one module (~600 lines): keys, chunk plan, engine, memory budget, run_trials and sweep are one
# pipeline whose private parts (_Item, _engine, _chunk_from_budget) every section shares.
"""Monte Carlo engine: many independent trials, and trials x a hyperparameter grid, as one program.

``run_trials(fn, key, num_trials)`` evaluates ``fn(trial_key) -> pytree`` for ``num_trials``
independent keys and stacks the results on a leading trial axis. ``sweep(fn, key, grid, num_trials)``
does the same over the Cartesian product of array-valued hyperparameters, with the hyperparameters
passed to ``fn`` as traced arrays, so a whole grid is one compiled program and changing the grid's
values (same shapes) does not recompile.

How it runs (one ``jit``):

* The work items (trials, or grid points x trials) are flattened to one axis of length ``N`` and
  identified by an int32 index. Item ``i`` of a sweep is grid point ``i // num_trials`` and trial
  ``i % num_trials``; its key is ``trial_keys(key, num_trials)[i % num_trials]``.
* The axis is split over the devices of ``mesh`` (``jax.shard_map``; the item axis is sharded over
  *all* mesh axes), and on each device evaluated in chunks: the per-device items are reshaped to
  ``[num_chunks, chunk]`` and ``lax.map`` runs ``vmap(fn)`` over one chunk at a time, which bounds
  memory by one chunk's temporaries (plus the stacked outputs).
* Padding instead of refusal: ``chunk_size`` need not divide the number of items. The per-device
  count ``m = ceil(N / devices)`` is evaluated in ``ceil(m / c)`` chunks of exactly
  ``c = min(chunk_size, m)`` items, the item axis padded with copies of item ``N - 1`` whose results
  are discarded: fewer than ``c`` wasted items per device (pick a ``chunk_size`` dividing ``m`` to
  waste none). Chunks keep the requested shape on purpose, see the next point.
* Reproducibility: each item sees the same key and the same hyperparameters wherever it runs, so
  random draws (and anything computed from them element-wise) never depend on the layout, and
  results are bitwise identical whenever the chunk shape is the same, in particular for the same
  ``chunk_size`` on 1 or several devices (tested with 4 host devices; keep ``chunk_size`` at or
  below the per-device count for this). Across *different* chunk shapes, XLA's CPU backend compiles
  reductions and dot products per shape and may sum in another order: results then agree to float32
  rounding, not bitwise (seen for chunks below ~24 trials of a 200-element reduction).

Common random numbers: in a sweep, trial ``t`` uses the same key at every grid point, so differences
between grid points are not blurred by different noise draws (variance reduction for comparisons;
the trials are still independent of each other). Use ``fold_in`` on the point inside ``fn`` if
independent draws per grid point are wanted.

Only threefry2x32 keys are accepted: with ``rbg`` keys, splitting and ``vmap`` can repeat
randomness across trials.

Several processes (``jax.distributed``; ``python -m dpfair_jax.launch`` on one machine, see
``docs/multihost.md``): every process calls ``run_trials``/``sweep`` with the same arguments and a
mesh over the devices of all processes (``trial_mesh()``). The key, the grid and ``data`` are
replicated (each process passes its own identical copy); the item axis is sharded, each process
computing its devices' items. The outputs are global arrays; ``gather(result)`` returns host-local
NumPy arrays on every process (``multihost_utils.process_allgather``; call it on every process),
bitwise equal to the one-process result for the same chunk shape. ``is_primary()`` says whether this
process should write files.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dpfair_jax import _validation as V

__all__ = [
    "SweepResult",
    "Plan",
    "estimate_trial_memory",
    "gather",
    "is_primary",
    "plan_chunks",
    "run_trials",
    "summarize",
    "sweep",
    "trial_keys",
    "trial_mesh",
]

PyTree = Any
_RESERVED = ("key", "trial", "metric", "count", "mean", "sd", "se", "ci_low", "ci_high")


# --------------------------------------------------------------------------------------------- keys


def trial_keys(key: jax.Array, num_trials: int) -> jax.Array:
    """Return ``num_trials`` independent threefry keys split from ``key`` (``jax.random.split``).

    ``run_trials`` and ``sweep`` give trial ``t`` exactly ``trial_keys(key, num_trials)[t]``, so a
    Python loop over these keys reproduces any single trial.
    """
    V.check_threefry_key(key)
    num_trials = V.check_int("num_trials", num_trials, minimum=1)
    return jax.random.split(_as_typed_key(key), num_trials)


def _as_typed_key(key: jax.Array) -> jax.Array:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32), impl="threefry2x32")


def _check_scalar_key(key: Any) -> None:
    V.check_threefry_key(key)
    typed = jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
    shape = tuple(np.shape(key))
    if (typed and shape != ()) or (not typed and shape != (2,)):
        raise ValueError(
            f"key must be a single PRNG key (shape () typed, or (2,) raw), got shape {shape}; "
            "pass jax.random.key(seed), not an array of keys."
        )


# --------------------------------------------------------------------------------------------- plan


class Plan(NamedTuple):
    """How ``num_items`` work items are laid out: ``devices x num_chunks x chunk`` (>= num_items)."""

    num_items: int
    devices: int
    num_chunks: int
    chunk: int

    @property
    def padded(self) -> int:
        return self.devices * self.num_chunks * self.chunk

    @property
    def per_device(self) -> int:
        return self.num_chunks * self.chunk


def plan_chunks(num_items: int, devices: int = 1, chunk_size: int | None = None) -> Plan:
    """Layout of ``num_items`` over ``devices`` in chunks of exactly ``min(chunk_size, per_device)``.

    ``per_device = ceil(num_items / devices)``; the last chunk is padded. ``chunk_size=None``
    evaluates all of a device's items in one ``vmap``.
    """
    num_items = V.check_int("num_items", num_items, minimum=1)
    devices = V.check_int("devices", devices, minimum=1)
    per_device = -(-num_items // devices)
    if chunk_size is None:
        return Plan(num_items, devices, 1, per_device)
    chunk = min(V.check_int("chunk_size", chunk_size, minimum=1), per_device)
    return Plan(num_items, devices, -(-per_device // chunk), chunk)


def trial_mesh(devices: Any = None, axis_name: str = "trials") -> Mesh:
    """A 1-D mesh over ``devices`` (default: all devices of all processes) for the trial axis."""
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices is empty; pass at least one device or None for all devices.")
    return Mesh(np.asarray(devs), (axis_name,))


def is_primary() -> bool:
    """True on process 0 of a ``jax.distributed`` job (and in a single process): the one that writes."""
    return jax.process_index() == 0


def gather(result: Any) -> Any:
    """Host-local NumPy copy of a ``run_trials`` pytree or a ``SweepResult``, on every process.

    Leaves that span devices of other processes (outputs over a multi-process mesh) are gathered
    with one ``jax.experimental.multihost_utils.process_allgather`` call, a collective: every
    process must call ``gather`` on the same structure. Other leaves are copied as they are.
    """
    if isinstance(result, SweepResult):
        return dataclasses.replace(result, values=gather(result.values))
    leaves, treedef = jax.tree.flatten(result)
    remote = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and not x.is_fully_addressable]
    out = [x if i in remote else np.asarray(x) for i, x in enumerate(leaves)]
    if remote:
        from jax.experimental import multihost_utils

        got = multihost_utils.process_allgather([leaves[i] for i in remote], tiled=True)
        for i, x in zip(remote, got):
            out[i] = np.asarray(x)
    return jax.tree.unflatten(treedef, out)


# ------------------------------------------------------------------------------------------- engine


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


def _mesh_devices(mesh: Mesh | None) -> int:
    if mesh is None:
        return 1
    if not isinstance(mesh, Mesh):
        raise ValueError(
            f"mesh must be a jax.sharding.Mesh (e.g. dpfair_jax.montecarlo.trial_mesh()), got {type(mesh).__name__}."
        )
    return int(mesh.devices.size)


def _key_data(key: jax.Array) -> jax.Array:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return jnp.asarray(key, jnp.uint32)


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


# --------------------------------------------------------------------------------------------- sweep


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

    Long only by this docstring: the code is under 50 lines.
    """
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
    names = list(g)
    grid_shape = tuple(len(v) for v in g.values())
    mesh_axes = np.meshgrid(*g.values(), indexing="ij")
    points = {n: jnp.asarray(a.ravel()) for n, a in zip(names, mesh_axes)}
    V.check_finite("data", data)
    item = _Item(fn, num_trials, True, data is not None, hparams is not None)
    if hparams is not None:
        fields = _field_names(hparams)
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise ValueError(f"grid names {unknown} are not fields of {type(hparams).__name__} "
                             f"(fields: {list(fields)}).")
        for leaf in jax.tree_util.tree_leaves(hparams):
            if not isinstance(leaf, jax.core.Tracer) and np.any(np.isnan(np.asarray(leaf, dtype=float))):
                raise ValueError(f"hparams ({type(hparams).__name__}) contains NaN.")
        data = (data, hparams)

    # check fn's output on the host before compiling the whole sweep
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

    num_items = math.prod(grid_shape) * num_trials
    if memory_budget_bytes is not None:
        chunk_size = _chunk_from_budget(fn, key, points, data, memory_budget_bytes, -(-num_items // devices))
    plan = plan_chunks(num_items, devices, chunk_size)
    flat = _engine(item, _key_data(key), points, data, plan=plan, mesh=mesh)
    values = {k: v.reshape(grid_shape + (num_trials,) + v.shape[1:]) for k, v in flat.items()}
    return SweepResult(values=values, grid=g, num_trials=num_trials)


# ------------------------------------------------------------------------------------------ results


def _t_quantile(confidence: float, dof: np.ndarray) -> np.ndarray:
    from scipy import stats

    with np.errstate(invalid="ignore"):
        return stats.t.ppf(0.5 + confidence / 2.0, np.where(dof >= 1, dof, np.nan))


def summarize(samples: Any, confidence: float = 0.95, axis: int = 0) -> dict[str, np.ndarray]:
    """Mean, sd (ddof=1), se, and the Student-t interval ``mean +- t_{(1+c)/2, n-1} se`` over ``axis``.

    NaN entries are ignored (``count`` is the number of the others); with ``count < 2``, sd, se and the interval
    are NaN.
    """
    c = V.as_float("confidence", confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    x = np.asarray(samples, dtype=np.float64)
    ok = ~np.isnan(x)
    n = ok.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, x, 0.0).sum(axis=axis) / n
        dev = np.where(ok, x - np.expand_dims(mean, axis), 0.0)
        sd = np.sqrt((dev**2).sum(axis=axis) / np.where(n >= 2, n - 1, np.nan))
        se = sd / np.sqrt(n)
    half = _t_quantile(c, n - 1) * se
    return {"count": n, "mean": mean, "sd": sd, "se": se, "ci_low": mean - half, "ci_high": mean + half}


def _metric_columns(name: str, arr: np.ndarray, lead: int) -> list[tuple[str, np.ndarray]]:
    """Split a [lead..., *shape] metric into (column name, [lead...]) pieces: ``name[i,j]``."""
    shape = arr.shape[lead:]
    if not shape:
        return [(name, arr)]
    cols = []
    for idx in np.ndindex(*shape):
        cols.append((f"{name}[{','.join(map(str, idx))}]", arr[(Ellipsis,) + idx]))
    return cols


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Result of ``sweep``.

    Attributes:
      values: metric name -> array ``[*grid_shape, num_trials, *metric_shape]``.
      grid: hyperparameter name -> 1-D NumPy array of its values (axis order of ``values``).
      num_trials: trials per grid point.

    Array-valued metrics are *expanded*: a metric ``w`` of shape ``(2,)`` gives columns ``w[0]``
    and ``w[1]`` in ``to_frame()`` and metrics ``w[0]``, ``w[1]`` in ``summary()``.
    """

    values: dict[str, Any]
    grid: dict[str, np.ndarray]
    num_trials: int

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.grid.values())

    def _columns(self) -> list[tuple[str, np.ndarray]]:
        lead = len(self.grid) + 1
        cols: list[tuple[str, np.ndarray]] = []
        for name, v in self.values.items():
            cols.extend(_metric_columns(name, np.asarray(v), lead))
        return cols

    def to_frame(self):
        """Tidy ``pandas.DataFrame``: one row per grid point and trial (row-major over the grid, trial
        fastest); columns: the grid names, ``trial``, then the metrics (array metrics expanded)."""
        import pandas as pd

        shape = self.grid_shape + (self.num_trials,)
        index = np.indices(shape).reshape(len(shape), -1)
        data: dict[str, np.ndarray] = {}
        for d, (name, vals) in enumerate(self.grid.items()):
            data[name] = vals[index[d]]
        data["trial"] = index[-1]
        for name, arr in self._columns():
            data[name] = arr.reshape(-1)
        return pd.DataFrame(data)

    def summary(self, confidence: float = 0.95):
        """Per grid point and metric: ``count, mean, sd, se, ci_low, ci_high`` (Student-t interval at
        ``confidence``) as a long ``pandas.DataFrame`` with columns grid names, ``metric``, stats."""
        import pandas as pd

        k = len(self.grid)
        cols = self._columns()
        pts = np.indices(self.grid_shape).reshape(k, -1)
        frames = []
        for name, arr in cols:
            st = summarize(arr, confidence, axis=k)
            row: dict[str, Any] = {g: vals[pts[d]] for d, (g, vals) in enumerate(self.grid.items())}
            row["metric"] = name
            row.update({s: np.reshape(v, -1) for s, v in st.items()})
            frames.append(pd.DataFrame(row))
        return pd.concat(frames, ignore_index=True)
