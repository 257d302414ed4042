"""Aggregation over seeds for the figures: :func:`summarize` (mean, sd, se and the Student-t interval
per group) and the bands drawn around a mean, clipped to the quantity's valid range."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpfair_jax.runner.plots.style import _check_columns


def summarize(df: Any, by: Sequence[str], y: str, *, confidence: float = 0.95) -> Any:
    """Mean, sd, n, se and the Student-t ``confidence`` interval of ``y`` per ``by`` group.

    Returns columns ``[*by, "mean", "sd", "n", "se", "ci_low", "ci_high"]`` (sd/se/ci are NaN for
    a group of one). NaN values of ``y`` are ignored.
    """
    from scipy import special  # stdtrit: the t quantile, without importing scipy.stats (slow)

    by = list(by)
    _check_columns(df, y=y, **{f"by[{i}]": c for i, c in enumerate(by)})
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    if by:
        g = df.groupby(by, sort=True, dropna=False)[y]
        out = g.agg(mean="mean", sd="std", n="count").reset_index()
    else:
        col = df[y]
        out = __import__("pandas").DataFrame({"mean": [col.mean()], "sd": [col.std()], "n": [col.count()]})
    n = out["n"].to_numpy(dtype=float)
    out["se"] = out["sd"] / np.sqrt(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        tq = np.where(n > 1, special.stdtrit(np.maximum(n - 1, 1), 0.5 + confidence / 2), np.nan)
    out["ci_low"] = out["mean"] - tq * out["se"]
    out["ci_high"] = out["mean"] + tq * out["se"]
    return out


_BAND_LABEL = {"ci95": "95% CI of the mean", "se": "mean +- 1 SE", "sd": "mean +- 1 SD"}


def _band(stats_df: Any, band: str | None, bounds: tuple[float, float] = (-np.inf, np.inf),
          log: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """The band's (low, high), clipped to ``bounds`` (and to positive values on a log axis)."""
    m = stats_df["mean"].to_numpy(dtype=float)
    if band is None:
        return None
    if band == "ci95":
        lo, hi = stats_df["ci_low"].to_numpy(dtype=float), stats_df["ci_high"].to_numpy(dtype=float)
    else:
        width = stats_df["se" if band == "se" else "sd"].to_numpy(dtype=float)
        lo, hi = m - width, m + width
    lo, hi = np.clip(lo, *bounds), np.clip(hi, *bounds)
    if log:  # a log axis cannot show a non-positive bound: stop the band at the smallest positive mean
        floor = np.nanmin(m[m > 0]) / 10 if np.any(m > 0) else np.nan
        lo = np.where(lo > 0, lo, floor)
    return lo, hi


def _bounds(values: Any, bounds: tuple[float | None, float | None] | str | None) -> tuple[float, float]:
    """``bounds="auto"``: ``[0, inf)`` when every value is >= 0, else unbounded; ``None``: unbounded."""
    if bounds is None:
        return -np.inf, np.inf
    if isinstance(bounds, str):
        if bounds != "auto":
            raise ValueError(f"bounds must be 'auto', None or (low, high), got {bounds!r}.")
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        return (0.0 if v.size and v.min() >= 0 else -np.inf), np.inf
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be 'auto', None or (low, high), got {bounds!r}.") from None
    low = -np.inf if low is None else float(low)
    high = np.inf if high is None else float(high)
    if not low < high:
        raise ValueError(f"bounds must have low < high, got {bounds!r}.")
    return low, high
