"""DP-SGD with the kit's CNN: ghost norms on the default path, the vmap fallback, mixed precision."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models
from dpfair_jax.algorithms import dpsgd
from dpfair_jax.privacy import clipping, ghost
from _sgd_keywords import dpsgd_fit_kw

# Two conv layers: the first (1 input channel) takes the unfolded-patch product, the second
# (8 input channels) the shifted-view one; both direct (T^2 >= 9 C_in C_out) on 8x8 images.
SHAPE = (8, 8, 1)


def _cnn(**kw):
    return models.cnn(3, channels=(8, 3), image_shape=SHAPE, activation="tanh", **kw)


def _images(n=48, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, int(np.prod(SHAPE)))).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int32)
    return x, y


def test_resolve_per_example_for_cnns():
    model = _cnn()
    params = model.init(jax.random.key(0))
    assert dpsgd.resolve_per_example(model, params, "auto") == ("cnn", None)
    assert dpsgd.resolve_per_example(model, params, "ghost") == ("cnn", None)
    assert dpsgd.resolve_per_example(model, params, "vmap") == ("vmap", None)
    assert ghost.cnn_matches_apply(model, params)
    # bfloat16 compute: the float32 ghost forward does not reproduce apply -> vmap(grad)
    bf16 = _cnn(compute_dtype=jnp.bfloat16)
    assert not ghost.cnn_matches_apply(bf16, params)
    assert dpsgd.resolve_per_example(bf16, params, "auto") == ("vmap", None)
    with pytest.raises(ValueError, match="per_example='ghost'"):
        dpsgd.resolve_per_example(bf16, params, "ghost")
    with pytest.raises(ValueError, match="compute_dtype"):
        clipping.cnn_clipped_grad_sum(bf16, params, jnp.zeros((2, 64)), jnp.zeros(2, int),
                                      dpsgd.output_loss_for(bf16, 3), 1.0)
    # models without ghost norms still refuse "ghost"
    with pytest.raises(ValueError, match="per_example='ghost'"):
        dpsgd.resolve_per_example(lambda p, a, b: jnp.sum(p["w"]), {"w": jnp.ones(2)}, "ghost")
    assert not ghost.cnn_matches_apply(models.mlp((4,)), params)
    assert bf16.hparams["compute_dtype"] == "bfloat16"
    assert _cnn(compute_dtype=jnp.float32).hparams["compute_dtype"] is None  # float32 = default
    with pytest.raises(ValueError, match="compute_dtype"):
        _cnn(compute_dtype=jnp.int8)


@pytest.mark.slow
def test_cnn_ghost_default_path_equals_vmap():
    x, y = _images()
    model = _cnn()
    params = model.init(jax.random.key(0))
    kw = dict(clip_norm=0.3, noise_multiplier=1.0, learning_rate=0.5, batch_size=12, steps=4)
    p_auto, d_auto = dpsgd_fit_kw(jax.random.key(3), model, params, (x, y), per_example="auto", **kw)
    p_vmap, d_vmap = dpsgd_fit_kw(jax.random.key(3), model, params, (x, y), per_example="vmap", **kw)
    assert jax.tree_util.tree_structure(p_auto) == jax.tree_util.tree_structure(params)
    for a, b in zip(jax.tree_util.tree_leaves(p_auto), jax.tree_util.tree_leaves(p_vmap)):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_auto["mean_grad_norm"], d_vmap["mean_grad_norm"], rtol=1e-5)
    np.testing.assert_array_equal(d_auto["clip_fraction"], d_vmap["clip_fraction"])
    assert float(np.max(d_auto["clip_fraction"])) > 0  # clipping is active
    assert not np.allclose(np.asarray(p_auto["head"]["kernel"]), np.asarray(params["head"]["kernel"]))


@pytest.mark.slow
def test_bf16_cnn_trains_in_float32_with_bf16_close_norms():
    n = 16
    x, y = _images(n=n, seed=1)
    f32, bf16 = _cnn(), _cnn(compute_dtype=jnp.bfloat16)
    params = f32.init(jax.random.key(0))
    # One example per step, noise 0 and a learning rate below float32 resolution: the per-step
    # mean_grad_norm is the per-example norm of example perm[t] at the initial parameters.
    kw = dict(clip_norm=1.0, batch_size=1, epochs=1, sampling="shuffle")
    p32, d32 = dpsgd_fit_kw(jax.random.key(5), f32, params, (x, y), noise_multiplier=0.0,
                           learning_rate=1e-30, **kw)  # ghost path
    p16, d16 = dpsgd_fit_kw(jax.random.key(5), bf16, params, (x, y), noise_multiplier=0.0,
                           learning_rate=1e-30, **kw)  # vmap path
    n32, n16 = np.asarray(d32["mean_grad_norm"]), np.asarray(d16["mean_grad_norm"])
    assert n32.dtype == n16.dtype == np.float32 and n32.shape == (n,)
    np.testing.assert_allclose(n16, n32, rtol=3e-2)  # bfloat16 tolerance
    assert np.max(np.abs(n16 / n32 - 1)) > 1e-6  # the bf16 model really computes in bf16
    # With noise and a real step size: float32, finite parameters in the model's structure.
    p, diag = dpsgd_fit_kw(jax.random.key(6), bf16, params, (x, y), noise_multiplier=1.0,
                          learning_rate=0.5, **kw)
    assert jax.tree_util.tree_structure(p) == jax.tree_util.tree_structure(params)
    for leaf in jax.tree_util.tree_leaves(p):
        assert leaf.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(leaf)))
    assert all(np.all(np.isfinite(np.asarray(v))) for v in diag.values())
    assert bf16.apply(p, x).dtype == jnp.float32
