"""One compile per study shape: Monte Carlo sweeps, DP-SGD grids and the DP-FERMI grid compile
their program once, whatever the grid values, seeds and chunks; the persistent cache stores it."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import compile_cache as cc
from dpfair_jax import models as M
from dpfair_jax import montecarlo as MC
from dpfair_jax.algorithms import dpsgd
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.fairness import evaluate
from dpfair_jax.data import make_dataset
from _sgd_keywords import dpsgd_fit_kw


def _block(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a), jax.block_until_ready(tree))


def test_sweep_traces_and_compiles_once_across_grid_seeds_and_chunks():
    traces = []

    def fn(key, a, b):
        traces.append(1)
        return {"m": a * jax.random.normal(key) + b}

    grid1 = {"a": [1.0, 2.0, 3.0], "b": [0.0, 1.0]}
    with cc.track_compiles() as first:
        r1 = MC.sweep(fn, jax.random.key(0), grid1, 10, chunk_size=4)  # 60 items, 15 chunks
        _block(r1.values)
    # one trace for the program (all grid points, trials and chunks) and one abstract evaluation
    # (``eval_shape``) that checks fn's output on the host before compiling; no compile for it
    assert len(traces) <= 2, "fn must be traced once for all grid points, trials and chunks"
    assert first.count("_engine") == 1, first.programs
    n_traces = len(traces)
    grid2 = {"a": [4.0, 5.0, 6.0], "b": [2.0, 3.0]}
    with cc.track_compiles() as second:
        r2 = MC.sweep(fn, jax.random.key(1), grid2, 10, chunk_size=4)
        _block(r2.values)
    assert len(traces) == n_traces and second.compiles == 0, second.programs
    assert r2.values["m"].shape == (3, 2, 10)
    # a different study shape (more trials) is a new program: exactly one more engine compile
    with cc.track_compiles() as third:
        _block(MC.sweep(fn, jax.random.key(1), grid2, 12, chunk_size=4).values)
    assert third.count("_engine") == 1 and len(traces) <= 2 * n_traces


def _logistic_data(n=64, d=3):
    k1, k2 = jax.random.split(jax.random.key(5))
    x = jax.random.normal(k1, (n, d))
    y = (x[:, 0] + 0.3 * jax.random.normal(k2, (n,)) > 0).astype(jnp.int32)
    s = (x[:, 1] > 0).astype(jnp.int32)
    return make_dataset(x, y, s, num_groups=2, num_classes=2)


def test_dpsgd_grid_compiles_once():
    data = _logistic_data()
    model = M.logistic(input_dim=data.x.shape[1])
    params = model.init(jax.random.key(0), data.x.shape[1])
    traces = []

    def run(key, clip, z, lr):
        traces.append(1)
        p, _ = dpsgd_fit_kw(key, model, params, data, clip_norm=clip, noise_multiplier=z, learning_rate=lr,
                           batch_size=16, steps=5, diagnostics=False)
        return p

    grid = jax.jit(jax.vmap(run, in_axes=(0, 0, 0, 0)))
    keys = jax.random.split(jax.random.key(1), 6)
    with cc.track_compiles():
        _block(grid(keys, jnp.full(6, 1.0), jnp.linspace(0.5, 2.0, 6), jnp.full(6, 0.1)))
    with cc.track_compiles() as second:
        out = _block(grid(jax.random.split(jax.random.key(2), 6), jnp.full(6, 0.5), jnp.linspace(1.0, 3.0, 6),
                          jnp.full(6, 0.2)))
    assert len(traces) == 1 and second.compiles == 0, second.programs
    assert np.all(np.isfinite(jax.tree_util.tree_leaves(out)[0]))
    # the unbatched trainer: a second call with new traced hyperparameters and key does not recompile
    kw = dict(batch_size=16, steps=5, diagnostics=False)
    _block(dpsgd_fit_kw(jax.random.key(3), model, params, data, clip_norm=1.0, noise_multiplier=1.0,
                       learning_rate=0.1, **kw))
    with cc.track_compiles() as again:
        _block(dpsgd_fit_kw(jax.random.key(4), model, params, data, clip_norm=2.0, noise_multiplier=0.5,
                           learning_rate=0.05, **kw))
    assert again.compiles == 0, again.programs


def test_fermi_grid_compiles_once_over_seeds_lams_and_noise():
    data = _logistic_data()
    model = M.logistic(input_dim=data.x.shape[1])
    cfg = F.FermiConfig(model=model, num_groups=2, steps=4, batch_size=16)
    traces = []

    def point(key, lam, zt, zw):
        traces.append(1)
        h = F.FermiHparams(lam=lam, noise_theta=zt, noise_w=zw)
        r = F.fit(key, data, h, cfg, batch_key=jax.random.fold_in(key, 7), validate=False)
        return evaluate(model, r.params, data)["error"]

    def seed(key, lams, zts, zws):
        return jax.vmap(point, in_axes=(None, 0, 0, 0))(key, lams, zts, zws)

    def study(key, lams, zts, zws, trials):
        return MC.run_trials(lambda k: seed(k, lams, zts, zws), key, trials, chunk_size=2)

    program = jax.jit(study, static_argnums=(4,))
    lams = jnp.asarray([0.0, 1.0, 2.0])
    with cc.track_compiles() as first:
        _block(program(jax.random.key(0), lams, jnp.full(3, 1.0), jnp.full(3, 2.0), 5))
    assert len(traces) == 1
    args2 = (jax.random.key(9), jnp.asarray([0.5, 3.0, 8.0]), jnp.full(3, 3.0), jnp.full(3, 0.5))
    with cc.track_compiles() as second:
        out = _block(program(*args2, 5))
    assert len(traces) == 1 and second.compiles == 0, second.programs
    assert out.shape == (5, 3) and first.compiles >= 1


def test_track_compiles_counts_and_validation(tmp_path):
    f = jax.jit(lambda x: jnp.sin(x) * 3.0)
    with cc.track_compiles() as st:
        f(jnp.arange(4.0)).block_until_ready()
        f(jnp.arange(4.0) + 1).block_until_ready()
    assert st.count("<lambda>") == 1 and st.compile_seconds > 0
    with pytest.raises(ValueError, match="min_compile_time_secs"):
        cc.enable(tmp_path, min_compile_time_secs=-1)
    before = jax.config.jax_compilation_cache_dir
    path = cc.enable(tmp_path / "c")
    try:
        assert cc.is_enabled() and jax.config.jax_compilation_cache_dir == str(path)
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    finally:
        cc.disable()
    assert jax.config.jax_compilation_cache_dir == before
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        cc.enable(tmp_path / "file")


def test_persistent_cache_hit_in_a_fresh_process(tmp_path):
    """A second process running the same program loads it from the cache instead of compiling."""
    script = textwrap.dedent(f"""
        import os, json
        os.environ["DPFAIR_COMPILE_CACHE"] = {str(tmp_path / "cache")!r}
        import jax, jax.numpy as jnp
        from dpfair_jax import compile_cache as cc
        cc.enable_from_env()
        f = jax.jit(lambda x: jnp.cumsum(jnp.tanh(x) * 2.0))
        with cc.track_compiles() as st:
            f(jnp.arange(7.0)).block_until_ready()
        print(json.dumps([st.count("<lambda>"), st.cache_hits]))
    """)
    outs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout.strip().splitlines()[-1])
    assert outs[0] == "[1, 0]"
    first_hits = int(outs[1].strip("[]").split(",")[1])
    assert first_hits >= 1, outs
    assert any((tmp_path / "cache").iterdir())
