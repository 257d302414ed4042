"""DP-SGD's trio (fit / spend / calibrate), a user's own nnx module or pure apply, the label
checks of dpsgd.fit, and one validation of each input per fit."""

from __future__ import annotations

import collections
import dataclasses
import inspect
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpfair_jax import compile_cache as cc
from dpfair_jax import models as M
from dpfair_jax.algorithms import FitResult
from dpfair_jax.algorithms import dpsgd as D


def _data(n=120, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, d) + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
    return x, y


def _fit(key, model, params, data, *, clip_norm, noise_multiplier, learning_rate, **config):
    """``D.fit`` with the hyperparameters and config fields given as keywords."""
    hp = D.DPSGDHparams(learning_rate=learning_rate, clip_norm=clip_norm, noise_multiplier=noise_multiplier)
    return D.fit(key, data, hp, D.DPSGDConfig(model=model, **config), params=params)


@pytest.mark.parametrize("sampling,accountant", [("poisson", "rdp"),
                                                 pytest.param("poisson", "pld", marks=pytest.mark.slow),
                                                 pytest.param("fixed_size", "rdp", marks=pytest.mark.slow),
                                                 ("shuffle", "rdp")])
def test_spend_of_calibrate_hits_the_target(sampling, accountant):
    cfg = D.DPSGDConfig(model=M.logistic(), sampling=sampling, accountant=accountant, delta=1e-5,
                        batch_size=50, steps=40)
    base = D.DPSGDHparams(clip_norm=0.7, learning_rate=0.3)
    hp = D.calibrate(cfg, 1000, (1.5, 1e-5), hparams=base)
    assert dataclasses.replace(hp, noise_multiplier=base.noise_multiplier) == base  # only the noise moved
    eps = D.spend(cfg, 1000, hp).epsilon
    assert 0.99 * 1.5 <= eps <= 1.5
    # and it is the smallest multiplier that does (within 1%)
    assert D.spend(cfg, 1000, dataclasses.replace(hp, noise_multiplier=0.99 * hp.noise_multiplier)).epsilon > 1.5


@pytest.mark.parametrize("sampling", ["poisson", "fixed_size", "shuffle"])
def test_fit_records_its_spend(sampling):
    x, y = _data()
    model = M.logistic()
    cfg = D.DPSGDConfig(model=model, sampling=sampling, delta=1e-6, batch_size=20, steps=12)
    hp = D.DPSGDHparams(learning_rate=0.2, clip_norm=0.5, noise_multiplier=1.3)
    own = D.fit(jax.random.key(1), (x, y), hp, cfg)
    assert type(own) is FitResult
    sp = D.spend(cfg, len(x), hp)
    assert own.spend == sp
    assert sp.relation == ("add_remove" if sampling == "poisson" else "replace_one")
    assert own.report.steps == 12 and own.diagnostics["loss"].shape == (12,)
    # without params: the model's init from split(key)[0], training on split(key)[1]
    k_init, k_run = jax.random.split(jax.random.key(1))
    ref = D.fit(k_run, (x, y), hp, cfg, params=model.init(k_init, 4))
    np.testing.assert_array_equal(np.asarray(own.params["w"]), np.asarray(ref.params["w"]))
    assert ref.spend == sp


def test_hparams_are_a_pytree_for_grids():
    x, y = _data()
    model = M.logistic()
    params = model.init(jax.random.key(0), 4)
    cfg = D.DPSGDConfig(model=model, diagnostics=False, batch_size=20, steps=6)
    grid = D.DPSGDHparams(learning_rate=jnp.array([0.1, 0.3]), clip_norm=jnp.array([0.5, 1.0]),
                          noise_multiplier=jnp.array([0.8, 2.0]))
    leaves, treedef = jax.tree_util.tree_flatten(grid)
    assert len(leaves) == 3 and treedef.unflatten(leaves) == grid
    out = jax.jit(jax.vmap(lambda h: D.fit(jax.random.key(2), (x, y), h, cfg, params=params).params))(grid)
    for i in range(2):
        point = D.DPSGDHparams(float(grid.learning_rate[i]), float(grid.clip_norm[i]),
                               float(grid.noise_multiplier[i]))
        res = D.fit(jax.random.key(2), (x, y), point, cfg, params=params)
        np.testing.assert_allclose(np.asarray(out["w"][i]), np.asarray(res.params["w"]), rtol=1e-5, atol=1e-6)
    seen = []  # traced noise multiplier: no spend inside the trace (spend() takes the grid values)
    jax.eval_shape(lambda h: seen.append(D.fit(jax.random.key(2), (x, y), h, cfg, params=params).spend) or 0.0,
                   D.DPSGDHparams(0.1, 1.0, 1.0))
    assert seen == [None]


