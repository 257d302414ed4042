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
from .common import CLAIMS, PREPROCESSING, check_plateau_limit, plateau_share, record_weakest, skip_all
from .datasets import load_dataset
from .training import checkpoint_spend, group_losses, init_params, losses, per_example_loss, train_checkpoints

__all__ = ["run_dpsgd"]


def _checkpoint_rows(train, config: dict, ctx, clips: list, main_c: int):
    """Per checkpoint, clip norm and group: excessive risk and gradient norms; Theorem 2's
    decomposition at the main clip norm (seed 0). Returns ``(rows, dec_rows, final_spend, model,
    final)``, ``final`` the last checkpoint's per-seed arrays: ``params`` (main C, ``[S]``), ``risk``
    ``[S, C, K]``, ``grad_norm`` ``[C, K]`` (seed 0), and the training loss at the main C per
    checkpoint ``loss`` ``[T, S]`` with its initial value ``loss0`` ``[S]``."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.analysis import decomposition as D

    name, norm = config["dataset"], "standard"
    steps = int(config["steps_per_checkpoint"])
    model, priv, ref = train_checkpoints(train, config, ctx.seed, clips)
    loss_fn = per_example_loss(model)
    dec_idx = np.sort(np.random.default_rng(ctx.seed).permutation(train.n)[: int(config["decomposition_rows"])])
    sub = train.take(dec_idx)
    rows, dec_rows, loss_path, gnorms = [], [], [], []
    w = np.asarray(train.group_sizes(), np.float64) / train.n
    keys = jax.random.split(jax.random.key(ctx.seed), int(config["seeds"]))
    loss0 = np.asarray(group_losses(model, init_params(model, keys), train)) @ w
    for t, (pp, pr) in enumerate(zip(priv, ref)):
        spend = checkpoint_spend(train.n, config, t + 1)
        lp = np.asarray(group_losses(model, pp, train))  # [S, C, K]
        lr_ = np.asarray(group_losses(model, pr, train))  # [S, K]
        risk = lp - lr_[:, None, :]
        loss_path.append(lp[:, main_c, :] @ w)
        gnorms = []
        for ci, c in enumerate(clips):
            p_main = jax.tree_util.tree_map(lambda a: a[0, ci], pp)
            gn = D.group_gradient_norms(loss_fn, p_main, train.x, train.y.astype(jnp.float32), train.s,
                                        train.num_groups, c)
            gnorms.append(np.asarray(gn["grad_norm"], np.float64))
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
    final = {"params": jax.tree_util.tree_map(lambda a: a[:, main_c], priv[-1]), "risk": risk,
             "grad_norm": np.stack(gnorms), "loss": np.stack(loss_path), "loss0": loss0, "sub": sub}
    return rows, dec_rows, spend, model, final


def _group_ratio(train, config: dict, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Fig 11: group-size ratios by subsampling (masks, one program, the same seeds and keys for
    every ratio); each group's excessive risk. Returns the table and the per-seed risks ``[R, S, K]``."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.analysis import decomposition as D
    from dpfair_jax.data import preprocessing as P

    ratio_rows, per_seed = [], []
    masks = jnp.stack([P.subsample_group_ratio(jax.random.key(seed + 3), train, r, compact=False).mask
                       for r in config["ratios"]])
    model, priv_r, ref_r = train_checkpoints(train, config, seed, [float(config["clip_norm"])], masks=masks)
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
        per_seed.append(lp[ri, :, 0, :] - lref)
        for a in range(train.num_groups):
            rk = lp[ri, :, 0, a] - lref[:, a]
            ratio_rows.append(dict(ratio=r, group=a, risk=float(rk.mean()), risk_se=float(rk.std(ddof=1) / math.sqrt(rk.size)),
                                   grad_norm=float(gn["grad_norm"][a]), group_size=int(ww[:, a].sum())))
    return pd.DataFrame(ratio_rows), np.stack(per_seed)


#: The paper's statements, quoted (App. C.2, C.3; the figures' curves carry no numbers in the text),
#: and the kit's numeric readings of "negligible" and "noticeable" (the paper gives none).
SOURCES = {
    "gradnorm_larger_norm_larger_risk": ("App. C.2: 'the group with larger gradient norms have also larger excessive "
                                         "risk' (direction only)"),
    "fig10_psi_negligible": ("App. C.2, Fig 10: 'the components psi_a (dotted lines) constitute a negligible amount "
                             "to the excessive risk under gradient clipping R_a^clip'; read as under 10% of R_clip"),
    "fig11_group_size_minor": ("App. C.2, Fig 11: 'changing the relative group sizes does not result in a noticeable "
                               "effect in the group gradient norms and excessive risk'; read as within +-10% of the "
                               "largest group risk at p_b/p_a = 1"),
    "trace_vs_boundary": ("App. C.3: 'the closest (father) is a sample X to the decision boundary, the larger "
                          "(smaller) is the associated Hessian trace value' (direction only)"),
}
NEGLIGIBLE = 0.1  # Fig 10: |psi part| / |R_clip| below this is negligible
NOTICEABLE = 0.1  # Fig 11: a change of a group's risk below this share of the largest group risk is not noticeable


def _gradnorm_verdicts(final: dict, clips: list) -> dict:
    """App. C.2 per clip norm: risk of the larger-gradient-norm group minus the other's, paired over seeds."""
    from dpfair_jax.runner.verdict import PaperEffect, directional_verdict, estimate_from_replicates

    paper = PaperEffect(source=SOURCES["gradnorm_larger_norm_larger_risk"])
    out = {}
    for ci, c in enumerate(clips):
        big = int(np.argmax(final["grad_norm"][ci]))
        risk = final["risk"][:, ci, :]
        other = np.delete(risk, big, axis=1).max(1)
        out[f"C={c:g}"] = directional_verdict(estimate_from_replicates(risk[:, big] - other), paper,
                                              comparisons=len(clips))
    return out


