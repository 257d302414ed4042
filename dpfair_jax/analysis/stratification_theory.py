"""Theory of stratified private mean estimation (paper 003, Sec. 4: eq. 1, Prop. 8, Thm. 9).

Host-side float64 calculators (NumPy/SciPy), vectorized over array arguments:

- :func:`global_laplace_bound` (eq. 1) and :func:`prop8_bound` (eq. 4): the high-probability error
  shapes of the global and stratified clipped Laplace means, without the hidden constant.
- :func:`global_laplace_noise_variance` / :func:`stratified_laplace_noise_variance` and
  :func:`stratified_gaussian_noise_variance`: exact variances of the privacy noise (notes A2, A3).
- :func:`dirichlet_expected_log_sizes` (Thm. 9): ``E sum_i log |G_i| = k (psi(alpha) - psi(k alpha)
  + log n)`` for ``|G_i| = n g_i``, ``g ~ Dir(alpha 1_k)``. The paper prints ``|G_i| = g_i / n`` (a
  typo) and "<="; for continuous sizes it is an equality (``E log g_i = psi(alpha) - psi(k alpha)``).
- :func:`worst_case_log_sizes` (``k log(n/k)``, equal sizes) and :func:`best_case_log_sizes` (the
  paper's ``(k - 1) + log(n - k)`` or ``k + log n``), :func:`fraction_toward_best`.
- :func:`fit_symmetric_dirichlet_alpha`: MLE (or moment) fit of a symmetric Dirichlet to one or
  more proportion vectors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import optimize, special

from dpfair_jax import _validation as v
from dpfair_jax.privacy.relations import replace_factor

__all__ = [
    "laplace_halfwidth",
    "global_laplace_bound",
    "prop8_bound",
    "global_laplace_noise_variance",
    "stratified_laplace_noise_variance",
    "stratified_gaussian_noise_variance",
    "dirichlet_expected_log_sizes",
    "worst_case_log_sizes",
    "best_case_log_sizes",
    "fraction_toward_best",
    "fit_symmetric_dirichlet_alpha",
]


def _pos(name: str, value: Any) -> np.ndarray:
    v.check_positive(name, value)
    return np.asarray(value, np.float64)


def _gamma(gamma: Any) -> np.ndarray:
    g = np.asarray(gamma, np.float64)
    if np.any(~np.isfinite(g)) or np.any(g <= 0) or np.any(g >= 1):
        raise ValueError(f"gamma must lie in (0, 1), got {gamma!r}.")
    return g


def laplace_halfwidth(n: Any, R: Any, gamma: Any) -> np.ndarray:
    """``R + sqrt(log(n / gamma))``: the clip half-width of the paper's Laplace mean (Sec. 4)."""
    v.check_positive("R", R, allow_zero=True)
    return np.asarray(R, np.float64) + np.sqrt(np.log(_pos("n", n) / _gamma(gamma)))


def global_laplace_bound(n: Any, R: Any, gamma: Any, epsilon: Any) -> np.ndarray:
    """Eq. (1) without its constant: ``log(1/gamma) (R + sqrt(log(n/gamma))) / (n eps)``."""
    g = _gamma(gamma)
    return np.log(1 / g) * laplace_halfwidth(n, R, g) / (_pos("n", n) * _pos("epsilon", epsilon))


def prop8_bound(n: Any, k: Any, R: Any, gamma: Any, epsilon: Any) -> np.ndarray:
    """Proposition 8 (eq. 4) without its constant:
    ``log(1/gamma) sqrt(k) (R + sqrt(log(n/(k gamma)))) / (n eps)`` (requires ``n >= k``)."""
    n, k = _pos("n", n), _pos("k", k)
    if np.any(n < k):
        raise ValueError("n must be >= k (every group non-empty on average).")
    g = _gamma(gamma)
    v.check_positive("R", R, allow_zero=True)
    return (np.log(1 / g) * np.sqrt(k) * (np.asarray(R, np.float64) + np.sqrt(np.log(n / (k * g))))
            / (n * _pos("epsilon", epsilon)))


def global_laplace_noise_variance(n: Any, R: Any, gamma: Any, epsilon: Any, *,
                                  relation: str = "replace_one") -> np.ndarray:
    """Variance of ``Lap(Delta (R+s) / (n eps))``: ``2 (Delta (R+s) / (n eps))^2`` (Delta = 2 or 1)."""
    b = replace_factor(relation) * laplace_halfwidth(n, R, gamma) / (_pos("n", n) * _pos("epsilon", epsilon))
    return 2.0 * b * b


def stratified_laplace_noise_variance(sizes: Any, R: Any, gamma: Any, epsilon: Any, *,
                                      relation: str = "replace_one_within_group") -> float:
    """Noise variance of the stratified estimate with exact sizes (notes A2):
    ``sum_i 2 (Delta (R + s_i) / (n eps))^2``, ``s_i = sqrt(log(n_i/gamma))``, ``n = sum n_i``;
    empty groups contribute nothing (the sizes cancel between noise scale and weight). Exact sizes
    are public only within a group, hence the default relation (``Delta = 2`` as for replace-one)."""
    sizes = np.asarray(sizes, np.float64)
    if sizes.ndim != 1 or np.any(sizes < 0) or sizes.sum() <= 0:
        raise ValueError(f"sizes must be a 1-D array of non-negative counts with a positive sum, got {sizes!r}.")
    n = sizes.sum()
    present = sizes > 0
    hw = laplace_halfwidth(sizes[present], R, gamma)
    b = replace_factor(relation) * hw / (n * _pos("epsilon", epsilon))
    return float(np.sum(2.0 * b * b))


