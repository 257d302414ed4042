"""Accounted private hyperparameter selection (Papernot and Steinke, ICLR 2022).

Choosing a hyperparameter by looking at validation scores of private runs is itself a release
about the data: the best of ``m`` runs can leak more than one run. Papernot and Steinke ("Hyperparameter
tuning with Renyi differential privacy", arXiv:2110.03620) bound it when the *number of runs* is
random: draw ``K`` from a truncated negative binomial ``D_{eta, gamma}`` (shape ``eta``; ``eta = 0``
logarithmic, ``eta = 1`` geometric) or a Poisson law, run the private training ``K`` times, each
with a candidate drawn uniformly from the grid and fresh randomness, and release only the best
(highest score) run. Their Theorem 2 (truncated negative binomial) bounds its RDP by

    eps'(lam) = eps(lam) + (1 + eta) * min_lamhat [ (1 - 1/lamhat) eps(lamhat) + log(1/gamma)/lamhat ]
                + log(E[K]) / (lam - 1),

and Theorem 6 does the same for Poisson. dp-accounting implements both as
``RepeatAndSelectDpEvent``; this module draws ``K`` exactly from the same law, runs the search, and
states the spend through that event, so the selection's cost is part of the run's recorded spend.

``select_nonprivate`` (the arg-max over every grid point's validation score) is offered as a
labelled option: its spend says the selection is not accounted.

Privacy: with each run ``(lam, eps(lam))``-RDP under ``relation`` for every order, the released best
run (its hyperparameters, score and model) satisfies the RDP curve above, hence the returned
``(epsilon, delta)``. The bound holds only while ``K``, the losing candidates and their scores stay
hidden (and per-run timings, which reveal ``K``): :class:`SelectionResult` holds none of them.
The scores must be computed from the run's private output and the validation data only; the
validation data are part of the protected dataset.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import dp_accounting
import jax
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as _rdp

from .. import _validation as V
from .relations import as_relation

__all__ = [
    "RandomStopping",
    "SelectionResult",
    "num_runs_pmf",
    "draw_num_runs",
    "repeat_and_select_event",
    "selection_epsilon",
    "calibrate_for_selection",
    "random_stopping_search",
    "select_nonprivate",
]


@dataclasses.dataclass(frozen=True)
class RandomStopping:
    """The law of the number of runs: ``mean`` >= 1 and ``shape`` (``eta``) >= 0 or ``inf``.

    ``shape = inf`` is Poisson(mean) (``K = 0`` releases nothing); ``shape = 0`` logarithmic;
    ``shape = 1`` geometric; other values the truncated negative binomial of Papernot and Steinke.
    The default (logarithmic, mean 10) is the cheapest of these laws at a given mean: for 1000
    DP-SGD steps at q = 0.01, z = 1 (one run: eps 2.10 at delta 1e-5) the best-of-K release costs
    eps 3.52 (logarithmic), 4.10 (geometric), 4.33 (Poisson).
    """

    mean: float = 10.0
    shape: float = 0.0

    def __post_init__(self) -> None:
        m = V.as_float("RandomStopping.mean", self.mean)
        if not math.isfinite(m) or m < 1.0:
            raise ValueError(f"RandomStopping.mean must be a finite number >= 1, got {self.mean!r}.")
        s = V.as_float("RandomStopping.shape", self.shape)
        if math.isnan(s) or s < 0:
            raise ValueError(f"RandomStopping.shape must be >= 0 or inf, got {self.shape!r}.")

    @property
    def gamma(self) -> float:
        """The success probability ``gamma`` of ``D_{eta, gamma}`` whose mean is ``mean``."""
        if math.isinf(self.shape):
            raise ValueError("the Poisson law has no gamma parameter.")
        return _gamma(self.shape, self.mean)


def _tnb_mean(gamma: float, shape: float) -> float:
    if gamma >= 1.0:
        return 1.0
    if shape == 0.0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return shape * (1.0 - gamma) / (gamma * (1.0 - gamma**shape))


def _gamma(shape: float, mean: float) -> float:
    """Solve ``E[K] = mean`` for gamma by bisection (the mean decreases in gamma); conservative
    (the returned gamma gives a mean >= the requested one, so ``log E[K]`` is not understated)."""
    if mean == 1.0:
        return 1.0
    if shape == 1.0:
        return 1.0 / mean
    lo, hi = 0.0, min(1.0, 2.0 * (shape + 1.0) / mean)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _tnb_mean(mid, shape) < mean:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo


def num_runs_pmf(law: RandomStopping, k: Any) -> np.ndarray:
    """``P[K = k]`` for integer ``k`` (NumPy, elementwise).

    Truncated negative binomial (Papernot and Steinke, eq. 4): for ``k >= 1``
    ``P[K=k] = (1-gamma)^k / (gamma^-eta - 1) * prod_{l<k} (l + eta)/(l + 1)``; logarithmic
    (``eta = 0``): ``(1-gamma)^k / (k log(1/gamma))``; Poisson: ``e^-mean mean^k / k!``.
    """
    k = np.asarray(k, dtype=np.float64)
    from scipy import special

    if math.isinf(law.shape):
        out = np.exp(k * math.log(law.mean) - law.mean - special.gammaln(k + 1.0))
        return np.where(k >= 0, out, 0.0)
    if law.mean == 1.0:
        return np.where(k == 1, 1.0, 0.0)
    g, eta = law.gamma, law.shape
    kk = np.maximum(k, 1.0)
    if eta == 0.0:
        logp = kk * math.log1p(-g) - np.log(kk) - math.log(math.log(1.0 / g))
    else:
        logp = (kk * math.log1p(-g) - math.log(math.expm1(-eta * math.log(g)))
                + special.gammaln(kk + eta) - special.gammaln(eta) - special.gammaln(kk + 1.0))
    return np.where(k >= 1, np.exp(logp), 0.0)


def draw_num_runs(key: jax.Array, law: RandomStopping) -> int:
    """One exact draw of ``K`` from ``law`` (inverse CDF on the host, extending the table until
    the uniform is covered, so the law is not truncated)."""
    if math.isinf(law.shape):
        return int(jax.random.poisson(key, law.mean))
    hi, lo = (int(b) for b in np.asarray(jax.random.bits(key, (2,), dtype=jax.numpy.uint32)))
    u = ((hi >> 5) * 67108864.0 + (lo >> 6) + 1.0) / 9007199254740992.0  # 53-bit uniform in (0, 1]
    total, start, block = 0.0, 1, max(64, int(8 * law.mean))
    while True:
        ks = np.arange(start, start + block)
        cdf = total + np.cumsum(num_runs_pmf(law, ks))
        hit = np.nonzero(cdf >= u)[0]
        if hit.size:
            return int(ks[hit[0]])
        if cdf[-1] - total < 1e-300:  # the remaining mass underflows: the last atom is the draw
            return int(ks[-1])
        total, start = float(cdf[-1]), start + block


def repeat_and_select_event(event: dp_accounting.DpEvent, law: RandomStopping) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of running ``event`` ``K ~ law`` times and releasing the best run."""
    return dp_accounting.dp_event.RepeatAndSelectDpEvent(event, float(law.mean), float(law.shape))


