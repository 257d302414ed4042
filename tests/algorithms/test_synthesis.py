"""Tests of dpfair_jax.algorithms.synthesis (paper 003, stratified private synthetic data) and of
its study, dpfair_jax.studies.synthesis."""

from __future__ import annotations

import importlib.util
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from dpfair_jax.algorithms import synthesis as syn
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.studies import synthesis as study


def _chain_data(n=4000, seed=0):
    """Three columns: a -> b strongly dependent, c independent; a stratum column s."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.9, a, rng.integers(0, 3, n))
    c = rng.integers(0, 2, n)
    return np.stack([a, b, c], 1).astype(np.int32), (3, 3, 2)


def test_noise_std_matches_sensitivity():
    d, rho = 3, 0.5
    sigma = float(syn.marginal_sigma(d, rho))
    assert sigma == pytest.approx(math.sqrt(d * (d + 1) / 2) / math.sqrt(2 * rho))
    # a one-way cell far from 0 (no clamping) varies with std sigma across keys
    codes = jnp.zeros((4000, 3), jnp.int32)
    ones = jnp.ones(4000)
    s = jnp.zeros(4000, jnp.int32)
    keys = jax.random.split(jax.random.key(0), 400)
    cells = jax.vmap(lambda k: syn.marginals._fit_tables(k, codes, s, ones, rho, 1, 3, (3, 3, 2))[0, 0, 0, 0, 0])(keys)
    cells = np.asarray(cells, np.float64) - 4000
    # sample-variance SE for Gaussian noise: sigma^2 sqrt(2/N); 4 SE
    assert abs(cells.var() - sigma ** 2) < 4 * sigma ** 2 * math.sqrt(2 / cells.size)


def test_tree_recovers_dependency_and_samples_match_marginals():
    codes, domains = _chain_data()
    model = syn.fit_marginal_synthesizer(jax.random.key(1), codes, domains, 10.0)
    order, parent = np.asarray(model.order[0]), np.asarray(model.parent[0])
    edges = {tuple(sorted((int(order[j]), int(parent[j])))) for j in range(1, 3)}
    assert (0, 1) in edges  # the strongly dependent pair is a tree edge
    sample, strata = syn.sample_marginal_synthesizer(jax.random.key(2), model, 8000)
    assert sample.shape == (8000, 3) and np.all(strata == 0)
    assert np.all(sample < np.asarray(domains))
    agree_real = np.mean(codes[:, 0] == codes[:, 1])
    agree_syn = np.mean(sample[:, 0] == sample[:, 1])
    assert abs(agree_syn - agree_real) < 0.03
    np.testing.assert_allclose(np.bincount(sample[:, 2], minlength=2) / 8000,
                               np.bincount(codes[:, 2], minlength=2) / len(codes), atol=0.03)
    ind = syn.fit_marginal_synthesizer(jax.random.key(1), codes, domains, 10.0, mode="independent")
    si, _ = syn.sample_marginal_synthesizer(jax.random.key(2), ind, 8000)
    assert np.mean(si[:, 0] == si[:, 1]) < 0.45  # independence destroys the dependency


def test_strata_fit_in_one_program_and_proportional_sampling():
    codes, domains = _chain_data()
    s = (codes[:, 2]).astype(np.int32)  # stratify on column c
    s3 = np.where(np.arange(len(s)) < 10, 2, s).astype(np.int32)  # a tiny third stratum
    model = syn.fit_marginal_synthesizer(jax.random.key(3), codes, domains, 5.0, s=s3, num_groups=4)
    assert model.tables.shape[:3] == (4, 3, 3)
    assert np.all(np.isfinite(np.asarray(model.tables)))
    p = syn.stratum_proportions(s3, 4)
    out, strata = syn.sample_marginal_synthesizer(jax.random.key(4), model, 1000, p)
    np.testing.assert_array_equal(np.bincount(strata, minlength=4), np.round(p * 1000).astype(int))
    # stratum 0/1 samples keep column c equal to their stratum (the per-stratum marginal says so)
    for g in (0, 1):
        assert np.mean(out[strata == g, 2] == g) > 0.95
    # the empty stratum 3 samples uniformly without NaN
    out_e, st_e = syn.sample_marginal_synthesizer(jax.random.key(5), model, 1000, np.array([0, 0, 0, 1.0]))
    assert np.all(st_e == 3) and np.all(out_e < np.asarray(domains))


def test_stratified_wrapper_generic_synthesizer():
    codes, domains = _chain_data(1000)
    df = pd.DataFrame(codes, columns=["a", "b", "c"])
    wrap = syn.StratifiedSynthesizer(lambda: syn.JaxMarginalSynthesizer(20.0), ["c"]).fit(df)
    assert wrap.counts == [int((df.c == 0).sum()), int((df.c == 1).sum())]
    with pytest.raises(ValueError, match="proportions is required"):
        wrap.sample(500)  # the exact stratum counts are private: never the default proportions
    p = syn.stratum_proportions(df.c.to_numpy(), 2, key=jax.random.key(1), count_rho=0.5)
    out = wrap.sample(500, proportions=p)
    assert len(out) == 500
    assert abs((out.c == 0).mean() - p[0]) < 0.01
    with pytest.raises(ValueError, match="strata_columns"):
        syn.StratifiedSynthesizer(lambda: None, ["zzz"]).fit(df)


def test_parity_error_of_column_means():
    df = pd.DataFrame({"sex": [0, 0, 1, 1], "race": [0, 1, 0, 1], "x": [1.0, 2.0, 3.0, 4.0]})
    assert study.column_mean_parity_error(df, df, ["sex"]) == pytest.approx(0.0)
    other = df.assign(x=df.x * 2)
    # strata sex=0: x 1.5 -> 3 (rel 1), sex=1: 3.5 -> 7 (1); population 2.5 -> 5 (1) times 1/12
    # sex column: stratum 0 has true mean 0 (dropped); race column identical
    assert study.column_mean_parity_error(df, other, ["sex"]) == pytest.approx(2 + 1 / 12, rel=1e-5)


def test_validation():
    codes, domains = _chain_data(100)
    with pytest.raises(ValueError, match="domains"):
        syn.fit_marginal_synthesizer(jax.random.key(0), codes, (3, 3), 1.0)
    with pytest.raises(ValueError, match="outside"):
        syn.fit_marginal_synthesizer(jax.random.key(0), codes, (2, 3, 2), 1.0)
    with pytest.raises(ValueError, match="rho"):
        syn.fit_marginal_synthesizer(jax.random.key(0), codes, domains, 0.0)
    with pytest.raises(ValueError, match="mode"):
        syn.fit_marginal_synthesizer(jax.random.key(0), codes, domains, 1.0, mode="bayes")


@pytest.mark.skipif(importlib.util.find_spec("snsynth") is None,
                    reason="smartnoise-synth (the 'synth' extra) is not installed")
def test_mst_stratified_smoke():  # pragma: no cover - needs the extra
    codes, _ = _chain_data(1000)
    df = pd.DataFrame(codes, columns=["a", "b", "c"]).astype(str)
    wrap = syn.StratifiedSynthesizer(syn.mst_factory(5.0), ["c"]).fit(df)
    assert len(wrap.sample(200, proportions=[0.5, 0.5])) == 200


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": 1.0, "delta": 0.0}, "delta"),
    ({"epsilon": 1.0, "strata_columns": ["s"]}, "needs domains"),
    ({"epsilon": 1.0, "domains": {"a": 0}}, "domains"),
    ({"epsilon": 1.0, "domains": {"a": 2}, "strata_columns": ["s"]}, "not in domains"),
])
def test_mst_factory_bad_arguments_raise_before_any_fit(kwargs, match):
    """Checked before smartnoise-synth is imported, so this runs without the extra."""
    with pytest.raises(ValueError, match=match):
        syn.mst_factory(**kwargs)


@pytest.mark.skipif(importlib.util.find_spec("snsynth") is None,
                    reason="smartnoise-synth (the 'synth' extra) is not installed")
def test_mst_categories_come_from_the_schema():  # pragma: no cover - needs the extra
    """With ``domains`` MST's categories are the schema's (a code absent from the rows is still in
    its domain, so neighbouring tables share it) and a stratum column is the stratum's key."""
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"a": rng.integers(0, 3, n), "s": np.ones(n, int), "c": rng.integers(0, 2, n)}).astype(str)
    dom = {"a": 4, "s": 2, "c": 2}  # code 3 of "a" never occurs
    model = syn.mst_factory(20.0, 1e-9, domains=dom)().fit(df)
    assert model.inner._transformer.cardinality == [4, 2, 2]
    out = model.sample(300)
    assert list(out.columns) == ["a", "s", "c"] and len(out) == 300
    for c, d in dom.items():
        assert set(out[c].astype(int)) <= set(range(d))
    strat = syn.mst_factory(20.0, 1e-9, domains=dom, strata_columns=["s"])().fit(df)
    assert strat.inner._transformer.cardinality == [4, 2]
    assert set(strat.sample(100)["s"]) == {"1"}


