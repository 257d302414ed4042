"""``lens_dpsgd`` (Figs 10, 11, the gradient-norm study of App. C.2 and the trace vs decision-boundary
study of App. C.3): a one-hidden-layer tanh MLP trained by the kit's DP-SGD, seeds x clip norms
vmapped in one program per checkpoint, the epsilon of each checkpoint from the accountant; excessive
risk against the non-private model trained with the same schedule and batches (noise 0, no
clipping); Theorem 2's R_clip vs psi_a; group-size ratios by subsampling (masks, one program);
per-example Hessian traces (Appendix D closed forms) vs distance to the decision boundary.

Privacy: ``dpsgd.spend`` of the steps run (:func:`training.checkpoint_spend`); the standardization
moments are not covered (:data:`common.PREPROCESSING`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import figures
from .common import PREPROCESSING, WHY_NOT, skip_all
from .datasets import load_dataset
from .training import checkpoint_spend, group_losses, losses, per_example_loss, train_checkpoints

__all__ = ["run_dpsgd"]


def _checkpoint_rows(train, config: dict, ctx, clips: list, main_c: int):
    """Per checkpoint, clip norm and group: excessive risk and gradient norms; Theorem 2's
    decomposition at the main clip norm. Returns ``(rows, dec_rows, final_spend, p_final, model)``."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.analysis import decomposition as D

    name, norm = config["dataset"], "standard"
    steps = int(config["steps_per_checkpoint"])
    model, priv, ref = train_checkpoints(train, config, ctx.seed, clips)
    loss_fn = per_example_loss(model)
    dec_idx = np.sort(np.random.default_rng(ctx.seed).permutation(train.n)[: int(config["decomposition_rows"])])
    sub = train.take(dec_idx)
    rows, dec_rows = [], []
    for t, (pp, pr) in enumerate(zip(priv, ref)):
        spend = checkpoint_spend(train.n, config, t + 1)
        lp = np.asarray(group_losses(model, pp, train))  # [S, C, K]
        lr_ = np.asarray(group_losses(model, pr, train))  # [S, K]
        risk = lp - lr_[:, None, :]
        for ci, c in enumerate(clips):
            p_main = jax.tree_util.tree_map(lambda a: a[0, ci], pp)
            gn = D.group_gradient_norms(loss_fn, p_main, train.x, train.y.astype(jnp.float32), train.s,
                                        train.num_groups, c)
            for a in range(train.num_groups):
                rows.append(dict(dataset=name, normalization=norm, clip_norm=c, checkpoint=t + 1,
                                 steps=steps * (t + 1), epsilon=spend.epsilon, group=a,
                                 risk=float(risk[:, ci, a].mean()),
                                 risk_se=float(risk[:, ci, a].std(ddof=1) / math.sqrt(risk.shape[0])),
                                 grad_norm=float(gn["grad_norm"][a]),
                                 mean_example_norm=float(gn["mean_example_norm"][a])))
        p_main = jax.tree_util.tree_map(lambda a: a[0, main_c], pp)
        dec = D.theorem2_decomposition(loss_fn, p_main, sub.x, sub.y.astype(jnp.float32), sub.s,
                                       sub.num_groups, learning_rate=float(config["learning_rate"]),
                                       clip_norm=float(config["clip_norm"]),
                                       noise_multiplier=float(config["noise_multiplier"]),
                                       batch_size=int(config["batch_size"]))
        eta = float(config["learning_rate"])
        for a in range(sub.num_groups):
            dec_rows.append(dict(checkpoint=t + 1, epsilon=spend.epsilon, group=a,
                                 r_clip=float(dec.r_clip[a]), r_clip_first=float(dec.r_clip_first[a]),
                                 psi_term=0.5 * eta ** 2 * float(dec.psi[a]), r_noise=float(dec.r_noise[a]),
                                 trace=float(dec.trace[a]), grad_norm=float(dec.grad_norm[a])))
    p_final = jax.tree_util.tree_map(lambda a: a[0, main_c], priv[-1])
    return rows, dec_rows, spend, p_final, model


