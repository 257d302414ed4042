"""Figures in the papers' style: tradeoff curves with confidence bands, error vs budget, bars.

All helpers take a tidy ``pandas.DataFrame`` (one row per grid point and seed), aggregate over
the rows that share ``(panel, hue, x)`` (the seeds), and draw the mean with a band. They build
``matplotlib.figure.Figure`` objects on the Agg canvas directly, so they neither need a display
nor change the pyplot backend of a notebook. Save with ``ctx.save_figure(fig, name)``.

Bands (``band=``): ``"ci95"`` (default) the 95% Student-t interval of the mean over seeds,
``"se"`` +- one standard error, ``"sd"`` +- one standard deviation, ``None`` no band. Bands and
error bars are clipped to the valid range of the quantity (``bounds=``; by default ``[0, 1]`` for
the rates of :data:`UNIT_RANGE`, such as an error rate or a DP/EO violation, else ``[0, inf)`` when
every value is non-negative), and on a log axis to positive values. Legend names go through
:func:`label` (:data:`LABELS`: internal names to the words a reader knows); :func:`frontier` draws
error-violation frontiers (the Pareto set per method), one panel per epsilon.

Every figure uses one font family (:data:`STYLE`, DejaVu Serif for text and mathematics; also
applied to figures drawn elsewhere by :func:`finish`, which ``ctx.save_figure`` calls), constrained
layout so labels do not overlap, and legends that name every series: each ``hue`` level, the band
(what interval, over how many seeds) and the reference line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FONT", "LABELS", "STYLE", "UNIT_RANGE", "error_vs_budget", "finish", "frontier", "grouped_bars",
           "is_public", "label", "legend_outside", "new_figure", "pareto_mask", "summarize", "tradeoff"]

#: The one place internal names (methods, estimators, variants, columns) become the words a figure's
#: legend, title or axis shows. Every figure helper passes hue levels through :func:`label`; a
#: study's own figure calls :func:`label` on each legend entry. Names not listed are shown as they
#: are, so a new internal (snake_case) name fails :func:`is_public` until it is listed here.
LABELS: dict[str, str] = {
    # paper 004 (DP-FERMI) and its baselines
    "dpfermi": "DP-FERMI", "dpsgd": "DP-SGD (lambda = 0)", "pfld": "PF-LD",
    "pfld_epoch": "PF-LD (Tran et al.)", "pfld_stochastic": "PF-LD, stochastic variant",
    "dp_violation": "DP violation", "eo_violation": "EO violation", "error": "test error",
    # paper 003 (stratified private means and synthesis)
    "coinpress": "COINPRESS", "strat": "StratCOINPRESS", "pub_strat": "StratCOINPRESS, public group sizes",
    "strat_add_remove": "StratCOINPRESS, add/remove", "reference_code": "authors' code (non-private)",
    "vanilla": "unstratified", "sex_race": "sex and race", "parity_error": "parity error",
    "dp_ratio": "DP ratio", "accuracy": "accuracy",
    # paper 000 (budget tailoring)
    "dpse": "DPSE", "dpnose": "DPNoSE (pooled)", "equal": "DPNoSE (equal)", "dpse_fair": "DPSE, fair",
    "equal_fair": "DPNoSE (equal), fair",
    # paper 002 (reductions)
    "exp_sampling": "Alg. 1 (exponential sampling)", "lopt_alg2": "Alg. 2 (private LOPT)",
    "frank_wolfe": "Frank-Wolfe (non-private)", "fairlearn_eg": "fairlearn EG (non-private)",
    "unconstrained": "unconstrained",
    # paper 001 (fairness lens)
    "standard": "global normalization", "group": "per-group normalization",
    # kit checks
    "K_label": "K", "eps_exact": "exact", "eps_pld": "PLD accountant", "eps_rdp": "RDP accountant",
    "eps_zcdp_cks": "zCDP conversion (Canonne et al.)", "lam": "lambda",
}

_SNAKE = __import__("re").compile(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b")


def label(name: Any) -> str:
    """The public label of an internal name (:data:`LABELS`); other values as text (``1.0`` -> ``1``)."""
    if isinstance(name, str):
        return LABELS.get(name, name)
    return _fmt("", name)[1:]


def is_public(text: str) -> bool:
    """Whether ``text`` (a legend entry, a title) uses only public words: no snake_case identifier
    and no internal name that :data:`LABELS` renames (unless that word is itself part of a label,
    as "group" is of "per-group normalization")."""
    import re

    if _SNAKE.search(text):
        return False
    public = {w for v in LABELS.values() for w in re.findall(r"[A-Za-z0-9]+", v)}
    internal = {k for k, v in LABELS.items() if k != v and k not in public}
    return not (set(re.findall(r"[A-Za-z0-9_]+", text)) & internal)


#: The one font family of every figure (ships with matplotlib, so it is the same on every machine).
FONT = "DejaVu Serif"

#: rc parameters applied to every figure (one serif family for text and mathematics, light grid,
#: no top/right spines).
STYLE: dict[str, Any] = {
    "font.family": "serif",
    "font.serif": [FONT],
    "mathtext.fontset": "dejavuserif",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linestyle": "-",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 4,
    "savefig.dpi": 150,
    "legend.title_fontsize": 8,
}

_BANDS = ("ci95", "se", "sd", None)

#: Columns whose values are rates or probabilities in [0, 1]: with ``bounds="auto"`` their bands
#: are clipped to [0, 1], not only at 0.
UNIT_RANGE = frozenset({"error", "test_error", "accuracy", "dp_violation", "eo_violation", "test_eo_gap",
                        "p_success", "p_success_vs_mixture", "parity_error"})


def legend_outside(ax: Any, **kwargs: Any) -> Any:
    """The axes' legend to the right of its panel, off the data (constrained layout makes room);
    ``kwargs`` go to ``ax.legend``. Returns the legend."""
    kwargs.setdefault("fontsize", 7)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def _check_columns(df: Any, **cols: Any) -> None:
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas.DataFrame, got {type(df).__name__}.")
    for arg, col in cols.items():
        if col is None:
            continue
        if col not in df.columns:
            raise ValueError(f"{arg}={col!r} is not a column of df; columns: {', '.join(map(str, df.columns))}.")


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


def _seeds_text(counts: Sequence[int]) -> str:
    counts = sorted({int(c) for c in counts if c > 0})
    if not counts:
        return ""
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f" over {n} seeds"


def finish(fig: Any) -> Any:
    """Give every text of ``fig`` the one font family (:data:`FONT`) and constrained layout when
    it has no layout engine, so figures drawn outside these helpers (``plt.subplots``, text added
    after :func:`new_figure`) match; returns ``fig``. ``ctx.save_figure`` calls it."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_fontfamily(STYLE["font.family"])
        text.set_fontname(FONT)
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")
    return fig


