"""Datasets: the ``Dataset`` pytree, synthetic generators, real tabular loaders, preprocessing.

- ``dataset``: ``Dataset``, ``DatasetInfo``, ``make_dataset``.
- ``frame``: ``FrameEncoder`` (a column encoding fitted on one DataFrame, applied to others),
  ``dataset_from_frame`` (a DataFrame with named target, group and feature columns).
- ``synthetic``: generators of papers 000, 001 and 003 (pure functions of a key).
- ``tabular``: ``load(name, ...) -> (train, test)``, ``available()``, ``describe``, ``load_frame``,
  ``adult_strata`` (the real datasets, read offline).
- ``preprocessing``: splits, one-hot encoding, (per-group) standardization, row-norm bounding,
  group-size subsampling.
"""

from dpfair_jax.data import preprocessing, synthetic, tabular
from dpfair_jax.data.dataset import Dataset, DatasetInfo, make_dataset
from dpfair_jax.data.frame import FrameEncoder, dataset_from_frame
from dpfair_jax.data.preprocessing import (
    bound_row_norms,
    group_standardize,
    one_hot,
    standardize,
    subsample_group_ratio,
    train_test_split,
)
from dpfair_jax.data.synthetic import gaussian_mixture, ols_mixture, two_group_classification
from dpfair_jax.data.tabular import adult_strata, available, describe, load, load_frame

__all__ = [
    "Dataset",
    "DatasetInfo",
    "make_dataset",
    "dataset_from_frame",
    "FrameEncoder",
    "preprocessing",
    "synthetic",
    "tabular",
    "load",
    "load_frame",
    "available",
    "describe",
    "adult_strata",
    "train_test_split",
    "one_hot",
    "standardize",
    "group_standardize",
    "bound_row_norms",
    "subsample_group_ratio",
    "ols_mixture",
    "gaussian_mixture",
    "two_group_classification",
]
