"""Paper 002 calculators against hand-computed values, and the paper's internal consistency."""

import math

import numpy as np
import pytest

from dpfair_jax.analysis import sample_complexity as S


def test_hand_values():
    assert S.penalty_weight(0.1, 4) == pytest.approx(21.0)
    assert S.lemma41_constraint_bound(0.1, 4, 21.0) == pytest.approx(0.1)  # Cor. 4.2 closes Lemma 4.1
    assert S.theorem52_n0(2, 3, 0.5, 0.1) == pytest.approx(1200.0)
    assert S.corollary511_n0(2, 3, 0.5, 0.1) == pytest.approx(96000.0)
    assert S.lower_bound_n_pure(4, 1.0, 0.1) == pytest.approx(40.0)
    assert S.lower_bound_n_approx(4, 1.0, 0.1) == pytest.approx(20.0)
    assert S.lower_bound_alpha_pure(4, 2.0, 100) == pytest.approx(0.02)
    assert S.lower_bound_alpha_approx(4, 2.0, 100) == pytest.approx(0.01)
    assert S.eo_reduction_n0(2, 1, 1.0, 0.1) == pytest.approx(16000.0)
    assert S.jagielski_n0(2, 1, 1.0, 0.1, 0.5) == pytest.approx(8 / 0.1**3.5)
    assert S.em_utility_bound(100, 0.01, 1.0, 0.1) == pytest.approx(0.02 * math.log(1000))
    assert S.bassily_excess_bound(2, 0.1, 1.0, 1.0) == pytest.approx(0.8 * (3 * math.log(3) + 1))
    assert S.kakade_regret_bound(1.0, 2.0, 1.0, 100) == pytest.approx(0.6)
    assert S.theorem52_excess(4, 3, 1.0, 0.5, 1000) == pytest.approx(3 * 2 * 2 / 500)
    fb = S.frank_wolfe_bounds(2, 1.0, 1.0, 3.0, 100)
    assert fb["objective"] == pytest.approx(16 * math.log(100) / 100)
    assert fb["constraint"] == pytest.approx(16 * math.log(100) / 300 + math.sqrt(2) / 3)
    assert S.frank_wolfe_rate(2.0, 8) == pytest.approx(0.4)
    assert S.frank_wolfe_curvature_bound(3.0, 2.0) == pytest.approx(6.0)
    # Cor. B.5 as printed: G = 3, c = 12, T = ceil(12 log 12) = 30
    assert S.frank_wolfe_steps(1, 0.5, 0.0, 1.0, variant="paper") == 30.0


def test_theorem55_parameters_meet_alpha():
    p = S.theorem55_parameters(1, 1.0)
    assert p["G"] == pytest.approx(2.0) and p["tau"] == pytest.approx(1 / 18)
    assert p["T"] == 36 * 2 * 1 * 9 * 16
    for K, a in [(1, 1.0), (2, 0.5), (3, 0.1)]:
        q = S.theorem55_parameters(K, a)
        assert q["excess_bound"] <= a  # the paper's "tau gives alpha/2 and T gives alpha/2"


def test_frank_wolfe_steps_corrected_meets_lemma_b4_and_paper_does_not():
    K, a, bf, bg = 1, 0.5, 0.0, 1.0
    G = S.penalty_weight(a, K)
    paper = S.frank_wolfe_steps(K, a, bf, bg, variant="paper")
    fixed = S.frank_wolfe_steps(K, a, bf, bg)
    assert S.frank_wolfe_bounds(K, bf, bg, G, paper)["objective"] > a  # printed T is too small
    assert S.frank_wolfe_bounds(K, bf, bg, G, fixed)["objective"] <= a
    assert S.frank_wolfe_bounds(K, bf, bg, G, fixed - 1)["objective"] > a  # and it is the smallest


def test_crossover_and_vectorization():
    alpha = np.array([0.01, 0.05, 0.1])
    ratio = S.jagielski_over_reduction(3, alpha, 0.5)
    direct = S.jagielski_n0(3, 2, 1.0, alpha, 0.5) / S.eo_reduction_n0(3, 2, 1.0, alpha)
    np.testing.assert_allclose(ratio, direct, rtol=1e-12)
    A = S.crossover_num_groups(0.01, 0.5)
    assert A == pytest.approx(10.0)
    assert S.jagielski_over_reduction(A, 0.01, 0.5) == pytest.approx(1.0)
    assert S.jagielski_over_reduction(5, 0.01, 0.5) > 1 > S.jagielski_over_reduction(20, 0.01, 0.5)
    # the pure-DP gap between Alg. 1 and the lower bound is P/alpha (Sec. 5)
    np.testing.assert_allclose(S.theorem52_n0(4, 3, 1.0, alpha) / S.lower_bound_n_pure(4, 1.0, alpha), 3 / alpha)


def test_lower_bound_instance_identity():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 5))
    x /= np.maximum(1, np.linalg.norm(x, axis=1, keepdims=True))
    xs = x.sum(0)
    c = rng.normal(size=(4, 5))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    f = lambda cc: -(cc @ x.T).mean(-1)
    cstar = xs / np.linalg.norm(xs)
    np.testing.assert_allclose(S.lower_bound_instance_excess(c, xs, 30), f(c) - f(cstar), rtol=1e-10)
    assert S.lower_bound_instance_excess(cstar, xs, 30) == pytest.approx(0.0, abs=1e-12)


def test_validation():
    with pytest.raises(ValueError, match="alpha"):
        S.theorem52_n0(2, 3, 1.0, 1.5)
    with pytest.raises(ValueError, match="epsilon"):
        S.corollary511_n0(2, 3, 0.0, 0.1)
    with pytest.raises(ValueError, match="T"):
        S.frank_wolfe_bounds(2, 1.0, 1.0, 2.0, 2)
    with pytest.raises(ValueError, match="variant"):
        S.frank_wolfe_steps(2, 0.1, 1.0, 1.0, variant="x")
