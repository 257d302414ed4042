"""DP-SGD's trio (fit / spend / calibrate), a user's own nnx module or pure apply, and the label
checks of dpsgd.train."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpfair_jax import compile_cache as cc
from dpfair_jax import models as M
from dpfair_jax.algorithms import dpsgd as D


def _data(n=120, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, d) + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
    return x, y


@pytest.mark.parametrize("sampling,accountant", [("poisson", "rdp"),
                                                 pytest.param("poisson", "pld", marks=pytest.mark.slow),
                                                 pytest.param("fixed_size", "rdp", marks=pytest.mark.slow),
                                                 ("shuffle", "rdp")])
def test_spend_of_calibrate_hits_the_target(sampling, accountant):
    cfg = D.DPSGDConfig(model=M.logistic(), sampling=sampling, accountant=accountant, delta=1e-5)
    base = D.DPSGDHparams(batch_size=50, steps=40, clip_norm=0.7, learning_rate=0.3)
    hp = D.calibrate(cfg, 1000, (1.5, 1e-5), base)
    assert dataclasses.replace(hp, noise_multiplier=base.noise_multiplier) == base  # only the noise moved
    eps = D.spend(cfg, 1000, hp).epsilon
    assert 0.99 * 1.5 <= eps <= 1.5
    # and it is the smallest multiplier that does (within 1%)
    assert D.spend(cfg, 1000, dataclasses.replace(hp, noise_multiplier=0.99 * hp.noise_multiplier)).epsilon > 1.5


@pytest.mark.parametrize("sampling", ["poisson", "fixed_size", "shuffle"])
def test_fit_records_its_spend_and_equals_train(sampling):
    x, y = _data()
    model = M.logistic()
    params = model.init(jax.random.key(0), 4)
    cfg = D.DPSGDConfig(model=model, sampling=sampling, delta=1e-6)
    hp = D.DPSGDHparams(learning_rate=0.2, clip_norm=0.5, noise_multiplier=1.3, batch_size=20, steps=12)
    res = D.fit(jax.random.key(1), (x, y), hp, cfg, params=params)
    sp = D.spend(cfg, len(x), hp)
    assert res.spend == sp
    assert sp.relation == ("add_remove" if sampling == "poisson" else "replace_one")
    p_train, _ = D.train(jax.random.key(1), model, params, (x, y), clip_norm=0.5, noise_multiplier=1.3,
                         learning_rate=0.2, batch_size=20, steps=12, sampling=sampling)
    for a, b in zip(jax.tree_util.tree_leaves(res.params), jax.tree_util.tree_leaves(p_train)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # without params: the model's init from split(key)[0], training on split(key)[1]
    k_init, k_run = jax.random.split(jax.random.key(1))
    own = D.fit(jax.random.key(1), (x, y), hp, cfg)
    ref, _ = D.train(k_run, model, model.init(k_init, 4), (x, y), clip_norm=0.5, noise_multiplier=1.3,
                     learning_rate=0.2, batch_size=20, steps=12, sampling=sampling)
    np.testing.assert_array_equal(np.asarray(own.params["w"]), np.asarray(ref["w"]))


def test_hparams_are_a_pytree_for_grids():
    x, y = _data()
    model = M.logistic()
    params = model.init(jax.random.key(0), 4)
    cfg = D.DPSGDConfig(model=model, diagnostics=False)
    grid = D.DPSGDHparams(learning_rate=jnp.array([0.1, 0.3]), clip_norm=jnp.array([0.5, 1.0]),
                          noise_multiplier=jnp.array([0.8, 2.0]), batch_size=20, steps=6)
    leaves, treedef = jax.tree_util.tree_flatten(grid)
    assert len(leaves) == 3 and treedef.unflatten(leaves) == grid
    out = jax.jit(jax.vmap(lambda h: D.fit(jax.random.key(2), (x, y), h, cfg, params=params).params))(grid)
    for i in range(2):
        point = D.DPSGDHparams(float(grid.learning_rate[i]), float(grid.clip_norm[i]),
                               float(grid.noise_multiplier[i]), 20, 6)
        res = D.fit(jax.random.key(2), (x, y), point, cfg, params=params)
        np.testing.assert_allclose(np.asarray(out["w"][i]), np.asarray(res.params["w"]), rtol=1e-5, atol=1e-6)
    seen = []  # traced noise multiplier: no spend inside the trace (spend() takes the grid values)
    jax.eval_shape(lambda h: seen.append(D.fit(jax.random.key(2), (x, y), h, cfg, params=params).spend) or 0.0,
                   D.DPSGDHparams(0.1, 1.0, 1.0, 20, 6))
    assert seen == [None]


def test_trio_validation_names_the_field():
    x, y = _data()
    cfg = D.DPSGDConfig(model=M.logistic())
    bad = {"learning_rate": -1.0, "clip_norm": 0.0, "noise_multiplier": float("nan"), "batch_size": 0, "steps": -3}
    for field, value in bad.items():
        hp = dataclasses.replace(D.DPSGDHparams(batch_size=20, steps=5), **{field: value})
        with pytest.raises(ValueError, match=field):
            D.fit(jax.random.key(0), (x, y), hp, cfg)
    with pytest.raises(ValueError, match="relation"):
        D.DPSGDConfig(model=M.logistic(), sampling="poisson", relation="replace_one").validate()
    assert D.DPSGDConfig(model=M.logistic(), sampling="fixed_size", relation="replace_one").validate()
    with pytest.raises(ValueError, match="swap"):
        D.DPSGDConfig(model=M.logistic(), sampling="fixed_size", relation="swap").validate()
    with pytest.raises(ValueError, match="sampling"):
        D.DPSGDConfig(model=M.logistic(), sampling="uniform").validate()
    with pytest.raises(ValueError, match="config.delta"):
        D.calibrate(cfg, 120, (1.0, 1e-3), D.DPSGDHparams(batch_size=20, steps=5))
    with pytest.raises(ValueError, match="model"):
        D.DPSGDConfig().validate()


class _Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(4, 5, rngs=rngs)
        self.out = nnx.Linear(5, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


@pytest.mark.slow
def test_users_nnx_module_and_pure_apply_train_like_the_kit_mlp():
    """The same network as models.mlp((5,)): an nnx module (vmap path) and a pure apply (vmap path)
    reach the kit MLP's parameters (ghost path) from the same start, key and batches."""
    x, y = _data()
    net = _Net(nnx.Rngs(0))
    kit = M.mlp((5,))
    model, params = M.from_nnx(net, (4,))
    assert model.num_outputs == 1 and model.layers is None
    kit_params = {"layers": {0: {"kernel": params["hidden"]["kernel"], "bias": params["hidden"]["bias"]},
                             1: {"kernel": params["out"]["kernel"], "bias": params["out"]["bias"]}}}
    kw = dict(clip_norm=0.3, noise_multiplier=0.7, learning_rate=0.5, batch_size=16, steps=6)
    p_nnx, d_nnx = D.train(jax.random.key(3), net, None, (x, y), **kw)
    p_kit, d_kit = D.train(jax.random.key(3), kit, kit_params, (x, y), **kw)
    assert D.resolve_per_example(kit)[0] == "mlp" and D.resolve_per_example(model)[0] == "vmap"
    np.testing.assert_allclose(np.asarray(p_nnx["hidden"]["kernel"]), np.asarray(p_kit["layers"][0]["kernel"]),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d_nnx["mean_grad_norm"]), np.asarray(d_kit["mean_grad_norm"]), rtol=1e-4)

    def apply(p, xb):
        h = jnp.tanh(xb @ p["hidden"]["kernel"] + p["hidden"]["bias"])
        return h @ p["out"]["kernel"] + p["out"]["bias"]

    p_apply, _ = D.train(jax.random.key(3), apply, params, (x, y), loss="logistic", **kw)
    np.testing.assert_allclose(np.asarray(p_apply["out"]["kernel"]), np.asarray(p_kit["layers"][1]["kernel"]),
                               rtol=1e-4, atol=1e-6)
    # the trained parameters go back into the module
    state = nnx.state(net, nnx.Param)
    nnx.replace_by_pure_dict(state, p_nnx)
    nnx.update(net, state)
    np.testing.assert_allclose(np.asarray(net(x[:3])[:, 0]), np.asarray(model.apply(p_nnx, x[:3])), rtol=1e-6)


