"""Paper 003, strata (Fig. 2): global and parity error of COINPRESS and StratCOINPRESS on Adult (or
the ACS CSV at ``acs_path``) for every non-empty subset of the strata columns, all in one program;
"stratification can sometimes improve the global mean" by a Bonferroni t test
(:func:`strata_improvement_test`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import montecarlo as mc
from dpfair_jax.algorithms import mean_estimation as me

from . import figures
from .claims import WHY_NOT, skip_part, strata_source
from .mixture import coinpress_spend

def _strata_frame(config):
    import pandas as pd

    if config.get("acs_path"):
        f = pd.read_csv(config["acs_path"])
        if "AGEP" in f.columns and "AGEP_bucket" not in f.columns:
            f["AGEP_bucket"] = pd.cut(f["AGEP"], bins=5, labels=False)
        return f
    from dpfair_jax.data.tabular import adult_strata

    return adult_strata(path=config.get("adult_path"))


def public_strata_ids(frame: Any, columns: Sequence[str], private: np.ndarray) -> tuple[np.ndarray, int]:
    """Stratum ids ``[n]`` and their number ``k``: the value combinations of ``columns`` seen in the
    public rows (``~private``), sorted; a row whose combination no public row has gets id ``k`` (the
    group outside every stratum). A function of the public rows and of each row's own values only,
    so a private record changes no other row's id and not ``k``."""
    key = frame[list(columns)].astype(str).agg("|".join, axis=1).to_numpy()
    names = np.unique(key[~np.asarray(private, bool)])
    g = np.searchsorted(names, key)
    found = (g < len(names)) & (names[np.minimum(g, max(len(names) - 1, 0))] == key) if len(names) else g < 0
    return np.where(found, g, len(names)).astype(np.int32), int(len(names))


def _strata_design(frame: Any, cols: list, config: dict, priv: np.ndarray):
    """Stratum ids of the private half for every non-empty subset of ``cols`` (strata seen on the
    public half and holding more than ``min_stratum_fraction`` of it; every other row in the last
    group, ``K - 1``), their public-half counts as weights, and the number of strata kept.
    Returns ``(combos, S [C, n], W [C, K], K, kept_k)``."""
    n = len(frame)
    combos = [c for r in range(1, len(cols) + 1) for c in itertools.combinations(cols, r)]
    ids, ks = [], []
    for combo in combos:
        g, k = public_strata_ids(frame, combo, priv)
        ids.append(g)
        ks.append(k)
    K = max(ks) + 1  # + the "public half" group
    S = np.full((len(combos), n), K - 1, np.int32)
    W = np.zeros((len(combos), K), np.float32)
    kept_k = []
    for i, g in enumerate(ids):
        pub_counts = np.bincount(g[~priv], minlength=K)
        keep = pub_counts > float(config["min_stratum_fraction"]) * (~priv).sum()
        keep[K - 1] = False
        S[i] = np.where(priv & keep[g], g, K - 1)
        W[i] = np.where(keep, pub_counts, 0)
        kept_k.append(int(keep.sum()))
    return combos, S, W, K, kept_k


def _strata_arrays(frame: Any, variables: list, config: dict, S: np.ndarray, W: np.ndarray,
                   priv: np.ndarray) -> dict:
    """The sweep's data: variables divided by their public scale (``scale_mode``), the strata and
    weights, the private-half indicator, and each variable's public COINPRESS center and radius."""
    X = np.stack([frame[v].to_numpy(np.float64) for v in variables]).astype(np.float32)
    prior = np.array([config["variable_prior"][v] for v in variables], np.float32)  # [V, 3]
    scale = prior[:, 2] if config["scale_mode"] == "public_scale" else np.ones(len(variables), np.float32)
    Xs = X / scale[:, None]
    c0, r0 = jnp.asarray(prior[:, 0] / scale), jnp.asarray(prior[:, 1] / scale)
    scale = jnp.asarray(scale)
    Sj, Wj, Xj = jnp.asarray(S), jnp.asarray(W), jnp.asarray(Xs)
    glob_s = jnp.asarray(np.where(priv, 0, 1).astype(np.int32))
    return {"X": Xj, "S": Sj, "W": Wj, "glob": glob_s, "c0": c0, "r0": r0, "scale": scale}


