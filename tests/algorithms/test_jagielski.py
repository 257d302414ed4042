"""Jagielski et al. (2019) DP post-processing (dpfair_jax.algorithms.jagielski): the non-private
limit against fairlearn's ThresholdOptimizer (equalized odds), the noisy solution near it within a
tolerance from the noise scale, the spend against the Laplace closed form, refusals."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from dpfair_jax.algorithms import jagielski as J

N = 4000


def _problem(n: int = N, seed: int = 0):
    """A base classifier better than chance in both groups, with unequal TPR and FPR."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.4).astype(np.int32)
    y = (rng.random(n) < np.where(s == 1, 0.3, 0.5)).astype(np.int32)
    tpr = np.where(s == 1, 0.65, 0.85)
    fpr = np.where(s == 1, 0.10, 0.25)
    yhat = np.where(y == 1, rng.random(n) < tpr, rng.random(n) < fpr).astype(np.int32)
    return yhat, y, s


def _expected_error(p, yhat, y, s):
    q = p[s, yhat]
    return float(np.mean(np.where(y == 1, 1.0 - q, q)))


def _rates(p, yhat, y, s):
    q = p[s, yhat]
    return np.asarray([[q[(s == a) & (y == 1)].mean(), q[(s == a) & (y == 0)].mean()] for a in (0, 1)])


def test_nonprivate_limit_matches_fairlearn_threshold_optimizer():
    from fairlearn.postprocessing import ThresholdOptimizer
    from sklearn.base import BaseEstimator, ClassifierMixin

    yhat, y, s = _problem()

    class Given(BaseEstimator, ClassifierMixin):  # the base classifier: its prediction is column 0
        def fit(self, X, y):
            self.classes_ = np.array([0, 1])
            return self

        def predict(self, X):
            return np.asarray(X)[:, 0]

    X = yhat[:, None].astype(float)
    to = ThresholdOptimizer(estimator=Given().fit(X, y), constraints="equalized_odds", prefit=True,
                            predict_method="predict", grid_size=2000)
    to.fit(X, y, sensitive_features=s)
    q_ref = to._pmf_predict(X, sensitive_features=s)[:, 1]
    err_ref = float(np.mean(np.where(y == 1, 1.0 - q_ref, q_ref)))

    res = J.fit(jax.random.key(0), (yhat, y, s), J.JagielskiHparams(noise_multiplier=0.0, gamma=0.0),
                J.JagielskiConfig(num_groups=2))
    p = np.asarray(res.params)
    err = _expected_error(p, yhat, y, s)
    rates = _rates(p, yhat, y, s)
    # exact EO of the LP's solution on the data it was solved on
    np.testing.assert_allclose(rates[0], rates[1], atol=1e-6)
    # the LP optimum is at most fairlearn's (which searches a grid of 2000 points): within the grid step
    assert err <= err_ref + 1e-9
    assert err == pytest.approx(err_ref, abs=2e-3)


def test_noisy_solution_near_the_exact_one_within_the_noise_scale():
    yhat, y, s = _problem()
    cfg = J.JagielskiConfig(num_groups=2)
    exact = _expected_error(np.asarray(J.fit(jax.random.key(0), (yhat, y, s),
                                             J.JagielskiHparams(noise_multiplier=0.0), cfg).params), yhat, y, s)
    nm = 0.5  # Laplace scale 1 per count (sensitivity 2 under the sensitive-attribute unit)
    keys = jax.random.split(jax.random.key(1), 8)
    ps = [np.asarray(J.fit(k, (yhat, y, s), J.JagielskiHparams(noise_multiplier=nm), cfg).params) for k in keys]
    errs = [_expected_error(p, yhat, y, s) for p in ps]
    # a count moves by ~scale = 1 in cells of >= 100 rows: the rates by ~1e-2 at most, the error as much
    assert max(abs(e - exact) for e in errs) < 0.02
    gaps = [np.max(np.abs(np.diff(_rates(p, yhat, y, s), axis=0))) for p in ps]
    assert max(gaps) < 0.02  # equalized odds up to the noise on the rates


def test_gamma_relaxes_the_constraints():
    yhat, y, s = _problem()
    cfg = J.JagielskiConfig(num_groups=2)
    errs = []
    for g in (0.0, 0.05, 1.0):
        p = np.asarray(J.fit(jax.random.key(0), (yhat, y, s), J.JagielskiHparams(noise_multiplier=0.0, gamma=g),
                             cfg).params)
        rates = _rates(p, yhat, y, s)
        assert np.max(np.abs(rates[0] - rates[1])) <= 2 * g + 1e-6
        errs.append(_expected_error(p, yhat, y, s))
    assert errs[0] >= errs[1] >= errs[2] - 1e-9
    assert errs[2] == pytest.approx(float(np.mean(yhat != y)), abs=1e-6)  # unconstrained: the base classifier


@pytest.mark.parametrize("unit,relation,l1", [("sensitive_attribute", "replace_one", 2.0), ("example", "add_remove", 1.0)])
def test_spend_is_the_laplace_closed_form(unit, relation, l1):
    cfg = J.JagielskiConfig(privacy_unit=unit)
    scale = 2.5  # the Laplace scale of each count
    hp = J.JagielskiHparams(noise_multiplier=scale / l1)
    sp = J.spend(cfg, 100, hp)
    assert sp.epsilon == pytest.approx(l1 / scale, rel=1e-12)  # Laplace: epsilon = Delta_1 / b
    assert sp.unit == unit and sp.relation == relation
    cal = J.calibrate(cfg, 100, (0.7, cfg.delta))
    assert J.spend(cfg, 100, cal).epsilon <= 0.7 and J.spend(cfg, 100, cal).epsilon == pytest.approx(0.7, rel=1e-12)
    assert math.isinf(J.spend(cfg, 100, J.JagielskiHparams(noise_multiplier=0.0)).epsilon)


def test_noise_has_the_stated_scale():
    """The counts' noise is Laplace with scale noise_multiplier x 2 (sensitive attribute): its mean
    absolute deviation is the scale (standard error ~ scale / sqrt(draws))."""
    yhat, y, s = _problem(200)
    draws = jax.vmap(lambda k: J.noisy_confusion(k, yhat, y, s, 2, 1.5, "sensitive_attribute"))(
        jax.random.split(jax.random.key(3), 2000))
    exact = np.asarray(J.noisy_confusion(jax.random.key(0), yhat, y, s, 2, 0.0, "sensitive_attribute"))
    mad = float(np.mean(np.abs(np.asarray(draws) - exact)))
    assert mad == pytest.approx(3.0, abs=5 * 3.0 / math.sqrt(2000 * 8))


def test_refusals():
    yhat, y, s = _problem(50)
    cfg = J.JagielskiConfig()
    hp = J.JagielskiHparams()
    with pytest.raises(ValueError, match="binary"):
        J.fit(jax.random.key(0), (yhat + 1, y, s), hp, cfg)
    with pytest.raises(ValueError, match="group ids"):
        J.fit(jax.random.key(0), (yhat, y, s + 5), hp, cfg)
    with pytest.raises(ValueError, match="triple"):
        J.fit(jax.random.key(0), (yhat, y), hp, cfg)
    with pytest.raises(ValueError, match="privacy_unit"):
        J.JagielskiConfig(privacy_unit="all_features").validate()
    with pytest.raises(ValueError, match="gamma"):
        J.fit(jax.random.key(0), (yhat, y, s), J.JagielskiHparams(gamma=-1.0), cfg)
