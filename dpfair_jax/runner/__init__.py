"""dpfair_jax.runner: experiment specs, study discovery, the resumable results store, plots, the report.

Public names (imported lazily, so ``import dpfair_jax.runner`` stays cheap and JAX-free):

- ``Experiment``, ``register``, ``unregister``, ``get``, ``all_experiments``, ``discover``,
  ``Discovery``, ``find_experiments_dir``, ``study_folders``, ``load_study``, ``resolve_config``
  (:mod:`.registry`, which re-exports them from its parts: ``registry.experiment``, the spec and the
  registry; ``registry.config_checks``, the checks of config values; ``registry.discovery``, the
  study folders);
- ``RunContext``, ``RunResult``, ``run_experiment`` (:mod:`.context`; what a run records, claims and
  privacy, in ``context.records``; its code version, versions and devices in ``context.provenance``;
  the run directory's lock in ``context.lock``);
- ``build_report`` (:mod:`.report`; degenerate training runs in :mod:`.degenerate`); the results
  store in :mod:`.store`; figure helpers in :mod:`.plots`; the one verdict rule for claims
  (interval against the paper's effect, with the minimum detectable effect) in :mod:`.verdict`.

Studies live outside the package, one folder per study (``experiments/paper_004/``); the
registry finds them in ``./experiments`` (or the repository root above), ``$DPFAIR_EXPERIMENTS``
or ``dpfair ... --experiments DIR`` (see :mod:`.registry`).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Experiment": "registry",
    "Discovery": "registry",
    "register": "registry",
    "unregister": "registry",
    "get": "registry",
    "discover": "registry",
    "all_experiments": "registry",
    "find_experiments_dir": "registry",
    "study_folders": "registry",
    "load_study": "registry",
    "resolve_config": "registry",
    "RunContext": "context",
    "RunResult": "context",
    "run_experiment": "context",
    "build_report": "report",
}

_MODULES = ("context", "degenerate", "plots", "registry", "report", "store", "verdict")

__all__ = sorted(_LAZY) + list(_MODULES)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
