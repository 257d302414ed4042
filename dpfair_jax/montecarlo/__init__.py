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

from dpfair_jax.montecarlo.engine import estimate_trial_memory, run_trials, sweep
from dpfair_jax.montecarlo.keys import trial_keys
from dpfair_jax.montecarlo.plan import Plan, gather, is_primary, plan_chunks, trial_mesh
from dpfair_jax.montecarlo.results import SweepResult, summarize

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
