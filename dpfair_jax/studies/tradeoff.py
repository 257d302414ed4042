"""The fairness-error tradeoff study of DP-FERMI and PF-LD (paper 004, Figs 2-9), as library pieces.

- :func:`tradeoff_study`: one method (``"dpfermi"`` or ``"pfld"``) over seeds x lambda x epsilon as
  one compiled program per seed block: lambda and the noise multipliers are traced (vmap over the
  grid), epsilon enters as noise multipliers calibrated on the host by the kit's accountant
  (:func:`dpfair_jax.algorithms.fermi.calibrate`), and the runs of one seed share their batches
  (common random numbers). One row per (epsilon, lambda, seed) with the test error and violations
  of :func:`dpfair_jax.algorithms.fermi.evaluate` (paper 004 eqs. 10, 11).
- :func:`equal_error_table`: the "equal error" comparison of Figs 2-9: at each epsilon, ``e0`` is
  the mean test error of lambda = 0; among each method's grid points with mean error at most
  ``e0 + error_slack`` take the lowest mean violation. :func:`baseline_name` names the lambda = 0
  point of a privacy unit.
- :func:`plot_tradeoff`: violation against error per method, one panel per epsilon, with 95%
  Student-t intervals over seeds.

Privacy: every finite-epsilon point of :func:`tradeoff_study` is (epsilon, delta)-DP for the
privacy unit ``unit`` under add/remove (the calibration and spend of
:func:`dpfair_jax.algorithms.fermi.privacy` for the config the study builds); with ``ctx`` the
spend of each epsilon is recorded (``ctx.record_privacy``). An infinite epsilon is a non-private
run (no noise). The table and plot helpers read released results only.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax import montecarlo as MC
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.runner import plots

__all__ = ["tradeoff_study", "baseline_name", "equal_error_table", "plot_tradeoff"]

_PREPROCESSING = ("the tabular loader standardizes the features with the training split's moments, "
                  "computed from the private data without noise (docs/trust.md); the spend covers "
                  "training only")


def _method_fns(method: str):
    if method == "dpfermi":
        return F.FermiConfig, F.fit
    if method == "pfld":
        return pfld.config, pfld.fit
    raise ValueError(f"unknown method {method!r}; use 'dpfermi' or 'pfld'.")


def tradeoff_study(train, test, *, method: str, model, fairness: str, lams, epsilons, seeds: int,
                   epochs: int, batch_size: int, delta: float, hp: dict, seed: int = 0,
                   seed_block: int | None = None, unit: str = "all_features",
                   map_chunks=None, ctx=None) -> pd.DataFrame:
    """Run ``method`` over seeds x lams x epsilons; one row per (epsilon, lambda, seed).

    ``hp``: lr_theta, lr_w, clip_theta, clip_w, radius (shared by the grid). ``map_chunks`` (e.g.
    ``ctx.map_chunks``) makes the seed blocks resumable. ``unit``: the privacy unit of every method
    of the study (the lambda = 0 point is DP-SGD under ``"all_features"``, and a non-private model
    that ignores ``s`` under ``"sensitive_attribute"``).

    Data, config and hyperparameters are checked by ``fit`` itself when the grid program is traced
    (before any compute): the data once, the shared step sizes, clip norms and radius on the host.

    Privacy: each finite epsilon is (epsilon, delta)-DP for ``unit`` under add/remove (module
    docstring); ``ctx.record_privacy`` receives each spend when ``ctx`` is given.
    """
    make_cfg, fit = _method_fns(method)
    n = train.n
    steps = epochs * math.ceil(n / batch_size)
    cfg = make_cfg(model=model, num_groups=train.num_groups, num_classes=max(train.num_classes, 2),
                   steps=steps, batch_size=batch_size, fairness=fairness, privacy_unit=unit)
    cfg.validate(n)
    eps = [float(e) for e in epsilons]
    zs = [F.calibrate(cfg, n, e, delta) for e in eps]
    if ctx is not None:
        for e, (zt, zw) in zip(eps, zs):
            if math.isfinite(e):
                ctx.record_privacy(f"{method}_{fairness}_eps{e:g}", F.privacy(cfg, n, zt, zw, delta),
                                   not_covered=_PREPROCESSING)
    lam_g, eps_g = np.meshgrid(np.asarray(lams, float), np.arange(len(eps)), indexing="ij")
    lam_g, eps_i = lam_g.ravel(), eps_g.ravel()
    zt_g = np.asarray([zs[i][0] for i in eps_i], np.float32)
    zw_g = np.asarray([zs[i][1] for i in eps_i], np.float32)
    lam_a, zt_a, zw_a = (jnp.asarray(a, jnp.float32) for a in (lam_g, zt_g, zw_g))
    G = lam_a.shape[0]
    base = F.FermiHparams(lr_theta=hp["lr_theta"], lr_w=hp["lr_w"], clip_theta=hp["clip_theta"],
                          clip_w=hp["clip_w"], radius=hp["radius"])
    num_classes = cfg.num_classes

    def one_seed(key):
        bkey = jax.random.fold_in(key, 7)

        def point(g, lam, zt, zw):
            h = base._replace(lam=lam, noise_theta=zt, noise_w=zw)
            r = fit(jax.random.fold_in(key, g), train, h, cfg, batch_key=bkey)
            out = F.evaluate(cfg.model, r.params, test, num_classes)
            out["truncated_steps"] = r.diagnostics["truncated_steps"]
            return out

        return jax.vmap(point)(jnp.arange(G), lam_a, zt_a, zw_a)

    block = seeds if seed_block is None else max(1, min(seed_block, seeds))
    starts = list(range(0, seeds, block))

    def compute(chunk: dict) -> pd.DataFrame:
        s0, s1 = chunk["seed_start"], min(chunk["seed_start"] + block, seeds)
        t0 = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(seed), s0)
        res = MC.run_trials(one_seed, key, s1 - s0)
        res = jax.tree_util.tree_map(np.asarray, jax.block_until_ready(res))
        rows = []
        for si in range(s1 - s0):
            for g in range(G):
                row = {"method": method, "fairness": fairness, "unit": unit, "epsilon": eps[eps_i[g]],
                       "lam": float(lam_g[g]), "seed": s0 + si}
                row.update({k: float(v[si, g]) for k, v in res.items()})
                rows.append(row)
        if ctx is not None:
            ctx.log(f"{method}/{fairness}: seeds {s0}-{s1 - 1} x {G} grid points, {steps} steps: "
                    f"{time.perf_counter() - t0:.1f} s")
        return pd.DataFrame(rows)

    chunks = [{"method": method, "fairness": fairness, "seed_start": s} for s in starts]
    if map_chunks is None:
        return pd.concat([compute(c) for c in chunks], ignore_index=True)
    return map_chunks(chunks, compute, desc=f"{method}_{fairness}")


def baseline_name(unit: str) -> str:
    """Name of the lambda = 0 point: DP-SGD when every feature is protected (the task loss is
    clipped and noised); under the sensitive-attribute unit nothing is noised at lambda = 0 and ``s``
    is unused, so it is a non-private model, never "DP-SGD"."""
    return "dpsgd" if unit == "all_features" else "nonprivate_s_unused"


def equal_error_table(df: pd.DataFrame, metric: str, error_slack: float) -> pd.DataFrame:
    """Per epsilon and method: the lowest mean ``metric`` among grid points whose mean error is at
    most ``e0 + error_slack`` (``e0``: mean error of lambda = 0). The lambda = 0 point is named by
    :func:`baseline_name` of the study's unit (all methods of a study share one unit)."""
    units = sorted(df["unit"].unique()) if "unit" in df else ["all_features"]
    if len(units) != 1:
        raise ValueError(f"a comparison needs one privacy unit for every method, got {units}.")
    base = baseline_name(units[0])
    mean = df.groupby(["epsilon", "method", "lam"], as_index=False)[["error", metric]].mean()
    rows = []
    for e, sub in mean.groupby("epsilon"):
        zero = sub[sub["lam"] == 0]
        e0 = float(zero["error"].mean())
        rows.append({"epsilon": e, "method": base, "best_violation": float(zero[metric].mean()),
                     "error": e0, "budget": e0 + error_slack})
        for meth, part in sub.groupby("method"):
            ok = part[part["error"] <= e0 + error_slack]
            best = ok.loc[ok[metric].idxmin()] if len(ok) else None
            rows.append({"epsilon": e, "method": meth,
                         "best_violation": float("nan") if best is None else float(best[metric]),
                         "error": float("nan") if best is None else float(best["error"]),
                         "lam": float("nan") if best is None else float(best["lam"]),
                         "budget": e0 + error_slack})
    return pd.DataFrame(rows)


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

