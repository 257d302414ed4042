"""Neighbouring relations and sensitivities that carry one value per relation.

One type names the neighbouring relation everywhere in the kit: dp-accounting's
:class:`dp_accounting.NeighboringRelation`. Configs may spell it as a string (``"add_remove"``,
``"replace_one"``); :func:`as_relation` turns either form into the enum and refuses anything else
(``"swap"``, a retired spelling, is refused with a pointer).

Records name one of three relations (:data:`RELATION_NAMES`, :func:`relation_name`):

* ``"add_remove"``: one record added or removed (any group);
* ``"replace_one"``: one record replaced by any other record, which may belong to another group
  (so group sizes may change by one in two groups);
* ``"replace_one_within_group"``: one record replaced by another record *of the same group*:
  features and label change, group membership and hence every group size stay fixed. This is what
  a mechanism with exact, public group sizes covers (budget tailoring's and the stratified means'
  defaults); a record moving to another group changes those sizes, which the release shows
  exactly, so such a pair is not covered at any finite epsilon (:func:`covers`).

Within a group the accounting and sensitivities are replace-one's: :func:`as_relation` maps
``"replace_one_within_group"`` to ``NeighboringRelation.REPLACE_ONE`` (dp-accounting has no
narrower relation), so ``replace_factor``, ``Sensitivity.under`` and the accountants treat it as
replace-one; only its record name (:func:`relation_name`) differs.

A :class:`Sensitivity` holds a query's sensitivity under both relations, so a mechanism asks for the
one its accounting uses (``sens.under(relation)``) instead of each algorithm multiplying by its own
factor. The constructors below are the only place the kit states these factors:

======================  ===================  =====================
query                   add/remove one       replace one
======================  ===================  =====================
sum of rows clipped     ``C``                ``2 C``
to L2 norm ``C``
sum of scalars in       ``max(|a|, |b|)``    ``b - a``
``[a, b]``
one count               ``1``                ``1``
histogram (L2 / L1)     ``1`` / ``1``        ``sqrt(2)`` / ``2``
Gram ``sum x x^T``,     ``u^2``              ``sqrt(2) u^2``
``||x|| <= u`` (Frob.)
======================  ===================  =====================

Privacy: these are worst-case sensitivities of the queries named, over the relation named; they
assume each individual contributes one row. Under ``"replace_one_within_group"`` the replace-one
column applies (an upper bound: e.g. a count of a group does not change at all). A query whose rows were not clipped has infinite
sensitivity (``clip_norm=inf``), which only a noiseless path may use.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from dp_accounting import NeighboringRelation

__all__ = [
    "NeighboringRelation",
    "ADD_REMOVE",
    "REPLACE_ONE",
    "REPLACE_ONE_WITHIN_GROUP",
    "RELATION_NAMES",
    "Sensitivity",
    "as_relation",
    "relation_name",
    "within_group",
    "covers",
    "replace_factor",
    "clipped_sum_sensitivity",
    "bounded_sum_sensitivity",
    "count_sensitivity",
    "histogram_sensitivity",
    "gram_sensitivity",
]

ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE_ONE = NeighboringRelation.REPLACE_ONE
#: Record name of replace-one restricted to the same group (no dp-accounting enum: accounted as
#: ``REPLACE_ONE``).
REPLACE_ONE_WITHIN_GROUP = "replace_one_within_group"
#: Every relation name a record may carry.
RELATION_NAMES = ("add_remove", "replace_one", REPLACE_ONE_WITHIN_GROUP)

_NAMES = {ADD_REMOVE: "add_remove", REPLACE_ONE: "replace_one"}
_BY_NAME = {name: rel for rel, name in _NAMES.items()}
_ALIASES = {"add_or_remove_one": ADD_REMOVE, "add_remove_one": ADD_REMOVE, "replace": REPLACE_ONE,
            "substitution": REPLACE_ONE}


def as_relation(relation: Any, name: str = "relation") -> NeighboringRelation:
    """``relation`` (a :class:`NeighboringRelation` or its name) as the enum.

    Accepts ``"add_remove"``/``"replace_one"`` (and dp-accounting's enum names, any case) and
    ``"replace_one_within_group"``, which maps to ``REPLACE_ONE`` (its accounting and
    sensitivities; the enum drops the "within group" qualifier, so records take their name from
    :func:`relation_name`). ``REPLACE_SPECIAL`` and ``"swap"`` are refused: no mechanism of the kit
    is accounted for them.
    """
    if isinstance(relation, NeighboringRelation):
        if relation not in _NAMES:
            raise ValueError(f"{name}={relation!r} is not supported; use add_remove or replace_one.")
        return relation
    if isinstance(relation, str):
        key = relation.strip().lower()
        if key == "swap":
            raise ValueError(f"{name}='swap' was retired; one record replaced by another of the same "
                             f"group is spelled '{REPLACE_ONE_WITHIN_GROUP}'.")
        if key == REPLACE_ONE_WITHIN_GROUP:
            return REPLACE_ONE
        if key in _BY_NAME:
            return _BY_NAME[key]
        if key in _ALIASES:
            return _ALIASES[key]
    raise ValueError(f"{name} must be one of {', '.join(RELATION_NAMES)} (or a "
                     f"dp_accounting.NeighboringRelation), got {relation!r}.")


def relation_name(relation: Any, name: str = "relation") -> str:
    """The name the kit's records use: ``"add_remove"``, ``"replace_one"`` or
    ``"replace_one_within_group"`` (the last only from that name: the enum has no such value)."""
    rel = as_relation(relation, name)
    if isinstance(relation, str) and relation.strip().lower() == REPLACE_ONE_WITHIN_GROUP:
        return REPLACE_ONE_WITHIN_GROUP
    return _NAMES[rel]


def within_group(relation: Any) -> bool:
    """Whether ``relation`` is ``"replace_one_within_group"`` (group sizes fixed between neighbours)."""
    return relation_name(relation) == REPLACE_ONE_WITHIN_GROUP


def covers(recorded: Any, pair: Any) -> bool:
    """Whether a spend recorded under ``recorded`` covers neighbours related by ``pair``.

    Each relation covers itself; ``"replace_one"`` also covers ``"replace_one_within_group"`` (a
    same-group replacement is a replacement). ``"replace_one_within_group"`` covers no other
    relation: a record moved to another group changes the group sizes, which a mechanism with
    exact public sizes releases, so its epsilon for that pair is infinite. Add/remove and
    replace-one do not cover each other at the recorded epsilon (a replacement is a removal and an
    addition: group privacy of size 2).
    """
    rec, par = relation_name(recorded, "recorded"), relation_name(pair, "pair")
    return rec == par or (rec == "replace_one" and par == REPLACE_ONE_WITHIN_GROUP)


def replace_factor(relation: Any) -> float:
    """Sensitivity of a clipped sum under ``relation`` over its add/remove sensitivity: 1 or 2."""
    return 1.0 if as_relation(relation) is ADD_REMOVE else 2.0


def _nonneg(name: str, value: Any, *, allow_inf: bool = True) -> None:
    arr = np.asarray(value, dtype=np.float64)
    if np.any(np.isnan(arr)) or np.any(arr < 0) or (not allow_inf and np.any(np.isinf(arr))):
        raise ValueError(f"{name} must be >= 0{'' if allow_inf else ' and finite'}, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class Sensitivity:
    """A query's sensitivity under each neighbouring relation (floats or arrays of one shape)."""

    add_remove: Any
    replace_one: Any

    def __post_init__(self) -> None:
        _nonneg("Sensitivity.add_remove", self.add_remove)
        _nonneg("Sensitivity.replace_one", self.replace_one)

    def under(self, relation: Any) -> Any:
        """The sensitivity under ``relation``."""
        return self.add_remove if as_relation(relation) is ADD_REMOVE else self.replace_one

    def scaled(self, factor: Any) -> "Sensitivity":
        """The sensitivity of ``factor`` times the query (``factor >= 0``)."""
        _nonneg("factor", factor)
        return Sensitivity(np.multiply(self.add_remove, factor), np.multiply(self.replace_one, factor))


def clipped_sum_sensitivity(clip_norm: Any) -> Sensitivity:
    """Sum of rows clipped to L2 norm ``clip_norm``: ``C`` (add/remove), ``2C`` (replace one).
    ``clip_norm=inf`` (no clipping) gives infinite sensitivity."""
    _nonneg("clip_norm", clip_norm)
    c = np.asarray(clip_norm, dtype=np.float64)
    return Sensitivity(c if c.ndim else float(c), 2.0 * c if c.ndim else 2.0 * float(c))


def bounded_sum_sensitivity(lower: Any, upper: Any) -> Sensitivity:
    """Sum of scalars in ``[lower, upper]``: ``max(|lower|, |upper|)`` (add/remove),
    ``upper - lower`` (replace one)."""
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    if np.any(~np.isfinite(lo)) or np.any(~np.isfinite(hi)) or np.any(hi < lo):
        raise ValueError(f"need finite lower <= upper, got lower={lower!r}, upper={upper!r}.")
    add = np.maximum(np.abs(lo), np.abs(hi))
    rep = hi - lo
    return Sensitivity(add if add.ndim else float(add), rep if rep.ndim else float(rep))


def count_sensitivity() -> Sensitivity:
    """One count: 1 under either relation (a replaced record moves this count by at most 1)."""
    return Sensitivity(1.0, 1.0)


def histogram_sensitivity(norm: str = "l2") -> Sensitivity:
    """A histogram of counts (one record in one cell): 1 under add/remove; under replace one, one
    cell -1 and another +1, so ``sqrt(2)`` in L2 and ``2`` in L1."""
    if norm not in ("l1", "l2"):
        raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}.")
    return Sensitivity(1.0, math.sqrt(2.0) if norm == "l2" else 2.0)


def gram_sensitivity(row_norm_bound: Any) -> Sensitivity:
    """Frobenius sensitivity of ``sum_i x_i x_i^T`` with ``||x_i|| <= u``: ``u^2`` (add/remove);
    ``sqrt(2) u^2`` (replace one, since ``<x x^T, x' x'^T> = (x . x')^2 >= 0``)."""
    _nonneg("row_norm_bound", row_norm_bound, allow_inf=False)
    u2 = np.square(np.asarray(row_norm_bound, dtype=np.float64))
    return Sensitivity(u2 if u2.ndim else float(u2),
                       math.sqrt(2.0) * u2 if u2.ndim else math.sqrt(2.0) * float(u2))
