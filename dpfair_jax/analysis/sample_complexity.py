"""Sample-complexity and rate calculators of paper 002 (Alabi), Sections 4-6, App. B-C.

Host-side NumPy functions, vectorized over array arguments (for crossover plots). Big-O bounds are
returned with their leading constant set to ``constant`` (default 1) and logarithmic factors of
``O~`` omitted, exactly as the paper states them; explicit bounds (Thm. 5.5 parameters, Lemma B.4,
Cor. B.5, Thm. 3.6, Cor. 5.3, Kakade et al.'s regret) keep the paper's constants.

Public names: :func:`penalty_weight`, :func:`lemma41_constraint_bound`, :func:`em_utility_bound`,
:func:`bassily_excess_bound`, :func:`theorem52_n0`, :func:`theorem52_excess`,
:func:`theorem55_parameters`, :func:`kakade_regret_bound`, :func:`corollary511_n0`,
:func:`lower_bound_n_pure`, :func:`lower_bound_n_approx`, :func:`lower_bound_alpha_pure`,
:func:`lower_bound_alpha_approx`, :func:`eo_reduction_n0`, :func:`jagielski_n0`,
:func:`jagielski_nu`, :func:`jagielski_over_reduction`, :func:`crossover_num_groups`,
:func:`frank_wolfe_curvature_bound`, :func:`frank_wolfe_rate`, :func:`frank_wolfe_bounds`,
:func:`frank_wolfe_steps`, :func:`lower_bound_instance_excess`.

Privacy: calculators only; nothing is spent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpfair_jax import _validation as V

__all__ = [
    "penalty_weight", "lemma41_constraint_bound", "em_utility_bound", "bassily_excess_bound",
    "theorem52_n0", "theorem52_excess", "theorem55_parameters", "kakade_regret_bound", "corollary511_n0",
    "lower_bound_n_pure", "lower_bound_n_approx", "lower_bound_alpha_pure", "lower_bound_alpha_approx",
    "eo_reduction_n0", "jagielski_n0", "jagielski_nu", "jagielski_over_reduction", "crossover_num_groups",
    "frank_wolfe_curvature_bound", "frank_wolfe_rate", "frank_wolfe_bounds", "frank_wolfe_steps",
    "lower_bound_instance_excess",
]


def _pos(name: str, value: Any, allow_zero: bool = False) -> np.ndarray:
    V.check_finite(name, value)
    V.check_positive(name, value, allow_zero=allow_zero)
    return np.asarray(value, np.float64)


def _alpha(value: Any) -> np.ndarray:
    a = _pos("alpha", value)
    if np.any(a > 1):
        raise ValueError(f"alpha must lie in (0, 1] (the paper's accuracy range), got {value!r}.")
    return a


def _out(x: np.ndarray) -> Any:
    return float(x) if np.ndim(x) == 0 else x


def penalty_weight(alpha: Any, num_groups: Any, lipschitz_f: Any = 1.0) -> Any:
    """``G = (alpha + L_f sqrt(K)) / alpha`` (Cor. 4.2)."""
    a, K, L = _alpha(alpha), _pos("num_groups", num_groups), _pos("lipschitz_f", lipschitz_f)
    return _out((a + L * np.sqrt(K)) / a)


def lemma41_constraint_bound(alpha: Any, num_groups: Any, G: Any, lipschitz_f: Any = 1.0) -> Any:
    """Constraint violation after minimizing ``h`` to within ``alpha``: ``(alpha + L_f sqrt K)/G``
    (Lemma 4.1)."""
    a, K, g, L = _pos("alpha", alpha), _pos("num_groups", num_groups), _pos("G", G), _pos("lipschitz_f", lipschitz_f)
    return _out((a + L * np.sqrt(K)) / g)


def em_utility_bound(num_candidates: Any, sensitivity: Any, epsilon: Any, rho: Any = 0.1) -> Any:
    """Exponential mechanism excess score ``2 Delta log(|C|/rho) / epsilon`` w.p. ``>= 1 - rho``
    (Thm. 3.6)."""
    m = _pos("num_candidates", num_candidates)
    d, e, r = _pos("sensitivity", sensitivity), _pos("epsilon", epsilon), _pos("rho", rho)
    if np.any(r >= 1):
        raise ValueError("rho (failure probability) must lie in (0, 1).")
    return _out(2.0 * d * np.log(m / r) / e)


def bassily_excess_bound(P: Any, sensitivity: Any, epsilon: Any, theta: Any) -> Any:
    """Convex exponential sampling: ``(8 Delta/epsilon)((P+1) log 3 + theta)``, exceeded with
    probability at most ``e^{-theta}`` (Cor. 5.3, Bassily et al. 2014 Thm. 3.2)."""
    p, d, e, t = _pos("P", P), _pos("sensitivity", sensitivity), _pos("epsilon", epsilon), _pos("theta", theta)
    return _out(8.0 * d / e * ((p + 1.0) * math.log(3.0) + t))


def theorem52_n0(num_groups: Any, P: Any, epsilon: Any, alpha: Any, *, constant: float = 1.0) -> Any:
    """Algorithm 1's sample complexity ``n_0 = O(K P / (epsilon alpha^2))`` (Thm. 5.2; pass the VC
    dimension as ``P`` for the non-convex case ``O~(K VC / (eps alpha^2))``)."""
    K, p, e, a = _pos("num_groups", num_groups), _pos("P", P), _pos("epsilon", epsilon), _alpha(alpha)
    return _out(constant * K * p / (e * a**2))


def theorem52_excess(num_groups: Any, P: Any, G: Any, epsilon: Any, n: Any) -> Any:
    """Algorithm 1's excess ``h`` (convex case, w.p. 9/10): ``O(P sqrt(K)(1+G)/(epsilon n))``
    (Thm. 5.2 proof), constant 1."""
    K, p, g = _pos("num_groups", num_groups), _pos("P", P), _pos("G", G, allow_zero=True)
    e, nn = _pos("epsilon", epsilon), _pos("n", n)
    return _out(p * np.sqrt(K) * (1.0 + g) / (e * nn))


def theorem55_parameters(num_groups: int, alpha: float, G: float | None = None) -> dict[str, float]:
    """Theorem 5.5's choices: ``G = (alpha + sqrt K)/alpha`` (Cor. 4.2, unless given),
    ``tau = alpha/(6K(1+G))`` and ``T = ceil(36 (1+K) K^2 (1+G)^2 (3+alpha)^2 / alpha^2)``."""
    K = V.check_int("num_groups", num_groups)
    a = float(_alpha(alpha))
    g = penalty_weight(a, K) if G is None else float(_pos("G", G))
    tau = a / (6.0 * K * (1.0 + g))
    T = math.ceil(36.0 * (1 + K) * K**2 * (1 + g) ** 2 * (3 + a) ** 2 / a**2)
    return {"G": g, "tau": tau, "T": T,
            "excess_bound": 3.0 * K * (1 + g) * ((3 + tau) * math.sqrt((1 + K) / T) + tau)}


def kakade_regret_bound(beta: Any, R: Any, W: Any, T: Any) -> Any:
    """Expected beta-regret of Kakade, Kalai, Ligett (2009) Thm. 3.2: ``(beta+2) R W / sqrt(T)``
    (paper 002 Thm. 5.6)."""
    b, r, w, t = _pos("beta", beta), _pos("R", R), _pos("W", W), _pos("T", T)
    return _out((b + 2.0) * r * w / np.sqrt(t))


def corollary511_n0(num_groups: Any, P: Any, epsilon: Any, alpha: Any, *, constant: float = 1.0) -> Any:
    """Algorithm 2's sample complexity ``n_0 = O~(K^4 P / (epsilon alpha^3))`` (Cor. 5.11)."""
    K, p, e, a = _pos("num_groups", num_groups), _pos("P", P), _pos("epsilon", epsilon), _alpha(alpha)
    return _out(constant * K**4 * p / (e * a**3))