def test_trio_validation_names_the_field():
    x, y = _data()
    cfg = D.DPSGDConfig(model=M.logistic(), batch_size=20, steps=5)
    bad = {"learning_rate": -1.0, "clip_norm": 0.0, "noise_multiplier": float("nan")}
    for field, value in bad.items():
        hp = dataclasses.replace(D.DPSGDHparams(), **{field: value})
        with pytest.raises(ValueError, match=field):
            D.fit(jax.random.key(0), (x, y), hp, cfg)
    for field, value in {"batch_size": 0, "steps": -3, "max_batch_size": 10}.items():
        with pytest.raises(ValueError, match=field):
            D.fit(jax.random.key(0), (x, y), D.DPSGDHparams(), dataclasses.replace(cfg, **{field: value}))
    with pytest.raises(ValueError, match="batch_size"):
        D.fit(jax.random.key(0), (x, y), D.DPSGDHparams(), dataclasses.replace(cfg, batch_size=121))
    with pytest.raises(ValueError, match="multiple"):
        D.spend(dataclasses.replace(cfg, sampling="shuffle", steps=7), 120, D.DPSGDHparams())
    with pytest.raises(ValueError, match="relation"):
        D.DPSGDConfig(model=M.logistic(), sampling="poisson", relation="replace_one").validate()
    assert D.DPSGDConfig(model=M.logistic(), sampling="fixed_size", relation="replace_one").validate()
    with pytest.raises(ValueError, match="swap"):
        D.DPSGDConfig(model=M.logistic(), sampling="fixed_size", relation="swap").validate()
    with pytest.raises(ValueError, match="sampling"):
        D.DPSGDConfig(model=M.logistic(), sampling="uniform").validate()
    with pytest.raises(ValueError, match="config.delta"):
        D.calibrate(cfg, 120, (1.0, 1e-3), hparams=D.DPSGDHparams())
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
    p_nnx, d_nnx = _fit(jax.random.key(3), net, None, (x, y), **kw)[:2]
    p_kit, d_kit = _fit(jax.random.key(3), kit, kit_params, (x, y), **kw)[:2]
    assert D.resolve_per_example(kit)[0] == "mlp" and D.resolve_per_example(model)[0] == "vmap"
    np.testing.assert_allclose(np.asarray(p_nnx["hidden"]["kernel"]), np.asarray(p_kit["layers"][0]["kernel"]),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d_nnx["mean_grad_norm"]), np.asarray(d_kit["mean_grad_norm"]), rtol=1e-4)

    def apply(p, xb):
        h = jnp.tanh(xb @ p["hidden"]["kernel"] + p["hidden"]["bias"])
        return h @ p["out"]["kernel"] + p["out"]["bias"]

    p_apply = _fit(jax.random.key(3), apply, params, (x, y), loss="logistic", **kw).params
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
    jax.block_until_ready(_fit(jax.random.key(0), _Net(nnx.Rngs(0)), None, (x, y), **kw).params)
    with cc.track_compiles() as again:
        jax.block_until_ready(_fit(jax.random.key(1), _Net(nnx.Rngs(5)), None, (x, y), **kw).params)
    assert again.compiles == 0, again.programs

    class WithBatchNorm(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 1, rngs=rngs)
            self.bn = nnx.BatchNorm(1, rngs=rngs)

        def __call__(self, x):
            return self.bn(self.lin(x))

    with pytest.raises(ValueError, match="BatchStat"):
        _fit(jax.random.key(0), WithBatchNorm(nnx.Rngs(0)), None, (x, y), **kw)
    with pytest.raises(ValueError, match="params is required"):
        _fit(jax.random.key(0), lambda p, xi, yi: jnp.sum(p * xi), None, (x, y), **kw)


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
        _fit(jax.random.key(0), model, params, (x, labels(y)), clip_norm=1.0, noise_multiplier=1.0,
             learning_rate=0.1, batch_size=10, steps=2)
    assert not calls
    # masked-out rows are not checked; squared loss takes any real label
    _fit(jax.random.key(0), M.logistic(), M.logistic().init(jax.random.key(0), 4),
         (x, np.where(np.arange(len(y)) < 5, 7, y), (np.arange(len(y)) >= 5).astype(np.float32)),
         clip_norm=1.0, noise_multiplier=1.0, learning_rate=0.1, batch_size=10, steps=2)
    _fit(jax.random.key(0), M.linear(), M.linear().init(jax.random.key(0), 4), (x, labels(y) * 1.5),
         clip_norm=1.0, noise_multiplier=1.0, learning_rate=0.1, batch_size=10, steps=2)
    assert len(calls) == 2


