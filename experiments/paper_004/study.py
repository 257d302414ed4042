"""Paper 004 (Lowy, Gupta, Razaviyayn, ICLR 2023): DP-FERMI experiments.

Registered experiments (``dpfair run NAME [--quick]``):

* ``fermi_adult_dp`` / ``fermi_credit_dp`` / ``fermi_parkinsons_dp`` (Figs 2, 7, 3/8): demographic
  parity (eq. 10); ``fermi_adult_eo`` / ``fermi_credit_eo`` (Figs 9, 4): equalized odds (eq. 11).
  Four methods under one example-level unit, epsilon and delta: DP-FERMI, PF-LD as Tran et al.
  specify it (per-epoch dual updates), a stochastic PF-LD-style variant and DP-SGD (lambda = 0),
  over a lambda grid log-spaced up to 40 and several train/validation/test splits
  (:func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study`). Every method is tuned per
  (epsilon, lambda, split) on validation by accounted random stopping with the same budget; the
  selection's cost is inside each run's epsilon. Claims: one per baseline, "DP-FERMI reaches a
  lower violation at equal error", decided by the verdict rule (``dpfair_jax.runner.verdict``) on one
  paired effect per split (``dpfair_jax.fairness.frontier.paired_violation_gap``) against the
  paper's own margin from its result files (``config.PAPER_MARGINS``; PF-LD is the paper's
  baseline, the stochastic variant and DP-SGD the kit's own rows), with the splits each claim
  needs (``replicates="auto"``: pilot, then that count within ``max_replicates``); and the
  lambda = 0 baseline's convergence against a non-private logistic regression.
* ``fermi_official_code``: the public code's preset (one-cell ERMI with the group of cell 0 named,
  its clipping, random W0, its calibration) as a regression test on the shape of its curves.
* ``fermi_adult_nonbinary``: 9 age buckets x 5 race groups on Adult with multinomial logistic
  regression (tabular stand-in for UTK-Face, Fig 5's setting), through the same study.
* ``fermi_cnn_synthetic``: a small CNN on a synthetic image task (3 classes x 3 groups) with
  batch 32: DP-FERMI converges with small batches and non-binary Y and S (Fig 5's claim).
* ``sgda_convergence``: DP-SGDA on a synthetic nonconvex-strongly-concave problem; the stationarity
  gap vs n and epsilon against Theorem E.3's rate ``sqrt(d) / (eps n)``.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax.algorithms.fermi.theory import official_dpfermi_calibration
from dpfair_jax.fairness import evaluate
from dpfair_jax.runner import Experiment, plots, register
from dpfair_jax.studies.tradeoff import plot_tradeoff

from . import unit_claims
from .config import CONFIGS

__all__ = ["run_tradeoff", "run_official_code", "run_sgda_convergence", "run_cnn_synthetic", "EXPERIMENTS"]

PARKINSONS_ENV = "DPFAIR_PARKINSONS_CSV"


# ------------------------------------------------------------------------------------------------
# the tradeoff study: every method tuned on validation, frontiers with intervals
# (dpfair_jax.studies.tradeoff.tradeoff_frontier_study)
# ------------------------------------------------------------------------------------------------
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


def _claim(ctx, cid: str, statement: str, measured, target, status: str, reason: str | None = None,
           met: bool | None = None) -> None:
    """A claim row: ``status`` "holds", "fails" or "untestable" with a reason for every status but
    "holds"; ``met`` (default: status is "holds") is whether the measurement met the target."""
    ctx.add_claim(cid, statement, measured=measured, target=target,
                  passed=(status == "holds") if met is None else bool(met),
                  reason=None if status == "holds" else reason, status=status)


#: Which comparisons are the paper's (its baseline, Tran et al.'s PF-LD) and which the kit's own.
_ROLE = {"pfld_epoch": "the paper's baseline (PF-LD as Tran et al. specify it)",
         "pfld_stochastic": "the kit's own comparison (its stochastic PF-LD-style variant, not the paper's baseline)",
         "dpsgd": "the kit's own comparison (DP-SGD, lambda = 0)"}


def _claim_id(name: str, baseline: str) -> str:
    return f"{name}_lower_violation_vs_{baseline}"


def _baselines(config: dict) -> list[str]:
    return [m for m in ("pfld_epoch", "pfld_stochastic", "dpsgd") if m in config["methods"]]


def _slack(config: dict, baseline: str) -> float:
    """0 against PF-LD (the paper's reading at the baseline's error); DP-SGD (more accurate than every
    lambda > 0) is read at its error + the config's slack."""
    return float(config["slack"]) if baseline == "dpsgd" else 0.0


