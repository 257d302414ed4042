"""The K-group design of paper 000's Tables 1-3, calibrated to the paper's DPNoSE column.

The paper gives only the largest and the smallest group (10,000 and 500, "20x") and the MSPE per
group of DPNoSE (pooled DP-GD) and DPSE. DPNoSE's group-1 MSPE is about 1 (the noise variance), so
the pooled fit sits almost on group 1's slope, and groups 2-5 (MSPE 18-21) lie on one side of it
(DPSE lowers all four by about the same amount). With clipped gradients (``Delta = 2``) each
misfit example pulls the pooled fit by at most ``Delta``, so how far the fit moves towards groups
2-5 depends on their sizes: geometric middle sizes (4,729 / 2,236 / 1,057) move it by about 2.3
(group-1 MSPE 6.5), while the paper's 1.01-1.02 allows a shift of at most about 0.16. This module
finds the common middle size ``m`` and the slopes that reproduce the DPNoSE column.

Model (the kit's DPNoSE in its non-private, converged limit): one feature ``x ~ N(0, 1)``, ``y =
beta_k x + sigma e``; the pooled fit ``theta`` solves ``sum_k n_k E[clip(2 (theta x - y) x, -Delta,
Delta)] = 0`` (expectations by Gauss-Hermite quadrature); the population MSPE of group ``k`` is
``(theta - beta_k)^2 + sigma^2`` (the study's exact test error). Given ``theta``, the slopes
``beta_k = beta_1 + shift + d_k`` with ``d_k = sqrt(MSPE_k - sigma^2)`` reproduce groups 2..K
exactly; ``m`` is then chosen so that group 1's MSPE, ``shift^2 + sigma^2``, matches too (with
``beta_k - theta`` fixed, group k's mean clipped gradient does not depend on ``theta``, so ``m``
follows from one linear equation).

Public names: :func:`clipped_gradient_mean`, :func:`pooled_fit`, :func:`calibrate_middle_size`.

Privacy: none (a design calculation on public numbers from the paper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["clipped_gradient_mean", "pooled_fit", "calibrate_middle_size"]

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
_W2 = np.outer(_WEIGHTS, _WEIGHTS) / _WEIGHTS.sum() ** 2
_X, _E = np.meshgrid(_NODES, _NODES, indexing="ij")


def clipped_gradient_mean(theta: float, beta: float, noise_sd: float = 1.0, clip: float = 2.0) -> float:
    """``E[clip(2 (theta x - y) x, -clip, clip)]`` for ``x ~ N(0, 1)``, ``y = beta x + noise_sd e``
    (two-dimensional Gauss-Hermite quadrature, 80 x 80 nodes)."""
    g = 2.0 * ((float(theta) - float(beta)) * _X - float(noise_sd) * _E) * _X
    return float(np.sum(_W2 * np.clip(g, -float(clip), float(clip))))


def pooled_fit(sizes: Sequence[float], slopes: Sequence[float], *, noise_sd: float = 1.0, clip: float = 2.0,
               box: float = 5.0) -> float:
    """The converged pooled DP-GD slope without noise: the root in ``[-box, box]`` of
    ``sum_k n_k E[clipped gradient of group k]`` (bisection; the sum increases in ``theta``)."""
    n = np.asarray(sizes, np.float64)
    b = np.asarray(slopes, np.float64)
    if n.shape != b.shape or n.ndim != 1 or np.any(n < 0) or not np.any(n > 0):
        raise ValueError("sizes and slopes must be 1-D of the same length, sizes >= 0 and not all zero.")

    def total(t: float) -> float:
        return sum(float(nk) * clipped_gradient_mean(t, bk, noise_sd, clip) for nk, bk in zip(n, b) if nk > 0)

    lo, hi = -float(box), float(box)
    if total(lo) > 0:
        return lo
    if total(hi) < 0:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if total(mid) > 0:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def _group1_fit(n1: float, pull: float, base: float, noise_sd: float, clip: float, box: float) -> float:
    """``theta`` with ``n1 E[clipped gradient of group 1 at theta] + pull = 0`` (bisection)."""
    lo, hi = -float(box), float(box)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if n1 * clipped_gradient_mean(mid, base, noise_sd, clip) + pull > 0:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def calibrate_middle_size(target_mspe: Sequence[float], largest: int, smallest: int, *, noise_sd: float = 1.0,
                          clip: float = 2.0, box: float = 5.0, base: float = 0.0, max_middle: int | None = None,
                          min_middle: int = 2) -> dict[str, Any]:
    """The common size ``m`` of the middle groups (2..K-1) and the slopes that reproduce a DPNoSE
    MSPE column ``target_mspe`` (group 1 = ``largest`` rows, group K = ``smallest`` rows).

    Groups 2..K are matched exactly by their slopes (all on one side of group 1, as the paper's
    DPSE column shows); ``m`` (an integer in ``[min_middle, max_middle]``, default ``largest``) is the one
    whose fit puts group 1's MSPE closest to its target, at least ``min_middle`` (a group needs rows
    for stage 1's standard error). Returns ``middle`` (``m``), ``sizes``,
    ``slopes``, ``shift`` (the fit's distance from group 1's slope), ``target_shift`` (the paper's:
    ``sqrt(MSPE_1 - sigma^2)``), ``mspe`` (the model's column) and ``shift_at_zero`` (the smallest
    shift any middle size allows, set by the smallest group alone)."""
    t = np.asarray(target_mspe, np.float64)
    K = t.size
    if K < 3:
        raise ValueError(f"target_mspe needs at least 3 groups, got {K}.")
    s2 = float(noise_sd) ** 2
    if np.any(t[1:] <= s2):
        raise ValueError("target_mspe of groups 2..K must exceed noise_sd^2 (their slopes differ from group 1's).")
    d = np.sqrt(t[1:] - s2)
    target_shift = math.sqrt(max(float(t[0]) - s2, 0.0))
    hi_m = int(largest if max_middle is None else max_middle)
    # with beta_k = theta + d_k, group k's mean clipped gradient does not depend on theta
    pull = np.array([clipped_gradient_mean(0.0, dk, noise_sd, clip) for dk in d])  # [K-1], negative
    n1, nK = float(largest), float(smallest)

    def shift(m: float) -> float:
        total = float(m) * float(pull[:-1].sum()) + nK * float(pull[-1])
        return _group1_fit(n1, total, float(base), float(noise_sd), float(clip), float(box)) - float(base)

    at_zero = shift(0.0)
    need = n1 * clipped_gradient_mean(float(base) + target_shift, float(base), noise_sd, clip) + nK * float(pull[-1])
    m_real = -need / float(pull[:-1].sum()) if pull[:-1].sum() != 0 else 0.0
    m = int(min(max(round(m_real), int(min_middle)), hi_m))
    sh = shift(float(m))
    slopes = np.r_[float(base), float(base) + sh + d]
    mspe = (sh + float(base) - slopes) ** 2 + s2
    return {"middle": int(m), "sizes": (int(largest),) + (m,) * (K - 2) + (int(smallest),), "slopes": slopes.tolist(),
            "shift": float(sh), "target_shift": target_shift, "shift_at_zero": float(at_zero),
            "mspe": mspe.tolist()}
