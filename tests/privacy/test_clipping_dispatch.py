"""The per-example clipped-gradient dispatcher (privacy.clipping.clipped_grad_sum): every declared
path against a float64 NumPy reference built from vmap(grad) of the model's apply, the sensitivity
it carries, clip_norm=inf, the activations taken from the model's own forward pass, refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.privacy import clipping as C
from dpfair_jax.privacy import relations as R

RTOL = 1e-4


def _data(n=12, d=4, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, d)) * rng.uniform(0.3, 3.0, size=(n, 1))).astype(np.float32)
    return x, (np.arange(n) % 2).astype(np.int32), (np.arange(n) % k).astype(np.int32)


CASES = {
    "logistic": (lambda: M.logistic(init="lecun_normal"), "glm", "binary", (4,)),
    "logistic_no_intercept": (lambda: M.logistic(fit_intercept=False, init="lecun_normal"), "glm", "binary", (4,)),
    "multinomial": (lambda: M.multinomial_logistic(3, init="lecun_normal"), "glm", "multi", (4,)),
    "linear": (lambda: M.linear(init="lecun_normal"), "glm", "real", (4,)),
    "mlp_tanh": (lambda: M.mlp((5,)), "mlp", "binary", (4,)),
    "mlp_relu_3": (lambda: M.mlp((5, 3), out=3, activation="relu"), "mlp", "multi", (4,)),
    "cnn": (lambda: M.cnn(3, channels=(2,), image_shape=(4, 4, 1), activation="tanh"), "cnn", "multi", (16,)),
}


def _reference(model, params, x, y, clip, weights):
    """float64 sum_i w_i min(1, C/||g_i||) g_i from per-example vmap(grad) of apply (independent of
    the ghost identities)."""
    loss = M.output_loss(model)
    grads = jax.vmap(jax.grad(lambda p, xi, yi: loss(model.apply(p, xi[None]), yi[None])[0]),
                     in_axes=(None, 0, 0))(params, x, y)
    leaves = [np.asarray(g, np.float64).reshape(len(x), -1) for g in jax.tree_util.tree_leaves(grads)]
    norms = np.sqrt(sum(np.sum(g**2, axis=1) for g in leaves))
    c = weights * (1.0 if np.isinf(clip) else np.minimum(1.0, clip / norms))
    sums = jax.tree_util.tree_map(lambda g: np.tensordot(c, np.asarray(g, np.float64), axes=1), grads)
    return sums, norms


@pytest.mark.parametrize("name", list(CASES))
def test_every_path_equals_a_per_example_reference(name):
    factory, kind, labels, shape = CASES[name]
    model = factory()
    x, yb, yk = _data(d=int(np.prod(shape)))
    y = {"binary": yb, "multi": yk, "real": x[:, 0] - x[:, 1]}[labels]
    params = model.init(jax.random.key(1), shape[0] if model.name != "cnn" else None)
    assert C.per_example_path(model) == kind
    norms_ref = _reference(model, params, x, y, np.inf, np.ones(len(x)))[1]
    clip = float(np.median(norms_ref))  # about half the examples clipped
    w = (np.arange(len(x)) % 4 != 0).astype(np.float32)
    ref, _ = _reference(model, params, x, y, clip, w)
    for path in ("auto", "vmap"):
        res = jax.jit(lambda p: C.clipped_grad_sum(model, p, (x, y), clip_norm=clip, weights=w, path=path))(params)
        assert jax.tree_util.tree_structure(res.sums) == jax.tree_util.tree_structure(params)
        np.testing.assert_allclose(np.asarray(res.norms), norms_ref, rtol=RTOL)
        for got, want in zip(jax.tree_util.tree_leaves(res.sums), jax.tree_util.tree_leaves(ref)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=1e-6)


@pytest.mark.slow
def test_ghost_paths_read_activations_from_the_models_forward():
    """Replace a model's forward by a spy: the dispatcher calls it (no forward pass of its own)."""
    x, y, _ = _data()
    for model in (M.logistic(), M.mlp((3,))):
        calls = []

        def spy(params, xb, probes=None, inner=model.forward):
            calls.append(probes is not None)
            return inner(params, xb, probes)

        spied = model._replace(forward=spy)
        params = spied.init(jax.random.key(0), 4)
        got = C.clipped_grad_sum(spied, params, (x, y), clip_norm=0.5)
        want = C.clipped_grad_sum(model, params, (x, y), clip_norm=0.5)
        assert calls and all(calls)
        for a, b in zip(jax.tree_util.tree_leaves(got.sums), jax.tree_util.tree_leaves(want.sums)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    cnn = M.cnn(2, channels=(2,), image_shape=(4, 4, 1))
    out, inputs = cnn.forward(cnn.init(jax.random.key(0)), np.ones((3, 16), np.float32))
    np.testing.assert_allclose(np.asarray(out), np.asarray(cnn.apply(cnn.init(jax.random.key(0)),
                                                                     np.ones((3, 16), np.float32))), rtol=1e-6)
    assert [a.shape for a in inputs] == [(3, 4, 4, 1), (3, 8)]


def test_sensitivity_per_relation_and_under_jit():
    x, y, _ = _data()
    model = M.logistic()
    params = model.init(jax.random.key(0), 4)
    res = C.clipped_grad_sum(model, params, (x, y), clip_norm=0.75)
    assert res.sensitivity("add_remove") == pytest.approx(0.75)
    assert res.sensitivity(R.REPLACE_ONE) == pytest.approx(1.5)
    assert res.sensitivities == R.clipped_sum_sensitivity(float(np.float32(0.75)))
    traced = jax.jit(lambda c: C.clipped_grad_sum(model, params, (x, y), clip_norm=c).sensitivity("replace_one"))
    assert float(traced(0.75)) == pytest.approx(1.5)
    assert C.clipped_grad_sum(model, params, (x, y), clip_norm=np.inf).sensitivity() == np.inf


@pytest.mark.parametrize("name", ["logistic", "mlp_tanh", pytest.param("cnn", marks=pytest.mark.slow)])
def test_clip_norm_inf_is_the_unclipped_sum(name):
    factory, _, labels, shape = CASES[name]
    model = factory()
    x, yb, yk = _data(d=int(np.prod(shape)))
    y = yb if labels == "binary" else yk
    params = model.init(jax.random.key(2), shape[0] if model.name != "cnn" else None)
    ref, _ = _reference(model, params, x, y, np.inf, np.ones(len(x)))
    res = C.clipped_grad_sum(model, params, (x, y), clip_norm=np.inf)
    for got, want in zip(jax.tree_util.tree_leaves(res.sums), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(C.clip_factors(jnp.array([0.0, 1.0, 1e30]), np.inf)), 1.0)


def test_loss_function_batch_and_clip_tree():
    def loss(p, xi, yi):
        return jnp.sum((xi @ p["a"] - yi) ** 2) + jnp.sum(p["b"] ** 2)

    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 3)).astype(np.float32)
    y = rng.normal(size=6).astype(np.float32)
    p = {"a": jnp.full((3,), 0.2), "b": jnp.ones(2)}
    res = C.clipped_grad_sum(loss, p, (x, y), clip_norm=1.0)
    g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(p, x, y)
    clipped, ind = C.clip_tree(g, 1.0)
    for a, b in zip(jax.tree_util.tree_leaves(res.sums), jax.tree_util.tree_leaves(clipped)):
        np.testing.assert_allclose(np.asarray(a), np.sum(np.asarray(b), axis=0), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(ind), (np.asarray(res.norms) > 1.0).astype(np.float32))
    same, none = C.clip_tree(g, jnp.inf)
    for a, b in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(g)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(jnp.sum(none)) == 0.0
    zero, _ = C.clip_tree(g, 0.0)
    assert all(float(jnp.max(jnp.abs(leaf))) == 0.0 for leaf in jax.tree_util.tree_leaves(zero))