def _statement(config: dict, baseline: str, metric: str) -> str:
    from dpfair_jax.studies.tradeoff import METHOD_LABELS

    slack = _slack(config, baseline)
    at = "its error" if slack == 0 else f"its error + {slack:g}"
    finite = [e for e in config["epsilons"] if math.isfinite(e)]
    return (f"DP-FERMI reaches a lower {metric} than {METHOD_LABELS[baseline]} at equal test error "
            f"({_ROLE[baseline]}): each point of the baseline against DP-FERMI's frontier of the same split read "
            f"at {at}, averaged over the finite epsilons {finite} and the baseline's lambdas, one paired effect "
            f"per split; every method tuned on validation with the same random-stopping budget, the same "
            f"example-level unit, epsilon and delta ({config['dataset']}, {config['fairness'].upper()}; paper "
            f"Figs 2-4, 6-9)")


def _paper_effect(name: str, baseline: str):
    from dpfair_jax.runner.verdict import PaperEffect

    from .config import PAPER_MARGINS

    entry = PAPER_MARGINS.get(name, {}).get(baseline)
    if entry is None:
        what = ("the paper has no such method (the kit's stochastic PF-LD variant)" if baseline == "pfld_stochastic"
                else "no official result files for this setting")
        return PaperEffect(source=f"no paper number: {what}; direction only")
    value, source = entry
    return PaperEffect(source=source, value=value)


def claim_effects(table: pd.DataFrame, config: dict) -> dict[str, pd.DataFrame]:
    """Per baseline: one paired effect per split (:func:`dpfair_jax.fairness.frontier.paired_violation_gap`)
    over the finite epsilons of the config."""
    from dpfair_jax.fairness.frontier import paired_violation_gap

    finite = [e for e in config["epsilons"] if math.isfinite(e)]
    return {b: paired_violation_gap(table, "dpfermi", b, slack=_slack(config, b), epsilons=finite)
            for b in _baselines(config)}


def replicates_for(sd: float, margin: float | None, config: dict, comparisons: int) -> int | None:
    """The replicates (splits) that bring a claim's detectable effect below ``margin`` at the config's
    ``alpha`` / ``comparisons`` and ``target_power``, from a pilot's sd of the per-split effect; None
    when more than ``max_replicates`` would be needed or there is no margin."""
    from dpfair_jax.runner.verdict import replicates_needed

    if margin is None or not math.isfinite(sd):
        return None
    return replicates_needed(sd, margin, alpha=config["alpha"], power=config["target_power"],
                             comparisons=comparisons, max_replicates=int(config["max_replicates"]))


