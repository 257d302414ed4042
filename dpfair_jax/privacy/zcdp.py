"""zCDP algebra (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020): :func:`gaussian_rho`,
:func:`gaussian_sigma_for_rho`, :func:`compose_rho`, :func:`pure_dp_to_rho`, :func:`zcdp_to_dp`,
:func:`dp_to_rho`. They accept arrays (one value per grid point of a study) and return float64 arrays
elementwise, each element equal to the scalar path at that point; scalars stay Python floats.
(Re-exported by :mod:`dpfair_jax.privacy.accounting`.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import dp_accounting
import numpy as np
from scipy import optimize

from dpfair_jax import _validation as V
from dpfair_jax.privacy.records import PrivacySpend

ZCDP_METHODS = ("cks", "bun_steinke")




# ---------------------------------------------------------------------------------------------
# zCDP (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020)
# ---------------------------------------------------------------------------------------------


def _is_array(*values: Any) -> bool:
    """Whether any of ``values`` has an array shape (0-d arrays and numpy scalars are scalars)."""
    return any(np.ndim(x) > 0 for x in values)


def _host_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 host array (traced values are refused: accounting runs on the host)."""
    try:
        return np.asarray(value, dtype=np.float64)
    except Exception as err:  # a jax tracer, a string, ...
        raise ValueError(f"{name} must be a host number or array (accounting runs before any "
                         f"tracing), got {type(value).__name__}.") from err


def _elementwise(fn: Any, *args: Any) -> np.ndarray:
    """``fn`` (a scalar function of floats) at every element of the broadcast ``args``, float64.

    Each distinct argument tuple is evaluated once (grids repeat values)."""
    arrs = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in args])
    shape = arrs[0].shape
    flat = np.stack([a.ravel() for a in arrs], axis=1) if arrs[0].size else np.zeros((0, len(args)))
    uniq, inv = np.unique(flat, axis=0, return_inverse=True)
    vals = np.array([fn(*(float(u) for u in row)) for row in uniq], dtype=np.float64)
    return vals[np.asarray(inv).ravel()].reshape(shape)


def _fsum(values: Sequence[Any]) -> Any:
    """Exactly rounded sum (``math.fsum``) of floats, or elementwise of broadcast arrays."""
    if not _is_array(*values):
        return math.fsum(float(x) for x in values)
    arrs = np.broadcast_arrays(*[np.asarray(x, dtype=np.float64) for x in values])
    stacked = np.stack([a.ravel() for a in arrs], axis=0)
    return np.array([math.fsum(col) for col in stacked.T], dtype=np.float64).reshape(arrs[0].shape)


def gaussian_rho(sensitivity: Any, sigma: Any) -> Any:
    """rho of the Gaussian mechanism: ``sensitivity^2 / (2 sigma^2)`` (Bun & Steinke 2016, Prop. 1.6).

    Arrays broadcast (float64 result, elementwise); scalars give a float.

    Privacy: releasing ``q(D) + N(0, sigma^2 I)`` with l2-sensitivity ``sensitivity`` (under the
    caller's neighbouring relation) is rho-zCDP.
    """
    V.check_positive("sensitivity", sensitivity)
    V.check_positive("sigma", sigma)
    if _is_array(sensitivity, sigma):
        sens, sig = _host_array("sensitivity", sensitivity), _host_array("sigma", sigma)
        return np.square(sens) / (2.0 * np.square(sig))
    return float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2)


def gaussian_sigma_for_rho(sensitivity: Any, rho: Any) -> Any:
    """Noise std giving rho-zCDP: ``sensitivity / sqrt(2 rho)`` (inverse of :func:`gaussian_rho`);
    elementwise for arrays."""
    V.check_positive("sensitivity", sensitivity)
    V.check_rho(rho)
    if _is_array(sensitivity, rho):
        return _host_array("sensitivity", sensitivity) / np.sqrt(2.0 * _host_array("rho", rho))
    return float(sensitivity) / math.sqrt(2.0 * float(rho))


def compose_rho(*rhos: Any) -> Any:
    """Sequential composition: rho-zCDP and rho'-zCDP compose to (rho + rho')-zCDP (B&S Lemma 2.3).

    Arrays (e.g. one rho per grid point) broadcast and are summed elementwise (``math.fsum`` per
    element); scalars give a float."""
    if not rhos:
        raise ValueError("compose_rho needs at least one rho.")
    if _is_array(*rhos):
        vals = [_host_array("rho", r) for r in rhos]
        for r in vals:
            V.check_rho(r)
        try:
            np.broadcast_shapes(*(r.shape for r in vals))
        except ValueError as err:
            raise ValueError(f"rho arrays must broadcast to one shape, got shapes "
                             f"{[r.shape for r in vals]}.") from err
        return _fsum(vals)
    vals = [V.as_float("rho", r) for r in rhos]
    for r in vals:
        V.check_rho(r)
    return math.fsum(vals)