def test_declarations_and_refusals():
    x, y, _ = _data()
    assert C.per_example_path(M.cnn(2, channels=(2,), image_shape=(4, 4, 1), compute_dtype=jnp.bfloat16)) == "vmap"
    assert C.per_example_path(M.mlp((3,)), "vmap") == "vmap"
    assert C.per_example_path(lambda p, a, b: 0.0) == "vmap"
    model = M.logistic()
    params = model.init(jax.random.key(0), 4)
    with pytest.raises(ValueError, match="path='ghost'"):
        C.clipped_grad_sum(lambda p, a, b: jnp.sum(p["w"]), params, (x, y), clip_norm=1.0, path="ghost")
    with pytest.raises(ValueError, match="weights"):
        C.clipped_grad_sum(model, params, (x, y), clip_norm=1.0, weights=np.full(len(x), 2.0))
    with pytest.raises(ValueError, match="clip_norm"):
        C.clipped_grad_sum(model, params, (x, y), clip_norm=-1.0)
    with pytest.raises(ValueError, match=r"\(x, y\)"):
        C.clipped_grad_sum(model, params, x, clip_norm=1.0)
    with pytest.raises(ValueError, match="loss="):
        C.clipped_grad_sum(lambda p, a, b: 0.0, params, (x, y), clip_norm=1.0, loss="squared")
    with pytest.raises(ValueError, match="layers"):
        C.per_example_path(model._replace(layers="transformer"))


