"""The fairness-error tradeoff study of paper 004 (Figs 2-9) and its public, tuned form.

The public study (:func:`tradeoff_frontier_study`, result :class:`TradeoffStudy`):

- methods: ``"dpfermi"`` (DP-FERMI, :mod:`dpfair_jax.algorithms.fermi`), ``"pfld_stochastic"`` (a
  stochastic PF-LD-style variant: multipliers moved every step on the batch's violation,
  :mod:`dpfair_jax.algorithms.pfld`), ``"pfld_epoch"`` (PF-LD as Tran, Fioretto and Van
  Hentenryck specify it: non-negative multipliers updated once per epoch on the noisy full-data
  violation, :mod:`dpfair_jax.algorithms.pfld_epoch`) and ``"dpsgd"`` (DP-SGD: the task loss
  alone, i.e. lambda = 0), over lambdas x epsilons x replicates;
- data: a :class:`~dpfair_jax.data.Dataset` or a pandas DataFrame with named target, group and
  feature columns (:func:`dpfair_jax.data.dataset_from_frame`); each replicate is its own
  train / validation / test split (a random permutation of the rows from the seed, cut at fixed
  sizes: a function of the seed and the row count only, :func:`replicate_splits`; numeric columns
  z-scored with the replicate's training moments);
- privacy: every method runs at the example level (all features, add/remove), with the same
  epsilon and delta; the noise multipliers are looked up for the user;
- tuning (equal budget for every method): per (method, epsilon, lambda, replicate), the
  hyperparameters (learning rates, clip norms, W radius or multiplier box) are chosen on the
  validation split by Papernot-Steinke random stopping (:mod:`dpfair_jax.privacy.selection`): ``K``
  runs drawn from the same law for every method, each on a candidate drawn uniformly from the
  method's grid and scored by its noisy validation error, the best one kept. The training noise is
  calibrated so that the whole selection (all ``K`` runs and their scores) is within the target
  epsilon; that total is each row's ``spend_epsilon``. A row releases only the winning run (its
  candidate, noisy validation score, model and test metrics): ``K``, the losing candidates and
  their scores are never returned, written or logged (the bound holds only while they stay
  hidden). ``selection="nonprivate"`` (labelled) runs
  every grid point and takes the exact arg-max (no guarantee for the selection: ``spend_epsilon``
  is ``inf``);
- evaluation on the test split; one row per (method, epsilon, lambda, replicate) with the error,
  the violations, the spend, the selection and a ``degenerate`` flag (constant predictions, or a
  test error within 0.005 of the base-rate error or above it);
- one compiled program per algorithm and data shape (the runs of every epsilon, lambda, replicate
  and candidate as one ``vmap``); frontiers with intervals through
  :mod:`dpfair_jax.fairness.frontier` (:meth:`TradeoffStudy.plot`, :func:`compare_frontiers`).

The earlier engine (:func:`tradeoff_study`, fixed hyperparameters, one method per call, used by
studies that compare at fixed settings), :func:`equal_error_table`, :func:`baseline_name` and
:func:`plot_tradeoff` are kept.

Privacy: each row's model is ``(spend_epsilon, spend_delta)``-DP at the example level under
add/remove (the selection's ``RepeatAndSelectDpEvent`` over one run's event: the training steps,
the method's own releases and the noisy validation score; the Poisson padding's truncation
probability, times the expected number of runs, is in delta). Rows are separate releases (one
model per point of a frontier). Not covered: the check that every split has every group (one bit
about the data, before any training), the z-scoring moments of each training split and the test
metrics (evaluation). :func:`tradeoff_study` records its spend per epsilon as before.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax import montecarlo as MC
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.fairness import evaluation as EV
from dpfair_jax.runner import plots

__all__ = [
    "METHODS",
    "METHOD_LABELS",
    "DEFAULT_LAMS",
    "DEFAULT_SEARCH",
    "TradeoffStudy",
    "tradeoff_frontier_study",
    "compare_frontiers",
    "plot_study",
    "replicate_splits",
    "tradeoff_study",
    "baseline_name",
    "equal_error_table",
    "plot_tradeoff",
]

_PREPROCESSING = ("the tabular loader standardizes the features with the training split's moments, "
                  "computed from the private data without noise (docs/trust.md); the spend covers "
                  "training only")


def _method_fns(method: str):
    """``(config maker, module)``: the module's trio (``fit``, ``spend``, ``calibrate``) runs it."""
    if method == "dpfermi":
        return F.FermiConfig, F
    if method == "pfld":
        return pfld.config, pfld
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
    make_cfg, mod = _method_fns(method)
    n = train.n
    steps = epochs * math.ceil(n / batch_size)
    cfg = make_cfg(model=model, num_groups=train.num_groups, num_classes=max(train.num_classes, 2),
                   steps=steps, batch_size=batch_size, fairness=fairness, privacy_unit=unit, delta=delta)
    cfg.validate(n)
    eps = [float(e) for e in epsilons]
    base = F.FermiHparams(lr_theta=hp["lr_theta"], lr_w=hp["lr_w"], clip_theta=hp["clip_theta"],
                          clip_w=hp["clip_w"], radius=hp["radius"])
    # epsilon = inf: no noise (no guarantee, nothing recorded)
    hps = [mod.calibrate(cfg, n, (e, delta), hparams=base) if math.isfinite(e) else base for e in eps]
    zs = [(h.noise_theta, h.noise_w) for h in hps]
    if ctx is not None:
        for e, h in zip(eps, hps):
            if math.isfinite(e):
                ctx.record_privacy(f"{method}_{fairness}_eps{e:g}", mod.spend(cfg, n, h),
                                   not_covered=_PREPROCESSING)
    lam_g, eps_g = np.meshgrid(np.asarray(lams, float), np.arange(len(eps)), indexing="ij")
    lam_g, eps_i = lam_g.ravel(), eps_g.ravel()
    zt_g = np.asarray([zs[i][0] for i in eps_i], np.float32)
    zw_g = np.asarray([zs[i][1] for i in eps_i], np.float32)
    lam_a, zt_a, zw_a = (jnp.asarray(a, jnp.float32) for a in (lam_g, zt_g, zw_g))
    G = lam_a.shape[0]
    num_classes = cfg.num_classes

    def one_seed(key):
        bkey = jax.random.fold_in(key, 7)

        def point(g, lam, zt, zw):
            h = dataclasses.replace(base, lam=lam, noise_theta=zt, noise_w=zw)
            r = mod.fit(jax.random.fold_in(key, g), train, h, cfg, batch_key=bkey)
            out = EV.evaluate(cfg.model, r.params, test, num_classes)
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