def stratified_gaussian_noise_variance(n: Any, clips: Any, rho: Any, *,
                                       relation: str = "replace_one_within_group") -> float:
    """Noise variance of the stratified Gaussian mean with exact sizes (notes A3):
    ``sum_g (Delta C_g / n)^2 / (2 rho)`` over the present groups (``clips [k]``), ``k`` times the
    global variance for equal clips. Default relation as :func:`stratified_laplace_noise_variance`."""
    c = _pos("clips", clips).ravel()
    return float(np.sum((replace_factor(relation) * c / _pos("n", n)) ** 2) / (2.0 * _pos("rho", rho)))


def dirichlet_expected_log_sizes(n: Any, k: Any, alpha: Any) -> np.ndarray:
    """Theorem 9: ``k (psi(alpha) - psi(k alpha) + log n)`` = ``E sum_i log(n g_i)``, ``g ~ Dir(alpha 1_k)``.

    An equality for continuous sizes (the paper states "<="); by Jensen it is <= ``k log(n/k)``
    and tends to it as alpha grows. For small alpha it drops below the "best case" (sizes below
    1 have negative logs), so it is meaningful for alpha in roughly [0.2, 1).
    """
    n, k, a = _pos("n", n), _pos("k", k), _pos("alpha", alpha)
    return k * (special.digamma(a) - special.digamma(k * a) + np.log(n))


def worst_case_log_sizes(n: Any, k: Any) -> np.ndarray:
    """``k log(n/k)``: the maximum of ``sum_i log |G_i|`` (equal sizes), Prop. 8's worst case."""
    n, k = _pos("n", n), _pos("k", k)
    return k * np.log(n / k)


def best_case_log_sizes(n: Any, k: Any, *, form: str = "paper") -> np.ndarray:
    """The paper's extreme-imbalance case (k - 1 groups of one member): ``(k - 1) + log(n - k)``
    (``form="paper"``) or the informal lower bound ``k + log n`` (``form="k_plus_log_n"``)."""
    n, k = _pos("n", n), _pos("k", k)
    v.check_choice("form", form, ("paper", "k_plus_log_n"))
    if form == "paper":
        if np.any(n <= k):
            raise ValueError("n must be > k for the form (k - 1) + log(n - k).")
        return (k - 1) + np.log(n - k)
    return k + np.log(n)


def fraction_toward_best(n: Any, k: Any, alpha: Any, *, form: str = "paper") -> np.ndarray:
    """``(worst - E) / (worst - best)``: how far Thm. 9's expectation sits from the worst case toward
    the best (the paper's "~80% better" at ACS race, alpha ~ 0.13; natural logs give ~0.72)."""
    w = worst_case_log_sizes(n, k)
    return (w - dirichlet_expected_log_sizes(n, k, alpha)) / (w - best_case_log_sizes(n, k, form=form))


def fit_symmetric_dirichlet_alpha(proportions: Any, *, method: str = "mle",
                                  floor: float = 1e-12) -> float:
    """Fit ``alpha`` of a symmetric ``Dir(alpha 1_k)`` to proportion vectors ``[k]`` or ``[m, k]``.

    ``method="mle"``: maximizes ``m (log Gamma(k a) - k log Gamma(a)) + (a - 1) sum log p``, i.e.
    solves ``m k (psi(k a) - psi(a)) + sum log p = 0`` (Brent; the log-likelihood is concave in a).
    ``method="moment"``: matches the mean per-coordinate variance ``(k-1) / (k^2 (k a + 1))``.
    Zero proportions are floored at ``floor`` and rows renormalized (the MLE needs ``log p``).
    """
    p = np.asarray(proportions, np.float64)
    if p.ndim == 1:
        p = p[None, :]
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"proportions must have shape [k] or [m, k] with k >= 2, got {np.shape(proportions)}.")
    v.check_finite("proportions", p)
    if np.any(p < 0) or np.any(p.sum(axis=1) <= 0):
        raise ValueError("proportions must be non-negative with positive row sums.")
    v.check_choice("method", method, ("mle", "moment"))
    p = np.maximum(p, floor)
    p = p / p.sum(axis=1, keepdims=True)
    m, k = p.shape
    if method == "moment":
        var = float(np.mean((p - 1.0 / k) ** 2))
        if var <= 0:
            return float("inf")
        a = ((k - 1) / (k * k * var) - 1.0) / k
        if a <= 0:
            raise ValueError("the proportions vary more than any symmetric Dirichlet allows; use method='mle'.")
        return float(a)
    slog = float(np.sum(np.log(p)))

    def score(log_a: float) -> float:
        a = np.exp(log_a)
        return m * k * (special.digamma(k * a) - special.digamma(a)) + slog

    lo, hi = -20.0, 20.0
    if score(hi) > 0:
        return float(np.exp(hi))
    return float(np.exp(optimize.brentq(score, lo, hi, xtol=1e-12)))
