"""What a run spends: :class:`PrivacySpend` (JSON-serialisable; a static pytree, so fit results carry
it through ``jit``/``vmap``) and the :class:`ZcdpLedger` of named zCDP charges (array-capable).
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
from dpfair_jax.privacy.zcdp import _fsum, _host_array, _is_array, zcdp_to_dp

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
    epsilon-DP; ``epsilon = inf`` means no guarantee.
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


class ZcdpLedger:
    """Named zCDP charges that must add up to a planned total (sequential composition).

    ``charge(name, rho, count=1)`` records ``count`` charges of ``rho`` under ``name`` (repeated
    names accumulate, e.g. one charge per iteration); ``total`` is the exactly rounded sum
    (``math.fsum``); ``assert_total(rho)`` raises ``AssertionError`` listing the charges if the
    total differs.

    A charge may be an array (e.g. one rho per grid point of a study): all array charges of one
    ledger broadcast to one shape, and ``total``, ``charges``, ``assert_total`` and ``to_dp`` then
    work elementwise (a scalar charge counts at every grid point). :meth:`at` gives one grid
    point's scalar ledger, whose :meth:`to_spend` is that point's record.
    """

    def __init__(self) -> None:
        self._history: list[tuple[str, Any, int]] = []
        self._shape: tuple[int, ...] | None = None  # broadcast shape of the array charges

    def charge(self, name: str, rho: Any, count: int = 1) -> Any:
        """Record ``count`` charges of ``rho`` (a float, or an array broadcasting with the
        ledger's other array charges) under ``name``; returns ``rho`` (a float or float64 array)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}.")
        if _is_array(rho):
            rho = _host_array("rho", rho)
            V.check_rho(rho)
            try:
                shape = np.broadcast_shapes(self._shape or (), rho.shape)
            except ValueError as err:
                raise ValueError(f"rho of shape {rho.shape} does not broadcast with the ledger's "
                                 f"other charges (shape {self._shape}); charge one shape of grid."
                                 ) from err
            self._shape = shape
        else:
            rho = V.as_float("rho", rho)
            V.check_rho(rho)
        count = V.check_int("count", count, minimum=1)
        self._history.append((name, rho, count))
        return rho

    @property
    def shape(self) -> tuple[int, ...]:
        """The broadcast shape of the charges: ``()`` for a scalar ledger."""
        return self._shape or ()

    @property
    def history(self) -> list[tuple[str, Any, int]]:
        """The charges in order, as ``(name, rho, count)``."""
        return list(self._history)

    @property
    def charges(self) -> dict[str, Any]:
        """Total rho per name, in order of first charge (arrays elementwise)."""
        out: dict[str, list[Any]] = {}
        for name, rho, count in self._history:
            out.setdefault(name, []).append(rho * count)
        return {k: self._broadcast(_fsum(v)) for k, v in out.items()}

    @property
    def total(self) -> Any:
        """The exactly rounded sum of the charges: a float, or a float64 array of :attr:`shape`."""
        return self._broadcast(_fsum([r * c for _, r, c in self._history]))

    def _broadcast(self, value: Any) -> Any:
        if self._shape is None:
            return value
        return np.broadcast_to(np.asarray(value, np.float64), self._shape).copy()

    def assert_total(self, rho: Any, rtol: float = 1e-9) -> None:
        """Raise ``AssertionError`` unless the charges add up to ``rho`` within ``rtol`` (at every
        grid point for array ledgers or an array ``rho``)."""
        V.check_rho(rho)
        if not _is_array(rho) and self._shape is None:
            ok = math.isclose(self.total, float(rho), rel_tol=rtol, abs_tol=0.0)
        else:
            total = np.asarray(self.total, np.float64)
            planned = _host_array("rho", rho)
            ok = bool(np.all(np.abs(total - planned) <= rtol * np.maximum(np.abs(total),
                                                                           np.abs(planned))))
        if not ok:
            planned = float(rho) if not _is_array(rho) else rho
            raise AssertionError(
                f"zCDP charges add up to {self.total!r}, planned {planned!r}; "
                f"charges: {self.charges}"
            )

    def at(self, index: Any) -> "ZcdpLedger":
        """The scalar ledger of one grid point: every array charge taken at ``index`` (an index
        into :attr:`shape`), scalar charges as they are."""
        if self._shape is None:
            raise ValueError("the ledger has only scalar charges; use it directly.")
        out = ZcdpLedger()
        for name, rho, count in self._history:
            value = np.broadcast_to(rho, self._shape)[index] if _is_array(rho) else rho
            if np.ndim(value) != 0:
                raise ValueError(f"index {index!r} does not pick one grid point of shape {self._shape}.")
            out.charge(name, float(value), count)
        return out

    def to_dp(self, delta: float, *, method: str = "cks") -> Any:
        """Epsilon at ``delta`` of the total (:func:`zcdp_to_dp`; elementwise for array ledgers)."""
        if not self._history:
            raise ValueError("the ledger has no charges; charge something before converting.")
        return zcdp_to_dp(self.total, delta, method=method)

    def to_spend(self, delta: float, *, method: str = "cks", relation: str = "add_remove",
                 unit: str = "example", notes: str = "") -> PrivacySpend:
        """The ledger's total as a :class:`PrivacySpend` (a scalar ledger; for an array ledger,
        take one grid point with :meth:`at` first)."""
        if self._shape is not None:
            raise ValueError(f"the ledger's charges are arrays of shape {self._shape}: one "
                             "PrivacySpend per grid point, ledger.at(index).to_spend(...); "
                             "to_dp(delta) gives every point's epsilon.")
        return PrivacySpend(
            epsilon=self.to_dp(delta, method=method), delta=float(delta), rho=self.total,
            event=dp_accounting.ZCDpEvent(self.total), relation=relation, unit=unit,
            accountant="zcdp", notes=notes or f"zCDP ledger, conversion {method}",
        )

    def __repr__(self) -> str:
        return f"ZcdpLedger(total={self.total!r}, charges={self.charges!r})"