def _legend(fig: Any, axes: Sequence[Any], handles: list, labels: list, title: str | None,
            inside: bool = True) -> None:
    """One legend: inside the axes for a single panel with few entries (``inside``), else one
    legend below the panels (constrained layout keeps it off the plots)."""
    if not handles:
        return
    if inside and len(axes) == 1 and len(handles) <= 4:
        axes[0].legend(handles, labels, title=title, loc="best")
        return
    ncols = min(len(handles), 3)
    rows = -(-len(handles) // ncols) + (1 if title else 0)
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + 0.2 * rows + 0.15)  # room below the panels, not taken from them
    fig.legend(handles, labels, title=title, loc="outside lower center", ncols=ncols)


def new_figure(ncols: int = 1, nrows: int = 1, *, panel_size: tuple[float, float] = (3.4, 2.6),
               sharey: bool = False) -> tuple[Any, np.ndarray]:
    """An Agg-backed ``Figure`` with a grid of axes (returned as a flat array), in :data:`STYLE`."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
        for ax in axes.ravel():  # tick labels made later (at draw time) keep the family too
            ax.tick_params(labelfontfamily=STYLE["font.family"])
    return fig, axes.ravel()


def _levels(df: Any, col: str | None) -> list[Any]:
    if col is None:
        return [None]
    return sorted(df[col].dropna().unique().tolist(), key=lambda v: (isinstance(v, str), v))


def _value(value: Any) -> str:
    """A hue level as a legend entry (the legend's title names the column): its :func:`label`."""
    return label(value)


def _fmt(col: str, value: Any) -> str:
    if isinstance(value, float) and math.isinf(value):
        value = "inf"
    elif isinstance(value, float):
        value = f"{value:g}"
    elif isinstance(value, str):
        value = LABELS.get(value, value)
    return f"{LABELS.get(col, col)}={value}" if col else f"={value}"


def _log_axis(axis: Any, set_scale: Any, values: Any = None) -> None:
    """Log scale with plain-number labels: at the data's values when there are few of them
    (a grid of budgets), else at powers of ten; minor ticks unlabelled."""
    from matplotlib import ticker

    set_scale("log")
    vals = None if values is None else np.unique(np.asarray(values, dtype=float))
    if vals is not None:
        vals = vals[np.isfinite(vals) & (vals > 0)]
    if vals is not None and 0 < len(vals) <= 12:
        axis.set_major_locator(ticker.FixedLocator(vals))
        axis.set_minor_locator(ticker.NullLocator())
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def tradeoff(
    df: Any,
    x: str,
    y: str,
    hue: str | None = None,
    panel: str | None = None,
    band: str | None = "ci95",
    *,
    logx: bool = False,
    logy: bool = False,
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    reference: float | None = None,
    reference_label: str = "reference",
    markers: bool = True,
    bounds: tuple[float | None, float | None] | str | None = "auto",
) -> Any:
    """Mean of ``y`` against ``x`` over seeds, one line per ``hue`` level, one panel per ``panel`` level.

    The band is the seed-to-seed uncertainty of the mean (``band="ci95"``: 95% t-interval),
    clipped to ``bounds`` (``"auto"``: at 0 when every ``y`` is non-negative; ``(low, high)``; or
    ``None``). A horizontal dashed ``reference`` line (e.g. a non-private baseline) is drawn when
    given, named ``reference_label`` in the legend. The legend names every series: the ``hue``
    levels (titled ``hue``), the band and the reference. Returns the ``Figure``.
    """
    _check_columns(df, x=x, y=y, hue=hue, panel=panel)
    if band not in _BANDS:
        raise ValueError(f"band must be one of {_BANDS}, got {band!r}.")
    import matplotlib
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lim = (0.0, 1.0) if isinstance(bounds, str) and bounds == "auto" and y in UNIT_RANGE else _bounds(df[y], bounds)
    panels = _levels(df, panel)
    hues = _levels(df, hue)
    fig, axes = new_figure(ncols=len(panels))
    handles: dict[str, Any] = {}
    counts: list[int] = []
    with matplotlib.rc_context(STYLE):
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        marks = "osD^vP*X"
        for ax, pval in zip(axes, panels):
            sub = df if panel is None else df[df[panel] == pval]
            for j, hval in enumerate(hues):
                part = sub if hue is None else sub[sub[hue] == hval]
                if part.empty:
                    continue
                s = summarize(part, [x], y)
                counts += s["n"].astype(int).tolist()
                xs = s[x].to_numpy(dtype=float)
                color = colors[j % len(colors)]
                entry = f"mean of {label(y)}" if hue is None else _value(hval)
                (line,) = ax.plot(xs, s["mean"].to_numpy(dtype=float), color=color,
                                  marker=marks[j % len(marks)] if markers else None, label=entry)
                handles.setdefault(entry, line)
                lims = _band(s, band, lim, log=logy)
                if lims is not None:
                    ax.fill_between(xs, lims[0], lims[1], color=color, alpha=0.2, linewidth=0)
            if reference is not None:
                ax.axhline(reference, color="0.3", linestyle="--", linewidth=1.0)
            if logx:
                _log_axis(ax.xaxis, ax.set_xscale, sub[x])
            if logy:
                _log_axis(ax.yaxis, ax.set_yscale)
            ax.set_xlabel(xlabel or label(x))
            ax.set_ylabel(ylabel or label(y))
            if panel is not None:
                ax.set_title(_fmt(panel, pval))
        if band is not None and handles:
            handles[f"shaded: {_BAND_LABEL[band]}{_seeds_text(counts)}"] = Patch(color="0.5", alpha=0.3, linewidth=0)
        if reference is not None:
            handles[f"dashed: {reference_label}"] = Line2D([], [], color="0.3", linestyle="--", linewidth=1.0)
        if hue is not None or len(handles) > 1:
            _legend(fig, axes, list(handles.values()), list(handles), None if hue is None else label(hue))
        if title:
            fig.suptitle(title)
    return fig


def error_vs_budget(
    df: Any,
    budget: str = "epsilon",
    error: str = "error",
    hue: str | None = None,
    panel: str | None = None,
    band: str | None = "ci95",
    *,
    logy: bool = False,
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    reference: float | None = None,
    reference_label: str | None = None,
    bounds: tuple[float | None, float | None] | str | None = "auto",
) -> Any:
    """Error against privacy budget on a log x axis (the papers' error-vs-epsilon plots).

    Rows with a non-finite budget (epsilon = inf, the non-private limit) are drawn as the dashed
    ``reference`` line (their mean, named "non-private (<budget> = inf)") unless ``reference`` is
    given. Bands are clipped to ``bounds`` as in :func:`tradeoff`.
    """
    _check_columns(df, budget=budget, error=error, hue=hue, panel=panel)
    b = df[budget].astype(float)
    finite = np.isfinite(b.to_numpy())
    if reference is None and not finite.all():
        reference = float(df.loc[~finite, error].mean())
        reference_label = reference_label or f"non-private ({budget} = inf), mean"
    return tradeoff(df[finite], budget, error, hue, panel, band, logx=True, logy=logy,
                    xlabel=xlabel or budget, ylabel=ylabel or error, title=title, reference=reference,
                    reference_label=reference_label or "reference", bounds=bounds)


def grouped_bars(
    df: Any,
    category: str,
    value: str,
    hue: str | None = None,
    band: str | None = "ci95",
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    bounds: tuple[float | None, float | None] | str | None = "auto",
) -> Any:
    """Mean of ``value`` per ``category`` (x groups) and ``hue`` (bars within a group), error bars per
    ``band`` (clipped to ``bounds`` as in :func:`tradeoff`); long category names are slanted so
    they do not overlap, and the legend names the hue levels and the error bars."""
    _check_columns(df, category=category, value=value, hue=hue)
    if band not in _BANDS:
        raise ValueError(f"band must be one of {_BANDS}, got {band!r}.")
    import matplotlib
    from matplotlib.lines import Line2D

    lim = (0.0, 1.0) if isinstance(bounds, str) and bounds == "auto" and value in UNIT_RANGE else _bounds(
        df[value], bounds)
    cats = _levels(df, category)
    hues = _levels(df, hue)
    fig, axes = new_figure(panel_size=(max(3.4, 0.6 * len(cats) * max(1, len(hues)) + 1), 2.6))
    ax = axes[0]
    width = 0.8 / len(hues)
    pos = np.arange(len(cats), dtype=float)
    counts: list[int] = []
    with matplotlib.rc_context(STYLE):
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        handles: dict[str, Any] = {}
        for j, hval in enumerate(hues):
            part = df if hue is None else df[df[hue] == hval]
            s = summarize(part, [category], value).set_index(category).reindex(cats)
            counts += s["n"].dropna().astype(int).tolist()
            means = s["mean"].to_numpy(dtype=float)
            lims = _band(s, band, lim)
            yerr = None
            if lims is not None:
                yerr = np.clip(np.nan_to_num(np.vstack([means - lims[0], lims[1] - means]), nan=0.0), 0, None)
            entry = f"mean of {label(value)}" if hue is None else _value(hval)
            bars = ax.bar(pos + (j - (len(hues) - 1) / 2) * width, means, width, yerr=yerr, capsize=2,
                          color=colors[j % len(colors)], label=entry)
            handles[entry] = bars
        labels = [label(c) for c in cats]
        ax.set_xticks(pos, labels)
        if sum(len(t) for t in labels) > 6 * len(labels) or len(labels) > 8:
            ax.tick_params(axis="x", labelrotation=30)
            for t in ax.get_xticklabels():
                t.set_horizontalalignment("right")
        ax.set_xlabel(xlabel or label(category))
        ax.set_ylabel(ylabel or label(value))
        if band is not None:
            handles[f"bars: {_BAND_LABEL[band]}{_seeds_text(counts)}"] = Line2D(
                [], [], color="black", marker="|", linestyle="none", markersize=8)
        if hue is not None or band is not None:
            _legend(fig, [ax], list(handles.values()), list(handles), None if hue is None else label(hue),
                    inside=False)
        if title:
            ax.set_title(title)
    return fig


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
    need = [method, epsilon, knob, "error_mean", "error_lo", "error_hi", "violation_mean", "violation_lo",
            "violation_hi"]
    _check_columns(table, **{f"column {c}": c for c in need})
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    for name, b in (("error_bounds", error_bounds), ("violation_bounds", violation_bounds)):
        if len(b) != 2 or not b[0] < b[1]:
            raise ValueError(f"{name} must be (low, high) with low < high, got {b!r}.")
    import matplotlib
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    eps_values = sorted(table[epsilon].astype(float).unique(), key=lambda v: (math.isinf(v), v))
    methods = _levels(table, method)
    ncols = min(len(eps_values), max_panel_cols)
    nrows = -(-len(eps_values) // ncols)
    fig, axes = new_figure(ncols, nrows, panel_size=(3.4, 2.8), sharey=True)
    for ax in axes[len(eps_values):]:
        ax.set_visible(False)
    knob_name = LABELS.get(knob, knob)
    handles: dict[str, Any] = {}
    degen_all = _flag(table, degenerate)
    unconv_all = _flag(table, converged, invert=True)
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
                sub = table[rows]
                color, mark = colors[j % len(colors)], marks[j % len(marks)]
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
                handles.setdefault(label(m), line)
                ax.fill_between(ek, np.nan_to_num(vlo, nan=vk), np.nan_to_num(vhi, nan=vk), color=color,
                                alpha=0.18, linewidth=0)
                xerr = np.clip(np.nan_to_num(np.vstack([ek - elo, ehi - ek]), nan=0.0), 0, None)
                ax.errorbar(ek, vk, xerr=xerr, fmt="none", ecolor=color, elinewidth=0.8, capsize=0, alpha=0.7)
                knobs = sub[knob].to_numpy()[keep][order]
                for idx in sorted({0, len(ek) - 1}) if len(ek) else ():
                    ax.annotate(f"{_fmt('', knobs[idx])[1:]}", (ek[idx], vk[idx]), textcoords="offset points",
                                xytext=(3, 3), fontsize=6, color=color)
                dg, uc = degen_all[rows], unconv_all[rows]
                if dg.any():
                    handles.setdefault("degenerate (constant or base-rate predictions)", ax.plot(
                        e[dg], v[dg], linestyle="none", marker="x", color="black", markersize=6)[0])
                if uc.any():
                    handles.setdefault("not converged", ax.plot(
                        e[uc], v[uc], linestyle="none", marker="s", markerfacecolor="none",
                        markeredgecolor="black", markersize=7)[0])
            head = "non-private" if math.isinf(eps) else f"epsilon = {eps:g}"
            ax.set_title(head if unit is None else f"{head}, {unit} unit")
            ax.set_xlabel(f"{error_label} (mean)")
            ax.set_ylabel(f"{violation_label} (mean)")
            ax.set_ylim(bottom=violation_bounds[0])
            ax.set_xlim(left=max(error_bounds[0], ax.get_xlim()[0]), right=min(error_bounds[1], ax.get_xlim()[1]))
        if handles:
            handles[f"band, bars: {confidence:.0%} CI (violation, error)"] = Patch(color="0.5", alpha=0.3,
                                                                                  linewidth=0)
            handles[f"faint: dominated; numbers: {knob_name}"] = Line2D(
                [], [], linestyle="none", marker="o", color="0.5", alpha=0.3)
            width, height = fig.get_size_inches()
            ncols = 1 if width < 4 else 2 if width < 9 else 3
            rows = -(-len(handles) // ncols) + 1
            fig.set_size_inches(width, height + 0.2 * rows + 0.15)  # room below the panels
            fig.legend(list(handles.values()), list(handles), title="method (Pareto set)",
                       loc="outside lower center", ncols=ncols)
        if title:
            fig.suptitle(title)
    return fig
