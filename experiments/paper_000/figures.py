"""Figures of the paper-000 study: MSPE against rho per slope pair (Figs 2, 4, 6)."""

from __future__ import annotations

from typing import Any

__all__ = ["two_group"]


def two_group(df: Any, ctx: Any) -> None:
    """One figure per size ratio: MSPE (population) against rho of DPSE and the DPNoSE variants for
    the smallest (solid) and largest (dotted) group, one column per slope pair, without (top) and
    with (bottom) the fairness constraint; saved as ``two_group_<ratio>x``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    for ratio in sorted(df.ratio.unique()):
        sub = df[(df.ratio == ratio) & (df.noise_sd == df.noise_sd.min())]
        pairs = sub[["beta1", "beta2"]].drop_duplicates().to_numpy()
        fig = Figure(figsize=(4 * len(pairs), 6.5))
        axes = fig.subplots(2, len(pairs), squeeze=False)
        for c, (b1, b2) in enumerate(pairs):
            for row, fair in enumerate((False, True)):
                ax = axes[row, c]
                names = [("dpse_fair", "DPSE"), ("equal_fair", "DPNoSE (equal)")] if fair else [
                    ("dpse", "DPSE"), ("dpnose", "DPNoSE (pooled)"), ("equal", "DPNoSE (equal)")]
                for name, label in names:
                    for g, style in ((2, "-"), (1, ":")):
                        f = sub[(sub.beta1 == b1) & (sub.beta2 == b2) & (sub.method == name)
                                & (sub.group == g)].sort_values("rho")
                        ax.errorbar(f.rho, f.mspe, yerr=1.96 * f.se, ls=style, marker=".",
                                    label=f"{label} g{g}")
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_title(f"({b1:g}, {b2:g}){' fair' if fair else ''}", fontsize=9)
                ax.set_xlabel("rho")
                if c == 0:
                    ax.set_ylabel("MSPE (population)")
        axes[0, 0].legend(fontsize=6)
        fig.suptitle(f"paper 000 Figs 2/4/6: {ratio}x, g2 = smallest (solid), g1 = largest (dotted)")
        fig.tight_layout()
        ctx.save_figure(fig, f"two_group_{ratio}x")
