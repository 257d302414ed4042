"""PRNG key implementations: every trio ``fit`` takes threefry2x32 keys only.

``rbg`` / ``unsafe_rbg`` keys (``jax.random.key(seed, impl="rbg")``) draw faster on XLA:CPU but,
under ``vmap``, generate a whole batch from the first key (JAX's documented behaviour), which
breaks the kit's per-trial streams; they are refused with a clear error before any compute, also
when the key is traced (a typed key carries its implementation in its dtype). See
docs/performance.md ("The noise generator") for the measured cost of threefry's draw.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import dpfair_jax.algorithms as A
from dpfair_jax import compile_cache as cc
from dpfair_jax import models as M
from dpfair_jax.algorithms import dpsgd as D

from _trio_cases import CASES

IMPLS = ("rbg", "unsafe_rbg")


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_trio_fit_refuses_rbg_keys_before_compute(name):
    case = CASES[name]()
    mod = getattr(A, case.module)
    hp = mod.calibrate(case.config, case.sizes, case.target)
    for impl in IMPLS:
        key = jax.random.key(0, impl=impl)  # (creating the key compiles its seeding)
        with cc.track_compiles() as stats, pytest.raises(ValueError, match=f"'{impl}'.*threefry2x32"):
            mod.fit(key, case.data, hp, case.config)
        assert stats.compiles == 0, f"{name}: compiled {stats.programs} before refusing an {impl} key"


def _small():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    cfg = D.DPSGDConfig(model=M.logistic(), batch_size=10, steps=3, diagnostics=False)
    return (x, y), cfg


@pytest.mark.parametrize("impl", IMPLS)
def test_dpsgd_fit_refuses_traced_rbg_keys(impl):
    # Under jit or vmap the key is a tracer; its dtype still names the implementation.
    data, cfg = _small()
    hp = D.DPSGDHparams()
    with pytest.raises(ValueError, match=f"'{impl}'"):
        jax.jit(lambda k: D.fit(k, data, hp, cfg).params)(jax.random.key(0, impl=impl))
    keys = jax.random.split(jax.random.key(0, impl=impl), 3)
    with pytest.raises(ValueError, match=f"'{impl}'"):
        jax.vmap(lambda k: D.fit(k, data, hp, cfg).params)(keys)


def test_threefry_keys_still_run_traced():
    data, cfg = _small()
    hp = D.DPSGDHparams()
    keys = jax.random.split(jax.random.key(0), 2)
    out = jax.jit(jax.vmap(lambda k: D.fit(k, data, hp, cfg).params))(keys)
    direct = D.fit(keys[1], data, hp, cfg).params
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(direct)):
        np.testing.assert_allclose(np.asarray(a)[1], np.asarray(b), rtol=1e-6, atol=1e-7)
