"""Ghost norms (dense, embedding, conv2d) against vmap per-example gradients, computed in NumPy float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models
from dpfair_jax.privacy import clipping, ghost

RTOL = 1e-5


def _np_norm_sq(tree) -> np.ndarray:
    leaves = [np.asarray(l, np.float64) for l in jax.tree_util.tree_leaves(tree)]
    return sum(np.sum(l.reshape(l.shape[0], -1) ** 2, axis=1) for l in leaves)


def _vmap_grads(loss, params, *batch):
    return jax.vmap(jax.grad(loss), in_axes=(None,) + (0,) * len(batch))(params, *batch)


@pytest.mark.parametrize("method", [pytest.param("gram", marks=pytest.mark.slow), "direct"])
def test_dense_sequence_norms_match_vmap(method):
    k = jax.random.split(jax.random.key(0), 4)
    B, T, di, do = 5, 7, 6, 4
    a = jax.random.normal(k[0], (B, T, di))
    r = jax.random.normal(k[1], (B, T, do))  # output gradients: loss_i = sum(z_i * r_i)
    params = {"w": jax.random.normal(k[2], (di, do)), "b": jnp.zeros(do)}

    def loss(p, a_i, r_i):
        return jnp.sum((a_i @ p["w"] + p["b"]) * r_i)

    ref = _np_norm_sq(_vmap_grads(loss, params, a, r))
    got = ghost.dense_norm_sq(a, r, method=method)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=RTOL)
    # rows (T = 1) and no bias
    got2 = ghost.dense_norm_sq(a[:, 0], r[:, 0], bias=False)
    ref2 = _np_norm_sq(_vmap_grads(lambda p, x, y: loss(p, x[None], y[None]), params, a[:, 0], r[:, 0])["w"])
    np.testing.assert_allclose(np.asarray(got2), ref2, rtol=RTOL)


def test_dense_weighted_grad_matches_weighted_vmap_sum():
    k = jax.random.split(jax.random.key(1), 4)
    B, T, di, do = 6, 3, 5, 2
    a = jax.random.normal(k[0], (B, T, di))
    r = jax.random.normal(k[1], (B, T, do))
    c = jax.random.uniform(k[2], (B,))
    params = {"w": jnp.zeros((di, do)), "b": jnp.zeros(do)}
    g = _vmap_grads(lambda p, x, y: jnp.sum((x @ p["w"] + p["b"]) * y), params, a, r)
    got = ghost.dense_weighted_grad(a, r, c)
    for name in ("w", "b"):
        ref = np.tensordot(np.asarray(c, np.float64), np.asarray(g[name], np.float64), axes=1)
        np.testing.assert_allclose(np.asarray(got[name]), ref, rtol=RTOL, atol=1e-6)


def test_embedding_norms_with_repeated_tokens():
    k = jax.random.split(jax.random.key(2), 3)
    B, T, V, D = 6, 9, 5, 3  # V < T: every sequence repeats tokens
    ids = jax.random.randint(k[0], (B, T), 0, V)
    r = jax.random.normal(k[1], (B, T, D))
    table = jax.random.normal(k[2], (V, D))

    def loss(e, ids_i, r_i):
        return jnp.sum(e[ids_i] * r_i)

    grads = _vmap_grads(loss, table, ids, r)  # [B, V, D]
    ref = _np_norm_sq(grads)
    got = ghost.embedding_norm_sq(ids, r)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=RTOL)
    # the naive sum over positions of ||g_t||^2 is wrong when tokens repeat
    naive = np.sum(np.asarray(r, np.float64) ** 2, axis=(1, 2))
    assert np.max(np.abs(naive - ref) / ref) > 1e-2
    c = jnp.linspace(0.1, 1.0, B)
    wsum = ghost.embedding_weighted_grad(ids, r, c, V)
    ref_w = np.tensordot(np.asarray(c, np.float64), np.asarray(grads, np.float64), axes=1)
    np.testing.assert_allclose(np.asarray(wsum), ref_w, rtol=RTOL, atol=1e-6)
    # one token per example
    got1 = ghost.embedding_norm_sq(ids[:, 0], r[:, 0])
    np.testing.assert_allclose(np.asarray(got1), np.sum(np.asarray(r[:, 0], np.float64) ** 2, 1), rtol=RTOL)


@pytest.mark.slow
@pytest.mark.parametrize("method,strides,padding", [("gram", (1, 1), "SAME"), ("direct", (2, 2), "VALID")])
def test_conv2d_norms_match_vmap(method, strides, padding):
    k = jax.random.split(jax.random.key(3), 4)
    B, H, W, cin, cout, ks = 4, 6, 7, 2, 3, (3, 2)
    x = jax.random.normal(k[0], (B, H, W, cin))
    kernel = jax.random.normal(k[1], (*ks, cin, cout))
    bias = jnp.zeros(cout)

    def conv(p, x_i):
        out = jax.lax.conv_general_dilated(x_i[None], p["kernel"], strides, padding,
                                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return out[0] + p["bias"]

    out_shape = conv({"kernel": kernel, "bias": bias}, x[0]).shape
    r = jax.random.normal(k[2], (B, *out_shape))
    params = {"kernel": kernel, "bias": bias}
    grads = _vmap_grads(lambda p, x_i, r_i: jnp.sum(conv(p, x_i) * r_i), params, x, r)
    ref = _np_norm_sq(grads)
    got = ghost.conv2d_norm_sq(x, r, ks, strides=strides, padding=padding, method=method)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=RTOL)
    c = jax.random.uniform(k[3], (B,))
    wsum = ghost.conv2d_weighted_grad(x, r, c, ks, strides=strides, padding=padding)
    for name in ("kernel", "bias"):
        ref_w = np.tensordot(np.asarray(c, np.float64), np.asarray(grads[name], np.float64), axes=1)
        np.testing.assert_allclose(np.asarray(wsum[name]), ref_w, rtol=RTOL, atol=1e-5)


@pytest.mark.slow
def test_kit_cnn_first_layer_and_total_norm():
    """Book-keeping on the kit's CNN layer shapes: conv -> relu -> dense, total norm vs vmap."""
    k = jax.random.split(jax.random.key(4), 5)
    B, H, cin, cout, ncls = 5, 6, 1, 4, 3
    x = jax.random.normal(k[0], (B, H, H, cin))
    y = jax.random.randint(k[1], (B,), 0, ncls)
    params = {"kernel": 0.3 * jax.random.normal(k[2], (3, 3, cin, cout)), "bias": jnp.zeros(cout),
              "w": 0.3 * jax.random.normal(k[3], (H * H * cout, ncls)), "b": jnp.zeros(ncls)}

    def forward(p, xb, probes=None):
        z1 = jax.lax.conv_general_dilated(xb, p["kernel"], (1, 1), "SAME",
                                          dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["bias"]
        if probes is not None:
            z1 = z1 + probes[0]
        a1 = jax.nn.relu(z1).reshape(xb.shape[0], -1)
        z2 = a1 @ p["w"] + p["b"]
        if probes is not None:
            z2 = z2 + probes[1]
        return z2, a1

    def losses(z, yb):
        return -jnp.take_along_axis(jax.nn.log_softmax(z), yb[:, None], 1)[:, 0]

    probes = [jnp.zeros((B, H, H, cout)), jnp.zeros((B, ncls))]
    (_, a1), (g1, g2) = jax.value_and_grad(
        lambda pr: (jnp.sum(losses(forward(params, x, pr)[0], y)), forward(params, x, pr)[1]),
        has_aux=True)(probes)
    norms = ghost.total_norms(ghost.conv2d_norm_sq(x, g1, (3, 3)), ghost.dense_norm_sq(a1, g2))
    grads = _vmap_grads(lambda p, xi, yi: losses(forward(p, xi[None])[0], yi[None])[0], params, x, y)
    np.testing.assert_allclose(np.asarray(norms), np.sqrt(_np_norm_sq(grads)), rtol=RTOL)


def test_jit_vmap_and_bad_inputs():
    a = jnp.ones((2, 3, 4))
    g = jnp.ones((2, 3, 5))
    out = jax.jit(jax.vmap(lambda aa, gg: ghost.gram_norm_sq(aa[None], gg[None])))(a, g)
    np.testing.assert_allclose(np.asarray(out)[:, 0], np.full(2, 9.0 * 4 * 5))
    with pytest.raises(ValueError, match="method"):
        ghost.gram_norm_sq(a, g, method="fast")
    with pytest.raises(ValueError, match="must agree"):
        ghost.dense_norm_sq(a, jnp.ones((2, 4, 5)))
    with pytest.raises(ValueError, match="integer"):
        ghost.embedding_norm_sq(jnp.ones((2, 3)), g)
    with pytest.raises(ValueError, match="positions"):
        ghost.conv2d_norm_sq(jnp.ones((2, 5, 5, 1)), jnp.ones((2, 4, 4, 2)), (3, 3))
    with pytest.raises(ValueError, match="padding"):
        ghost.conv2d_norm_sq(jnp.ones((2, 5, 5, 1)), jnp.ones((2, 5, 5, 2)), (3, 3), padding="FULL")
    with pytest.raises(ValueError, match="vocab_size"):
        ghost.embedding_weighted_grad(jnp.zeros((2, 3), int), g, jnp.ones(2), 0)


@pytest.mark.slow
def test_kit_cnn_ghost_clipping_matches_vmap():
    from dpfair_jax import models as M
    from dpfair_jax.algorithms.dpsgd import output_loss_for

    model = M.cnn(3, channels=(2, 3), image_shape=(8, 8, 1), activation="tanh")
    params = model.init(jax.random.key(0))
    k = jax.random.split(jax.random.key(1), 2)
    B = 6
    x = jax.random.normal(k[0], (B, 64))
    y = jax.random.randint(k[1], (B,), 0, 3)
    out, _, _ = ghost.cnn_forward(model, params, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(model.apply(params, x)), rtol=1e-5, atol=1e-6)
    loss = output_loss_for(model, 3)
    clip = 0.05
    mask = jnp.asarray([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    gsum, norms, _ = clipping.cnn_clipped_grad_sum(model, params, x, y, loss, clip, mask=mask)
    grads = _vmap_grads(lambda p, xi, yi: loss(model.apply(p, xi[None]), yi[None])[0], params, x, y)
    ref_sq = _np_norm_sq(grads)
    np.testing.assert_allclose(np.asarray(norms) ** 2, ref_sq, rtol=RTOL)
    c = np.asarray(mask) * np.minimum(1.0, clip / np.sqrt(ref_sq))
    assert np.any(c < np.asarray(mask))  # some examples are clipped
    ref = jax.tree_util.tree_map(lambda g: np.tensordot(c, np.asarray(g, np.float64), axes=1), grads)
    for got_leaf, ref_leaf in zip(jax.tree_util.tree_leaves(gsum), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(got_leaf), ref_leaf, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("ks,strides,padding", [((3, 3), (1, 1), "SAME"), ((3, 2), (2, 2), "VALID"),
                                                ((2, 3), (2, 1), "SAME"), ((3, 3), (2, 2), ((1, 0), (2, 1)))])
def test_conv2d_patches_equal_lax_patches(ks, strides, padding):
    x = jax.random.normal(jax.random.key(4), (3, 7, 6, 3))
    ref = jax.lax.conv_general_dilated_patches(x, ks, strides, padding,
                                               dimension_numbers=("NHWC", "HWIO", "NHWC"))
    got = ghost.conv2d_patches(x, ks, strides, padding)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref.reshape(3, -1, ref.shape[-1])))


@pytest.mark.parametrize("method", [pytest.param("auto", marks=pytest.mark.slow), "direct", "gram"])
def test_kit_cnn_ghost_wide_layers_match_vmap(method):
    """8 input channels to the second conv: the shifted-view per-example product (direct) and the
    Gram identity; sums through cnn_weighted_grad in the params' structure."""
    from dpfair_jax import models as M
    from dpfair_jax.algorithms.dpsgd import output_loss_for

    model = M.cnn(1, channels=(8, 3), image_shape=(8, 8, 1), activation="tanh")
    params = model.init(jax.random.key(0))
    k = jax.random.split(jax.random.key(2), 2)
    B = 5
    x = jax.random.normal(k[0], (B, 8, 8, 1))
    y = jax.random.bernoulli(k[1], 0.5, (B,)).astype(jnp.int32)
    loss = output_loss_for(model, 2)
    assert ghost.cnn_matches_apply(model, params)
    gh = ghost.cnn_ghost_backward(model, params, x, y, loss, method=method)
    np.testing.assert_allclose(np.asarray(gh.outputs), np.asarray(model.apply(params, x)), rtol=1e-5, atol=1e-6)
    grads = _vmap_grads(lambda p, xi, yi: loss(model.apply(p, xi[None]), yi[None])[0], params, x, y)
    ref_sq = _np_norm_sq(grads)
    np.testing.assert_allclose(np.asarray(gh.norms) ** 2, ref_sq, rtol=RTOL)
    c = np.linspace(0.2, 1.0, B).astype(np.float32)
    got = ghost.cnn_weighted_grad(model, gh, c)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(params)
    ref = jax.tree_util.tree_map(lambda g: np.tensordot(c, np.asarray(g, np.float64), axes=1), grads)
    for got_leaf, ref_leaf in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(got_leaf), ref_leaf, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kshape", [pytest.param((3, 3, 3, 4), marks=pytest.mark.slow), (2, 3, 3, 2)])
def test_conv2d_same_custom_gradient_equals_autodiff(kshape):
    x = jax.random.normal(jax.random.key(5), (4, 7, 6, 3))
    k = jax.random.normal(jax.random.key(6), kshape)

    def plain(xx, kk):
        return jax.lax.conv_general_dilated(xx, kk, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    for conv in (models.conv._conv2d_same, models.conv._conv2d_same_cpu):
        np.testing.assert_allclose(np.asarray(conv(x, k)), np.asarray(plain(x, k)), rtol=1e-6, atol=1e-6)
        got = jax.grad(lambda xx, kk: jnp.sum(jnp.sin(conv(xx, kk))), argnums=(0, 1))(x, k)
        ref = jax.grad(lambda xx, kk: jnp.sum(jnp.sin(plain(xx, kk))), argnums=(0, 1))(x, k)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
