"""The tradeoff experiments of paper 004 (Figs 2-4, 6-9; the non-binary Adult stand-in of Fig 5):
every method tuned on validation, frontiers with intervals
(:func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study`), the claims of :mod:`.claims`."""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from . import unit_claims
from .baselines import study_methods, study_search
from .claims import _auto_replicates, _baselines, _claim_id, _frontier_claim, _statement
from .preconditions import precondition_rows, reference_table

__all__ = ["run_tradeoff", "PARKINSONS_ENV"]

PARKINSONS_ENV = "DPFAIR_PARKINSONS_CSV"


def _dataset(config: dict):
    """All rows of the named data set as one Dataset (the study splits and z-scores per replicate),
    or ``(None, reason)``."""
    from dpfair_jax.data import make_dataset, tabular

    path = config.get("path") or None
    if config["dataset"] == "parkinsons":
        path = path or tabular.default_parkinsons_path()
        if not path or not os.path.exists(path):
            return None, (f"Parkinsons CSV not given (set config path=... or ${PARKINSONS_ENV}); "
                          "skipped.")
    kw = {}
    if config.get("target"):
        kw["target"] = config["target"]
    if config.get("groups"):
        kw["groups"] = config["groups"]
    train, test = tabular.load(config["dataset"], seed=0, path=path, standardize=False, **kw)
    cat = {f: np.concatenate([np.asarray(getattr(train, f)), np.asarray(getattr(test, f))]) for f in "xys"}
    ds = make_dataset(cat["x"], cat["y"], cat["s"], num_groups=train.num_groups,
                      num_classes=train.num_classes, info=train.info)
    return ds, ""


def _search(config: dict) -> dict:
    """The candidate grids of the config (learning rate and clip grids shared by every method)."""
    lr, clip = list(config["lr_grid"]), list(config["clip_grid"])
    return {
        "dpsgd": {"lr_theta": lr, "clip_theta": clip},
        "dpfermi": {"lr_theta": lr, "clip_theta": clip, "lr_w": list(config["fermi_lr_w_grid"]),
                    "radius": list(config["fermi_radius_grid"])},
        "pfld_stochastic": {"lr_theta": lr, "clip_theta": clip, "lr_w": list(config["pfld_lr_w_grid"]),
                            "radius": list(config["pfld_box_grid"])},
        "pfld_epoch": {"lr_theta": lr, "clip_theta": clip, "lr_dual": list(config["pfld_dual_lr_grid"]),
                       "radius": list(config["pfld_epoch_box_grid"])},
    }


def _study(ds, config: dict, ctx):
    from dpfair_jax.privacy.selection import RandomStopping
    from dpfair_jax.studies.tradeoff import tradeoff_frontier_study

    fairness = config["fairness"]
    return tradeoff_frontier_study(
        ds, fairness=fairness, methods=study_methods(config), lams=config["lams"], epsilons=config["epsilons"],
        replicates=config["replicates"], epochs=config["epochs"], batch_size=config["batch_size"],
        val_size=config["val_size"], test_size=config["test_size"], max_rows=config.get("max_rows") or None,
        delta=config.get("delta") or None, selection=config["selection"],
        runs=RandomStopping(config["runs_mean"], config["runs_shape"]), search=study_search(config, _search(config)),
        score_noise=config["score_noise"], w_noise_ratio=config["w_noise_ratio"],
        violation_noise_ratio=config["violation_noise_ratio"], privacy_unit=config.get("privacy_unit", "example"),
        seed=ctx.seed, ctx=ctx)


