"""Result tables of the tradeoff studies: :class:`TradeoffStudy`, the frontier comparison and the
equal-error table of the fixed-hyperparameter engine."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from dpfair_jax.studies.tradeoff.methods import UNIT_LABEL
from dpfair_jax.studies.tradeoff.plots import plot_study, with_converged_share


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

@dataclasses.dataclass(frozen=True)
class SelectedModel:
    """The released model of one row of :func:`tradeoff_frontier_study` (a search's winner).

    ``params``: the trained parameters (NumPy float32 leaves; the model's structure: predict with
    :func:`dpfair_jax.fairness.evaluation.predict`; ``"jagielski_post"``: ``{"classifier",
    "post_processing"}``, a randomized classifier; ``"jagielski_in"``: ``{"mixture", "class"}``,
    the probability of a 1 is ``oracle.class_preds(class, x).T @ mixture``); ``spend``: the row's
    :class:`~dpfair_jax.privacy.accounting.PrivacySpend` (the whole selection, covering this
    model: keep it, do not refit, a refit would spend again); ``hparams``: the winning candidate;
    ``metrics``: the row of the table (test metrics, noisy validation score, spend).
    """

    method: str
    epsilon: float
    lam: float
    replicate: int
    params: Any
    spend: Any
    hparams: dict
    metrics: dict

    def save(self, path, *, metadata: dict | None = None):
        """:func:`dpfair_jax.serialization.save_run` of ``params`` and ``spend``; the metadata holds
        the row's key, hyperparameters and metrics (load with ``load_run``)."""
        from dpfair_jax.serialization import save_run

        meta = {"study": "tradeoff_frontier_study", "method": self.method, "epsilon": self.epsilon,
                "lam": self.lam, "replicate": self.replicate, "hparams": self.hparams, "metrics": self.metrics,
                **(metadata or {})}
        return save_run(path, self.params, self.spend, metadata=meta)


@dataclasses.dataclass
class TradeoffStudy:
    """Result of :func:`tradeoff_frontier_study`.

    ``table``: one row per (method, epsilon, lam, replicate), with ``converged`` (nullable boolean)
    and ``stationarity``: the released run's gradient norm of its method's own objective on the
    held-out test split (evaluation, like the test metrics) over the norm at the methods' start,
    converged when at most :data:`~dpfair_jax.studies.tradeoff.convergence.STATIONARITY_RTOL`
    (:func:`~dpfair_jax.studies.tradeoff.convergence.row_stationarity`: DP-FERMI's ERMI objective,
    DP-SGD's task loss, both PF-LDs' Lagrangian at their final multipliers; Jagielski et al.'s
    post-processing is an exact linear program, converged by construction, so its flag is its DP-SGD
    base classifier's; ``"mitigation"`` has no criterion, its penalized objective being nonsmooth
    with private plug-in statistics: ``<NA>``, stationarity NaN); ``spends``: the
    :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of each (method, epsilon) (every row of that
    method and epsilon has it); ``info``: sizes, steps and noise multipliers; ``models``: the
    :class:`SelectedModel` of each row, keyed ``(method, epsilon, lam, replicate)`` (:meth:`model`).
    """

    table: pd.DataFrame
    spends: dict
    fairness: str
    unit: str = UNIT_LABEL
    info: dict = dataclasses.field(default_factory=dict)
    models: dict = dataclasses.field(default_factory=dict, repr=False)

    def model(self, method: str, epsilon: float, lam: float = 0.0, replicate: int = 0) -> SelectedModel:
        """The released model of the row ``(method, epsilon, lam, replicate)`` (DP-SGD: ``lam=0``)."""
        key = (str(method), float(epsilon), float(lam), int(replicate))
        if key not in self.models:
            rows = self.table[["method", "epsilon", "lam", "replicate"]].itertuples(index=False, name=None)
            known = sorted({(str(m), float(e), float(l), int(r)) for m, e, l, r in rows}, key=str)
            if key in known:
                raise ValueError(f"the model of row {key} was not kept in this process (its block was read "
                                 "back from a finished chunk of a resumed run); rerun with --fresh to get it.")
            raise ValueError(f"no row (method, epsilon, lam, replicate) = {key}; the study's rows: {known[:8]}"
                             f"{' ...' if len(known) > 8 else ''}.")
        return self.models[key]

    def frontier(self, confidence: float = 0.95) -> pd.DataFrame:
        """:func:`dpfair_jax.fairness.frontier.frontier_table` of the test results, with column
        ``converged``: the share of the point's replicates whose run converged (NaN for a method
        without a criterion; see the class docstring)."""
        from dpfair_jax.fairness import frontier as FR

        ft = FR.frontier_table(self.table, by=("method", "epsilon"), knob="lam",
                               violation="violation", confidence=confidence)
        return with_converged_share(ft, self.table) if "converged" in self.table else ft

    def plot(self, title: str | None = None):
        """The frontier plot (:func:`plot_study`)."""
        return plot_study(self.table, title=title)

    def compare(self, **kwargs) -> pd.DataFrame:
        """:func:`compare_frontiers` on the table."""
        return compare_frontiers(self.table, **kwargs)

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
