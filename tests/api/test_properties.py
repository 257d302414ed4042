"""Property-based tests (hypothesis) on public functions.

Finite inputs never give NaN or inf; shapes and dtypes are preserved; group statistics do not
depend on the order of the examples; accounting conversions are monotone and invert each other.
Shapes are drawn from a few fixed sizes so jitted functions compile a handful of times.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpfair_jax.fairness import metrics
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import aggregation as agg
from dpfair_jax.privacy import clipping, mechanisms

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)
N, D, K = 12, 3, 3
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)
rows = hnp.arrays(np.float32, (N, D), elements=finite)
groups = hnp.arrays(np.int32, (N,), elements=st.integers(0, K - 1))
perms = st.permutations(list(range(N)))


@SETTINGS
@given(x=rows, clip=st.floats(1e-3, 1e3))
def test_clipping_bounds_norms_and_keeps_shape(x, clip):
    out, norms = clipping.clip_per_example(jnp.asarray(x), clip)
    out = np.asarray(out)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(np.asarray(norms)))
    assert np.all(np.linalg.norm(out.astype(np.float64), axis=1) <= clip * (1 + 1e-5))
    # rows already inside the ball are unchanged
    inside = np.linalg.norm(x.astype(np.float64), axis=1) <= clip * (1 - 1e-5)
    # (XLA on CPU flushes float32 subnormals to zero: atol = the smallest normal float32)
    np.testing.assert_allclose(out[inside], x[inside], rtol=1e-6, atol=np.finfo(np.float32).tiny)


@SETTINGS
@given(x=rows, s=groups, perm=perms)
def test_group_clipped_sums_permutation_invariant(x, s, perm):
    a = np.asarray(agg.group_clipped_sums(jnp.asarray(x), jnp.asarray(s), K, 1.0), np.float64)
    p = np.asarray(perm)
    b = np.asarray(agg.group_clipped_sums(jnp.asarray(x[p]), jnp.asarray(s[p]), K, 1.0), np.float64)
    assert a.shape == (K, D) and np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, atol=1e-5 * N)
    # each group's sum is within its clipped budget: |S_k| <= C * n_k
    counts = np.bincount(s, minlength=K)
    assert np.all(np.linalg.norm(a, axis=1) <= counts * (1 + 1e-5))


@SETTINGS
@given(y_pred=hnp.arrays(np.float32, (N,), elements=st.floats(0, 1, width=32)),
       y=hnp.arrays(np.int32, (N,), elements=st.integers(0, 1)), s=groups, perm=perms)
def test_fairness_metrics_finite_and_permutation_invariant(y_pred, y, s, perm):
    p = np.asarray(perm)
    for fn in (lambda a, b, c: metrics.demographic_parity_pairwise(a, c, K),
               lambda a, b, c: metrics.equalized_odds_violation(a, b, c, K),
               lambda a, b, c: metrics.group_accuracy(a, b, c, K)):
        u = np.asarray(fn(jnp.asarray(y_pred), jnp.asarray(y), jnp.asarray(s)), np.float64)
        v = np.asarray(fn(jnp.asarray(y_pred[p]), jnp.asarray(y[p]), jnp.asarray(s[p])), np.float64)
        assert np.all(np.isfinite(u))  # empty groups give 0, never NaN
        np.testing.assert_allclose(u, v, atol=1e-6)


@SETTINGS
@given(losses=hnp.arrays(np.float32, (N,), elements=st.floats(0, 1e4, width=32)), s=groups, perm=perms)
def test_group_mean_loss_permutation_invariant(losses, s, perm):
    p = np.asarray(perm)
    a = np.asarray(metrics.group_mean_loss(jnp.asarray(losses), jnp.asarray(s), K), np.float64)
    b = np.asarray(metrics.group_mean_loss(jnp.asarray(losses[p]), jnp.asarray(s[p]), K), np.float64)
    assert a.shape == (K,) and np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-3)
    for k in range(K):  # against NumPy
        if np.any(s == k):
            np.testing.assert_allclose(a[k], losses[s == k].astype(np.float64).mean(), rtol=1e-4, atol=1e-3)


@SETTINGS
@given(x=hnp.arrays(np.float32, (4, 5), elements=finite), std=st.floats(0, 1e3), seed=st.integers(0, 2**31 - 1))
def test_noise_mechanisms_keep_shape_dtype_and_stay_finite(x, std, seed):
    key = jax.random.key(seed)
    tree = {"a": jnp.asarray(x), "b": jnp.asarray(x[0])}
    for out in (mechanisms.gaussian_mechanism(key, tree, std), mechanisms.laplace_mechanism(key, tree, std)):
        for name in tree:
            leaf = np.asarray(out[name])
            assert leaf.shape == tree[name].shape and leaf.dtype == np.float32
            assert np.all(np.isfinite(leaf))


@SETTINGS
@given(scores=hnp.arrays(np.float32, (7,), elements=finite), eps=st.floats(1e-3, 50.0))
def test_exponential_mechanism_probs_are_a_distribution(scores, eps):
    p = np.asarray(mechanisms.exponential_mechanism_probs(jnp.asarray(scores), epsilon=eps, sensitivity=1.0),
                   np.float64)
    assert p.shape == (7,) and np.all(np.isfinite(p)) and np.all(p >= 0)
    assert abs(p.sum() - 1.0) < 1e-5


@settings(max_examples=10, deadline=None, derandomize=True)
@given(rho=st.floats(1e-4, 10.0), delta=st.floats(1e-10, 1e-2))
def test_zcdp_conversions_monotone_and_inverse(rho, delta):
    eps = A.zcdp_to_dp(rho, delta)
    assert np.isfinite(eps) and eps > 0
    assert A.zcdp_to_dp(rho * 1.1, delta) > eps  # more rho, more epsilon
    back = A.dp_to_rho(eps, delta)
    assert back == pytest.approx(rho, rel=1e-5)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(eps=st.floats(0.05, 20.0), delta=st.floats(1e-10, 1e-2))
def test_analytic_gaussian_calibration_round_trip(eps, delta):
    sigma = A.analytic_gaussian_sigma(eps, delta)
    assert np.isfinite(sigma) and sigma > 0
    assert A.analytic_gaussian_delta(sigma, eps) <= delta * (1 + 1e-6)
    assert A.analytic_gaussian_delta(sigma * 0.98, eps) > delta  # and it is (nearly) the smallest
