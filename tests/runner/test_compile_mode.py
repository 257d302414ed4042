"""Quick runs compile with XLA's backend optimizations off; full runs and optimized_build keep them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.runner.context import FAST_COMPILE_FLAG, compile_mode, run_experiment
from dpfair_jax.runner.registry import Experiment

_SEEN: dict[str, tuple[bool, bool, float]] = {}


def _study(config, ctx):
    fast = jax.config.read(FAST_COMPILE_FLAG)
    with ctx.optimized_build():
        inner = jax.config.read(FAST_COMPILE_FLAG)
    # a program compiled under the run's mode gives the optimized build's numbers up to rounding
    x = jnp.linspace(-3.0, 3.0, 1001)
    value = float(jax.jit(lambda v: jnp.sum(jnp.tanh(v) * jnp.exp(-v * v)) + jnp.sum(jnp.log1p(v * v)))(x))
    _SEEN[ctx.size] = (fast, inner, value)
    ctx.add_claim("ran", "the study ran", measured=1, target=1, passed=True)


def test_quick_runs_compile_fast_full_runs_do_not(tmp_path):
    assert jax.config.read(FAST_COMPILE_FLAG) is False
    exp = Experiment("mode_probe", "kit", "compile mode", {"quick": {"seed": 0}, "full": {"seed": 0}}, _study)
    run_experiment(exp, size="quick", root=tmp_path / "q", progress=False)
    assert jax.config.read(FAST_COMPILE_FLAG) is False  # restored after the run
    run_experiment(exp, size="full", root=tmp_path / "f", progress=False)
    assert _SEEN["quick"][:2] == (True, False)  # fast in the run, optimized inside optimized_build
    assert _SEEN["full"][:2] == (False, False)
    x = np.linspace(-3.0, 3.0, 1001)
    reference = np.sum(np.tanh(x) * np.exp(-x * x)) + np.sum(np.log1p(x * x))  # float64, independent
    for size in ("quick", "full"):
        np.testing.assert_allclose(_SEEN[size][2], reference, rtol=1e-5)


def test_compile_mode_restores_on_error():
    try:
        with compile_mode(True):
            assert jax.config.read(FAST_COMPILE_FLAG) is True
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert jax.config.read(FAST_COMPILE_FLAG) is False