def run_tradeoff(config: dict, ctx) -> pd.DataFrame | None:
    """The DP / EO fairness-error tradeoff study of one dataset (Figs 2-4, 6-9)."""
    ds, reason = _dataset(config)
    fairness = config["fairness"]
    metric = "dp_violation" if fairness == "dp" else "eo_violation"
    if ds is None:
        ctx.log(reason)
        for b in _baselines(config):
            ctx.skip_claim(_claim_id(ctx.name, b), _statement(config, b, metric), reason, target="effect > 0")
        return None
    ctx.log(f"{config['dataset']}: {ds!r}")

    def study(cfg: dict):
        return _study(ds, cfg, ctx)

    if config["replicates"] == "auto" or config.get("auto_replicates"):
        count, found = _auto_replicates(dict(config, _name=ctx.name), study)
        ctx.log(f"replicates='auto': pilot of {config['pilot_replicates']} splits ({found}); running {count} "
                f"(budget {config['max_replicates']})")
        config = dict(config, replicates=count)
    res = study(config)
    df = res.table.copy()
    df.insert(0, "dataset", config["dataset"])
    ctx.save_table(df, "results")
    ctx.save_table(res.frontier(), "frontier")
    fig = res.plot(title=f"{config['dataset']}: {fairness.upper()} violation vs test error, tuned on "
                         f"validation ({res.info['selection']})")
    ctx.save_figure(fig, f"tradeoff_{config['dataset']}_{fairness}")
    ctx.save_table(_violation_at_levels(res.table, config, ctx.seed), "violation_at_error")
    degenerate = df.groupby("method")["degenerate"].mean().round(3).to_dict()
    ctx.log(f"degenerate rows (constant or base-rate error) per method: {degenerate}")
    if {"dpfermi", "dpsgd"} <= set(config["methods"]):  # descriptive: per epsilon, bootstrap intervals
        ctx.save_table(res.compare(first="dpfermi", anchor="dpsgd", slack=config["slack"],
                                   bootstrap=config["bootstrap"], seed=ctx.seed), "frontier_comparison")
    gates = _preconditions(ctx, config, res, ds)
    _frontier_claim(ctx, config, res, metric, gates)
    unit_claims.record(ctx, config, res)
    return df


def _preconditions(ctx, config: dict, res, ds) -> dict[str, str]:
    """The convergence precondition rows (:mod:`.preconditions`) on the study's table and the
    non-private reference optimum of the ERMI objective on the same splits (binary tasks: the
    reference solver's Newton steps need the full Hessian, too large for the multinomial model)."""
    ref, why = None, ""
    if ds.num_classes == 2:
        t0 = time.perf_counter()
        ref = reference_table(ds, config, ctx.seed)
        ctx.save_table(ref, "reference_optimum")
        ctx.log(f"reference optimum of the ERMI objective: {ref['lam'].nunique()} lambdas x "
                f"{ref['replicate'].nunique()} splits, max gradient norm {ref['grad_norm'].max():.3g}, "
                f"{time.perf_counter() - t0:.1f} s")
    else:
        why = (f"no reference for {ds.num_classes} classes: the reference solver (float64 Newton steps) is "
               "run for the binary logistic model only")
    return precondition_rows(ctx, config, res.table, ref, why)


def _violation_at_levels(table: pd.DataFrame, config: dict, seed: int) -> pd.DataFrame:
    """Each method's frontier read at DP-SGD's mean error + {0, slack / 2, slack, 2 slack} per epsilon,
    with bootstrap intervals over splits (:func:`dpfair_jax.fairness.frontier.violation_at_error`)."""
    from dpfair_jax.fairness.frontier import violation_at_error

    if "dpsgd" not in set(table["method"]):
        return pd.DataFrame()
    out = []
    for e, sub in table.groupby("epsilon"):
        e0 = float(sub[sub["method"] == "dpsgd"]["error"].mean())
        levels = e0 + config["slack"] * np.asarray([0.0, 0.5, 1.0, 2.0])
        part = violation_at_error(sub, levels, replicate="replicate", bootstrap=config["bootstrap"], seed=seed)
        out.append(part.assign(anchor_error=e0, offset=part["level"] - e0))
    return pd.concat(out, ignore_index=True)