#: Renyi orders of the selection accountant (dp-accounting's default grid, extended).
ORDERS: tuple[float, ...] = tuple([1.0 + x / 20.0 for x in range(1, 180)] + list(range(10, 64))
                                  + [80.0, 128.0, 256.0, 512.0, 1024.0])


def _rdp_accountant(relation: Any) -> dp_accounting.rdp.RdpAccountant:
    return dp_accounting.rdp.RdpAccountant(list(ORDERS), as_relation(relation))


def selection_epsilon(event: dp_accounting.DpEvent, law: RandomStopping | None, delta: float, *,
                      relation: Any = "add_remove") -> float:
    """Epsilon at ``delta`` of the best of ``K ~ law`` runs of ``event`` (RDP accountant);
    ``law=None`` is one run."""
    V.check_delta(delta)
    acc = _rdp_accountant(relation)
    full = event if law is None else repeat_and_select_event(event, law)
    if not acc.supports(full):
        raise ValueError(f"the RDP accountant cannot account {type(event).__name__} under "
                         f"{relation!r}; private selection needs an RDP-accountable run event.")
    acc.compose(full)
    return float(acc.get_epsilon(delta))


def calibrate_for_selection(make_event: Callable[[float], dp_accounting.DpEvent], law: RandomStopping,
                            epsilon: float, delta: float, *, relation: Any = "add_remove",
                            lo: float = 0.05, hi: float = 500.0, rtol: float = 1e-3) -> float:
    """Smallest noise multiplier ``z`` (bisection in log space) with
    ``selection_epsilon(make_event(z), law, delta) <= epsilon``."""
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    f = lambda z: selection_epsilon(make_event(z), law, delta, relation=relation)  # noqa: E731
    if f(hi) > epsilon:
        raise ValueError(f"no noise multiplier <= {hi} reaches epsilon={epsilon} with selection "
                         f"over mean {law.mean} runs; raise epsilon or lower the mean.")
    return smallest_meeting(f, lo, hi, epsilon, rtol)


