"""Hessian traces: exact vs closed forms, Hutchinson vs exact, Appendix D vs autodiff (paper 001)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models
from dpfair_jax.analysis import hessian as H

jax.config.update("jax_enable_x64", False)


def _logistic_loss(theta, xi, yi):
    z = xi @ theta
    return jnp.logaddexp(0.0, z) - yi * z


@pytest.fixture(scope="module")
def logistic_problem():
    rng = np.random.default_rng(0)
    n, d = 300, 5
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:100] *= 2.0  # group 0 has larger norms
    s = np.r_[np.zeros(100, np.int32), np.ones(200, np.int32)]
    theta = rng.normal(size=d).astype(np.float32) * 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-x @ theta))).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y), jnp.asarray(s), jnp.asarray(theta)


def _np_trace(x, theta, w=None):
    x = np.asarray(x, np.float64)
    p = 1 / (1 + np.exp(-x @ np.asarray(theta, np.float64)))
    t = p * (1 - p) * np.sum(x * x, 1)
    return t.mean() if w is None else (t * w).sum() / w.sum()


def test_exact_group_traces_match_numpy_closed_form(logistic_problem):
    x, y, s, theta = logistic_problem
    g, pop = H.group_hessian_traces(_logistic_loss, theta, x, y, s, 2)
    s_np = np.asarray(s)
    for a in range(2):
        np.testing.assert_allclose(float(g.trace[a]), _np_trace(x, theta, (s_np == a) * 1.0), rtol=1e-4)
    np.testing.assert_allclose(float(pop.trace), _np_trace(x, theta), rtol=1e-4)
    # per-sample mean Hessians: population trace = sum_a p_a Tr H_a
    p = np.bincount(s_np) / s_np.size
    np.testing.assert_allclose(float(pop.trace), float(p @ np.asarray(g.trace)), rtol=1e-4)
    assert float(g.trace[0]) > float(g.trace[1])  # larger norms, larger trace


def test_hutchinson_within_standard_error(logistic_problem):
    x, y, s, theta = logistic_problem
    ex, _ = H.group_hessian_traces(_logistic_loss, theta, x, y, s, 2)
    hu, hpop = H.group_hessian_traces(_logistic_loss, theta, x, y, s, 2, method="hutchinson",
                                      key=jax.random.key(3), num_probes=200)
    z = np.abs(np.asarray(hu.trace) - np.asarray(ex.trace)) / np.asarray(hu.se)
    assert np.all(z < 4.0), z
    assert np.all(np.asarray(hu.se) > 0)
    single = H.hessian_trace(_logistic_loss, theta, x, y, method="hutchinson", key=jax.random.key(1),
                             num_probes=200)
    assert abs(float(single.trace) - _np_trace(x, theta)) < 4 * float(single.se)


def test_per_example_traces_and_uncertainty(logistic_problem):
    x, y, s, theta = logistic_problem
    t = H.per_example_hessian_traces(_logistic_loss, theta, x[:50], y[:50], chunk_size=16)
    xn = np.asarray(x[:50], np.float64)
    p = 1 / (1 + np.exp(-xn @ np.asarray(theta, np.float64)))
    np.testing.assert_allclose(np.asarray(t), p * (1 - p) * (xn * xn).sum(1), rtol=1e-4)
    u = H.prediction_uncertainty(jnp.asarray(p, jnp.float32))
    np.testing.assert_allclose(np.asarray(u), 2 * p * (1 - p), rtol=1e-5)
    probs = jnp.array([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(np.asarray(H.prediction_uncertainty(probs)), [0.0, 2 / 3], atol=1e-6)


@pytest.mark.parametrize("out,activation", [pytest.param(3, "tanh", marks=pytest.mark.slow), (1, "tanh"),  # (1, tanh): paper 001's model
                                            pytest.param(3, "sigmoid", marks=pytest.mark.slow)])
def test_appendix_d_closed_forms_match_autodiff(out, activation):
    d, hdim, n = 4, 6, 12
    model = models.mlp(hidden=(hdim,), out=out, activation=activation, input_dim=d)
    params = model.init(jax.random.key(0))
    params = jax.tree_util.tree_map(lambda a: a + 0.3 * jax.random.normal(jax.random.key(1), a.shape), params)
    x = jax.random.normal(jax.random.key(2), (n, d))
    y = jax.random.randint(jax.random.key(3), (n,), 0, max(out, 2))
    lossf = models.binary_logistic_loss if out == 1 else models.softmax_cross_entropy

    def loss(p, xi, yi):
        return lossf(model.apply(p, xi[None]), yi[None])[0]

    auto = H.per_example_hessian_traces(loss, params, x, y)
    cf = H.appendix_d_traces(params, x, y, activation=activation)
    np.testing.assert_allclose(np.asarray(cf["total"]), np.asarray(auto), rtol=2e-3, atol=2e-5)
    # the output-layer block is (1 - sum_k f_k^2) (sum_j O_j^2 + 1) -- Thm 5's uncertainty
    flat_out = lambda p1, xi, yi: loss({"layers": {0: params["layers"][0], 1: p1}}, xi, yi)  # noqa: E731
    auto_out = H.per_example_hessian_traces(flat_out, params["layers"][1], x, y)
    np.testing.assert_allclose(np.asarray(cf["output"]), np.asarray(auto_out), rtol=2e-3, atol=2e-5)
    if out == 1:  # one logit, written out in NumPy: S = p (1 - p), r = p - y, a = tanh
        xn = np.asarray(x, np.float64)
        w2, b2 = (np.asarray(params["layers"][0][k], np.float64) for k in ("kernel", "bias"))
        w1, b1 = (np.asarray(params["layers"][1][k], np.float64) for k in ("kernel", "bias"))
        O = np.tanh(xn @ w2 + b2)
        p = 1 / (1 + np.exp(-(O @ w1 + b1)[:, 0]))
        S, r = p * (1 - p), p - np.asarray(y, np.float64)
        a1, a2 = 1 - O**2, -2 * O * (1 - O**2)  # tanh', tanh''
        gamma = a2 * w1[:, 0] * r[:, None] + a1**2 * w1[:, 0] ** 2 * S[:, None]
        ref_out = S * (np.sum(O**2, 1) + 1)  # eq. 36 and its bias
        ref_total = ref_out + (np.sum(xn**2, 1) + 1) * gamma.sum(1)  # eq. 37 and its bias
        np.testing.assert_allclose(np.asarray(cf["output"]), ref_out, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(cf["total"]), ref_total, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(cf["uncertainty"]), 2 * S, rtol=1e-4)
    if out == 3:
        paper = H.appendix_d_traces(params, x, y, activation=activation, variant="paper")
        assert float(jnp.max(jnp.abs(paper["total"] - auto))) > 1e-3  # printed Gamma_j is not the trace


def test_jitted_vmap_over_params():
    x = jax.random.normal(jax.random.key(0), (40, 3))
    y = (x[:, 0] > 0).astype(jnp.float32)
    thetas = jax.random.normal(jax.random.key(1), (4, 3))
    f = jax.jit(jax.vmap(lambda th: H.hessian_trace(_logistic_loss, th, x, y).trace))
    got = np.asarray(f(thetas))
    want = [_np_trace(x, th) for th in np.asarray(thetas)]
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_validation():
    x = jnp.ones((4, 2))
    y = jnp.zeros(4)
    with pytest.raises(ValueError, match="method"):
        H.hessian_trace(_logistic_loss, jnp.zeros(2), x, y, method="bogus")
    with pytest.raises(ValueError, match="key"):
        H.hessian_trace(_logistic_loss, jnp.zeros(2), x, y, method="hutchinson")
    with pytest.raises(ValueError, match="variant"):
        H.appendix_d_traces({"layers": {}}, x, y, variant="x")
