"""Train/validation/test splits of the public tradeoff study, one per replicate, and its data input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def _as_dataset(data, target, group, features):
    from dpfair_jax.data.dataset import Dataset
    from dpfair_jax.data.frame import dataset_from_frame

    if isinstance(data, pd.DataFrame):
        if target is None or group is None:
            raise ValueError("a DataFrame needs target= and group= (column names); features= defaults "
                             "to every other column.")
        return dataset_from_frame(data, target=target, group=group, features=features)
    if not isinstance(data, Dataset):
        raise ValueError(f"data must be a dpfair_jax.data.Dataset or a pandas DataFrame, got "
                         f"{type(data).__name__}.")
    if target is not None or group is not None or features is not None:
        raise ValueError("target=/group=/features= name DataFrame columns; a Dataset has them already.")
    if data.mask is not None:
        raise ValueError("data has a mask (padding rows); drop them first.")
    data.validate()
    if data.num_classes < 2:
        raise ValueError("the tradeoff study needs a classification target (num_classes >= 2).")
    return data


def _permutation_splits(n: int, replicates: int, val_size: float, test_size: float,
                        seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Sorted (train, val, test) row indices of each replicate: replicate ``r`` permutes
    ``range(n)`` with NumPy's ``default_rng([seed, 1009, r])``; its first ``ceil(test_size * n)``
    rows are the test split, the next ``ceil(val_size * n)`` the validation split, the rest the
    training split. A function of ``(n, replicates, val_size, test_size, seed)`` only."""
    n_test, n_val = math.ceil(test_size * n), math.ceil(val_size * n)
    if n_test < 1 or n_val < 1 or n - n_test - n_val < 1:
        raise ValueError(f"val_size={val_size:g} and test_size={test_size:g} of n={n} rows leave an empty "
                         f"split ({n_val} validation, {n_test} test rows); use more rows or other sizes.")
    out = []
    for r in range(replicates):
        perm = np.random.default_rng([seed, 1009, r]).permutation(n)
        te, va, tr = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
        out.append((np.sort(tr), np.sort(va), np.sort(te)))
    return out


def _stratified_splits(y, s, num_classes: int, replicates: int, val_size: float, test_size: float,
                       seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The former stratified splits (by group and label): data-dependent, see :func:`replicate_splits`."""
    from dpfair_jax.data import preprocessing as pp

    strata = s * max(num_classes, 2) + y
    out = []
    for r in range(replicates):
        rest, te = pp.split_indices(len(y), test_size=test_size, seed=seed * 1009 + r, stratify=strata)
        tr_i, va_i = pp.split_indices(len(rest), test_size=val_size / (1.0 - test_size),
                                      seed=seed * 1009 + r + 500_000, stratify=strata[rest])
        out.append((rest[tr_i], rest[va_i], te))
    return out


def replicate_splits(data, *, replicates: int = 3, val_size: float = 0.15, test_size: float = 0.2,
                     standardize: bool = True, seed: int = 0, max_rows: int | None = None,
                     stratify: bool = False) -> dict:
    """The train/validation/test splits of :func:`tradeoff_frontier_study`, one per replicate.

    Replicate ``r`` (default): a uniform random permutation of the ``n`` rows from
    ``default_rng([seed, 1009, r])``, cut into ``ceil(test_size * n)`` test rows,
    ``ceil(val_size * n)`` validation rows and the rest for training; numeric columns (not
    0/1-valued) are z-scored with the replicate's training moments (``standardize``).
    ``max_rows`` first keeps a uniform random subset of the rows. Every split must hold every
    group: otherwise a ``ValueError`` names the replicate, the split and the missing groups.
    ``stratify=True`` splits each (group, label) stratum separately (the former default; not
    used by the study). Returns ``{"train" | "val" | "test": (x [R, n, d], y [R, n], s [R, n])}``
    as NumPy arrays.

    Privacy: by default which rows go to which split is a function of ``seed`` and ``n`` only, so
    changing one record's label, group or features moves no row between splits. Three things read
    the data and are not covered by a study's spend: (1) the group check, made before any compute
    as with any input check: a study that runs reveals one bit (every split holds every group), a
    refused one aborts and its message tells which split lacks which groups; (2) the z-scoring moments, computed from the
    training rows without noise; (3) ``stratify=True``, whose split depends on every record's group
    and label (one changed label moves other rows between splits): a data-dependent preprocessing
    step the spend does not cover.
    """
    from dpfair_jax import _validation as V

    ds = data
    V.check_int("replicates", replicates, minimum=1)
    for name, val in (("val_size", val_size), ("test_size", test_size)):
        if not 0.0 < float(val) < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {val!r}.")
    x = np.asarray(ds.x, np.float64)
    y = np.asarray(ds.y).astype(np.int32)
    s = np.asarray(ds.s).astype(np.int32)
    if max_rows is not None and max_rows < len(y):
        keep = np.sort(np.random.default_rng([seed, 17]).choice(len(y), size=int(max_rows), replace=False))
        x, y, s = x[keep], y[keep], s[keep]
    if stratify:
        index = _stratified_splits(y, s, ds.num_classes, replicates, float(val_size), float(test_size), seed)
    else:
        index = _permutation_splits(len(y), replicates, float(val_size), float(test_size), seed)
    for r, idx in enumerate(index):  # the group check: reads the data (docstring), before any compute
        for name, rows in zip(("train", "val", "test"), idx):
            missing = sorted(set(range(ds.num_groups)) - set(np.unique(s[rows]).tolist()))
            if missing:
                fix = "smaller val_size/test_size" if name == "train" else f"a larger {name}_size"
                raise ValueError(f"replicate {r}: the {name} split ({len(rows)} rows) has no rows of group(s) "
                                 f"{missing}; use more data, merge small groups, or {fix}.")
    scaled = ~np.all((x == 0) | (x == 1), axis=0) if standardize else np.zeros(x.shape[1], bool)
    parts: dict[str, list] = {"train": [], "val": [], "test": []}
    for tr, va, te in index:
        xr = x
        if scaled.any():
            mu = x[tr].mean(axis=0)
            sd = x[tr].std(axis=0)
            sd = np.where(sd > 1e-12, sd, 1.0)
            xr = np.where(scaled, (x - mu) / sd, x)
        for name, idx in (("train", tr), ("val", va), ("test", te)):
            parts[name].append((xr[idx], y[idx], s[idx]))
    out = {}
    for name, lst in parts.items():
        sizes = {len(p[1]) for p in lst}
        if len(sizes) != 1:
            raise ValueError(f"the {name} splits of the replicates differ in size {sorted(sizes)}.")
        out[name] = tuple(np.stack([p[j] for p in lst]) for j in range(3))
    return out
