"""Tests for dpfair_jax.algorithms.dpsgd: references, ghost vs vmap, grid vmap, noise, accounting."""

from __future__ import annotations

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from dpfair_jax import models
from dpfair_jax.algorithms import dpsgd
from dpfair_jax.data.dataset import make_dataset
from _sgd_keywords import dpsgd_fit_kw, dpsgd_spend_kw


def _data(n=200, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32) * rng.uniform(0.2, 3.0, size=(n, 1)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, d) + 0.5 * rng.normal(size=n) > 0).astype(np.int32)
    return x, y


def _np_clipped_gd(x, y, clip_norm, lr, steps, weights=None):
    """NumPy full-batch DP-SGD without noise for logistic regression (per-example clipping)."""
    x = x.astype(np.float64)
    n, d = x.shape
    weights = np.ones(n) if weights is None else weights
    w, b = np.zeros(d), 0.0
    for _ in range(steps):
        r = 1 / (1 + np.exp(-(x @ w + b))) - y
        g = np.concatenate([r[:, None] * x, r[:, None]], axis=1)
        g *= (weights * np.minimum(1.0, clip_norm / np.linalg.norm(g, axis=1)))[:, None]
        step = g.sum(0) / n
        w, b = w - lr * step[:d], b - lr * step[d]
    return w, b


@pytest.mark.parametrize("clip_norm", [1e6, 0.3])
def test_full_batch_without_noise_matches_numpy(clip_norm):
    x, y = _data()
    model = models.logistic()
    params = model.init(jax.random.key(0), x.shape[1])
    out, diag = dpsgd_fit_kw(jax.random.key(1), model, params, (x, y), clip_norm=clip_norm,
                            noise_multiplier=0.0, learning_rate=0.5, batch_size=x.shape[0],
                            epochs=6, sampling="shuffle")
    w, b = _np_clipped_gd(x, y, clip_norm, 0.5, 6)
    np.testing.assert_allclose(out["w"][:, 0], w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["b"][0], b, rtol=1e-4, atol=1e-5)
    assert diag["loss"].shape == (6,)
    assert float(diag["clip_fraction"][0]) == (0.0 if clip_norm > 1e3 else pytest.approx(
        np.mean(np.linalg.norm(np.c_[0.5 * x, np.full(len(x), 0.5)], axis=1) > clip_norm), abs=1e-6))


