"""The repository's study folders (``experiments/<name>/``), loaded for the tests of study code."""

from __future__ import annotations

import types
from pathlib import Path

from dpfair_jax.runner import registry

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


def load_study(name: str) -> types.ModuleType:
    """The ``study`` module of ``experiments/<name>/`` (loaded through the registry, experiments registered)."""
    return registry.load_study(EXPERIMENTS / name)
