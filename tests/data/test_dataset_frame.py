"""Datasets from pandas DataFrames (names kept) and the short repr."""

import jax
import numpy as np
import pandas as pd
import pytest

from dpfair_jax.data import Dataset, dataset_from_frame, make_dataset


def _frame(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 80, n).astype(float),
        "job": rng.choice(["clerk", "admin", "tech"], n),
        "smoker": rng.choice([True, False], n),
        "sex": rng.choice(["F", "M"], n),
        "income": rng.choice([">50K", "<=50K"], n),
    })


def test_from_frame_encodes_and_keeps_names():
    df = _frame()
    ds = dataset_from_frame(df, target="income", group="sex", source="toy")
    assert ds.info.feature_names == ("age", "job=admin", "job=clerk", "job=tech", "smoker")
    assert ds.info.group_names == ("F", "M") and ds.num_groups == 2 and ds.num_classes == 2
    np.testing.assert_array_equal(np.asarray(ds.s), (df.sex == "M").to_numpy().astype(int))
    # two target values: the larger in sorted order is the positive class (">50K" > "<=50K")
    np.testing.assert_array_equal(np.asarray(ds.y), (df.income == ">50K").to_numpy().astype(int))
    assert ds.info.label_names == ("<=50K", ">50K")
    x = np.asarray(ds.x)
    np.testing.assert_allclose(x[:, 0], df.age)
    np.testing.assert_allclose(x[:, 1:4].sum(1), 1.0)
    pos = dataset_from_frame(df, target="income", group="sex", positive="<=50K")
    np.testing.assert_array_equal(np.asarray(pos.y), 1 - np.asarray(ds.y))


def test_from_frame_regression_and_errors():
    df = _frame()
    df["score"] = np.linspace(0.0, 1.0, len(df))
    reg = dataset_from_frame(df, target="score", group="sex", features=["age"])
    assert reg.num_classes == 0 and reg.info.task == "regression"
    with pytest.raises(ValueError, match="'wage'"):
        dataset_from_frame(df, target="wage", group="sex")
    with pytest.raises(ValueError, match="feature column"):
        dataset_from_frame(df, target="income", group="sex", features=["height"])
    bad = df.copy()
    bad.loc[3, "age"] = np.nan
    with pytest.raises(ValueError, match="'age'"):
        dataset_from_frame(bad, target="income", group="sex")
    with pytest.raises(ValueError, match="positive"):
        dataset_from_frame(df, target="income", group="sex", positive="yes")


def test_make_dataset_keeps_frame_column_names():
    x = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1.0, 0.0, 1.0, 0.0]})
    ds = make_dataset(x, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]))
    assert ds.info.feature_names == ("a", "b") and ds.info.task == "classification"
    reg = make_dataset(x, np.array([0.5, 1.0, 0.0, 2.0]), np.array([0, 0, 1, 1]))
    assert reg.info.task == "regression" and reg.info.feature_names == ("a", "b")


def test_repr_is_short_and_works_under_jit():
    ds = dataset_from_frame(_frame(), target="income", group="sex", source="toy")
    text = repr(ds)
    assert text.startswith("Dataset(n=40, d=5, groups=2 [F=") and "source='toy'" in text
    assert len(text) < 120
    seen = []
    jax.jit(lambda d: seen.append(repr(d)) or d.x.sum())(ds)
    assert seen and seen[0].startswith("Dataset(n=40, d=5, groups=2")
    assert isinstance(ds, Dataset)


# ---------------------------------------------------------------------------------------------
# ID-like, high-cardinality and float group columns


def test_id_like_column_is_refused_naming_the_fix():
    """1828 distinct strings in 1830 rows would become 1828 one-hot columns: refused, with the fix."""
    rng = np.random.default_rng(1)
    n = 1830
    ids = np.array([f"p{i:05d}" for i in range(1828)] + ["p00000", "p00001"])
    df = pd.DataFrame({"id": ids, "x": rng.normal(size=n), "g": rng.choice(["a", "b"], n),
                       "y": rng.choice([0, 1], n)})
    with pytest.raises(ValueError) as err:
        dataset_from_frame(df, target="y", group="g")
    msg = str(err.value)
    assert "'id'" in msg and "1828 distinct values in 1830 rows" in msg and "looks like an ID" in msg
    assert "high_cardinality=['id']" in msg and "features=[...]" in msg
    assert dataset_from_frame(df, target="y", group="g", features=["x"]).d == 1
    opted = dataset_from_frame(df, target="y", group="g", high_cardinality=["id"])
    assert opted.d == 1828 + 1


