"""Renyi DP of the Poisson-subsampled Gaussian under replace-one, by certified quadrature.

A replacement of one record whose clipped contribution has norm ``<= C``, its sampling unchanged,
is, for one Poisson-subsampled Gaussian step (std ``z C``, rate ``q``), dominated by the 1-D pair
dp-accounting's PLD uses for ``AdjacencyType.REPLACE``::

    P = q N(-1/z, 1) + (1 - q) N(0, 1)      Q = q N(+1/z, 1) + (1 - q) N(0, 1)

(``dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss(..., sampling_prob=q,
adjacency_type=REPLACE)``; the domination over every pair of rows of norm ``<= C`` is checked in
2-D by ``tests/privacy/test_replace_rdp.py``). ``P(x) = Q(-x)``, so ``D_alpha(P||Q) =
D_alpha(Q||P)``. :func:`subsampled_gaussian_replace_rdp` computes

    D_alpha(P||Q) = log(1 + J) / (alpha - 1),   J = int P [(P/Q)^(alpha - 1) - 1] dx

(``J`` in this form keeps small divergences accurate) by the trapezoid rule on a uniform grid in
log space, per order. Certified upward:

* the tails outside the grid are bounded in closed form (:func:`_tail_bound`: ``Q >= v_j N(nu_j)``
  for one component, ``(sum_i u_i)^alpha <= k^(alpha - 1) sum_i u_i^alpha``, Gaussian integrals),
  and the tail of ``-P`` is dropped (it is negative);
* the grid error is estimated by the same rule at twice the step and added (``|T_h - T_2h|``:
  an estimate, not a proof; on these smooth, rapidly decaying integrands the trapezoid rule
  converges geometrically, so it exceeds the error of ``T_h`` by orders of magnitude, and the
  tests check the result against a grid four times finer and against independent references);
* the result is rounded up by :data:`SAFETY_REL` (relative) and :data:`SAFETY_ABS` (absolute).

Each order is also capped by the joint convexity of ``exp((alpha - 1) D_alpha)``: ``D_alpha <=
log(1 - q + q exp((alpha - 1) alpha (2/z)^2 / 2)) / (alpha - 1)``, which is used alone where the
grid would exceed :data:`MAX_POINTS` (very small ``z`` at very high orders, where the curve is
far too large to bind). ``q = 1`` (no sampling) is the Gaussian of shift ``2/z``: ``alpha (2/z)^2 / 2``.

:func:`replace_rdp_of_event` walks a ``DpEvent`` (Composed / SelfComposed / PoissonSampled of
Gaussians / Gaussian / NoOp; anything else, NonPrivate included: ``inf`` for the whole curve) and
sums the curves over the composition. Host-side, float64.

Privacy: upper bounds on the RDP of the event's mechanism under a replacement of one record (each
Gaussian's add/remove sensitivity being the record's norm bound ``C``), its sampling unchanged.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
import numpy as np
from scipy import special

__all__ = ["SAFETY_REL", "SAFETY_ABS", "MAX_POINTS", "STEP", "mixture_rdp", "subsampled_gaussian_replace_rdp",
           "replace_rdp_of_event"]

#: relative and absolute amounts every quadrature result is rounded up by
SAFETY_REL = 1e-9
SAFETY_ABS = 1e-13
#: the most grid points per order; beyond it the convexity cap alone is used (a valid bound)
MAX_POINTS = 40_000
#: the grid step (in units of the noise std), divided by the shift ``1/z`` when that exceeds 1
STEP = 0.1
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_mix(x: np.ndarray, weights, means) -> np.ndarray:
    """``log sum_i w_i N(x; mu_i, 1)`` (weights > 0)."""
    out = math.log(weights[0]) - 0.5 * (x - means[0]) ** 2
    for w, mu in zip(weights[1:], means[1:]):
        out = np.logaddexp(out, math.log(w) - 0.5 * (x - mu) ** 2)
    return out - _LOG_SQRT_2PI


def _tail_bound(alpha: np.ndarray, p, q, edge: np.ndarray, side: str) -> np.ndarray:
    """Log of an upper bound on ``int P^alpha Q^(1 - alpha)`` over ``x <= edge`` (``side="left"``)
    or ``x >= edge`` (``"right"``), per order, for ``P = (w, mu)``, ``Q = (v, nu)`` mixtures of
    ``N(., 1)``: for each component ``j`` of ``Q``, ``Q >= v_j phi(x - nu_j)``, and
    ``(sum_i u_i)^alpha <= k^(alpha - 1) sum_i u_i^alpha`` give a sum of Gaussian integrals; the
    smallest over ``j``."""
    (w, mu), (v, nu) = p, q
    best = np.full(alpha.shape, np.inf)
    for vj, nj in zip(v, nu):
        total = np.full(alpha.shape, -np.inf)
        for wi, mi in zip(w, mu):
            a = alpha * (mi - nj)
            c = nj + a  # phi(x - nj) e^{a x} = phi(x - c) e^{a nj + a^2 / 2}
            lphi = special.log_ndtr(edge - c) if side == "left" else special.log_ndtr(c - edge)
            total = np.logaddexp(total, lphi + a * nj + a * a / 2.0 - alpha * (mi * mi - nj * nj) / 2.0
                                 + alpha * math.log(wi) + (1.0 - alpha) * math.log(vj))
        best = np.minimum(best, (alpha - 1.0) * math.log(len(w)) + total)
    return best


def _segment_logsumexp(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    mx = np.maximum.reduceat(v, starts)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(v))))
    with np.errstate(divide="ignore"):
        return mx + np.log(np.add.reduceat(np.exp(v - mx[seg]), starts))


def mixture_rdp(alphas, p, q, lo, hi, h) -> np.ndarray:
    """Certified upper bounds on ``D_alpha(P||Q)`` at each of ``alphas`` for mixtures ``P =
    (weights, means)``, ``Q`` of unit-variance Gaussians: per order, the trapezoid rule on ``[lo,
    hi]`` at step ``<= h`` (all orders in one vectorized pass over the concatenated grids), plus
    the grid error estimate and the tail bounds, rounded up by the safety margins (module docstring)."""
    a = np.asarray(alphas, np.float64).reshape(-1)
    if np.any(a <= 1.0):
        raise ValueError("orders must be > 1.")
    lo, hi, h = (np.broadcast_to(np.asarray(v, np.float64), a.shape) for v in (lo, hi, h))
    n = (np.ceil((hi - lo) / h / 2.0).astype(np.int64) * 2 + 1)
    step = (hi - lo) / (n - 1)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]])
    seg = np.repeat(np.arange(len(a)), n)
    k = np.arange(int(n.sum())) - starts[seg]
    x = lo[seg] + step[seg] * k
    lp, lq = _log_mix(x, *p), _log_mix(x, *q)
    t = (a[seg] - 1.0) * (lp - lq)
    pos = t > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        # P (e^t - 1) = exp(lp + t + log(1 - e^-t)) where t > 0; P (1 - e^t) >= 0 where t <= 0
        lterm = np.where(pos, lp + t + np.log(-np.expm1(-np.where(pos, t, 1.0))), -np.inf)
        nterm = np.where(pos, 0.0, np.exp(lp) * -np.expm1(np.minimum(t, 0.0)))
    end = (k == 0) | (k == n[seg] - 1)
    res = []
    for keep, wt in ((np.ones(k.shape, bool), step[seg]), (k % 2 == 0, 2.0 * step[seg])):
        wt = np.where(end, wt / 2.0, wt) * keep
        with np.errstate(divide="ignore"):
            res.append(_segment_logsumexp(lterm + np.log(wt), starts))
        res.append(np.add.reduceat(nterm * wt, starts))
    lpos_h, neg_h, lpos_2h, neg_2h = res
    tails = np.logaddexp(_tail_bound(a, p, q, lo, "left"), _tail_bound(a, p, q, hi, "right"))
    s = np.maximum.reduce([lpos_h, lpos_2h, tails, np.zeros(a.shape)])
    s = np.where(s < 1.0, 0.0, s)
    jh = np.exp(lpos_h - s) - neg_h * np.exp(-s)
    j2h = np.exp(lpos_2h - s) - neg_2h * np.exp(-s)
    j_up = jh + np.abs(jh - j2h) + np.exp(tails - s)  # J / e^s, rounded up
    log_i = np.where(s == 0.0, np.log1p(j_up), s + np.log(np.exp(-s) + j_up))
    d = np.maximum(log_i, 0.0) / (a - 1.0)
    return d * (1.0 + SAFETY_REL) + SAFETY_ABS


def _convexity_cap(alpha: np.ndarray, q: float, z: float) -> np.ndarray:
    """``log(1 - q + q exp((alpha - 1) alpha (2/z)^2 / 2)) / (alpha - 1)`` (module docstring)."""
    e = (alpha - 1.0) * alpha * 2.0 / z**2
    return np.logaddexp(math.log1p(-q) if q < 1.0 else -np.inf, math.log(q) + e) / (alpha - 1.0)


@functools.lru_cache(maxsize=4096)
def _curve(q: float, z: float, orders: tuple[float, ...]) -> tuple[float, ...]:
    a = np.asarray(orders, np.float64)
    if q == 0.0:
        return tuple(np.zeros(a.shape))
    if q == 1.0:
        return tuple(a * 2.0 / z**2)
    m = 1.0 / z
    h = min(STEP, STEP / m)
    c = np.sqrt(2.0 * ((a - 1.0) * math.log(2.0) + 80.0))  # tail bounds below e^-80 of the bulk
    lo, hi = -a * m - c, m + c
    out = _convexity_cap(a, q, z)
    fits = (hi - lo) / h <= MAX_POINTS
    if np.any(fits):
        p, qq = ((q, 1.0 - q), (-m, 0.0)), ((q, 1.0 - q), (m, 0.0))
        out[fits] = np.minimum(out[fits], mixture_rdp(a[fits], p, qq, lo[fits], hi[fits], h))
    return tuple(out.tolist())


def subsampled_gaussian_replace_rdp(sample_rate: float, noise_multiplier: float, orders) -> np.ndarray:
    """RDP at ``orders`` of one Poisson-subsampled Gaussian step (rate ``sample_rate``, multiplier
    ``noise_multiplier`` of the norm bound) under replace-one of a record, sampling unchanged
    (module docstring): certified quadrature, capped by joint convexity; ``sample_rate = 1``: the
    closed form ``alpha (2/z)^2 / 2``; 0: zero. Cached per ``(q, z, orders)``."""
    q, z = float(sample_rate), float(noise_multiplier)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sample_rate must be in [0, 1], got {sample_rate!r}.")
    if not (z >= 0.0 and math.isfinite(z)):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier!r}.")
    a = tuple(np.asarray(orders, np.float64).reshape(-1).tolist())
    if any(x <= 1.0 for x in a):
        raise ValueError("orders must be > 1.")
    if z == 0.0:
        return np.full(len(a), 0.0 if q == 0.0 else np.inf)
    return np.asarray(_curve(q, z, a), np.float64)


def _gaussian_inverse_square(event) -> float | None:
    """``sum z_j^-2`` of a Gaussian or a composition of Gaussians (one step's releases on the same
    batch: one Gaussian of multiplier ``(sum z_j^-2)^(-1/2)``); ``None`` for anything else."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return math.inf if event.noise_multiplier == 0 else event.noise_multiplier ** -2
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_accounting.ComposedDpEvent):
        parts = [_gaussian_inverse_square(e) for e in event.events]
        return None if any(p is None for p in parts) else float(sum(parts))
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        inner = _gaussian_inverse_square(event.event)
        return None if inner is None else inner * event.count
    return None


