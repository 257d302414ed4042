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