def smallest_meeting(f: Callable[[float], float], lo: float, hi: float, epsilon: float, rtol: float) -> float:
    """The smallest ``z`` in ``[lo, hi]`` (to a factor ``1 + rtol``, by geometric bisection) with
    ``f(z) <= epsilon``, for ``f`` decreasing in ``z`` with ``f(hi) <= epsilon`` (checked by the
    caller). The returned ``z`` always meets the target."""
    if f(lo) <= epsilon:
        return lo
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if f(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


@dataclasses.dataclass(frozen=True)
class SelectionResult:
    """What a selection releases: the chosen candidate, its score and output, and what it cost.

    ``index`` is None when no run happened (Poisson ``K = 0``, which the bound covers). Nothing
    else about the search is kept: the number of runs ``K``, the candidates tried and the losing
    scores are not covered by the Papernot-Steinke bound (releasing ``K`` with the best score of a
    Gaussian-scored search at a recorded epsilon of 1 costs about 2.0; ``docs/trust.md``), so
    they are not returned. ``accounted`` is False for the non-private arg-max, whose ``epsilon``
    is then ``inf`` (no guarantee for the selection).
    """

    index: int | None
    score: float
    output: Any
    epsilon: float
    delta: float
    accounted: bool
    method: str


def _bucket(k: int) -> int:
    """Pad the number of runs to a power of two so that the vmapped program compiles a few times."""
    return 1 << max(0, (k - 1).bit_length())


def random_stopping_search(key: jax.Array, run_fn: Callable[[jax.Array, jax.Array], tuple[Any, Any]],
                           num_candidates: int, law: RandomStopping, *, event: dp_accounting.DpEvent,
                           delta: float, relation: Any = "add_remove") -> SelectionResult:
    """Papernot-Steinke random stopping: ``K ~ law`` runs, each on a uniformly drawn candidate.

    Args:
      key: the search's key (split into the draw of ``K``, the candidates and one key per run).
      run_fn: ``run_fn(keys, candidate_indices) -> (scores, outputs)``, vectorized over its leading
        axis (e.g. ``jax.vmap`` of one training run followed by its validation score); higher
        scores are better. It is called on ``K`` rows padded to a power of two; padded rows are
        discarded.
      num_candidates: size of the grid the candidates are drawn from.
      law: the law of ``K``.
      event: the ``DpEvent`` of one run (the same for every candidate: calibrate the candidates'
        noise to one per-run guarantee).
      delta: the delta at which the total epsilon is reported.

    Privacy: the result's ``(epsilon, delta)`` (``selection_epsilon``) covers releasing the best
    run's index, score and output, and nothing else: the result does not hold ``K``, the other
    candidates or their scores (the bound holds only while they stay hidden), and a caller must not
    release them (nor per-run timings, which reveal ``K``).
    """
    num_candidates = V.check_int("num_candidates", num_candidates)
    eps = selection_epsilon(event, law, delta, relation=relation)
    k_key, c_key, r_key = jax.random.split(key, 3)
    k = draw_num_runs(k_key, law)
    if k == 0:
        return SelectionResult(None, float("nan"), None, eps, float(delta), True,
                               f"random_stopping(mean={law.mean}, shape={law.shape})")
    width = _bucket(k)
    idx = jax.random.randint(c_key, (width,), 0, num_candidates)
    scores, outputs = run_fn(jax.random.split(r_key, width), idx)
    scores = np.asarray(scores, dtype=np.float64)[:k]
    if scores.shape != (k,):
        raise ValueError(f"run_fn must return one score per run (shape ({width},)), got "
                         f"{np.shape(scores)}.")
    if not np.all(np.isfinite(scores)):
        raise ValueError("run_fn returned a non-finite score; scores must be finite to be ranked.")
    best = int(np.argmax(scores))
    out = jax.tree_util.tree_map(lambda a: a[best], outputs)
    return SelectionResult(int(np.asarray(idx)[best]), float(scores[best]), out, eps, float(delta), True,
                           f"random_stopping(mean={law.mean}, shape={law.shape})")


def select_nonprivate(scores: Sequence[float] | np.ndarray, outputs: Any = None) -> SelectionResult:
    """Arg-max of every candidate's score (one score per grid point), labelled not accounted: the
    selection's own spend is not bounded (``epsilon = inf``)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}.")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite.")
    best = int(np.argmax(s))
    out = None if outputs is None else jax.tree_util.tree_map(lambda a: a[best], outputs)
    return SelectionResult(best, float(s[best]), out, float("inf"), 0.0, False, "nonprivate_argmax")
