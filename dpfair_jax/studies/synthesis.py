"""The synthesis study of paper 003 (Sec. 6, Figs. 4, 5, 7): vanilla vs stratified private synthetic
data on Adult, judged by a downstream classifier and the column-mean parity error.

Built on the algorithm in :mod:`dpfair_jax.algorithms.synthesis` (the marginal synthesizer,
:class:`~dpfair_jax.algorithms.synthesis.StratifiedSynthesizer`, the noisy stratum counts and the
run's spend :func:`~dpfair_jax.algorithms.synthesis.synthesis_privacy`).

Public names: :func:`synthesis_study`, :func:`adult_synthesis_table`,
:func:`column_mean_parity_error`, :data:`VARIANT_COLUMNS`.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.algorithms.synthesis import (
    COUNT_FRACTION,
    StratifiedSynthesizer,
    fit_marginal_synthesizer,
    mst_factory,
    sample_marginal_synthesizer,
    stratum_counts,
    synthesis_privacy,
)
from dpfair_jax.privacy import accounting as acc

__all__ = ["VARIANT_COLUMNS", "adult_synthesis_table", "column_mean_parity_error", "synthesis_study",
           "synthesis_privacy"]


def adult_synthesis_table(*, path: Any = None, bins: int = 5) -> Any:
    """Adult as an integer-coded categorical frame (the paper's ACSEmployment "simple scenario"
    stand-in): age, education-num and hours-per-week in ``bins`` equal-width bins, sex, race,
    marital-status, workclass, relationship, native_us and the target ``income`` (1 = >50K)."""
    import pandas as pd

    from dpfair_jax.data.tabular import adult_strata

    f = adult_strata(path=path, age_bins=bins)
    out = pd.DataFrame({
        "age": f["age_bucket"].astype(int),
        "education": pd.cut(f["education-num"], bins=bins, labels=False).astype(int),
        "hours": pd.cut(f["hours-per-week"], bins=bins, labels=False).astype(int),
    })
    for c in ("sex", "race", "marital-status", "workclass", "relationship", "native_us"):
        out[c] = pd.Categorical(f[c]).codes.astype(int)
    out["income"] = (f["income"].astype(str).str.contains(">")).astype(int)
    return out


def column_mean_parity_error(real: Any, synth: Any, strata_columns: Sequence[str],
                             omega: float = 1.0 / 12.0) -> float:
    """Fig. 5's parity error: Def. 10 (:func:`~dpfair_jax.fairness.metrics.parity_error`) with
    ``f`` = column means, strata = cells of ``strata_columns`` in the real data; a stratum missing
    from the synthetic data uses the synthetic data's overall means (as the paper's code)."""
    from dpfair_jax.fairness.metrics import parity_error

    cols = list(real.columns)
    tg = real.groupby(strata_columns, observed=True)[cols].mean()
    sg = synth.groupby(strata_columns, observed=True)[cols].mean().reindex(tg.index)
    overall = synth[cols].mean()
    sg = sg.fillna(overall)
    return float(parity_error(tg.to_numpy(np.float32), sg.to_numpy(np.float32),
                              real[cols].mean().to_numpy(np.float32), overall.to_numpy(np.float32),
                              omega=omega))


VARIANT_COLUMNS = {"vanilla": [], "sex": ["sex"], "race": ["race"], "sex_race": ["sex", "race"]}


def _selection_ratio_and_fnr_difference(y_true: Any, y_pred: Any, groups: Any) -> tuple[float, float]:
    """fairlearn's ``demographic_parity_ratio`` (smallest over largest group selection rate) and
    ``MetricFrame(false_negative_rate).difference()`` (largest minus smallest group FNR; groups
    without positives are left out) for binary labels."""
    import pandas as pd

    frame = pd.DataFrame({"y": np.asarray(y_true) == 1, "p": np.asarray(y_pred) == 1,
                          "g": np.asarray(groups)})
    sel = frame.groupby("g")["p"].mean()
    ratio = float(sel.min() / sel.max()) if sel.max() > 0 else 0.0
    pos = frame[frame["y"]]
    fnr = 1.0 - pos.groupby("g")["p"].mean()
    return ratio, float(fnr.max() - fnr.min()) if len(fnr) else 0.0


def _noisy_fitted_counts(syn: "StratifiedSynthesizer", train: Any, scols: Sequence[str],
                         sid: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The noisy counts of the strata that ``syn`` fitted, in its order (its ``keys``)."""
    import pandas as pd

    joined = train[list(scols)].astype(str).agg("|".join, axis=1)
    code_of = dict(zip(joined, sid))
    out = []
    for key in syn.keys:
        parts = key if isinstance(key, tuple) else (key,)
        out.append(counts[code_of["|".join(str(p) for p in parts)]])
    c = np.asarray(out, np.float64)
    return c if c.sum() > 0 else np.ones_like(c)


