"""Sweep results: ``SweepResult`` (tidy frame, per-point summary) and ``summarize`` (Student-t intervals)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dpfair_jax import _validation as V


def _t_quantile(confidence: float, dof: np.ndarray) -> np.ndarray:
    from scipy import stats

    with np.errstate(invalid="ignore"):
        return stats.t.ppf(0.5 + confidence / 2.0, np.where(dof >= 1, dof, np.nan))


def summarize(samples: Any, confidence: float = 0.95, axis: int = 0) -> dict[str, np.ndarray]:
    """Mean, sd (ddof=1), se, and the Student-t interval ``mean +- t_{(1+c)/2, n-1} se`` over ``axis``.

    NaN entries are ignored (``count`` is the number of the others); with ``count < 2``, sd, se and the interval
    are NaN.
    """
    c = V.as_float("confidence", confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    x = np.asarray(samples, dtype=np.float64)
    ok = ~np.isnan(x)
    n = ok.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, x, 0.0).sum(axis=axis) / n
        dev = np.where(ok, x - np.expand_dims(mean, axis), 0.0)
        sd = np.sqrt((dev**2).sum(axis=axis) / np.where(n >= 2, n - 1, np.nan))
        se = sd / np.sqrt(n)
    half = _t_quantile(c, n - 1) * se
    return {"count": n, "mean": mean, "sd": sd, "se": se, "ci_low": mean - half, "ci_high": mean + half}


def _metric_columns(name: str, arr: np.ndarray, lead: int) -> list[tuple[str, np.ndarray]]:
    """Split a [lead..., *shape] metric into (column name, [lead...]) pieces: ``name[i,j]``."""
    shape = arr.shape[lead:]
    if not shape:
        return [(name, arr)]
    cols = []
    for idx in np.ndindex(*shape):
        cols.append((f"{name}[{','.join(map(str, idx))}]", arr[(Ellipsis,) + idx]))
    return cols


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Result of ``sweep``.

    Attributes:
      values: metric name -> array ``[*grid_shape, num_trials, *metric_shape]``.
      grid: hyperparameter name -> 1-D NumPy array of its values (axis order of ``values``).
      num_trials: trials per grid point.

    Array-valued metrics are *expanded*: a metric ``w`` of shape ``(2,)`` gives columns ``w[0]``
    and ``w[1]`` in ``to_frame()`` and metrics ``w[0]``, ``w[1]`` in ``summary()``.
    """

    values: dict[str, Any]
    grid: dict[str, np.ndarray]
    num_trials: int

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.grid.values())

    def _columns(self) -> list[tuple[str, np.ndarray]]:
        lead = len(self.grid) + 1
        cols: list[tuple[str, np.ndarray]] = []
        for name, v in self.values.items():
            cols.extend(_metric_columns(name, np.asarray(v), lead))
        return cols

    def to_frame(self):
        """Tidy ``pandas.DataFrame``: one row per grid point and trial (row-major over the grid, trial
        fastest); columns: the grid names, ``trial``, then the metrics (array metrics expanded)."""
        import pandas as pd

        shape = self.grid_shape + (self.num_trials,)
        index = np.indices(shape).reshape(len(shape), -1)
        data: dict[str, np.ndarray] = {}
        for d, (name, vals) in enumerate(self.grid.items()):
            data[name] = vals[index[d]]
        data["trial"] = index[-1]
        for name, arr in self._columns():
            data[name] = arr.reshape(-1)
        return pd.DataFrame(data)

    def summary(self, confidence: float = 0.95):
        """Per grid point and metric: ``count, mean, sd, se, ci_low, ci_high`` (Student-t interval at
        ``confidence``) as a long ``pandas.DataFrame`` with columns grid names, ``metric``, stats."""
        import pandas as pd

        k = len(self.grid)
        cols = self._columns()
        pts = np.indices(self.grid_shape).reshape(k, -1)
        frames = []
        for name, arr in cols:
            st = summarize(arr, confidence, axis=k)
            row: dict[str, Any] = {g: vals[pts[d]] for d, (g, vals) in enumerate(self.grid.items())}
            row["metric"] = name
            row.update({s: np.reshape(v, -1) for s, v in st.items()})
            frames.append(pd.DataFrame(row))
        return pd.concat(frames, ignore_index=True)
