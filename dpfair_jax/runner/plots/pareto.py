"""Error-violation frontiers: the Pareto set per method (:func:`pareto_mask`), one panel per epsilon
(:func:`frontier`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpfair_jax.runner.plots.style import LABELS, STYLE, _check_columns, _fmt, _levels, label, new_figure


def pareto_mask(error: Any, violation: Any) -> np.ndarray:
    """Which points are on the Pareto set (lower error and lower violation are better): a point is
    kept unless another has error and violation both <= its own and one strictly lower. NaN
    points are never kept."""
    e, v = np.asarray(error, dtype=float), np.asarray(violation, dtype=float)
    if e.shape != v.shape or e.ndim != 1:
        raise ValueError(f"error and violation must be 1-d of one length, got {e.shape} and {v.shape}.")
    ok = np.isfinite(e) & np.isfinite(v)
    le = (e[None, :] <= e[:, None]) & (v[None, :] <= v[:, None])  # [i, j]: j at least as good as i
    lt = (e[None, :] < e[:, None]) | (v[None, :] < v[:, None])
    dominated = np.any(le & lt & ok[None, :], axis=1)
    return ok & ~dominated


def _flag(table: Any, column: str | None, invert: bool = False) -> np.ndarray:
    """A boolean per row from ``column`` (a bool or a fraction > 0); all False when absent."""
    if column is None or column not in table.columns:
        return np.zeros(len(table), dtype=bool)
    vals = table[column].to_numpy()
    out = np.asarray(vals, dtype=float) > 0 if vals.dtype != bool else vals.astype(bool)
    return ~out if invert else out


def frontier(
    table: Any,
    *,
    method: str = "method",
    epsilon: str = "epsilon",
    knob: str = "lam",
    error_label: str = "test error",
    violation_label: str = "fairness violation",
    unit: str | None = None,
    title: str | None = None,
    confidence: float = 0.95,
    error_bounds: tuple[float, float] = (0.0, 1.0),
    violation_bounds: tuple[float, float] = (0.0, 1.0),
    degenerate: str | None = "degenerate",
    converged: str | None = "converged",
    max_panel_cols: int = 3,
) -> Any:
    """Error-violation frontiers, one panel per epsilon (a small-multiples grid when there are many).

    ``table`` has one row per (method, epsilon, knob) with ``error_mean/_lo/_hi`` and
    ``violation_mean/_lo/_hi`` (:func:`dpfair_jax.fairness.frontier.frontier_table`). Each method's
    Pareto set (:func:`pareto_mask`; its other points faint) is drawn left to right with its
    ``confidence`` violation band, both intervals clipped to the metric's range (``error_bounds``,
    ``violation_bounds``: a DP/EO violation and an error rate lie in [0, 1]). Points flagged in
    column ``degenerate`` (True or a fraction > 0) get a black cross and those with ``converged``
    False a hollow square, each with its legend entry; the knob is written at the two ends of each
    frontier only. Method names go through :func:`label`; the legend sits below the panels.
    """
    _check_frontier(table, [method, epsilon, knob], confidence, error_bounds, violation_bounds)
    import matplotlib

    eps_values = sorted(table[epsilon].astype(float).unique(), key=lambda v: (math.isinf(v), v))
    methods = _levels(table, method)
    ncols = min(len(eps_values), max_panel_cols)
    nrows = -(-len(eps_values) // ncols)
    fig, axes = new_figure(ncols, nrows, panel_size=(3.4, 2.8), sharey=True)
    for ax in axes[len(eps_values):]:
        ax.set_visible(False)
    handles: dict[str, Any] = {}
    degen_all = _flag(table, degenerate)
    unconv_all = _flag(table, converged, invert=True)
    bounds = (error_bounds, violation_bounds)
    with matplotlib.rc_context(STYLE):
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        marks = "osD^vP*X"
        for ax, eps in zip(axes, eps_values):
            in_panel = np.isclose(table[epsilon].astype(float).to_numpy(), eps) | (
                np.isinf(eps) & np.isinf(table[epsilon].astype(float).to_numpy()))
            for j, m in enumerate(methods):
                rows = in_panel & (table[method] == m).to_numpy()
                if not rows.any():
                    continue
                _method_frontier(ax, table[rows], label(m), colors[j % len(colors)], marks[j % len(marks)], knob,
                                 bounds, degen_all[rows], unconv_all[rows], handles)
            _panel_labels(ax, eps, unit, error_label, violation_label, bounds)
        if handles:
            _frontier_legend(fig, handles, confidence, LABELS.get(knob, knob))
        if title:
            fig.suptitle(title)
    return fig


def _check_frontier(table: Any, keys: list[str], confidence: float, error_bounds: tuple[float, float],
                    violation_bounds: tuple[float, float]) -> None:
    """The columns :func:`frontier` reads, ``confidence`` in (0, 1) and each bound ``(low, high)``."""
    need = keys + ["error_mean", "error_lo", "error_hi", "violation_mean", "violation_lo", "violation_hi"]
    _check_columns(table, **{f"column {c}": c for c in need})
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    for name, b in (("error_bounds", error_bounds), ("violation_bounds", violation_bounds)):
        if len(b) != 2 or not b[0] < b[1]:
            raise ValueError(f"{name} must be (low, high) with low < high, got {b!r}.")


def _method_frontier(ax: Any, sub: Any, name: str, color: str, mark: str, knob: str,
                     bounds: tuple[tuple[float, float], tuple[float, float]], dg: np.ndarray, uc: np.ndarray,
                     handles: dict[str, Any]) -> None:
    """One method's rows ``sub`` on one panel: dominated points faint, the Pareto set joined in error
    order with its violation band and error bars (clipped to ``bounds``: error, violation), the knob
    at the frontier's two ends, degenerate (``dg``) and unconverged (``uc``) points marked."""
    error_bounds, violation_bounds = bounds
    e = sub["error_mean"].to_numpy(dtype=float)
    v = sub["violation_mean"].to_numpy(dtype=float)
    keep = pareto_mask(e, v)
    ax.plot(e[~keep], v[~keep], linestyle="none", marker=mark, color=color, alpha=0.3, markersize=3)
    order = np.argsort(e[keep])
    ek, vk = e[keep][order], v[keep][order]
    vlo = np.clip(sub["violation_lo"].to_numpy(dtype=float)[keep][order], *violation_bounds)
    vhi = np.clip(sub["violation_hi"].to_numpy(dtype=float)[keep][order], *violation_bounds)
    elo = np.clip(sub["error_lo"].to_numpy(dtype=float)[keep][order], *error_bounds)
    ehi = np.clip(sub["error_hi"].to_numpy(dtype=float)[keep][order], *error_bounds)
    (line,) = ax.plot(ek, vk, marker=mark, color=color, drawstyle="default")
    handles.setdefault(name, line)
    ax.fill_between(ek, np.nan_to_num(vlo, nan=vk), np.nan_to_num(vhi, nan=vk), color=color,
                    alpha=0.18, linewidth=0)
    xerr = np.clip(np.nan_to_num(np.vstack([ek - elo, ehi - ek]), nan=0.0), 0, None)
    ax.errorbar(ek, vk, xerr=xerr, fmt="none", ecolor=color, elinewidth=0.8, capsize=0, alpha=0.7)
    knobs = sub[knob].to_numpy()[keep][order]
    for idx in sorted({0, len(ek) - 1}) if len(ek) else ():
        ax.annotate(f"{_fmt('', knobs[idx])[1:]}", (ek[idx], vk[idx]), textcoords="offset points",
                    xytext=(3, 3), fontsize=6, color=color)
    if dg.any():
        handles.setdefault("degenerate (constant or base-rate predictions)", ax.plot(
            e[dg], v[dg], linestyle="none", marker="x", color="black", markersize=6)[0])
    if uc.any():
        handles.setdefault("not converged", ax.plot(
            e[uc], v[uc], linestyle="none", marker="s", markerfacecolor="none",
            markeredgecolor="black", markersize=7)[0])


