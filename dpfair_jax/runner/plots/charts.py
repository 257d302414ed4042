"""Tradeoff curves, error vs budget and grouped bars, each the mean over seeds with its band."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax.runner.plots.style import (
    STYLE,
    UNIT_RANGE,
    _BANDS,
    _check_columns,
    _fmt,
    _legend,
    _levels,
    _log_axis,
    _seeds_text,
    _value,
    label,
    new_figure,
)
from dpfair_jax.runner.plots.summary import _BAND_LABEL, _band, _bounds, summarize


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
