"""Tests for dpfair_jax.privacy.sampling: Poisson batch law, truncation, fixed-size and shuffled."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpfair_jax.privacy import sampling as smp


def test_poisson_batch_size_mean_and_sd():
    n, q, trials = 1000, 0.05, 20_000
    keys = jax.random.split(jax.random.key(0), trials)
    sizes = np.asarray(jax.jit(jax.vmap(lambda k: smp.poisson_batch(k, n, q, 120)[1].sum()))(keys), np.float64)
    mean, sd = n * q, np.sqrt(n * q * (1 - q))
    assert abs(sizes.mean() - mean) < 3 * sd / np.sqrt(trials)
    assert abs(sizes.std() - sd) < 3 * sd / np.sqrt(2 * trials)


def test_poisson_inclusion_is_uniform_and_independent():
    n, q, trials = 40, 0.2, 20_000
    keys = jax.random.split(jax.random.key(1), trials)

    def indicator(k):
        idx, mask = smp.poisson_batch(k, n, q, n)
        return jnp.zeros(n).at[idx].add(mask)

    inc = np.asarray(jax.jit(jax.vmap(indicator))(keys), np.float64)
    assert inc.max() == 1.0  # no index appears twice
    freq = inc.mean(0)
    se = np.sqrt(q * (1 - q) / trials)
    # Every index has inclusion probability q (Bonferroni over n indices at 4 SE).
    assert np.all(np.abs(freq - q) < 4.5 * se), freq
    # Neighbouring indices are independent.
    assert abs(np.corrcoef(inc[:, 3], inc[:, 4])[0, 1]) < 4 / np.sqrt(trials)


def test_poisson_sample_layout_and_truncation():
    sample = smp.poisson_sample(jax.random.key(2), 200, 0.3, 150)
    m = np.asarray(sample.mask)
    idx = np.asarray(sample.indices)
    k = int(m.sum())
    assert np.all(m[:k] == 1) and np.all(m[k:] == 0)  # real rows first
    assert np.all(np.diff(idx[:k]) > 0) and idx[:k].max() < 200
    assert int(sample.num_sampled) == k and not bool(sample.truncated)
    # A too-small maximum truncates and reports it.
    t = smp.poisson_sample(jax.random.key(2), 200, 0.5, 10)
    assert bool(t.truncated) and float(t.mask.sum()) == 10 and int(t.num_sampled) == 11
    # q = 1 takes everything.
    full = smp.poisson_sample(jax.random.key(3), 12, 1.0, 12)
    np.testing.assert_array_equal(full.indices, np.arange(12))


def test_fixed_size_and_shuffled_batches():
    idx = np.asarray(smp.fixed_size_batch(jax.random.key(4), 50, 20))
    assert len(set(idx.tolist())) == 20 and idx.min() >= 0 and idx.max() < 50
    batches = np.asarray(smp.shuffled_batches(jax.random.key(5), 103, 10))
    assert batches.shape == (10, 10)
    assert len(set(batches.ravel().tolist())) == 100  # disjoint
    assert smp.steps_per_epoch(103, 10) == 10


def test_truncation_helpers_against_scipy():
    n, q, steps = 34_000, 1024 / 34_000, 1000
    b = smp.max_batch_size_for(n, q, steps, 1e-9)
    assert steps * stats.binom.sf(b, n + 1, q) <= 1e-9
    assert steps * stats.binom.sf(b - 1, n + 1, q) > 1e-9
    p = smp.poisson_truncation_probability(n, q, b)
    assert p == pytest.approx(stats.binom.sf(b, n, q), rel=1e-9)
    extra = smp.truncation_delta(n, q, b, steps, 2.0)
    assert extra == pytest.approx((1 + np.exp(2.0)) * steps * stats.binom.sf(b, n + 1, q), rel=1e-9)
    assert smp.max_batch_size_for(10, 1.0, 5) == 10


def test_accounting_for_each_scheme():
    p = smp.accounting_for("poisson", 1000, 50)
    assert (p.sampling, p.relation, p.sensitivity_factor) == ("poisson", "add_remove", 1.0)
    assert p.sample_rate == pytest.approx(0.05)
    for scheme, sampling in (("fixed_size", "without_replacement"), ("shuffle", "shuffle")):
        s = smp.accounting_for(scheme, 1000, 50)
        assert (s.sampling, s.relation, s.sensitivity_factor) == (sampling, "replace_one", 2.0)
        assert s.steps_per_epoch == 20
    # shuffled epochs are never accounted as sampling without replacement (not proven)
    assert "without amplification" in smp.accounting_for("shuffle", 1000, 50).notes


def test_jit_matches_eager():
    eager = smp.poisson_batch(jax.random.key(6), 300, 0.1, 60)
    jitted = jax.jit(lambda k, q: smp.poisson_batch(k, 300, q, 60))(jax.random.key(6), 0.1)
    np.testing.assert_array_equal(eager[0], jitted[0])
    np.testing.assert_array_equal(eager[1], jitted[1])


def test_validation_errors():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="sample_rate"):
        smp.poisson_batch(key, 10, 0.0, 5)
    with pytest.raises(ValueError, match="sample_rate"):
        smp.poisson_batch(key, 10, 1.5, 5)
    with pytest.raises(ValueError, match="max_batch_size"):
        smp.poisson_batch(key, 10, 0.5, 11)
    with pytest.raises(ValueError, match="batch_size"):
        smp.shuffled_batches(key, 10, 11)
    with pytest.raises(ValueError, match="sampling"):
        smp.accounting_for("bootstrap", 10, 2)
    with pytest.raises(ValueError, match="n must be"):
        smp.fixed_size_batch(key, 0, 1)
