"""Paper 003, Fig. 5 with AIM (smartnoise-synth, the optional ``synth`` extra): vanilla vs stratified
AIM on Adult, per-cell intervals over trials and the claim decided by the verdict rule.

Effect of a cell (stratified variant ``v``, epsilon ``e``), trial ``s``: ``PE_vanilla(e, s) -
PE_v(e, s)`` (Def. 10 on column means, strata sex x race), positive on the paper's side (the
stratified table has the lower parity error), paired over trials (the same split, noisy-count keys
and trial index; AIM's own noise is OpenDP's and not keyed). Each cell gets its interval
(Bonferroni over the cells); the claim ("lower parity error at higher budgets") is the mean effect
over the cells with ``e >= aim_min_epsilon``, one replicate per trial, against 0: the paper states a
direction, no size (:func:`dpfair_jax.runner.verdict.directional_verdict`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .claims import AIM_STATEMENT, WHY_NOT

#: Where the paper's claim comes from (the verdict's paper effect: a direction, no size).
AIM_SOURCE = ("Fig. 5 (Sec. 6): stratified AIM below vanilla AIM in parity error at the higher budgets; the paper "
              "reports curves, no effect size")


def aim_skip_reason(why: str) -> str:
    """The skipped AIM row's reason: the optional extra is absent (``why``), nothing is installed,
    and what the kit's own synthesizer covers in its place."""
    return (f"skipped: the optional synth extra (smartnoise-synth) is not installed here ({why}); the row "
            "needs AIM itself. The kit's MST-like JAX marginal synthesizer covers only the vanilla vs stratified "
            "comparison on Adult with all one- and two-way marginals measured at once (rows synthesis_parity and "
            "synthesis_accuracy, labelled reconstructions): none of AIM's workload- and budget-adaptive selection, "
            "so it says nothing about this row's claim")


def run_aim(table: Any, config: dict, ctx: Any) -> None:
    """The optional AIM run: one resumable chunk per (epsilon, trial); skipped with the reason when
    the extra is absent or the config turns it off."""
    from dpfair_jax.studies import aim
    from dpfair_jax.studies import synthesis as syn

    if not config.get("synth_aim", True):
        ctx.skip_claim("synthesis_parity_aim", AIM_STATEMENT, "AIM turned off in this config (synth_aim = false)")
        return
    ok, why = aim.aim_available()
    if not ok:
        ctx.log(f"AIM skipped: {why}")
        ctx.skip_claim("synthesis_parity_aim", AIM_STATEMENT, aim_skip_reason(why))
        return
    variants = list(config["aim_variants"])
    if "vanilla" not in variants or len(variants) < 2:
        ctx.skip_claim("synthesis_parity_aim", AIM_STATEMENT, f"needs 'vanilla' and a stratified variant in "
                       f"aim_variants {variants}")
        return
    rounds = int(config["aim_rounds"]) or None
    chunks = [{"epsilon": float(e), "trial": t} for e in config["aim_epsilons"] for t in range(int(config["aim_seeds"]))]
    df = ctx.map_chunks(chunks, lambda c: syn.synthesis_study(
        table, epsilons=[c["epsilon"]], variants=variants, seeds=1, first_trial=c["trial"], synthesizer="aim",
        delta=float(config["synth_delta"]), max_rows=int(config["aim_rows"]) or None,
        trees=int(config["classifier_trees"]), seed=int(config["seed"]), domains=syn.adult_synthesis_domains(),
        aim_rounds=rounds), desc="synthesis_aim")
    ctx.save_table(df, "synthesis_aim")
    cells, replicates = aim_cells(df, float(config["aim_min_epsilon"]))
    ctx.save_table(cells, "synthesis_aim_cells")
    _claim(ctx, config, cells, replicates)
    for eps in config["aim_epsilons"]:
        ctx.record_privacy(f"synth_aim_eps_{eps:g}", syn.study_spend(float(eps), float(config["synth_delta"])))


def aim_cells(df: Any, min_epsilon: float) -> tuple[Any, np.ndarray]:
    """Per-cell paired effects ``vanilla - stratified`` over trials with Bonferroni intervals (one
    row per (variant, epsilon)), and the per-trial mean effect over the cells at ``epsilon >=
    min_epsilon`` (the claim's replicates)."""
    import pandas as pd

    from dpfair_jax.runner.verdict import PaperEffect, directional_verdict, estimate_from_replicates

    pe = df.pivot_table(index=["epsilon", "seed"], columns="variant", values="parity_error")
    strat = [c for c in pe.columns if c != "vanilla"]
    diffs = {(v, e): (pe.loc[e, "vanilla"] - pe.loc[e, v]).to_numpy(np.float64)
             for v in strat for e in sorted(pe.index.get_level_values(0).unique())}
    paper = PaperEffect(source=AIM_SOURCE)
    rows = []
    for (v, e), d in diffs.items():
        row = {"variant": v, "epsilon": e, "trials": d.size, "vanilla": float(pe.loc[e, "vanilla"].mean()),
               "stratified": float(pe.loc[e, v].mean()), "effect": float(d.mean())}
        if d.size >= 2:
            ver = directional_verdict(estimate_from_replicates(d), paper, comparisons=len(diffs))
            row.update(ci_low=ver.interval[0], ci_high=ver.interval[1], level=ver.level,
                       mde=ver.minimum_detectable_effect, status=ver.status)
        rows.append(row)
    high = [d for (v, e), d in diffs.items() if e >= min_epsilon]
    reps = np.mean(np.stack(high), axis=0) if high else np.zeros(0)
    return pd.DataFrame(rows), reps


def _claim(ctx: Any, config: dict, cells: Any, replicates: np.ndarray) -> None:
    from dpfair_jax.runner.verdict import PaperEffect, directional_verdict, estimate_from_replicates

    table = {f"{r.variant}@{r.epsilon:g}": {"effect": round(r.effect, 4), "vanilla": round(r.vanilla, 4),
                                           "stratified": round(r.stratified, 4),
                                           "ci": [round(getattr(r, "ci_low", np.nan), 4),
                                                  round(getattr(r, "ci_high", np.nan), 4)],
                                           "status": getattr(r, "status", None)}
             for r in cells.itertuples()}
    size = (f"AIM rounds T = {int(config['aim_rounds']) or 'default 16 d'}, rows "
            f"{int(config['aim_rows']) or 'all'}, {int(config['aim_seeds'])} trials; cells at epsilon >= "
            f"{float(config['aim_min_epsilon']):g} decide the claim")
    if replicates.size < 2:
        ctx.add_claim("synthesis_parity_aim", AIM_STATEMENT, measured={"cells": table}, target="interval above 0",
                      passed=False, status="untestable",
                      reason=f"no interval: fewer than 2 trials or no cell at epsilon >= aim_min_epsilon ({size})")
        return
    ver = directional_verdict(estimate_from_replicates(replicates), PaperEffect(source=AIM_SOURCE))
    ctx.add_verdict("synthesis_parity_aim", AIM_STATEMENT, ver, reason=f"{size}; {WHY_NOT['synthesis_parity_aim']}"
                    if ver.status != "holds" else size, extra={"cells": table})
