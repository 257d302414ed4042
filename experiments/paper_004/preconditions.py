"""Convergence preconditions of the paper-004 tradeoff claims: one row per (method, check), status
"holds" or "fails" for the precondition itself; a frontier claim resting on a method whose
preconditions do not all hold is *untestable* (never *fails*; :func:`.claims.gate_reason`).

Checks (README, "Preconditions"):

* ``reference`` (DP-FERMI at every lambda, DP-SGD at lambda = 0): the method's tuned run at
  ``eps = inf`` (the same program, no noise) against the non-private reference optimum of the ERMI
  objective on the same splits (:func:`dpfair_jax.studies.tradeoff.convergence.reference_optimum`):
  per lambda, the mean test error over splits at most ``converge_tol`` above the reference's and
  the mean violation at most ``converge_tol_violation`` above it; the reference itself must be
  stationary (gradient norm <= ``REFERENCE_GRAD_TOL``).
* ``monotone`` (every fair method): the ``eps = inf`` tuned frontier's violation is shown not to
  rise in lambda (:func:`monotone_rise`): for each pair of adjacent lambdas, the one-sided upper
  bound (t-interval over splits, Bonferroni over the pairs at ``alpha``) of the *mean* paired
  increase must be at most ``converge_tol_violation``. A rise is thus judged on the interval of
  the mean across splits: one outlier split widens that interval and makes the check fail (the
  rise is not ruled out), where a "no significant rise" test would pass it for want of power.
  With one split the point increase must be at most 0.
* ``lr_edge`` (every method): at most ``lr_edge_max_share`` of the method's selected runs (all
  epsilons, lambdas, splits) use the largest learning rate of the grid; more means the grid is too
  narrow for the method to reach its optimum.

Privacy: diagnostics on non-private (``eps = inf``) runs and a non-private reference; nothing here
is released with a private row's guarantee.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pandas as pd

from .claims import _claim

__all__ = ["REFERENCE_GRAD_TOL", "reference_table", "monotone_rise", "precondition_rows"]

#: gradient norm below which the reference optimum counts as stationary (float64 Newton reaches ~1e-12)
REFERENCE_GRAD_TOL = 1e-6

_FAIR = ("dpfermi", "pfld_stochastic", "pfld_epoch")


def reference_table(ds, config: dict, seed: int) -> pd.DataFrame:
    """The reference optimum per (replicate, lambda in {0} + the config's lambdas) on the study's own
    splits (:func:`~dpfair_jax.studies.tradeoff.replicate_splits` with the study's arguments): its
    test ``error``, ``violation`` (the config's metric), objective and gradient norm."""
    from dpfair_jax import models as M
    from dpfair_jax.fairness import evaluate
    from dpfair_jax.studies.tradeoff import replicate_splits
    from dpfair_jax.studies.tradeoff.convergence import reference_optimum

    sp = replicate_splits(ds, replicates=config["replicates"], val_size=config["val_size"],
                          test_size=config["test_size"], seed=seed, max_rows=config.get("max_rows") or None)
    lams = sorted({0.0} | {float(v) for v in config["lams"]})
    model = M.logistic()
    x, y, s = sp["train"]
    ref = reference_optimum(model, x, y, s, lams, num_groups=ds.num_groups, num_classes=2,
                            fairness=config["fairness"], iters=int(config["reference_iters"]))
    tx, ty, ts = (np.asarray(a) for a in sp["test"])
    metric = "dp_violation" if config["fairness"] == "dp" else "eo_violation"
    rows = []
    for r in range(x.shape[0]):
        test = ds.replace(x=tx[r], y=ty[r], s=ts[r], mask=None)
        params_r = jax.tree_util.tree_map(lambda a, r=r: a[r], ref["params"])
        ev = jax.vmap(lambda p, test=test: evaluate(model, p, test, 2))(params_r)
        for li, lam in enumerate(lams):
            rows.append({"replicate": r, "lam": lam, "error": float(ev["error"][li]),
                         "violation": float(ev[metric][li]), "objective": float(ref["objective"][r, li]),
                         "grad_norm": float(ref["grad_norm"][r, li])})
    return pd.DataFrame(rows)


def _reference_check(table: pd.DataFrame, ref: pd.DataFrame, method: str, config: dict) -> tuple[bool, dict, str]:
    """The method's ``eps = inf`` runs against the reference per lambda (mean over splits)."""
    sub = table[(table["method"] == method) & np.isinf(table["epsilon"])]
    tol_e, tol_v = float(config["converge_tol"]), float(config["converge_tol_violation"])
    per, bad = [], []
    for lam, part in sub.groupby("lam"):
        rf = ref[np.isclose(ref["lam"], lam)]
        e, v = float(part["error"].mean()), float(part["violation"].mean())
        re, rv = float(rf["error"].mean()), float(rf["violation"].mean())
        ok = e <= re + tol_e and v <= rv + tol_v
        per.append({"lam": float(lam), "error": round(e, 4), "reference_error": round(re, 4),
                    "violation": round(v, 4), "reference_violation": round(rv, 4), "ok": ok})
        if not ok:
            bad.append(f"lambda {lam:g}: error {e:.4f} vs {re:.4f}, violation {v:.4f} vs {rv:.4f}")
    grad = float(ref["grad_norm"].max())
    measured = {"per_lambda": per, "reference_max_grad_norm": grad}
    if grad > REFERENCE_GRAD_TOL:
        return False, measured, f"the reference optimum is not stationary (gradient norm {grad:.3g})"
    if not per:
        return False, measured, "no eps = inf runs of this method (the grid needs epsilon = inf)"
    return not bad, measured, "; ".join(bad)


def monotone_rise(sub: pd.DataFrame, *, alpha: float, tol: float) -> dict:
    """Whether the violation of ``sub`` (columns ``lam``, ``replicate``, ``violation``) is shown not
    to rise in lambda: :func:`~dpfair_jax.studies.tradeoff.convergence.monotone_check` with
    ``tol`` (every pair's one-sided upper bound of the mean increase at most ``tol``; one split:
    the point increase at most 0). Returns ``{"monotone", "pairs", "worst"}``."""
    from dpfair_jax.studies.tradeoff.convergence import monotone_check

    return monotone_check(sub, alpha=alpha, tol=tol)


def _monotone(table: pd.DataFrame, method: str, config: dict) -> tuple[bool, dict, str]:
    sub = table[(table["method"] == method) & np.isinf(table["epsilon"]) & (table["lam"] > 0)]
    if sub["lam"].nunique() < 2:  # vacuous: nothing to order
        return True, {"pairs": [], "note": f"{sub['lam'].nunique()} lambda(s) > 0 at eps = inf: nothing to order"}, ""
    tol = float(config["converge_tol_violation"])
    res = monotone_rise(sub, alpha=float(config["alpha"]), tol=tol)
    pairs = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in p.items()} for p in res["pairs"]]
    w = res["worst"]
    why = "" if res["monotone"] else (
        f"violation may rise from lambda {w['from']:g} to {w['to']:g}: mean increase {w['increase']:.4f} over "
        f"{w['replicates']} split(s), " + (f"upper bound {w['upper']:.4f} > tolerance {tol:g}" if w["replicates"] > 1
                                            else "one split: no interval, and the increase is above 0")
        + f" (largest single split's increase {w['max_split_increase']:.4f})")
    return res["monotone"], {"pairs": pairs, "tolerance": tol}, why


def _lr_edge(table: pd.DataFrame, method: str, config: dict) -> tuple[bool, dict, str]:
    from dpfair_jax.studies.tradeoff.convergence import edge_share

    sub = table[table["method"] == method]
    share = edge_share(sub["hp_lr_theta"], config["lr_grid"])
    cap = float(config["lr_edge_max_share"])
    measured = {"share_at_top_lr": round(share, 4), "top_lr": float(max(config["lr_grid"])), "selections": len(sub)}
    ok = math.isfinite(share) and share <= cap
    return ok, measured, "" if ok else (f"{100 * share:.0f}% of the selections take the largest learning rate "
                                        f"{max(config['lr_grid']):g} (at most {100 * cap:.0f}%): the grid is too narrow")


def precondition_rows(ctx, config: dict, table: pd.DataFrame, ref: pd.DataFrame | None,
                      ref_reason: str = "") -> dict[str, str]:
    """Record the precondition rows of every method of ``table``; returns ``{method: reason}`` for the
    methods whose preconditions do not all hold (the gate of their claims)."""
    epochs = config["epochs"]
    gates: dict[str, list[str]] = {}
    for m in config["methods"]:
        checks = []
        if m in ("dpfermi", "dpsgd"):
            checks.append(("reference", "reaches the non-private reference optimum of the ERMI objective at "
                           f"eps = inf (mean test error <= reference + {config['converge_tol']:g}, violation <= "
                           f"reference + {config['converge_tol_violation']:g}, at every lambda)", None))
        if m in _FAIR:
            checks.append(("monotone", "has an eps = inf tuned frontier whose violation is non-increasing in "
                           "lambda within its interval", _monotone))
        checks.append(("lr_edge", f"selects the grid's largest learning rate in at most "
                       f"{100 * float(config['lr_edge_max_share']):.0f}% of its runs", _lr_edge))
        for check, what, fn in checks:
            cid = f"{ctx.name}_precondition_{m}_{check}"
            statement = f"Precondition: {m} ({epochs} epochs) {what}"
            if check == "reference" and ref is None:
                _claim(ctx, cid, statement, None, "reference available", "untestable", ref_reason)
                gates.setdefault(m, []).append(f"{check}: {ref_reason}")
                continue
            ok, measured, why = (_reference_check(table, ref, m, config) if fn is None else fn(table, m, config))
            _claim(ctx, cid, statement, measured, check, "holds" if ok else "fails", why)
            if not ok:
                gates.setdefault(m, []).append(f"{check}: {why}")
    return {m: "; ".join(v) for m, v in gates.items()}
