"""Figures of the paper-001 studies: a panel grid, and the DP-SGD studies' five panels (Figs 9-11)."""

from __future__ import annotations

from typing import Any

from dpfair_jax.runner import plots

from dpfair_jax.runner.plots import label

__all__ = ["dpsgd", "fig8", "fig9", "grid", "mitigation"]


def grid(nrows: int, ncols: int, w: float = 4.0, h: float = 3.2):
    """A ``Figure`` with an ``nrows x ncols`` grid of axes (``axes[row][col]``), ``w x h`` inches per panel."""
    import numpy as np

    from dpfair_jax.runner import plots

    fig, axes = plots.new_figure(ncols, nrows, panel_size=(w, h))
    return fig, np.asarray(axes).reshape(nrows, ncols)


def _bars(mean, half):
    """Asymmetric error bars for a non-negative quantity: the lower bar stops at 0."""
    import numpy as np

    mean, half = np.asarray(mean, dtype=float), np.asarray(half, dtype=float)
    return np.vstack([np.minimum(half, np.maximum(mean, 0.0)), half])


def dpsgd(ctx: Any, df: Any, dec_df: Any, ratio_df: Any, dist: Any, trace: Any, main_c: float) -> None:
    """Fig 9 (normalization), gradient norm / risk vs C, Fig 10 (R_clip vs psi), Fig 11 (group size
    ratio) and trace vs distance to the boundary, in one row; saved as ``dpsgd_studies``."""
    fig, axes = grid(1, 5)
    ax = axes[0][0]
    for (nm, a), g in df[df["clip_norm"] == main_c].groupby(["normalization", "group"]):
        ax.errorbar(g["epsilon"], g["risk"], yerr=_bars(g["risk"], 2 * g["risk_se"]), marker="o",
                    ls="-" if nm == "standard" else "--", label=f"{label(nm)}, group {a}")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("excessive risk")
    ax.set_title("Fig 9: normalization")
    plots.legend_outside(ax)
    ax = axes[0][1]
    last = df[(df["checkpoint"] == df["checkpoint"].max()) & (df["normalization"] == "standard")]
    for a, g in last.groupby("group"):
        ax.plot(g["clip_norm"], g["grad_norm"], "o-", label=f"group {a} gradient norm")
        ax.plot(g["clip_norm"], g["risk"], "s--", label=f"group {a} risk")
    ax.set_xscale("log")
    ax.set_xlabel("clip norm C")
    ax.set_ylabel("gradient norm, excessive risk")
    ax.set_title("gradient norm / risk vs C")
    plots.legend_outside(ax)
    ax = axes[0][2]
    for a, g in dec_df.groupby("group"):
        ax.plot(g["epsilon"], g["r_clip"], "o-", label=f"clipping term, group {a}")
        ax.plot(g["epsilon"], g["psi_term"], "x:", label=f"noise term (eta^2/2) psi, group {a}")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("risk term")
    ax.set_title("Fig 10: R_clip vs psi")
    plots.legend_outside(ax)
    ax = axes[0][3]
    for a, g in ratio_df.groupby("group"):
        ax.errorbar(g["ratio"], g["risk"], yerr=_bars(g["risk"], 2 * g["risk_se"]), marker="o", label=f"group {a}")
    ax.set_xlabel("p_1 / p_0")
    ax.set_ylabel("excessive risk")
    ax.set_title("Fig 11: group size ratio")
    plots.legend_outside(ax)
    ax = axes[0][4]
    ax.scatter(dist, trace, s=3, alpha=0.4)
    ax.set_xlabel("|logit| (distance to boundary)")
    ax.set_ylabel("Tr H_x")
    ax.set_title("trace vs boundary")
    ctx.save_figure(fig, "dpsgd_studies")


def fig9(ctx: Any, df: Any) -> None:
    """Fig 9 along the epsilon path, one panel per data set: the excessive-risk gap (solid) and the
    mean excessive risk (dashed) with global and per-group normalization, 2 SE bars; saved as
    ``fig9_normalization``."""
    from dpfair_jax.runner import plots

    names = list(dict.fromkeys(df["dataset"]))
    fig, axes = plots.new_figure(len(names), 1, panel_size=(3.6, 2.8))
    for ax, name in zip(axes, names):
        sub = df[df["dataset"] == name]
        for norm, style in (("standard", "o"), ("group", "s")):
            ax.errorbar(sub["epsilon"], sub[f"gap_{norm}"], yerr=_bars(sub[f"gap_{norm}"], 2 * sub[f"gap_{norm}_se"]),
                        marker=style, ls="-", label=f"gap, {label(norm)}")
            ax.errorbar(sub["epsilon"], sub[f"mean_risk_{norm}"],
                        yerr=_bars(sub[f"mean_risk_{norm}"], 2 * sub[f"mean_risk_{norm}_se"]), marker=style,
                        ls="--", label=f"mean, {label(norm)}")
        ax.set_xlabel("epsilon")
        ax.set_ylabel("excessive risk")
        ax.set_title(f"Fig 9: {name}")
        plots.legend_outside(ax)
    ctx.save_figure(fig, "fig9_normalization")