def test_high_cardinality_categorical_cap_and_fraction():
    rng = np.random.default_rng(2)
    n = 1000
    df = pd.DataFrame({"zip": rng.choice([f"z{i}" for i in range(60)], n), "g": rng.choice(["a", "b"], n),
                       "y": rng.choice([0, 1], n)})
    with pytest.raises(ValueError, match=r"'zip' has 60 distinct values in 1000 rows \(limit 50"):
        dataset_from_frame(df, target="y", group="g")
    assert dataset_from_frame(df, target="y", group="g", max_categories=60).d == 60
    small = df.iloc[:40].copy()  # 40 rows: at most 20 categories (max_category_fraction=0.5)
    small["zip"] = [f"z{i % 25}" for i in range(40)]
    with pytest.raises(ValueError, match="limit 20"):
        dataset_from_frame(small, target="y", group="g")
    assert dataset_from_frame(small, target="y", group="g", max_category_fraction=1.0).d == 25


def test_float_group_column_refused_unless_few_integral_values():
    rng = np.random.default_rng(3)
    n = 500
    df = pd.DataFrame({"x": rng.normal(size=n), "score": np.round(rng.uniform(0, 1, n), 2),
                       "y": rng.choice([0, 1], n)})
    assert df["score"].nunique() > 90
    with pytest.raises(ValueError, match=r"group column 'score' holds non-integral floats .*pd\.cut"):
        dataset_from_frame(df, target="y", group="score")
    df["flag"] = rng.choice([0.0, 1.0], n)
    ds = dataset_from_frame(df, target="y", group="flag", features=["x"])
    assert ds.num_groups == 2 and ds.info.group_names == ("0", "1")
    np.testing.assert_array_equal(np.asarray(ds.s), df["flag"].to_numpy().astype(int))
    df["site"] = rng.integers(0, 30, n)
    with pytest.raises(ValueError, match=r"'site' has 30 distinct values \(max_groups=20\).*max_groups=30"):
        dataset_from_frame(df, target="y", group="site", features=["x"])
    many = dataset_from_frame(df, target="y", group="site", features=["x"], max_groups=30)
    assert many.num_groups == 30 and many.info.group_names[:3] == ("0", "1", "2")  # numeric order
    np.testing.assert_array_equal(np.asarray(many.s), df["site"].to_numpy())


def test_integer_row_id_feature_warns():
    df = pd.DataFrame({"row": np.arange(100), "x": np.linspace(0, 1, 100), "g": ["a", "b"] * 50,
                       "y": [0, 1, 1, 0] * 25})
    with pytest.warns(UserWarning, match="'row' holds a distinct integer in every row"):
        dataset_from_frame(df, target="y", group="g")


# ---------------------------------------------------------------------------------------------
# the fitted encoder: one frame's columns applied to another


def test_encoder_applies_training_columns_to_a_test_frame():
    from dpfair_jax.data import FrameEncoder

    train = _frame(n=60, seed=0)
    test = _frame(n=30, seed=1)
    test["job"] = np.where(test["job"] == "tech", "clerk", test["job"])  # a category absent from test
    enc = FrameEncoder.fit(train, target="income", group="sex", standardize=True)
    tr, te = enc.transform(train), enc.transform(test)
    assert te.info.feature_names == tr.info.feature_names == ("age", "job=admin", "job=clerk", "job=tech", "smoker")
    x = np.asarray(te.x)
    mu, sd = train["age"].mean(), train["age"].std(ddof=0)  # the training moments, not the test's
    np.testing.assert_allclose(x[:, 0], (test["age"] - mu) / sd, rtol=1e-5)
    np.testing.assert_array_equal(x[:, 3], 0.0)
    np.testing.assert_array_equal(x[:, 1], (test["job"] == "admin").to_numpy())
    np.testing.assert_array_equal(x[:, 4], test["smoker"].to_numpy())  # 0/1 flags stay 0/1
    np.testing.assert_array_equal(np.asarray(te.s), (test["sex"] == "M").to_numpy().astype(int))
    np.testing.assert_array_equal(np.asarray(te.y), (test["income"] == ">50K").to_numpy().astype(int))
    assert te.info.group_names == ("F", "M") and te.info.label_names == ("<=50K", ">50K")
    # a test frame whose target holds one value keeps the training label map
    one = test.assign(income="<=50K")
    np.testing.assert_array_equal(np.asarray(enc.transform(one).y), 0)
    # the one-call path is fit + transform on the same frame
    ref = dataset_from_frame(train, target="income", group="sex")
    same = FrameEncoder.fit(train, target="income", group="sex").transform(train)
    np.testing.assert_array_equal(np.asarray(ref.x), np.asarray(same.x))
    assert ref.info == same.info