def lower_bound_n_pure(num_groups: Any, epsilon: Any, alpha: Any) -> Any:
    """Pure DP lower bound ``n = Omega(K/(epsilon alpha))`` (Thm. 6.1), constant 1."""
    K, e, a = _pos("num_groups", num_groups), _pos("epsilon", epsilon), _alpha(alpha)
    return _out(K / (e * a))


def lower_bound_n_approx(num_groups: Any, epsilon: Any, alpha: Any) -> Any:
    """Approximate DP lower bound ``n = Omega(sqrt(K)/(epsilon alpha))`` (Thm. 6.2), constant 1."""
    K, e, a = _pos("num_groups", num_groups), _pos("epsilon", epsilon), _alpha(alpha)
    return _out(np.sqrt(K) / (e * a))


def lower_bound_alpha_pure(num_groups: Any, epsilon: Any, n: Any) -> Any:
    """``alpha = Omega(K/(epsilon n))`` (Thm. 6.1)."""
    K, e, nn = _pos("num_groups", num_groups), _pos("epsilon", epsilon), _pos("n", n)
    return _out(K / (e * nn))


def lower_bound_alpha_approx(num_groups: Any, epsilon: Any, n: Any) -> Any:
    """``alpha = Omega(sqrt(K)/(epsilon n))`` (Thm. 6.2)."""
    K, e, nn = _pos("num_groups", num_groups), _pos("epsilon", epsilon), _pos("n", n)
    return _out(np.sqrt(K) / (e * nn))