# ------------------------------------------------------------------------------------------------
# the public study: every method tuned on validation (accounted selection), frontiers with intervals
# ------------------------------------------------------------------------------------------------
METHODS = ("dpfermi", "pfld_stochastic", "pfld_epoch", "dpsgd")
METHOD_LABELS = {"dpfermi": "DP-FERMI", "pfld_stochastic": "PF-LD, stochastic variant",
                 "pfld_epoch": "PF-LD (Tran et al.)", "dpsgd": "DP-SGD (lambda = 0)"}
#: lambda grid of the fair methods: log-spaced up to 40 (the full ERMI needs larger lambdas than the
#: one-cell regularizer of the paper's public code).
DEFAULT_LAMS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0)
_LR = (0.1, 0.3, 1.0, 3.0)
_CLIP = (1.0, 4.0)
#: candidate grids per method (the Cartesian product of the listed values). ``lr_w`` is the step of
#: the W (multiplier) ascent per unit of the regularizer's gradient: the fit gets ``lr_w / lam``
#: (its W update is ``lr_w * lam * (clipped gradient + noise) / m``), so the ascent's step and its
#: noise do not grow with lambda. ``radius``: DP-FERMI's W ball, the stochastic PF-LD's multiplier
#: box, PF-LD's (per-epoch) multiplier bound.
DEFAULT_SEARCH: dict[str, dict[str, tuple[float, ...]]] = {
    "dpsgd": {"lr_theta": _LR, "clip_theta": _CLIP},
    "dpfermi": {"lr_theta": _LR, "clip_theta": _CLIP, "lr_w": (0.05, 0.5), "radius": (1.0, 5.0)},
    "pfld_stochastic": {"lr_theta": _LR, "clip_theta": _CLIP, "lr_w": (0.05, 0.5), "radius": (0.5, 2.0)},
    "pfld_epoch": {"lr_theta": _LR, "clip_theta": _CLIP, "lr_dual": (1.0, 10.0), "radius": (1.0, 5.0)},
}
_BASE = {"lr_theta": 1.0, "clip_theta": 1.0}
_FIXED: dict[str, dict[str, float]] = {  # fields a grid does not set
    "dpsgd": dict(_BASE, lr_w=0.05, clip_w=3.0, radius=5.0),
    "dpfermi": dict(_BASE, lr_w=0.05, clip_w=3.0, radius=5.0),
    "pfld_stochastic": dict(_BASE, lr_w=0.05, clip_w=3.0, radius=1.0),
    "pfld_epoch": dict(_BASE, lr_dual=1.0, clip_violation=1.0, radius=5.0, tol=0.0),
}
_FIELDS = {"fermi": ("lr_theta", "lr_w", "clip_theta", "clip_w", "radius"),
           "pfld_epoch": ("lr_theta", "lr_dual", "clip_theta", "clip_violation", "radius", "tol")}
_PROGRAM = {"dpfermi": "fermi", "dpsgd": "fermi", "pfld_stochastic": "pfld_stochastic",
            "pfld_epoch": "pfld_epoch"}
#: DP-SGD runs DP-FERMI's program at lam = 0, where the W update is exactly zero (clip lam C_w = 0);
#: its charged noise share is then made negligible.
_DPSGD_W_RATIO = 1000.0
_SCORE_TAG = 0x73636F72
UNIT_LABEL = "example-level"


@dataclasses.dataclass
class TradeoffStudy:
    """Result of :func:`tradeoff_frontier_study`.

    ``table``: one row per (method, epsilon, lam, replicate); ``spends``: the
    :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of each (method, epsilon) (every row of that
    method and epsilon has it); ``info``: sizes, steps and noise multipliers.
    """

    table: pd.DataFrame
    spends: dict
    fairness: str
    unit: str = UNIT_LABEL
    info: dict = dataclasses.field(default_factory=dict)

    def frontier(self, confidence: float = 0.95) -> pd.DataFrame:
        """:func:`dpfair_jax.fairness.frontier.frontier_table` of the test results."""
        from dpfair_jax.fairness import frontier as FR

        return FR.frontier_table(self.table, by=("method", "epsilon"), knob="lam",
                                 violation="violation", confidence=confidence)

    def plot(self, title: str | None = None):
        """The frontier plot (:func:`plot_study`)."""
        return plot_study(self.table, title=title)

    def compare(self, **kwargs) -> pd.DataFrame:
        """:func:`compare_frontiers` on the table."""
        return compare_frontiers(self.table, **kwargs)


