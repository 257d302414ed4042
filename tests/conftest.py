"""Test-wide settings.

Slow tests (over ~5 s of one core) carry ``@pytest.mark.slow`` at the test, or
``pytest.param(..., marks=pytest.mark.slow)`` for single parametrizations; the default suite
deselects them (``addopts = -m 'not slow'``) and CI runs them in its second stage (``-m slow``).
Tests that pin a noise scale for ``tests/mutation/halve_noise.py`` stay unmarked: the mutation
check runs the default suite only."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import pytest

# Studies are found in the repository's experiments/ wherever pytest runs from (a test that checks
# discovery from the working directory removes this).
os.environ.setdefault("DPFAIR_EXPERIMENTS", str(Path(__file__).resolve().parents[1] / "experiments"))


@pytest.fixture(autouse=True, scope="session")
def _float32_references_on_accelerators():
    """On GPUs, compute the tests' own references (vmap of grad, NumPy-like checks) with full
    float32 matrix products: JAX's TF32 default there differs from float32 by ~1e-3 relative,
    far above the float32 tolerances these tests use. The kit's privacy primitives set this
    themselves (``dpfair_jax.privacy.precision``); ``privacy/test_precision.py`` checks them against an
    explicit TF32 default. No effect on CPU."""
    if jax.default_backend() != "cpu":
        jax.config.update("jax_default_matmul_precision", "highest")
    yield