@pytest.mark.slow
def test_synthesis_study_small_table():
    rng = np.random.default_rng(3)
    n = 1500
    sex, race = rng.integers(0, 2, n), rng.integers(0, 3, n)
    x = rng.integers(0, 4, n)
    income = (rng.random(n) < 0.2 + 0.15 * (x >= 2) + 0.1 * sex).astype(int)
    table = pd.DataFrame({"x": x, "sex": sex, "race": race, "income": income})
    dom = {"x": 4, "sex": 2, "race": 3, "income": 2}
    df = study.synthesis_study(table, epsilons=[1.0, 8.0], variants=["vanilla", "sex_race"], seeds=1, trees=3,
                               domains=dom)
    assert len(df) == 4 and set(df.variant) == {"vanilla", "sex_race"}
    for col in ("accuracy", "parity_error", "dp_ratio", "fnr_difference"):
        assert np.all(np.isfinite(df[col]))
    assert np.all((df.accuracy >= 0) & (df.accuracy <= 1))
    with pytest.raises(ValueError, match="variant"):
        study.synthesis_study(table, epsilons=[1.0], variants=["age"])


def test_selection_ratio_and_fnr_difference_match_fairlearn():
    fl = pytest.importorskip("fairlearn.metrics")
    from dpfair_jax.studies.synthesis import _selection_ratio_and_fnr_difference

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    p = rng.integers(0, 2, 500)
    g = rng.choice(["a_1", "a_2", "b_1", "b_2"], 500)
    ratio, fnr = _selection_ratio_and_fnr_difference(y, p, g)
    assert ratio == pytest.approx(fl.demographic_parity_ratio(y, p, sensitive_features=g), abs=1e-12)
    want = fl.MetricFrame(metrics=fl.false_negative_rate, y_true=y, y_pred=p, sensitive_features=g).difference()
    assert fnr == pytest.approx(want, abs=1e-12)