def _psi_verdict(model, final: dict, config: dict):
    """Fig 10 at the final checkpoint, every seed: ``0.1 - sum_a |eta^2/2 psi_a| / sum_a |R_a^clip|``."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.analysis import decomposition as D
    from dpfair_jax.runner.verdict import PaperEffect, directional_verdict, estimate_from_replicates

    sub, eta = final["sub"], float(config["learning_rate"])
    loss_fn = per_example_loss(model)
    dec = jax.vmap(lambda p: D.theorem2_decomposition(
        loss_fn, p, sub.x, sub.y.astype(jnp.float32), sub.s, sub.num_groups, learning_rate=eta,
        clip_norm=float(config["clip_norm"]), noise_multiplier=float(config["noise_multiplier"]),
        batch_size=int(config["batch_size"])))(final["params"])
    share = (np.abs(0.5 * eta ** 2 * np.asarray(dec.psi, np.float64)).sum(1)
             / np.maximum(np.abs(np.asarray(dec.r_clip, np.float64)).sum(1), 1e-30))
    paper = PaperEffect(source=SOURCES["fig10_psi_negligible"])
    return directional_verdict(estimate_from_replicates(NEGLIGIBLE - share), paper), share


def _ratio_verdicts(ratio_risk: np.ndarray, ratios: list) -> dict:
    """Fig 11: each group's risk at each ratio minus at the reference ratio (1, else the largest),
    paired over seeds, against +-10% of the largest group risk at the reference (an equivalence test)."""
    from dpfair_jax.runner.verdict import PaperEffect, estimate_from_replicates, range_verdict

    ratios = [float(r) for r in ratios]
    ref = ratios.index(1.0) if 1.0 in ratios else int(np.argmax(ratios))
    m = NOTICEABLE * float(np.abs(ratio_risk[ref].mean(0)).max())
    paper = PaperEffect(source=SOURCES["fig11_group_size_minor"], low=-m, high=m)
    parts = [(ri, a) for ri in range(len(ratios)) if ri != ref for a in range(ratio_risk.shape[2])]
    return {f"ratio {ratios[ri]:g}, group {a}": range_verdict(
        estimate_from_replicates(ratio_risk[ri, :, a] - ratio_risk[ref, :, a]), paper, comparisons=len(parts))
        for ri, a in parts}


def _boundary_verdict(model, final: dict, train):
    """App. C.3 per seed: minus Spearman(|logit|, Tr H_x) (closed forms of App. D), positive on the paper's side."""
    import jax
    from scipy import stats as sps

    from dpfair_jax.analysis import hessian as H
    from dpfair_jax.runner.verdict import PaperEffect, directional_verdict, estimate_from_replicates

    cf = jax.vmap(lambda p: H.appendix_d_traces(p, train.x, train.y, activation="tanh"))(final["params"])
    dist = np.abs(np.asarray(jax.vmap(lambda p: model.apply(p, train.x))(final["params"])))
    total = np.asarray(cf["total"])
    rho = np.array([sps.spearmanr(dist[i], total[i]).statistic for i in range(dist.shape[0])])
    paper = PaperEffect(source=SOURCES["trace_vs_boundary"])
    return directional_verdict(estimate_from_replicates(-rho), paper), rho


def _untestable(ctx, share: float, limit: float, steps: int) -> None:
    why = (f"the private training loss has not levelled off by the last checkpoint (step {steps}: the last interval "
           f"made {share:.2f} of its drop > {limit:g}): train longer")
    for cid, statement in CLAIMS["lens_dpsgd"]:
        ctx.add_claim(cid, statement, measured={"last_interval_share_of_loss_drop": share, "steps": steps},
                      target=f"trained (<= {limit:g})", passed=False, status="untestable", reason=why)