def pure_dp_to_rho(epsilon: Any) -> Any:
    """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4); elementwise for
    arrays."""
    V.check_epsilon(epsilon)
    if _is_array(epsilon):
        return np.square(_host_array("epsilon", epsilon)) / 2.0
    return float(epsilon) ** 2 / 2.0


def _cks_eps_at(alpha: np.ndarray | float, rho: float, log_inv_delta: float) -> np.ndarray | float:
    """CKS 2020 conversion at Renyi order alpha > 1 (Prop. 12 / Cor. 13)."""
    a = np.asarray(alpha, dtype=np.float64)
    am1 = a - 1.0
    val = a * rho + (log_inv_delta + am1 * np.log1p(-1.0 / a) - np.log(a)) / am1
    return val


def zcdp_to_dp(rho: Any, delta: Any, *, method: str = "cks") -> Any:
    """Epsilon such that rho-zCDP implies (epsilon, delta)-DP.

    * ``"bun_steinke"``: ``rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke 2016, Prop. 1.3; the
      conversion paper 000 states in Sec. 2).
    * ``"cks"`` (default, tighter): ``inf_{alpha > 1} alpha rho + (log(1/delta) + (alpha - 1)
      log(1 - 1/alpha) - log(alpha)) / (alpha - 1)`` (Canonne, Kamath & Steinke 2020, Prop. 12 /
      Cor. 13), minimised numerically in float64 over ``log(alpha - 1)``. Never above
      Bun-Steinke (it is also evaluated at Bun-Steinke's optimal order); floored at 0.

    ``rho`` and ``delta`` may be arrays (broadcast): the result is the float64 array of the scalar
    conversion at each element.
    """
    V.check_rho(rho)
    V.check_delta(delta)
    V.check_choice("method", method, ZCDP_METHODS)
    if _is_array(rho, delta):
        return _elementwise(lambda r, d: _zcdp_to_dp(r, d, method),
                            _host_array("rho", rho), _host_array("delta", delta))
    return _zcdp_to_dp(float(rho), float(delta), method)


def _zcdp_to_dp(rho: float, delta: float, method: str) -> float:
    L = math.log(1.0 / delta)
    bs = rho + 2.0 * math.sqrt(rho * L)
    if method == "bun_steinke":
        return bs
    a_bs = 1.0 + math.sqrt(L / rho)
    f = lambda u: float(_cks_eps_at(1.0 + math.exp(u), rho, L))  # noqa: E731
    u0 = math.log(a_bs - 1.0)
    # coarse grid over log(alpha - 1), then bounded Brent around the best grid point
    grid = np.linspace(u0 - 15.0, u0 + 15.0, 601)
    with np.errstate(all="ignore"):
        vals = _cks_eps_at(1.0 + np.exp(grid), rho, L)
    vals = np.where(np.isfinite(vals), vals, np.inf)
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13})
    cands = [f(u0), float(vals[j])]
    if np.isfinite(res.fun):
        cands.append(float(res.fun))
    return max(0.0, min(min(cands), bs))


def dp_to_rho(epsilon: Any, delta: Any, *, method: str = "cks") -> Any:
    """Largest rho whose :func:`zcdp_to_dp` conversion at ``delta`` is at most ``epsilon``.

    Closed form for Bun-Steinke: ``(sqrt(log(1/delta) + epsilon) - sqrt(log(1/delta)))^2``;
    bisection (relative tolerance 1e-12) for CKS, whose conversion increases with rho. Arrays
    broadcast (the scalar answer at each element).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_choice("method", method, ZCDP_METHODS)
    if _is_array(epsilon, delta):
        return _elementwise(lambda e, d: _dp_to_rho(e, d, method),
                            _host_array("epsilon", epsilon), _host_array("delta", delta))
    return _dp_to_rho(float(epsilon), float(delta), method)


def _dp_to_rho(eps: float, delta: float, method: str) -> float:
    L = math.log(1.0 / delta)
    rho_bs = (math.sqrt(L + eps) - math.sqrt(L)) ** 2
    if method == "bun_steinke":
        return rho_bs
    lo, hi = rho_bs, max(rho_bs, 1e-300)  # CKS <= BS, so the CKS rho is >= rho_bs
    while _zcdp_to_dp(hi, delta, method) <= eps:
        lo, hi = hi, hi * 2.0
    while hi / lo - 1.0 > 1e-12:
        mid = 0.5 * (lo + hi)
        if _zcdp_to_dp(mid, delta, method) <= eps:
            lo = mid
        else:
            hi = mid
    return float(lo)


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
