"""What a run spends: :class:`PrivacySpend` (JSON-serialisable; a static pytree, so fit results carry
it through ``jit``/``vmap``) (the ZcdpLedger of named zCDP charges is in :mod:`~dpfair_jax.privacy.zcdp`).
(Re-exported by :mod:`dpfair_jax.privacy.accounting`.)
"""

from __future__ import annotations

import dataclasses
import math
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


def _short_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def event_summary(event: dp_accounting.DpEvent | None, *, max_parts: int = 4) -> str:
    """A one-line summary of a ``DpEvent`` tree: class names without ``DpEvent`` and their scalar
    fields, e.g. ``SelfComposed(PoissonSampled(q=0.01, Gaussian(z=1.1)), count=1000)``; a
    composition lists at most ``max_parts`` parts and counts the rest."""
    if event is None:
        return "none"
    short = {"sampling_probability": "q", "noise_multiplier": "z"}

    def walk(value: Any) -> str:
        if hasattr(value, "_asdict"):
            fields = value._asdict()
            name = str(fields.pop("class_name", type(value).__name__)).replace("DpEvent", "")
            fields.pop("module_name", None)
            parts = []
            for key, item in fields.items():
                text = walk(item)
                parts.append(text if hasattr(item, "_asdict") or isinstance(item, (list, tuple))
                             else f"{short.get(key, key)}={text}")
            return f"{name}({', '.join(parts)})" if parts else name
        if isinstance(value, (list, tuple)):
            head = [walk(v) for v in value[:max_parts]]
            if len(value) > max_parts:
                head.append(f"... {len(value) - max_parts} more")
            return "[" + ", ".join(head) + "]"
        return _short_number(value)

    return walk(event.to_named_tuple())


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
    event: dp_accounting.DpEvent | None = dataclasses.field(default=None, repr=False)
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

    def __str__(self) -> str:
        """Short readable form, e.g. ``(epsilon=1, delta=1e-05)-DP, unit example, add_remove,
        accountant rdp; event SelfComposed(...)``; ``repr`` omits the event, ``to_dict`` has it whole."""
        guarantee = ("no guarantee (epsilon = inf)" if math.isinf(float(self.epsilon))
                     else f"(epsilon={float(self.epsilon):.4g}, delta={float(self.delta):.3g})-DP")
        parts = [guarantee, f"unit {self.unit}", self.relation]
        if self.rho is not None:
            parts.append(f"rho={float(self.rho):.4g}")
        if self.accountant is not None:
            parts.append(f"accountant {self.accountant}")
        if self.event is not None:
            parts.append(f"event {event_summary(self.event)}")
        return ", ".join(parts)

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
