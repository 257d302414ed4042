"""The fixed-hyperparameter engine of paper 004 (:func:`tradeoff_study`): one method per call over
seeds x lambdas x epsilons, used by studies that compare at fixed settings."""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax import montecarlo as MC
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.fairness import evaluation as EV
from dpfair_jax.studies.tradeoff.program import _method_fns

_PREPROCESSING = ("the tabular loader standardizes the features with the training split's moments, "
                  "computed from the private data without noise (docs/trust.md); the spend covers "
                  "training only")


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
