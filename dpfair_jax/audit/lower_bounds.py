"""Epsilon lower bounds from the outcomes of distinguishing attacks (host side, NumPy/SciPy).

If a mechanism M is (epsilon, delta)-DP, every test that guesses "canary in" from M's output obeys
``TPR <= e^eps FPR + delta`` and ``TNR <= e^eps FNR + delta`` (Kairouz, Oh, Viswanath 2015). With
one-sided Clopper-Pearson bounds on the rates, measured on independent trials,

    eps_lb = max( log((TPR_low - delta) / FPR_high), log((TNR_low - delta) / FNR_high) )

is a lower bound on the true epsilon with probability >= ``confidence`` (Jagielski, Ullman,
Oprea 2020; Nasr et al. 2021). ``TNR_low = 1 - FPR_high`` and ``FNR_high = 1 - TPR_low``, so the
whole bound rests on two one-sided intervals, each at level ``1 - (1 - confidence)/2`` (union
bound).

Choosing the threshold on the same trials that measure it would bias the bound upwards. Two valid
ways are offered by :func:`epsilon_lower_bound_from_scores`:

* ``selection="split"`` (default): a random half of each world's trials picks the threshold, the
  other half measures it (the bound is valid because the measuring half is independent of the
  choice);
* ``selection="bonferroni"``: a threshold set fixed in advance, each threshold's bound at level
  ``1 - (1 - confidence)/len(thresholds)``, and the maximum reported.

:func:`one_run_epsilon_lower_bound` implements the one-run audit of Steinke, Nasr and Jagielski
(NeurIPS 2023, "Privacy auditing with one (1) training run", Thm. 3 / their Algorithm 3 p-value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import stats

from dpfair_jax import _validation as V

__all__ = [
    "clopper_pearson",
    "epsilon_lower_bound_from_counts",
    "epsilon_lower_bound_from_scores",
    "ScoreBound",
    "one_run_p_value",
    "one_run_epsilon_lower_bound",
    "one_run_audit_from_scores",
]


def _check_confidence(confidence: float) -> float:
    c = V.as_float("confidence", confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), e.g. 0.95; got {confidence!r}.")
    return c


def _check_delta0(delta: float) -> float:
    d = V.as_float("delta", delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"delta must lie in [0, 1) (0 for pure DP), got {delta!r}.")
    return d


def clopper_pearson(
    successes: Any, trials: Any, confidence: float = 0.95, *, side: str = "two-sided"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper-Pearson) binomial confidence bounds ``(low, high)`` for ``successes/trials``.

    ``side="two-sided"``: each tail ``(1 - confidence)/2``; ``"lower"``: only the lower bound at
    ``confidence`` (high = 1); ``"upper"``: only the upper bound (low = 0). Vectorised over
    arrays of counts; ``low = 0`` at 0 successes and ``high = 1`` at ``trials`` successes.
    """
    c = _check_confidence(confidence)
    V.check_choice("side", side, ("two-sided", "lower", "upper"))
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n) or np.any(k != np.round(k)) or np.any(n != np.round(n)):
        raise ValueError("successes and trials must be integer counts with 0 <= successes <= trials, trials >= 1.")
    alpha = 1.0 - c
    tail = alpha / 2.0 if side == "two-sided" else alpha
    with np.errstate(all="ignore"):
        low = np.where(k > 0, stats.beta.ppf(tail, np.maximum(k, 1e-300), n - k + 1.0), 0.0)
        high = np.where(k < n, stats.beta.ppf(1.0 - tail, k + 1.0, np.maximum(n - k, 1e-300)), 1.0)
    if side == "lower":
        high = np.ones_like(high)
    elif side == "upper":
        low = np.zeros_like(low)
    return low, high


def _eps_from_bounds(tpr_low: np.ndarray, fpr_high: np.ndarray, delta: float) -> np.ndarray:
    tnr_low, fnr_high = 1.0 - fpr_high, 1.0 - tpr_low
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((tpr_low - delta > 0) & (fpr_high > 0), np.log((tpr_low - delta) / fpr_high), 0.0)
        b = np.where((tnr_low - delta > 0) & (fnr_high > 0), np.log((tnr_low - delta) / fnr_high), 0.0)
    return np.maximum(np.maximum(a, b), 0.0)


