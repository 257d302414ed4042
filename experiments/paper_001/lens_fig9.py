"""``lens_fig9`` (Fig 9): DP-SGD on globally vs per-group standardized features, per data set,
trained long enough that the private model has learned (the share of the private loss drop made
in the last checkpoint interval is the plateau test; the learned fraction of the non-private
model's loss drop is reported per checkpoint); excessive-risk gap and mean excessive risk along the
epsilon path with standard errors over seeds, paired over the same seeds, keys and batches.

Privacy: ``dpsgd.spend`` of each checkpoint (:func:`training.checkpoint_spend`, truncation charge
included); the standardization moments are not covered (:data:`common.PREPROCESSING`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import figures
from .common import PREPROCESSING, check_plateau_limit, mean_se, record_weakest
from .datasets import load_dataset
from .training import checkpoint_spend, group_losses, init_params, train_checkpoints

__all__ = ["fig9_claim", "fig9_path", "run_fig9"]


def fig9_claim(dataset: str) -> tuple[str, str]:
    """The Fig 9 claim of one data set (id, statement)."""
    return (f"fig9_group_normalization_{dataset}",
            f"Fig 9 ({dataset}): per-group normalization reduces the excessive-risk gap and the mean excessive "
            "risk of DP-SGD, at the end of a trained run (gap and mean along the epsilon path in the table; both "
            "paired over seeds)")


def fig9_path(name: str, config: dict, seed: int, log=print) -> pd.DataFrame | str:
    """One data set's Fig 9 path: for each normalization ("standard", "group") and checkpoint, the
    epsilon spent, the private training loss, the share of its drop from the initial loss made in the
    last checkpoint interval (a plateau test: the run is trained when the share is small), the
    learned fraction ``(L_init - L_priv) / (L_init - L_ref)`` (against the non-private model with
    the same schedule and batches, which can keep overfitting), and per seed
    the excessive risks ``L_priv,a - L_ref,a`` of the groups: gap ``max_a - min_a`` and mean over
    groups, with their means and standard errors, and the paired differences group - standard (the
    same seeds, keys and batches). Returns the frame, or the reason the data set is missing."""
    import jax

    per = {}
    for norm in ("standard", "group"):
        loaded, reason = load_dataset(name, seed=seed, max_rows=config.get("max_rows"),
                                      synthetic=config.get("synthetic"), path=config.get("path"), normalization=norm)
        if loaded is None:
            return reason
        train = loaded[0]
        log(f"fig9 {name} ({norm}): n={train.n}, d={train.d}, groups={train.group_sizes().astype(int).tolist()}")
        model, priv, ref = train_checkpoints(train, config, seed, [float(config["clip_norm"])])
        p0 = init_params(model, jax.random.split(jax.random.key(seed), int(config["seeds"])))
        w = np.asarray(train.group_sizes(), np.float64)
        w = w / w.sum()
        l0 = np.asarray(group_losses(model, p0, train)) @ w  # [S] initial training loss
        rows = []
        for t, (pp, pr) in enumerate(zip(priv, ref)):
            steps = int(config["steps_per_checkpoint"]) * (t + 1)
            spend = checkpoint_spend(train.n, config, t + 1)
            lp = np.asarray(group_losses(model, pp, train))[:, 0, :]  # [S, K]
            lr_ = np.asarray(group_losses(model, pr, train))  # [S, K]
            risk = lp - lr_
            learned = (l0 - lp @ w) / np.maximum(l0 - lr_ @ w, 1e-12)
            rows.append({"steps": steps, "epsilon": spend.epsilon, "delta": spend.delta, "gap": risk.max(1) - risk.min(1),
                         "mean_risk": risk.mean(1), "learned": learned, "loss": lp @ w, "drop": l0 - lp @ w})
        per[norm] = rows
    out = []
    for t in range(len(per["standard"])):
        row = {"dataset": name, "checkpoint": t + 1, "steps": per["standard"][t]["steps"],
               "epsilon": per["standard"][t]["epsilon"], "delta": per["standard"][t]["delta"]}
        for norm in ("standard", "group"):
            r = per[norm][t]
            for key in ("gap", "mean_risk", "learned", "loss"):
                row[f"{key}_{norm}"], row[f"{key}_{norm}_se"] = mean_se(r[key])
            # share of the private loss drop (from the initial loss) made in the last checkpoint interval
            prev = per[norm][t - 1]["drop"] if t else np.zeros_like(r["drop"])
            row[f"last_interval_share_{norm}"] = float(np.mean(r["drop"] - prev) / max(np.mean(r["drop"]), 1e-12))
        for key in ("gap", "mean_risk"):
            row[f"{key}_diff"], row[f"{key}_diff_se"] = mean_se(per["group"][t][key] - per["standard"][t][key])
        out.append(row)
    return pd.DataFrame(out)


#: The paper's Fig 9 statement (App. C.1), quoted: it gives the direction, not a size.
FIG9_SOURCE = ("App. C.1, Fig 9: 'The results clearly show that this strategy can not only reduce unfairness, but "
               "also the excessive risk gaps' (curves only, no numbers in the text)")


def _decide(ctx, name: str, df: pd.DataFrame, config: dict) -> None:
    """Record data set ``name``'s Fig 9 claim from its path ``df``, read at the final checkpoint once
    the plateau test passes: two directional verdicts (the gap and the mean excessive risk, each
    standard - group paired over seeds, Bonferroni over the two), the claim as its weaker part."""
    from dpfair_jax.runner.verdict import Estimate, PaperEffect, directional_verdict

    cid, statement = fig9_claim(name)
    end = df.iloc[-1]
    plateau = max(abs(end["last_interval_share_standard"]), abs(end["last_interval_share_group"]))
    trained = {"epsilon": float(end["epsilon"]), "steps": int(end["steps"]),
               "train_loss": {"standard": float(end["loss_standard"]), "group": float(end["loss_group"])},
               "last_interval_share_of_loss_drop": float(plateau),
               "learned_fraction_vs_nonprivate": {"standard": float(end["learned_standard"]),
                                                  "group": float(end["learned_group"])}}
    share = check_plateau_limit(config)
    if not (plateau <= share and end["loss_standard"] < df.iloc[0]["loss_standard"] + 1.0):
        ctx.add_claim(cid, statement, measured=trained, target=f"trained (last interval <= {share:g} of the drop)",
                      passed=False, status="untestable",
                      reason=f"the private training loss has not levelled off by the last checkpoint (the last "
                             f"interval made {plateau:.2f} of its drop > {share:g}): train longer")
        return
    seeds = int(config["seeds"])
    paper = PaperEffect(source=FIG9_SOURCE)
    verdicts = {key: directional_verdict(Estimate(-float(end[f"{key}_diff"]), float(end[f"{key}_diff_se"]),
                                                  seeds - 1, seeds), paper, comparisons=2)
                for key in ("gap", "mean_risk")}
    ctx.log(f"fig9 {name}: " + "; ".join(f"{k} {v.summary()}" for k, v in verdicts.items()))
    record_weakest(ctx, cid, statement, verdicts, extra=trained,
                   reason=(f"{name}, {seeds} seeds, {len(df)} checkpoints up to eps = {end['epsilon']:.2f} (the "
                           f"effect is standard - group, positive on the paper's side; gap and mean excessive risk, "
                           f"Bonferroni over the two)"))


def run_fig9(config: dict, ctx) -> pd.DataFrame | None:
    """Fig 9 on each data set of ``config["datasets"]`` (one chunk each)."""
    check_plateau_limit(config)
    frames = []
    for name in config["datasets"]:
        cid, statement = fig9_claim(name)

        def compute(chunk, name=name):
            got = fig9_path(name, config, ctx.seed, log=ctx.log)
            return pd.DataFrame({"dataset": [name], "missing": [got]}) if isinstance(got, str) else got

        df = ctx.map_chunks([{"dataset": name}], compute, desc=f"fig9_{name}")
        if "missing" in df.columns:
            ctx.log(str(df["missing"].iloc[0]))
            ctx.skip_claim(cid, statement, str(df["missing"].iloc[0]))
            continue
        frames.append(df)
        _decide(ctx, name, df, config)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    ctx.save_table(df, "fig9_path")
    # the largest (epsilon, delta) over the data sets' final checkpoints: each is dpsgd.spend's
    # spend, whose delta includes the truncation charge of the padded Poisson batch
    ctx.record_privacy("dpsgd_fig9_final", {"relation": "add_remove", "epsilon": float(df["epsilon"].max()),
                                            "delta": float(df["delta"].max()), "unit": "example",
                                            "notes": "each data set's final checkpoint (the largest epsilon and "
                                                     "delta of the paths; delta includes the Poisson padding's "
                                                     "truncation charge); " + PREPROCESSING})
    figures.fig9(ctx, df)
    return df
