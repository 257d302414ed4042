"""Claim rows of the paper-004 tradeoff experiments: the one-per-baseline frontier claims decided by
the verdict rule (:mod:`dpfair_jax.runner.verdict`) against the paper's own margins
(``config.PAPER_MARGINS``), the replicate planning (``replicates="auto"``) and the plain claim helper."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

__all__ = ["claim_effects", "replicates_for", "gate_reason"]


def gate_reason(gates: dict[str, str], method: str, baseline: str) -> str | None:
    """Why a claim comparing ``method`` with ``baseline`` is untestable: the convergence precondition of
    either does not hold (``gates``: ``{method: reason}``); None when both hold."""
    parts = [f"{m}'s convergence precondition does not hold ({gates[m]})" for m in (method, baseline) if m in gates]
    return "; ".join(parts) or None


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


def _frontier_claim(ctx, config: dict, res, metric: str, gates: dict[str, str] | None = None) -> None:
    """One claim per baseline, decided by the one verdict rule
    (:func:`dpfair_jax.runner.verdict.directional_verdict`): the paired per-split effect's t-interval,
    family-wise 95% over the experiment's baselines (Bonferroni, ``comparisons`` = the number of
    baselines, 3 in the full configs), set against the paper's own margin for the same statistic
    (``config.PAPER_MARGINS``), with the detectable effect and the splits the claim would need.
    ``gates`` (``{method: reason}``, :func:`.preconditions.precondition_rows`): a claim resting on a
    method whose convergence preconditions do not hold is *untestable* with that reason (never
    *fails*); its interval is still recorded."""
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
        gate = gate_reason(gates or {}, "dpfermi", b)
        if gate is not None:
            extra["status_before_gate"] = v.status
            was = f"{v.status}" + (f": {v.reason}" if v.reason else "")
            v = dataclasses.replace(v, status="untestable", reason=f"untestable: {gate}; the interval alone "
                                    f"would read {was}")
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