def epsilon_lower_bound_from_counts(
    tp: Any, fn: Any, fp: Any, tn: Any, delta: float = 0.0, confidence: float = 0.95
) -> np.ndarray | float:
    """Epsilon lower bound from one test's confusion counts (vectorised over arrays of counts).

    ``tp``/``fn``: trials *with* the canary guessed in/out; ``fp``/``tn``: trials *without* it
    guessed in/out. Uses one-sided Clopper-Pearson bounds ``TPR_low`` and ``FPR_high`` at level
    ``1 - (1 - confidence)/2`` each, so the returned bound (floored at 0) holds with probability
    >= ``confidence`` for a test fixed before the trials were drawn.
    """
    c = _check_confidence(confidence)
    d = _check_delta0(delta)
    tp, fn, fp, tn = (np.asarray(a) for a in (tp, fn, fp, tn))
    one_sided = 1.0 - (1.0 - c) / 2.0
    tpr_low, _ = clopper_pearson(tp, tp + fn, one_sided, side="lower")
    _, fpr_high = clopper_pearson(fp, fp + tn, one_sided, side="upper")
    out = _eps_from_bounds(tpr_low, fpr_high, d)
    return float(out) if out.ndim == 0 else out


def _counts_at(thresholds: np.ndarray, s_in: np.ndarray, s_out: np.ndarray):
    """Guess "in" when score >= threshold: (tp, fn, fp, tn) for each threshold."""
    si, so = np.sort(s_in), np.sort(s_out)
    tp = si.size - np.searchsorted(si, thresholds, side="left")
    fp = so.size - np.searchsorted(so, thresholds, side="left")
    return tp, si.size - tp, fp, so.size - fp


class ScoreBound(NamedTuple):
    """Result of :func:`epsilon_lower_bound_from_scores`."""

    epsilon_lower_bound: float
    threshold: float
    selection: str
    confidence: float
    trials_used: int  # trials (both worlds) that measured the bound


