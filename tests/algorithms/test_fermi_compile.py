"""DP-FERMI and PF-LD called eagerly in a Python loop compile one program: the hyperparameters
(lambda, noise multipliers, step sizes, clip norms, radius), the key and the data values are traced
arguments of a program keyed on the static config and the shapes."""

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import compile_cache as cc
from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.data import make_dataset


def _data(n=48, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    return make_dataset(x, (x[:, 0] > 0).astype(np.int32), np.arange(n) % 2, num_groups=2)


def _leaves(res):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves((res.params, res.diagnostics["W"]))]


def test_a_python_loop_over_hparams_compiles_fit_once():
    data, other = _data(), _data(seed=1)
    cfg = F.FermiConfig(model=M.logistic(input_dim=3), num_groups=2, steps=5, batch_size=12)
    keys = [jax.random.key(i) for i in range(4)]
    grid = [F.FermiHparams(lam=0.0), F.FermiHparams(lam=0.5, noise_theta=1.0, noise_w=2.0),
            F.FermiHparams(lam=2, lr_theta=np.float32(0.1), clip_theta=jnp.asarray(0.5), radius=3.0),
            F.FermiHparams(lam=1.0, lr_w=0.2, clip_w=2.0, noise_w=0.5)]
    with cc.track_compiles() as first:
        out = [F.fit(keys[0], data, grid[0], cfg)]
    assert first.count("_fit_impl") == 1, first.programs
    with cc.track_compiles() as again:
        for k, hp in zip(keys[1:], grid[1:]):
            out.append(F.fit(k, data, hp, cfg))
        out.append(F.fit(keys[0], other, grid[1], cfg))  # new data values, same shapes
        jax.block_until_ready(out)
    assert again.count("_fit_impl") == 0, again.programs
    # the cached program computes what the same call traced inside a caller's jit computes
    traced = jax.jit(jax.vmap(lambda kk, h: F.fit(kk, data, h, cfg, validate=False)))
    stack = jax.tree_util.tree_map(lambda *v: jnp.asarray(v, jnp.float32), *grid)
    want = traced(jnp.stack(keys), stack)
    for i, res in enumerate(out[:4]):
        for a, b in zip(_leaves(res), _leaves(want)):
            np.testing.assert_allclose(a, b[i], rtol=2e-5, atol=1e-6)
    # distinct hyperparameters give distinct runs (the values are not baked in)
    assert not np.allclose(_leaves(out[1])[0], _leaves(out[2])[0])
    # a new config is a new program; PF-LD (another regularizer) has its own
    with cc.track_compiles() as other_cfg:
        F.fit(keys[0], data, grid[1], F.FermiConfig(model=cfg.model, num_groups=2, steps=6, batch_size=12))
        pcfg = pfld.config(model=cfg.model, num_groups=2, steps=5, batch_size=12)
        pfld.fit(keys[0], data, grid[1], pcfg)
        pfld.fit(keys[1], data, grid[2], pcfg)
    assert other_cfg.count("_fit_impl") == 2, other_cfg.programs