def _frontier_claim(ctx, config: dict, res, metric: str) -> None:
    """One claim per baseline, decided by the one verdict rule
    (:func:`dpfair_jax.runner.verdict.directional_verdict`): the paired per-split effect's t-interval,
    family-wise 95% over the experiment's baselines (Bonferroni, ``comparisons`` = the number of
    baselines, 3 in the full configs), set against the paper's own margin for the same statistic
    (``config.PAPER_MARGINS``), with the detectable effect and the splits the claim would need."""
    from dpfair_jax.runner.verdict import directional_verdict, estimate_from_replicates

    baselines = _baselines(config)
    if "dpfermi" not in config["methods"] or not baselines:
        for b in baselines or ["pfld_epoch"]:
            ctx.skip_claim(_claim_id(ctx.name, b), _statement(config, b, metric),
                           "needs DP-FERMI and a baseline in the methods", target="effect > 0")
        return
    k = len(baselines)
    effects = claim_effects(res.table, config)
    rows = []
    for b in baselines:
        cid, statement = _claim_id(ctx.name, b), _statement(config, b, metric)
        per = effects[b]
        rows.append(per.assign(baseline=b))
        x = per["effect"].to_numpy(float) if len(per) else np.zeros(0)
        ok = x[np.isfinite(x)]
        dropped = int(x.size - ok.size)
        paper = _paper_effect(ctx.name, b)
        if ok.size < 2:
            ctx.skip_claim(cid, statement, f"{ok.size} split(s) with a reading (DP-FERMI's frontier does not reach "
                           "the baseline's error in the others); an interval needs 2", target="effect > 0")
            continue
        v = directional_verdict(estimate_from_replicates(ok), paper, alpha=config["alpha"],
                                power=config["target_power"], comparisons=k)
        sd = float(np.std(ok, ddof=1))
        margin = paper.value
        if margin is None and b == "pfld_stochastic":
            margin = _paper_effect(ctx.name, "pfld_epoch").value  # the paper's margin over PF-LD, for scale
        slack = _slack(config, b)
        extra = {"statistic": ("mean over the finite epsilons and the baseline's lambdas of the baseline's "
                               "violation minus DP-FERMI's frontier at the baseline's error"
                               + (f" + {slack:g}" if slack else "") + " (paired per split)"),
                 "role": _ROLE[b], "per_split": [round(float(e), 5) for e in x],
                 "readings": f"{int(per['readings'].sum())}/{int(per['points'].sum())}",
                 "splits_dropped": dropped, "sd": sd, "target_power": config["target_power"],
                 "replicates_needed": replicates_for(sd, margin, config, k),
                 "replicates_needed_margin": margin, "max_replicates": int(config["max_replicates"])}
        reason = f"{dropped} split(s) without a reading left out" if dropped else None
        ctx.add_verdict(cid, statement, v, reason=reason, extra=extra)
    if rows:
        ctx.save_table(pd.concat(rows, ignore_index=True), "claim_effects")


def _auto_replicates(config: dict, study) -> tuple[int, str]:
    """``replicates="auto"``: a pilot of ``pilot_replicates`` splits, then the count that brings the
    detectable effect of every claim with a paper margin below it (the largest need), within
    ``max_replicates``. Returns (count, what the pilot found)."""
    pilot = dict(config, replicates=int(config["pilot_replicates"]))
    res = study(pilot)
    k = len(_baselines(config))
    needs, notes = [], []
    for b, per in claim_effects(res.table, pilot).items():
        x = per["effect"].to_numpy(float) if len(per) else np.zeros(0)
        x = x[np.isfinite(x)]
        margin = _paper_effect(config.get("_name", ""), b).value
        if margin is None or x.size < 2:
            continue
        sd = float(np.std(x, ddof=1))
        n = replicates_for(sd, margin, config, k)
        notes.append(f"{b}: sd {sd:.4g}, paper margin {margin:.4g} -> {n if n is not None else 'over the budget'}")
        needs.append(int(config["max_replicates"]) if n is None else n)
    count = max([int(config["pilot_replicates"])] + needs)
    return min(count, int(config["max_replicates"])), "; ".join(notes) or "no claim with a paper margin"


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
    _frontier_claim(ctx, config, res, metric)
    unit_claims.record(ctx, config, res)
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