def eo_reduction_n0(num_groups: Any, vc: Any, epsilon: Any, alpha: Any, *, constant: float = 1.0) -> Any:
    """Equalized odds through the reduction: ``O~(|A|^4 VC / (epsilon alpha^3))`` (Cor. 8.9)."""
    A, d, e, a = _pos("num_groups", num_groups), _pos("vc", vc), _pos("epsilon", epsilon), _alpha(alpha)
    return _out(constant * A**4 * d / (e * a**3))


def jagielski_n0(num_groups: Any, vc: Any, epsilon: Any, alpha: Any, r: Any, *, constant: float = 1.0) -> Any:
    """Jagielski et al. (2018) DP-oracle-learner: ``O~(|A|^3 VC / (epsilon alpha^{3+r}))`` when
    ``min_{a,y} q_ay <= alpha^{(1+r)/2}`` (paper 002 Cor. C.2)."""
    A, d, e, a = _pos("num_groups", num_groups), _pos("vc", vc), _pos("epsilon", epsilon), _alpha(alpha)
    rr = _pos("r", r, allow_zero=True)
    return _out(constant * A**3 * d / (e * a ** (3.0 + rr)))


def jagielski_nu(B: Any, q_min: Any, num_groups: Any, vc: Any, n: Any, epsilon: Any) -> Any:
    """``nu = (B / min q_ay) sqrt(|A| VC / (n epsilon))`` (Thm. C.1, logs omitted)."""
    b, q, A = _pos("B", B), _pos("q_min", q_min), _pos("num_groups", num_groups)
    d, nn, e = _pos("vc", vc), _pos("n", n), _pos("epsilon", epsilon)
    return _out(b / q * np.sqrt(A * d / (nn * e)))


def jagielski_over_reduction(num_groups: Any, alpha: Any, r: Any) -> Any:
    """Ratio of the two sample complexities ``jagielski_n0 / eo_reduction_n0 = alpha^{-r} / |A|``
    (> 1: the reduction needs fewer samples; Sec. 8)."""
    A, a = _pos("num_groups", num_groups), _alpha(alpha)
    rr = _pos("r", r, allow_zero=True)
    return _out(a ** (-rr) / A)


def crossover_num_groups(alpha: Any, r: Any) -> Any:
    """The reduction beats Jagielski et al. exactly when ``|A| < alpha^{-r}`` (Sec. 8)."""
    a, rr = _alpha(alpha), _pos("r", r, allow_zero=True)
    return _out(a ** (-rr))


