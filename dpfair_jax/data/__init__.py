"""Datasets: the ``Dataset`` pytree, synthetic generators, real tabular loaders, preprocessing."""

from dpfair_jax.data.dataset import Dataset, DatasetInfo, make_dataset

__all__ = ["Dataset", "DatasetInfo", "make_dataset"]
