"""Figures of the paper-000 study: MSPE against rho per slope pair (Figs 2, 4, 6)."""

from __future__ import annotations

from typing import Any

__all__ = ["two_group"]


def two_group(df: Any, ctx: Any) -> None:
    """One figure per size ratio: MSPE (population) against rho of DPSE and the DPNoSE variants for
    the smallest (solid) and largest (dotted) group, one column per slope pair, without (top) and
    with (bottom) the fairness constraint; saved as ``two_group_<ratio>x``."""
    import numpy as np
    from matplotlib.lines import Line2D

    from dpfair_jax.runner import plots

    colors = {"DPSE": "C0", "DPNoSE (pooled)": "C1", "DPNoSE (equal)": "C2"}  # one color per method, every panel
    for ratio in sorted(df.ratio.unique()):
        sub = df[(df.ratio == ratio) & (df.noise_sd == df.noise_sd.min())]
        pairs = sub[["beta1", "beta2"]].drop_duplicates().to_numpy()
        fig, axes = plots.new_figure(len(pairs), 2, panel_size=(3.4, 2.8))
        axes = np.asarray(axes).reshape(2, len(pairs))
        handles: dict = {}
        for c, (b1, b2) in enumerate(pairs):
            for row, fair in enumerate((False, True)):
                ax = axes[row, c]
                names = [("dpse_fair", "DPSE"), ("equal_fair", "DPNoSE (equal)")] if fair else [
                    ("dpse", "DPSE"), ("dpnose", "DPNoSE (pooled)"), ("equal", "DPNoSE (equal)")]
                for name, label in names:
                    for g, style in ((2, "-"), (1, ":")):
                        f = sub[(sub.beta1 == b1) & (sub.beta2 == b2) & (sub.method == name)
                                & (sub.group == g)].sort_values("rho")
                        m, half = f.mspe.to_numpy(float), 1.96 * f.se.to_numpy(float)
                        low = np.minimum(half, 0.9 * m)  # an MSPE is positive: the bar stops above 0 (log axis)
                        ax.errorbar(f.rho, m, yerr=np.vstack([low, half]), ls=style, marker=".", color=colors[label])
                        handles.setdefault(label, Line2D([], [], color=colors[label], marker="."))
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_title(f"slopes ({b1:g}, {b2:g}){', fair' if fair else ''}", fontsize=9)
                ax.set_xlabel("zCDP budget rho")
                ax.set_ylabel("MSPE (population)")
        handles["group 2, smallest (solid)"] = Line2D([], [], color="0.3", ls="-")
        handles["group 1, largest (dotted)"] = Line2D([], [], color="0.3", ls=":")
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=3,
                   title="bars: 95% CI over trials")
        fig.suptitle(f"Figs 2/4/6, group size ratio {ratio}x\ngroup 2 = smallest (solid), group 1 = largest (dotted)",
                     fontsize=10)
        ctx.save_figure(fig, f"two_group_{ratio}x")
