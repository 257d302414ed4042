"""The stratified mean estimators as one algorithm: fit / spend / calibrate (mean_estimation)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import NeighboringRelation

from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.privacy import accounting as acc

K = 3
SIZES = (40, 25, 35)
DELTA = 1e-6


def _data():
    rng = np.random.default_rng(0)
    s = np.repeat(np.arange(K), SIZES).astype(np.int32)
    x = (rng.normal(size=(s.size, 2)) + s[:, None]).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(s)


CONFIGS = [me.MeanConfig(method=m, num_groups=K, relation=r, counts=c, delta=DELTA)
           for m in me.METHODS for r in ("replace_one_within_group", "replace_one", "add_remove")
           for c in ("auto", "noisy") if not (r != "replace_one_within_group" and c == "noisy")]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.method}-{c.relation}-{c.counts}")
@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_spend_of_calibrate_hits_the_target(config, eps):
    target = (eps, 0.0 if config.pure else DELTA)
    hp = me.calibrate(config, SIZES, target)
    sp = me.spend(config, SIZES, hp)
    assert sp.epsilon <= eps and sp.epsilon >= 0.99 * eps, (sp.epsilon, eps)
    assert sp.relation == config.relation
    if config.pure:
        assert sp.delta == 0.0 and hp.epsilon == eps
    else:
        assert sp.delta == DELTA
        # the zCDP total is the target's, shared between the estimator and the counts
        assert sp.rho == pytest.approx(acc.dp_to_rho(eps, DELTA), rel=1e-9)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.method}-{c.relation}-{c.counts}")
def test_fit_records_the_spend(config):
    x, s = _data()
    hp = me.calibrate(config, SIZES, (1.0, 0.0 if config.pure else DELTA),
                      hparams=me.MeanHparams(center=1.0, clip=3.0, R=3.0))
    out = me.fit(jax.random.key(0), (x, s), hp, config)
    sp = me.spend(config, SIZES, hp)
    assert out.spend == sp  # fit records its spend
    assert float(out.diagnostics["rho"]) == pytest.approx(sp.rho, rel=1e-6)
    counts = sp.rho - (0.5 * hp.epsilon ** 2 if config.method == "laplace" else hp.rho)
    assert float(out.diagnostics["count_rho"]) == pytest.approx(counts, rel=1e-5, abs=1e-12)
    assert (float(out.diagnostics["count_rho"]) > 0) == config.noisy_counts
    assert out.params.estimate.shape == (2,) and np.all(np.isfinite(out.params.estimate))


@pytest.mark.slow
def test_fit_is_the_stratified_estimator_bitwise():
    """fit dispatches to the existing estimators with the config's count budget: same numbers."""
    x, s = _data()
    key = jax.random.key(3)
    hp = me.MeanHparams(rho=0.3, epsilon=0.8, center=1.0, clip=2.0, R=2.0, gamma=0.05)
    for relation in ("replace_one_within_group", "add_remove"):
        cfg = me.MeanConfig(method="gaussian", num_groups=K, relation=relation)
        a = me.fit(key, (x, s), hp, cfg).params
        b = me.stratified_gaussian_mean(key, x, s, K, center=1.0, clip=2.0, rho=0.3, relation=relation)
        np.testing.assert_array_equal(a.group_means, b.group_means)
        np.testing.assert_array_equal(a.sizes, b.sizes)
        cfg = dataclasses.replace(cfg, method="laplace")
        a = me.fit(key, (x, s), hp, cfg).params
        b = me.stratified_laplace_mean(key, x, s, K, R=2.0, gamma=0.05, epsilon=0.8, relation=relation)
        np.testing.assert_array_equal(a.group_means, b.group_means)
        cfg = dataclasses.replace(cfg, method="coinpress")
        a = me.fit(key, (x, s), hp, cfg).params
        rhos = jnp.asarray(0.3, jnp.float32) * jnp.asarray((0.25, 0.75), jnp.float32)
        b = me.stratified_coinpress(key, x, s, K, center=1.0, rhos=rhos, relation=relation,
                                    count_rho=None if relation == "replace_one_within_group"
                                    else 0.1 * jnp.float32(0.3))
        np.testing.assert_array_equal(a.group_means, b.group_means)
    # one group: x alone
    one = me.fit(key, x[:, 0], hp, me.MeanConfig(method="gaussian"))
    np.testing.assert_array_equal(one.params.estimate[0],
                                  me.gaussian_mean(key, x[:, 0], center=1.0, clip=2.0, rho=0.3))


