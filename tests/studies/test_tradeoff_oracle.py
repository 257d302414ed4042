"""Jagielski et al.'s (2019) DP-oracle-learner as the tradeoff study's method "jagielski_in"
(dpfair_jax.studies.tradeoff.oracle): its refusals, its event against dp-accounting's accountant,
the study's program against a direct ``jagielski_in.fit`` call (bitwise), a small study end to end
under both units, and at epsilon = inf the EO violation falling as the constraint tightens."""

from __future__ import annotations

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import jagielski_in as JI
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy import oracle_learner as OL
from dpfair_jax.privacy import selection as S
from dpfair_jax.studies import tradeoff as T
from dpfair_jax.studies.tradeoff import baselines as BL
from dpfair_jax.studies.tradeoff import oracle as OR

from studies.test_tradeoff_baselines import _frame

LAW = S.RandomStopping(mean=1.5, shape=1.0)
KW = dict(target="label", group="sex", lams=[1.0], epsilons=[2.0, math.inf], replicates=1, epochs=1,
          batch_size=100, runs=LAW, progress=False)


def test_labels_lists_and_grid():
    assert T.METHOD_LABELS["jagielski_in"] == "Jagielski et al. 2019 (in-processing)"
    assert T.ORACLE_METHODS == ("jagielski_in",)
    assert "jagielski_in" not in T.METHODS and "jagielski_in" not in T.BASELINE_METHODS
    grid = T._grid("jagielski_in", None, None)
    assert len(grid) == 3 and set(grid[0]) == {"eta", "gamma"} and {c["gamma"] for c in grid} == {0.0}
    assert T._grid("jagielski_in", {"jagielski_in": {"gamma": [0.02]}}, None) == [{"eta": 1.0, "gamma": 0.02}]


def test_refusals_before_compute():
    with pytest.raises(ValueError, match="fairness='eo'"):
        T.tradeoff_frontier_study(_frame(200), **KW, fairness="dp", methods=["jagielski_in"])
    frame = _frame(300)
    frame["label"] = np.random.default_rng(0).choice(["a", "b", "c"], len(frame))
    with pytest.raises(ValueError, match="binary target"):
        T.tradeoff_frontier_study(frame, **KW, fairness="eo", methods=["jagielski_in"])
    with pytest.raises(ValueError, match="eta"):
        T.tradeoff_frontier_study(_frame(200), **KW, fairness="eo", methods=["jagielski_in"],
                                  search={"jagielski_in": {"eta": [-1.0]}})
    BL.check_methods(["jagielski_in"], "eo", privacy_unit="sensitive_attribute")  # accepted
    with pytest.raises(ValueError, match="jagielski_in"):
        BL.check_methods(["jagielski_in"], "eo", privacy_unit="user")


