"""dpfair_jax.experiments: experiment specs, the resumable results store, plots and the report.

Public names (imported lazily, so ``import dpfair_jax.experiments`` stays cheap):

- ``Experiment``, ``register``, ``get``, ``discover``, ``all_experiments`` (:mod:`.registry`);
- ``RunContext``, ``run_experiment`` (:mod:`.context`);
- ``build_report`` (:mod:`.report`); plotting helpers in :mod:`.plots`.

Paper experiments live in ``paper_NNN.py`` modules of this package and the kit's own checks in
``kit.py``; :func:`discover` imports them and collects their registrations.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Experiment": "registry",
    "register": "registry",
    "get": "registry",
    "discover": "registry",
    "all_experiments": "registry",
    "RunContext": "context",
    "RunResult": "context",
    "run_experiment": "context",
    "build_report": "report",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