def synthesis_study(table: Any, *, epsilons: Sequence[float], variants: Sequence[str], seeds: int = 1,
                    synthesizer: str = "marginal", delta: float = 1e-9, max_rows: int | None = None,
                    trees: int = 10, seed: int = 0, target: str = "income",
                    test_size: float = 0.2) -> Any:
    """Vanilla vs stratified synthesis on an integer-coded frame (``synthesizer``: "marginal", the
    kit's MST-like JAX synthesizer; "mst" or "aim", smartnoise-synth's, the ``synth`` extra): per
    (epsilon, variant, seed) fit on
    the training split (the paper's code fits on all rows, test included), sample as many rows,
    train a random forest on the synthetic rows, and evaluate on the real test split: accuracy,
    column-mean parity error (Def. 10, strata sex x race), demographic-parity ratio and FNR
    difference of the classifier over sex x race (fairlearn's definitions, computed here so the
    study needs no test-only dependency)."""
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier

    for vname in variants:
        v.check_choice("variant", vname, tuple(VARIANT_COLUMNS))
    v.check_choice("synthesizer", synthesizer, ("marginal", "mst", "aim"))
    rng = np.random.default_rng(seed)
    data = table if max_rows is None or len(table) <= max_rows else table.sample(max_rows, random_state=seed)
    data = data.reset_index(drop=True)
    perm = rng.permutation(len(data))
    n_test = int(round(test_size * len(data)))
    test, train = data.iloc[perm[:n_test]].reset_index(drop=True), data.iloc[perm[n_test:]].reset_index(drop=True)
    feats = [c for c in data.columns if c != target]
    sens_test = test["sex"].astype(str) + "_" + test["race"].astype(str)
    domains = [int(data[c].max()) + 1 for c in data.columns]
    codes = train.to_numpy(np.int32)
    # one static number of strata for every variant (unused strata are empty and never sampled),
    # so the marginal synthesizer compiles once for the whole study
    strata_ids = {}
    for vname in variants:
        scols = VARIANT_COLUMNS[vname]
        if scols:
            strata_ids[vname] = pd.factorize(train[scols].astype(str).agg("|".join, axis=1), sort=True)[0]
        else:
            strata_ids[vname] = np.zeros(len(train), np.int64)
    k_pad = max(int(s.max()) + 1 for s in strata_ids.values())
    rows = []
    for eps in epsilons:
        rho = acc.dp_to_rho(float(eps), delta)
        rho_fit, count_rho = (1.0 - COUNT_FRACTION) * rho, COUNT_FRACTION * rho
        for vname in variants:
            scols = VARIANT_COLUMNS[vname]
            for sd in range(seeds):
                key = jax.random.key(seed * 1000 + sd)
                sid = strata_ids[vname].astype(np.int32)
                k_v = int(sid.max()) + 1  # the variant's strata (values of the public schema)
                # noisy stratum counts: sampling proportions and the number of synthetic rows (the
                # exact counts, and len(train), would be released by the synthetic table)
                counts = stratum_counts(sid, k_v, key=jax.random.fold_in(key, 2), count_rho=count_rho)
                n_rows = max(int(round(counts.sum())), 1)
                props = np.zeros(k_pad)
                props[:k_v] = counts if counts.sum() > 0 else 1.0
                if synthesizer == "marginal":
                    model = fit_marginal_synthesizer(key, codes, domains, rho_fit, s=sid, num_groups=k_pad)
                    sc, _ = sample_marginal_synthesizer(jax.random.fold_in(key, 1), model, n_rows, props)
                    synth = pd.DataFrame(sc, columns=list(data.columns))
                else:
                    if synthesizer == "aim":  # smartnoise-synth's AIM (dpfair_jax.studies.aim)
                        from dpfair_jax.studies.aim import aim_factory as smartnoise_factory
                    else:
                        smartnoise_factory = mst_factory
                    fac = smartnoise_factory(acc.zcdp_to_dp(rho_fit, delta), delta)
                    if scols:
                        syn = StratifiedSynthesizer(fac, scols).fit(train.astype(str))
                        c_fit = _noisy_fitted_counts(syn, train, scols, strata_ids[vname], counts)
                        synth = syn.sample(n_rows, proportions=c_fit).astype(int)
                    else:
                        synth = fac().fit(train.astype(str)).sample(n_rows).astype(int)
                ysyn = synth[target].to_numpy()
                if len(np.unique(ysyn)) < 2:
                    pred = np.full(len(test), ysyn[0])
                else:
                    clf = RandomForestClassifier(n_estimators=trees, random_state=42, n_jobs=1)
                    clf.fit(synth[feats].to_numpy(), ysyn)
                    pred = clf.predict(test[feats].to_numpy())
                ytest = test[target].to_numpy()
                dp_ratio, fnr = _selection_ratio_and_fnr_difference(ytest, pred, sens_test)
                rows.append({
                    "epsilon": float(eps), "variant": vname, "seed": sd, "synthesizer": synthesizer,
                    "accuracy": float(np.mean(pred == ytest)),
                    "parity_error": column_mean_parity_error(train.astype(np.float32), synth.astype(np.float32),
                                                             ["sex", "race"]),
                    "dp_ratio": dp_ratio,
                    "fnr_difference": float(fnr),
                    "majority_rate": float(max(ytest.mean(), 1 - ytest.mean())),
                })
    return pd.DataFrame(rows)