@pytest.mark.parametrize("unit", ["example", "sensitive_attribute"])
def test_config_and_event(unit):
    cfg = OR.config(3, unit, 1e-6)
    assert cfg.steps == OR.STEPS and cfg.num_groups == 3
    assert (cfg.privacy_unit, cfg.relation) == {"example": ("example", "add_remove"),
                                                "sensitive_attribute": ("sensitive_attribute", "replace_one")}[unit]
    z = 7.0
    ev = BL.run_event("jagielski_in", cfg, 1000, z, BL.NOISE_RATIOS["jagielski_in"])
    # written out: Laplace counts at 1/eps_c = COUNT_RATIO z, T rounds of zCDP eps_o^2/8 and Laplace at z
    eo = OR.ORACLE_FACTOR / z
    want = dp_accounting.ComposedDpEvent([
        dp_accounting.LaplaceDpEvent(OR.COUNT_RATIO * z),
        dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(
            [dp_accounting.ZCDpEvent(eo ** 2 / 8.0), dp_accounting.LaplaceDpEvent(z)]), OR.STEPS)])
    assert ev == want
    # the program's hyperparameters are at the event's epsilons
    hp = OR.hparams(4.0, z, OR.COUNT_RATIO * z, 0.5, 0.0)
    assert np.isclose(float(hp.count_epsilon), 1.0 / (OR.COUNT_RATIO * z), rtol=1e-6)
    assert np.isclose(float(hp.oracle_epsilon), eo, rtol=1e-6) and np.isclose(float(hp.auditor_epsilon), 1 / z, rtol=1e-6)
    assert float(hp.B) == 4.0 and float(hp.eta) == 0.5 and float(hp.gamma) == 0.0  # B is lambda
    inf = OR.hparams(0.0, 0.0, 0.0, 0.5, 0.0)
    assert all(math.isinf(float(getattr(inf, f))) for f in ("count_epsilon", "oracle_epsilon", "auditor_epsilon"))
    assert float(inf.B) == 0.0
    # one run's epsilon by dp-accounting's RDP accountant lies under the basic and zCDP bounds
    acc = dp_accounting.rdp.RdpAccountant(list(S.ORDERS), dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(ev)
    one = acc.get_epsilon(1e-6)
    bounds = OL.oracle_learner_bounds(1.0 / (OR.COUNT_RATIO * z), eo, 1.0 / z, OR.STEPS, 1e-6)
    assert one <= bounds["basic"] and one <= bounds["zcdp"] * 1.0001
    assert np.allclose(OR.attribute_rdp(cfg, z, OR.COUNT_RATIO), np.asarray(acc._rdp))  # noqa: SLF001


def _split(n, seed):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 4)) + 0.7 * s[:, None]
    y = (x[:, 0] + 0.5 * rng.normal(size=n) > 0.5).astype(int)
    return make_dataset(x.astype(np.float32), y, s, num_groups=2, num_classes=2)


@pytest.mark.parametrize("unit", ["example", "sensitive_attribute"])
@pytest.mark.parametrize("z", [0.0, 3.0])
def test_program_run_is_a_direct_fit_call(unit, z):
    """The study's run (``oracle.run_one``) against ``jagielski_in.fit`` on the class's predictions
    with concrete hyperparameters: the same mixture, bitwise; the test metrics are the mixture's."""
    cfg = OR.config(2, unit, 1e-5)
    train, val, test = _split(400, 0), _split(150, 1), _split(200, 2)
    key = jax.random.key(5)
    lam, eta, gamma = 4.0, 0.5, 0.01
    out, val_errors, trunc = OR.run_one(cfg, train, val, test, key, jnp.float32(lam), jnp.float32(z),
                                        jnp.float32(OR.COUNT_RATIO * z), {"eta": jnp.float32(eta),
                                                                          "gamma": jnp.float32(gamma)})
    cls = OR.public_class(cfg, train)
    preds = np.asarray(OR.class_preds(cls, train.x))
    assert preds.shape == (2 * (4 + OR.PROJECTIONS) * len(OR.PROJECTION_THRESHOLDS) + 2 if unit == "example" else
                           2 * len(OR.LABEL_WEIGHTS) * len(OR.PROBABILITY_THRESHOLDS) + 2, 400)
    ec, eo, ea = OR.epsilons(z, OR.COUNT_RATIO * z)
    hp = JI.JagielskiInHparams(B=lam, eta=eta, gamma=gamma, count_epsilon=ec, oracle_epsilon=eo, auditor_epsilon=ea)
    res = JI.fit(key, JI.OracleData(preds, np.asarray(train.y), np.asarray(train.s)), hp, cfg)
    mix = np.asarray(out["params"]["mixture"])
    assert np.array_equal(mix, np.asarray(res.params["mixture"]))
    assert np.isclose(mix.sum(), 1.0, atol=1e-5) and float(trunc) == 0.0
    q = np.asarray(OR.class_preds(cls, test.x)).T @ mix
    yt = np.asarray(test.y)
    assert np.isclose(float(out["error"]), np.mean(np.where(yt == 1, 1 - q, q)), atol=1e-6)
    qv = np.asarray(OR.class_preds(cls, val.x)).T @ mix
    assert np.isclose(float(val_errors), np.sum(np.where(np.asarray(val.y) == 1, 1 - qv, qv)), rtol=1e-5)
    if math.isfinite(res.spend.epsilon):
        assert res.spend.relation == cfg.relation