def test_fit_sweeps_a_budget_grid_under_jit_and_vmap():
    x, s = _data()
    cfg = me.MeanConfig(method="coinpress", num_groups=K, relation="add_remove")
    rhos = jnp.asarray([0.1, 0.5, 2.0])

    @jax.jit
    def grid(key, rho):
        return me.fit(key, (x, s), me.MeanHparams(rho=rho, center=1.0), cfg)

    out = jax.vmap(grid, in_axes=(None, 0))(jax.random.key(1), rhos)
    assert out.params.estimate.shape == (3, 2)
    for i, r in enumerate([0.1, 0.5, 2.0]):
        single = me.fit(jax.random.key(1), (x, s), me.MeanHparams(rho=r, center=1.0), cfg)
        np.testing.assert_allclose(out.params.estimate[i], single.params.estimate, rtol=1e-5, atol=1e-6)
        assert float(out.diagnostics["rho"][i]) == pytest.approx(me.spend(cfg, SIZES, me.MeanHparams(rho=r)).rho, rel=1e-6)


@pytest.mark.parametrize("make,field", [
    (lambda: me.MeanConfig(method="median").validate(), "method"),
    (lambda: me.MeanConfig(relation="swap").validate(), "swap"),
    (lambda: me.MeanConfig(counts="exact").validate(), "counts"),
    (lambda: me.MeanConfig(split=(0.5, 0.6)).validate(), "split"),
    (lambda: me.MeanConfig(delta=0.0).validate(), "delta"),
    (lambda: me.spend(me.MeanConfig(num_groups=2), (10,), me.MeanHparams()), "sizes"),
    (lambda: me.spend(me.MeanConfig(), (10,), me.MeanHparams(rho=jnp.ones(3))), "rho"),
    (lambda: me.calibrate(me.MeanConfig(), (10,), (1.0, 0.0)), "delta"),
    (lambda: me.calibrate(me.MeanConfig(), (10,), (1.0, 1e-5)), "config.delta"),
    (lambda: me.calibrate(me.MeanConfig(), (10,), 1.0), "target"),
    (lambda: me.fit(jax.random.key(0), np.zeros((4, 2)), me.MeanHparams(), me.MeanConfig(num_groups=2)), "data"),
])
def test_bad_input_names_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


def test_relation_enum_accepted_and_recorded_by_name():
    cfg = me.MeanConfig(method="gaussian", relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    sp = me.spend(cfg, (10,), me.MeanHparams(rho=0.5))
    assert sp.relation == "add_remove"
    assert sp == me.spend(me.MeanConfig(method="gaussian", relation="add_remove"), (10,), me.MeanHparams(rho=0.5))


def test_dataset_input_and_its_checks():
    from dpfair_jax.data.dataset import make_dataset

    x, s = _data()
    ds = make_dataset(np.asarray(x), np.zeros(len(s), np.int32), np.asarray(s), num_groups=K)
    cfg = me.MeanConfig(method="gaussian", num_groups=K)
    a = me.fit(jax.random.key(0), ds, me.MeanHparams(), cfg)
    b = me.fit(jax.random.key(0), (x, s), me.MeanHparams(), cfg)
    np.testing.assert_array_equal(a.params.group_means, b.params.group_means)
    with pytest.raises(ValueError, match="num_groups"):
        me.fit(jax.random.key(0), ds, me.MeanHparams(), me.MeanConfig(num_groups=2))
    with pytest.raises(ValueError, match="mask"):
        me.fit(jax.random.key(0), ds.replace(mask=np.ones(len(s), bool)), me.MeanHparams(), cfg)