def plot_study(table: pd.DataFrame, title: str | None = None):
    """Mean test error vs mean violation per method (lambda in knob order), one panel per epsilon,
    t-intervals over replicates in both directions, the privacy unit in every title
    (:func:`dpfair_jax.fairness.frontier.plot_frontiers`). Returns the figure."""
    from dpfair_jax.fairness import frontier as FR

    df = table.copy()
    df["method"] = df["method"].map(lambda m: METHOD_LABELS.get(m, m))
    ft = FR.frontier_table(df, by=("method", "epsilon"), knob="lam", violation="violation")
    metric = str(table["metric"].iloc[0]) if "metric" in table else "violation"
    unit = str(table["unit"].iloc[0]) if "unit" in table else UNIT_LABEL
    return FR.plot_frontiers(ft, unit=unit, violation_label=metric.replace("_", " "),
                             error_label="test error", title=title)


def _boot_frontier(e: np.ndarray, v: np.ndarray, idx: np.ndarray, level: float) -> np.ndarray:
    from dpfair_jax.fairness.frontier import frontier_curve

    return frontier_curve(e[:, idx].mean(-1).T, v[:, idx].mean(-1).T, [level])[:, 0]


def compare_frontiers(table: pd.DataFrame, *, first: str = "dpfermi", baselines=None,
                      anchor: str = "dpsgd", slack: float = 0.01, confidence: float = 0.95,
                      bootstrap: int = 2000, seed: int = 0) -> pd.DataFrame:
    """``first``'s frontier against each baseline's at equal error, per epsilon.

    The error level is anchored to ``anchor`` (default DP-SGD): ``level = e0 + slack``, ``e0`` its
    mean test error at that epsilon. At the level, each frontier ``F(level)`` (the lowest mean
    violation among knob values whose mean error is at most the level) is read with a paired
    bootstrap over replicates (the same train/validation/test split is one replicate for every
    method); ``diff = F_first - F_baseline`` with its interval. ``area``: the area between the two
    frontiers (:func:`dpfair_jax.fairness.frontier.area_between`) where both have two or more knob
    values and share an error range (NaN otherwise). ``status``: ``"lower"`` (interval below 0),
    ``"higher"`` (above 0), ``"unresolved"`` (contains 0) or ``"unreached"`` (``first`` has no knob
    value within the level) or ``"baseline_unreached"`` (the baseline has none: only ``first``
    reaches that error).
    """
    import warnings

    from dpfair_jax.fairness import frontier as FR

    need = ["method", "epsilon", "lam", "replicate", "error", "violation"]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise ValueError(f"compare_frontiers takes tradeoff_frontier_study's table; missing {missing}.")
    methods = set(table["method"])
    for name, m in (("first", first), ("anchor", anchor)):
        if m not in methods:
            raise ValueError(f"{name}={m!r} is not a method of the table ({sorted(methods)}).")
    baselines = sorted(methods - {first}) if baselines is None else list(baselines)
    q = (1.0 - confidence) / 2.0
    rows = []
    for eps in sorted(table["epsilon"].unique(), key=lambda x: (math.isinf(x), x)):
        sub = table[table["epsilon"] == eps]
        e0 = float(sub[sub["method"] == anchor]["error"].mean())
        level = e0 + slack
        reps = sorted(set.intersection(*(set(sub[sub["method"] == m]["replicate"]) for m in [first] + baselines)))
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(reps), size=(bootstrap, len(reps)))

        def mats(m: str):
            part = sub[(sub["method"] == m) & sub["replicate"].isin(reps)]
            e = part.pivot_table(index="lam", columns="replicate", values="error", aggfunc="mean")
            vv = part.pivot_table(index="lam", columns="replicate", values="violation", aggfunc="mean")
            return e.to_numpy(float), vv.to_numpy(float)

        ef, vf = mats(first)
        point_f = float(FR.frontier_curve(ef.mean(1), vf.mean(1), [level])[0])
        boot_f = _boot_frontier(ef, vf, idx, level)
        for b in baselines:
            eb, vb = mats(b)
            point_b = float(FR.frontier_curve(eb.mean(1), vb.mean(1), [level])[0])
            with np.errstate(invalid="ignore"):
                diff = boot_f - _boot_frontier(eb, vb, idx, level)
            diff = diff[~np.isnan(diff)]
            lo = float(np.quantile(diff, q, method="lower")) if diff.size else math.nan
            hi = float(np.quantile(diff, 1 - q, method="higher")) if diff.size else math.nan
            area = {"area": math.nan, "lo": math.nan, "hi": math.nan}
            if len(ef) > 1 and len(eb) > 1:
                try:
                    with warnings.catch_warnings():  # infinite resamples: quantiles of +-inf
                        warnings.simplefilter("ignore", RuntimeWarning)
                        area = FR.area_between(sub, first, b, eps, replicate="replicate",
                                               bootstrap=bootstrap, seed=seed, confidence=confidence)
                except ValueError:
                    pass
            if not math.isfinite(point_f):
                status = "unreached"
            elif not math.isfinite(point_b):
                status = "baseline_unreached"
            else:
                status = "lower" if hi < 0 else "higher" if lo > 0 else "unresolved"
            rows.append({"epsilon": eps, "first": first, "baseline": b, "anchor_error": e0, "level": level,
                         "first_violation": point_f, "baseline_violation": point_b,
                         "diff": point_f - point_b, "diff_lo": lo, "diff_hi": hi, "area": area["area"],
                         "area_lo": area["lo"], "area_hi": area["hi"], "status": status})
    return pd.DataFrame(rows)


