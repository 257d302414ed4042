"""Figures of the paper-003 study: theory checks, the mixture grid (Fig. 3), Adult strata (Fig. 2),
stratified synthesis (Figs. 4, 5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax.runner import plots
from dpfair_jax.runner.plots import label, new_figure

__all__ = ["mixture", "strata", "synthesis", "theory"]


def theory(df: Any, ctx: Any) -> None:
    """Theorem 9 (measured vs closed form over alpha) and Prop. 8 (normalized quantiles over k); saved as ``theory``."""
    fig, axes = new_figure(2)
    thm = df[df.check == "thm9"]
    for k, g in thm.groupby("k"):
        axes[0].plot(g["alpha"], g["theory"], "-", label=f"k={k} theory")
        axes[0].errorbar(g["alpha"], g["measured"], yerr=3 * g["se"], fmt="o", ms=3)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("Dirichlet concentration alpha")
    axes[0].set_ylabel("E sum log|G_i|")
    axes[0].set_title("Theorem 9: measured (3 SE bars) vs closed form")
    plots.legend_outside(axes[0])
    p8 = df[df.check == "prop8"]
    for g_, g in p8.groupby("gamma_q"):
        axes[1].plot(g["k"], g["normalized"], "o-", label=f"gamma={g_}")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("k (equal groups)")
    axes[1].set_ylabel("quantile / Prop. 8 scale")
    axes[1].set_title("Proposition 8: normalized error quantile")
    plots.legend_outside(axes[1])
    ctx.save_figure(fig, "theory")


def mixture(df: Any, ctx: Any, config: dict) -> None:
    """Mean errors of every estimator against n, k and alpha (Fig. 3); saved as ``mixture``."""
    agg = df.groupby(["n_tot", "k", "alpha"]).mean(numeric_only=True).reset_index()
    fig, axes = new_figure(3, panel_size=(3.6, 2.8))
    a0, k0 = min(config["alphas"]), min(config["ks"])
    n_mid = sorted(agg.n_tot.unique())[len(agg.n_tot.unique()) // 2]
    names = {"n_tot": "total rows n", "k": "number of groups k", "alpha": "Dirichlet concentration alpha"}
    titles = {"n_tot": f"vs n (alpha = {a0:g}, k = {k0})", "k": f"vs k (alpha = {a0:g}, n = {n_mid})",
              "alpha": f"vs alpha (k = {k0}, n = {n_mid})"}
    for ax, (x, sel) in zip(axes, (("n_tot", (agg.alpha == np.float32(a0)) & (agg.k == k0)),
                                   ("k", (agg.alpha == np.float32(a0)) & (agg.n_tot == n_mid)),
                                   ("alpha", (agg.k == k0) & (agg.n_tot == n_mid)))):
        sub = agg[sel].sort_values(x)
        for m in ("coinpress", "strat", "pub_strat", "strat_add_remove", "reference_code"):
            ax.plot(sub[x], sub[m], "o-", label=label(m), ms=3)
        ax.set_yscale("log")
        ax.set_xlabel(names[x])
        ax.set_ylabel("mean abs. error")
        ax.set_title(titles[x])
        if x == "alpha":
            ax.set_xscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, title="estimator")
    fig.suptitle("Fig. 3: private means of a Gaussian mixture, Dirichlet group sizes", fontsize=10)
    ctx.save_figure(fig, "mixture")


def strata(agg: Any, ctx: Any, variables: list) -> None:
    """Global error and parity error against the number of strata, per variable (Fig. 2); saved as ``strata``."""
    fig, axes = new_figure(len(variables), 2)
    axes = np.asarray(axes).reshape(2, len(variables))
    for j, var in enumerate(variables):
        sub = agg[agg.variable == var].sort_values("k")
        for m in ("coinpress", "strat", "pub_strat"):
            axes[0, j].plot(sub.k, sub["err_" + m], "o", ms=3, label=label(m))
        for m in ("coinpress", "strat"):
            axes[1, j].plot(sub.k, sub["parity_" + m], "o", ms=3, label=label(m))
        axes[0, j].set_title(f"{label(var)}: global error")
        axes[1, j].set_title(f"{label(var)}: parity error")
        for ax in axes[:, j]:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("number of strata")
        axes[0, j].set_ylabel("global |error|")
        axes[1, j].set_ylabel("parity error")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, title="estimator")
    fig.suptitle("Fig. 2: Adult, stratified vs global private means", fontsize=10)
    ctx.save_figure(fig, "strata")


def synthesis(agg: Any, ctx: Any) -> None:
    """Accuracy, parity error and DP ratio against epsilon per synthesizer variant (Figs. 4, 5); saved as ``synthesis``."""
    fig, axes = new_figure(3)
    for var, g in agg.groupby("variant"):
        g = g.sort_values("epsilon")
        for ax, m in zip(axes, ("accuracy", "parity_error", "dp_ratio")):
            ax.plot(g.epsilon, g[m], "o-", ms=3, label=label(var))
            ax.set_xscale("log")
            ax.set_xlabel("epsilon")
            ax.set_ylabel(label(m))
            ax.set_title(label(m))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, title="stratified by")
    fig.suptitle("Figs. 4, 5: stratified private synthetic data", fontsize=10)
    ctx.save_figure(fig, "synthesis")