def test_dataset_mask_rows_are_left_out():
    x, y = _data(n=60, d=3, seed=1)
    mask = (np.arange(60) % 4 != 0).astype(np.float32)
    ds = make_dataset(x, y, np.zeros(60, np.int32), mask=mask)
    model = models.logistic()
    params = model.init(jax.random.key(0), 3)
    out, diag = dpsgd_fit_kw(jax.random.key(1), model, params, ds, clip_norm=0.3, noise_multiplier=0.0,
                            learning_rate=0.5, batch_size=60, epochs=3, sampling="shuffle")
    w, b = _np_clipped_gd(x, y, 0.3, 0.5, 3, weights=mask)
    np.testing.assert_allclose(out["w"][:, 0], w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["b"][0], b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(diag["batch_size"], mask.sum())


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_ghost_norms_equal_vmap_path(kind):
    x, y = _data(n=120, d=4)
    model = models.logistic() if kind == "logistic" else models.mlp((8,))
    params = model.init(jax.random.key(2), x.shape[1])
    mode, act = dpsgd.resolve_per_example(model, params)
    assert mode == ("glm" if kind == "logistic" else "mlp")
    kw = dict(clip_norm=0.5, noise_multiplier=1.1, learning_rate=0.3, batch_size=20, steps=8,
              sampling="fixed_size")
    ghost, dg = dpsgd_fit_kw(jax.random.key(3), model, params, (x, y), per_example="ghost", **kw)
    ref, dr = dpsgd_fit_kw(jax.random.key(3), model, params, (x, y), per_example="vmap", **kw)
    for a, b in zip(jax.tree_util.tree_leaves(ghost), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dg["mean_grad_norm"], dr["mean_grad_norm"], rtol=1e-5)


def test_jitted_vmap_over_grid_equals_per_point_and_jit_equals_eager():
    x, y = _data(n=100, d=3)
    model = models.logistic()
    params = model.init(jax.random.key(0), 3)
    key = jax.random.key(4)

    def run(c, z, lr):
        p, _ = dpsgd_fit_kw(key, model, params, (x, y), clip_norm=c, noise_multiplier=z, learning_rate=lr,
                           batch_size=10, steps=12, sampling="poisson", diagnostics=False)
        return p

    cs = jnp.array([0.1, 1.0, 3.0, 1.0])
    zs = jnp.array([0.0, 0.5, 2.0, 0.5])
    lrs = jnp.array([0.1, 0.2, 0.05, 0.4])
    grid = jax.jit(jax.vmap(run))(cs, zs, lrs)
    for i in range(4):
        point = run(float(cs[i]), float(zs[i]), float(lrs[i]))
        np.testing.assert_allclose(grid["w"][i], point["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grid["b"][i], point["b"], rtol=1e-5, atol=1e-6)
    jitted = jax.jit(run)(1.0, 0.5, 0.2)
    np.testing.assert_allclose(jitted["w"], grid["w"][1], rtol=1e-5, atol=1e-6)


def test_noise_has_configured_scale_and_generic_pytree_loss():
    # A loss with zero gradient: one SGD step moves params by exactly -lr * noise / batch_size.
    params = {"a": jnp.zeros(30_000), "b": (jnp.zeros((100, 200)),)}

    def zero_loss(p, xi, yi):
        return 0.0 * (jnp.sum(p["a"]) + jnp.sum(p["b"][0])) * xi[0] + 0.0 * yi

    x = np.ones((8, 2), np.float32)
    y = np.zeros(8, np.float32)
    c, z, lr, bsz = 0.7, 2.0, 1.0, 4
    out, diag = dpsgd_fit_kw(jax.random.key(5), zero_loss, params, (x, y), clip_norm=c, noise_multiplier=z,
                            learning_rate=lr, batch_size=bsz, steps=1, sampling="fixed_size")
    noise = np.concatenate([np.asarray(out["a"]), np.asarray(out["b"][0]).ravel()]).astype(np.float64)
    sigma = lr * z * c / bsz
    se = sigma / np.sqrt(2 * noise.size)
    assert abs(noise.std() - sigma) < 3 * se
    assert abs(noise.mean()) < 3 * sigma / np.sqrt(noise.size)
    assert float(diag["mean_grad_norm"][0]) == 0.0


def test_poisson_batches_have_expected_size_and_dataset_input():
    x, y = _data(n=500, d=3)
    ds = make_dataset(x, y, np.zeros(500, np.int32))
    model = models.logistic()
    params = model.init(jax.random.key(0), 3)
    steps, bsz = 300, 50
    _, diag = dpsgd_fit_kw(jax.random.key(6), model, params, ds, clip_norm=1.0, noise_multiplier=1.0,
                          learning_rate=0.1, batch_size=bsz, steps=steps, sampling="poisson",
                          optimizer=optax.adam)
    sizes = np.asarray(diag["batch_size"], np.float64)
    q = bsz / 500
    sd = np.sqrt(500 * q * (1 - q))
    assert abs(sizes.mean() - bsz) < 3 * sd / np.sqrt(steps)
    assert not np.any(np.asarray(diag["truncated"]))
    assert np.all(np.isfinite(diag["loss"]))


def test_privacy_matches_dp_accounting():
    n, bsz, epochs, delta, z = 10_000, 100, 3, 1e-5, 1.2
    steps = epochs * (n // bsz)
    spend = dpsgd_spend_kw(z, n=n, batch_size=bsz, epochs=epochs, delta=delta, sampling="poisson")
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(bsz / n, dp_accounting.GaussianDpEvent(z)), steps)
    assert spend.relation == "add_remove" and spend.delta == delta  # the charge is taken out of delta
    # the truncation charge at the default width (the smallest B with T P(Bin(n + 1, q) > B) <= 1e-9),
    # written out: (1 + e^eps) T P(Binomial(n + 1, q) > B)
    b = bsz
    while steps * stats.binom.sf(b, n + 1, bsz / n) > 1e-9:
        b += 1
    trunc = (1 + np.exp(spend.epsilon)) * steps * stats.binom.sf(b, n + 1, bsz / n)
    assert trunc > 0 and spend.epsilon == pytest.approx(acc.get_epsilon(delta - trunc), rel=1e-8)
    # Fixed-size batches: sampling without replacement, replace-one, sensitivity 2C -> multiplier z / 2.
    fs = dpsgd_spend_kw(z, n=n, batch_size=bsz, steps=steps, delta=delta, sampling="fixed_size")
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, bsz, dp_accounting.GaussianDpEvent(z / 2)), steps)
    assert fs.epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
    assert fs.relation == "replace_one" and fs.delta == delta
    # Shuffled epochs: no amplification, `epochs` composed Gaussians of multiplier z / 2 (replace-one):
    # one Gaussian with mu = 2 sqrt(epochs) / z; its delta at the spend's epsilon (Balle-Wang, SciPy).
    sh = dpsgd_spend_kw(z, n=n, batch_size=bsz, epochs=epochs, delta=delta, sampling="shuffle")
    mu, e = 2 * np.sqrt(epochs) / z, sh.epsilon
    assert stats.norm.cdf(mu / 2 - e / mu) - np.exp(e) * stats.norm.cdf(-mu / 2 - e / mu) == pytest.approx(delta, rel=1e-6)
    assert sh.relation == "replace_one" and sh.delta == delta and sh.accountant == "exact"
    assert dpsgd_spend_kw(0.0, n=n, batch_size=bsz, steps=5, delta=delta).epsilon == float("inf")


def test_validation_errors():
    x, y = _data(n=50, d=2)
    model = models.logistic()
    params = model.init(jax.random.key(0), 2)
    key = jax.random.key(0)
    base = dict(clip_norm=1.0, noise_multiplier=1.0, learning_rate=0.1, batch_size=10, steps=5)

    def call(data=(x, y), **kw):
        args = {**base, **kw}
        return dpsgd_fit_kw(key, model, params, data, **args)

    with pytest.raises(ValueError, match="clip_norm"):
        call(clip_norm=0.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        call(noise_multiplier=-1.0)
    with pytest.raises(ValueError, match="learning_rate"):
        call(learning_rate=-0.1)
    with pytest.raises(ValueError, match="batch_size"):
        call(batch_size=51)
    with pytest.raises(ValueError, match="mismatched lengths"):
        call(data=(x, y[:-1]))
    with pytest.raises(ValueError, match="x contains"):
        call(data=(np.where(x > 1, np.nan, x), y))
    with pytest.raises(ValueError, match="steps= or epochs="):
        call(epochs=2)
    with pytest.raises(ValueError, match="multiple"):
        call(sampling="shuffle", steps=7)
    with pytest.raises(ValueError, match="sampling"):
        call(sampling="bootstrap")
    with pytest.raises(ValueError, match="per_example"):
        dpsgd_fit_kw(key, lambda p, a, b: jnp.sum(p["w"]), params, (x, y), per_example="ghost", **base)
    with pytest.raises(ValueError, match="sample_rate|batch_size"):
        dpsgd_spend_kw(1.0, n=10, batch_size=20, steps=3, delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        dpsgd_spend_kw(1.0, n=100, batch_size=20, steps=3, delta=0.0)


@pytest.mark.parametrize("name", ["logistic", "mlp"])
def test_clipped_grad_sum_matches_manual_per_example_clipping(name):
    """The public per-batch primitive equals clipping hand-written per-example gradients."""
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import dpsgd as D

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(33, 7)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 2, size=33), jnp.float32)
    mask = jnp.asarray(rng.random(33) > 0.2, jnp.float32)
    model = M.logistic() if name == "logistic" else M.mlp((5,))
    params = model.init(jax.random.key(1), 7)
    out_loss = D.output_loss_for(model, 2)

    def loss_i(p, xi, yi):
        return out_loss(model.apply(p, xi[None]), yi[None])[0]

    grads = jax.vmap(jax.grad(loss_i), in_axes=(None, 0, 0))(params, x, y)
    leaves = jax.tree_util.tree_leaves(grads)
    norms = jnp.sqrt(sum(jnp.sum(l.reshape(33, -1) ** 2, axis=1) for l in leaves))
    c = jnp.minimum(1.0, 0.5 / norms) * mask
    want = jax.tree_util.tree_map(lambda g: jnp.tensordot(c, g, axes=1), grads)
    got, got_norms, _ = jax.jit(lambda p: D.clipped_grad_sum(model, p, x, y, clip_norm=0.5, mask=mask,
                                                            num_classes=2))(params)
    assert D.resolve_per_example(model, params)[0] == ("glm" if name == "logistic" else "mlp")
    np.testing.assert_allclose(got_norms, norms, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="clip"):
        D.clipped_grad_sum(model, params, x, y, clip_norm=-1.0)