def _check_study_args(fairness, methods, lams, epsilons, replicates, epochs, batch_size, val_size,
                      test_size, selection, runs, score_noise, w_noise_ratio, violation_noise_ratio):
    from dpfair_jax import _validation as V
    from dpfair_jax.privacy.selection import RandomStopping

    V.check_choice("fairness", fairness, ("dp", "eo"))
    methods = tuple(methods)
    if not methods or len(set(methods)) != len(methods):
        raise ValueError(f"methods must be a non-empty list of distinct names from {METHODS}, got {methods!r}.")
    for m in methods:
        V.check_choice("method", m, METHODS)
    lam_a = np.asarray(lams, float)
    if lam_a.ndim != 1 or lam_a.size == 0 or not np.all(np.isfinite(lam_a)) or np.any(lam_a < 0):
        raise ValueError(f"lams must be a non-empty list of finite numbers >= 0, got {lams!r}.")
    eps = [float(e) for e in epsilons]
    if not eps:
        raise ValueError("epsilons must hold at least one value.")
    for e in eps:
        V.check_epsilon(e, "epsilons", allow_inf=True)
    V.check_int("replicates", replicates, minimum=1)
    V.check_int("epochs", epochs, minimum=1)
    V.check_int("batch_size", batch_size, minimum=1)
    for name, val in (("val_size", val_size), ("test_size", test_size)):
        if not 0.0 < float(val) < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {val!r}.")
    if float(val_size) + float(test_size) >= 0.9:
        raise ValueError(f"val_size + test_size = {float(val_size) + float(test_size):g} leaves under 10% "
                         "for training; lower them.")
    V.check_choice("selection", selection, ("private", "nonprivate"))
    if not isinstance(runs, RandomStopping) or math.isinf(runs.shape):
        raise ValueError("runs must be a privacy.selection.RandomStopping law with a finite shape (a "
                         "Poisson law may draw K = 0 and release no model for a point).")
    for name, val in (("score_noise", score_noise), ("w_noise_ratio", w_noise_ratio),
                      ("violation_noise_ratio", violation_noise_ratio)):
        V.check_positive(name, val)
    return methods, [float(x) for x in lam_a], eps


def _grid(method: str, search: dict | None, fixed: dict | None) -> list[dict[str, float]]:
    import itertools

    space = dict(DEFAULT_SEARCH[method] if search is None or method not in search else search[method])
    base = dict(_FIXED[method], **((fixed or {}).get(method, {})))
    fields = _FIELDS["pfld_epoch" if method == "pfld_epoch" else "fermi"]
    unknown = [k for k in list(space) + list(base) if k not in fields]
    if unknown:
        raise ValueError(f"search/fixed for {method!r} name unknown field(s) {unknown}; fields: {list(fields)}.")
    names = sorted(space)
    for k in names:
        vals = np.asarray(space[k], float)
        if vals.ndim != 1 or vals.size == 0:
            raise ValueError(f"search[{method!r}][{k!r}] must be a non-empty list of numbers.")
    out = []
    for combo in itertools.product(*(tuple(float(x) for x in space[k]) for k in names)):
        cand = dict(base, **dict(zip(names, combo)))
        out.append({f: float(cand[f]) for f in fields})
    return out


def _as_dataset(data, target, group, features):
    from dpfair_jax.data.dataset import Dataset, dataset_from_frame

    if isinstance(data, pd.DataFrame):
        if target is None or group is None:
            raise ValueError("a DataFrame needs target= and group= (column names); features= defaults "
                             "to every other column.")
        return dataset_from_frame(data, target=target, group=group, features=features)
    if not isinstance(data, Dataset):
        raise ValueError(f"data must be a dpfair_jax.data.Dataset or a pandas DataFrame, got "
                         f"{type(data).__name__}.")
    if target is not None or group is not None or features is not None:
        raise ValueError("target=/group=/features= name DataFrame columns; a Dataset has them already.")
    if data.mask is not None:
        raise ValueError("data has a mask (padding rows); drop them first.")
    data.validate()
    if data.num_classes < 2:
        raise ValueError("the tradeoff study needs a classification target (num_classes >= 2).")
    return data


