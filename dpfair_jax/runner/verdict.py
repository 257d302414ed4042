"""One verdict rule for every claim: an interval set against the paper's own effect, with power.

A claim of a paper is decided by the interval of its measured effect, never by a point estimate,
and a study too small to see the paper's effect says so. Every effect is signed so that a positive
value is on the paper's side (e.g. "DP-FERMI's violation is lower than PF-LD's": the effect is
PF-LD's violation minus DP-FERMI's, paired over replicates).

Directional claims (:func:`directional_verdict`; the paper says the effect is positive, and its
own number ``m > 0`` is the effect it reports):

* **holds** when the ``1 - alpha / comparisons`` interval lies above 0 (noted when it also lies
  wholly below ``m``: the effect is real but significantly smaller than the paper's);
* **fails** when the interval lies below 0 (the opposite direction, significantly), or when it
  contains 0, lies wholly below ``m`` and the study had the power to see ``m`` (its minimum
  detectable effect is at most ``m``): the paper's effect is ruled out and none is detected;
* **underpowered** otherwise: the interval contains 0 and the minimum detectable effect exceeds
  ``m`` (both numbers are recorded), or the realized interval is too wide to rule ``m`` out.

Quantitative claims (:func:`range_verdict`; the paper states a range ``[low, high]`` for the
effect): **fails** when the interval lies wholly outside the range; **holds** when it meets a range
on one side of 0 and excludes 0 on that side, or, for a range around 0 ("no difference"), lies
inside it (an equivalence test); **underpowered** otherwise (with the detectable effect).

The minimum detectable effect of a two-sided ``t`` test at level ``alpha / comparisons`` (Bonferroni
over the claim's comparisons) with power ``power`` is ``(t_{1 - alpha/(2k), df} + t_{power, df}) * se``
(:func:`minimum_detectable_effect`); :func:`replicates_needed` inverts it for a paired design from a
pilot's standard deviation, which is how a study asks for the replicates a claim needs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "VERDICT_STATUSES",
    "PaperEffect",
    "Verdict",
    "Estimate",
    "estimate_from_replicates",
    "minimum_detectable_effect",
    "replicates_needed",
    "directional_verdict",
    "range_verdict",
]

#: The statuses a verdict can give (a subset of ``context.CLAIM_STATUSES``).
VERDICT_STATUSES = ("holds", "fails", "underpowered")


def _finite(name: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}.") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {out}.")
    return out


def _check_probability(name: str, value: Any) -> float:
    out = _finite(name, value)
    if not 0.0 < out < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {out}.")
    return out


def _check_comparisons(comparisons: Any) -> int:
    if isinstance(comparisons, bool) or not isinstance(comparisons, (int, np.integer)) or comparisons < 1:
        raise ValueError(f"comparisons must be an integer >= 1, got {comparisons!r}.")
    return int(comparisons)


@dataclasses.dataclass(frozen=True)
class PaperEffect:
    """The paper's own effect for a claim, in the units of the measured effect, signed so that the
    paper's direction is positive.

    ``value``: the effect or margin the paper reports (``> 0``), or ``None`` when it states only a
    direction (then the study cannot be judged underpowered against it and a claim that finds no
    effect is underpowered with the detectable effect recorded). ``low`` / ``high``: a stated range
    (quantitative claims). ``source``: where the number comes from, quoted (figure, table,
    equation, page).
    """

    source: str
    value: float | None = None
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("PaperEffect.source must say where the paper's number comes from.")
        if self.value is not None:
            v = _finite("PaperEffect.value", self.value)
            if v <= 0:
                raise ValueError(f"PaperEffect.value must be > 0 (signed on the paper's side), got {v}.")
        if (self.low is None) != (self.high is None):
            raise ValueError("PaperEffect.low and high are given together (a stated range).")
        if self.low is not None:
            lo, hi = _finite("PaperEffect.low", self.low), _finite("PaperEffect.high", self.high)
            if not lo <= hi:
                raise ValueError(f"PaperEffect range must have low <= high, got [{lo}, {hi}].")

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "source": self.source}


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A measured effect: its point estimate, standard error and degrees of freedom (``inf`` for a
    normal interval, e.g. from a bootstrap standard error), and the number of replicates."""

    value: float
    se: float
    df: float
    replicates: int | None = None

    def __post_init__(self) -> None:
        _finite("Estimate.value", self.value)
        se = _finite("Estimate.se", self.se)
        if se < 0:
            raise ValueError(f"Estimate.se must be >= 0, got {se}.")
        df = float(self.df)
        if not df > 0:
            raise ValueError(f"Estimate.df must be > 0 (inf for a normal interval), got {df}.")

    def interval(self, level: float) -> tuple[float, float]:
        """The two-sided ``level`` interval ``value +- t_{(1+level)/2, df} se``."""
        half = _quantile((1.0 + level) / 2.0, self.df) * self.se
        return (self.value - half, self.value + half)


