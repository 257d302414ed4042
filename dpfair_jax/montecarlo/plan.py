"""Layout of the work items (``Plan``, ``plan_chunks``), the trial mesh and the multi-process helpers
(``is_primary``, ``gather``)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from dpfair_jax import _validation as V
from dpfair_jax.montecarlo.results import SweepResult


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
