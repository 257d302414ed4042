"""The figures' vocabulary and style: :data:`LABELS` (internal names to the words a reader knows),
:func:`label`, :func:`is_public`, the one font (:data:`FONT`, :data:`STYLE`), :func:`new_figure`,
:func:`finish` and legends outside the data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


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