def frank_wolfe_curvature_bound(diameter_sq: Any, beta: Any) -> Any:
    """``C_h <= diam(C)^2 beta_h`` (Lemma B.3); ``diam^2 = K`` for ``[0,1]^K``."""
    return _out(_pos("diameter_sq", diameter_sq, True) * _pos("beta", beta, True))


def frank_wolfe_rate(curvature: Any, t: Any, oracle_accuracy: Any = 0.0) -> Any:
    """``h(y^t) - h* <= 2 C_h (1 + rho) / (t + 2)`` (Lemma B.2; ``rho`` the oracle accuracy)."""
    c, tt = _pos("curvature", curvature, True), _pos("t", t)
    r = _pos("oracle_accuracy", oracle_accuracy, True)
    return _out(2.0 * c * (1.0 + r) / (tt + 2.0))


def frank_wolfe_bounds(num_groups: Any, beta_f: Any, beta_g: Any, G: Any, T: Any) -> dict[str, Any]:
    """Lemma B.4 (Algorithm 4, ``T >= 3``): objective excess ``2K(beta_f + G beta_g) log T / T`` and
    constraint ``(2K(beta_f + G beta_g) log T / T)/G + sqrt(K)/G``."""
    K, bf, bg = _pos("num_groups", num_groups), _pos("beta_f", beta_f, True), _pos("beta_g", beta_g, True)
    g, t = _pos("G", G), _pos("T", T)
    if np.any(t < 3):
        raise ValueError("T must be >= 3 (Lemma B.4).")
    obj = 2.0 * K * (bf + g * bg) * np.log(t) / t
    return {"objective": _out(obj), "constraint": _out(obj / g + np.sqrt(K) / g)}


def frank_wolfe_steps(num_groups: Any, alpha: Any, beta_f: Any, beta_g: Any, G: Any | None = None, *,
                      variant: str = "corrected") -> Any:
    """Frank-Wolfe steps for objective excess ``alpha`` (Cor. B.5), ``c = 2K(beta_f + G beta_g)/alpha``
    and ``G = (alpha + sqrt K)/alpha`` unless given; at least 3.

    ``variant="paper"``: ``T = ceil(c log c)`` as stated. That choice does not make Lemma B.4's
    bound ``c alpha log(T)/T`` at most ``alpha`` (``log(T)/T > 1/c`` at ``T = c log c`` for
    ``c > e``). ``variant="corrected"`` (default): the smallest ``T`` with ``log(T)/T <= 1/c``,
    ``T = -c W_{-1}(-1/c)`` (Lambert W), which is about ``c log c + c log log c``.
    """
    from scipy.special import lambertw

    V.check_choice("variant", variant, ("corrected", "paper"))
    K, a = _pos("num_groups", num_groups), _alpha(alpha)
    bf, bg = _pos("beta_f", beta_f, True), _pos("beta_g", beta_g, True)
    g = (a + np.sqrt(K)) / a if G is None else _pos("G", G)
    c = np.asarray(2.0 * K * (bf + g * bg) / a, np.float64)
    if variant == "paper":
        T = np.ceil(c * np.log(np.maximum(c, 1.0)))
    else:
        safe = np.maximum(c, math.e)
        T = np.where(c <= math.e, 3.0, np.ceil(-safe * np.real(lambertw(-1.0 / safe, k=-1)) - 1e-9))
    return _out(np.maximum(3.0, T))


def lower_bound_instance_excess(c: Any, x_sum: Any, n: int) -> Any:
    """Excess of the lower-bound instance (Lemmas 6.3-6.4): ``f(c) = -(1/n) sum <c, x_i>`` on the
    unit sphere has ``c* = x_sum/||x_sum||`` and ``f(c) - f(c*) = (||x_sum||/(2n)) ||c - c*||^2``
    (rows of ``c`` are decisions)."""
    c = np.asarray(c, np.float64)
    xs = np.asarray(x_sum, np.float64)
    n = V.check_int("n", n)
    m = np.linalg.norm(xs)
    cstar = xs / m
    return _out(m / (2.0 * n) * np.sum((c - cstar) ** 2, axis=-1))