def _strata_trial(K: int, config: dict):
    """One run of one (strata combination, variable) cell: COINPRESS on the private half against
    StratCOINPRESS (exact private sizes under replace-one within a group, else the noisy counts) and
    Pub-StratCOINPRESS; absolute errors of the global estimate and parity errors (unnormalized and
    Def. 10), in the variable's units."""
    from dpfair_jax.fairness.metrics import parity_error

    rhos = jnp.asarray(me.coinpress_rhos(float(config["rho"]), config["rho_split"]), jnp.float32)
    public_sizes = config["relation"] == "replace_one_within_group"  # exact sizes public only within a group

    def one(key, data, combo, variable):  # data passed as arguments (not baked-in constants)
        combo_idx, var_idx = combo, variable
        Xj, Sj, Wj, glob_s = data["X"], data["S"], data["W"], data["glob"]
        c0, r0, scale = data["c0"], data["r0"], data["scale"]
        x = Xj[var_idx]
        s = Sj[combo_idx]
        k1, k2 = jax.random.split(key)
        opts = dict(center=c0[var_idx], radius=r0[var_idx], rhos=rhos, relation=config["relation"])
        g = me.stratified_coinpress(k1, x, glob_s, 2, weights=jnp.array([1.0, 0.0]), **opts).estimate[0]
        counts = jax.ops.segment_sum(jnp.ones_like(x), s, num_segments=K)
        w_exact = jnp.where(jnp.arange(K) < K - 1, counts, 0.0)
        # replace-one within a group: exact private-half sizes (public by the relation); add/remove
        # and replace-one: the noisy counts, renormalized over the strata kept on the public half
        st = me.stratified_coinpress(k2, x, s, K, weights=w_exact if public_sizes else None, **opts)
        if public_sizes:
            st_est = st.estimate[0]
        else:
            w_noisy = jnp.where(Wj[combo_idx] > 0, st.weights, 0.0)
            st_est = (w_noisy / jnp.maximum(jnp.sum(w_noisy), 1e-12)) @ st.group_means[:, 0]
        wp = jnp.where(st.present, Wj[combo_idx], 0.0)
        pub = (wp / jnp.maximum(jnp.sum(wp), 1e-12)) @ st.group_means[:, 0]
        true_g = jax.ops.segment_sum(x, s, num_segments=K) / jnp.maximum(counts, 1.0)
        true = jnp.sum(jnp.where(glob_s == 0, x, 0.0)) / jnp.sum(glob_s == 0)
        mask = (st.present & (jnp.arange(K) < K - 1)).astype(jnp.float32)
        sc = scale[var_idx]
        pe = {}
        for name, est_g in (("coinpress", jnp.full((K,), g)), ("strat", st.group_means[:, 0])):
            pe[name] = parity_error(true_g * sc, est_g * sc, normalize=False, group_mask=mask)
            pe[name + "_def10"] = parity_error(true_g * sc, est_g * sc, true * sc,
                                               (g if name == "coinpress" else st_est) * sc,
                                               group_mask=mask)
        return {"err_coinpress": jnp.abs(g - true) * sc, "err_strat": jnp.abs(st_est - true) * sc,
                "err_pub_strat": jnp.abs(pub - true) * sc,
                "parity_coinpress": pe["coinpress"], "parity_strat": pe["strat"],
                "parity10_coinpress": pe["coinpress_def10"], "parity10_strat": pe["strat_def10"]}

    return one


def _claims_strata(df: Any, agg: Any, config: dict, ctx: Any) -> None:
    """Fig. 2's claims: lower parity error in 90% of the cells, and a significant improvement of the
    global estimate in at least one cell (:func:`strata_improvement_test`)."""
    parity_frac = float(np.mean(agg.parity_strat < agg.parity_coinpress))
    source = strata_source(config)
    ctx.add_claim("strata_parity", "Fig. 2: StratCOINPRESS has lower parity error (sum of absolute "
                  "stratum errors) than one global COINPRESS estimate, per (variable, strata "
                  f"combination); {source}", measured=round(parity_frac, 3), target=">= 0.9",
                  passed=bool(parity_frac >= 0.9), reason=WHY_NOT["strata_parity"])
    sig = strata_improvement_test(df)
    statement = ("Fig. 2: stratification 'can sometimes improve' the global mean: in at least one (variable, strata "
                 "combination) StratCOINPRESS's mean |error| of the global estimate is below COINPRESS's by more than "
                 "the one-sided t critical value (paired by run, family-wise level 0.05, Bonferroni over all cells); "
                 + strata_source(config))
    if sig["runs"] < 3:
        ctx.skip_claim("strata_global_error", statement, f"{sig['runs']} runs per cell: too few for a t test "
                       "(needs >= 3)", target=">= 1 significant cell")
    else:
        ctx.add_claim("strata_global_error", statement,
                      measured={k: v for k, v in sig.items() if k != "significant_cells"}
                      | {"significant_cells": sig["significant_cells"][:5]},
                      target=">= 1 significant cell", passed=bool(sig["num_significant"] >= 1),
                      reason=WHY_NOT["strata_global_error"])


