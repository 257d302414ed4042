"""The tradeoff experiments of paper 004 (Figs 2-4, 6-9; the non-binary Adult stand-in of Fig 5):
every method tuned on validation, frontiers with intervals
(:func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study`), the claims of :mod:`.claims`."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from .claims import _auto_replicates, _baselines, _claim, _claim_id, _frontier_claim, _statement

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


def _newton_logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1e-6, iters: int = 25) -> np.ndarray:
    """Weights ``[d + 1]`` (bias last) of L2-regularized logistic regression by Newton's method (the
    exact optimum to float64 precision after a few iterations on standardized tabular data)."""
    X = np.c_[x, np.ones(len(x))]
    w = np.zeros(X.shape[1])
    reg = ridge * np.r_[np.ones(x.shape[1]), 0.0]
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (p - y) / len(y) + reg * w
        H = (X * (p * (1 - p))[:, None]).T @ X / len(y) + np.diag(reg + 1e-12)
        step = np.linalg.solve(H, g)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return w


def _reference_error(ds, config: dict, seed: int) -> float:
    """Mean test error over the study's replicates of a converged non-private logistic regression
    (Newton's method) on the same splits: what a converged lambda = 0 model reaches."""
    from dpfair_jax.studies.tradeoff import replicate_splits

    sp = replicate_splits(ds, replicates=config["replicates"], val_size=config["val_size"],
                          test_size=config["test_size"], seed=seed, max_rows=config.get("max_rows") or None)
    errs = []
    for r in range(config["replicates"]):
        w = _newton_logistic(sp["train"][0][r], sp["train"][1][r].astype(float))
        pred = (np.c_[sp["test"][0][r], np.ones(len(sp["test"][1][r]))] @ w > 0).astype(int)
        errs.append(float(np.mean(pred != sp["test"][1][r])))
    return float(np.mean(errs))


def _study(ds, config: dict, ctx):
    from dpfair_jax.privacy.selection import RandomStopping
    from dpfair_jax.studies.tradeoff import tradeoff_frontier_study

    fairness = config["fairness"]
    return tradeoff_frontier_study(
        ds, fairness=fairness, methods=config["methods"], lams=config["lams"], epsilons=config["epsilons"],
        replicates=config["replicates"], epochs=config["epochs"], batch_size=config["batch_size"],
        val_size=config["val_size"], test_size=config["test_size"], max_rows=config.get("max_rows") or None,
        delta=config.get("delta") or None, selection=config["selection"],
        runs=RandomStopping(config["runs_mean"], config["runs_shape"]), search=_search(config),
        score_noise=config["score_noise"], w_noise_ratio=config["w_noise_ratio"],
        violation_noise_ratio=config["violation_noise_ratio"], seed=ctx.seed, ctx=ctx)


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
    _frontier_claim(ctx, config, res, metric)
    if "dpsgd" in config["methods"] and ds.num_classes == 2:
        _converged_claim(ctx, config, res, ds)
    elif "dpsgd" in config["methods"]:
        ctx.log("convergence check of DP-SGD: the reference (Newton logistic regression) is binary; skipped "
                f"for {ds.num_classes} classes")
    return df


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


def _converged_claim(ctx, config: dict, res, ds) -> None:
    """The lambda = 0 baseline is trained to convergence: DP-SGD's error at the largest epsilon of
    the grid within ``converge_tol`` of a converged non-private logistic regression."""
    table = res.table[res.table["method"] == "dpsgd"]
    e_max = max(table["epsilon"])
    err = float(table[table["epsilon"] == e_max]["error"].mean())
    ref = _reference_error(ds, config, ctx.seed)
    tol = config["converge_tol"]
    cid = f"{ctx.name}_dpsgd_converged"
    statement = (f"The lambda = 0 baseline is converged: DP-SGD (tuned on validation) at epsilon = {e_max:g} "
                 f"reaches a mean test error within {tol:g} of a converged non-private logistic regression on the "
                 f"same splits (error budget of the frontier comparison anchored to it)")
    measured = {"dpsgd_error": round(err, 4), "reference_error": round(ref, 4)}
    if err <= ref + tol:
        _claim(ctx, cid, statement, measured, f"<= reference + {tol:g}", "holds")
    else:
        _claim(ctx, cid, statement, measured, f"<= reference + {tol:g}", "fails",
               f"DP-SGD's error {err:.4f} exceeds the converged reference {ref:.4f} by more than {tol:g} "
               f"({config['epochs']} epochs; at this size the baseline has not converged)")
