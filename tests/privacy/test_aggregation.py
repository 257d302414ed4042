"""Tests for dpfair_jax.privacy.aggregation: clip-sum-noise-normalize, group-weighted noise, optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpfair_jax.privacy import aggregation as agg

N = 100_000


def _std_within(sample, sigma, n_se=3.0):
    sample = np.asarray(sample, np.float64).ravel()
    se = sigma / np.sqrt(2 * sample.size)
    assert abs(sample.std() - sigma) < n_se * se, (sample.std(), sigma, se)


def _np_clip(g: np.ndarray, c: float) -> np.ndarray:
    n = np.linalg.norm(g.reshape(g.shape[0], -1), axis=1)
    return g * np.minimum(1.0, c / np.maximum(n, 1e-300)).reshape((-1,) + (1,) * (g.ndim - 1))


def test_noise_on_zero_gradient_sum_has_configured_std():
    # 4 examples with zero gradients; the private sum is pure noise with std sigma * C.
    per_ex = {"w": jnp.zeros((4, N // 2)), "b": jnp.zeros((4, N // 2))}
    out, norms = agg.private_sum(jax.random.key(0), per_ex, clip_norm=0.5, noise_multiplier=3.0)
    np.testing.assert_array_equal(norms, 0.0)
    _std_within(np.concatenate([np.asarray(out["w"]), np.asarray(out["b"])]), 1.5)
    mean = agg.private_mean(jax.random.key(0), per_ex, clip_norm=0.5, noise_multiplier=3.0, denominator=10.0)
    np.testing.assert_allclose(mean["w"], np.asarray(out["w"]) / 10.0, rtol=1e-6)


def test_private_mean_without_noise_matches_numpy():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(20, 3, 2)).astype(np.float32) * 3
    mask = (rng.random(20) < 0.6).astype(np.float32)
    out = agg.private_mean(jax.random.key(1), {"g": g}, clip_norm=1.0, noise_multiplier=0.0,
                           denominator=12.0, mask=mask)
    ref = (_np_clip(g.astype(np.float64), 1.0) * mask[:, None, None]).sum(0) / 12.0
    np.testing.assert_allclose(out["g"], ref, rtol=1e-5, atol=1e-6)


def test_group_clipped_sums_match_numpy_loop_with_empty_group():
    rng = np.random.default_rng(1)
    g = rng.normal(size=(30, 4)).astype(np.float32) * 2
    s = rng.integers(0, 3, size=30).astype(np.int32)  # group 3 of 4 is empty
    mask = (rng.random(30) < 0.8).astype(np.float32)
    sums = agg.group_clipped_sums({"g": g}, s, 4, 1.5, mask)["g"]
    clipped = _np_clip(g.astype(np.float64), 1.5)
    ref = np.zeros((4, 4))
    for i in range(30):
        ref[s[i]] += mask[i] * clipped[i]
    np.testing.assert_allclose(sums, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sums[3], 0.0)
    counts = agg.group_counts(s, 4, mask)
    np.testing.assert_allclose(counts, np.bincount(s, weights=mask, minlength=4))


def test_per_group_noise_std_matches_configured_sigmas():
    stds = jnp.array([0.5, 1.0, 3.0])
    zeros = {"a": jnp.zeros((3, N))}
    out = np.asarray(agg.group_weighted_noisy_sums(jax.random.key(2), zeros, stds)["a"])
    for k in range(3):
        _std_within(out[k], float(stds[k]))


def test_group_weighted_private_mean_reference_and_no_nan_for_empty_group():
    rng = np.random.default_rng(3)
    g = rng.normal(size=(25, 5)).astype(np.float32)
    s = rng.integers(0, 2, size=25).astype(np.int32)
    weights = np.array([0.3, 0.7, 0.0], np.float32)
    counts = np.bincount(s, minlength=3).astype(np.float32)  # group 2 is empty: count 0
    out = agg.group_weighted_private_mean(
        jax.random.key(4), {"g": g}, s, 3, clip_norm=0.8, noise_multipliers=jnp.zeros(3),
        group_weights=weights, denominators=counts,
    )["g"]
    clipped = _np_clip(g.astype(np.float64), 0.8)
    ref = sum(weights[k] * clipped[s == k].sum(0) / counts[k] for k in range(2))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    noisy = agg.group_weighted_private_mean(
        jax.random.key(4), {"g": g}, s, 3, clip_norm=0.8, noise_multipliers=jnp.array([1.0, 2.0, 5.0]),
        group_weights=jnp.ones(3), denominators=counts,
    )["g"]
    assert np.all(np.isfinite(noisy))


def test_dp_aggregate_equals_pure_function_and_chains_with_optax():
    rng = np.random.default_rng(5)
    per_ex = {"w": jnp.asarray(rng.normal(size=(8, 3)), jnp.float32), "b": jnp.asarray(rng.normal(size=(8,)), jnp.float32)}
    mask = jnp.asarray([1, 1, 1, 0, 1, 1, 0, 1], jnp.float32)
    key = jax.random.key(6)
    tx = agg.dp_aggregate(clip_norm=1.0, noise_multiplier=1.3, key=key, denominator=6.0)
    state = tx.init(None)
    out, state2 = tx.update(per_ex, state, mask=mask)
    next_key, noise_key = jax.random.split(key)
    ref = agg.private_mean(noise_key, per_ex, clip_norm=1.0, noise_multiplier=1.3, denominator=6.0, mask=mask)
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(jax.random.key_data(state2.key), jax.random.key_data(next_key))
    # Composes with any optax optimizer; default denominator is the batch size.
    chain = optax.chain(agg.dp_aggregate(clip_norm=1.0, noise_multiplier=0.0, key=0), optax.sgd(0.1))
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    upd, _ = chain.update(per_ex, chain.init(params), params)
    ref0 = agg.private_mean(key, per_ex, clip_norm=1.0, noise_multiplier=0.0, denominator=8.0)
    np.testing.assert_allclose(upd["w"], -0.1 * ref0["w"], rtol=1e-6)


def test_group_weighted_dp_aggregate_equals_pure_function():
    rng = np.random.default_rng(7)
    per_ex = {"w": jnp.asarray(rng.normal(size=(10, 4)), jnp.float32)}
    groups = jnp.asarray(rng.integers(0, 2, size=10), jnp.int32)
    key = jax.random.key(8)
    kw = dict(clip_norm=0.7, noise_multipliers=jnp.array([1.0, 2.0]), group_weights=jnp.array([0.5, 0.5]))
    tx = agg.group_weighted_dp_aggregate(num_groups=2, key=key, denominators=jnp.array([5.0, 5.0]), **kw)
    out, _ = tx.update(per_ex, tx.init(None), groups=groups)
    _, noise_key = jax.random.split(key)
    ref = agg.group_weighted_private_mean(noise_key, per_ex, groups, 2, denominators=jnp.array([5.0, 5.0]), **kw)
    np.testing.assert_array_equal(out["w"], ref["w"])
    with pytest.raises(ValueError, match="groups"):
        tx.update(per_ex, tx.init(None))


def test_jit_matches_eager_and_vmap_over_grid():
    rng = np.random.default_rng(9)
    per_ex = {"w": jnp.asarray(rng.normal(size=(16, 5)), jnp.float32)}
    key = jax.random.key(10)

    def f(c, z):
        return agg.private_mean(key, per_ex, clip_norm=c, noise_multiplier=z, denominator=16.0)["w"]

    eager = f(0.5, 2.0)
    np.testing.assert_allclose(jax.jit(f)(0.5, 2.0), eager, rtol=1e-5, atol=1e-6)
    cs = jnp.array([0.1, 0.5, 2.0])
    zs = jnp.array([0.0, 2.0, 1.0])
    grid = jax.jit(jax.vmap(f))(cs, zs)
    for i in range(3):
        np.testing.assert_allclose(grid[i], f(float(cs[i]), float(zs[i])), rtol=1e-5, atol=1e-6)


def test_validation_errors():
    per_ex = {"w": jnp.ones((4, 2))}
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="clip_norm"):
        agg.private_sum(key, per_ex, clip_norm=0.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        agg.private_sum(key, per_ex, clip_norm=1.0, noise_multiplier=-0.5)
    with pytest.raises(ValueError, match="denominator"):
        agg.private_mean(key, per_ex, clip_norm=1.0, noise_multiplier=1.0, denominator=0.0)
    with pytest.raises(ValueError, match="mismatched lengths"):
        agg.private_sum(key, per_ex, clip_norm=1.0, noise_multiplier=1.0, mask=jnp.ones(3))
    with pytest.raises(ValueError, match="per_example_tree"):
        agg.private_sum(key, {"w": jnp.array([[jnp.nan]])}, clip_norm=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="s has group ids"):
        agg.group_clipped_sums(per_ex, jnp.array([0, 1, 2, 3]), 3, 1.0)
    with pytest.raises(ValueError, match="stds"):
        agg.group_weighted_noisy_sums(key, {"a": jnp.zeros((3, 2))}, jnp.ones(2))
    with pytest.raises(ValueError, match="group_weights"):
        agg.group_weighted_private_mean(key, per_ex, jnp.zeros(4, jnp.int32), 2, clip_norm=1.0,
                                        noise_multipliers=jnp.ones(2), group_weights=jnp.ones(3),
                                        denominators=jnp.ones(2))
    with pytest.raises(ValueError, match="clip_norm"):
        agg.dp_aggregate(clip_norm=-1.0, noise_multiplier=1.0, key=0)


def test_clip_norm_inf_is_unclipped_and_only_noiseless():
    rng = np.random.default_rng(5)
    g = {"w": jnp.asarray(rng.normal(size=(6, 3)) * 10, jnp.float32)}
    s = jnp.asarray([0, 1, 0, 2, 1, 0])
    key = jax.random.key(0)
    total, _ = agg.private_sum(key, g, clip_norm=float("inf"), noise_multiplier=0.0)
    np.testing.assert_allclose(total["w"], np.asarray(g["w"]).sum(0), rtol=1e-6)
    mean = agg.private_mean(key, g, clip_norm=np.inf, noise_multiplier=0.0, denominator=6)
    np.testing.assert_allclose(mean["w"], np.asarray(g["w"]).mean(0), rtol=1e-6)
    sums = agg.group_clipped_sums(g, s, 3, float("inf"))
    ref = np.stack([np.asarray(g["w"])[np.asarray(s) == k].sum(0) for k in range(3)])
    np.testing.assert_allclose(sums["w"], ref, rtol=1e-6)
    gm = agg.group_weighted_private_mean(key, g, s, 3, clip_norm=np.inf, noise_multipliers=jnp.zeros(3),
                                         group_weights=jnp.ones(3) / 3, denominators=jnp.asarray([3.0, 2, 1]))
    np.testing.assert_allclose(gm["w"], (ref / np.asarray([3.0, 2, 1])[:, None]).mean(0), rtol=1e-5)
    assert np.all(np.isfinite(gm["w"]))
    with pytest.raises(ValueError, match="noise_multiplier=0"):
        agg.private_sum(key, g, clip_norm=float("inf"), noise_multiplier=1.0)
    with pytest.raises(ValueError, match="noise_multipliers=0"):
        agg.group_weighted_private_mean(key, g, s, 3, clip_norm=np.inf, noise_multipliers=jnp.ones(3),
                                        group_weights=jnp.ones(3), denominators=jnp.ones(3))
    with pytest.raises(ValueError, match="noise_multiplier=0"):
        agg.dp_aggregate(clip_norm=np.inf, noise_multiplier=0.5, key=0)
    # the noiseless unclipped optax path is the plain mean
    tx = agg.dp_aggregate(clip_norm=np.inf, noise_multiplier=0.0, key=0)
    out, _ = tx.update(g, tx.init(None))
    np.testing.assert_allclose(out["w"], np.asarray(g["w"]).mean(0), rtol=1e-6)


def test_gaussian_std_and_noised_mean_closed_form():
    """``gaussian_std = z * Delta`` (0 at ``z = 0``, also for ``Delta = inf``); ``noised_mean`` is
    ``(S + N(0, (z Delta)^2)) / den``: on a zero sum its entries have std ``z Delta / den``."""
    from dpfair_jax.privacy import mechanisms

    assert float(agg.gaussian_std(1.5, 2.0)) == 3.0
    assert float(agg.gaussian_std(0.0, float("inf"))) == 0.0
    assert float(jax.jit(agg.gaussian_std)(jnp.float32(0.0), jnp.float32(2.0))) == 0.0
    zero = {"a": jnp.zeros(40_000), "b": jnp.zeros((100, 100))}
    z, sens, den = 1.3, 0.7, 8.0
    out = agg.noised_mean(jax.random.key(0), zero, sensitivity=sens, noise_multiplier=z, denominator=den)
    flat = np.concatenate([np.asarray(out["a"]), np.asarray(out["b"]).ravel()]).astype(np.float64)
    sigma = z * sens / den
    assert abs(flat.std() - sigma) < 3 * sigma / np.sqrt(2 * flat.size)
    assert abs(flat.mean()) < 3 * sigma / np.sqrt(flat.size)
    # the same draw as the Gaussian mechanism with that std, divided by the denominator
    ref = mechanisms.gaussian_mechanism(jax.random.key(0), zero, jnp.float32(z) * jnp.float32(sens))
    np.testing.assert_array_equal(np.asarray(out["a"]), np.asarray(ref["a"] / jnp.float32(den)))
