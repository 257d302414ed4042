"""Tests for dpfair_jax.models: shapes, layouts, vmap over keys, per-example gradients, losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.special

from dpfair_jax import models as M

KEY = jax.random.key(0)


def _data(n=6, d=4, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, 2, size=n)


@pytest.mark.parametrize(
    "factory, out_shape",
    [
        (lambda: M.linear(), ()),
        (lambda: M.linear(out=3), (3,)),
        (lambda: M.logistic(), ()),
        (lambda: M.multinomial_logistic(4), (4,)),
        (lambda: M.mlp((8, 5)), ()),
        (lambda: M.mlp((8,), out=3, activation="relu"), (3,)),
    ],
)
def test_shapes_batch_and_single(factory, out_shape):
    model = factory()
    x, _ = _data()
    params = model.init(KEY, x.shape[1])
    assert model.apply(params, x).shape == (x.shape[0], *out_shape)
    assert model.apply(params, x[0]).shape == out_shape
    np.testing.assert_allclose(model.apply(params, x[0]), model.apply(params, x)[0], rtol=1e-5,
                               atol=1e-6)
    assert model.num_outputs == (out_shape[0] if out_shape else 1)
    for leaf in jax.tree_util.tree_leaves(params):
        assert isinstance(leaf, jax.Array)


def test_glm_layout_and_apply_matches_numpy():
    x, _ = _data(d=3)
    model = M.linear(out=2, init="lecun_normal")
    params = model.init(KEY, 3)
    assert set(params) == {"w", "b"}
    assert params["w"].shape == (3, 2) and params["b"].shape == (2,)
    params = {"w": jnp.arange(6.0).reshape(3, 2), "b": jnp.array([1.0, -2.0])}
    np.testing.assert_allclose(model.apply(params, x), x @ np.arange(6.0).reshape(3, 2)
                               + np.array([1.0, -2.0]), rtol=1e-5)
    no_b = M.logistic(fit_intercept=False).init(KEY, 3)
    assert set(no_b) == {"w"} and no_b["w"].shape == (3, 1)


def test_mlp_matches_manual_forward():
    model = M.mlp((5,), out=1, activation="tanh")
    x, _ = _data(d=3)
    p = model.init(KEY, 3)
    l0, l1 = p["layers"][0], p["layers"][1]
    manual = np.tanh(x @ np.asarray(l0["kernel"]) + np.asarray(l0["bias"])) @ np.asarray(
        l1["kernel"]) + np.asarray(l1["bias"])
    np.testing.assert_allclose(model.apply(p, x), manual[:, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("factory", [lambda: M.logistic(init="lecun_normal"), lambda: M.mlp((6,)),
                                     lambda: M.multinomial_logistic(3, init="lecun_normal")])
def test_vmap_over_init_keys_and_apply_over_params(factory):
    model = factory()
    keys = jax.random.split(KEY, 5)
    stacked = jax.vmap(lambda k: model.init(k, 4))(keys)
    leaves = jax.tree_util.tree_leaves(stacked)
    assert all(leaf.shape[0] == 5 for leaf in leaves)
    # different keys give different weights (biases start at zero)
    big = max(leaves, key=lambda a: a.size)
    assert not np.allclose(np.asarray(big[0]), np.asarray(big[1]))
    x, _ = _data()
    outs = jax.jit(jax.vmap(model.apply, in_axes=(0, None)))(stacked, x)
    single = model.apply(jax.tree_util.tree_map(lambda a: a[2], stacked), x)
    np.testing.assert_allclose(outs[2], single, rtol=1e-5, atol=1e-6)


def test_hparams_are_exposed_and_model_is_hashable():
    model = M.mlp((7, 3), activation="relu")
    assert model.hparams == {"hidden": (7, 3), "activation": "relu"}
    assert M.logistic(fit_intercept=False).hparams["fit_intercept"] is False
    assert M.cnn(4).hparams["channels"] == (16, 32)
    hash(model)  # usable as a cache key


def test_init_without_dim_when_factory_has_it():
    model = M.mlp((4,), input_dim=3)
    stacked = jax.vmap(model.init)(jax.random.split(KEY, 3))
    assert stacked["layers"][0]["kernel"].shape == (3, 3, 4)


def test_per_example_gradient_logistic_matches_manual():
    x, y = _data(n=9, d=4)
    model = M.logistic(init="lecun_normal")
    params = model.init(KEY, 4)
    params["b"] = jnp.array([0.3])

    def loss(p, xi, yi):
        return M.binary_logistic_loss(model.apply(p, xi), yi)

    grads = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))(params, x, y)
    z = x @ np.asarray(params["w"])[:, 0] + 0.3
    resid = scipy.special.expit(z) - y  # d loss / d z
    np.testing.assert_allclose(grads["w"], (resid[:, None] * x)[:, :, None], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["b"], resid[:, None], rtol=1e-4, atol=1e-6)


def test_per_example_gradient_mlp_batch_of_one_agrees():
    x, y = _data(n=4, d=3)
    model = M.mlp((5,))
    params = model.init(KEY, 3)

    def loss(p, xi, yi):
        return M.squared_loss(model.apply(p, xi), yi)

    g_single = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y.astype(np.float32))
    g_batch1 = jax.vmap(
        jax.grad(lambda p, xi, yi: loss(p, xi[None], yi[None])[0]), in_axes=(None, 0, 0)
    )(params, x, y.astype(np.float32))
    for a, b in zip(jax.tree_util.tree_leaves(g_single), jax.tree_util.tree_leaves(g_batch1)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_cnn_forward_small_batch_flat_and_image():
    model = M.cnn(3, channels=(2, 3), image_shape=(8, 8, 2))
    params = model.init(KEY)
    assert params["convs"][0]["kernel"].shape == (3, 3, 2, 2)
    assert params["head"]["kernel"].shape == (2 * 2 * 3, 3)
    x = jax.random.normal(jax.random.key(3), (5, 8 * 8 * 2))
    out = jax.jit(model.apply)(params, x)
    assert out.shape == (5, 3) and np.all(np.isfinite(out))
    np.testing.assert_allclose(model.apply(params, x.reshape(5, 8, 8, 2)), out, rtol=1e-5)
    np.testing.assert_allclose(model.apply(params, x[1]), out[1], rtol=1e-4, atol=1e-6)
    y = jnp.array([0, 1, 2, 0, 1])
    grads = jax.vmap(
        jax.grad(lambda p, xi, yi: M.softmax_cross_entropy(model.apply(p, xi), yi)),
        in_axes=(None, 0, 0),
    )(params, x, y)
    assert grads["head"]["kernel"].shape == (5, 12, 3)
    stacked = jax.vmap(model.init)(jax.random.split(KEY, 2))
    assert stacked["convs"][1]["kernel"].shape == (2, 3, 3, 2, 3)
    with pytest.raises(ValueError, match="cnn expects"):
        model.apply(params, jnp.ones((5, 7)))


def test_losses_against_references():
    rng = np.random.default_rng(0)
    z = rng.normal(size=7) * 5
    y = rng.integers(0, 2, size=7)
    ref = -(y * np.log(scipy.special.expit(z)) + (1 - y) * np.log(1 - scipy.special.expit(z)))
    np.testing.assert_allclose(M.binary_logistic_loss(z, y), ref, rtol=1e-5)
    # [n, 1] logits never broadcast against [n] labels
    assert M.binary_logistic_loss(z[:, None], y).shape == (7,)
    logits = rng.normal(size=(7, 4))
    yi = rng.integers(0, 4, size=7)
    np.testing.assert_allclose(
        M.softmax_cross_entropy(logits, yi),
        optax.softmax_cross_entropy_with_integer_labels(jnp.asarray(logits), jnp.asarray(yi)),
        rtol=1e-5,
    )
    np.testing.assert_allclose(M.squared_loss(z[:, None], y), (z - y) ** 2, rtol=1e-5)


def test_predict_proba_and_label():
    x, _ = _data(d=3)
    bin_model = M.logistic(init="lecun_normal")
    p = bin_model.init(KEY, 3)
    z = np.asarray(bin_model.apply(p, x))
    np.testing.assert_allclose(M.predict_proba(bin_model, p, x), scipy.special.expit(z), rtol=1e-5)
    np.testing.assert_array_equal(M.predict_label(bin_model, p, x), (z > 0).astype(int))
    multi = M.multinomial_logistic(3, init="lecun_normal")
    q = multi.init(KEY, 3)
    probs = M.predict_proba(multi, q, x)
    np.testing.assert_allclose(probs, scipy.special.softmax(np.asarray(multi.apply(q, x)), axis=1),
                               rtol=1e-5)
    np.testing.assert_array_equal(M.predict_label(multi, q, x), np.argmax(probs, axis=1))


def test_param_count_and_flops():
    model = M.mlp((10,), out=2, input_dim=4)
    p = model.init(KEY)
    assert M.param_count(p) == 4 * 10 + 10 + 10 * 2 + 2
    assert M.flops_per_example(model, p) == 2 * (4 * 10 + 10 * 2)
    c = M.cnn(10)
    pc = jax.eval_shape(c.init, KEY)  # abstract params suffice
    expected = 2 * (28 * 28 * 16 * 9 * 1 + 14 * 14 * 32 * 9 * 16 + 7 * 7 * 32 * 10)
    assert M.flops_per_example(c, pc) == expected
    glm = M.logistic()
    assert M.flops_per_example(glm, glm.init(KEY, 7)) == 14


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="num_classes"):
        M.multinomial_logistic(1)
    with pytest.raises(ValueError, match="activation"):
        M.mlp(activation="swishy")
    with pytest.raises(ValueError, match="hidden"):
        M.mlp(hidden=(0,))
    with pytest.raises(ValueError, match="input dimension"):
        M.logistic().init(KEY)
    with pytest.raises(ValueError, match="input_dim_or_shape"):
        M.cnn(10).init(KEY, 100)
    with pytest.raises(ValueError, match="too small"):
        M.cnn(10, channels=(4, 4, 4), image_shape=(4, 4, 1))
    with pytest.raises(ValueError, match="init"):
        M.linear(init="ones")
    with pytest.raises(ValueError, match="PRNG"):
        M.logistic().init(jax.random.key(0, impl="rbg"), 3)


@pytest.mark.parametrize("factory, kind, dim", [
    (lambda: M.logistic(init="lecun_normal"), "glm", 4), (lambda: M.linear(out=2), "glm", 4),
    (lambda: M.mlp((5, 3), activation="relu"), "mlp", 4),
    (lambda: M.cnn(3, channels=(2, 3), image_shape=(8, 8, 1)), "cnn", None),
])
def test_forward_is_what_apply_evaluates_and_returns_the_layer_inputs(factory, kind, dim):
    """Each model's one forward pass: ``apply`` is its output; ``forward`` gives every layer's input
    (checked against the layer structure by hand) and adds the probes to the pre-activations."""
    model = factory()
    assert model.layers == kind
    params = model.init(KEY, dim)
    x = jax.random.normal(jax.random.key(2), (5, dim or 64))
    out, inputs = model.forward(params, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(model.apply(params, x)), rtol=1e-6, atol=1e-7)
    if kind == "glm":
        assert len(inputs) == 1 and inputs[0] is not None
        probes = [jnp.ones((5, params["w"].shape[1]))]
    elif kind == "mlp":
        l0 = params["layers"][0]
        h = jax.nn.relu(np.asarray(x) @ np.asarray(l0["kernel"]) + np.asarray(l0["bias"]))
        np.testing.assert_allclose(np.asarray(inputs[1]), h, rtol=1e-5, atol=1e-6)
        assert len(inputs) == 3
        probes = [jnp.zeros((5, 5)), jnp.zeros((5, 3)), jnp.ones((5, 1))]
    else:
        assert [a.shape for a in inputs] == [(5, 8, 8, 1), (5, 4, 4, 2), (5, 2 * 2 * 3)]
        probes = [jnp.zeros((5, 8, 8, 2)), jnp.zeros((5, 4, 4, 3)), jnp.ones((5, 3))]
    shifted, _ = model.forward(params, x, probes)  # a unit probe on the output layer shifts the outputs by 1
    np.testing.assert_allclose(np.asarray(shifted), np.asarray(out) + 1.0, rtol=1e-5, atol=1e-6)


def test_bf16_cnn_declares_no_ghost_layers():
    model = M.cnn(3, channels=(2,), image_shape=(4, 4, 1), compute_dtype=jnp.bfloat16)
    assert model.layers is None
    assert model.apply(model.init(KEY), jnp.ones((2, 16))).dtype == jnp.float32


def test_from_apply_infers_outputs_and_squeezes():
    def apply(p, x):
        return x @ p["w"]

    params = {"w": jnp.ones((3, 1))}
    model = M.from_apply(apply, params, (3,))
    assert model.num_outputs == 1 and model.layers is None and model.apply(params, jnp.ones((4, 3))).shape == (4,)
    assert M.from_apply(apply, params, (3,)) is model  # one Model per function: compiled programs reused
    assert M.from_apply(apply, {"w": jnp.ones((3, 4))}, (3,)).num_outputs == 4
    with pytest.raises(ValueError, match="no init"):
        model.init(KEY, 3)
    with pytest.raises(ValueError, match="failed on a batch"):
        M.from_apply(apply, params, (5,))
    loss = M.example_loss(model, M.output_loss(model))
    assert loss.batch_axis and float(loss(params, jnp.ones(3), 1)) == pytest.approx(
        float(M.binary_logistic_loss(jnp.array([3.0]), jnp.array([1]))[0]))
    assert M.output_loss(M.mlp((2,), out=3)) is M.softmax_cross_entropy
    assert M.output_loss(M.mlp((2,)), num_classes=0) is M.squared_loss
