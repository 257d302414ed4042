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

Layout: :mod:`.style` (vocabulary, font, figure and legend helpers), :mod:`.summary` (means
and bands over seeds), :mod:`.charts` (tradeoff, error vs budget, bars), :mod:`.pareto` (frontiers).
"""

from __future__ import annotations

from dpfair_jax.runner.plots.style import (
    FONT,
    LABELS,
    STYLE,
    UNIT_RANGE,
    finish,
    is_public,
    label,
    legend_outside,
    new_figure,
)
from dpfair_jax.runner.plots.summary import summarize
from dpfair_jax.runner.plots.charts import error_vs_budget, grouped_bars, tradeoff
from dpfair_jax.runner.plots.pareto import frontier, pareto_mask


__all__ = ["FONT", "LABELS", "STYLE", "UNIT_RANGE", "error_vs_budget", "finish", "frontier", "grouped_bars",
           "is_public", "label", "legend_outside", "new_figure", "pareto_mask", "summarize", "tradeoff"]