def mitigation(ctx: Any, agg: Any, gammas: list, chosen: tuple) -> None:
    """Fig 12: test excessive-risk gap and test accuracy over the (gamma1, gamma2) grid as annotated
    cells (the gamma chosen on validation boxed); saved as ``fig12_mitigation``."""
    import numpy as np
    from matplotlib.patches import Rectangle

    from dpfair_jax.runner import plots

    fig, axes = plots.new_figure(2, 1, panel_size=(3.4, 3.0))
    test = agg[agg["split"] == "test"]
    for ax, (col, title) in zip(axes, (("gap", "test |R_a - R_b|"), ("accuracy", "test accuracy"))):
        piv = test.pivot(index="gamma1", columns="gamma2", values=col).reindex(index=gammas, columns=gammas)
        vals = piv.to_numpy()
        ax.imshow(vals, origin="lower", cmap="viridis")
        for i in range(len(gammas)):
            for j in range(len(gammas)):
                ax.text(j, i, f"{vals[i, j]:.3f}", ha="center", va="center", fontsize=7, color="w")
        ci, cj = gammas.index(chosen[0]), gammas.index(chosen[1])
        ax.add_patch(Rectangle((cj - 0.5, ci - 0.5), 1, 1, fill=False, ec="r", lw=2))
        ax.set_xticks(np.arange(len(gammas)), [f"{g:g}" for g in gammas])
        ax.set_yticks(np.arange(len(gammas)), [f"{g:g}" for g in gammas])
        ax.set_xlabel("gamma2")
        ax.set_ylabel("gamma1")
        ax.set_title(title)
    ctx.save_figure(fig, "fig12_mitigation")


def fig8(ctx: Any, df: Any) -> Any:
    """Fig 8: each group's excessive risk ``R_a`` under output perturbation against epsilon (log-log),
    one panel per data set: the Monte Carlo mean (solid, +-2 standard-error bars; the lower bar stops
    above 0) and Theorem 1's second-order prediction ``R_a ~ (1/2) sigma^2 Tr H_a`` (dashed); the
    legend names each group's Hessian trace. Rows: ``dataset``, ``group``, ``epsilon``, ``risk_mc``,
    ``risk_mc_se``, ``risk_thm1``, ``trace_exact``. Saved as ``fig8_output_perturbation``."""
    import numpy as np

    from matplotlib import ticker

    names = list(dict.fromkeys(df["dataset"]))
    fig, axes = grid(1, len(names), w=5.6)  # each legend to the right of its panel
    for ax, nm in zip(axes[0], names):
        d = df[df["dataset"] == nm]
        for a, g in d.groupby("group"):
            g = g.sort_values("epsilon")
            mean, half = g["risk_mc"].to_numpy(float), 2 * g["risk_mc_se"].to_numpy(float)
            lower = np.clip(np.minimum(half, 0.999 * mean), 0.0, None)  # the bar stays above 0 (log axis)
            ln = ax.errorbar(g["epsilon"], mean, yerr=np.vstack([lower, half]), marker="o", capsize=2,
                             label=f"group {a}, Monte Carlo (Tr H = {g['trace_exact'].iloc[0]:.3g})")
            ax.plot(g["epsilon"], g["risk_thm1"], "--", color=ln[0].get_color(), label=f"group {a}, Theorem 1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(ticker.FixedLocator(sorted(d["epsilon"].unique())))  # the epsilons run
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("epsilon")
        ax.set_ylabel("excessive risk R_a")
        ax.set_title(f"Fig 8: {nm}")
        plots.legend_outside(ax, title="bars: +-2 SE over draws")
    fig.suptitle("Output perturbation: larger Hessian trace, larger excessive risk")
    ctx.save_figure(fig, "fig8_output_perturbation")
    return fig
