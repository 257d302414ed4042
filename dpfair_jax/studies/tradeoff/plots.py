"""Plots of the tradeoff studies: the fixed-hyperparameter engine's panels and the public study's frontiers."""

from __future__ import annotations

import pandas as pd

from dpfair_jax.runner import plots
from dpfair_jax.studies.tradeoff.methods import METHOD_LABELS, UNIT_LABEL


#: the engine's privacy units (:func:`tradeoff_study`'s ``unit``) as a panel title names them
_ENGINE_UNITS = {"all_features": "example-level", "sensitive_attribute": "sensitive-attribute"}


def plot_tradeoff(df: pd.DataFrame, metric: str, title: str, *, confidence: float = 0.95):
    """Frontiers of a fixed-hyperparameter sweep (rows of :func:`tradeoff_study`, or any rows with
    ``method``, ``epsilon``, ``lam``, ``error`` and ``metric``): mean ``metric`` against mean test
    error per (method, lambda), each method's Pareto set joined in error order with its
    ``confidence`` t-interval over seeds (clipped to [0, 1]), one panel per epsilon titled with the
    privacy unit (column ``unit``), lambda at each frontier's ends, points with a degenerate seed
    crossed (column ``degenerate``). Returns a ``matplotlib`` figure."""
    unit = _ENGINE_UNITS.get(str(df["unit"].iloc[0]), str(df["unit"].iloc[0])) if "unit" in df else None
    return _frontiers(df, metric, metric, unit, title, confidence)


def _frontiers(df: pd.DataFrame, column: str, metric: str, unit: str | None, title: str | None,
               confidence: float):
    """:func:`dpfair_jax.runner.plots.frontier` of ``df``'s (method, epsilon, lam) means of ``error``
    and ``column`` (named by ``metric``), with the share of degenerate rows of each point."""
    from dpfair_jax.fairness import frontier as FR

    keys = ["method", "epsilon", "lam"]
    ft = FR.frontier_table(df, by=keys[:2], knob="lam", violation=column, confidence=confidence)
    if "degenerate" in df:
        share = df.groupby(keys, sort=True)["degenerate"].mean().rename("degenerate").reset_index()
        ft = ft.merge(share, on=keys, how="left", validate="one_to_one")
    converged = None
    if "converged" in df:  # marked: a point where some assessed replicate did not converge
        ft = with_converged_share(ft, df)
        ft["every_replicate_converged"] = ~(ft["converged"] < 1.0)  # NaN (no criterion): not marked
        converged = "every_replicate_converged"
    violation_label = plots.label(metric) if metric in plots.LABELS else metric.replace("_", " ")
    return plots.frontier(ft, unit=unit, violation_label=violation_label, error_label="test error", title=title,
                          confidence=confidence, converged=converged)


def with_converged_share(ft: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``ft`` (one row per method, epsilon, lam) with column ``converged``: the share of ``table``'s
    replicates of that point whose ``converged`` flag is True, among those with a flag (NaN where no
    replicate has one: the method has no criterion)."""
    keys = ["method", "epsilon", "lam"]
    flag = table["converged"].astype("boolean").astype("Float64")  # <NA> where there is no criterion
    share = flag.groupby([table[k] for k in keys], sort=True).mean().astype(float).rename("converged")
    return ft.drop(columns=["converged"], errors="ignore").merge(share.reset_index(), on=keys, how="left",
                                                                 validate="one_to_one")


def plot_study(table: pd.DataFrame, title: str | None = None, *, confidence: float = 0.95):
    """The study's frontiers (:func:`dpfair_jax.runner.plots.frontier`): mean test error against mean
    violation per (method, lambda), each method's Pareto set joined in error order with its
    ``confidence`` t-interval over replicates in both directions (the band clipped to the metric's
    range [0, 1]), one panel per epsilon titled with the privacy unit, lambda at each frontier's
    ends, a cross on every point where some replicate was degenerate (constant or base-rate
    predictions: column ``degenerate``) and a hollow square on every point where some replicate
    did not converge (column ``converged`` False; a method without a criterion is not marked). The
    numbers are :meth:`TradeoffStudy.frontier`'s.
    Returns the figure."""
    df = table.copy()
    df["method"] = df["method"].map(lambda m: METHOD_LABELS.get(m, m))
    metric = str(table["metric"].iloc[0]) if "metric" in table else "violation"
    unit = str(table["unit"].iloc[0]) if "unit" in table else UNIT_LABEL
    return _frontiers(df, "violation", metric, unit, title, confidence)