def _spend_check(res, unit):
    sp = res.spends[("jagielski_in", 2.0)]
    assert sp.unit == unit and sp.relation == ("add_remove" if unit == "example" else "replace_one")
    assert 0.95 * 2.0 <= sp.epsilon <= 2.0
    z = res.info["noise"]["jagielski_in@2"][0]
    cfg = OR.config(2, unit, res.info["delta"])
    run = OR.run_event(cfg, z, OR.COUNT_RATIO)
    if unit == "example":  # the run with the noisy score, K ~ law runs: dp-accounting's RDP accountant
        run = dp_accounting.ComposedDpEvent([run, dp_accounting.GaussianDpEvent(30.0)])
    acc = dp_accounting.rdp.RdpAccountant(list(S.ORDERS), dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(run, LAW.mean, LAW.shape))
    assert sp.epsilon >= acc.get_epsilon(sp.delta) * (1 - 1e-6)


@pytest.mark.parametrize("unit", ["example", "sensitive_attribute"])
def test_small_study_end_to_end(unit):
    res = T.tradeoff_frontier_study(_frame(500), **KW, fairness="eo", methods=["jagielski_in"], privacy_unit=unit)
    t = res.table
    assert len(t) == 2 and (t["method"] == "jagielski_in").all()
    assert (t["label"] == T.METHOD_LABELS["jagielski_in"]).all() and (t["metric"] == "eo_violation").all()
    assert t["error"].between(0, 1).all() and (t["violation"] >= 0).all()
    assert t["converged"].isna().all() and set(t["hp_eta"]) <= {0.25, 1.0, 4.0}
    _spend_check(res, unit)
    if unit == "sensitive_attribute":
        assert t["thm33_epsilon"].isna().all()
    model = res.model("jagielski_in", 2.0, 1.0, 0)
    assert set(model.params) == {"mixture", "class"} and np.isclose(model.params["mixture"].sum(), 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["example", "sensitive_attribute"])
def test_eo_violation_falls_as_the_constraint_tightens_at_eps_inf(unit):
    """Noiseless (epsilon = inf, every grid point): lambda = B = 10 against lambda = 0 (the
    unconstrained Learner), paired over 3 replicates: the mean EO violation falls and the error
    does not fall."""
    res = T.tradeoff_frontier_study(_frame(1500), target="label", group="sex", lams=[0.0, 10.0], epsilons=[math.inf],
                                    replicates=3, epochs=1, batch_size=100, selection="nonprivate", fairness="eo",
                                    methods=["jagielski_in"], privacy_unit=unit, progress=False)
    t = res.table.set_index(["lam", "replicate"])
    free, tight = t.loc[0.0], t.loc[10.0]
    assert tight["eo_violation"].mean() < free["eo_violation"].mean() - 0.01
    assert tight["error"].mean() >= free["error"].mean() - 1e-6


@pytest.mark.slow
def test_adding_the_method_leaves_the_other_rows_bitwise_unchanged():
    """``methods=["dpsgd", "jagielski_in"]`` against ``["dpsgd"]``: the DP-SGD rows (models, scores,
    spends) are the same, bitwise (each program has its own run keys; the new one comes last)."""
    kw = dict(KW, epsilons=[2.0])
    alone = T.tradeoff_frontier_study(_frame(400), **kw, fairness="eo", methods=["dpsgd"]).table
    both = T.tradeoff_frontier_study(_frame(400), **kw, fairness="eo", methods=["dpsgd", "jagielski_in"]).table
    assert set(both["method"]) == {"dpsgd", "jagielski_in"}
    part = both.loc[both["method"] == "dpsgd", list(alone.columns)].reset_index(drop=True)
    assert both.loc[both["method"] == "dpsgd", ["hp_eta", "hp_gamma"]].isna().all().all()  # jagielski_in's fields
    import pandas as pd

    pd.testing.assert_frame_equal(part, alone, check_exact=True)
