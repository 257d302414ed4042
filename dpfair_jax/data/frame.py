"""Pandas frames to :class:`~dpfair_jax.data.dataset.Dataset`: :class:`FrameEncoder` (the columns,
groups and labels fitted on one frame and applied to another, e.g. a held-out test frame) and
:func:`dataset_from_frame` (fit and transform in one call), with refusals of ID-like and
high-cardinality columns before any compute."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset, DatasetInfo, make_dataset

__all__ = ["FrameEncoder", "dataset_from_frame"]


def _frame_columns(frame, names, what: str) -> None:
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} column(s) {missing} not in the DataFrame (columns: {list(frame.columns)}).")


def _is_numeric(values) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values))


def _sorted_values(values) -> list:
    """Distinct values in order: numerically for numeric columns, else as sorted strings."""
    uniq = values.dropna().unique()
    if _is_numeric(values):
        return sorted(uniq.tolist())
    return sorted({str(u) for u in uniq})


def _value_names(values: list) -> tuple[str, ...]:
    """Names of distinct values; integral floats print as integers (``1.0`` -> ``"1"``)."""
    return tuple(str(int(u)) if isinstance(u, float) and float(u).is_integer() else str(u) for u in values)


def _category_limit(n: int, max_categories: int, max_category_fraction: float) -> int:
    """Most distinct values a one-hot encoded column may have: ``max_categories``, and at most
    ``max(10, max_category_fraction * n)`` (ID-like columns; small frames keep 10)."""
    return min(int(max_categories), max(10, int(max_category_fraction * n)))


@dataclasses.dataclass(frozen=True)
class FrameEncoder:
    """Column encoding fitted on one DataFrame and applied, identically, to others.

    ``FrameEncoder.fit(train_df, target=..., group=...)`` fixes the feature columns, the one-hot
    categories of every non-numeric feature, the standardization statistics (``standardize=True``),
    the group ids (``info.group_names``) and the label map; ``encoder.transform(test_df)`` gives a
    ``Dataset`` with exactly the same columns in the same order. :func:`dataset_from_frame` is
    ``FrameEncoder.fit(frame, ...).transform(frame)``.

    Unseen values in ``transform``: a feature category the fit did not see is an error naming the
    column and the values (``unseen="error"``, the default), or an all-zero one-hot row
    (``unseen="zeros"``); an unseen group or label value is always an error.

    Column checks in ``fit`` (errors name the column and the fix):

    - a non-numeric feature with more distinct values than ``max_categories`` (default 50) or than
      ``max(10, max_category_fraction * rows)`` (fraction 0.5) is refused: an
      ID column (1828 distinct strings in 1830 rows) would become 1828 one-hot columns. Drop it
      (``features=[...]``), bin or merge its rare values, or list it in ``high_cardinality`` to
      encode it anyway.
    - a group column of non-integral floats is refused (it would make a group per value): bin it,
      e.g. ``pd.cut``. A group column with more than ``max_groups`` (default 20) distinct values is
      refused too: merge values, or raise ``max_groups``.
    - an integer feature with a distinct value in every row (a row ID) is kept but warned about.

    Privacy: the fitted statistics (category sets, group and label values, means and standard
    deviations) are read from the data without noise, so they are *not* differentially private
    and a study that treats the fitting frame as private must not fit them on it. Pass public
    values instead: ``categories={col: [...]}`` (then a value outside them follows ``unseen``),
    ``groups=[...]``, ``labels=[...]`` and ``scale={col: (mean, sd)}``; with all of them given and
    ``unseen="zeros"`` (or ``standardize=False``) nothing about the rows is kept beyond which
    columns are numeric.
    """

    target: str
    group: str
    features: tuple[str, ...]
    categories: dict[str, tuple[str, ...]]      # non-numeric features -> categories (one-hot order)
    scale: dict[str, tuple[float, float]]        # numeric features -> (mean, sd) applied in transform
    group_values: tuple                          # group value of each group id
    label_values: tuple                          # target value of each class id (empty: as given)
    num_classes: int                             # 0: regression
    feature_names: tuple[str, ...]
    group_names: tuple[str, ...]
    label_names: tuple[str, ...]
    unseen: str = "error"
    source: str = ""

    @classmethod
    def fit(
        cls,
        frame,
        *,
        target: str,
        group: str,
        features: list[str] | None = None,
        positive: Any = None,
        num_classes: int | None = None,
        standardize: bool = False,
        categories: dict[str, Any] | None = None,
        groups: list | None = None,
        labels: list | None = None,
        scale: dict[str, tuple[float, float]] | None = None,
        unseen: str = "error",
        max_categories: int = 50,
        max_category_fraction: float = 0.5,
        high_cardinality: tuple[str, ...] | list[str] = (),
        max_groups: int = 20,
        source: str = "",
    ) -> "FrameEncoder":
        """Fit the encoding on ``frame`` (see the class docstring; the arguments of
        :func:`dataset_from_frame` plus ``standardize`` (z-score the non-binary numeric features),
        the public ``categories``/``groups``/``labels``/``scale``, ``unseen`` and the limits)."""
        features, categories, scale, high_cardinality = _check_fit_args(
            frame, target, group, features, categories, scale, high_cardinality, unseen, max_categories,
            max_groups, max_category_fraction)
        limit = _category_limit(len(frame), max_categories, max_category_fraction)
        cats: dict[str, tuple[str, ...]] = {}
        sc: dict[str, tuple[float, float]] = {}
        names: list[str] = []
        for col in features:
            values = frame[col]
            if col in categories or not _is_numeric(values):
                cats[col] = _fit_categories(col, values, categories, high_cardinality, limit, max_categories,
                                            max_category_fraction)
                names.extend(f"{col}={c}" for c in cats[col])
                continue
            names.append(str(col))
            fitted = _fit_numeric(col, values, scale, standardize)
            if fitted is not None:
                sc[col] = fitted
        g_values = _group_values(frame[group], group, groups, max_groups)
        y_values, k, label_names = _label_map(frame[target], target, positive, num_classes, labels)
        return cls(target=target, group=group, features=tuple(features), categories=cats, scale=sc,
                   group_values=tuple(g_values), label_values=tuple(y_values), num_classes=k,
                   feature_names=tuple(names), group_names=_value_names(list(g_values)),
                   label_names=label_names, unseen=unseen, source=source)

    def transform(self, frame, *, min_group_size: int = 1, source: str | None = None) -> Dataset:
        """A validated ``Dataset`` of ``frame`` with the fitted columns, groups and labels."""
        import pandas as pd

        if not isinstance(frame, pd.DataFrame):
            raise ValueError(f"frame must be a pandas DataFrame, got {type(frame).__name__}.")
        _frame_columns(frame, [self.target, self.group] + list(self.features), "fitted")
        _check_missing(frame, [self.target, self.group] + list(self.features))
        blocks = []
        for col in self.features:
            values = frame[col]
            if col in self.categories:
                cats = np.asarray(self.categories[col], dtype=object)
                text = values.astype(str).to_numpy(dtype=object)
                onehot = (text[:, None] == cats[None, :]).astype(np.float64)
                unseen = sorted(set(text[onehot.sum(axis=1) == 0].tolist()))
                if unseen and self.unseen == "error":
                    raise ValueError(
                        f"column {col!r} has value(s) {unseen[:5]} the encoder was not fitted on "
                        f"(categories {list(cats)[:10]}); pass unseen='zeros' to FrameEncoder.fit for "
                        "an all-zero one-hot row, or categories={col: [...]} with every value.")
                blocks.append(onehot)
                continue
            if not _is_numeric(values):
                raise ValueError(f"column {col!r} was numeric when the encoder was fitted, now {values.dtype}.")
            x = values.to_numpy(np.float64)
            if col in self.scale:
                mu, sd = self.scale[col]
                x = (x - mu) / sd
            blocks.append(x[:, None])
        x = np.concatenate(blocks, axis=1)
        if not np.all(np.isfinite(x)):
            bad = [self.feature_names[j] for j in np.nonzero(~np.all(np.isfinite(x), axis=0))[0]]
            raise ValueError(f"feature column(s) {bad[:5]} hold non-finite values.")
        s = _lookup(frame[self.group], self.group_values, f"group column {self.group!r}")
        t = frame[self.target]
        if self.num_classes == 0:
            y = t.to_numpy(np.float32)
        elif self.label_values:
            y = _lookup(t, self.label_values, f"target column {self.target!r}")
        else:  # integer class ids kept as they are
            y = t.to_numpy(np.int32)
        info = DatasetInfo(feature_names=self.feature_names, group_names=self.group_names,
                           label_names=self.label_names,
                           task="classification" if self.num_classes else "regression",
                           source=self.source if source is None else source)
        return make_dataset(x, y, s, num_groups=len(self.group_values), num_classes=self.num_classes,
                            info=info, min_group_size=min_group_size)


def _check_missing(frame, columns) -> None:
    for col in columns:
        if frame[col].isna().any():
            raise ValueError(f"column {col!r} has {int(frame[col].isna().sum())} missing value(s); "
                             "drop or impute them first.")


def _lookup(values, table: tuple, what: str) -> np.ndarray:
    """Index of each value in ``table`` (numbers matched as numbers, e.g. ``1`` and ``1.0``, other
    values as strings); an unseen value is an error."""
    numeric = _is_numeric(values) and all(isinstance(u, (int, float, np.number)) for u in table)
    as_key = (lambda u: repr(float(u))) if numeric else str
    keys = np.asarray([as_key(u) for u in table], dtype=object)
    order = np.argsort(keys)
    text = np.asarray([as_key(u) for u in values.to_numpy()], dtype=object)
    pos = np.clip(np.searchsorted(keys[order], text), 0, len(keys) - 1)
    found = keys[order][pos] == text
    if not np.all(found):
        unseen = sorted(set(text[~found].tolist()))
        raise ValueError(f"{what} has value(s) {unseen[:5]} the encoder was not fitted on "
                         f"(known: {[str(u) for u in table][:10]}).")
    return order[pos].astype(np.int32)


def _group_values(values, col: str, groups: list | None, max_groups: int) -> list:
    """The group value of each group id, after the cardinality checks."""
    import pandas as pd

    if groups is not None:
        return list(groups)
    k = int(values.nunique())
    if pd.api.types.is_float_dtype(values) and not np.all(np.mod(values.to_numpy(np.float64), 1) == 0):
        raise ValueError(
            f"group column {col!r} holds non-integral floats ({k} distinct values); it would make a "
            f"group per value. Bin it first, e.g. frame['{col}_bin'] = pd.cut(frame[{col!r}], bins=2) "
            f"(or pd.qcut for quantiles, with public cut points where the data is private), and pass "
            f"group='{col}_bin'.")
    if k > max_groups:
        raise ValueError(
            f"group column {col!r} has {k} distinct values (max_groups={max_groups}); each would be a "
            f"group. Merge rare values or bin it (pd.cut), or pass max_groups={k} to dataset_from_frame or "
            "FrameEncoder.fit to keep them all.")
    out = _sorted_values(values)
    if pd.api.types.is_float_dtype(values):
        out = [float(u) for u in out]
    return out


def _label_map(t, target: str, positive: Any, num_classes: int | None,
               labels: list | None) -> tuple[list, int, tuple[str, ...]]:
    """``(label_values, num_classes, label_names)``: empty values keep integer ids as given."""
    import pandas as pd

    uniq = list(labels) if labels is not None else sorted(t.unique(), key=lambda u: (str(type(u)), u))
    if num_classes == 0 or (num_classes is None and pd.api.types.is_float_dtype(t) and len(uniq) > 2):
        return [], 0, ()
    if len(uniq) == 2 and num_classes in (None, 2):
        pos = uniq[1] if positive is None else positive
        if pos not in uniq:
            raise ValueError(f"positive={positive!r} is not a value of {target!r} ({uniq}).")
        neg = [u for u in uniq if u != pos][0]
        return [neg, pos], 2, (str(neg), str(pos))
    if labels is not None or not pd.api.types.is_integer_dtype(t):
        return uniq, int(num_classes) if num_classes is not None else len(uniq), tuple(str(u) for u in uniq)
    k = int(num_classes) if num_classes is not None else int(t.max()) + 1
    return [], k, ()


def dataset_from_frame(
    frame,
    *,
    target: str,
    group: str,
    features: list[str] | None = None,
    positive: Any = None,
    num_classes: int | None = None,
    source: str = "",
    min_group_size: int = 1,
    **encoder_options: Any,
) -> Dataset:
    """A validated ``Dataset`` from a pandas DataFrame with named target, group and features.

    Numeric feature columns are kept as they are; other columns are one-hot encoded with names
    ``"column=value"`` (categories in sorted order). ``group`` values become group ids in sorted
    order (``info.group_names``). A target with two values becomes 0/1 (``positive`` names the value
    mapped to 1; default: the larger one in sorted order), other integer targets stay class ids, and
    float targets are a regression (``num_classes=0``). Missing values are an error naming the
    column. ``features`` defaults to every column but the target and the group. ID-like and
    high-cardinality categorical features and float or many-valued group columns are refused with
    the fix named (:class:`FrameEncoder`; ``encoder_options`` go to :meth:`FrameEncoder.fit`).

    This is ``FrameEncoder.fit(frame, ...).transform(frame)``: to encode a separate test frame with
    the same columns, fit a :class:`FrameEncoder` on the training frame and transform both.
    """
    enc = FrameEncoder.fit(frame, target=target, group=group, features=features, positive=positive,
                           num_classes=num_classes, source=source, **encoder_options)
    return enc.transform(frame, min_group_size=min_group_size)


def _check_fit_args(frame, target: str, group: str, features: list[str] | None, categories: dict | None,
                    scale: dict | None, high_cardinality: Any, unseen: str, max_categories: int, max_groups: int,
                    max_category_fraction: float) -> tuple[list[str], dict, dict, tuple[str, ...]]:
    """``FrameEncoder.fit``'s arguments checked against ``frame`` (before any compute):
    ``(features, categories, scale, high_cardinality)`` with the defaults filled in."""
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame must be a pandas DataFrame, got {type(frame).__name__}.")
    v.check_choice("unseen", unseen, ("error", "zeros"))
    v.check_int("max_categories", max_categories, minimum=1)
    v.check_int("max_groups", max_groups, minimum=1)
    if not 0 < max_category_fraction <= 1:
        raise ValueError(f"max_category_fraction must be in (0, 1], got {max_category_fraction!r}.")
    _frame_columns(frame, [target], "target")
    _frame_columns(frame, [group], "group")
    features = [c for c in frame.columns if c not in (target, group)] if features is None else list(features)
    _frame_columns(frame, features, "feature")
    if not features:
        raise ValueError("no feature columns: pass features=[...].")
    if target in features or group in features:
        raise ValueError("the target and the group column must not be listed as features.")
    categories, scale = dict(categories or {}), dict(scale or {})
    high_cardinality = (high_cardinality,) if isinstance(high_cardinality, str) else tuple(high_cardinality)
    for what, names in (("categories", categories), ("scale", scale), ("high_cardinality", high_cardinality)):
        stray = [c for c in names if c not in features]
        if stray:
            raise ValueError(f"{what} names column(s) {stray} that are not features ({features}).")
    _check_missing(frame, [target, group] + features)
    return features, categories, scale, high_cardinality


def _fit_categories(col: str, values, categories: dict, high_cardinality: tuple[str, ...], limit: int,
                    max_categories: int, max_category_fraction: float) -> tuple[str, ...]:
    """The one-hot categories of a non-numeric (or declared categorical) feature: the declared ones,
    else its sorted distinct values, refusing more than ``limit`` unless listed in ``high_cardinality``."""
    if col in categories:
        return tuple(str(c) for c in categories[col])
    n = len(values)
    k = int(values.astype(str).nunique())
    if k > limit and col not in high_cardinality:
        idlike = " and looks like an ID" if k >= 0.9 * n else ""
        raise ValueError(
            f"feature column {col!r} has {k} distinct values in {n} rows{idlike} "
            f"(limit {limit}: max_categories={max_categories}, "
            f"max_category_fraction={max_category_fraction}); one-hot encoding would add "
            f"{k} columns. Drop it (features=[...] without it), bin or merge its rare "
            f"values, or pass high_cardinality=[{col!r}] to dataset_from_frame or "
            "FrameEncoder.fit to encode it anyway.")
    return tuple(_sorted_values(values.astype(str)))


def _fit_numeric(col: str, values, scale: dict, standardize: bool) -> tuple[float, float] | None:
    """The ``(mean, sd)`` of a numeric feature: the declared ``scale[col]``, else its own statistics
    when ``standardize`` and it is not a 0/1 flag, else ``None`` (left raw). Warns on an ID-like column."""
    import pandas as pd

    n = len(values)
    if (pd.api.types.is_integer_dtype(values) and n > 20 and values.nunique() == n):
        warnings.warn(f"feature column {col!r} holds a distinct integer in every row, like a row "
                      "ID; drop it (features=[...]) unless it is a real measurement.", stacklevel=4)
    if col in scale:
        mu, sd = (float(t) for t in scale[col])
        if not (np.isfinite(mu) and np.isfinite(sd) and sd > 0):
            raise ValueError(f"scale[{col!r}] must be a finite (mean, sd > 0), got {scale[col]!r}.")
        return mu, sd
    if standardize:
        x = values.to_numpy(np.float64)
        if not np.all((x == 0) | (x == 1)):  # 0/1 flags stay 0/1
            sd = float(x.std())
            return float(x.mean()), sd if sd > 0 else 1.0
    return None