def _public_loss(out, y):
    """A public output loss ``(outputs [B, ...], y) -> [B]`` (not clipped by the dispatcher)."""
    o = out.reshape(out.shape[0], -1)
    return 0.3 * jnp.sum(jnp.sin(o) * o, axis=1) + 0.1 * jnp.sum(o, axis=1)


@pytest.mark.parametrize("name", list(CASES))
def test_public_part_is_the_exact_weighted_sum_and_leaves_the_clipped_sum_alone(name):
    """``public=``: sum_i w_i grad public_i against a float64 per-example vmap(grad) reference; the
    clipped sums, norms and losses stay those of the call without it; ``outputs`` are apply's."""
    factory, _, labels, shape = CASES[name]
    model = factory()
    x, yb, yk = _data(d=int(np.prod(shape)), seed=4)
    y = {"binary": yb, "multi": yk, "real": x[:, 0] - x[:, 1]}[labels]
    params = model.init(jax.random.key(3), shape[0] if model.name != "cnn" else None)
    w = (np.arange(len(x)) % 3 != 0).astype(np.float32)
    pub_grads = jax.vmap(jax.grad(lambda p, xi, yi: _public_loss(model.apply(p, xi[None]), yi[None])[0]),
                         in_axes=(None, 0, 0))(params, x, y)
    want = jax.tree_util.tree_map(lambda g: np.tensordot(w.astype(np.float64), np.asarray(g, np.float64), axes=1),
                                  pub_grads)
    for path in ("auto", "vmap"):
        run = jax.jit(lambda p, pub: C.clipped_grad_sum(model, p, (x, y), clip_norm=0.3, weights=w, path=path,
                                                        public=pub), static_argnums=1)
        res, plain = run(params, _public_loss), run(params, None)
        assert plain.public is None
        assert jax.tree_util.tree_structure(res.public) == jax.tree_util.tree_structure(params)
        for got, ref in zip(jax.tree_util.tree_leaves(res.public), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(got), ref, rtol=RTOL, atol=1e-6)
        for got, ref in zip(jax.tree_util.tree_leaves(res.sums), jax.tree_util.tree_leaves(plain.sums)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(np.asarray(res.norms), np.asarray(plain.norms))
        if path == "auto":
            np.testing.assert_allclose(np.asarray(res.outputs), np.asarray(model.apply(params, x)), rtol=1e-6)
        else:
            assert res.outputs is None


def test_per_part_clip_norms_clip_each_part_on_its_own():
    """A tuple clip norm over tuple params: each part's per-example gradient clipped to its own
    norm (a NumPy loop), one sensitivity per part; the public part is a plain weighted sum."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(9, 3)).astype(np.float32) * rng.uniform(0.2, 3, size=(9, 1)).astype(np.float32)
    a0, b0 = jnp.asarray([0.3, -0.2, 0.5]), jnp.asarray([1.0, -1.0])

    def loss(p, xi):
        a, b = p
        return jnp.sum(jnp.tanh(xi * a)) * (1.0 + b[0]) + jnp.sum(b * xi[:2])

    def pub(p, xi):
        return 0.5 * jnp.sum(p[0] * xi) ** 2 + jnp.sum(p[1])

    w = (np.arange(9) % 4 != 1).astype(np.float32)
    res = jax.jit(lambda p: C.clipped_grad_sum(loss, p, x, clip_norm=(0.4, 1.1), weights=w, public=pub))((a0, b0))
    want, want_pub = [np.zeros(3), np.zeros(2)], [np.zeros(3), np.zeros(2)]
    for i in range(9):
        g = jax.grad(loss)((a0, b0), x[i])
        gp = jax.grad(pub)((a0, b0), x[i])
        for k, c in enumerate((0.4, 1.1)):
            gk = np.asarray(g[k], np.float64)
            want[k] += w[i] * gk * min(1.0, c / np.linalg.norm(gk))
            want_pub[k] += w[i] * np.asarray(gp[k], np.float64)
    for k in range(2):
        np.testing.assert_allclose(np.asarray(res.sums[k]), want[k], rtol=RTOL, atol=1e-6)
        np.testing.assert_allclose(np.asarray(res.public[k]), want_pub[k], rtol=RTOL, atol=1e-6)
    assert len(res.norms) == 2 and res.norms[1].shape == (9,)
    assert res.sensitivity("replace_one") == (pytest.approx(0.8), pytest.approx(2.2))
    assert res.sensitivities[1] == R.clipped_sum_sensitivity(float(np.float32(1.1)))
    model = M.logistic()
    with pytest.raises(ValueError, match="tuple clip_norm"):
        C.clipped_grad_sum(model, model.init(jax.random.key(0), 3), (x, w), clip_norm=(1.0, 1.0))
    with pytest.raises(ValueError, match="one clip norm per part"):
        C.clipped_grad_sum(loss, (a0, b0), x, clip_norm=(1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="clip_norm"):
        C.clipped_grad_sum(loss, (a0, b0), x, clip_norm=(1.0, -1.0))
    with pytest.raises(ValueError, match="public"):
        C.clipped_grad_sum(loss, (a0, b0), x, clip_norm=(1.0, 1.0), public="squared")


@pytest.mark.parametrize("name", ["logistic", "mlp_tanh", "cnn"])
def test_clip_norm_zero_gives_zero_sums_and_zero_sensitivity(name):
    """C = 0 (a part weighted by zero, e.g. DP-FERMI's fairness term at lam = 0): every example
    contributes exactly zero, on every path, eagerly as under jit."""
    factory, _, labels, shape = CASES[name]
    model = factory()
    x, yb, yk = _data(d=int(np.prod(shape)))
    y = yb if labels == "binary" else yk
    params = model.init(jax.random.key(2), shape[0] if model.name != "cnn" else None)
    for path in ("auto", "vmap"):
        res = C.clipped_grad_sum(model, params, (x, y), clip_norm=0.0, path=path, public=_public_loss)
        assert all(float(jnp.max(jnp.abs(leaf))) == 0.0 for leaf in jax.tree_util.tree_leaves(res.sums))
        assert float(jnp.min(res.norms)) > 0 and res.sensitivity("replace_one") == 0.0
        assert any(float(jnp.max(jnp.abs(leaf))) > 0 for leaf in jax.tree_util.tree_leaves(res.public))