def test_encoder_unseen_values():
    from dpfair_jax.data import FrameEncoder

    train = _frame(n=60, seed=0)
    test = _frame(n=10, seed=2)
    test.loc[[0, 3], "job"] = "pilot"
    enc = FrameEncoder.fit(train, target="income", group="sex")
    with pytest.raises(ValueError, match=r"column 'job' has value\(s\) \['pilot'\].*unseen='zeros'"):
        enc.transform(test)
    zeros = FrameEncoder.fit(train, target="income", group="sex", unseen="zeros").transform(test)
    x = np.asarray(zeros.x)
    np.testing.assert_array_equal(x[[0, 3], 1:4], 0.0)
    np.testing.assert_allclose(np.delete(x, [0, 3], axis=0)[:, 1:4].sum(1), 1.0)
    with pytest.raises(ValueError, match=r"group column 'sex' has value\(s\) \['X'\]"):
        enc.transform(train.assign(sex="X"), min_group_size=0)
    with pytest.raises(ValueError, match=r"target column 'income' has value\(s\) \['maybe'\]"):
        enc.transform(train.assign(income="maybe"), min_group_size=0)
    with pytest.raises(ValueError, match="fitted column"):
        enc.transform(test.drop(columns=["job"]))
    with pytest.raises(ValueError, match="unseen"):
        FrameEncoder.fit(train, target="income", group="sex", unseen="ignore")


def test_encoder_public_categories_groups_and_scale():
    """Public categories, groups and moments: the encoding reads nothing but the column types."""
    from dpfair_jax.data import FrameEncoder

    train = _frame(n=60, seed=0)
    enc = FrameEncoder.fit(train, target="income", group="sex", categories={"job": ["admin", "clerk", "pilot", "tech"]},
                           groups=["F", "M", "X"], labels=["<=50K", ">50K"], scale={"age": (50.0, 10.0)})
    ds = enc.transform(train, min_group_size=0)
    assert ds.info.feature_names == ("age", "job=admin", "job=clerk", "job=pilot", "job=tech", "smoker")
    assert ds.num_groups == 3 and ds.info.group_names == ("F", "M", "X")
    np.testing.assert_allclose(np.asarray(ds.x)[:, 0], (train["age"] - 50.0) / 10.0, rtol=1e-6)
    with pytest.raises(ValueError, match=r"scale\['age'\]"):
        FrameEncoder.fit(train, target="income", group="sex", scale={"age": (0.0, 0.0)})
    with pytest.raises(ValueError, match="not features"):
        FrameEncoder.fit(train, target="income", group="sex", categories={"height": ["a"]})


def test_encoder_matches_numeric_groups_across_dtypes():
    """Groups fitted on an integer column are found in a test frame that stores them as floats."""
    from dpfair_jax.data import FrameEncoder

    train = pd.DataFrame({"x": np.arange(8.0), "g": [0, 1] * 4, "y": [0, 1, 1, 0] * 2})
    enc = FrameEncoder.fit(train, target="y", group="g")
    test = train.assign(g=train["g"].astype(float)[::-1].to_numpy())
    np.testing.assert_array_equal(np.asarray(enc.transform(test).s), test["g"].to_numpy().astype(int))
    with pytest.raises(ValueError, match=r"group column 'g' has value\(s\) \['2.0'\]"):
        enc.transform(train.assign(g=2.0), min_group_size=0)