# --- fit / spend / calibrate ------------------------------------------------------------------

@pytest.mark.parametrize("counts", ["noisy", "none"])
@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_spend_of_calibrate_hits_the_target(counts, eps):
    cfg = syn.SynthesisConfig(domains=(3, 3, 2), num_groups=2, counts=counts, delta=1e-9)
    hp = syn.calibrate(cfg, (60, 40), (eps, 1e-9))
    sp = syn.spend(cfg, (60, 40), hp)
    assert sp.epsilon <= eps and sp.epsilon >= 0.99 * eps
    assert sp.relation == "add_remove" and sp.delta == 1e-9
    assert sp.rho == pytest.approx(acc.dp_to_rho(eps, 1e-9), rel=1e-9)
    if counts == "noisy":  # the study's record at the same target: same rho and epsilon
        from dpfair_jax.studies.synthesis import study_spend

        ref = study_spend(eps, 1e-9)
        assert sp.rho == pytest.approx(ref.rho, rel=1e-9) and sp.epsilon == pytest.approx(ref.epsilon, rel=1e-6)


def test_fit_spends_what_spend_records():
    """fit hands (1 - f) rho to the synthesizer and f rho to the counts (the spend's two charges),
    with the study's keys: its tables and counts equal direct calls at those budgets."""
    codes, domains = _chain_data(400)
    s = codes[:, 2].astype(np.int32)
    cfg = syn.SynthesisConfig(domains=tuple(domains), num_groups=2)
    hp = syn.calibrate(cfg, 400, (2.0, 1e-9))
    key = jax.random.key(6)
    out = syn.fit(key, (codes, s), hp, cfg)
    charges = syn.spend(cfg, 400, hp)
    rho_fit, rho_c = 0.9 * hp.rho, 0.1 * hp.rho
    assert rho_fit + rho_c == pytest.approx(charges.rho, rel=1e-12)
    ref = syn.fit_marginal_synthesizer(key, codes, domains, rho_fit, s=s, num_groups=2)
    np.testing.assert_array_equal(out.params.model.tables, ref.tables)
    counts = syn.stratum_counts(s, 2, key=jax.random.fold_in(key, 2), count_rho=rho_c)
    np.testing.assert_array_equal(out.params.counts, counts)
    assert out.spend == charges
    np.testing.assert_allclose(out.params.proportions, counts / counts.sum())
    none = syn.fit(key, (codes, s), hp, syn.SynthesisConfig(domains=tuple(domains), num_groups=2, counts="none"))
    assert none.params.counts is None
    np.testing.assert_array_equal(
        none.params.model.tables, syn.fit_marginal_synthesizer(key, codes, domains, hp.rho, s=s, num_groups=2).tables)


