"""The repository's study folders (``experiments/<name>/``), loaded for the tests of study code."""

from __future__ import annotations

import importlib
import types
from pathlib import Path

from dpfair_jax.runner import registry

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


def load_study(name: str) -> types.ModuleType:
    """The ``study`` module of ``experiments/<name>/`` (loaded through the registry, experiments registered)."""
    return registry.load_study(EXPERIMENTS / name)


def load_study_module(name: str, module: str) -> types.ModuleType:
    """The module ``experiments/<name>/<module>.py`` (its study folder loaded first, as :func:`load_study`)."""
    load_study(name)
    return importlib.import_module(f"{registry.STUDY_PACKAGE}.{name}.{module}")