def replace_rdp_of_event(event: dp_accounting.DpEvent | None, orders) -> np.ndarray:
    """RDP at ``orders`` of ``event``'s mechanism under replace-one of a record, its sampling
    unchanged: the sum over the composition of :func:`subsampled_gaussian_replace_rdp` for each
    ``PoissonSampledDpEvent`` of Gaussians and ``alpha (2/z)^2 / 2`` for each Gaussian; ``inf`` at
    every order for ``None`` or any other event (a valid bound)."""
    a = np.asarray(orders, np.float64)
    out = _walk(event, a)
    return np.full(a.shape, np.inf) if out is None else out


def _walk(event, a: np.ndarray) -> np.ndarray | None:
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return np.zeros(a.shape)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        parts = [_walk(e, a) for e in event.events]
        return None if any(p is None for p in parts) else np.sum(parts, axis=0) if parts else np.zeros(a.shape)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        inner = _walk(event.event, a)
        return None if inner is None else inner * event.count
    if isinstance(event, (dp_accounting.GaussianDpEvent, dp_accounting.PoissonSampledDpEvent)):
        rate = 1.0
        if isinstance(event, dp_accounting.PoissonSampledDpEvent):
            rate, event = float(event.sampling_probability), event.event
        inv2 = _gaussian_inverse_square(event)
        if inv2 is None:
            return None
        if inv2 == 0.0 or rate == 0.0:
            return np.zeros(a.shape)
        if math.isinf(inv2):
            return np.full(a.shape, np.inf)
        return subsampled_gaussian_replace_rdp(rate, inv2 ** -0.5, a)
    return None