def epsilon_lower_bound_from_scores(
    scores_in: Any,
    scores_out: Any,
    delta: float = 0.0,
    confidence: float = 0.95,
    *,
    selection: str = "split",
    thresholds: Sequence[float] | None = None,
    split_seed: int = 0,
) -> ScoreBound:
    """Epsilon lower bound from attack scores (higher = "canary in") of both worlds.

    ``selection="split"``: the trials of each world are split at random (``split_seed``) in two
    halves; the first half picks, among its own score values, the threshold with the largest
    bound, and the second half measures that threshold's bound (valid at ``confidence``).
    ``selection="bonferroni"``: ``thresholds`` must be given (fixed before seeing the scores);
    all trials measure every threshold at level ``1 - (1 - confidence)/len(thresholds)``, and the
    largest bound is returned (valid at ``confidence`` by the union bound).
    """
    s_in = np.asarray(scores_in, dtype=np.float64).ravel()
    s_out = np.asarray(scores_out, dtype=np.float64).ravel()
    if s_in.size < 2 or s_out.size < 2:
        raise ValueError("scores_in and scores_out need at least 2 trials each.")
    V.check_finite("scores_in", s_in)
    V.check_finite("scores_out", s_out)
    c = _check_confidence(confidence)
    d = _check_delta0(delta)
    V.check_choice("selection", selection, ("split", "bonferroni"))
    if selection == "bonferroni":
        if thresholds is None:
            raise ValueError(
                "selection='bonferroni' needs thresholds fixed in advance (data-chosen thresholds "
                "void the correction); pass thresholds=... or use selection='split'."
            )
        th = np.asarray(thresholds, dtype=np.float64).ravel()
        if th.size == 0:
            raise ValueError("thresholds must not be empty.")
        level = 1.0 - (1.0 - c) / th.size
        eps = epsilon_lower_bound_from_counts(*_counts_at(th, s_in, s_out), delta=d, confidence=level)
        eps = np.atleast_1d(eps)
        j = int(np.argmax(eps))
        return ScoreBound(float(eps[j]), float(th[j]), selection, c, s_in.size + s_out.size)
    if thresholds is not None:
        raise ValueError("thresholds are only used with selection='bonferroni'.")
    rng = np.random.default_rng(split_seed)
    pi, po = rng.permutation(s_in.size), rng.permutation(s_out.size)
    hi_, ho_ = s_in.size // 2, s_out.size // 2
    sel_in, ev_in = s_in[pi[:hi_]], s_in[pi[hi_:]]
    sel_out, ev_out = s_out[po[:ho_]], s_out[po[ho_:]]
    cand = np.unique(np.concatenate([sel_in, sel_out]))
    eps_sel = np.atleast_1d(
        epsilon_lower_bound_from_counts(*_counts_at(cand, sel_in, sel_out), delta=d, confidence=c)
    )
    # ties: prefer the middle of the best plateau (more robust than its edge)
    best = np.flatnonzero(eps_sel == eps_sel.max())
    t = float(cand[best[best.size // 2]])
    eps = epsilon_lower_bound_from_counts(*_counts_at(np.array([t]), ev_in, ev_out), delta=d, confidence=c)
    return ScoreBound(float(np.atleast_1d(eps)[0]), t, selection, c, ev_in.size + ev_out.size)


# ----------------------------------------------------------------------------- one-run auditing


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P-value of ``>= v`` correct guesses out of ``r`` under an (epsilon, delta)-DP null.

    Steinke, Nasr, Jagielski (2023), Thm. 3 and their p-value code: ``m`` canaries are each
    included independently with probability 1/2; the auditor guesses on ``r`` of them and is
    right ``v`` times. With ``q = e^eps / (1 + e^eps)``,
    ``p = P[Bin(r, q) >= v] + 2 m delta max_{1<=i<=v} P[v - i <= Bin(r, q) < v] / i``.
    """
    m = V.check_int("m", m, minimum=1)
    r = V.check_int("r", r, minimum=0)
    v = V.check_int("v", v, minimum=0)
    if not v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}.")
    e = V.as_float("epsilon", epsilon)
    if e < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}.")
    d = _check_delta0(delta)
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-e))
    beta = float(stats.binom.sf(v - 1, r, q))
    alpha = 0.0
    if d > 0:
        pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], P[Bin = v-2], ...
        alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(1.0, beta + alpha * d * 2.0 * m)


def one_run_epsilon_lower_bound(
    m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95
) -> float:
    """Largest epsilon rejected at level ``1 - confidence`` by :func:`one_run_p_value` (bisection).

    The mechanism is not (eps, delta)-DP for any ``eps`` below the returned value, with
    probability >= ``confidence`` over the canaries' inclusion coins (Steinke et al. 2023).
    ``r`` and the guessing rule must be fixed before looking at the inclusion coins.
    """
    c = _check_confidence(confidence)
    p = 1.0 - c
    if one_run_p_value(m, r, v, 0.0, delta) >= p:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < p:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return float(lo)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if one_run_p_value(m, r, v, mid, delta) < p:
            lo = mid
        else:
            hi = mid
    return float(lo)


def one_run_audit_from_scores(
    scores: Any, included: Any, *, k_pos: int, k_neg: int, delta: float = 0.0, confidence: float = 0.95
) -> tuple[float, int, int]:
    """One-run audit: guess "in" for the ``k_pos`` highest scores, "out" for the ``k_neg`` lowest.

    ``scores[i]`` is the attack score of canary ``i`` and ``included[i]`` its inclusion coin
    (Bernoulli(1/2), drawn independently of everything the guesser chose). Returns
    ``(epsilon_lower_bound, r, v)`` with ``r = k_pos + k_neg`` guesses and ``v`` correct.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included).ravel().astype(bool)
    if s.size != inc.size:
        raise ValueError(f"scores and included must have the same length, got {s.size} and {inc.size}.")
    V.check_finite("scores", s)
    k_pos = V.check_int("k_pos", k_pos, minimum=0)
    k_neg = V.check_int("k_neg", k_neg, minimum=0)
    if k_pos + k_neg > s.size:
        raise ValueError(f"k_pos + k_neg = {k_pos + k_neg} exceeds the {s.size} canaries.")
    order = np.argsort(s, kind="stable")
    v = int(np.sum(inc[order[s.size - k_pos:]])) if k_pos else 0
    v += int(np.sum(~inc[order[:k_neg]]))
    r = k_pos + k_neg
    return one_run_epsilon_lower_bound(s.size, r, v, delta, confidence), r, v
