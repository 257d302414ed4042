"""Rounding errs on the safe side: float32 clipping, the analytic-Gaussian calibration, the
budget-tailoring sum table and the paper-001 Fig. 9 record (issue 25, item 5)."""

from __future__ import annotations

import itertools

import pytest

from dpfair_jax.privacy import accounting as A

mp = pytest.importorskip("mpmath")


def _balle_wang_delta(sigma: float, epsilon: float, sensitivity: float) -> "mp.mpf":
    """Balle & Wang (2018) Thm. 8 in 50-digit arithmetic (an independent reference)."""
    with mp.workdps(50):
        s, e, d = mp.mpf(sigma), mp.mpf(epsilon), mp.mpf(sensitivity)
        a, b = d / (2 * s), e * s / d
        return mp.ncdf(a - b) - mp.exp(e) * mp.ncdf(-a - b)


GRID = list(itertools.product([0.01, 0.1, 0.5, 1.0, 3.0, 10.0, 50.0], [1e-3, 1e-6, 1e-10, 1e-12], [1.0, 3.0]))


def test_analytic_gaussian_sigma_meets_delta_exactly():
    """The returned sigma's exact delta is at most the target (no tolerance), and the sigma is
    still within 1e-8 of the root."""
    for eps, delta, sens in GRID:
        s = A.analytic_gaussian_sigma(eps, delta, sens)
        assert _balle_wang_delta(s, eps, sens) <= delta, (eps, delta, sens, s)
        assert _balle_wang_delta(s * (1 - 1e-8), eps, sens) > delta, (eps, delta, sens, s)


def test_analytic_gaussian_epsilon_meets_delta_exactly():
    """The returned epsilon's exact delta at that sigma is at most the target (no tolerance)."""
    for eps, delta, sens in GRID:
        s = 1.01 * A.analytic_gaussian_sigma(eps, delta, sens)
        e = A.analytic_gaussian_epsilon(s, delta, sens)
        assert _balle_wang_delta(s, e, sens) <= delta, (eps, delta, sens, s, e)
        assert e < eps


# ------------------------------------------------------------------------------------------------
# Float32 clipping: every clipped vector has true (float64) L2 norm <= C, with no tolerance
# ------------------------------------------------------------------------------------------------
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from dpfair_jax.privacy import bounding as Bd  # noqa: E402
from dpfair_jax.privacy import clipping as Cl  # noqa: E402
from _sgd_keywords import dpsgd_spend_kw

CLIPS = [1.0, 0.1, 3.7, 1e-3, 2.0**-20]


