"""Test-wide settings."""

from __future__ import annotations

import os
from pathlib import Path

import warnings

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
    themselves (``dpfair_jax.privacy.precision``); ``test_precision.py`` checks them against an
    explicit TF32 default. No effect on CPU."""
    if jax.default_backend() != "cpu":
        jax.config.update("jax_default_matmul_precision", "highest")
    yield


_SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def _slow_ids() -> list[str]:
    lines = _SLOW_LIST.read_text().splitlines() if _SLOW_LIST.exists() else []
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests named in ``tests/slow_tests.txt`` as ``slow`` (deselected by default through
    ``addopts = -m 'not slow'``; CI runs them with ``-m slow``). When the whole suite is collected,
    an entry that names no test is reported, so a renamed test does not silently re-join the
    default suite's budget or leave CI's slow stage."""
    ids = _slow_ids()
    exact = set(i for i in ids if not ("[" in i and not i.endswith("]")))
    prefixes = tuple(i for i in ids if i not in exact)
    used: set[str] = set()
    for item in items:
        nid = item.nodeid
        hit = nid if nid in exact else next((p for p in prefixes if nid.startswith(p)), None)
        if hit is not None:
            item.add_marker(pytest.mark.slow)
            used.add(hit)
    whole_suite = not config.args or [str(Path(a)) for a in config.args] == ["tests"]
    unused = [i for i in ids if i not in used]
    if whole_suite and unused:
        warnings.warn(f"tests/slow_tests.txt names tests that were not collected: {unused}", stacklevel=1)