def _panel_labels(ax: Any, eps: float, unit: str | None, error_label: str, violation_label: str,
                  bounds: tuple[tuple[float, float], tuple[float, float]]) -> None:
    """A panel's title (its epsilon and the privacy unit), axis labels and limits within ``bounds``."""
    error_bounds, violation_bounds = bounds
    head = "non-private" if math.isinf(eps) else f"epsilon = {eps:g}"
    ax.set_title(head if unit is None else f"{head}, {unit} unit")
    ax.set_xlabel(f"{error_label} (mean)")
    ax.set_ylabel(f"{violation_label} (mean)")
    ax.set_ylim(bottom=violation_bounds[0])
    ax.set_xlim(left=max(error_bounds[0], ax.get_xlim()[0]), right=min(error_bounds[1], ax.get_xlim()[1]))


def _frontier_legend(fig: Any, handles: dict[str, Any], confidence: float, knob_name: str) -> None:
    """The legend below the panels: the methods, the marks, what the band and bars are and what the numbers are."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles[f"band, bars: {confidence:.0%} CI (violation, error)"] = Patch(color="0.5", alpha=0.3, linewidth=0)
    handles[f"faint: dominated; numbers: {knob_name}"] = Line2D(
        [], [], linestyle="none", marker="o", color="0.5", alpha=0.3)
    width, height = fig.get_size_inches()
    ncols = 1 if width < 4 else 2 if width < 9 else 3
    rows = -(-len(handles) // ncols) + 1
    fig.set_size_inches(width, height + 0.2 * rows + 0.15)  # room below the panels
    fig.legend(list(handles.values()), list(handles), title="method (Pareto set)",
               loc="outside lower center", ncols=ncols)