def _permutation_splits(n: int, replicates: int, val_size: float, test_size: float,
                        seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Sorted (train, val, test) row indices of each replicate: replicate ``r`` permutes
    ``range(n)`` with NumPy's ``default_rng([seed, 1009, r])``; its first ``ceil(test_size * n)``
    rows are the test split, the next ``ceil(val_size * n)`` the validation split, the rest the
    training split. A function of ``(n, replicates, val_size, test_size, seed)`` only."""
    n_test, n_val = math.ceil(test_size * n), math.ceil(val_size * n)
    if n_test < 1 or n_val < 1 or n - n_test - n_val < 1:
        raise ValueError(f"val_size={val_size:g} and test_size={test_size:g} of n={n} rows leave an empty "
                         f"split ({n_val} validation, {n_test} test rows); use more rows or other sizes.")
    out = []
    for r in range(replicates):
        perm = np.random.default_rng([seed, 1009, r]).permutation(n)
        te, va, tr = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
        out.append((np.sort(tr), np.sort(va), np.sort(te)))
    return out


def _stratified_splits(y, s, num_classes: int, replicates: int, val_size: float, test_size: float,
                       seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The former stratified splits (by group and label): data-dependent, see :func:`replicate_splits`."""
    from dpfair_jax.data import preprocessing as pp

    strata = s * max(num_classes, 2) + y
    out = []
    for r in range(replicates):
        rest, te = pp.split_indices(len(y), test_size=test_size, seed=seed * 1009 + r, stratify=strata)
        tr_i, va_i = pp.split_indices(len(rest), test_size=val_size / (1.0 - test_size),
                                      seed=seed * 1009 + r + 500_000, stratify=strata[rest])
        out.append((rest[tr_i], rest[va_i], te))
    return out


def replicate_splits(data, *, replicates: int = 3, val_size: float = 0.15, test_size: float = 0.2,
                     standardize: bool = True, seed: int = 0, max_rows: int | None = None,
                     stratify: bool = False) -> dict:
    """The train/validation/test splits of :func:`tradeoff_frontier_study`, one per replicate.

    Replicate ``r`` (default): a uniform random permutation of the ``n`` rows from
    ``default_rng([seed, 1009, r])``, cut into ``ceil(test_size * n)`` test rows,
    ``ceil(val_size * n)`` validation rows and the rest for training; numeric columns (not
    0/1-valued) are z-scored with the replicate's training moments (``standardize``).
    ``max_rows`` first keeps a uniform random subset of the rows. Every split must hold every
    group: otherwise a ``ValueError`` names the replicate, the split and the missing groups.
    ``stratify=True`` splits each (group, label) stratum separately (the former default; not
    used by the study). Returns ``{"train" | "val" | "test": (x [R, n, d], y [R, n], s [R, n])}``
    as NumPy arrays.

    Privacy: by default which rows go to which split is a function of ``seed`` and ``n`` only, so
    changing one record's label, group or features moves no row between splits. Three things read
    the data and are not covered by a study's spend: (1) the group check, made before any compute
    as with any input check: a study that runs reveals one bit (every split holds every group), a
    refused one aborts and its message tells which split lacks which groups; (2) the z-scoring moments, computed from the
    training rows without noise; (3) ``stratify=True``, whose split depends on every record's group
    and label (one changed label moves other rows between splits): a data-dependent preprocessing
    step the spend does not cover.
    """
    from dpfair_jax import _validation as V

    ds = data
    V.check_int("replicates", replicates, minimum=1)
    for name, val in (("val_size", val_size), ("test_size", test_size)):
        if not 0.0 < float(val) < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {val!r}.")
    x = np.asarray(ds.x, np.float64)
    y = np.asarray(ds.y).astype(np.int32)
    s = np.asarray(ds.s).astype(np.int32)
    if max_rows is not None and max_rows < len(y):
        keep = np.sort(np.random.default_rng([seed, 17]).choice(len(y), size=int(max_rows), replace=False))
        x, y, s = x[keep], y[keep], s[keep]
    if stratify:
        index = _stratified_splits(y, s, ds.num_classes, replicates, float(val_size), float(test_size), seed)
    else:
        index = _permutation_splits(len(y), replicates, float(val_size), float(test_size), seed)
    for r, idx in enumerate(index):  # the group check: reads the data (docstring), before any compute
        for name, rows in zip(("train", "val", "test"), idx):
            missing = sorted(set(range(ds.num_groups)) - set(np.unique(s[rows]).tolist()))
            if missing:
                fix = "smaller val_size/test_size" if name == "train" else f"a larger {name}_size"
                raise ValueError(f"replicate {r}: the {name} split ({len(rows)} rows) has no rows of group(s) "
                                 f"{missing}; use more data, merge small groups, or {fix}.")
    scaled = ~np.all((x == 0) | (x == 1), axis=0) if standardize else np.zeros(x.shape[1], bool)
    parts: dict[str, list] = {"train": [], "val": [], "test": []}
    for tr, va, te in index:
        xr = x
        if scaled.any():
            mu = x[tr].mean(axis=0)
            sd = x[tr].std(axis=0)
            sd = np.where(sd > 1e-12, sd, 1.0)
            xr = np.where(scaled, (x - mu) / sd, x)
        for name, idx in (("train", tr), ("val", va), ("test", te)):
            parts[name].append((xr[idx], y[idx], s[idx]))
    out = {}
    for name, lst in parts.items():
        sizes = {len(p[1]) for p in lst}
        if len(sizes) != 1:
            raise ValueError(f"the {name} splits of the replicates differ in size {sorted(sizes)}.")
        out[name] = tuple(np.stack([p[j] for p in lst]) for j in range(3))
    return out


def _stack(ds, arrays):
    x, y, s = arrays
    return ds.replace(x=jnp.asarray(x, jnp.float32), y=jnp.asarray(y, jnp.int32),
                      s=jnp.asarray(s, jnp.int32), mask=None)


def _fermi_event(cfg, n: int, z_theta: float, z_w: float):
    """The ``DpEvent`` :func:`dpfair_jax.algorithms.fermi.spend` states for a run of ``cfg`` with
    these multipliers (all features, Poisson: the histogram composed with the steps)."""
    return F.spend(cfg, n, F.FermiHparams(noise_theta=float(z_theta), noise_w=float(z_w))).event


@functools.lru_cache(maxsize=16)
def _program(kind: str, cfg, model, num_classes: int, n_val: int):
    """One compiled program (cached: studies of the same shapes and configs share it): ``vmap`` over the runs of one replicate (its splits are arguments, so
    every replicate reuses the program)."""
    from dpfair_jax.algorithms import pfld_epoch as PE
    from dpfair_jax.privacy import mechanisms as Mech

    def one(train, val, test, key, lam, zt, z2, zs, hp):
        if kind == "pfld_epoch":
            h = PE.PFLDEpochHparams(lam=lam, lr_theta=hp["lr_theta"], lr_dual=hp["lr_dual"],
                                    clip_theta=hp["clip_theta"], clip_violation=hp["clip_violation"],
                                    noise_theta=zt, noise_violation=z2, radius=hp["radius"], tol=hp["tol"])
            res = PE.fit(key, train, h, cfg, validate=False)
        else:
            lr_w = jnp.where(lam > 0, hp["lr_w"] / jnp.maximum(lam, 1e-12), hp["lr_w"])  # lambda-free ascent
            h = F.FermiHparams(lam=lam, lr_theta=hp["lr_theta"], lr_w=lr_w, clip_theta=hp["clip_theta"],
                               clip_w=hp["clip_w"], noise_theta=zt, noise_w=z2, radius=hp["radius"])
            res = (pfld.fit if kind == "pfld_stochastic" else F.fit)(key, train, h, cfg, validate=False)
        params = res.params
        val_m = EV.evaluate(model, params, val, num_classes)
        # the score: the validation error count (sensitivity 1) with Gaussian noise of std zs
        noisy = val_m["error"] * n_val + Mech.gaussian_noise(jax.random.fold_in(key, _SCORE_TAG), (), zs)
        out = dict(EV.evaluate(model, params, test, num_classes))
        yhat = EV.predict(model, params, test.x)
        out["pred_share"] = jnp.max(jnp.mean(jax.nn.one_hot(yhat, num_classes), axis=0))
        out["score_errors"] = noisy
        out["truncated_steps"] = res.diagnostics["truncated_steps"]
        return out

    return jax.jit(jax.vmap(one, in_axes=(None, None, None, 0, 0, 0, 0, 0, 0)))


def tradeoff_frontier_study(
    data,
    *,
    target: str | None = None,
    group: str | None = None,
    features: list[str] | None = None,
    fairness: str = "dp",
    methods=METHODS,
    lams=DEFAULT_LAMS,
    epsilons=(1.0,),
    replicates: int = 3,
    epochs: int = 10,
    batch_size: int = 256,
    val_size: float = 0.15,
    test_size: float = 0.2,
    standardize: bool = True,
    max_rows: int | None = None,
    delta: float | None = None,
    selection: str = "private",
    runs=None,
    search: dict | None = None,
    fixed: dict | None = None,
    score_noise: float = 30.0,
    w_noise_ratio: float = 4.0,
    violation_noise_ratio: float = 10.0,
    count_noise_multiplier: float = 50.0,
    model=None,
    seed: int = 0,
    ctx=None,
) -> TradeoffStudy:
    """Fairness-error frontiers of DP-FERMI, both PF-LDs and DP-SGD, every method tuned on validation.

    Args:
      data: a :class:`~dpfair_jax.data.Dataset` (all rows; the study splits it) or a pandas
        DataFrame with columns ``target`` (two or more classes), ``group`` (the sensitive
        attribute) and ``features`` (default: every other column; non-numeric ones one-hot).
      fairness: ``"dp"`` (demographic parity, paper 004 eq. 10) or ``"eo"`` (equalized odds, eq. 11).
      methods: a subset of :data:`METHODS`.
      lams: the knob grid of the fair methods (DP-SGD is the lambda = 0 point).
      epsilons: target epsilons (``inf``: no noise); ``delta`` defaults to ``1 / n_train^2``.
      replicates: train/validation/test splits (``val_size``, ``test_size`` of the rows, a function
        of ``seed`` and the row count only, :func:`replicate_splits`; ``max_rows`` subsamples the
        data first); intervals are over replicates.
      epochs, batch_size: every method takes ``epochs * ceil(n_train / batch_size)`` Poisson-sampled
        steps of expected size ``batch_size``.
      selection: ``"private"`` (random stopping with ``runs``, default
        ``RandomStopping(mean=4, shape=1)``, the same for every method; the validation error
        count gets Gaussian noise of std ``score_noise``) or ``"nonprivate"`` (every grid point,
        exact arg-max; labelled, no guarantee for the selection).
      search: ``{method: {field: values}}`` replacing a method's candidate grid
        (:data:`DEFAULT_SEARCH`); ``fixed``: ``{method: {field: value}}`` for fields not searched.
      w_noise_ratio: the W (multiplier) update's noise multiplier over theta's in DP-FERMI and the
        stochastic PF-LD; ``violation_noise_ratio``: the same for PF-LD's per-epoch release;
        ``count_noise_multiplier``: the noisy group-frequency histogram of DP-FERMI, the
        stochastic PF-LD and DP-SGD (charged to each).
      model: a :mod:`dpfair_jax.models` model (default logistic, multinomial for more classes).
      ctx: a runner context: the spends go to ``privacy.json``, each program is a resumable chunk.

    Returns:
      :class:`TradeoffStudy` (table, spends, plot, comparison).

    Privacy: each row's model is (``spend_epsilon``, ``spend_delta``)-DP at the example level under
    add/remove, ``spend_epsilon <= epsilon`` with private selection (module docstring); every
    method of a study has the same unit, epsilon and delta.
    """
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import pfld_epoch as PE
    from dpfair_jax.privacy import accounting as A
    from dpfair_jax.privacy import sampling as Smp
    from dpfair_jax.privacy import selection as S

    runs = S.RandomStopping(mean=4.0, shape=1.0) if runs is None else runs
    methods, lams, eps = _check_study_args(fairness, methods, lams, epsilons, replicates, epochs, batch_size,
                                           val_size, test_size, selection, runs, score_noise, w_noise_ratio,
                                           violation_noise_ratio)
    grids = {m: _grid(m, search, fixed) for m in methods}
    ds = _as_dataset(data, target, group, features)
    k, l = ds.num_groups, max(ds.num_classes, 2)
    if model is None:
        model = M.logistic() if l == 2 else M.multinomial_logistic(l)
    splits = replicate_splits(ds, replicates=replicates, val_size=float(val_size), test_size=float(test_size),
                              standardize=standardize, seed=seed, max_rows=max_rows)
    n, n_val = splits["train"][1].shape[1], splits["val"][1].shape[1]
    delta = 1.0 / n**2 if delta is None else float(delta)
    from dpfair_jax import _validation as V

    V.check_delta(delta)
    steps = epochs * math.ceil(n / batch_size)
    common = dict(model=model, num_groups=k, num_classes=l, steps=steps, batch_size=batch_size,
                  fairness=fairness, privacy_unit="all_features",
                  count_noise_multiplier=float(count_noise_multiplier))
    cfgs = {"fermi": F.FermiConfig(**common).validate(n), "pfld_stochastic": pfld.config(**common).validate(n),
            "pfld_epoch": PE.PFLDEpochConfig(model=model, num_groups=k, num_classes=l, epochs=epochs,
                                             batch_size=batch_size, fairness=fairness, delta=delta,
                                             violation_noise_ratio=float(violation_noise_ratio)).validate(n)}
    for m in methods:  # every candidate checked on the host, before compute
        for cand in grids[m]:
            if m == "pfld_epoch":
                PE.check_hparams(PE.PFLDEpochHparams(**cand))
            else:
                F.check_hparams(F.FermiHparams(**cand))
    private = selection == "private"
    law = runs if private else None
    w_ratio = {"dpfermi": w_noise_ratio, "pfld_stochastic": w_noise_ratio, "dpsgd": _DPSGD_W_RATIO}

    # -- noise: per (method, epsilon) the training multipliers whose selection meets the target ----
    def run_event(m: str, z: float):
        import dp_accounting

        if m == "pfld_epoch":
            ev = PE.run_event(cfgs["pfld_epoch"], n, z, violation_noise_ratio * z)
        else:
            ev = _fermi_event(cfgs[_PROGRAM[m]], n, z, w_ratio[m] * z)
        return dp_accounting.ComposedDpEvent([ev, dp_accounting.GaussianDpEvent(float(score_noise))]) \
            if private else ev

    t0 = time.perf_counter()
    noise, spends, cache = {}, {}, {}
    for m in methods:
        for e in eps:
            z = 0.0
            if math.isfinite(e):
                ck = ("pfld_epoch" if m == "pfld_epoch" else w_ratio[m], e)
                if ck not in cache:
                    cache[ck] = S.calibrate_for_selection(lambda zz, m=m: run_event(m, zz), law, e, delta,
                                                          relation="add_remove", rtol=0.005)
                z = cache[ck]
            z2 = (violation_noise_ratio if m == "pfld_epoch" else w_ratio[m]) * z
            noise[(m, e)] = (z, z2)
            spends[(m, e)] = _selection_spend(m, e, z, run_event, law, delta, n, cfgs, grids, private, Smp, S, A,
                                              selection_label=_selection_label(law))
    if ctx is not None:
        ctx.log(f"tradeoff study: n_train={n}, n_val={n_val}, steps={steps}, delta={delta:.3g}; noise "
                f"calibrated in {time.perf_counter() - t0:.1f} s")
        for (m, e), sp in spends.items():
            if math.isfinite(e):
                ctx.record_privacy(f"{m}_{fairness}_eps{e:g}", sp, not_covered=_NOT_COVERED)

    # -- the searches: K runs, each on a uniformly drawn candidate (internal: never released) -------
    searches = _search_plan(methods, grids, eps, lams, replicates, law, seed)
    base_key = jax.random.key(seed)

    stacked = {name: _stack(ds, splits[name]) for name in ("train", "val", "test")}
    base_err = 1.0 - np.max(np.stack([np.mean(splits["test"][1] == j, axis=1) for j in range(l)]), axis=0)

    def compute(chunk: dict) -> pd.DataFrame:
        kind = chunk["program"]
        t1 = time.perf_counter()
        mine = [i for i, sr in enumerate(searches) if _PROGRAM[sr["method"]] == kind]
        per_rep = [[] for _ in range(replicates)]  # (search index, slot)
        for i in mine:
            for j in range(len(searches[i]["cands"])):
                per_rep[searches[i]["replicate"]].append((i, j))
        L = max(8, -(-max(len(p) for p in per_rep) // 8) * 8)
        fields = _FIELDS["pfld_epoch" if kind == "pfld_epoch" else "fermi"]
        arr = {f: np.zeros((replicates, L), np.float32) for f in fields + ("lam", "zt", "z2", "zs")}
        for r, lst in enumerate(per_rep):
            for pos in range(L):
                i, j = lst[pos] if pos < len(lst) else lst[0]
                sr = searches[i]
                cand = grids[sr["method"]][int(sr["cands"][j])]
                e = eps[sr["eps_i"]]
                zt, z2 = noise[(sr["method"], e)]
                for f in fields:
                    arr[f][r, pos] = cand[f]
                arr["lam"][r, pos], arr["zt"][r, pos], arr["z2"][r, pos] = sr["lam"], zt, z2
                arr["zs"][r, pos] = score_noise if (private and math.isfinite(e)) else 0.0
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.fold_in(base_key, 0x72756E), i))(
            jnp.arange(replicates * L) + 100_000 * list(("fermi", "pfld_stochastic", "pfld_epoch")).index(kind))
        keys = keys.reshape((replicates, L))
        prog = _program(kind, cfgs[kind], model, l, n_val)
        outs = []
        for r in range(replicates):
            part = {name: jax.tree_util.tree_map(lambda a: a[r], stacked[name]) for name in stacked}
            o = prog(part["train"], part["val"], part["test"], keys[r], jnp.asarray(arr["lam"][r]),
                     jnp.asarray(arr["zt"][r]), jnp.asarray(arr["z2"][r]), jnp.asarray(arr["zs"][r]),
                     {f: jnp.asarray(arr[f][r]) for f in fields})
            outs.append({name: np.asarray(v) for name, v in jax.block_until_ready(o).items()})
        out = {name: np.stack([o[name] for o in outs]) for name in outs[0]}
        metric = "dp_violation" if fairness == "dp" else "eo_violation"
        rows = []
        where = {key: pos for r, lst in enumerate(per_rep) for pos, key in enumerate(lst)}
        for i in mine:
            sr = searches[i]
            r, m, e = sr["replicate"], sr["method"], eps[sr["eps_i"]]
            pos = [where[(i, j)] for j in range(len(sr["cands"]))]
            score = -out["score_errors"][r, pos]
            best = int(np.argmax(score))
            p = pos[best]
            cand = grids[m][int(sr["cands"][best])]
            sp = spends[(m, e)]
            err = float(out["error"][r, p])
            constant = bool(out["pred_share"][r, p] >= 1.0)
            at_base = err >= float(base_err[r]) - 0.005
            row = {"method": m, "label": METHOD_LABELS[m], "unit": UNIT_LABEL, "fairness": fairness,
                   "metric": metric, "epsilon": e, "lam": sr["lam"], "replicate": r, "error": err,
                   "violation": float(out[metric][r, p]), "dp_violation": float(out["dp_violation"][r, p]),
                   "eo_violation": float(out["eo_violation"][r, p]), "ermi": float(out["ermi"][r, p]),
                   "val_error_noisy": float(out["score_errors"][r, p]) / n_val,
                   "degenerate": constant or at_base, "constant": constant, "base_error": float(base_err[r]),
                   "spend_epsilon": float(sp.epsilon), "spend_delta": float(sp.delta),
                   "selection": _selection_label(law), "candidate": int(sr["cands"][best]),
                   "noise_theta": noise[(m, e)][0], "truncated_steps": float(out["truncated_steps"][r, p])}
            row.update({f"hp_{f}": v for f, v in cand.items()})
            rows.append(row)
        if ctx is not None:
            # the number of runs (a function of the K's) is not logged: it is not covered by the spend
            ctx.log(f"{kind}: {replicates} replicates x {steps} steps: {time.perf_counter() - t1:.1f} s")
        return pd.DataFrame(rows)

    programs = [p for p in ("fermi", "pfld_stochastic", "pfld_epoch") if any(_PROGRAM[m] == p for m in methods)]
    chunks = [{"program": p, "fairness": fairness, "methods": list(methods)} for p in programs]
    if ctx is None:
        table = pd.concat([compute(c) for c in chunks], ignore_index=True)
    else:
        table = ctx.map_chunks(chunks, compute, desc=f"tradeoff_{fairness}")
    order = {m: i for i, m in enumerate(methods)}
    table = table.sort_values(["method", "epsilon", "lam", "replicate"], key=lambda c: c.map(order)
                              if c.name == "method" else c).reset_index(drop=True)
    info = {"n_train": n, "n_val": n_val, "n_test": splits["test"][1].shape[1], "steps": steps, "delta": delta,
            "noise": {f"{m}@{e:g}": zz for (m, e), zz in noise.items()},
            "grid_sizes": {m: len(g) for m, g in grids.items()}, "selection": _selection_label(law)}
    return TradeoffStudy(table, spends, fairness, UNIT_LABEL, info)


_NOT_COVERED = ("the check that every split of every replicate has every group (one bit about the data, "
                "before training; a failing check aborts the study); each replicate's numeric columns are "
                "z-scored with its training split's moments, computed without noise; the test metrics are "
                "evaluation")


def _search_plan(methods, grids, eps, lams, replicates, law, seed: int) -> list[dict]:
    """The searches of a study, one per (method, epsilon, lambda, replicate): ``K ~ law`` candidate
    indices drawn uniformly from the method's grid (``law=None``: every grid point once).

    Internal: ``K`` and the candidates tried are not covered by the selection's spend and are
    never returned or written by the study (only the winner of each search is)."""
    from dpfair_jax.privacy import selection as S

    searches = []
    base_key = jax.random.key(seed)
    for mi, m in enumerate(methods):
        G = len(grids[m])
        for ei, _ in enumerate(eps):
            for li, lam in enumerate([0.0] if m == "dpsgd" else lams):
                for r in range(replicates):
                    if law is not None:
                        kk = jax.random.fold_in(jax.random.fold_in(base_key, 1 + mi), (ei * 1000 + li) * 1000 + r)
                        K = S.draw_num_runs(kk, law)
                        cands = np.random.default_rng([seed, mi, ei, li, r]).integers(0, G, size=K)
                    else:
                        cands = np.arange(G)
                    searches.append({"method": m, "eps_i": ei, "lam": lam, "replicate": r, "cands": cands})
    return searches


def _selection_label(law) -> str:
    return "nonprivate_argmax" if law is None else f"random_stopping(mean={law.mean:g}, shape={law.shape:g})"


def _selection_spend(m, e, z, run_event, law, delta, n, cfgs, grids, private, Smp, S, A, *, selection_label):
    """The spend of one (method, epsilon): the best of ``K ~ law`` runs (or, labelled, the
    unaccounted arg-max over the grid)."""
    cfg = cfgs[_PROGRAM[m]]
    if not math.isfinite(e):
        return A.PrivacySpend(math.inf, delta, relation="add_remove", unit="example",
                              notes=f"{m}: epsilon = inf, no noise ({selection_label})")
    ev = run_event(m, z)
    steps = cfg.steps(n) if m == "pfld_epoch" else cfg.steps
    B = cfg.sgda_config(n).padded_batch(n) if m == "pfld_epoch" else cfg.sgda_config().padded_batch(n)
    if not private:
        one = A.epsilon_of_event(ev, delta)
        return A.PrivacySpend(math.inf, delta, event=ev, relation="add_remove", unit="example",
                              notes=f"{m}: non-private arg-max over {len(grids[m])} runs, the selection is not "
                                    f"accounted (each run alone: epsilon {one:.4g})")
    eps_sel = S.selection_epsilon(ev, law, delta, relation="add_remove")
    trunc = Smp.truncation_delta(n, cfg.batch_size / n, B, steps, eps_sel) * law.mean if B < n else 0.0
    return A.PrivacySpend(eps_sel, min(delta + trunc, 0.999999), event=S.repeat_and_select_event(ev, law),
                          relation="add_remove", unit="example", accountant="rdp",
                          notes=(f"{m}: best of K ~ {selection_label} runs on validation (each run: training, "
                                 f"its releases and a noisy validation error count); Poisson padding {B} rows, "
                                 f"truncation delta {trunc:.2e} (times the mean number of runs) included"))
