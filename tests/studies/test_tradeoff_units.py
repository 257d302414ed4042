"""The tradeoff study's privacy unit: the example-level default and the paper's sensitive-attribute
unit (Definition 2.2). Every method runs and is accounted for a change of one s_i (spends equal to
an independent composition of privacy.attribute's curves, DP-SGD zero, all within the target), the
paper's Theorem 3.3 record beside it, and bad units refused before any compute."""

from __future__ import annotations

import math

import numpy as np
import pytest
from studies.test_tradeoff_study import _fake_program, _frame

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld_epoch as PE
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import attribute as At
from dpfair_jax.privacy import replace_rdp as R
from dpfair_jax.privacy import selection as S
from dpfair_jax.studies import tradeoff as T

LAW = S.RandomStopping(mean=1.5, shape=1.0)
KW = dict(target="label", group="sex", lams=[1.0], epsilons=[2.0], replicates=1, epochs=1, batch_size=100,
          runs=LAW)


@pytest.mark.parametrize("unit", ["all_features", "user", None, "Example"])
def test_bad_units_are_refused_before_compute(monkeypatch, unit):
    def boom(*a, **k):
        raise AssertionError("compiled before the check")

    monkeypatch.setattr(T, "_program", boom)
    with pytest.raises(ValueError, match="privacy_unit"):
        T.tradeoff_frontier_study(_frame(200), **KW, privacy_unit=unit)


def _independent_epsilon(res, m, n):
    """The selection's epsilon for a change of one s_i, composed here from privacy.attribute's
    pieces and the example-level ledgers (not through the algorithms' attribute functions)."""
    z, z2 = res.info["noise"][f"{m}@2"]
    if m == "pfld_epoch":
        cfg = PE.PFLDEpochConfig(model=M.logistic(), num_groups=2, epochs=1, batch_size=100, delta=res.info["delta"])
        steps, extra = cfg.steps(n), math.sqrt(2.0) / z2
        mu = 2.0 / z
        event = PE.run_event(cfg, n, z, z2)
        z_step, unsampled = z, cfg.epochs * 2.0 / z2**2  # (c): T subsampled steps, epochs Gaussians
    else:
        cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=res.info["steps"], batch_size=100,
                            delta=res.info["delta"], projection="box" if m == "pfld_stochastic" else "ball")
        steps, extra = res.info["steps"], math.sqrt(2.0) / cfg.count_noise_multiplier
        mu = 2.0 * math.sqrt(z**-2 + z2**-2)
        event = F.spend(cfg, n, F.FermiHparams(noise_theta=z, noise_w=z2)).event
        z_step, unsampled = (z**-2 + z2**-2) ** -0.5, 2.0 / cfg.count_noise_multiplier**2
    part = At.poisson_participation(steps, 100 / n)
    o = np.asarray(At.ORDERS)
    direct = steps * R.subsampled_gaussian_replace_rdp(100 / n, z_step, o) + unsampled * o
    curve = np.minimum(np.minimum(At.membership_visible_rdp(At.ORDERS, mu, part, extra_mu=extra),
                                  At.replace_rdp_from_add_remove(event, At.ORDERS)), direct)
    return At.attribute_selection_epsilon(curve, LAW, res.info["delta"])


@pytest.fixture(scope="module")
def attr_study():
    mp = pytest.MonkeyPatch()
    mp.setattr(T, "_program", _fake_program)  # the wiring and the accounting; training is checked below
    try:
        yield T.tradeoff_frontier_study(_frame(600), **KW, privacy_unit="sensitive_attribute")
    finally:
        mp.undo()


def test_every_method_is_accounted_for_a_change_of_one_s(attr_study):
    res, t = attr_study, attr_study.table
    n = res.info["n_train"]
    assert set(t["method"]) == set(T.METHODS) and (t["unit"] == "sensitive-attribute").all()
    assert res.unit == "sensitive-attribute" and res.info["privacy_unit"] == "sensitive_attribute"
    for m in T.METHODS:
        sp = res.spends[(m, 2.0)]
        assert (sp.unit, sp.relation) == ("sensitive_attribute", "replace_one")
        row = t[t["method"] == m].iloc[0]
        if m == "dpsgd":  # reads no s: nothing spent, example-level noise kept
            assert (sp.epsilon, sp.delta, row["spend_epsilon"]) == (0.0, 0.0, 0.0)
            assert math.isnan(row["thm33_epsilon"])
            continue
        assert 0 < sp.epsilon <= 2.0 and sp.delta >= res.info["delta"]
        assert sp.epsilon == pytest.approx(_independent_epsilon(res, m, n), rel=1e-9)
        assert row["thm33_epsilon"] > 0 and row["unit_ratio"] == pytest.approx(sp.epsilon / row["thm33_epsilon"])


def test_dpsgd_keeps_its_example_level_noise(attr_study):
    """DP-SGD's multiplier is the example-level calibration of its selection (tight at the target)."""
    import dp_accounting

    res = attr_study
    z = res.info["noise"]["dpsgd@2"][0]
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=res.info["steps"], batch_size=100,
                        delta=res.info["delta"])

    def eps(zz):
        ev = F.spend(cfg, res.info["n_train"], F.FermiHparams(noise_theta=zz, noise_w=1000.0 * zz)).event
        return S.selection_epsilon(dp_accounting.ComposedDpEvent([ev, dp_accounting.GaussianDpEvent(30.0)]),
                                   LAW, res.info["delta"])

    assert eps(z) <= 2.0 < eps(z / 1.01)


@pytest.mark.slow
def test_sensitive_attribute_study_trains_every_method_end_to_end():
    res = T.tradeoff_frontier_study(_frame(400), **KW, privacy_unit="sensitive_attribute")
    t = res.table
    assert len(t) == 4 and np.isfinite(t["error"]).all() and (t["spend_epsilon"] <= 2.0).all()
