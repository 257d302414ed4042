"""Figures of the paper-002 bounded-group-loss studies: objective, violation and h against epsilon."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax.runner import plots

__all__ = ["bgl"]


def bgl(df: Any, ctx: Any, title: str) -> None:
    """Objective excess, constraint violation and penalized objective h of the private methods against
    epsilon (95% intervals over seeds; dashed: non-private Frank-Wolfe); saved as ``<column>_vs_epsilon``."""
    priv = df[np.isfinite(df.epsilon)]
    ref = df[df.method == "frank_wolfe"]
    for col, lab in (("excess", "objective - CGOO optimum"), ("violation", "constraint violation max(0, g)"),
                     ("h", "penalized objective h")):
        fig = plots.error_vs_budget(priv, "epsilon", col, hue="method", band="ci95",
                                    reference=float(ref[col].iloc[0]), ylabel=lab,
                                    title=f"{title} (dashed: non-private Frank-Wolfe)")
        ctx.save_figure(fig, f"{col}_vs_epsilon")
