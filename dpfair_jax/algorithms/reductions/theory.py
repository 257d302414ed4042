"""Paper 002's closed forms (Alabi et al., reductions), beside the algorithm.

:func:`advanced_composition` (Lemma A.4), :func:`cgoo_per_step_privacy` (Algorithm 2, lines
4-7) and :func:`jagielski_per_step_epsilon` (Jagielski et al. 2018, App. C), host-side.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from dpfair_jax import _validation as V

__all__ = [
    "advanced_composition_epsilon",
    "advanced_composition",
    "cgoo_per_step_privacy",
    "jagielski_per_step_epsilon",
]


def advanced_composition_epsilon(epsilon: float, k: int, delta_bar: float) -> float:
    """``eps_bar = eps sqrt(2 k log(1/delta_bar)) + k eps (e^eps - 1)`` (paper 002 Lemma A.4;
    Dwork, Rothblum, Vadhan 2010)."""
    V.check_epsilon(epsilon)
    k = V.check_int("k", k)
    V.check_delta(delta_bar, "delta_bar")
    e = float(epsilon)
    return e * math.sqrt(2.0 * k * math.log(1.0 / delta_bar)) + k * e * math.expm1(e)


def advanced_composition(epsilon: float, delta: float, k: int, delta_bar: float) -> tuple[float, float]:
    """k-fold adaptive composition of (eps, delta)-DP mechanisms is
    ``(eps_bar, k delta + delta_bar)``-DP (paper 002 Lemma A.4). ``delta`` may be 0."""
    d = V.as_float("delta", delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}.")
    k = V.check_int("k", k)
    return advanced_composition_epsilon(epsilon, k, delta_bar), k * d + float(delta_bar)


def _largest_eps_step(target: float, steps: int, delta_bar: float) -> float:
    lo, hi = 0.0, target  # eps_bar(target) >= target for k >= 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid > 0 and advanced_composition_epsilon(mid, steps, delta_bar) <= target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo


def cgoo_per_step_privacy(
    epsilon: float, delta: float, steps: int, *, oracle: str = "approximate", variant: str = "exact"
) -> tuple[float, float]:
    """Per-call budget (eps', delta') of the private oracle in paper 002 Algorithm 2 (lines 4-7).

    ``oracle="pure"`` (LOPT_{eps,0}): ``delta' = 0`` and the composition slack is ``delta``.
    ``oracle="approximate"``: ``delta' = delta/(2T)`` (so ``T delta' = delta/2``) and the slack
    ``delta_bar`` is at most ``delta/2``.

    ``variant``:
      * ``"exact"`` (default): the largest eps' whose T-fold advanced composition (Lemma A.4,
        both terms) is at most epsilon, by bisection, with ``delta_bar = delta`` (pure) or
        ``delta/2`` (approximate). Always valid, and the least noisy choice Lemma A.4 allows.
      * ``"closed_form"``: ``eps / (2 sqrt(2T log(1/delta_bar)))`` with the same ``delta_bar``
        (the corollary after Lemma A.4; it drops the ``T eps'(e^eps' - 1)`` term, so it is valid
        when that term is at most eps/2, roughly eps <= 4 log(1/delta_bar); a warning says when not).
      * ``"paper"``: lines 5 and 7 literally: pure ``eps/(2 sqrt(2T log(1/delta)))``; approximate
        ``eps/(2 sqrt(2T log(2/delta')))`` with ``delta' = delta/(2T)`` (i.e. ``delta_bar =
        delta/(4T)``, valid but more conservative than needed).

    Privacy: T adaptive calls of an (eps', delta')-DP oracle are (epsilon, delta)-DP (Lemma 5.8).
    Note that line 10 of the algorithm reads the data without noise (notes B.5); that gap is not
    covered by this budget.
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    steps = V.check_int("steps", steps)
    V.check_choice("oracle", oracle, ("pure", "approximate"))
    V.check_choice("variant", variant, ("exact", "closed_form", "paper"))
    eps, dlt = float(epsilon), float(delta)
    delta_step = 0.0 if oracle == "pure" else dlt / (2.0 * steps)
    delta_bar = dlt if oracle == "pure" else dlt / 2.0
    if variant == "exact":
        return _largest_eps_step(eps, steps, delta_bar), delta_step
    if variant == "paper" and oracle == "approximate":
        delta_bar = delta_step / 2.0  # log(2/delta') = log(1/delta_bar)
    eps_step = eps / (2.0 * math.sqrt(2.0 * steps * math.log(1.0 / delta_bar)))
    total = advanced_composition_epsilon(eps_step, steps, delta_bar)
    if total > eps * (1.0 + 1e-12):
        warnings.warn(
            f"per-step epsilon {eps_step:.4g} composes to {total:.4g} > epsilon={eps:.4g} under "
            "Lemma A.4 (the closed form drops the T eps'(e^eps'-1) term); use variant='exact'.",
            stacklevel=2,
        )
    return eps_step, delta_step


def jagielski_per_step_epsilon(epsilon: float, delta: float, steps: int) -> float:
    """Per-iteration budget of Jagielski et al. (2018) DP-oracle-learner: ``eps / (4 sqrt(T log(1/delta)))``
    (as quoted in paper 002, App. C)."""
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    steps = V.check_int("steps", steps)
    return float(epsilon) / (4.0 * math.sqrt(steps * math.log(1.0 / delta)))