# ------------------------------------------------------------------------------------------------
# "official code" preset: the public code's one-cell ERMI, clipping and random W0 (not private)
# ------------------------------------------------------------------------------------------------
def run_official_code(config: dict, ctx) -> pd.DataFrame:
    """Regression test on the shape of the public code's curves (notes II.10): one-cell ERMI
    (``W[0, 1]``: predicted 1 in group ``cell 0``), standard-normal ``W_0``, clipping after the
    division by the batch size (``clip_mode="official_batch"``: effectively no clipping), W-noise not
    scaled by lambda (``variant="paper"``), the code's calibration (``official_dpfermi_calibration``), exact
    group frequencies. Run twice: with ``cell 0`` the group of the higher positive rate (what the
    paper's decreasing curves require) and with ``cell 0`` the other group."""
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.data import tabular

    train, test = tabular.load(config["dataset"], seed=0)
    if config.get("max_rows"):
        rng = np.random.default_rng(ctx.seed)
        train = train.take(np.sort(rng.choice(train.n, size=min(train.n, config["max_rows"]), replace=False)))
    names = train.info.group_names
    rates = [float(np.mean(np.asarray(train.y)[np.asarray(train.s) == g])) for g in range(2)]
    adv = int(np.argmax(rates))
    spe = train.n // config["batch_size"]  # shuffled epochs of full batches, as the code's DataLoader
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=config["epochs"] * spe,
                        batch_size=config["batch_size"], sampling="shuffle", privacy_unit="sensitive_attribute",
                        variant="paper", clip_mode="official_batch", w_init="randn", ermi_form="one_cell",
                        group_frequencies="public")
    cal = official_dpfermi_calibration(train.n, int(min(train.group_sizes())), config["epochs"],
                                       config["batch_size"], config["epsilon"],
                                       lipschitz_theta=config["clip_theta"], radius=config["radius"])
    zt, zw = F.theorem33_multipliers(cfg, cal.std_theta, cal.std_w, config["clip_theta"], config["clip_w"])
    ctx.log(f"{config['dataset']}: groups {names}, positive rates {np.round(rates, 3).tolist()}; official "
            f"calibration at eps={config['epsilon']:g}: std_theta={cal.std_theta:.3g}, std_w={cal.std_w:.3g}")

    def orient(ds, cell0: int):
        s = np.asarray(ds.s)
        return ds.replace(s=jnp.asarray(s if cell0 == 0 else 1 - s, jnp.int32))

    lams = jnp.asarray(config["lams"], jnp.float32)
    rows = []
    for label, cell0 in (("advantaged", adv), ("disadvantaged", 1 - adv)):
        tr, te = orient(train, cell0), orient(test, cell0)
        p_s = np.bincount(np.asarray(tr.s), minlength=2) / tr.n

        def run(key, lam, tr=tr, te=te, p_s=p_s):
            hp = F.FermiHparams(lam=lam, lr_theta=config["lr_theta"], lr_w=config["lr_w"],
                                clip_theta=config["clip_theta"], clip_w=config["clip_w"], noise_theta=zt,
                                noise_w=zw, radius=config["radius"])
            r = F.fit(key, tr, hp, cfg, p_s=p_s, validate=False)
            return evaluate(cfg.model, r.params, te, 2)

        keys = jax.random.split(jax.random.key(ctx.seed), config["seeds"])
        out = jax.jit(jax.vmap(jax.vmap(run, in_axes=(None, 0)), in_axes=(0, None)))(keys, lams)
        for si in range(config["seeds"]):
            for li, lam in enumerate(config["lams"]):
                rows.append({"cell0": label, "cell0_group": names[cell0], "lam": lam, "seed": si,
                             **{k: float(v[si, li]) for k, v in out.items()}})
    df = pd.DataFrame(rows)
    ctx.save_table(df, "results")
    mean = df.groupby(["cell0", "lam"])[["error", "dp_violation"]].mean().reset_index()
    import matplotlib

    fig, axes = plots.new_figure(ncols=1)
    ax = np.atleast_1d(axes)[0]
    with matplotlib.rc_context(plots.STYLE):
        for label, part in mean.groupby("cell0"):
            g = df[df["cell0"] == label]["cell0_group"].iloc[0]
            ax.plot(part["error"], part["dp_violation"], marker="o", label=f"cell 0 = {g} ({label})")
        ax.set_xlabel("test misclassification error")
        ax.set_ylabel("DP violation")
        ax.set_title("public code's one-cell ERMI (not private: its clipping)", fontsize=10)
        ax.legend(fontsize=7)
    ctx.save_figure(fig, "official_code_curves")
    lo, hi = min(config["lams"]), max(config["lams"])

    def at(label, lam, col):
        return float(mean[(mean["cell0"] == label) & (mean["lam"] == lam)][col].iloc[0])

    adv_v0, adv_v1 = at("advantaged", lo, "dp_violation"), at("advantaged", hi, "dp_violation")
    adv_e0, adv_e1 = at("advantaged", lo, "error"), at("advantaged", hi, "error")
    dis_v0, dis_v1 = at("disadvantaged", lo, "dp_violation"), at("disadvantaged", hi, "dp_violation")
    measured = {"advantaged": {"violation": [round(adv_v0, 4), round(adv_v1, 4)], "error": [round(adv_e0, 4), round(adv_e1, 4)]},
                "disadvantaged": {"violation": [round(dis_v0, 4), round(dis_v1, 4)]}, "lams": [lo, hi],
                "cell0_advantaged_group": names[adv],
                # runs at the base rate or with constant predictions (fairness.evaluate's flags): their
                # violation falls for a trivial reason; REPORT.md lists them
                "degenerate_runs": f"{int(df['degenerate'].sum())}/{len(df)}"}
    ok = adv_v1 < adv_v0 and adv_e1 >= adv_e0
    _claim(ctx, "fermi_official_code_curve_shape",
           f"The public code's preset (one-cell ERMI, its clipping, random W0, its calibration; lambda {lo:g}..{hi:g}) "
           f"with cell 0 = {names[adv]} (the group of higher positive rate: the orientation the paper's curves "
           "require) reproduces their shape: the violation falls and the error rises with lambda. The other "
           f"orientation (cell 0 = {names[1 - adv]}) is measured alongside: the one-cell term "
           "P(yhat=1, s=0)^2 / (P(yhat=1) pi_0) depends on which group is cell 0 (notes II.10-2). A regression "
           "test of the public code's behaviour, not a private result (its clipping is effectively off)",
           measured, "cell 0 advantaged: violation(lam max) < violation(0), error(lam max) >= error(0)",
           "holds" if ok else "fails",
           None if ok else "the public code's curve shape (violation down, error up in lambda) did not appear at "
                           "this size")
    return df


