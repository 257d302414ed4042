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


# ------------------------------------------------------------------------------------------------
# the Poisson sampler at scale: exact integer positions, a precise geometric gap, refused n
# ------------------------------------------------------------------------------------------------
def _poisson_draws(n: int, q: float, B: int, draws: int, seed: int):
    """``draws`` vmapped samples: (indices [draws, B], mask [draws, B], num_sampled [draws])."""
    keys = jax.random.split(jax.random.key(seed), draws)
    s = jax.jit(jax.vmap(lambda k: smp.poisson_sample(k, n, q, B)))(keys)
    return np.asarray(s.indices), np.asarray(s.mask) > 0, np.asarray(s.num_sampled), np.asarray(s.truncated)


@pytest.mark.parametrize("n", [20_000_000, 2**26 + 3])
def test_poisson_sample_above_2_24_rows_reaches_every_residue_at_rate_q(n):
    """Above 2^24 rows a float32 running position can only hold multiples of 2 (then 4, ...): the
    sample must still reach every index, each at rate q. Parity and residues mod 4 of the sampled
    indices are uniform (chi-square, 3 dof), the mean sample size is n q within 4 standard errors,
    and every sample is strictly ascending (so unique) and inside range(n)."""
    B, draws = 4096, 200
    q = 3600 / n
    idx, mask, count, trunc = _poisson_draws(n, q, B, draws, seed=11)
    assert not trunc.any()
    sel = idx[mask].astype(np.int64)
    assert sel.min() >= 0 and sel.max() < n
    for row, mk in zip(idx, mask):
        r = row[mk].astype(np.int64)
        assert np.all(np.diff(r) > 0)  # ascending, hence unique
        assert np.all(mk[: mk.sum()]) and not np.any(mk[mk.sum():])  # real rows first
    # expected share of each residue class r mod 4 in range(n) (n need not be a multiple of 4)
    share = np.array([len(range(r, n, 4)) for r in range(4)], np.float64) / n
    got = np.bincount(sel % 4, minlength=4)
    chi2 = float(np.sum((got - share * got.sum()) ** 2 / (share * got.sum())))
    assert chi2 < stats.chi2.isf(1e-4, 3), (got, chi2)
    odd = int(np.sum(sel % 2))
    assert abs(odd - got.sum() * (share[1] + share[3])) < 4.5 * np.sqrt(got.sum() * 0.25), odd
    se = np.sqrt(n * q * (1 - q) / draws)
    assert abs(count.mean() - n * q) < 4 * se, (count.mean(), n * q, se)
    assert np.array_equal(count, mask.sum(1))


def test_poisson_sample_index_zero_at_small_rate():
    """``P(index 0 sampled) = P(first gap = 1) = q`` at a small rate (binomial, 4.5 standard errors)."""
    q, draws = 2e-4, 100_000
    keys = jax.random.split(jax.random.key(12), draws)

    def zero_in(k):
        s = smp.poisson_sample(k, 50, q, 1)
        return (s.mask[0] > 0) & (s.indices[0] == 0)

    first = jax.jit(jax.vmap(zero_in))(keys)
    hits = float(np.sum(np.asarray(first)))
    assert abs(hits - draws * q) < 4.5 * np.sqrt(draws * q * (1 - q)), hits


def _float32_gap_cdf(q: float, k: int) -> float:
    """``P(gap <= k)`` of the sampler's float32 gap draw, exactly: the uniform is a monotone
    function of the 48-bit word ``W = hi 2^24 + lo`` and the gap a monotone function of the
    uniform, so the probability is (first W whose gap exceeds k) / 2^48, found by bisection."""
    qd = smp._rate_down(q, jnp.float32)

    @jax.jit
    def gap(hi, lo):
        u = smp._uniform_from_bits(hi, lo, jnp.float32)
        return smp._gaps_from_uniform(u, jnp.log1p(-qd), 2**30, jnp.int32)

    lo_w, hi_w = 0, 2**48  # gap(lo_w) <= k (v = 0 gives gap 1); find the first W with gap > k
    while hi_w - lo_w > 1:
        mid = (lo_w + hi_w) // 2
        if int(gap(np.uint32(mid >> 24), np.uint32(mid & (2**24 - 1)))) <= k:
            lo_w = mid
        else:
            hi_w = mid
    return hi_w / 2.0**48


@pytest.mark.parametrize("q", [1e-5, 4e-8, 0.3, 0.999])
def test_poisson_gap_law_is_exact_to_float_rounding(q):
    """The gap law ``P(gap <= k) = 1 - (1 - q)^k`` of the float32 sampler, computed exactly over
    its random bits, holds to a relative 2e-6 (float rounding of log1p and the division) at the
    rate rounded down, which is never above q. A uniform on a 2^-23 grid (jax.random.geometric's
    float32 uniform) is far off at small q: 84 / 2^23 = 1.0014e-5 for q = 1e-5, 0 for q = 4e-8."""
    q32 = float(smp._rate_down(q, jnp.float32))
    assert q32 <= q and q32 > q * (1 - 2**-23)
    for k in (1, 2, 7):
        want = -np.expm1(k * np.log1p(-q32))
        got = _float32_gap_cdf(q, k)
        assert abs(got / want - 1) < 2e-6, (k, got, want)
    grid = np.ceil(q * 2**23) / 2**23  # P(u > 1 - q) on a 2^-23 grid, within one grid point
    assert abs(grid / q - 1) > 2e-6 or q > 0.1


def test_poisson_sample_refuses_n_beyond_the_exact_range():
    limit = smp.max_poisson_n()
    assert limit == (2**63 - 2 if jax.config.jax_enable_x64 else 2**31 - 2)
    with pytest.raises(ValueError, match="exact range"):
        smp.poisson_sample(jax.random.key(0), limit + 1, 1e-9, 10)
    # the largest n is accepted (positions saturate at n + 1 without overflow) and stays in range
    s = smp.poisson_sample(jax.random.key(0), limit, 4e-9, 40)
    idx = np.asarray(s.indices)[np.asarray(s.mask) > 0].astype(np.int64)
    assert idx.size > 0 and np.all(np.diff(idx) > 0) and idx.max() < limit
