"""Preprocessing: splits, one-hot encoding, standardization, row-norm bounding, group subsampling.

Host-side utilities (splits, one-hot encoding, fitting statistics) take NumPy/pandas inputs and
validate them; the array transforms (:func:`apply_standardizer`, :func:`group_moments`,
:func:`apply_group_standardization`, :func:`bound_row_norms`) are pure and jit/vmap-able.

Statistics are always fitted on the training split and applied to both splits (never fitted on
test rows). Note that the statistics themselves are computed without privacy: a study that must
treat the feature scale as private should standardize with public constants instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset

__all__ = [
    "check_test_size",
    "split_indices",
    "train_test_split",
    "one_hot",
    "Standardizer",
    "fit_standardizer",
    "apply_standardizer",
    "standardize",
    "group_moments",
    "apply_group_standardization",
    "group_standardize",
    "bound_row_norms",
    "subsample_group_ratio",
]


# --------------------------------------------------------------------------------------------
# splits
# --------------------------------------------------------------------------------------------


def check_test_size(test_size: float) -> float:
    t = v.as_float("test_size", test_size)
    if not 0.0 < t < 1.0:
        raise ValueError(f"test_size must lie in the open interval (0, 1), got {test_size!r}.")
    return t


def split_indices(
    n: int,
    *,
    test_size: float = 0.25,
    seed: int = 0,
    stratify: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test row indices of a random split (3:1 by default).

    Without ``stratify`` the test split has ``ceil(test_size * n)`` rows (as scikit-learn).
    With ``stratify`` (an array of length ``n``, e.g. group ids) each stratum ``g`` is split
    separately with ``round(test_size * n_g)`` test rows (half to even), so group proportions match in both splits.
    Deterministic given ``seed`` (NumPy ``default_rng``). Both splits are non-empty.
    """
    n = v.check_int("n", n, minimum=2)
    t = check_test_size(test_size)
    rng = np.random.default_rng(v.check_int("seed", seed, minimum=0))
    if stratify is None:
        n_test = min(max(math.ceil(t * n), 1), n - 1)
        perm = rng.permutation(n)
        test = perm[:n_test]
    else:
        strata = np.asarray(stratify)
        if strata.shape != (n,):
            raise ValueError(f"stratify must have shape ({n},) (one stratum per row), got {strata.shape}.")
        _, inverse, counts = np.unique(strata, return_inverse=True, return_counts=True)
        order = np.lexsort((rng.random(n), inverse))  # rows by stratum, random within stratum
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n) - starts[inverse[order]]
        n_test = np.rint(t * counts).astype(np.int64)
        test = np.flatnonzero(rank < n_test[inverse])
        if len(test) == 0 or len(test) == n:
            raise ValueError(
                f"stratified split with test_size={t} left an empty split (n={n}); "
                "use a larger dataset or a different test_size."
            )
    is_test = np.zeros(n, dtype=bool)
    is_test[test] = True
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def train_test_split(
    data: Dataset,
    *,
    test_size: float = 0.25,
    seed: int = 0,
    stratify: bool | Any = False,
) -> tuple[Dataset, Dataset]:
    """Split a ``Dataset`` into (train, test) rows; ``stratify=True`` stratifies by group ``s``.

    ``stratify`` may also be an integer array of strata (e.g. group x label).
    """
    if not isinstance(data, Dataset):
        raise ValueError(f"data must be a Dataset, got {type(data).__name__}; build one with make_dataset.")
    strata = None
    if stratify is True:
        strata = np.asarray(data.s)
    elif stratify is not False and stratify is not None:
        strata = np.asarray(stratify)
    tr, te = split_indices(data.n, test_size=test_size, seed=seed, stratify=strata)
    return data.take(tr), data.take(te)


# --------------------------------------------------------------------------------------------
# one-hot encoding
# --------------------------------------------------------------------------------------------