def _quantile(p: float, df: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(p)) if math.isinf(df) else float(stats.t.ppf(p, df))


def estimate_from_replicates(values: Sequence[float] | np.ndarray) -> Estimate:
    """The mean of per-replicate effects (paired differences: the same splits and keys for both
    methods), its standard error ``sd / sqrt(R)`` and ``R - 1`` degrees of freedom."""
    x = np.asarray(values, np.float64).reshape(-1)
    if x.size < 2:
        raise ValueError(f"an interval needs at least 2 replicates, got {x.size}.")
    if not np.all(np.isfinite(x)):
        raise ValueError("replicate effects must be finite (a diverged or degenerate run must be "
                         "reported as such, not averaged).")
    return Estimate(float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)), float(x.size - 1), int(x.size))


def minimum_detectable_effect(se: float, df: float, *, alpha: float = 0.05, power: float = 0.8,
                              comparisons: int = 1) -> float:
    """``(t_{1 - alpha/(2k), df} + t_{power, df}) * se``: the smallest true effect that a two-sided
    test at level ``alpha / k`` (``k = comparisons``, Bonferroni) detects with probability
    ``power`` (normal approximation to the noncentral ``t``; exact as ``df -> inf``)."""
    alpha = _check_probability("alpha", alpha)
    power = _check_probability("power", power)
    k = _check_comparisons(comparisons)
    se = _finite("se", se)
    return (_quantile(1.0 - alpha / (2.0 * k), df) + _quantile(power, df)) * se


def replicates_needed(sd: float, margin: float, *, alpha: float = 0.05, power: float = 0.8,
                      comparisons: int = 1, max_replicates: int = 10_000) -> int | None:
    """The fewest paired replicates ``R >= 2`` whose detectable effect
    ``minimum_detectable_effect(sd / sqrt(R), R - 1, ...)`` is at most ``margin``, from a pilot's
    standard deviation ``sd`` of the per-replicate effect; ``None`` when more than
    ``max_replicates`` would be needed (a budget the study cannot meet)."""
    sd = _finite("sd", sd)
    margin = _finite("margin", margin)
    if sd < 0 or margin <= 0:
        raise ValueError(f"need sd >= 0 and margin > 0, got sd={sd}, margin={margin}.")
    if sd == 0:
        return 2

    def mde(r: int) -> float:
        return minimum_detectable_effect(sd / math.sqrt(r), r - 1, alpha=alpha, power=power,
                                         comparisons=comparisons)

    if mde(max_replicates) > margin:
        return None
    lo, hi = 2, max_replicates  # mde is decreasing in R
    if mde(lo) <= margin:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mde(mid) <= margin:
            hi = mid
        else:
            lo = mid
    return hi


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A claim's status with everything that decided it (what ``claims.json`` and REPORT.md show)."""

    status: str
    estimate: Estimate
    interval: tuple[float, float]
    level: float
    minimum_detectable_effect: float
    paper: PaperEffect
    comparisons: int
    alpha: float
    power: float
    reason: str | None
    note: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "holds"

    def as_measured(self) -> dict[str, Any]:
        """The ``measured`` record of a claim row (JSON-able)."""
        lo, hi = self.interval
        return {
            "effect": self.estimate.value,
            "ci": [lo, hi],
            "level": self.level,
            "se": self.estimate.se,
            "replicates": self.estimate.replicates,
            "mde": self.minimum_detectable_effect,
            "paper_effect": self.paper.as_dict(),
            "comparisons": self.comparisons,
            "alpha": self.alpha,
            "power": self.power,
            "note": self.note,
        }

    def summary(self) -> str:
        lo, hi = self.interval
        paper = (f"paper {self.paper.value:.4g}" if self.paper.value is not None else
                 f"paper [{self.paper.low:.4g}, {self.paper.high:.4g}]" if self.paper.low is not None else
                 "paper: direction only")
        return (f"{self.status}: effect {self.estimate.value:+.4g}, {100 * self.level:.4g}% CI "
                f"[{lo:+.4g}, {hi:+.4g}], detectable {self.minimum_detectable_effect:.4g}, {paper}")