def run_strata(config: dict, ctx: Any):
    """Fig. 2 (module docstring): every (strata combination, variable) cell x ``strata_runs`` runs in
    one program; saves the ``strata`` tables, records the spend and the claims, draws the figure."""
    try:
        frame = _strata_frame(config)
    except (ImportError, FileNotFoundError) as err:
        ctx.log(f"strata part skipped: {type(err).__name__}: {err}")
        skip_part(ctx, "strata", config, f"data unavailable ({type(err).__name__}: {err})")
        return None
    variables, cols = list(config["variables"]), list(config["strata_columns"])
    frame = frame.dropna(subset=variables + cols).reset_index(drop=True)
    n = len(frame)
    rng = np.random.default_rng(int(config["seed"]))
    priv = rng.permutation(n) < n // 2
    combos, S, W, K, kept_k = _strata_design(frame, cols, config, priv)
    arrays = _strata_arrays(frame, variables, config, S, W, priv)
    runs = int(config["strata_runs"])
    t0 = time.perf_counter()
    res = mc.sweep(_strata_trial(K, config), jax.random.key(int(config["seed"]) + 2),
                   {"combo": np.arange(len(combos), dtype=np.int32),
                    "variable": np.arange(len(variables), dtype=np.int32)}, runs, chunk_size=64,
                   data=arrays)
    jax.block_until_ready(res.values)
    ctx.log(f"strata: {len(combos)} combinations x {len(variables)} variables x {runs} runs, "
            f"K={K}, {time.perf_counter() - t0:.1f} s")
    # each (method, combination, variable) is one release on the private half
    ctx.record_privacy("strata_coinpress_and_stratcoinpress_rho",
                       coinpress_spend(config, K, config["relation"]))
    df = res.to_frame()
    df["strata"] = [",".join(combos[i]) for i in df["combo"]]
    df["k"] = [kept_k[i] for i in df["combo"]]
    df["variable"] = [variables[i] for i in df["variable"]]
    ctx.save_table(df, "strata")
    agg = df.groupby(["variable", "strata", "k"]).mean(numeric_only=True).reset_index()
    ctx.save_table(agg, "strata_summary")
    _claims_strata(df, agg, config, ctx)
    figures.strata(agg, ctx, variables)
    return df


def strata_improvement_test(df, level: float = 0.05) -> dict[str, Any]:
    """Cells (variable, strata combination) where the stratified global estimate beats COINPRESS.

    Per cell, ``d_r = err_coinpress_r - err_strat_r`` over the ``R`` runs (run ``r`` shares its key
    across cells, so the pairs are by run); a cell is significant when ``mean(d) / (sd(d)/sqrt(R))``
    exceeds the one-sided Student t quantile ``t_{1 - level/m, R-1}`` (Bonferroni over the ``m``
    cells), so under "stratification never helps" (every cell's mean ``d <= 0``) the chance of one
    or more significant cells is at most ``level``."""
    from scipy import stats

    cols = ["variable", "strata"]
    d = df.assign(d=df["err_coinpress"] - df["err_strat"]).groupby(cols)["d"]
    cells = d.agg(["mean", "std", "count"]).reset_index()
    runs = int(cells["count"].min()) if len(cells) else 0
    m = len(cells)
    if runs < 2 or m == 0:
        return {"runs": runs, "cells": m, "num_significant": 0, "significant_cells": [], "t_crit": None,
                "max_t": None}
    t = cells["mean"] / (cells["std"] / np.sqrt(cells["count"]))
    t = t.where(cells["std"] > 0, np.inf * np.sign(cells["mean"]))
    t_crit = float(stats.t.ppf(1.0 - level / m, runs - 1))
    sig = cells[t > t_crit].assign(t=t[t > t_crit]).sort_values("t", ascending=False)
    return {"runs": runs, "cells": m, "t_crit": round(t_crit, 3), "max_t": round(float(t.max()), 3),
            "num_significant": int(len(sig)),
            "significant_cells": [f"{r.variable}: {r.strata} (t={r.t:.1f})" for r in sig.itertuples()]}