#: Callers whose checks are not counted: the accountant's and the samplers' public primitives
#: (``privacy.accounting`` and the modules it re-exports: events, membership, zcdp, gaussian,
#: records; ``privacy.sampling``), which check their own arguments; a spend calls each of them
#: once, with values ``fit`` has validated.
_PRIMITIVES = tuple(os.path.join("dpfair_jax", "privacy", m)
                    for m in ("accounting", "events", "membership", "zcdp", "gaussian", "records", "sampling"))


def _count_validations(monkeypatch, inputs: dict[str, object]) -> collections.Counter:
    """Wrap every ``dpfair_jax._validation.check_*`` function, in ``_validation`` and in every
    ``dpfair_jax`` module that imported it by name, with a counter of the calls that validate one
    of ``inputs`` (label -> value): keyed by ``(check function, label)``. Arrays, floats, keys and
    models are recognised by identity; ints, strings and bools (shared objects in Python) by the
    ``name`` the check is given being the input's label. Calls from :data:`_PRIMITIVES` are not
    counted."""
    import dpfair_jax._validation as V

    counts: collections.Counter = collections.Counter()
    by_id = {id(val): label for label, val in inputs.items() if not isinstance(val, (str, int, bool))}
    by_name = {label: val for label, val in inputs.items() if isinstance(val, (str, int, bool))}
    originals = {name: fn for name, fn in vars(V).items() if name.startswith("check_") and callable(fn)}

    def wrap(fname, fn):
        sig = inspect.signature(fn)

        def counting(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if any(part in caller for part in _PRIMITIVES):
                return fn(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            named = dict(bound.arguments)
            label_name = named.pop("name", None)
            values = []
            for key, val in named.items():
                if key == "arrays":  # check_same_length(**arrays)
                    values += list(val.items())
                else:
                    values.append((label_name, val))
            for name, val in values:
                if isinstance(val, jax.core.Tracer):
                    continue
                if id(val) in by_id:
                    counts[(fname, by_id[id(val)])] += 1
                elif isinstance(val, (str, int, bool)) and name in by_name and by_name[name] == val:
                    counts[(fname, name)] += 1
            return fn(*args, **kwargs)

        return counting

    wrappers = {fn: wrap(name, fn) for name, fn in originals.items()}
    for modname, mod in list(sys.modules.items()):
        if mod is None or not (modname == "dpfair_jax" or modname.startswith("dpfair_jax.")):
            continue
        for attr, val in list(vars(mod).items()):
            if callable(val) and any(val is fn for fn in wrappers):
                monkeypatch.setattr(mod, attr, wrappers[next(fn for fn in wrappers if fn is val)])
    return counts


@pytest.mark.parametrize("sampling", ["poisson", "shuffle"])
def test_fit_validates_each_input_once(monkeypatch, sampling):
    """One ``dpsgd.fit`` validates each input (key, data, every hparams and config field) once:
    ``fit`` checks them at the top and calls private building blocks that do not check again."""
    x, y = _data(n=96)
    x, y = jnp.asarray(x), jnp.asarray(y)
    key = jax.random.key(11)
    cfg = D.DPSGDConfig(model=M.logistic(), sampling=sampling, batch_size=24, steps=8, delta=2e-5)
    hp = D.DPSGDHparams(learning_rate=0.25, clip_norm=0.75, noise_multiplier=1.25)
    inputs = {"key": key, "x": x, "y": y, **{f.name: getattr(hp, f.name) for f in dataclasses.fields(hp)},
              **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if getattr(cfg, f.name) is not None}}
    counts = _count_validations(monkeypatch, inputs)
    res = D.fit(key, (x, y), hp, cfg)
    assert res.spend is not None
    assert counts, "the counting wrappers saw no validation (the test is not wired)"
    twice = {k: c for k, c in counts.items() if c > 1}
    assert not twice, f"inputs validated more than once in one dpsgd.fit: {twice}"
    for must in [("check_threefry_key", "key"), ("check_finite", "x"), ("check_clip_norm", "clip_norm"),
                 ("check_noise_multiplier", "noise_multiplier"), ("check_int", "batch_size")]:
        assert counts[must] == 1, f"{must} not validated"
