"""Paper 000, real data (Table 4 and Fig. 5): DPSE vs DPNoSE on Law school (race; first-year
average) and credit-card default (sex; credit limit), when their loaders can read the data.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.studies.allocation import PRIVATE_METHODS, hyperparams_from, method_configs

from .claims import READINGS, WHY_NOT, by_reading, min_ratio_over, reading_settings

def _real_data(name: str, seed: int):
    """Load, standardize (train statistics) and bound rows to ``||x|| <= 1``; y standardized.

    Law school: race (white / black), target the first-year average (``zfya``). Credit-card
    default (UCI): sex, target the credit limit (``limit_bal``); the paper's income filter and
    group sizes (11,480 M / 2,937 F) do not apply to this data set (here 8,968 M / 13,532 F in
    the training split).
    """
    from dpfair_jax.data import load
    from dpfair_jax.data.preprocessing import bound_row_norms, standardize

    if name == "law":
        tr, te = load("law", groups="race", target="zfya", seed=seed)
    elif name == "credit":
        tr, te = load("credit", groups="sex", target="limit_bal", seed=seed)
    else:
        raise ValueError(f"unknown real data set {name!r}; use 'law' or 'credit'.")
    tr, te = standardize(tr, te)
    mu, sd = float(np.mean(tr.y)), float(np.std(tr.y))
    fix = lambda d: d.replace(x=jnp.asarray(bound_row_norms(d.x, 1.0)),  # noqa: E731
                              y=(jnp.asarray(d.y) - mu) / sd)
    return fix(tr), fix(te)


def real_frame(config, ctx):
    """Table 4 / Fig. 5: DPSE vs DPNoSE on real data at the Table 4 budgets (noise trials only),
    under each stage-2 reading."""
    import pandas as pd

    names = list(config.get("real_datasets") or [])
    if not names:
        return pd.DataFrame()
    rhos = np.asarray(config["real_rhos"], np.float64)
    readings = list(config.get("readings") or ["group_mean"])

    def compute(chunk):
        name = chunk["dataset"]
        t0 = time.perf_counter()
        try:
            tr, te = _real_data(name, int(config["seed"]))
        except Exception as err:  # noqa: BLE001 - data absent or loader failure: report and skip
            ctx.log(f"real data {name!r} unavailable: {err}")
            return pd.DataFrame()
        settings = dict(config, steps=int(config["real_steps"]), learning_rate=float(config["real_lr"]),
                        stats_bound_x=1.5, stats_bound_y=3.0,
                        scaling="paper" if chunk["reading"] == "summed" else "group_mean")
        settings = reading_settings(settings, int(tr.n))
        cfgs = {k: dataclasses.replace(c, fit_intercept=True)
                for k, c in method_configs(settings).items()}
        configs = tuple(cfgs[m] for m in PRIVATE_METHODS)
        k = tr.num_groups

        def one(key, rho):
            keys = jax.vmap(lambda m: jax.random.fold_in(key, m))(jnp.arange(len(configs)))
            th, _ = bt.fit_many(keys, tr.x, tr.y, tr.s, k, hyperparams_from(settings, rho), configs)
            return jax.vmap(lambda t_: bt.group_mspe(t_, te.x, te.y, te.s, k, True))(th)

        keys = jax.random.split(jax.random.key(int(config["seed"]) + 7), int(config["real_trials"]))
        prog = jax.jit(lambda ks, rs: jax.lax.map(
            lambda kk: jax.vmap(lambda r: one(kk, r))(rs), ks, batch_size=2))
        out = np.asarray(prog(keys, jnp.asarray(np.r_[rhos, np.inf], jnp.float32)))  # [T, R, M, K]
        rows = []
        sizes = tr.group_sizes()
        for r, rho in enumerate(np.r_[rhos, np.inf]):
            for m, meth in enumerate(PRIVATE_METHODS):
                for g in range(k):
                    v_ = out[:, r, m, g]
                    rows.append(dict(dataset=name, reading=chunk["reading"], rho=float(rho), method=meth,
                                     group=g + 1,
                                     group_name=tr.info.group_names[g] if tr.info.group_names else g,
                                     n_train=int(sizes[g]), mspe=float(v_.mean()),
                                     se=float(v_.std(ddof=1) / math.sqrt(len(v_)))))
        ctx.log(f"real data {name} ({chunk['reading']}): {time.perf_counter() - t0:.1f} s")
        return pd.DataFrame(rows)

    return ctx.map_chunks([{"dataset": n, "reading": r} for n in names for r in readings], compute, desc="real")


#: Real data sets of Table 4 (the loaders :func:`_real_data` knows).
REAL_DATASETS = ("law", "credit")


def _real_claim_text(name: str) -> tuple[tuple[str, str], tuple[str, str]]:
    return ((f"real_{name}_smallest_group_gain", f"{name}: DPSE lowers the smallest group's test MSPE vs DPNoSE at "
             "every Table-4 budget (min over rho of DPNoSE/DPSE)"),
            (f"real_{name}_gain_larger_for_smallest", f"{name}: the DPNoSE/DPSE ratio is larger for the smallest "
             "group than for the others (fraction of budgets)"))


def claims_real(df, ctx, config):
    ran = set(df.dataset.unique()) if len(df) else set()
    wanted = list(config.get("real_datasets") or [])
    for name in REAL_DATASETS:
        if name not in ran:
            reason = (f"data set {name!r} unavailable (see the run log)" if name in wanted
                      else f"{name!r} not in this config's real_datasets {wanted}")
            for cid, st in _real_claim_text(name):
                ctx.skip_claim(cid, st, reason)
            continue
        (gain_id, gain_st), (more_id, more_st) = _real_claim_text(name)
        gains, mores = {}, {}
        for reading in READINGS:
            sub = df[(df.dataset == name) & (df.reading == reading) & np.isfinite(df.rho)]
            if not len(sub):
                gains[reading] = mores[reading] = None
                continue
            small = int(sub.loc[sub.n_train.idxmin(), "group"])
            piv = sub.pivot_table(index=["rho", "group"], columns="method", values="mspe")
            ratio = (piv["dpnose"] / piv["dpse"]).unstack("group")  # DPNoSE / DPSE per rho, group
            gain_small = ratio[small]
            other = ratio[[g for g in ratio.columns if g != small]].mean(axis=1)
            gains[reading] = min_ratio_over(sub, small)
            mores[reading] = {"value": float((gain_small > other).mean())}
        by_reading(ctx, gain_id, gain_st, gains, "> 1 at every budget (95% interval of the minimum)", lambda v: v > 1,
                    why_fails=WHY_NOT["real_smallest_group_gain"], skip_reason=f"{name}: no rows",
                    paper=(1.0, math.inf), on_interval=True,
                    note="interval of the minimum over budgets [min lo, min hi] from each budget's 95% delta-method "
                         "interval of DPNoSE/DPSE; a minimum whose interval contains 1 is a tie")
        by_reading(ctx, more_id, more_st, mores, "1.0", lambda v: v == 1.0,
                    why_fails=WHY_NOT["real_gain_larger_for_smallest"], skip_reason=f"{name}: no rows")


def run_real(settings: dict, ctx):
    """Table 4 / Fig. 5: run the real-data part, save the ``real`` table and record its claims.
    Returns the table (empty when no data set could be read)."""
    real = real_frame(settings, ctx)
    if len(real):
        ctx.save_table(real, "real")
    claims_real(real, ctx, settings)
    return real
