"""The synthesis study of paper 003 (Sec. 6, Figs. 4, 5, 7): vanilla vs stratified private synthetic
data on Adult, judged by a downstream classifier and the column-mean parity error.

Built on the algorithm in :mod:`dpfair_jax.algorithms.synthesis` (the marginal synthesizer,
:class:`~dpfair_jax.algorithms.synthesis.StratifiedSynthesizer`, the noisy stratum counts and the
run's spend :func:`study_spend`, the algorithm's :func:`~dpfair_jax.algorithms.synthesis.spend`).

Public names: :func:`synthesis_study`, :func:`adult_synthesis_table`,
:func:`adult_synthesis_domains`, :func:`column_mean_parity_error`, :data:`VARIANT_COLUMNS`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.algorithms.synthesis import (
    COUNT_FRACTION,
    StratifiedSynthesizer,
    fit_marginal_synthesizer,
    mst_factory,
    sample_marginal_synthesizer,
    SynthesisConfig,
    SynthesisHparams,
    stratum_counts,
)
from dpfair_jax.algorithms.synthesis import spend as synthesis_spend
from dpfair_jax.privacy import accounting as acc

__all__ = ["VARIANT_COLUMNS", "adult_synthesis_domains", "adult_synthesis_table", "column_mean_parity_error",
           "synthesis_study", "study_spend"]


# The public schema of the coded Adult table: the categories of UCI Adult's documentation
# (adult.names; sorted names, "?" rows are dropped by the loader) and the public ranges of its
# numeric columns (age 17..90, education-num 1..16, hours-per-week 1..99), fixed here and never
# read from the data, so the codes and their domains are the same for every neighbouring table.
_ADULT_SYNTH_CATEGORIES: dict[str, tuple[str, ...]] = {
    "sex": ("Female", "Male"),
    "race": ("Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"),
    "marital-status": ("Divorced", "Married-AF-spouse", "Married-civ-spouse", "Married-spouse-absent",
                       "Never-married", "Separated", "Widowed"),
    "workclass": ("Federal-gov", "Local-gov", "Never-worked", "Private", "Self-emp-inc", "Self-emp-not-inc",
                  "State-gov", "Without-pay"),
    "relationship": ("Husband", "Not-in-family", "Other-relative", "Own-child", "Unmarried", "Wife"),
    "native_us": ("False", "True"),
}
_ADULT_SYNTH_RANGES: dict[str, tuple[str, float, float]] = {
    "age": ("age", 17.0, 90.0), "education": ("education-num", 1.0, 16.0), "hours": ("hours-per-week", 1.0, 99.0)}


def study_spend(epsilon: float, delta: float) -> acc.PrivacySpend:
    """What one (stratified or vanilla) run of :func:`synthesis_study` at ``epsilon`` spends: the
    algorithm's :func:`~dpfair_jax.algorithms.synthesis.spend` at ``rho = dp_to_rho(epsilon,
    delta)`` (CKS), ``(1 - COUNT_FRACTION) rho`` for the synthesizer fits (strata by parallel
    composition) and ``COUNT_FRACTION rho`` for the noisy stratum counts that set the sampling
    proportions and the number of synthetic rows (add/remove)."""
    config = SynthesisConfig(domains=tuple(adult_synthesis_domains().values()), count_fraction=COUNT_FRACTION,
                             delta=float(delta))
    return synthesis_spend(config, 1, SynthesisHparams(rho=acc.dp_to_rho(float(epsilon), float(delta))))


def adult_synthesis_domains(bins: int = 5) -> dict[str, int]:
    """The public schema of :func:`adult_synthesis_table`: the number of categories of each column
    (``bins`` for the binned numeric columns, the documented category lists otherwise, 2 for
    ``income``); pass it as ``synthesis_study(..., domains=)``. Read from no data."""
    bins = v.check_int("bins", bins, minimum=1)
    out = {c: bins for c in _ADULT_SYNTH_RANGES}
    out.update({c: len(cats) for c, cats in _ADULT_SYNTH_CATEGORIES.items()})
    out["income"] = 2
    return out


def adult_synthesis_table(*, path: Any = None, bins: int = 5) -> Any:
    """Adult as an integer-coded categorical frame (the paper's ACSEmployment "simple scenario"
    stand-in): age, education-num and hours-per-week in ``bins`` equal-width bins over their public
    ranges, sex, race, marital-status, workclass, relationship, native_us (codes of the documented
    category lists, sorted names) and the target ``income`` (1 = >50K). Its domains are
    :func:`adult_synthesis_domains` (public schema; a value outside it raises ValueError)."""
    import pandas as pd

    from dpfair_jax.data.tabular import adult_strata

    bins = v.check_int("bins", bins, minimum=1)
    f = adult_strata(path=path, age_bins=bins)
    out = pd.DataFrame(index=f.index)
    for name, (col, lo, hi) in _ADULT_SYNTH_RANGES.items():
        codes = pd.cut(f[col].astype(np.float64), bins=np.linspace(lo, hi, bins + 1), labels=False,
                       include_lowest=True)
        if codes.isna().any():
            raise ValueError(f"{col} has values outside its public range [{lo:g}, {hi:g}].")
        out[name] = codes.astype(int)
    for c, cats in _ADULT_SYNTH_CATEGORIES.items():
        codes = pd.Categorical(f[c].astype(str), categories=list(cats)).codes.astype(int)
        if np.any(codes < 0):
            raise ValueError(f"{c} has values outside its documented categories {list(cats)}.")
        out[c] = codes
    out["income"] = (f["income"].astype(str).str.contains(">")).astype(int)
    return out.reset_index(drop=True)


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


def _stratum_ids(frame: Any, scols: Sequence[str], domains: Mapping[str, int]) -> tuple[np.ndarray, int]:
    """Mixed-radix stratum ids over the declared domains of ``scols`` (``s = sum_j x_j prod_{i<j}
    D_i``) and their number ``prod_j D_j``: every declared combination, empty ones included."""
    sid, radix = np.zeros(len(frame), np.int64), 1
    for c in scols:
        sid = sid + frame[c].to_numpy(np.int64) * radix
        radix *= int(domains[c])
    return sid, radix


def _noisy_fitted_counts(syn: "StratifiedSynthesizer", scols: Sequence[str], domains: Mapping[str, int],
                         counts: np.ndarray) -> np.ndarray:
    """The noisy counts of the strata that ``syn`` fitted, in its order (its ``keys``, the string
    codes of ``scols``, mapped to the schema's mixed-radix ids)."""
    out = []
    for key in syn.keys:
        parts = key if isinstance(key, tuple) else (key,)
        sid, radix = 0, 1
        for c, part in zip(scols, parts):
            sid += int(part) * radix
            radix *= int(domains[c])
        out.append(counts[sid])
    c = np.asarray(out, np.float64)
    return c if c.sum() > 0 else np.ones_like(c)


def _check_domains(data: Any, domains: Mapping[str, int] | None) -> dict[str, int]:
    """The declared domains, checked: one integer >= 1 per column, every value in ``[0, D)``."""
    if domains is None:
        raise ValueError("domains must be declared (the public schema: the number of categories of each "
                         "integer-coded column, e.g. adult_synthesis_domains() or the data loader's category "
                         "lists); they are not read from the private data.")
    missing = [c for c in data.columns if c not in domains]
    if missing:
        raise ValueError(f"domains has no entry for columns {missing}.")
    out = {c: v.check_int(f"domains[{c!r}]", domains[c], minimum=1) for c in data.columns}
    for c, d in out.items():  # input validation: reads the data, like any check of its values
        x = data[c].to_numpy()
        if not np.issubdtype(x.dtype, np.integer) or (len(x) and (x.min() < 0 or x.max() >= d)):
            raise ValueError(f"column {c!r} must hold integer codes in [0, {d}) (its declared domain).")
    return out


def synthesis_study(table: Any, *, epsilons: Sequence[float], variants: Sequence[str], seeds: int = 1,
                    synthesizer: str = "marginal", delta: float = 1e-9, max_rows: int | None = None,
                    trees: int = 10, seed: int = 0, target: str = "income",
                    test_size: float = 0.2, domains: Mapping[str, int] | None = None,
                    aim_rounds: int | None = None, first_trial: int = 0) -> Any:
    """Vanilla vs stratified synthesis on an integer-coded frame (``synthesizer``: "marginal", the
    kit's MST-like JAX synthesizer; "mst" or "aim", smartnoise-synth's, the ``synth`` extra): per
    (epsilon, variant, seed) fit on
    the training split (the paper's code fits on all rows, test included), sample as many rows,
    train a random forest on the synthetic rows, and evaluate on the real test split: accuracy,
    column-mean parity error (Def. 10, strata sex x race), demographic-parity ratio and FNR
    difference of the classifier over sex x race (fairlearn's definitions, computed here so the
    study needs no test-only dependency).

    ``domains`` (required): the public schema, the number of categories of every column
    (:func:`adult_synthesis_domains` for :func:`adult_synthesis_table`); a ValueError without it
    or when a value lies outside ``[0, domain)`` (this input check reads the data, like any input
    validation). The strata of a variant are every combination of its columns' declared categories
    (mixed-radix ids, empty ones included), so the released noisy counts have the schema's length
    on every neighbouring table. The smartnoise path ("mst", "aim") fits one model per stratum
    with rows and cannot fit an empty one; a stratified smartnoise run with a declared stratum
    empty in the training split is refused (ValueError; like the range check, this reads the data).
    AIM gets the declared domains (its categories come from the schema, not from the rows) and
    ``aim_rounds`` (its ``T``; ``None``: AIM's default ``16 d``), see :mod:`dpfair_jax.studies.aim`.
    ``first_trial``: the trials are ``first_trial .. first_trial + seeds - 1`` (keys
    ``seed * 1000 + trial``; one call per trial gives the same rows as one call for all).

    Privacy: ``study_spend(epsilon, delta)`` per (epsilon, variant, seed) under add/remove of
    one row (the synthesizer's share of rho plus the noisy stratum counts'; parallel composition
    over the disjoint strata)."""
    import pandas as pd

    for vname in variants:
        v.check_choice("variant", vname, tuple(VARIANT_COLUMNS))
    v.check_choice("synthesizer", synthesizer, ("marginal", "mst", "aim"))
    if aim_rounds is not None:
        aim_rounds = v.check_int("aim_rounds", aim_rounds, minimum=1)
    first_trial = v.check_int("first_trial", first_trial, minimum=0)
    dom = _check_domains(table, domains)
    data, train, test = _split(table, max_rows, seed, test_size)
    domain_list = [dom[c] for c in data.columns]
    strata, k_pad = _variant_strata(train, variants, dom, synthesizer)
    rows = []
    for eps in epsilons:
        rho = acc.dp_to_rho(float(eps), delta)
        rho_fit, count_rho = (1.0 - COUNT_FRACTION) * rho, COUNT_FRACTION * rho
        for vname in variants:
            for sd in range(first_trial, first_trial + seeds):
                key = jax.random.key(seed * 1000 + sd)
                synth = _synthesize(key, synthesizer, train, list(data.columns), domain_list, dom,
                                    VARIANT_COLUMNS[vname], strata[vname], k_pad, rho_fit, count_rho, delta,
                                    aim_rounds)
                rows.append({"epsilon": float(eps), "variant": vname, "seed": sd, "synthesizer": synthesizer,
                             **_evaluate(synth, train, test, target, trees)})
    return pd.DataFrame(rows)


def _split(table: Any, max_rows: int | None, seed: int, test_size: float) -> tuple[Any, Any, Any]:
    """``(data, train, test)``: at most ``max_rows`` rows of ``table`` (sampled with ``seed``), split
    by a permutation of ``default_rng(seed)`` with ``round(test_size * n)`` test rows."""
    rng = np.random.default_rng(seed)
    data = table if max_rows is None or len(table) <= max_rows else table.sample(max_rows, random_state=seed)
    data = data.reset_index(drop=True)
    perm = rng.permutation(len(data))
    n_test = int(round(test_size * len(data)))
    test, train = data.iloc[perm[:n_test]].reset_index(drop=True), data.iloc[perm[n_test:]].reset_index(drop=True)
    return data, train, test


def _variant_strata(train: Any, variants: Sequence[str], dom: Mapping[str, int], synthesizer: str,
                    ) -> tuple[dict[str, tuple[np.ndarray, int]], int]:
    """The strata of every variant from the declared schema only, and one static number of strata
    for every variant (the largest product; unused ids are empty and never sampled), so the marginal
    synthesizer compiles once for the whole study. A smartnoise synthesizer fits one model per
    stratum with rows: a declared stratum without training rows is refused."""
    strata = {vname: _stratum_ids(train, VARIANT_COLUMNS[vname], dom) for vname in variants}
    k_pad = max(k for _, k in strata.values())
    for vname, (sid, k_v) in strata.items():  # smartnoise fits one model per stratum with rows
        if synthesizer != "marginal" and VARIANT_COLUMNS[vname] and np.any(np.bincount(sid, minlength=k_v) == 0):
            raise ValueError(f"variant {vname!r}: a declared stratum of {VARIANT_COLUMNS[vname]} has no training "
                             f"rows; the {synthesizer!r} synthesizer cannot fit an empty stratum (use "
                             "synthesizer='marginal', or strata known to be non-empty).")
    return strata, k_pad


def _synthesize(key: jax.Array, synthesizer: str, train: Any, columns: list[str], domain_list: list[int],
                dom: Mapping[str, int], scols: Sequence[str], strata: tuple[np.ndarray, int], k_pad: int,
                rho_fit: float, count_rho: float, delta: float, aim_rounds: int | None = None) -> Any:
    """One synthetic table: the noisy stratum counts (``count_rho``) set the sampling proportions and
    the number of rows; the synthesizer is fitted at ``rho_fit`` (per stratum, parallel composition)."""
    import pandas as pd

    sid, k_v = strata  # the variant's declared strata (public schema)
    sid = sid.astype(np.int32)
    # noisy stratum counts: sampling proportions and the number of synthetic rows (the
    # exact counts, and len(train), would be released by the synthetic table)
    counts = stratum_counts(sid, k_v, key=jax.random.fold_in(key, 2), count_rho=count_rho)
    n_rows = max(int(round(counts.sum())), 1)
    props = np.zeros(k_pad)
    props[:k_v] = counts if counts.sum() > 0 else 1.0
    if synthesizer == "marginal":
        model = fit_marginal_synthesizer(key, train.to_numpy(np.int32), domain_list, rho_fit, s=sid,
                                         num_groups=k_pad)
        sc, _ = sample_marginal_synthesizer(jax.random.fold_in(key, 1), model, n_rows, props)
        return pd.DataFrame(sc, columns=columns)
    eps_fit = acc.zcdp_to_dp(rho_fit, delta)
    if synthesizer == "aim":  # smartnoise-synth's AIM and MST on the public schema (SchemaSynthesizer)
        from dpfair_jax.studies.aim import aim_factory

        fac = aim_factory(eps_fit, delta, domains=dom, strata_columns=list(scols), rounds=aim_rounds)
    else:
        fac = mst_factory(eps_fit, delta, domains=dom, strata_columns=list(scols))
    if scols:
        syn = StratifiedSynthesizer(fac, scols).fit(train.astype(str))
        c_fit = _noisy_fitted_counts(syn, scols, dom, counts)
        return syn.sample(n_rows, proportions=c_fit).astype(int)
    return fac().fit(train.astype(str)).sample(n_rows).astype(int)


def _evaluate(synth: Any, train: Any, test: Any, target: str, trees: int) -> dict[str, float]:
    """A random forest trained on the synthetic rows, judged on the real test split: accuracy, the
    column-mean parity error (strata sex x race), demographic-parity ratio and FNR difference over
    sex x race, and the majority rate."""
    from sklearn.ensemble import RandomForestClassifier

    feats = [c for c in train.columns if c != target]
    sens_test = test["sex"].astype(str) + "_" + test["race"].astype(str)
    ysyn = synth[target].to_numpy()
    if len(np.unique(ysyn)) < 2:
        pred = np.full(len(test), ysyn[0])
    else:
        clf = RandomForestClassifier(n_estimators=trees, random_state=42, n_jobs=1)
        clf.fit(synth[feats].to_numpy(), ysyn)
        pred = clf.predict(test[feats].to_numpy())
    ytest = test[target].to_numpy()
    dp_ratio, fnr = _selection_ratio_and_fnr_difference(ytest, pred, sens_test)
    return {
        "accuracy": float(np.mean(pred == ytest)),
        "parity_error": column_mean_parity_error(train.astype(np.float32), synth.astype(np.float32),
                                                 ["sex", "race"]),
        "dp_ratio": dp_ratio,
        "fnr_difference": float(fnr),
        "majority_rate": float(max(ytest.mean(), 1 - ytest.mean())),
    }
