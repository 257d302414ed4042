"""Tests for dpfair_jax.privacy.clipping: clipping bounds, NumPy references, ghost norms vs vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpfair_jax import models
from dpfair_jax.privacy import clipping as clip

RTOL = 1e-5


def _np_norms(tree) -> np.ndarray:
    leaves = [np.asarray(l, np.float64) for l in jax.tree_util.tree_leaves(tree)]
    return np.sqrt(sum((l.reshape(l.shape[0], -1) ** 2).sum(1) for l in leaves))


@st.composite
def per_example_trees(draw):
    batch = draw(st.integers(1, 6))
    shapes = draw(st.lists(st.lists(st.integers(1, 4), min_size=0, max_size=3), min_size=1, max_size=4))
    scale = draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0, 1e3]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    leaves = {f"l{i}": (scale * rng.normal(size=(batch, *s))).astype(np.float32) for i, s in enumerate(shapes)}
    # A nested structure: dict with a tuple inside.
    tree = {"a": leaves, "b": (leaves["l0"] * 0.5,)}
    if draw(st.booleans()):
        tree["a"]["l0"][0] = 0.0  # an all-zero leaf slice
    clip_norm = draw(st.sampled_from([1e-2, 0.5, 1.0, 7.0]))
    return tree, clip_norm


@settings(max_examples=15, deadline=None)
@given(per_example_trees())
@pytest.mark.slow
def test_clip_per_example_bounds_norms(args):
    tree, c = args
    clipped, norms = clip.clip_per_example(tree, c)
    np.testing.assert_allclose(norms, _np_norms(tree), rtol=RTOL, atol=1e-6)
    new = _np_norms(clipped)
    assert np.all(new <= c * (1 + RTOL) + 1e-7)
    # Examples under the bound are untouched; those over it end exactly on it, same direction.
    orig = _np_norms(tree)
    under = orig <= c
    for a, b in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(clipped)):
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        np.testing.assert_allclose(b[under], a[under], rtol=1e-6)
        scale = (c / orig[~under]).reshape((-1,) + (1,) * (a.ndim - 1))
        np.testing.assert_allclose(b[~under], a[~under] * scale, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(new[~under], c, rtol=1e-4)


@settings(max_examples=10, deadline=None)
@given(per_example_trees())
def test_clip_per_layer_bounds_each_leaf(args):
    tree, c = args
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    cs = treedef.unflatten([c * (i + 1) for i in range(len(leaves))])
    clipped, norms = clip.clip_per_layer(tree, cs)
    for leaf, cl, ci, n in zip(leaves, jax.tree_util.tree_leaves(clipped), range(len(leaves)),
                               jax.tree_util.tree_leaves(norms)):
        np.testing.assert_allclose(n, _np_norms([leaf]), rtol=RTOL, atol=1e-6)
        assert np.all(_np_norms([cl]) <= c * (ci + 1) * (1 + RTOL) + 1e-7)
    np.testing.assert_allclose(clip.per_layer_sensitivity(cs), c * np.sqrt(sum((i + 1) ** 2 for i in range(len(leaves)))),
                               rtol=1e-5)
    # A scalar clip norm applies to every leaf.
    clipped2, _ = clip.clip_per_layer(tree, c)
    for cl in jax.tree_util.tree_leaves(clipped2):
        assert np.all(_np_norms([cl]) <= c * (1 + RTOL) + 1e-7)


def _logistic_loss(params, x, y):
    z = x @ params["w"] + params["b"]
    return jnp.logaddexp(0.0, z) - y * z


def test_clipped_grad_sum_matches_numpy_loop():
    rng = np.random.default_rng(0)
    b, d, c = 16, 5, 0.7
    x = rng.normal(size=(b, d)).astype(np.float32) * 2
    y = (rng.random(b) < 0.5).astype(np.float32)
    mask = (rng.random(b) < 0.75).astype(np.float32)
    params = {"w": rng.normal(size=d).astype(np.float32), "b": np.float32(0.3)}
    res = clip.clipped_grad_sum(_logistic_loss, params, (x, y), clip_norm=c, weights=mask)
    total, norms = res.sums, res.norms
    # NumPy loop reference with the closed-form logistic gradient (sigmoid(z) - y) [x, 1].
    ref_w, ref_b, ref_norms = np.zeros(d), 0.0, []
    for i in range(b):
        z = float(x[i].astype(np.float64) @ params["w"] + params["b"])
        r = 1 / (1 + np.exp(-z)) - y[i]
        g = np.concatenate([r * x[i], [r]])
        nrm = np.linalg.norm(g)
        ref_norms.append(nrm)
        g = g * min(1.0, c / nrm)
        ref_w += mask[i] * g[:d]
        ref_b += mask[i] * g[d]
    np.testing.assert_allclose(norms, ref_norms, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total["w"], ref_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total["b"], ref_b, rtol=1e-5, atol=1e-6)
    # jit equals eager.
    f = jax.jit(lambda p, x, y, m, c: clip.clipped_grad_sum(_logistic_loss, p, (x, y), clip_norm=c, weights=m))
    tj, nj = f(params, x, y, mask, c)[:2]
    np.testing.assert_allclose(tj["w"], total["w"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(nj, norms, rtol=1e-6)


def _glm_case(kind: str, fit_intercept: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    b, d, k = 32, 7, 4
    x = (rng.normal(size=(b, d)) * rng.uniform(0.1, 3, size=(b, 1))).astype(np.float32)
    if kind == "multinomial":
        model = models.multinomial_logistic(k, fit_intercept=fit_intercept)
        y = rng.integers(0, k, size=b).astype(np.int32)
        out_loss = models.softmax_cross_entropy
    elif kind == "logistic":
        model = models.logistic(fit_intercept=fit_intercept)
        y = (rng.random(b) < 0.5).astype(np.int32)
        out_loss = models.binary_logistic_loss
    else:
        model = models.linear(fit_intercept=fit_intercept)
        y = rng.normal(size=b).astype(np.float32)
        out_loss = models.squared_loss
    params = model.init(jax.random.key(seed), d)
    params = jax.tree_util.tree_map(lambda p: p + 0.3 * rng.normal(size=p.shape).astype(np.float32), params)
    return model, params, x, y, out_loss


@pytest.mark.parametrize("kind", ["logistic", "linear", "multinomial"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_glm_ghost_norms_equal_vmap(kind, fit_intercept):
    model, params, x, y, out_loss = _glm_case(kind, fit_intercept)
    loss = lambda p, xi, yi: out_loss(model.apply(p, xi), yi)  # noqa: E731
    vmap_norms = jax.jit(lambda p: clip.per_example_norms(clip.per_example_grads(loss, p, x, y)))(params)
    z = x @ params["w"] + (params["b"] if fit_intercept else 0.0)
    dz = jax.grad(lambda zz: jnp.sum(out_loss(zz[:, 0] if zz.shape[1] == 1 else zz, y)))(z)
    ghost = clip.glm_per_example_norms(x, dz, fit_intercept)
    np.testing.assert_allclose(ghost, vmap_norms, rtol=1e-5)
    # The ghost clipped sum equals the vmap clipped sum.
    mask = (np.arange(x.shape[0]) % 5 != 0).astype(np.float32)
    c = float(np.median(vmap_norms))
    sums, _ = clip.glm_clipped_grad_sum(x, dz, c, mask, fit_intercept)
    ref = jax.jit(lambda p: clip.clipped_grad_sum(loss, p, (x, y), clip_norm=c, weights=mask).sums)(params)
    np.testing.assert_allclose(sums["w"], ref["w"], rtol=1e-5, atol=1e-6)
    if fit_intercept:
        np.testing.assert_allclose(sums["b"], ref["b"], rtol=1e-5, atol=1e-6)


def test_glm_ghost_one_dimensional_logits():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 3)).astype(np.float32)
    g = rng.normal(size=10).astype(np.float32)
    ref = np.sqrt((x.astype(np.float64) ** 2).sum(1) * g**2 + g**2)
    np.testing.assert_allclose(clip.glm_per_example_norms(x, g), ref, rtol=1e-5)
    sums, _ = clip.glm_clipped_grad_sum(x, g, 1e9)
    np.testing.assert_allclose(sums["w"], g @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums["b"], g.sum(), rtol=1e-5, atol=1e-5)


def test_dense_ghost_norm_identity_rows_and_sequences():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(5, 4)).astype(np.float32)
    g = rng.normal(size=(5, 3)).astype(np.float32)
    ref = np.array([np.sum(np.outer(a[i], g[i]) ** 2) for i in range(5)])
    np.testing.assert_allclose(clip.dense_ghost_norm_sq(a, g), ref, rtol=1e-5)
    a3 = rng.normal(size=(5, 6, 4)).astype(np.float32)
    g3 = rng.normal(size=(5, 6, 3)).astype(np.float32)
    ref3 = np.array([np.sum((a3[i].T @ g3[i]) ** 2) for i in range(5)])
    np.testing.assert_allclose(clip.dense_ghost_norm_sq(a3, g3), ref3, rtol=1e-4)


@pytest.mark.parametrize("hidden", [(16,), (8, 5)])
def test_mlp_ghost_clipping_equals_vmap(hidden):
    rng = np.random.default_rng(3)
    b, d = 24, 6
    x = rng.normal(size=(b, d)).astype(np.float32)
    y = (rng.random(b) < 0.5).astype(np.float32)
    key = jax.random.key(0)
    sizes = (d, *hidden, 1)
    params = []
    for i, (din, dout) in enumerate(zip(sizes[:-1], sizes[1:])):
        kw, kb = jax.random.split(jax.random.fold_in(key, i))
        params.append({"w": jax.random.normal(kw, (din, dout)) / np.sqrt(din),
                       "b": 0.1 * jax.random.normal(kb, (dout,))})

    def out_loss(out, yy):
        return models.binary_logistic_loss(out[..., 0], yy)

    def loss_one(p, xi, yi):
        out, _ = clip.mlp_forward(p, xi[None], jnp.tanh)
        return out_loss(out, yi[None])[0]

    vmap_norms = jax.jit(lambda p: clip.per_example_norms(clip.per_example_grads(loss_one, p, x, y)))(params)
    c = float(np.median(vmap_norms))
    mask = (np.arange(b) % 3 != 0).astype(np.float32)
    sums, norms, losses = jax.jit(
        lambda p: clip.mlp_clipped_grad_sum(p, x, y, out_loss, c, mask=mask))(params)
    np.testing.assert_allclose(norms, vmap_norms, rtol=1e-5)
    ref = jax.jit(lambda p: clip.clipped_grad_sum(loss_one, p, (x, y), clip_norm=c, weights=mask).sums)(params)
    for got, want in zip(jax.tree_util.tree_leaves(sums), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(losses, jax.jit(jax.vmap(loss_one, in_axes=(None, 0, 0)))(params, x, y), rtol=1e-5)


def test_validation_errors():
    tree = {"w": jnp.ones((3, 2))}
    with pytest.raises(ValueError, match="clip_norm"):
        clip.clip_per_example(tree, 0.0)
    with pytest.raises(ValueError, match="clip_norm"):
        clip.clip_per_example(tree, -1.0)
    with pytest.raises(ValueError, match="mismatched lengths"):
        clip.per_example_norms({"a": jnp.ones((3, 2)), "b": jnp.ones((4,))})
    with pytest.raises(ValueError, match="clip_norms"):
        clip.clip_per_layer({"a": jnp.ones((3, 2)), "b": jnp.ones((3,))}, {"a": 1.0})
    with pytest.raises(ValueError, match="mismatched lengths"):
        clip.glm_per_example_norms(jnp.ones((3, 2)), jnp.ones(4))
    with pytest.raises(ValueError, match="params"):
        clip.mlp_clipped_grad_sum([{"w": jnp.ones((2, 3))}], jnp.ones((4, 2)), jnp.ones(4),
                                  lambda o, y: o[:, 0], 1.0)
