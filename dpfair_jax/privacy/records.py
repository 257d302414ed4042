"""What a run spends: :class:`PrivacySpend` (JSON-serialisable; a static pytree, so fit results carry
it through ``jit``/``vmap``) (the ZcdpLedger of named zCDP charges is in :mod:`~dpfair_jax.privacy.zcdp`).
(Re-exported by :mod:`dpfair_jax.privacy.accounting`.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import dp_accounting
import jax
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import relations as _relations

ACCOUNTANTS = ("rdp", "pld")
SAMPLINGS = ("poisson", "without_replacement")
RELATIONS = _relations.RELATION_NAMES  # ("add_remove", "replace_one", "replace_one_within_group")
UNITS = ("example", "sensitive_attribute", "group_member", "user")




# ---------------------------------------------------------------------------------------------
# Spend records
# ---------------------------------------------------------------------------------------------


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, dp_accounting.DpEvent):
        value = value.to_named_tuple()
    if hasattr(value, "_asdict"):
        return {k: _to_jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


@jax.tree_util.register_static  # a pytree without leaves: fit results carry it through jit/vmap
@dataclasses.dataclass(frozen=True)
class PrivacySpend:
    """What one run spends: (epsilon, delta), optionally rho and the ``DpEvent``, and its meaning.

    ``relation`` is the neighbouring relation the spend covers: "add_remove", "replace_one" (any
    record replaced by any other) or "replace_one_within_group" (replaced by a record of the same
    group: group sizes fixed; a record moving between groups is not covered,
    :func:`dpfair_jax.privacy.relations.covers`); ``unit`` is what a neighbour changes ("example": a whole record; "sensitive_attribute": only a record's group
    label; "group_member", "user"). ``accountant`` says how epsilon was obtained ("rdp", "pld",
    "zcdp" conversion, "closed_form" paper formula, "exact" privacy curve, or None). ``delta = 0`` means pure
    epsilon-DP; ``epsilon = inf`` means no guarantee; ``(0, 0)`` means the run releases nothing
    that depends on what the unit protects (e.g. DP-SGD under the sensitive-attribute unit).
    """

    epsilon: float
    delta: float
    rho: float | None = None
    event: dp_accounting.DpEvent | None = None
    relation: str = "add_remove"
    unit: str = "example"
    accountant: str | None = None
    notes: str = ""

    def __post_init__(self) -> None:
        if not (self.epsilon == 0 and self.delta == 0):  # (0, 0): nothing spent on this unit
            V.check_epsilon(self.epsilon, allow_inf=True)
        d = V.as_float("delta", self.delta)
        if not 0.0 <= d < 1.0:
            raise ValueError(f"delta must lie in [0, 1) (0 for pure DP), got {self.delta!r}.")
        if self.rho is not None:
            V.check_rho(self.rho, allow_inf=True)
        if self.event is not None and not isinstance(self.event, dp_accounting.DpEvent):
            raise ValueError(f"event must be a dp_accounting.DpEvent or None, got {self.event!r}.")
        # a name or NeighboringRelation; recorded by name ("swap" and unknown names refused)
        object.__setattr__(self, "relation", _relations.relation_name(self.relation))
        V.check_choice("unit", self.unit, UNITS)
        if self.accountant is not None:
            V.check_choice("accountant", self.accountant, ACCOUNTANTS + ("zcdp", "closed_form", "exact"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict; the event via ``DpEvent.to_named_tuple`` (nested dicts)."""
        return {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "rho": None if self.rho is None else float(self.rho),
            "event": None if self.event is None else _to_jsonable(self.event),
            "relation": self.relation,
            "unit": self.unit,
            "accountant": self.accountant,
            "notes": self.notes,
        }
