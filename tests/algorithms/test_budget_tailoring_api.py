"""budget_tailoring's fit/spend/calibrate: calibrate hits an (epsilon, delta) target (checked with
the conversion written out here), spend is the paper's conversion at config.delta (fit records it), and what a fit records
(its per-release charges) adds up to the spend."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.data.dataset import make_dataset

SIZES = (30, 10)


def _data():
    rng = np.random.default_rng(0)
    n = sum(SIZES)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    s = np.repeat(np.arange(len(SIZES)), SIZES).astype(np.int32)
    y = (x @ np.array([1.0, -0.5]) + rng.normal(size=n) * (1 + s)).astype(np.float32)
    return make_dataset(x, y, s, num_groups=len(SIZES), num_classes=0)


def _eps_by_hand(rho: float, delta: float) -> float:
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))  # Bun & Steinke 2016, Prop. 1.3


@pytest.mark.parametrize("relation", ["replace_one_within_group", "add_remove"])
@pytest.mark.parametrize("method", ["dpse", "pooled"])
@pytest.mark.parametrize("epsilon, delta", [(0.3, 1e-5), (2.0, 1e-6), (12.0, 1e-8)])
def test_calibrate_hits_the_target(relation, method, epsilon, delta):
    cfg = bt.Config(method=method, relation=relation, delta=delta)
    hp = bt.calibrate(cfg, SIZES, (epsilon, delta), hparams=bt.Hyperparams(clip=0.7, tau_fraction=0.3))
    assert isinstance(hp, bt.Hyperparams) and hp.clip == 0.7 and hp.tau_fraction == 0.3  # others kept
    assert float(np.float32(hp.rho)) == hp.rho  # the float32 value the run uses
    sp = bt.spend(cfg, SIZES, hp)
    by_hand = _eps_by_hand(hp.rho, delta)
    assert sp.epsilon == pytest.approx(by_hand, rel=1e-12)
    assert by_hand <= epsilon and by_hand >= 0.99 * epsilon  # within the target, tight to 1%
    assert (sp.delta, sp.rho, sp.relation, sp.unit) == (delta, hp.rho, relation, "example")
    assert sp == bt.fit(jax.random.key(0), _data(), hp, dataclasses.replace(cfg, steps=1)).spend  # fit records it


@pytest.mark.parametrize("cfg", [bt.Config(steps=3, relation="add_remove"), bt.Config(steps=3, fairness=True),
                                 bt.Config(steps=3, method="equal"), bt.Config(steps=3, method="pooled")])
def test_fit_records_the_spend(cfg):
    """The charges a run reports (counts, stage 1, stage 2 from its released allocation) add up to
    the spend's rho; at twice the target the charges double (the record follows the run)."""
    data = _data()
    hp = bt.calibrate(cfg, SIZES, (1.5, cfg.delta))
    sp = bt.spend(cfg, SIZES, hp)
    res = bt.fit(jax.random.key(1), data, hp, cfg)
    assert res.spend == sp
    diag = res.diagnostics
    recorded = float(diag["rho_counts"]) + float(diag["rho_stage1"]) + float(diag["rho_stage2"])
    assert recorded == pytest.approx(sp.rho, rel=1e-5)
    assert _eps_by_hand(recorded, cfg.delta) == pytest.approx(sp.epsilon, rel=1e-5)
    diag2 = bt.fit(jax.random.key(1), data, dataclasses.replace(hp, rho=2 * hp.rho), cfg).diagnostics
    assert float(diag2["rho_counts"] + diag2["rho_stage1"] + diag2["rho_stage2"]) == pytest.approx(2 * recorded, rel=1e-5)


def test_calibrated_hparams_sweep_under_vmap():
    """hparams is a pytree: a grid of calibrated budgets runs as one vmapped program and equals the
    runs one by one."""
    data = _data()
    cfg = bt.Config(steps=3)
    rhos = jnp.asarray([bt.calibrate(cfg, SIZES, (e, cfg.delta)).rho for e in (0.5, 4.0)], jnp.float32)
    base = bt.Hyperparams()
    many = jax.jit(jax.vmap(lambda r: bt.fit(jax.random.key(2), data, dataclasses.replace(base, rho=r), cfg).params))(rhos)
    for i in range(2):
        one = bt.fit(jax.random.key(2), data, dataclasses.replace(base, rho=float(rhos[i])), cfg).params
        np.testing.assert_allclose(np.asarray(many[i]), np.asarray(one), rtol=1e-5, atol=1e-6)


def test_calibrate_inverts_the_conversion():
    for eps, delta in [(1e-3, 1e-5), (1.0, 1e-5), (50.0, 1e-10)]:
        rho = bt.calibrate(bt.Config(delta=delta), SIZES, (eps, delta)).rho
        assert _eps_by_hand(rho, delta) <= eps
        up = float(np.nextafter(np.float32(rho), np.float32(np.inf)))
        assert _eps_by_hand(up, delta) > eps  # the largest float32 rho within the target


@pytest.mark.parametrize("call, match", [
    (lambda: bt.calibrate(bt.Config(), SIZES, (1.0, 1e-6)), "config.delta"),
    (lambda: bt.calibrate(bt.Config(), SIZES, (1.0, 0.0)), "delta"),
    (lambda: bt.calibrate(bt.Config(method="nonprivate"), SIZES, (1.0, 1e-5)), "nonprivate"),
    (lambda: bt.calibrate(bt.Config(), SIZES, (-1.0, 1e-5)), "epsilon"),
    (lambda: bt.calibrate(bt.Config(), SIZES, 1.0), "target"),
    (lambda: bt.spend(bt.Config(), (30, 0), bt.Hyperparams()), "sizes"),
    (lambda: bt.spend(bt.Config(), 40, bt.Hyperparams()), "sizes"),
    (lambda: bt.Config(delta=0.0).validate(), "delta"),
])
def test_interface_refuses_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_spend_refuses_traced_rho():
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(lambda r: bt.spend(bt.Config(), SIZES, bt.Hyperparams(rho=r)).rho)(1.0)


def test_nonprivate_spend_is_infinite():
    sp = bt.spend(bt.Config(method="nonprivate"), SIZES, bt.Hyperparams())
    assert math.isinf(sp.epsilon)
