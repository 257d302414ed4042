"""dpfair_jax.fairness.evaluation: hard predictions, degeneracy flags and the test-split evaluation,
against plain NumPy loops, fairlearn (binary) and, bit for bit, the one-hot matmul form of
eqs. 10 and 11 that DP-FERMI's evaluation used before it moved here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import fairness
from dpfair_jax import models as M
from dpfair_jax.data import make_dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.fairness import evaluation as EV

fairlearn_metrics = pytest.importorskip("fairlearn.metrics")


def _onehot_dp(yhat, s, k, l):
    """Eq. 10 as one-hot matmuls (the former ``fermi.dp_violation``), the bitwise reference."""
    s1 = jax.nn.one_hot(s, k)
    cnt = jnp.sum(s1, axis=0)
    rates = (s1.T @ jax.nn.one_hot(yhat, l)) / jnp.maximum(cnt, 1.0)[:, None]
    present = (cnt > 0)[:, None]
    return jnp.max(jnp.max(jnp.where(present, rates, -jnp.inf), axis=0)
                   - jnp.min(jnp.where(present, rates, jnp.inf), axis=0))


def _onehot_eo(yhat, y, s, k, l):
    """Eq. 11 as one-hot matmuls (the former ``fermi.eo_violation``), the bitwise reference."""
    s1, yh, yy = jax.nn.one_hot(s, k), jax.nn.one_hot(yhat, l), jax.nn.one_hot(y, l)

    def gap(cond):
        num = jnp.einsum("nk,nl->kl", s1, yh * cond)
        den = s1.T @ cond
        rates = num / jnp.maximum(den, 1.0)
        hi = jnp.max(jnp.where(den > 0, rates, -jnp.inf), axis=0)
        lo = jnp.min(jnp.where(den > 0, rates, jnp.inf), axis=0)
        return jnp.max(jnp.where(jnp.isfinite(hi - lo), hi - lo, 0.0))

    return jnp.maximum(gap(yy), gap(1.0 - yy))


def _np_dp(yhat, s, k, l):
    return max(max(np.mean(yhat[s == a] == c) for a in range(k) if np.any(s == a))
               - min(np.mean(yhat[s == a] == c) for a in range(k) if np.any(s == a)) for c in range(l))


def _np_eo(yhat, y, s, k, l):
    gaps = []
    for c in range(l):
        for cond in (y == c, y != c):
            r = [np.mean(yhat[(s == a) & cond] == c) for a in range(k) if np.any((s == a) & cond)]
            gaps.append(max(r) - min(r) if r else 0.0)
    return max(gaps)


def _np_flags(yhat, y, l):
    n = len(y)
    share = max(np.mean(yhat == c) for c in range(l))
    base = 1.0 - max(np.mean(y == c) for c in range(l))
    at_base = np.mean(yhat != y) >= base - np.sqrt(base * (1 - base) / n)
    return {"majority_share": share, "constant_predictions": share == 1.0, "base_error": base,
            "at_base_rate": at_base, "degenerate": share == 1.0 or at_base}


def _case(l, k, n=300, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5))
    s = rng.integers(0, k, n)
    y = rng.integers(0, l, n)
    model = M.logistic(input_dim=5) if l == 2 else M.multinomial_logistic(l, input_dim=5)
    params = model.init(jax.random.key(seed), 5)
    params = jax.tree_util.tree_map(lambda p: p + 0.7 * jax.random.normal(jax.random.key(seed + 1), p.shape),
                                    params)
    return model, params, make_dataset(x, y, s, num_groups=k, num_classes=l)


@pytest.mark.parametrize("l,k", [(2, 2), (2, 4), (3, 4)])
def test_evaluate_against_numpy_and_the_onehot_form_bitwise(l, k):
    model, params, ds = _case(l, k, seed=l + k)
    out = EV.evaluate(model, params, ds, l)
    logits = np.asarray(model.apply(params, ds.x))
    yhat = (logits.reshape(-1) > 0).astype(int) if l == 2 else np.argmax(logits, axis=1)
    np.testing.assert_array_equal(np.asarray(EV.predict(model, params, ds.x)), yhat)
    y, s = np.asarray(ds.y), np.asarray(ds.s)
    assert float(out["error"]) == pytest.approx(np.mean(yhat != y), abs=1e-7)
    assert float(out["dp_violation"]) == pytest.approx(_np_dp(yhat, s, k, l), abs=1e-6)
    assert float(out["eo_violation"]) == pytest.approx(_np_eo(yhat, y, s, k, l), abs=1e-6)
    probs = E.soft_predictions(model.apply(params, ds.x))
    assert float(out["ermi"]) == float(E.ermi(probs, ds.s, k))
    for key, want in _np_flags(yhat, y, l).items():
        assert np.asarray(out[key]).item() == pytest.approx(want, abs=1e-6), key
    # bit for bit the values of the one-hot matmul form (eager and under jit)
    yh = jnp.asarray(yhat, jnp.int32)
    assert np.asarray(out["dp_violation"]).tobytes() == np.asarray(_onehot_dp(yh, ds.s, k, l)).tobytes()
    assert np.asarray(out["eo_violation"]).tobytes() == np.asarray(_onehot_eo(yh, ds.y, ds.s, k, l)).tobytes()
    jitted = jax.jit(lambda p: EV.evaluate(model, p, ds, l))(params)
    for key in ("dp_violation", "eo_violation", "error"):
        assert np.asarray(jitted[key]).tobytes() == np.asarray(out[key]).tobytes(), key


def test_evaluate_binary_against_fairlearn():
    model, params, ds = _case(2, 3, n=500, seed=11)
    out = EV.evaluate(model, params, ds)
    yhat = np.asarray(EV.predict(model, params, ds.x))
    y, s = np.asarray(ds.y), np.asarray(ds.s)
    assert float(out["dp_violation"]) == pytest.approx(
        fairlearn_metrics.demographic_parity_difference(y, yhat, sensitive_features=s), abs=1e-6)
    assert float(out["eo_violation"]) == pytest.approx(
        fairlearn_metrics.equalized_odds_difference(y, yhat, sensitive_features=s), abs=1e-6)


def test_evaluate_vmaps_over_params_and_empty_groups_are_ignored():
    model, params, ds = _case(2, 3, n=200, seed=3)
    ds = ds.replace(s=jnp.where(ds.s == 2, 0, ds.s))  # group 2 empty
    stack = jax.tree_util.tree_map(lambda p: jnp.stack([p, -p]), params)
    many = jax.vmap(lambda p: EV.evaluate(model, p, ds))(stack)
    for i, p in enumerate((params, jax.tree_util.tree_map(lambda a: -a, params))):
        one = EV.evaluate(model, p, ds)
        for key in ("error", "dp_violation", "eo_violation", "degenerate"):
            assert np.asarray(many[key][i]).tobytes() == np.asarray(one[key]).tobytes(), key
        yhat = np.asarray(EV.predict(model, p, ds.x))
        assert float(one["dp_violation"]) == pytest.approx(_np_dp(yhat, np.asarray(ds.s), 3, 2), abs=1e-6)


@pytest.mark.parametrize("case", ["constant", "perfect", "half_se_below", "two_se_below", "three_classes"])
def test_degeneracy_flags_against_numpy(case):
    n = 400
    y = np.r_[np.ones(100), np.zeros(300)].astype(np.int32)  # base error 0.25, se 0.0217
    l = 2
    if case == "constant":
        yhat = np.zeros(n, np.int32)
    elif case == "perfect":
        yhat = y.copy()
    elif case in ("half_se_below", "two_se_below"):
        wrong = {"half_se_below": 96, "two_se_below": 82}[case]  # errors 0.24 and 0.205
        yhat = y.copy()
        yhat[:wrong] = 1 - yhat[:wrong]
    else:
        l = 3
        y = np.arange(n) % 3
        yhat = np.where(np.arange(n) % 5 == 0, 1, y)
    got = {k: np.asarray(v) for k, v in fairness.degeneracy(jnp.asarray(yhat), jnp.asarray(y), l).items()}
    for k, v in _np_flags(yhat, y, l).items():
        assert np.asarray(got[k]).item() == pytest.approx(v, abs=1e-6), (k, got[k], v)
    expect = {"constant": True, "perfect": False, "half_se_below": True, "two_se_below": False,
              "three_classes": False}[case]
    assert bool(got["degenerate"]) is expect


def test_evaluate_refuses_labels_outside_num_classes():
    model, params, ds = _case(3, 2, n=60, seed=5)
    with pytest.raises(ValueError, match="y_pred|y"):
        EV.evaluate(model, params, ds, 2)


def test_evaluate_prints_numbers_and_passes_through_jit_and_vmap():
    import numpy as np

    from dpfair_jax import models as M
    from dpfair_jax.data import Dataset
    from dpfair_jax.fairness.evaluation import Metrics, evaluate

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    ds = Dataset(x=jnp.asarray(x), y=jnp.asarray((x[:, 0] > 0).astype("int32")),
                 s=jnp.asarray((x[:, 1] > 0).astype("int32")), num_groups=2)
    model = M.logistic()
    params = jax.tree.map(lambda a: a + 0.3, model.init(jax.random.key(0), 3))
    eager = evaluate(model, params, ds)
    jitted = jax.jit(lambda p: evaluate(model, p, ds))(params)
    assert type(eager) is Metrics and type(jitted) is Metrics
    assert list(eager) == list(jitted)
    for key in eager:
        np.testing.assert_array_equal(np.asarray(eager[key]), np.asarray(jitted[key]))
    text = str(eager)
    assert f"error={float(eager['error']):.4g}" in text and "Array(" not in text
    batch = jax.vmap(lambda k: evaluate(model, jax.tree.map(lambda a: a + jax.random.normal(k, a.shape), params),
                                        ds))(jax.random.split(jax.random.key(1), 3))
    assert batch["error"].shape == (3,) and "over (3,)" in str(batch)