def one_hot(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    drop_first: bool = False,
    prefix_sep: str = "_",
) -> pd.DataFrame:
    """One-hot encode categorical ``columns`` of a frame (float 0/1 columns ``col_value``).

    ``columns=None`` encodes every column of object, string, category or bool dtype. Categories
    are sorted, so the layout is deterministic; encode before splitting so that train and test
    share columns. Other columns are kept in place, the dummies are appended.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame must be a pandas DataFrame, got {type(frame).__name__}.")
    if columns is None:
        columns = [
            c for c in frame.columns
            if frame[c].dtype.kind in "OSUb" or isinstance(frame[c].dtype, pd.CategoricalDtype)
            or pd.api.types.is_string_dtype(frame[c].dtype)
        ]
    columns = list(columns)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"one_hot: columns {missing} are not in the frame; valid columns: {list(frame.columns)}.")
    if not columns:
        return frame.copy()
    cats = {c: pd.CategoricalDtype(sorted(frame[c].dropna().unique().tolist(), key=str)) for c in columns}
    typed = frame.astype(cats)
    return pd.get_dummies(typed, columns=columns, drop_first=drop_first, prefix_sep=prefix_sep, dtype=float)


# --------------------------------------------------------------------------------------------
# standardization (z-scoring with training statistics)
# --------------------------------------------------------------------------------------------


class Standardizer(NamedTuple):
    """Per-feature ``mean [d]`` and ``scale [d]``; ``apply_standardizer`` maps x -> (x - mean) / scale."""

    mean: jax.Array
    scale: jax.Array


def _column_mask(d: int, columns: Any) -> np.ndarray:
    if columns is None:
        return np.ones(d, dtype=bool)
    cols = np.asarray(columns)
    if cols.dtype == bool:
        if cols.shape != (d,):
            raise ValueError(f"columns as a boolean mask must have shape ({d},), got {cols.shape}.")
        return cols
    if cols.dtype.kind not in "iu" or (cols.size and (cols.min() < 0 or cols.max() >= d)):
        raise ValueError(f"columns must be integer indices in [0, {d}) or a boolean mask of length {d}.")
    out = np.zeros(d, dtype=bool)
    out[cols] = True
    return out


def fit_standardizer(x: Any, *, columns: Any = None, mask: Any = None) -> Standardizer:
    """Mean and standard deviation (ddof=0) of the selected columns of ``x`` (others: 0 and 1).

    ``columns`` are integer indices or a boolean mask (default: all). Constant columns get scale 1.
    ``mask`` (row weights in {0, 1}) excludes padding rows.
    """
    v.check_shape("x", x, ndim=2)
    v.check_finite("x", x)
    xa = np.asarray(x, dtype=np.float64)
    n, d = xa.shape
    if n == 0:
        raise ValueError("x has no rows; cannot fit standardization statistics.")
    w = np.ones(n) if mask is None else np.asarray(mask, dtype=np.float64)
    v.check_same_length(x=xa, mask=w)
    total = w.sum()
    if total <= 0:
        raise ValueError("mask selects no rows; cannot fit standardization statistics.")
    mean = (w @ xa) / total
    var = (w @ (xa - mean) ** 2) / total
    scale = np.sqrt(var)
    scale = np.where(scale > 1e-12, scale, 1.0)
    sel = _column_mask(d, columns)
    mean = np.where(sel, mean, 0.0)
    scale = np.where(sel, scale, 1.0)
    return Standardizer(jnp.asarray(mean, jnp.float32), jnp.asarray(scale, jnp.float32))


def apply_standardizer(x: jax.Array, standardizer: Standardizer) -> jax.Array:
    """``(x - mean) / scale`` (pure, jit-able)."""
    return (x - standardizer.mean) / standardizer.scale


def standardize(train: Any, test: Any = None, *, columns: Any = None) -> tuple[Any, Any]:
    """Z-score with training statistics: returns ``(train_z, test_z)`` (``test_z`` None if no test).

    ``train``/``test`` are ``Dataset``s (their ``x`` is transformed; the train mask is honoured)
    or 2-D arrays. ``columns`` selects the columns to scale (indices or boolean mask; default all),
    e.g. only the numeric ones and not the one-hot dummies (the preprocessing of paper 004).
    """
    is_ds = isinstance(train, Dataset)
    x_tr = train.x if is_ds else train
    st = fit_standardizer(np.asarray(x_tr), columns=columns, mask=None if not is_ds else train.mask)

    def _apply(part: Any) -> Any:
        if part is None:
            return None
        if isinstance(part, Dataset):
            if part.d != st.mean.shape[0]:
                raise ValueError(f"test has {part.d} features but train has {st.mean.shape[0]}.")
            return part.replace(x=apply_standardizer(jnp.asarray(part.x, jnp.float32), st))
        v.check_shape("test", part, shape=(None, st.mean.shape[0]))
        return apply_standardizer(jnp.asarray(part, jnp.float32), st)

    return _apply(train), _apply(test)


# --------------------------------------------------------------------------------------------
# per-group standardization (paper 001, Corollary 2 / App. C.1)
# --------------------------------------------------------------------------------------------


def group_moments(x: jax.Array, s: jax.Array, num_groups: int, mask: jax.Array | None = None
                  ) -> tuple[jax.Array, jax.Array]:
    """Per-group feature means and standard deviations, ``[K, d]`` each (pure, jit-able).

    Segment sums over integer group ids; an empty group gets mean 0 and scale 1, and a constant
    feature within a group gets scale 1 (no division by zero).
    """
    w = jnp.ones(x.shape[0], x.dtype) if mask is None else jnp.asarray(mask, x.dtype)
    cnt = jax.ops.segment_sum(w, s, num_segments=num_groups)
    safe = jnp.maximum(cnt, 1.0)[:, None]
    mean = jax.ops.segment_sum(w[:, None] * x, s, num_segments=num_groups) / safe
    var = jax.ops.segment_sum(w[:, None] * (x - mean[s]) ** 2, s, num_segments=num_groups) / safe
    scale = jnp.sqrt(var)
    scale = jnp.where(scale > 1e-6, scale, 1.0)
    return mean, scale


def apply_group_standardization(x: jax.Array, s: jax.Array, mean: jax.Array, scale: jax.Array,
                                columns: jax.Array | None = None) -> jax.Array:
    """``(x - mean[s]) / scale[s]`` row by row; ``columns`` (bool ``[d]``) limits it to some columns."""
    z = (x - mean[s]) / scale[s]
    return z if columns is None else jnp.where(columns, z, x)


def group_standardize(train: Dataset, test: Dataset | None = None, *, columns: Any = None
                      ) -> tuple[Dataset, Dataset | None]:
    """Standardize each group to mean 0 and variance 1 within the group (paper 001, App. C.1).

    Paper 001, Corollary 2: output perturbation is fair when the groups' average input norms
    coincide; group-wise normalization makes them equal. Statistics come from the training rows
    of each group and are applied to the test rows of the same group (so the group attribute is
    used at prediction time). ``columns``: indices or boolean mask of the columns to transform.
    Returns ``(train_z, test_z)``.
    """
    if not isinstance(train, Dataset):
        raise ValueError("train must be a Dataset (group ids are needed); use standardize for arrays.")
    train.validate(min_group_size=1)
    sel = jnp.asarray(_column_mask(train.d, columns))
    mean, scale = group_moments(jnp.asarray(train.x, jnp.float32), jnp.asarray(train.s), train.num_groups,
                                None if train.mask is None else jnp.asarray(train.mask))

    def _apply(part: Dataset | None) -> Dataset | None:
        if part is None:
            return None
        if not isinstance(part, Dataset):
            raise ValueError("test must be a Dataset or None.")
        if part.d != train.d or part.num_groups != train.num_groups:
            raise ValueError(
                f"test has {part.d} features and {part.num_groups} groups but train has "
                f"{train.d} and {train.num_groups}; split one dataset."
            )
        v.check_group_ids(np.asarray(part.s), part.num_groups, "test.s")
        return part.replace(x=apply_group_standardization(jnp.asarray(part.x, jnp.float32),
                                                          jnp.asarray(part.s), mean, scale, sel))

    return _apply(train), _apply(test)


# --------------------------------------------------------------------------------------------
# row-norm bounding (sensitivity)
# --------------------------------------------------------------------------------------------


def bound_row_norms(x: Any, radius: Any) -> Any:
    """Scale each row with ``||x_i||_2 > radius`` down onto the sphere of that radius.

    ``x_i <- x_i * min(1, radius / ||x_i||)``: a per-row map that needs no statistic of the data,
    so it is free under DP and bounds each row's contribution (e.g. paper 000's Law school
    preprocessing, "normalize all features to lie in an l2 ball", radius 1). Dividing all rows by
    the largest norm would be data-dependent and is not offered. ``radius`` may be traced;
    accepts an array ``[n, d]`` or a ``Dataset`` (whose ``x`` is bounded).
    """
    if isinstance(x, Dataset):
        return x.replace(x=bound_row_norms(x.x, radius))
    if not isinstance(radius, jax.core.Tracer):
        v.check_positive("radius", radius)
    if not isinstance(x, jax.core.Tracer):
        v.check_shape("x", x, ndim=2)
    xa = jnp.asarray(x)
    norms = jnp.linalg.norm(xa, axis=1, keepdims=True)
    factor = jnp.minimum(1.0, jnp.asarray(radius, xa.dtype) / jnp.maximum(norms, jnp.finfo(xa.dtype).tiny))
    return xa * factor


# --------------------------------------------------------------------------------------------
# group-size subsampling (paper 001, App. C.2, Fig. 11)
# --------------------------------------------------------------------------------------------


def subsample_group_ratio(
    key: jax.Array,
    data: Dataset,
    ratio: float,
    *,
    reference: int = 0,
    other: int = 1,
    compact: bool = True,
) -> Dataset:
    """Subsample one group so that ``n_other / n_reference`` equals ``ratio`` (paper 001, Fig. 11).

    Only one group shrinks: if ``ratio < n_other / n_reference`` the ``other`` group keeps
    ``round(ratio * n_reference)`` random rows, otherwise the ``reference`` group keeps
    ``round(n_other / ratio)``; rows of other groups are untouched. With ``compact=True`` the
    dropped rows are removed; with ``compact=False`` the shape is kept and dropped rows get
    ``mask = 0``. Which rows are kept is drawn with ``key`` (uniformly, without replacement).
    """
    v.check_threefry_key(key)
    if not isinstance(data, Dataset):
        raise ValueError(f"data must be a Dataset, got {type(data).__name__}.")
    r = v.as_float("ratio", ratio)
    v.check_positive("ratio", r)
    reference = v.check_int("reference", reference, minimum=0)
    other = v.check_int("other", other, minimum=0)
    if reference == other or max(reference, other) >= data.num_groups:
        raise ValueError(
            f"reference and other must be two different groups in [0, {data.num_groups}), "
            f"got {reference} and {other}."
        )
    sizes = data.group_sizes()
    n_ref, n_oth = int(round(sizes[reference])), int(round(sizes[other]))
    if n_ref == 0 or n_oth == 0:
        raise ValueError(f"group sizes are {sizes.astype(int).tolist()}; groups {reference} and {other} must be non-empty.")
    if r <= n_oth / n_ref:
        shrink, keep = other, int(round(r * n_ref))
    else:
        shrink, keep = reference, int(round(n_oth / r))
    if keep < 1:
        raise ValueError(f"ratio={r} would leave group {shrink} empty; use a larger ratio.")
    s = np.asarray(data.s)
    alive = np.ones(data.n, bool) if data.mask is None else np.asarray(data.mask) > 0
    cand = np.flatnonzero((s == shrink) & alive)
    chosen = np.asarray(jax.random.permutation(key, cand.shape[0]))[:keep]
    drop = np.ones(cand.shape[0], bool)
    drop[chosen] = False
    keep_rows = alive.copy()
    keep_rows[cand[drop]] = False
    if compact:
        return data.take(np.flatnonzero(keep_rows))
    return data.replace(mask=jnp.asarray(keep_rows, jnp.float32))
