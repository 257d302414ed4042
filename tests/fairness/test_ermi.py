"""ERMI, its EO form, psi, W* and Lemma D.1 (paper 004) against independent NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.fairness import ermi as E



def _random_probs(rng, n, l):
    z = rng.normal(size=(n, l))
    p = np.exp(z)
    return (p / p.sum(1, keepdims=True)).astype(np.float64)


def _np_ermi(probs, s, k):
    n, l = probs.shape
    joint = np.zeros((k, l))
    for i in range(n):  # deliberately naive reference
        joint[s[i]] += probs[i] / n
    ps, py = joint.sum(1), joint.sum(0)
    return sum(joint[r, j] ** 2 / (py[j] * ps[r]) for r in range(k) for j in range(l)) - 1


@pytest.mark.parametrize("n,k,l", [(200, 2, 2), (300, 5, 9)])
def test_ermi_matches_numpy_and_w_star_recovers_it(n, k, l):
    rng = np.random.default_rng(n + k)
    probs = _random_probs(rng, n, l)
    s = rng.integers(0, k, n)
    s[:k] = np.arange(k)
    ref = _np_ermi(probs, s, k)
    with jax.enable_x64(True):
        got = float(E.ermi(jnp.asarray(probs), jnp.asarray(s), k))
        ws = E.w_star(jnp.asarray(probs), jnp.asarray(s), k)
        val = float(E.mean_psi(jnp.asarray(probs), jnp.asarray(s), ws))
    assert got == pytest.approx(ref, abs=1e-10)
    assert val == pytest.approx(ref, abs=1e-6)
    # float32 path too
    got32 = float(jax.jit(E.ermi, static_argnums=2)(jnp.asarray(probs, jnp.float32), jnp.asarray(s), k))
    assert got32 == pytest.approx(ref, abs=1e-5)


def test_w_star_is_the_maximizer():
    rng = np.random.default_rng(1)
    probs = jnp.asarray(_random_probs(rng, 100, 3), jnp.float32)
    s = jnp.asarray(rng.integers(0, 4, 100))
    ws = E.w_star(probs, s, 4)
    base = float(E.mean_psi(probs, s, ws))
    for _ in range(20):
        pert = ws + 0.05 * jnp.asarray(rng.normal(size=ws.shape), jnp.float32)
        assert float(E.mean_psi(probs, s, pert)) < base
    g = jax.grad(lambda w: E.mean_psi(probs, s, w))(ws)
    np.testing.assert_allclose(np.asarray(g), 0.0, atol=1e-5)


def test_ermi_zero_under_independence_positive_otherwise():
    rng = np.random.default_rng(2)
    n, k, l = 120, 3, 4
    s = np.repeat(np.arange(k), n // k)
    base = _random_probs(rng, n // k, l)
    indep = np.concatenate([base] * k)  # the same multiset of predictions in every group
    assert float(E.ermi(jnp.asarray(indep), jnp.asarray(s), k)) == pytest.approx(0.0, abs=1e-6)
    dep = indep.copy()
    dep[s == 0] = np.eye(l)[0]
    assert float(E.ermi(jnp.asarray(dep), jnp.asarray(s), k)) > 1e-3
    # one-cell variant is not zero under independence (notes II.10-2): p_S(0) - 1
    p2 = np.tile([0.3, 0.7], (n, 1))
    s2 = (np.arange(n) % 2)
    oc = float(E.ermi_one_cell(jnp.asarray(p2), jnp.asarray(s2), 2))
    assert oc == pytest.approx(0.7 * 0.5 - 1.0, abs=1e-6)  # p(1) p_S(0) - 1


def test_one_cell_mask_maximizes_to_one_cell_ermi():
    rng = np.random.default_rng(3)
    probs = jnp.asarray(_random_probs(rng, 80, 2), jnp.float32)
    s = jnp.asarray(rng.integers(0, 2, 80))
    mask = E.one_cell_mask()
    ws = E.w_star(probs, s, 2) * mask
    assert float(E.mean_psi(probs, s, ws)) == pytest.approx(float(E.ermi_one_cell(probs, s)), abs=1e-5)


def test_ermi_eo_matches_conditional_reference_and_per_label_w_star():
    rng = np.random.default_rng(4)
    n, k, l = 240, 3, 2
    probs = _random_probs(rng, n, l)
    s = rng.integers(0, k, n)
    y = rng.integers(0, l, n)
    per, wts = [], []
    for c in range(l):
        m = y == c
        per.append(_np_ermi(probs[m], s[m], k))
        wts.append(m.mean())
    ref_w = float(np.dot(per, wts))
    ref_u = float(np.sum(per))
    with jax.enable_x64(True):
        P, S, Y = jnp.asarray(probs), jnp.asarray(s), jnp.asarray(y)
        assert float(E.ermi_eo(P, S, Y, k, l)) == pytest.approx(ref_w, abs=1e-10)
        assert float(E.ermi_eo(P, S, Y, k, l, weighted=False)) == pytest.approx(ref_u, abs=1e-10)
        # mean over examples of psi with each example's own label block recovers eq. 5
        ws = E.w_star_eo(P, S, Y, k, l)
        pc = E.conditional_group_frequencies(S, Y, k, l)
        vals = jax.vmap(E.psi)(P, S, ws[Y], pc[Y])
        assert float(jnp.mean(vals)) == pytest.approx(ref_w, abs=1e-6)


def test_psi_gradients_match_autodiff_and_lemma_d1():
    rng = np.random.default_rng(5)
    k, l, d = 3, 4, 6
    W = jnp.asarray(rng.normal(size=(k, l)))
    p_s = jnp.asarray([0.2, 0.5, 0.3])
    theta = jnp.asarray(rng.normal(size=(d, l)))
    x = jnp.asarray(rng.normal(size=(d,)))
    with jax.enable_x64(True):
        W, p_s, theta, x = (jnp.asarray(a, jnp.float64) for a in (W, p_s, theta, x))
        for s_i in range(k):
            probs_i = jax.nn.softmax(x @ theta)
            gw_auto = jax.grad(E.psi, argnums=2)(probs_i, s_i, W, p_s)
            np.testing.assert_allclose(E.psi_grad_w(probs_i, s_i, W, p_s), gw_auto, atol=1e-12)
            # Lemma D.1 in matrix form: -2 W diag(F) + 2 P^{-1/2} s F^T
            lemma = -2 * np.asarray(W) @ np.diag(np.asarray(probs_i)) + 2 * np.diag(
                1 / np.sqrt(np.asarray(p_s))) @ np.outer(np.eye(k)[s_i], np.asarray(probs_i))
            np.testing.assert_allclose(gw_auto, lemma, atol=1e-12)
            # theta gradient: chain rule through dpsi/dF (Lemma D.1 first formula) vs autodiff
            f = lambda th: E.psi(jax.nn.softmax(x @ th), s_i, W, p_s)
            g_auto = jax.grad(f)(theta)
            jac = jax.jacobian(lambda th: jax.nn.softmax(x @ th))(theta)  # [l, d, l]
            g_chain = jnp.einsum("j,jab->ab", E.psi_grad_probs(probs_i, s_i, W, p_s), jac)
            np.testing.assert_allclose(g_chain, g_auto, atol=1e-12)
            # index form of Lemma D.1: sum_j grad F_j [-sum_r W_rj^2 + 2 sum_r W_rj s_r / sqrt(p_r)]
            coef = -(np.asarray(W) ** 2).sum(0) + 2 * np.asarray(W)[s_i] / np.sqrt(float(p_s[s_i]))
            np.testing.assert_allclose(np.einsum("j,jab->ab", coef, np.asarray(jac)), g_auto, atol=1e-12)


def test_parts_sum_and_sensitive_part_bound():
    rng = np.random.default_rng(6)
    k, l = 4, 3
    W = jnp.asarray(rng.normal(size=(k, l)), jnp.float32)
    p_s = jnp.asarray([0.1, 0.2, 0.3, 0.4])
    probs = jnp.asarray(_random_probs(rng, 10, l), jnp.float32)
    for i in range(10):
        a, b = E.psi_parts(probs[i], i % k, W, p_s)
        assert float(a + b) == pytest.approx(float(E.psi(probs[i], i % k, W, p_s)), abs=1e-6)
    # the s-dependent part of grad_W has squared norm <= 4 |F|^2 / p_s(s) <= 4 / rho
    for r in range(k):
        g = jax.grad(lambda w: E.psi_parts(probs[0], r, w, p_s)[1])(W)
        assert float(jnp.sum(g**2)) <= 4.0 / float(p_s[r]) + 1e-5


def test_jit_vmap_over_batches_and_soft_predictions():
    rng = np.random.default_rng(7)
    logits = jnp.asarray(rng.normal(size=(5, 30)), jnp.float32)
    s = jnp.asarray(rng.integers(0, 2, 30))
    f = jax.jit(jax.vmap(lambda z: E.ermi(E.soft_predictions(z), s, 2)))
    out = f(logits)
    ref = [_np_ermi(np.stack([1 - 1 / (1 + np.exp(-z)), 1 / (1 + np.exp(-z))], 1), np.asarray(s), 2)
           for z in np.asarray(logits, np.float64)]
    np.testing.assert_allclose(out, ref, atol=1e-5)
    assert E.soft_predictions(jnp.zeros((3, 4))).shape == (3, 4)
    assert float(E.strong_concavity(E.soft_predictions(jnp.zeros(4)))) == pytest.approx(1.0)


def test_check_inputs_errors():
    with pytest.raises(ValueError, match="probs"):
        E.check_inputs(np.ones((3, 2)), np.zeros(3, int), 2)
    with pytest.raises(ValueError, match="s"):
        E.check_inputs(np.full((3, 2), 0.5), np.array([0, 1, 5]), 2)


def test_one_example_helpers_match_their_batch_forms():
    """soft_prediction (one example), select_row and psi_parts(masked_row=True) give the values
    of soft_predictions, W[i] and psi_parts, with gradients in W equal to indexing's."""
    rng = np.random.default_rng(3)
    z1 = jnp.asarray(rng.normal(size=(5,)), jnp.float32)
    np.testing.assert_array_equal(jax.vmap(E.soft_prediction)(z1), E.soft_predictions(z1))
    np.testing.assert_array_equal(jax.vmap(E.soft_prediction)(z1[:, None]), E.soft_predictions(z1))
    z3 = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
    np.testing.assert_array_equal(jax.vmap(E.soft_prediction)(z3), E.soft_predictions(z3))
    p = np.asarray(E.soft_prediction(jnp.asarray(0.3)))
    np.testing.assert_allclose(p, [1 / (1 + np.exp(0.3)), 1 / (1 + np.exp(-0.3))], rtol=1e-6)
    W = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
    for i in range(4):
        np.testing.assert_array_equal(E.select_row(W, i), W[i])
    np.testing.assert_allclose(E.inv_sqrt_frequencies(jnp.asarray([0.25, 0.0, 1.0])), [2.0, 0.0, 1.0])
    probs, ps = E.soft_prediction(z3[0]), jnp.asarray([0.1, 0.2, 0.3, 0.4])
    for s_i in range(4):
        a = E.psi_parts(probs, s_i, W, ps)
        b = E.psi_parts(probs, s_i, W, ps, masked_row=True)
        np.testing.assert_allclose(a, b, rtol=1e-6)
        ga = jax.grad(lambda w: E.psi(probs, s_i, w, ps))(W)
        gb = jax.grad(lambda w: sum(E.psi_parts(probs, s_i, w, ps, masked_row=True)))(W)
        np.testing.assert_allclose(ga, gb, rtol=1e-6, atol=1e-7)