def _claims(ctx, model, train, final: dict, ratio_risk: np.ndarray, config: dict, rho_u: float) -> None:
    """The four claims as verdicts at the final checkpoint, once the training loss has levelled off."""
    steps = int(config["steps_per_checkpoint"]) * int(config["checkpoints"])
    share = plateau_share(final["loss"].mean(1), float(final["loss0"].mean()))
    limit = check_plateau_limit(config)
    trained = {"steps": steps, "last_interval_share_of_loss_drop": share,
               "train_loss": float(final["loss"][-1].mean())}
    ctx.add_check("trace_vs_boundary_uncertainty_formula",
                  "App. D / Thm 5: the uncertainty proxy 1 - sum_k f_k^2 = 2 sigma(z) sigma(-z) of one logit is "
                  "strictly decreasing in |z|, so its Spearman correlation with |logit| is -1 by construction (a "
                  "formula check, not evidence for C.3)", measured=round(rho_u, 6), target=-1.0,
                  passed=bool(rho_u <= -0.999))
    if not share <= limit:
        _untestable(ctx, share, limit, steps)
        return
    statement = dict(CLAIMS["lens_dpsgd"])
    where = f"{config['dataset']}, {int(config['seeds'])} seeds, {steps} steps (last interval {share:.3f} of the drop)"
    record_weakest(ctx, "gradnorm_larger_norm_larger_risk", statement["gradnorm_larger_norm_larger_risk"],
                   _gradnorm_verdicts(final, list(config["clip_norms"])), extra=trained,
                   reason=f"{where}; per clip norm, Bonferroni over the clip norms")
    psi, ratio = _psi_verdict(model, final, config)
    ctx.add_verdict("fig10_psi_negligible", statement["fig10_psi_negligible"], psi,
                    reason=f"{where}; effect {NEGLIGIBLE:g} - |psi part| / |R_clip| (mean share "
                           f"{float(ratio.mean()):.4f})", extra=trained)
    record_weakest(ctx, "fig11_group_size_minor", statement["fig11_group_size_minor"],
                   _ratio_verdicts(ratio_risk, list(config["ratios"])), extra=trained,
                   reason=f"{where}; per (ratio, group), Bonferroni over them")
    trace, rho = _boundary_verdict(model, final, train)
    ctx.add_verdict("trace_vs_boundary", statement["trace_vs_boundary"], trace,
                    reason=f"{where}; effect -Spearman(|logit|, Tr H_x) per seed (mean rho {float(rho.mean()):+.3f})",
                    extra=trained)


def run_dpsgd(config: dict, ctx) -> pd.DataFrame | None:
    """Figs 10, 11 and Apps. C.2/C.3 on ``config["dataset"]`` (globally standardized features)."""
    import jax
    from scipy import stats as sps

    from dpfair_jax.analysis import hessian as H

    check_plateau_limit(config)
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
    rows, dec_rows, spend, model, final = _checkpoint_rows(train, config, ctx, clips, main_c)
    ctx.record_privacy("dpsgd_final", spend, not_covered=PREPROCESSING)
    df = pd.DataFrame(rows)
    dec_df = pd.DataFrame(dec_rows)
    ctx.save_table(dec_df, "decomposition")
    ctx.save_table(pd.DataFrame({"checkpoint": np.arange(len(final["loss"]) + 1),
                                 "train_loss": np.concatenate([[final["loss0"].mean()], final["loss"].mean(1)])}),
                   "training_loss")
    ratio_df, ratio_risk = _group_ratio(train, config, ctx.seed)
    ctx.save_table(ratio_df, "group_ratio")
    # trace vs distance to the boundary (App. C.3, Thm 5), closed forms of App. D, seed 0 in the table
    p_first = jax.tree_util.tree_map(lambda a: a[0], final["params"])
    cf = H.appendix_d_traces(p_first, train.x, train.y, activation="tanh")
    dist = np.abs(np.asarray(model.apply(p_first, train.x)))
    rho_u = float(sps.spearmanr(dist, np.asarray(cf["uncertainty"])).statistic)
    ctx.save_table(pd.DataFrame({"abs_logit": dist, "trace": np.asarray(cf["total"]),
                                 "uncertainty": np.asarray(cf["uncertainty"]), "group": np.asarray(train.s)}),
                   "trace_vs_boundary")
    figures.dpsgd(ctx, df, dec_df, ratio_df, dist, np.asarray(cf["total"]), float(config["clip_norm"]))
    _claims(ctx, model, train, final, ratio_risk, config, rho_u)
    return df
