"""Figures of the paper-004 studies that are not tradeoff frontiers: the public code's curves
(``official_code_curves``) and DP-SGDA's stationarity gap against n (``sgda_gap``). The tuned
tradeoff studies draw their frontiers with :meth:`dpfair_jax.studies.tradeoff.TradeoffStudy.plot`.

Privacy: the figures draw released test metrics of private runs (``sgda_gap``: of the gradient at
the released parameters, a diagnostic on the training data that is released in no private row) and
of the public code's non-private runs; they add no release of their own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpfair_jax.fairness import frontier as FR
from dpfair_jax.runner import plots

__all__ = ["official_curves", "sgda_gap"]


def official_curves(df: pd.DataFrame, ctx: Any, *, confidence: float = 0.95) -> Any:
    """Mean test error against mean DP violation per lambda for each choice of the code's cell 0
    (rows ``cell0``, ``cell0_group``, ``lam``, ``seed``, ``error``, ``dp_violation``), joined in
    lambda order as the paper's ``Figures/plotting.py`` joins them, with ``confidence`` t-intervals
    over seeds in both directions (clipped to [0, 1]), lambda written at the two ends and a cross where
    some seed was degenerate (column ``degenerate``: constant or base-rate predictions). Saved as
    ``official_code_curves``; returns the figure."""
    import matplotlib

    ft = FR.frontier_table(df, by=("cell0",), knob="lam", error="error", violation="dp_violation",
                           confidence=confidence)
    fig, axes = plots.new_figure(ncols=1, panel_size=(7.0, 3.4))  # the legend takes the right third
    ax = axes[0]
    marked = False
    with matplotlib.rc_context(plots.STYLE):
        for cell0, part in ft.groupby("cell0", sort=True):
            part = part.sort_values("lam")
            group = df.loc[df["cell0"] == cell0, "cell0_group"].iloc[0]
            e, v = part["error_mean"].to_numpy(float), part["violation_mean"].to_numpy(float)
            xerr = np.vstack([e - np.clip(part["error_lo"], 0, 1), np.clip(part["error_hi"], 0, 1) - e])
            yerr = np.vstack([v - np.clip(part["violation_lo"], 0, 1), np.clip(part["violation_hi"], 0, 1) - v])
            bars = ax.errorbar(e, v, xerr=np.clip(xerr, 0, None), yerr=np.clip(yerr, 0, None), marker="o",
                               capsize=2, label=f"cell 0 = {group} ({cell0} group)")
            lams = part["lam"].to_numpy()
            if "degenerate" in df:  # a cross where some seed predicted one class or the base rate
                rows = df[df["cell0"] == cell0]
                share = rows.groupby("lam")["degenerate"].mean().reindex(lams).to_numpy(float)
                hit = share > 0
                if hit.any():
                    ax.plot(e[hit], v[hit], linestyle="none", marker="x", color="black", markersize=7,
                            label="degenerate in some seed" if not marked else None)
                    marked = True
            for i in sorted({0, len(lams) - 1}):
                ax.annotate(f"lambda = {plots.label(float(lams[i]))}", (e[i], v[i]), textcoords="offset points",
                            xytext=(4, 4), fontsize=6, color=bars[0].get_color())
        ax.set_xlabel("test error (mean)")
        ax.set_ylabel("DP violation (mean)")
        ax.set_ylim(bottom=0.0)
        ax.set_title("Public code's one-cell ERMI (not private: its clipping)")
        seeds = int(ft["n"].max()) if len(ft) else 0
        plots.legend_outside(ax, title=f"bars: {confidence:.0%} CI over {seeds} seeds")
    ctx.save_figure(fig, "official_code_curves")
    return fig


def sgda_gap(df: pd.DataFrame, ctx: Any) -> Any:
    """DP-SGDA's stationarity gap ``E |grad Phi(theta_T)|^2`` against the training size ``n`` (log-log),
    one line per epsilon, the mean over seeds with its 95% t-band (rows ``n``, ``epsilon``, ``seed``,
    ``gap``; Theorem E.3: the gap falls as ``sqrt(d ln(1/delta)) / (epsilon n)``). Saved as
    ``sgda_gap``; returns the figure."""
    fig = plots.tradeoff(df.rename(columns={"n": "rows"}), "rows", "gap", hue="epsilon", logx=True, logy=True,
                         xlabel="training rows n", ylabel=r"gap $\|\nabla\Phi(\theta_T)\|^2$ (mean)",
                         bounds=(0.0, None), title="DP-SGDA stationarity gap vs n (Theorem E.3)")
    ax = fig.axes[0]
    inside = ax.get_legend()
    if inside is not None:  # one panel, few entries: move the legend off the data
        handles, labels = inside.legend_handles, [t.get_text() for t in inside.get_texts()]
        inside.remove()
        plots.legend_outside(ax, handles=handles, labels=labels, title="epsilon")
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + 1.8, height)  # room for the legend, not taken from the panel
    ctx.save_figure(fig, "sgda_gap")
    return fig