def test_users_module_compiles_once_and_stateful_modules_are_refused():
    x, y = _data()
    kw = dict(clip_norm=0.3, noise_multiplier=0.7, learning_rate=0.5, batch_size=16, steps=3)
    jax.block_until_ready(D.train(jax.random.key(0), _Net(nnx.Rngs(0)), None, (x, y), **kw))
    with cc.track_compiles() as again:
        jax.block_until_ready(D.train(jax.random.key(1), _Net(nnx.Rngs(5)), None, (x, y), **kw))
    assert again.compiles == 0, again.programs

    class WithBatchNorm(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 1, rngs=rngs)
            self.bn = nnx.BatchNorm(1, rngs=rngs)

        def __call__(self, x):
            return self.bn(self.lin(x))

    with pytest.raises(ValueError, match="BatchStat"):
        D.train(jax.random.key(0), WithBatchNorm(nnx.Rngs(0)), None, (x, y), **kw)
    with pytest.raises(ValueError, match="params is required"):
        D.train(jax.random.key(0), M.logistic(), None, (x, y), **kw)


@pytest.mark.parametrize("model,labels,match", [
    (M.logistic(), lambda y: 2 * y - 1, r"\{0, 1\}.*\(y \+ 1\) // 2"),
    (M.logistic(), lambda y: 2 * y, r"\{0, 1\}"),
    (M.logistic(), lambda y: y + 0.5, r"\{0, 1\}"),
    (M.multinomial_logistic(3), lambda y: 3 * y, r"\[0, 3\)"),
    (M.mlp((3,), out=3), lambda y: y - 1, r"\[0, 3\)"),
])
def test_labels_the_loss_cannot_take_are_refused_before_compute(monkeypatch, model, labels, match):
    x, y = _data()
    params = model.init(jax.random.key(0), 4)
    calls = []
    monkeypatch.setattr(D, "_train_program", lambda *a, **k: calls.append(1) or (None, {}, None))
    with pytest.raises(ValueError, match=f"y: .*{match}"):
        D.train(jax.random.key(0), model, params, (x, labels(y)), clip_norm=1.0, noise_multiplier=1.0,
                learning_rate=0.1, batch_size=10, steps=2)
    assert not calls
    # masked-out rows are not checked; squared loss takes any real label
    D.train(jax.random.key(0), M.logistic(), M.logistic().init(jax.random.key(0), 4),
            (x, np.where(np.arange(len(y)) < 5, 7, y), (np.arange(len(y)) >= 5).astype(np.float32)),
            clip_norm=1.0, noise_multiplier=1.0, learning_rate=0.1, batch_size=10, steps=2)
    D.train(jax.random.key(0), M.linear(), M.linear().init(jax.random.key(0), 4), (x, labels(y) * 1.5),
            clip_norm=1.0, noise_multiplier=1.0, learning_rate=0.1, batch_size=10, steps=2)
    assert len(calls) == 2