def _adversarial_rows(rng, b: int, d: int) -> np.ndarray:
    """Random directions with norms from 1e-6 to 1e12 times C's range, in float32."""
    u = rng.standard_normal((b, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    scale = 10.0 ** rng.uniform(-6.0, 12.0, (b, 1))
    return (u * scale).astype(np.float32)


def _norms64(*leaves) -> np.ndarray:
    return np.sqrt(sum(np.sum(np.asarray(leaf, np.float64).reshape(leaf.shape[0], -1) ** 2, 1) for leaf in leaves))


@jax.jit
def _explicit_paths(g, c):
    d = g.shape[1]
    tree = {"a": g[:, : d // 2], "b": g[:, d // 2:]}
    per_example = Cl.clip_per_example(tree, c)[0]
    whole = Cl.clip_tree(tree, c)[0]
    per_layer = Cl.clip_per_layer(tree, c)[0]["b"]
    # vmap(grad) path of the dispatcher, one example per call (the sum of one is its vector)
    one = jax.vmap(lambda row: Cl.clipped_grad_sum(lambda p, r: jnp.dot(p, r), jnp.zeros(d, g.dtype), (row[None],),
                                                   clip_norm=c).sums)(g)
    return per_example, whole, per_layer, one


@pytest.mark.parametrize("d", [1, 3, 100, 2049])
def test_explicit_clipping_never_exceeds_c(d):
    rng = np.random.default_rng(d)
    for c in CLIPS:
        g = _adversarial_rows(rng, 512, d)
        per_example, whole, per_layer, one = _explicit_paths(jnp.asarray(g), jnp.float32(c))
        assert np.all(_norms64(per_example["a"], per_example["b"]) <= c), (d, c)
        assert np.all(_norms64(whole["a"], whole["b"]) <= c), (d, c)
        assert np.all(_norms64(per_layer) <= c), (d, c)
        assert np.all(_norms64(one) <= c), (d, c)


@jax.jit
def _glm_one(x, g, c):
    return jax.vmap(lambda xi, gi: Cl.glm_clipped_grad_sum(xi[None], gi[None], c)[0])(x, g)


@pytest.mark.parametrize("d,k", [(1, 1), (7, 1), (300, 1), (20, 5)])
def test_glm_ghost_clipping_never_exceeds_c(d, k):
    """The ghost path's contribution of one example, ``c_i (dl/dz_i) x_i`` (the sum over a batch
    of one), has true norm <= C."""
    rng = np.random.default_rng(100 * d + k)
    for c in CLIPS:
        x = _adversarial_rows(rng, 512, d)
        g = _adversarial_rows(rng, 512, k)
        g = g[:, 0] if k == 1 else g
        one = _glm_one(jnp.asarray(x), jnp.asarray(g), jnp.float32(c))
        assert np.all(_norms64(one["w"], one["b"]) <= c), (d, k, c)


def test_mlp_ghost_clipping_never_exceeds_c():
    rng = np.random.default_rng(7)
    params = [{"w": jnp.asarray(rng.standard_normal((5, 16)), jnp.float32), "b": jnp.zeros(16)},
              {"w": jnp.asarray(rng.standard_normal((16, 1)), jnp.float32), "b": jnp.zeros(1)}]
    x = jnp.asarray(_adversarial_rows(rng, 512, 5))
    y = jnp.asarray(rng.standard_normal(512) * 1e3, jnp.float32)
    loss = lambda out, yy: (out[:, 0] - yy) ** 2  # noqa: E731
    fn = jax.jit(jax.vmap(lambda xi, yi, c: Cl.mlp_clipped_grad_sum(params, xi[None], yi[None], loss, c)[0],
                          in_axes=(0, 0, None)))
    for c in CLIPS:
        one = fn(x, y, jnp.float32(c))
        leaves = [leaf for layer in one for leaf in (layer["w"], layer["b"])]
        assert np.all(_norms64(*leaves) <= c), c


@pytest.mark.parametrize("d", [1, 4, 300])
def test_bounding_clip_to_norm_never_exceeds_c(d):
    """``clip_to_norm`` with the rows' float32 norms: ``u x`` has true norm <= C."""
    rng = np.random.default_rng(d)
    for c in CLIPS:
        x = _adversarial_rows(rng, 1024, d)
        xn = jnp.linalg.norm(jnp.asarray(x), axis=1)
        u = np.asarray(Bd.clip_to_norm(jnp.ones(1024, jnp.float32), xn, jnp.float32(c), d), np.float32)
        assert np.all(_norms64(x * u[:, None]) <= c), (d, c)


# ------------------------------------------------------------------------------------------------
# Budget tailoring's clipped-sum table at paper-000 sizes: every sum within its clipped range
# ------------------------------------------------------------------------------------------------
def test_clipped_sum_table_never_exceeds_its_bounds():
    """Minority 100 at ratio 20 (slopes -10 / 10, Delta = 2, experiments/paper_000): at
    every theta (inside and far outside the box) each group's gradient sum is within
    ``Delta W_k``, its loss sum within ``[0, Delta^2 W_k]`` and its clipped count within
    ``[0, W_k]``, exactly (float32 prefix sums cancel and overshot the loss bound by ~1e-2
    relative)."""
    from dpfair_jax.algorithms.budget_tailoring import tables

    rng = np.random.default_rng(0)
    for sizes in ((2000, 100),):
        n = sum(sizes)
        s = np.repeat(np.arange(2), sizes)
        x = rng.standard_normal(n).astype(np.float32)
        y = (np.where(s == 0, -10.0, 10.0) * x + rng.standard_normal(n)).astype(np.float32)
        onehot = np.eye(2, dtype=np.float32)[s]
        w = onehot.sum(0).astype(np.float64)
        thetas = np.r_[np.linspace(-1e3, 1e3, 81), np.linspace(-20.0, 20.0, 81)].astype(np.float32)
        sums = jax.jit(lambda x, y, oh, th: jax.vmap(
            lambda t: tables.table_group_sums(tables.clipped_sum_table(x, y, oh, 2.0), t))(th))
        g, l, c = (np.asarray(a, np.float64) for a in sums(x, y, onehot, jnp.asarray(thetas)))
        assert np.all(np.abs(g) <= 2.0 * w) and np.all(l >= 0.0) and np.all(l <= 4.0 * w), sizes
        assert np.all(c >= 0.0) and np.all(c <= w), sizes


# ------------------------------------------------------------------------------------------------
# Paper 001: the checkpoint spends (Fig 9 and the DP-SGD lens) include the truncation charge of
# the padded Poisson batch the training used
# ------------------------------------------------------------------------------------------------
def test_paper_001_checkpoint_spend_includes_truncation():
    from _studies import load_study

    from dpfair_jax.algorithms import dpsgd
    from dpfair_jax.privacy import sampling
    from dpfair_jax.runner import registry

    P = load_study("paper_001")
    cfg = registry.get("lens_fig9").configs["quick"]
    n, bs, per = 1000, int(cfg["batch_size"]), int(cfg["steps_per_checkpoint"])
    width = sampling.max_batch_size_for(n, bs / n, per)  # what each checkpoint's dpsgd.fit pads to
    assert P._padded_width(n, cfg) == width
    spend = P._checkpoint_spend(n, cfg, 3)
    want = dpsgd_spend_kw(float(cfg["noise_multiplier"]), n=n, batch_size=bs, delta=float(cfg["delta"]),
                         steps=3 * per, max_batch_size=width)
    trunc = sampling.truncation_delta(n, bs / n, width, 3 * per, spend.epsilon)
    assert trunc > 0 and spend.epsilon == want.epsilon and spend.delta == want.delta
    assert spend.delta == float(cfg["delta"])  # the charge is taken out of delta