# ------------------------------------------------------------------------------------------------
# Fig 5 stand-in: small CNN, small batches, 3 classes x 3 groups
# ------------------------------------------------------------------------------------------------
def _synthetic_images(key, n: int, side: int = 8, classes: int = 3, groups: int = 3):
    """Images whose class is a spatial pattern and whose group shifts the brightness and is
    correlated with the class (so an unconstrained model is unfair)."""
    from dpfair_jax.data import make_dataset

    k1, k2, k3, k4 = jax.random.split(key, 4)
    y = jax.random.randint(k1, (n,), 0, classes)
    s = jnp.where(jax.random.uniform(k2, (n,)) < 0.6, y % groups, jax.random.randint(k3, (n,), 0, groups))
    proto = jax.random.normal(jax.random.key(123), (classes, side, side, 1))
    x = 0.8 * proto[y] + 0.6 * s[:, None, None, None] + jax.random.normal(k4, (n, side, side, 1))
    ds = make_dataset(np.asarray(x).reshape(n, -1), np.asarray(y), np.asarray(s), num_groups=groups,
                      num_classes=classes)
    return ds.replace(x=ds.x.reshape(n, side, side, 1))


def run_cnn_synthetic(config: dict, ctx) -> pd.DataFrame:
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import fermi as F

    key = jax.random.key(ctx.seed)
    train = _synthetic_images(jax.random.fold_in(key, 1), config["n_train"])
    test = _synthetic_images(jax.random.fold_in(key, 2), config["n_test"])
    model = M.cnn(num_classes=3, channels=tuple(config["channels"]), image_shape=(8, 8, 1))
    delta = 1.0 / train.n**2
    cfg = F.FermiConfig(model=model, num_groups=3, num_classes=3, steps=config["steps"],
                        batch_size=config["batch_size"], delta=delta)
    rows = []
    for e in config["epsilons"]:
        zt, zw = 0.0, 0.0  # epsilon = inf: no noise
        if math.isfinite(e):
            cal = F.calibrate(cfg, train.n, (e, delta))
            zt, zw = cal.noise_theta, cal.noise_w
            ctx.record_privacy(f"cnn_eps{e:g}", F.spend(cfg, train.n, cal))

        def run(k, lam, zt=zt, zw=zw):
            hp = F.FermiHparams(lam=lam, lr_theta=config["lr_theta"], lr_w=config["lr_w"],
                                clip_theta=config["clip_theta"], clip_w=config["clip_w"],
                                noise_theta=zt, noise_w=zw, radius=config["radius"])
            r = F.fit(k, train, hp, cfg, validate=False)
            return evaluate(model, r.params, test, 3)

        lams = jnp.asarray(config["lams"], jnp.float32)
        keys = jax.random.split(jax.random.fold_in(key, 3), config["seeds"])
        out = jax.jit(jax.vmap(jax.vmap(run, in_axes=(None, 0)), in_axes=(0, None)))(keys, lams)
        for si in range(config["seeds"]):
            for li, lam in enumerate(config["lams"]):
                rows.append({"epsilon": e, "lam": lam, "seed": si,
                             **{k: float(v[si, li]) for k, v in out.items()}})
    df = pd.DataFrame(rows)
    ctx.save_table(df, "results")
    fig = plot_tradeoff(df.assign(method="dpfermi"), "dp_violation", "synthetic images, CNN")
    ctx.save_figure(fig, "cnn_tradeoff")
    mean = df.groupby(["epsilon", "lam"])[["error", "dp_violation"]].mean().reset_index()
    chance = 2.0 / 3.0
    worst = float(mean["error"].max())
    ctx.add_claim("cnn_converges_small_batches",
                  f"With batch {config['batch_size']}, 3 classes and 3 groups, every (epsilon, lambda) "
                  "run of DP-FERMI with a CNN trains to a test error below chance (2/3) (Fig 5's claim "
                  "that DP-FERMI converges with small batches and non-binary Y and S).",
                  measured=round(worst, 4), target=f"< {chance:.3f}", passed=worst < chance)
    lo, hi = min(config["lams"]), max(config["lams"])
    v0 = mean[mean["lam"] == lo]["dp_violation"].mean()
    v1 = mean[mean["lam"] == hi]["dp_violation"].mean()
    statement = f"Averaged over epsilon, the DP violation at lambda={hi:g} is below that at lambda={lo:g}."
    if lo == hi:
        ctx.skip_claim("cnn_lambda_reduces_violation", statement, f"needs two lambdas, the grid has {lo:g} only",
                       target="lam_hi < lam_lo")
    else:
        ctx.add_claim("cnn_lambda_reduces_violation", statement,
                      measured={"lam_lo": round(float(v0), 4), "lam_hi": round(float(v1), 4)},
                      target="lam_hi < lam_lo", passed=bool(v1 < v0))
    return df