def _common(estimate: Estimate, alpha: float, power: float, comparisons: int):
    if not isinstance(estimate, Estimate):
        raise ValueError(f"estimate must be an Estimate (see estimate_from_replicates), got {type(estimate).__name__}.")
    alpha = _check_probability("alpha", alpha)
    power = _check_probability("power", power)
    k = _check_comparisons(comparisons)
    level = 1.0 - alpha / k
    interval = estimate.interval(level)
    mde = minimum_detectable_effect(estimate.se, estimate.df, alpha=alpha, power=power, comparisons=k)
    return alpha, power, k, level, interval, mde


def directional_verdict(estimate: Estimate, paper: PaperEffect, *, alpha: float = 0.05, power: float = 0.8,
                        comparisons: int = 1) -> Verdict:
    """The status of a directional claim (module docstring): the effect, signed positive on the
    paper's side, against 0 and against the paper's own effect ``paper.value``."""
    alpha, power, k, level, (lo, hi), mde = _common(estimate, alpha, power, comparisons)
    m = paper.value
    fmt = f"{100 * level:.4g}% CI [{lo:+.4g}, {hi:+.4g}]"
    note = None
    if lo > 0:
        status, reason = "holds", None
        if m is not None and hi < m:
            note = f"the effect is significantly smaller than the paper's {m:.4g} ({fmt})"
    elif hi < 0:
        status = "fails"
        reason = f"the effect is significantly on the other side of the paper's ({fmt})"
    elif m is not None and hi < m and mde <= m:
        status = "fails"
        reason = (f"no effect detected and the paper's {m:.4g} is ruled out ({fmt}), at a detectable "
                  f"effect of {mde:.4g} <= the paper's")
    else:
        status = "underpowered"
        if m is None:
            reason = f"no effect detected ({fmt}); detectable effect {mde:.4g}, the paper states no size"
        elif mde > m:
            reason = (f"the detectable effect {mde:.4g} exceeds the paper's {m:.4g}: the study is too small "
                      f"to see it ({fmt})")
        else:
            reason = (f"the interval ({fmt}) contains both 0 and the paper's {m:.4g} (detectable effect "
                      f"{mde:.4g}): this run's spread was larger than planned")
    return Verdict(status, estimate, (lo, hi), level, mde, paper, k, alpha, power, reason, note)


def range_verdict(estimate: Estimate, paper: PaperEffect, *, alpha: float = 0.05, power: float = 0.8,
                  comparisons: int = 1) -> Verdict:
    """The status of a quantitative claim whose paper states the range ``[paper.low, paper.high]``
    for the effect (module docstring)."""
    if paper.low is None:
        raise ValueError("range_verdict needs a PaperEffect with a stated range (low, high).")
    alpha, power, k, level, (lo, hi), mde = _common(estimate, alpha, power, comparisons)
    a, b = float(paper.low), float(paper.high)
    fmt = f"{100 * level:.4g}% CI [{lo:+.4g}, {hi:+.4g}]"
    rng = f"[{a:.4g}, {b:.4g}]"
    if hi < a or lo > b:
        side = "below" if hi < a else "above"
        status, reason = "fails", f"the interval ({fmt}) lies wholly {side} the paper's range {rng}"
    elif a > 0 and lo > 0 or b < 0 and hi < 0:
        status, reason = "holds", None  # meets the range, and the effect's sign is established
    elif a <= 0 <= b and a <= lo and hi <= b:
        status, reason = "holds", None  # a range around 0 ("no difference"): an equivalence test
    else:
        status = "underpowered"
        what = "is not inside" if a <= 0 <= b else "also contains 0 while it meets"
        reason = f"the interval ({fmt}) {what} the paper's range {rng} (detectable effect {mde:.4g})"
    return Verdict(status, estimate, (lo, hi), level, mde, paper, k, alpha, power, reason)
