"""Figures of the paper-002 bounded-group-loss studies: objective, violation and h against epsilon."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax.runner import plots

__all__ = ["bgl", "crossover", "eo_exact", "scaling"]


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


def eo_exact(df: Any, ctx: Any, name: str, *, eps_bound: float, level: float = 0.9) -> None:
    """Algorithm 1's exact success probability against epsilon (``p_success_vs_epsilon``: against the
    best feasible grid decision and against the best mixture, the explicit Thm 3.6 epsilon dashed)
    and its exact expected test error and EO gap (``test_error_vs_epsilon``, ``test_eo_gap_vs_epsilon``;
    dashed: non-private Frank-Wolfe)."""
    a1 = df[df.method == "exp_sampling"].sort_values("epsilon")
    fig, axes = plots.new_figure(1, 1, panel_size=(4.2, 3.0))
    ax = axes[0]
    ax.semilogx(a1.epsilon, a1.p_success, label="vs best grid decision (Thm 5.2's c*)")
    ax.semilogx(a1.epsilon, a1.p_success_vs_mixture, "--", label="vs best mixture of grid decisions")
    ax.axhline(level, color="k", lw=0.7)
    ax.axvline(eps_bound, color="gray", ls=":", label="Thm 3.6 + Cor 4.2 sufficient epsilon")
    ax.set_xlabel("epsilon")
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("P(f <= f* + alpha, g <= alpha)")
    ax.set_title(f"{name}: Alg. 1, exact output law")
    plots.legend_outside(ax)
    ctx.save_figure(fig, "p_success_vs_epsilon")
    fw = df[df.method == "frank_wolfe"]
    for col in ("test_error", "test_eo_gap"):
        fig, axes = plots.new_figure(1, 1, panel_size=(4.2, 3.0))
        ax = axes[0]
        ax.semilogx(a1.epsilon, a1[col], label="Alg. 1 (expectation under its output law)")
        if len(fw):
            ax.axhline(float(fw[col].iloc[0]), color="k", ls="--", lw=0.8, label="Frank-Wolfe (non-private)")
        for meth, sub in df[df.method.astype(str).str.startswith("dpfermi")].groupby("method"):
            m = sub.groupby("epsilon")[col].mean()
            lam = str(meth)[len("dpfermi_lam"):]
            ax.semilogx(m.index, m.to_numpy(), "o-", label=f"DP-FERMI, lambda = {lam}" if lam else plots.label(meth))
        ax.set_xlabel("epsilon")
        ax.set_ylabel(col.replace("_", " "))
        ax.set_title(f"{name}: EO via the reduction")
        plots.legend_outside(ax)
        ctx.save_figure(fig, f"{col}_vs_epsilon")


def scaling(df: Any, ctx: Any) -> None:
    """``sample_complexity``: n0 against 1/alpha per K (log-log): Algorithm 1's exact n0, its explicit
    Thm 3.6 sufficient n and the n Algorithm 2's analysis needs."""
    fig, axes = plots.new_figure(3, 1, panel_size=(3.4, 2.8))
    for ax, (col, title) in zip(axes, (("n0_alg1", "Alg. 1, exact n0"), ("n0_alg1_bound", "Alg. 1, Thm 3.6 bound"),
                                       ("n0_alg2_analysis", "Alg. 2, its analysis (T of Thm 5.5)"))):
        for K, sub in df.groupby("K"):
            sub = sub.sort_values("inv_alpha")
            ax.loglog(sub.inv_alpha, sub[col], "o-", label=f"K={K}")
        ax.set_xlabel("1/alpha")
        ax.set_ylabel("n0")
        ax.set_title(title)
        plots.legend_outside(ax)
    ctx.save_figure(fig, "sample_complexity")


def crossover(ctx: Any, rs: list[float], *, num_groups: int = 2, vc: float = 1.0, epsilon: float = 1.0,
              alpha_fixed: float = 0.01) -> Any:
    """Sec. 8's crossover (closed forms, constants 1 and logarithms omitted; no intervals: nothing is
    sampled). Left: the sample complexity ``n_0`` against the target error ``alpha`` at ``|A| =
    num_groups``, VC dimension ``vc`` and ``epsilon``: the reduction's (Cor. 8.9), Jagielski et al.'s
    for each ``r`` in ``rs`` (Cor. C.2) and the lower bound ``sqrt(K) / (epsilon alpha)`` with ``K =
    3 |A|`` (Thm. 6.2). Right: the ratio of Jagielski et al.'s ``n_0`` to the reduction's against ``|A|``
    at ``alpha = alpha_fixed`` (the reduction needs fewer rows above 1). Saved as ``crossover``."""
    from dpfair_jax.analysis import sample_complexity as S

    alphas = np.geomspace(1e-3, 0.5, 60)
    fig, axes = plots.new_figure(1, 2, panel_size=(7.2, 3.0))  # stacked: each legend to the right of its panel
    ax = axes[0]
    ax.loglog(alphas, S.eo_reduction_n0(num_groups, vc, epsilon, alphas),
              label="reduction (Cor. 8.9): |A|^4 VC / (epsilon alpha^3)")
    for r in rs:
        ax.loglog(alphas, S.jagielski_n0(num_groups, vc, epsilon, alphas, r), "--",
                  label=f"Jagielski et al. (Cor. C.2), r = {r:g}")
    ax.loglog(alphas, S.lower_bound_n_approx(3 * num_groups, epsilon, alphas), ":",
              label="lower bound (Thm. 6.2): sqrt(K) / (epsilon alpha)")
    ax.set_xlabel("target error alpha")
    ax.set_ylabel("rows needed n0")
    ax.set_title(f"|A| = {num_groups}, VC = {vc:g}, epsilon = {epsilon:g}")
    plots.legend_outside(ax, fontsize=6)
    ax = axes[1]
    groups = np.arange(2, 200)
    for r in rs:
        ax.loglog(groups, S.jagielski_over_reduction(groups, alpha_fixed, r), label=f"r = {r:g}")
    ax.axhline(1.0, color="k", lw=0.8, label="equal (ratio 1)")
    ax.set_xlabel("number of groups |A|")
    ax.set_ylabel("n0 ratio: Jagielski et al. / reduction")
    ax.set_title(f"alpha = {alpha_fixed:g}; above 1 the reduction needs fewer rows")
    plots.legend_outside(ax, fontsize=6)
    fig.suptitle("Sample complexity, Sec. 8 (constants 1, logs omitted)")
    ctx.save_figure(fig, "crossover")
    return fig