def _group_ratio(train, config: dict, seed: int) -> pd.DataFrame:
    """Fig 11: group-size ratios by subsampling (masks, one program); each group's excessive risk."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.analysis import decomposition as D
    from dpfair_jax.data import preprocessing as P

    ratio_rows = []
    masks = jnp.stack([P.subsample_group_ratio(jax.random.key(seed + 3), train, r, compact=False).mask
                       for r in config["ratios"]])
    rcfg = dict(config, seeds=max(2, int(config["seeds"]) // 2))
    model, priv_r, ref_r = train_checkpoints(train, rcfg, seed, [float(config["clip_norm"])], masks=masks)
    loss_fn = per_example_loss(model)
    lp = np.asarray(group_losses(model, priv_r[-1], train, masks))  # [R, S, 1, K]
    w = np.asarray(jax.nn.one_hot(train.s, train.num_groups))
    for ri, r in enumerate(config["ratios"]):
        m = np.asarray(masks[ri])
        ww = w * m[:, None]
        ref_p = jax.tree_util.tree_map(lambda a: a[ri], ref_r[-1])
        lref = np.asarray(jax.vmap(lambda p: (losses(model, p, train) @ ww) / np.maximum(ww.sum(0), 1))(ref_p))
        priv_p = jax.tree_util.tree_map(lambda a: a[ri, 0, 0], priv_r[-1])
        gn = D.group_gradient_norms(loss_fn, priv_p, train.x[m > 0], train.y[m > 0].astype(jnp.float32),
                                    train.s[m > 0], train.num_groups, float(config["clip_norm"]))
        for a in range(train.num_groups):
            rk = lp[ri, :, 0, a] - lref[:, a]
            ratio_rows.append(dict(ratio=r, group=a, risk=float(rk.mean()), risk_se=float(rk.std(ddof=1) / math.sqrt(rk.size)),
                                   grad_norm=float(gn["grad_norm"][a]), group_size=int(ww[:, a].sum())))
    return pd.DataFrame(ratio_rows)


def _claims(ctx, df: pd.DataFrame, dec_df: pd.DataFrame, ratio_df: pd.DataFrame, rho: float, rho_u: float,
            config: dict) -> None:
    last = df[df["checkpoint"] == df["checkpoint"].max()]
    main = last[last["clip_norm"] == float(config["clip_norm"])]
    std_last = last[last["normalization"] == "standard"]
    agree = []
    for c, g in std_last.groupby("clip_norm"):
        agree.append(int(np.argmax(g["grad_norm"].to_numpy())) == int(np.argmax(g["risk"].to_numpy())))
    ctx.add_claim("gradnorm_larger_norm_larger_risk",
                  "App. C.2: the group with the larger gradient norm has the larger excessive risk (each C)",
                  measured=f"{sum(agree)}/{len(agree)} clip norms", target="all", passed=all(agree),
                  reason=WHY_NOT["gradnorm_larger_norm_larger_risk"])
    ratio_psi = (dec_df["psi_term"].abs() / dec_df["r_clip"].abs().clip(lower=1e-30)).median()
    ctx.add_claim("fig10_psi_negligible",
                  "Fig 10: the Hessian part eta^2/2 psi_a is a small part of R_a^clip (median |ratio|)",
                  measured=round(float(ratio_psi), 5), target="< 0.1", passed=float(ratio_psi) < 0.1,
                  reason=WHY_NOT["fig10_psi_negligible"])
    spread = ratio_df.groupby("group")["risk"].agg(lambda r: (r.max() - r.min()))
    scale = float(np.abs(main[main["normalization"] == "standard"]["risk"]).max())
    rel = float(spread.max() / max(scale, 1e-12))
    ctx.add_claim("fig11_group_size_minor",
                  "Fig 11: varying p_b/p_a by subsampling moves each group's excessive risk by less than "
                  "half the largest group risk",
                  measured=round(rel, 4), target="< 0.5", passed=rel < 0.5, reason=WHY_NOT["fig11_group_size_minor"])
    ctx.add_claim("trace_vs_boundary",
                  "App. C.3 / Thm 5: per-example Hessian trace decreases with the distance |logit| to the "
                  "decision boundary (Spearman correlation)",
                  measured={"trace": round(rho, 4), "uncertainty": round(rho_u, 4)}, target="< 0",
                  passed=rho < 0, reason=WHY_NOT["trace_vs_boundary"])


def run_dpsgd(config: dict, ctx) -> pd.DataFrame | None:
    """Figs 10, 11 and Apps. C.2/C.3 on ``config["dataset"]`` (globally standardized features)."""
    from scipy import stats as sps

    from dpfair_jax.analysis import hessian as H

    name = config["dataset"]
    clips = list(config["clip_norms"])
    main_c = clips.index(float(config["clip_norm"]))
    loaded, reason = load_dataset(name, seed=ctx.seed, max_rows=config.get("max_rows"),
                                  synthetic=config.get("synthetic"), path=config.get("path"), normalization="standard")
    if loaded is None:
        ctx.log(reason)
        skip_all(ctx, "lens_dpsgd", reason)
        return None
    train = loaded[0]
    ctx.log(f"{name} (standard): n={train.n}, d={train.d}, groups={train.group_sizes().astype(int).tolist()}")
    rows, dec_rows, spend, p_final, model = _checkpoint_rows(train, config, ctx, clips, main_c)
    ctx.record_privacy("dpsgd_final", spend, not_covered=PREPROCESSING)
    df = pd.DataFrame(rows)
    dec_df = pd.DataFrame(dec_rows)
    ctx.save_table(dec_df, "decomposition")
    ratio_df = _group_ratio(train, config, ctx.seed)
    ctx.save_table(ratio_df, "group_ratio")
    # trace vs distance to the boundary (App. C.3, Thm 5), closed forms of App. D
    cf = H.appendix_d_traces(p_final, train.x, train.y, activation="tanh")
    dist = np.abs(np.asarray(model.apply(p_final, train.x)))
    rho = float(sps.spearmanr(dist, np.asarray(cf["total"])).statistic)
    rho_u = float(sps.spearmanr(dist, np.asarray(cf["uncertainty"])).statistic)
    ctx.save_table(pd.DataFrame({"abs_logit": dist, "trace": np.asarray(cf["total"]),
                                 "uncertainty": np.asarray(cf["uncertainty"]), "group": np.asarray(train.s)}),
                   "trace_vs_boundary")
    figures.dpsgd(ctx, df, dec_df, ratio_df, dist, np.asarray(cf["total"]), float(config["clip_norm"]))
    _claims(ctx, df, dec_df, ratio_df, rho, rho_u, config)
    return df
