"""Figures of the paper-001 studies: a panel grid, and the DP-SGD studies' five panels (Figs 9-11)."""

from __future__ import annotations

from typing import Any

__all__ = ["dpsgd", "grid"]


def grid(nrows: int, ncols: int, w: float = 4.0, h: float = 3.2):
    """A ``Figure`` with an ``nrows x ncols`` grid of axes (``axes[row][col]``), ``w x h`` inches per panel."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w * ncols, h * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def dpsgd(ctx: Any, df: Any, dec_df: Any, ratio_df: Any, dist: Any, trace: Any, main_c: float) -> None:
    """Fig 9 (normalization), gradient norm / risk vs C, Fig 10 (R_clip vs psi), Fig 11 (group size
    ratio) and trace vs distance to the boundary, in one row; saved as ``dpsgd_studies``."""
    fig, axes = grid(1, 5)
    ax = axes[0][0]
    for (nm, a), g in df[df["clip_norm"] == main_c].groupby(["normalization", "group"]):
        ax.errorbar(g["epsilon"], g["risk"], yerr=2 * g["risk_se"], marker="o", ls="-" if nm == "standard" else "--",
                    label=f"{nm}, group {a}")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("excessive risk")
    ax.set_title("Fig 9: normalization")
    ax.legend(fontsize=7)
    ax = axes[0][1]
    last = df[(df["checkpoint"] == df["checkpoint"].max()) & (df["normalization"] == "standard")]
    for a, g in last.groupby("group"):
        ax.plot(g["clip_norm"], g["grad_norm"], "o-", label=f"group {a} ||g_a||")
        ax.plot(g["clip_norm"], g["risk"], "s--", label=f"group {a} risk")
    ax.set_xscale("log")
    ax.set_xlabel("clip norm C")
    ax.set_title("gradient norm / risk vs C")
    ax.legend(fontsize=7)
    ax = axes[0][2]
    for a, g in dec_df.groupby("group"):
        ax.plot(g["epsilon"], g["r_clip"], "o-", label=f"R_clip group {a}")
        ax.plot(g["epsilon"], g["psi_term"], "x:", label=f"eta^2/2 psi group {a}")
    ax.set_xlabel("epsilon")
    ax.set_title("Fig 10: R_clip vs psi")
    ax.legend(fontsize=7)
    ax = axes[0][3]
    for a, g in ratio_df.groupby("group"):
        ax.errorbar(g["ratio"], g["risk"], yerr=2 * g["risk_se"], marker="o", label=f"group {a}")
    ax.set_xlabel("p_1 / p_0")
    ax.set_title("Fig 11: group size ratio")
    ax.legend(fontsize=7)
    ax = axes[0][4]
    ax.scatter(dist, trace, s=3, alpha=0.4)
    ax.set_xlabel("|logit| (distance to boundary)")
    ax.set_ylabel("Tr H_x")
    ax.set_title("trace vs boundary")
    ctx.save_figure(fig, "dpsgd_studies")