# ------------------------------------------------------------------------------------------------
# Theorem E.3: DP-SGDA on a nonconvex-strongly-concave problem
# ------------------------------------------------------------------------------------------------
def _ncsc_problem(key, n: int, d: int, dw: int):
    """f(theta, w; z) = sum_j log(1 + (theta_j - x_j)^2) / 2 (nonconvex, 1-Lipschitz-gradient-ish)
    + w . (A theta - b(z)) - mu/2 |w|^2 (strongly concave in w)."""
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (n, d)) + 1.0
    bz = jax.random.normal(k2, (n, dw)) * 0.5
    return {"x": x, "b": bz}


def run_sgda_convergence(config: dict, ctx) -> pd.DataFrame:
    from dpfair_jax.algorithms import sgda

    d, dw, mu = config["d"], config["dw"], 1.0
    A = jax.random.normal(jax.random.key(99), (dw, d)) / math.sqrt(d)

    def f(theta, w, ex):
        nonconvex = 0.5 * jnp.sum(jnp.log1p((theta - ex["x"]) ** 2))
        return nonconvex + w @ (A @ theta - ex["b"]) - 0.5 * mu * jnp.sum(w**2)

    def phi_grad(theta, data):
        # Phi(theta) = max_w mean f = mean nonconvex + |A theta - bbar|^2 / (2 mu)
        def phi(th):
            nc = jnp.mean(0.5 * jnp.sum(jnp.log1p((th - data["x"]) ** 2), axis=1))
            r = A @ th - jnp.mean(data["b"], axis=0)
            return nc + jnp.sum(r**2) / (2 * mu)
        return jax.grad(phi)(theta)

    rows = []
    from dpfair_jax.algorithms import fermi as F  # noqa: F401  (calibration helpers live in accounting)
    from dpfair_jax.privacy import accounting as Acc

    for n in config["ns"]:
        data = _ncsc_problem(jax.random.key(1000 + n), n, d, dw)
        m = max(1, int(round(config["batch_frac"] * n)))
        steps = config["epochs"] * math.ceil(n / m)
        cfg = sgda.SGDAConfig(steps=steps, batch_size=m, projection="ball", private_loss=f,
                              theta_shape=(d,), w_shape=(dw,))
        delta = 1.0 / n**2
        def run(key, z, data=data, cfg=cfg):  # z traced: one program per n for every epsilon
            hp = sgda.SGDAHparams(lr_theta=config["lr_theta"], lr_w=config["lr_w"],
                                  clip_theta=config["clip"], clip_w=config["clip"],
                                  noise_theta=z, noise_w=z, radius=config["radius"])
            res = sgda.fit(key, data, hp, cfg)  # starts at zeros of the config's shapes
            g = phi_grad(res.params.theta, data)
            return jnp.sum(g**2)

        program = jax.jit(jax.vmap(run, in_axes=(0, None)))
        for e in config["epsilons"]:
            z = 0.0 if math.isinf(e) else Acc.calibrate_noise_multiplier(
                e, delta, m / n, steps, relative_noise=(1.0, 1.0))
            keys = jax.random.split(jax.random.key(ctx.seed + n), config["seeds"])
            gaps = np.asarray(program(keys, jnp.float32(z)))
            for si, gp in enumerate(gaps):
                rows.append({"n": n, "epsilon": e, "seed": si, "gap": float(gp), "noise_multiplier": z,
                             "rate": math.sqrt(d) / (e * n) if math.isfinite(e) else 0.0})
    df = pd.DataFrame(rows)
    ctx.save_table(df, "results")
    mean = df.groupby(["epsilon", "n"])["gap"].mean().reset_index()
    import matplotlib

    fig, axes = plots.new_figure(ncols=1)
    ax = np.atleast_1d(axes)[0]
    with matplotlib.rc_context(plots.STYLE):
        for e, part in mean.groupby("epsilon"):
            ax.loglog(part["n"], part["gap"], marker="o", label=f"eps={e:g}")
        ax.set_xlabel("n")
        ax.set_ylabel("E |grad Phi(theta_T)|^2")
        ax.legend(fontsize=7)
    ctx.save_figure(fig, "sgda_gap")
    finite = mean[np.isfinite(mean["epsilon"])]
    slopes = {}
    for e, part in finite.groupby("epsilon"):
        sl = np.polyfit(np.log(part["n"]), np.log(part["gap"]), 1)[0] if len(part) > 1 else float("nan")
        slopes[f"eps={e:g}"] = round(float(sl), 3)
    dec_n = all(np.all(np.diff(p.sort_values("n")["gap"].to_numpy()) < 0) for _, p in finite.groupby("epsilon"))
    statement = ("At every finite epsilon the stationarity gap E|grad Phi|^2 of DP-SGDA decreases "
                 "with n (Theorem E.3: O(sqrt(d ln(1/delta)) / (eps n)) up to the 1/m term).")
    n_sizes = finite["n"].nunique() if len(finite) else 0
    if n_sizes < 2:
        ctx.skip_claim("sgda_gap_decreases_with_n", statement, f"needs two sizes n at a finite epsilon, the grid "
                       f"has {n_sizes}", target="monotone decrease in n (log-log slope < 0)")
    else:
        ctx.add_claim("sgda_gap_decreases_with_n", statement, measured=slopes,
                      target="monotone decrease in n (log-log slope < 0)", passed=bool(dec_n))
    by_eps = finite.groupby("epsilon")["gap"].mean().sort_index().to_numpy()
    statement = "Averaged over n, the gap decreases as epsilon grows (more privacy costs more)."
    if len(by_eps) < 2:
        ctx.skip_claim("sgda_gap_decreases_with_eps", statement, f"needs two finite epsilons, the grid has "
                       f"{len(by_eps)}", target="decreasing in epsilon")
    else:
        ctx.add_claim("sgda_gap_decreases_with_eps", statement, measured=[round(float(g), 5) for g in by_eps],
                      target="decreasing in epsilon", passed=bool(np.all(np.diff(by_eps) < 0)))
    return df


