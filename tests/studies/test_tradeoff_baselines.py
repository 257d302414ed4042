"""The paper's other baselines in the public tradeoff study (dpfair_jax.studies.tradeoff.baselines):
Tran et al. 2021a's mitigation and Jagielski et al. 2019's DP post-processing; their refusals, their
events, the randomized classifier's metrics against NumPy, and a tiny study end to end."""

from __future__ import annotations

import math

import dp_accounting
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import mitigation as MI
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy import selection as S
from dpfair_jax.studies import tradeoff as T
from dpfair_jax.studies.tradeoff import baselines as BL


def _frame(n: int = 1200, seed: int = 0):
    """The toy frame of tests/studies/test_tradeoff_study.py."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n)
    a = rng.normal(size=n) + 0.9 * sex
    b = rng.normal(size=n)
    y = (a + 0.5 * b + 0.4 * rng.normal(size=n) > 0.7).astype(int)
    return pd.DataFrame({"a": a, "b": b, "job": rng.choice(["x", "y", "z"], n),
                         "sex": np.where(sex == 1, "m", "f"), "label": np.where(y == 1, "yes", "no")})

LAW = S.RandomStopping(mean=1.5, shape=1.0)
KW = dict(target="label", group="sex", lams=[1.0], epsilons=[2.0, math.inf], replicates=2, epochs=1,
          batch_size=100, runs=LAW)


def test_labels_and_lists():
    assert T.METHOD_LABELS["mitigation"] == "Tran et al. 2021a"
    assert T.METHOD_LABELS["jagielski_post"].startswith("Jagielski et al. 2019")
    assert set(T.BASELINE_METHODS) == {"mitigation", "jagielski_post"}
    assert not set(T.BASELINE_METHODS) & set(T.METHODS)  # not in the default method list
    for m in T.BASELINE_METHODS:
        grid = T._grid(m, None, None)
        assert len(grid) == 8 and set(grid[0]) == {"lr_theta", "clip_theta"}


def test_jagielski_refuses_demographic_parity_before_compute():
    with pytest.raises(ValueError, match="fairness='eo'"):
        T.tradeoff_frontier_study(_frame(200), **KW, fairness="dp", methods=["jagielski_post"])


def test_jagielski_refuses_a_multiclass_target():
    frame = _frame(300)
    frame["label"] = np.random.default_rng(0).choice(["a", "b", "c"], len(frame))
    with pytest.raises(ValueError, match="binary target"):
        T.tradeoff_frontier_study(frame, **KW, fairness="eo", methods=["jagielski_post"])


@pytest.mark.parametrize("unit", ["sensitive_attribute", "user"])
def test_baselines_refuse_units_they_are_not_accounted_for(unit):
    for m in T.BASELINE_METHODS:
        with pytest.raises(ValueError, match="example level only"):
            BL.check_methods([m], "eo", privacy_unit=unit)
    BL.check_methods(["mitigation", "jagielski_post"], "eo", privacy_unit="example")  # accepted


def test_run_events_are_the_algorithms_events():
    n, z = 1000, 1.7
    model = M.logistic()
    common = dict(model=model, num_groups=2, num_classes=2, steps=30, batch_size=100, fairness="eo",
                  privacy_unit="all_features", count_noise_multiplier=50.0)
    fcfg = F.FermiConfig(**common).validate(n)
    cfgs = BL.configs(common, fcfg, ["mitigation", "jagielski_post"])
    ev = BL.run_event("mitigation", cfgs["mitigation"], n, z, BL.MITIGATION_STATS_RATIO)
    want = MI.spend(cfgs["mitigation"], n, MI.MitigationHparams(
        noise_multiplier=z, stats_noise_multiplier=BL.MITIGATION_STATS_RATIO * z)).event
    assert ev == want
    ev = BL.run_event("jagielski_post", fcfg, n, z, BL.NOISE_RATIOS["jagielski_post"])
    base = F.spend(fcfg, n, F.FermiHparams(noise_theta=z, noise_w=BL.NOISE_RATIOS["jagielski_post"] * z)).event
    assert ev == dp_accounting.ComposedDpEvent([base, dp_accounting.LaplaceDpEvent(BL.JAGIELSKI_COUNT_RATIO * z)])


def test_randomized_classifier_metrics_against_numpy():
    rng = np.random.default_rng(4)
    n = 300
    s = rng.integers(0, 2, n)
    y = rng.integers(0, 2, n)
    q = rng.random(n)
    data = make_dataset(rng.normal(size=(n, 2)).astype(np.float32), y, s, num_groups=2, num_classes=2)
    out = BL._randomized_metrics(jnp.asarray(q, jnp.float32), data, 2)
    err = np.mean(np.where(y == 1, 1 - q, q))
    pos = [q[s == a].mean() for a in (0, 1)]
    tpr = [q[(s == a) & (y == 1)].mean() for a in (0, 1)]
    fpr = [q[(s == a) & (y == 0)].mean() for a in (0, 1)]
    assert float(out["error"]) == pytest.approx(err, abs=1e-6)
    assert float(out["dp_violation"]) == pytest.approx(abs(pos[0] - pos[1]), abs=1e-5)
    assert float(out["eo_violation"]) == pytest.approx(max(abs(tpr[0] - tpr[1]), abs(fpr[0] - fpr[1])), abs=1e-5)


@pytest.mark.slow
def test_baselines_run_end_to_end_in_a_tiny_study():
    res = T.tradeoff_frontier_study(_frame(600), **KW, fairness="eo", methods=["mitigation", "jagielski_post", "dpsgd"])
    t = res.table
    assert set(t["method"]) == {"mitigation", "jagielski_post", "dpsgd"}
    assert len(t) == 3 * 2 * 2  # one lambda, two epsilons, two replicates
    for m in ("mitigation", "jagielski_post"):
        part = t[t["method"] == m]
        assert (part["label"] == T.METHOD_LABELS[m]).all() and (part["lam"] == 1.0).all()
        assert part["error"].between(0, 1).all() and (part["violation"] >= 0).all()
        assert (part["metric"] == "eo_violation").all()
        fin = part[np.isfinite(part["epsilon"])]
        assert (fin["spend_epsilon"] <= fin["epsilon"]).all() and (fin["spend_epsilon"] >= 0.95 * fin["epsilon"]).all()
        sp = res.spends[(m, 2.0)]
        assert sp.unit == "example" and sp.relation == "add_remove"
        assert isinstance(sp.event, dp_accounting.dp_event.RepeatAndSelectDpEvent)
    # the post-processing's rates are equalized within the slack plus sampling noise of the test split
    assert (t.loc[t["method"] == "jagielski_post", "eo_violation"] < 0.5).all()
