"""Group functions ``f``, ``g`` of a loss vector for the CGOO problem (paper 002): linear, sum and
max objectives, the bounded group loss, smoothed max and absolute value, the equalized-odds loss
layout, objective and constraint (Cor. 8.9), the Gini constraint (Def. 8.6) and the confusion
means of Sec. 8.1.

A :class:`GroupFunction` carries its l2 Lipschitz constant and smoothness on ``[0, 1]^K``; the
sensitivities of :mod:`.problem` are built from them.

Privacy: none by itself; a function's constants must be valid upper bounds and its parameters
(thresholds, normalizers) public for the guarantees of the algorithms that use it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V

__all__ = [
    "GroupFunction", "linear_objective", "sum_objective", "max_objective", "bounded_group_loss", "smax",
    "smooth_abs", "equalized_odds_loss_layout", "equalized_odds_objective", "equalized_odds_constraint",
    "gini_constraint", "confusion_index", "g_mean", "h_mean", "figure2_means",
]

Array = jax.Array


class GroupFunction(NamedTuple):
    """A function of the group loss vector ``l: [K] -> scalar`` with its l2 Lipschitz constant and
    smoothness ``beta`` on ``[0,1]^K`` (``inf``: not smooth). Constants enter sensitivities
    (Lemma 5.1), so they must be valid upper bounds."""

    fn: Callable[[Array], Array]
    lipschitz: float
    smoothness: float
    name: str

    def __call__(self, l: Array) -> Array:
        return self.fn(l)


def linear_objective(weights: Any, name: str = "linear") -> GroupFunction:
    """``f(l) = w . l`` (Lipschitz ``||w||``, smoothness 0). ``weights`` are concrete (public)."""
    w = np.asarray(weights, np.float64)
    V.check_shape("weights", w, ndim=1)
    V.check_finite("weights", w)
    wj = jnp.asarray(w, jnp.float32)
    return GroupFunction(lambda l: jnp.dot(l, wj), float(np.linalg.norm(w)), 0.0, name)


def sum_objective(num_groups: int) -> GroupFunction:
    """``f(l) = sum_k l_k`` (the population loss for itemized losses; Lipschitz ``sqrt K``)."""
    K = V.check_int("num_groups", num_groups)
    return GroupFunction(lambda l: jnp.sum(l, axis=-1), math.sqrt(K), 0.0, "sum")


def _max_fn(temperature: float | None):
    if temperature is None:
        return lambda z: jnp.max(z, axis=-1)
    t = float(temperature)
    return lambda z: jax.nn.logsumexp(t * z, axis=-1) / t


def max_objective(temperature: float | None = None) -> GroupFunction:
    """``f(l) = max_k l_k``; with ``temperature`` the log-sum-exp smoothing ``logsumexp(t l)/t``
    (1-Lipschitz, ``t``-smooth, within ``log(K)/t`` of the max)."""
    if temperature is not None:
        V.check_positive("temperature", temperature)
    beta = math.inf if temperature is None else float(temperature)
    return GroupFunction(_max_fn(temperature), 1.0, beta, "max")


def bounded_group_loss(thresholds: Any, temperature: float | None = None) -> GroupFunction:
    """Bounded group loss constraint ``g(l) = max_k (l_k - eta_k) <= 0`` (paper 002 Sec. 1.3,
    Agarwal et al. 2019). ``thresholds`` ``eta: [K]`` are on the loss vector's (itemized) scale and
    may be traced. ``temperature`` smooths the max as in :func:`max_objective`."""
    if temperature is not None:
        V.check_positive("temperature", temperature)
    V.check_finite("thresholds", thresholds)
    eta = jnp.asarray(thresholds, jnp.float32)
    mx = _max_fn(temperature)
    beta = math.inf if temperature is None else float(temperature)
    return GroupFunction(lambda l: mx(l - eta), 1.0, beta, "bounded_group_loss")


def smax(y: Array, eta: Any) -> Array:
    """Smoothed max ``smax^eta(y) = sum_i y_i e^{eta y_i} / sum_i e^{eta y_i}`` (paper 002 Eq. 2/13);
    tends to ``max`` as ``eta -> inf``. Its gradient is ``softmax_i(eta y) (1 + eta (y_i - smax))``."""
    y = jnp.asarray(y)
    p = jax.nn.softmax(jnp.asarray(eta, y.dtype) * y, axis=-1)
    return jnp.sum(p * y, axis=-1)


def smooth_abs(x: Array, mu: Any) -> Array:
    """``sqrt(x^2 + mu^2) - mu``: a 1-Lipschitz, ``1/mu``-smooth surrogate of ``|x|`` (the paper
    leaves the smoothing of the absolute value unspecified, Sec. 8)."""
    mu = jnp.asarray(mu, jnp.result_type(x, jnp.float32))
    return jnp.sqrt(jnp.square(x) + jnp.square(mu)) - mu


def equalized_odds_loss_layout(num_groups: int) -> dict[str, np.ndarray]:
    """Indices of the loss vector of Cor. 8.9 (``K = 3|A|``): ``(FP_1..FP_A, TP_1..TP_A, FN_1..FN_A)``."""
    A = V.check_int("num_groups", num_groups)
    return {"fp": np.arange(A), "tp": np.arange(A, 2 * A), "fn": np.arange(2 * A, 3 * A)}


def equalized_odds_objective(num_groups: int) -> GroupFunction:
    """``f(l) = sum_a (FP_a + FN_a)`` (Cor. 8.9): the error of itemized confusion counts."""
    lay = equalized_odds_loss_layout(num_groups)
    idx = jnp.asarray(np.concatenate([lay["fp"], lay["fn"]]))
    return GroupFunction(lambda l: jnp.sum(l[..., idx], axis=-1), math.sqrt(2 * num_groups), 0.0,
                         "eo_error")


def equalized_odds_constraint(num_groups: int, alpha: Any, *, eta: float | None = 50.0, mu: float = 0.01,
                              normalizers: Any = None) -> GroupFunction:
    """Smoothed equalized odds (Def. 8.8, Eq. 13): ``g(l) = smax^eta_{a<a'} { sabs(FP_a - FP_a'),
    sabs(TP_a - TP_a') } - alpha`` with ``sabs`` = :func:`smooth_abs` (``mu``).

    ``eta=None``: the unsmoothed alpha-EO constraint (Def. 8.7, Eq. 12: max and absolute value;
    Lipschitz, not smooth: enough for Algorithm 1). ``normalizers``: public ``[A, 2]`` proportions
    ``q_{a,y} = P(s = a, y = y)`` turning the itemized ``FP_a, TP_a`` into the rates ``P(yhat = 1 | s =
    a, y)`` of Def. 1.13 (the paper's Cor. 8.9 writes rates; itemized losses need this division).

    Lipschitz bound (l2): with ``r = 1/min q`` (1 without normalizers), a pairwise difference has
    gradient norm ``<= sqrt(2) r``, so the hard max is ``sqrt(2) r``-Lipschitz; the pairwise map has
    operator norm ``sqrt(A) r`` and ``smax^eta`` of arguments in ``[0, 1]`` has gradient l1 norm
    ``<= 1 + eta``, so the smoothed one is ``sqrt(A) r (1 + eta)``-Lipschitz.
    """
    A = V.check_int("num_groups", num_groups, minimum=2)
    if eta is not None:
        V.check_positive("eta", eta)
    V.check_positive("mu", mu)
    lay = equalized_odds_loss_layout(A)
    if normalizers is None:
        q = np.ones((A, 2))
    else:
        q = np.asarray(normalizers, np.float64)
        V.check_shape("normalizers", q, shape=(A, 2))
        V.check_positive("normalizers", q)
    r = float(1.0 / q.min())
    inv_fp, inv_tp = jnp.asarray(1.0 / q[:, 0], jnp.float32), jnp.asarray(1.0 / q[:, 1], jnp.float32)
    ii, jj = np.triu_indices(A, k=1)
    fp, tp = jnp.asarray(lay["fp"]), jnp.asarray(lay["tp"])
    a = jnp.asarray(alpha, jnp.float32)

    def diffs(l):
        rf, rt = l[..., fp] * inv_fp, l[..., tp] * inv_tp
        return jnp.concatenate([rf[..., ii] - rf[..., jj], rt[..., ii] - rt[..., jj]], axis=-1)

    if eta is None:
        return GroupFunction(lambda l: jnp.max(jnp.abs(diffs(l)), axis=-1) - a, math.sqrt(2.0) * r, math.inf,
                             "eo")
    return GroupFunction(lambda l: smax(smooth_abs(diffs(l), mu), eta) - a,
                         math.sqrt(A) * r * (1.0 + float(eta)), math.inf, "smoothed_eo")


def gini_constraint(theta: Any, num_groups: int, *, variant: str = "corrected", n: int | None = None
                    ) -> GroupFunction:
    """Gini-index level set (Def. 8.6): ``g(l) = sum_{i,j} |l_i - l_j| - 2 K theta sum_i l_i <= 0``.

    The paper writes ``2n`` where the index is normalized by the number of subgroups ``K``;
    ``variant="paper"`` uses ``2n`` (pass ``n``). Lipschitz ``sqrt(K) (2(K-1) + 2 c theta)`` with
    ``c = K`` (or ``n``), valid for ``theta`` up to its concrete value."""
    K = V.check_int("num_groups", num_groups)
    V.check_choice("variant", variant, ("corrected", "paper"))
    if variant == "paper":
        if n is None:
            raise ValueError("variant='paper' needs n (the Gini index of Def. 8.6 uses 2n).")
        c = float(V.check_int("n", n))
    else:
        c = float(K)
    th = jnp.asarray(theta, jnp.float32)

    def g(l):
        diff = jnp.abs(l[..., :, None] - l[..., None, :])
        return jnp.sum(diff, axis=(-2, -1)) - 2.0 * c * th * jnp.sum(l, axis=-1)

    tb = float(np.max(np.abs(np.asarray(theta)))) if not V.is_traced(theta) else 1.0
    return GroupFunction(g, math.sqrt(K) * (2.0 * (K - 1) + 2.0 * c * tb), math.inf, "gini")


def confusion_index(p: int, q: int, num_classes: int) -> int:
    """Loss-vector coordinate of confusion entry ``C_pq`` (Sec. 8.1, ``k = L(p-1) + q``, 1-based
    classes; returned 0-based)."""
    L = V.check_int("num_classes", num_classes)
    if not (1 <= p <= L and 1 <= q <= L):
        raise ValueError(f"p and q must lie in 1..{L}, got p={p}, q={q}.")
    return L * (p - 1) + q - 1


def g_mean(C: Array) -> Array:
    """G-mean ``(prod_i C_ii / sum_j C_ij)^{1/L}`` (per-class recall; Sec. 8.1). ``C: [..., L, L]``."""
    C = jnp.asarray(C)
    rec = jnp.diagonal(C, axis1=-2, axis2=-1) / jnp.sum(C, axis=-1)
    return jnp.exp(jnp.mean(jnp.log(rec), axis=-1))


def h_mean(C: Array, *, variant: str = "paper") -> Array:
    """H-mean ``L (sum_i sum_j C_ji / C_ii)^{-1}`` (Sec. 8.1; column sums as printed, i.e. the
    harmonic mean of per-class precision). ``variant="recall"`` uses row sums (harmonic mean of
    recalls, the usual definition)."""
    V.check_choice("variant", variant, ("paper", "recall"))
    C = jnp.asarray(C)
    L = C.shape[-1]
    diag = jnp.diagonal(C, axis1=-2, axis2=-1)
    tot = jnp.sum(C, axis=-2) if variant == "paper" else jnp.sum(C, axis=-1)
    return L / jnp.sum(tot / diag, axis=-1)


def figure2_means(num_classes: int, weights: str = "uniform", ratio: float = 1.0 / 3.0
                  ) -> dict[str, float]:
    """G-mean and H-mean of the confusion matrices of Figure 2: ``"uniform"`` (all entries 1/L^2)
    or ``"geometric"`` (row-major entries decreasing by ``ratio``, normalized to sum 1)."""
    L = V.check_int("num_classes", num_classes, minimum=2)
    V.check_choice("weights", weights, ("uniform", "geometric"))
    if weights == "uniform":
        C = np.full((L, L), 1.0 / L**2)
    else:
        e = ratio ** np.arange(L * L, dtype=np.float64)
        C = (e / e.sum()).reshape(L, L)
    return {"g_mean": float(g_mean(jnp.asarray(C))), "h_mean": float(h_mean(jnp.asarray(C)))}