def test_synthesis_trio_bad_input_names_the_field():
    with pytest.raises(ValueError, match="domains"):
        syn.SynthesisConfig(domains=[3, 3]).validate()
    with pytest.raises(ValueError, match="counts"):
        syn.SynthesisConfig(domains=(3,), counts="exact").validate()
    with pytest.raises(ValueError, match="config.delta"):
        syn.calibrate(syn.SynthesisConfig(domains=(3,)), 10, (1.0, 1e-6))
    with pytest.raises(ValueError, match="sizes"):
        syn.spend(syn.SynthesisConfig(domains=(3,), num_groups=2), (5, 5, 5), syn.SynthesisHparams())
    with pytest.raises(ValueError, match="rho"):
        syn.spend(syn.SynthesisConfig(domains=(3,)), 10, syn.SynthesisHparams(rho=-1.0))


def test_synthesis_study_schema_is_public_on_neighbouring_tables(monkeypatch):
    """Domains and strata come from the declared schema: adding one record with a race value (and
    so a sex x race stratum) absent from the rest leaves the synthesizer's domains, the number of
    strata and the length of the released noisy counts unchanged (all declared strata, empty ones
    included); undeclared domains and out-of-range codes are refused before any compute."""
    from dpfair_jax.studies import synthesis as SY

    rng = np.random.default_rng(4)
    m = 200
    base = pd.DataFrame({"sex": rng.integers(0, 2, m), "race": rng.integers(0, 2, m),
                         "a": rng.integers(0, 2, m), "income": rng.integers(0, 2, m)})
    extra = pd.DataFrame({"sex": [1], "race": [2], "a": [2], "income": [1]})
    dom = {"sex": 2, "race": 3, "a": 3, "income": 2}
    seen = []

    def counts_spy(s, num_groups, **kw):
        out = syn.stratum_counts(s, num_groups, **kw)
        seen.append(("counts", num_groups, len(out)))
        return out

    def fit_spy(key, codes, domains, rho, *, s=None, num_groups=1, **kw):
        seen.append(("fit", tuple(domains), num_groups))
        d = len(domains)
        return syn.MarginalModel(np.zeros((num_groups, d, d, 1, 1)), None, None, tuple(domains))

    def sample_stub(key, model, n_rows, proportions=None):  # post-processing, not what is checked
        assert len(proportions) == model.tables.shape[0]
        return (np.arange(n_rows)[:, None] % 2 * np.ones((1, len(model.domains)), int)).astype(np.int32), None

    monkeypatch.setattr(SY, "stratum_counts", counts_spy)
    monkeypatch.setattr(SY, "fit_marginal_synthesizer", fit_spy)
    monkeypatch.setattr(SY, "sample_marginal_synthesizer", sample_stub)
    runs = []
    for table in (base, pd.concat([base, extra], ignore_index=True)):
        seen.clear()
        # seed 0, test_size 0.2: the added record (the last row) lands in the training split
        SY.synthesis_study(table, epsilons=[2.0], variants=["sex_race"], trees=1, domains=dom)
        runs.append(list(seen))
    assert runs[0] == runs[1]
    assert runs[0] == [("counts", 6, 6), ("fit", (2, 3, 3, 2), 6)]
    with pytest.raises(ValueError, match="domains must be declared"):
        SY.synthesis_study(base, epsilons=[2.0], variants=["sex"])
    with pytest.raises(ValueError, match="race"):
        SY.synthesis_study(base, epsilons=[2.0], variants=["sex"], domains={**dom, "race": 1})
    with pytest.raises(ValueError, match="no entry"):
        SY.synthesis_study(base, epsilons=[2.0], variants=["sex"], domains={"sex": 2})
    with pytest.raises(ValueError, match="no training rows"):  # smartnoise cannot fit an empty stratum
        SY.synthesis_study(base, epsilons=[2.0], variants=["sex_race"], synthesizer="mst", domains=dom)
    assert seen == [("counts", 6, 6), ("fit", (2, 3, 3, 2), 6)]  # the refusals ran nothing
    assert SY.adult_synthesis_domains(5) == {"age": 5, "education": 5, "hours": 5, "sex": 2, "race": 5,
                                             "marital-status": 7, "workclass": 8, "relationship": 6,
                                             "native_us": 2, "income": 2}