# ------------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------------
EXPERIMENTS = [
    register(Experiment("fermi_adult_dp", "004", "DP-FERMI vs both PF-LDs vs DP-SGD, tuned frontiers, Adult (sex), demographic parity (Fig 2)",
                        CONFIGS["fermi_adult_dp"], run_tradeoff)),
    register(Experiment("fermi_credit_dp", "004", "DP-FERMI vs baselines, tuned frontiers, Credit (SEX), demographic parity (Fig 7)",
                        CONFIGS["fermi_credit_dp"], run_tradeoff)),
    register(Experiment("fermi_parkinsons_dp", "004", "DP-FERMI vs baselines, tuned frontiers, Parkinsons (sex), demographic parity (Figs 3, 8)",
                        CONFIGS["fermi_parkinsons_dp"], run_tradeoff)),
    register(Experiment("fermi_credit_eo", "004", "DP-FERMI vs baselines, tuned frontiers, Credit, equalized odds (Fig 4)",
                        CONFIGS["fermi_credit_eo"], run_tradeoff)),
    register(Experiment("fermi_adult_eo", "004", "DP-FERMI vs baselines, tuned frontiers, Adult, equalized odds (Fig 9)",
                        CONFIGS["fermi_adult_eo"], run_tradeoff)),
    register(Experiment("fermi_official_code", "004", "The public code's preset (one-cell ERMI, its clipping, random W0): shape of its curves by the group of cell 0",
                        CONFIGS["fermi_official_code"], run_official_code)),
    register(Experiment("fermi_adult_nonbinary", "004",
                        "DP-FERMI with 9 age classes x 5 race groups on Adult (UTK-Face stand-in)",
                        CONFIGS["fermi_adult_nonbinary"], run_tradeoff)),
    register(Experiment("fermi_cnn_synthetic", "004", "DP-FERMI with a small CNN, batch 32, 3 classes x 3 groups (Fig 5's claim)",
                        CONFIGS["fermi_cnn_synthetic"], run_cnn_synthetic)),
    register(Experiment("sgda_convergence", "004", "DP-SGDA stationarity gap vs n and epsilon (Theorem E.3)",
                        CONFIGS["sgda_convergence"], run_sgda_convergence)),
]
