"""Plots of the tradeoff studies: the fixed-hyperparameter engine's panels and the public study's frontiers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpfair_jax.runner import plots
from dpfair_jax.studies.tradeoff.methods import METHOD_LABELS, UNIT_LABEL


def plot_tradeoff(df: pd.DataFrame, metric: str, title: str):
    """Mean ``metric`` against mean test error per (method, lambda), one panel per epsilon, with
    95% Student-t intervals over seeds (rows of :func:`tradeoff_study`); the lambda = 0 point of
    DP-FERMI is starred and named by the privacy unit. Returns a ``matplotlib`` figure."""
    import matplotlib
    from scipy import stats as st

    eps_levels = sorted(df["epsilon"].unique())
    fig, axes = plots.new_figure(ncols=len(eps_levels))
    stats = df.groupby(["epsilon", "method", "lam"])[["error", metric]].agg(["mean", "sem", "count"])
    with matplotlib.rc_context(plots.STYLE):
        for ax, e in zip(np.atleast_1d(axes), eps_levels):
            for j, meth in enumerate(sorted(df["method"].unique())):
                try:
                    s = stats.loc[(e, meth)]
                except KeyError:
                    continue
                s = s.sort_index()
                xm, ym = s[("error", "mean")].to_numpy(), s[(metric, "mean")].to_numpy()
                k = s[("error", "count")].to_numpy()
                tq = st.t.ppf(0.975, np.maximum(k - 1, 1))
                xe = np.nan_to_num(s[("error", "sem")].to_numpy()) * tq
                ye = np.nan_to_num(s[(metric, "sem")].to_numpy()) * tq
                label = {"dpfermi": "DP-FERMI", "pfld": "PF-LD"}.get(meth, meth)
                ax.errorbar(xm, ym, xerr=xe, yerr=ye, marker="os"[j % 2], label=label, capsize=2)
                ax.fill_between(xm, ym - ye, ym + ye, alpha=0.15)
                if meth == "dpfermi":
                    unit = df["unit"].iloc[0] if "unit" in df else "all_features"
                    lab = ("DP-SGD (lam=0)" if unit == "all_features"
                           else "lam=0: non-private, s unused")
                    ax.plot(xm[:1], ym[:1], "k*", markersize=9, label=lab)
            ax.set_title(f"eps = {e:g}")
            ax.set_xlabel("test misclassification error")
            ax.set_ylabel(metric.replace("_", " "))
            ax.legend(fontsize=7)
        fig.suptitle(title)
    return fig

def plot_study(table: pd.DataFrame, title: str | None = None, *, confidence: float = 0.95):
    """The study's frontiers (:func:`dpfair_jax.runner.plots.frontier`): mean test error against mean
    violation per (method, lambda), each method's Pareto set joined in error order with its
    ``confidence`` t-interval over replicates in both directions (the band clipped to the metric's
    range [0, 1]), one panel per epsilon titled with the privacy unit, lambda at each frontier's
    ends, and a cross on every point where some replicate was degenerate (constant or base-rate
    predictions: column ``degenerate``). The numbers are :meth:`TradeoffStudy.frontier`'s.
    Returns the figure."""
    from dpfair_jax.fairness import frontier as FR

    df = table.copy()
    df["method"] = df["method"].map(lambda m: METHOD_LABELS.get(m, m))
    keys = ["method", "epsilon", "lam"]
    ft = FR.frontier_table(df, by=keys[:2], knob="lam", violation="violation", confidence=confidence)
    if "degenerate" in df:
        share = df.groupby(keys, sort=True)["degenerate"].mean().rename("degenerate").reset_index()
        ft = ft.merge(share, on=keys, how="left", validate="one_to_one")
    metric = str(table["metric"].iloc[0]) if "metric" in table else "violation"
    unit = str(table["unit"].iloc[0]) if "unit" in table else UNIT_LABEL
    violation_label = plots.label(metric) if metric in plots.LABELS else metric.replace("_", " ")
    return plots.frontier(ft, unit=unit, violation_label=violation_label, error_label="test error", title=title,
                          confidence=confidence, converged=None)
