"""Accounting under a change of one record's sensitive attribute (the ``"sensitive_attribute"`` unit).

Neighbours differ only in one record's ``s_i`` (paper 004's Definition 2.2, after Jagielski et al.
2019 and Tran et al. 2021b): the record stays in the data, in the same batches, with the same
features and label. Three valid Renyi-DP bounds of a run under that change are kept, and their
pointwise minimum over the orders is the run's curve (each bounds the same divergence at every
order, so the minimum does too):

* (a) **membership visible**, exact (:func:`membership_visible_rdp`): only the releases that read
  ``s`` are charged, each at its sensitivity for a change of one ``s_i``; the adversary is given
  the steps in which the record was sampled (``K ~ participation``), so no amplification is
  claimed. Given ``K = k`` the run is one Gaussian of shift ``mu_k = sqrt(k mu_step^2 +
  extra_mu^2)``, and ``K`` has the same law under both neighbours, so the joint Renyi divergence
  is exactly ``log E_K exp((alpha - 1) alpha mu_K^2 / 2) / (alpha - 1)``. A run that reads ``s``
  nowhere (DP-SGD, ``lam = 0``) has ``mu = 0`` and spends nothing.
* (b) **the example-level mechanism, weak triangle** (:func:`replace_rdp_from_add_remove`): a
  change of one ``s_i`` is a removal followed by an addition, so the add/remove curve ``r`` of the
  run's ``DpEvent`` gives, by Mironov's weak triangle inequality (RDP, 2017, Prop. 11 with ``p = q
  = 2``), ``D_alpha <= (2 alpha - 1) / (2 (alpha - 1)) r(2 alpha) + r(2 alpha - 1)``
  (dp-accounting's add/remove curves bound both directions of the subsampled Gaussian). Valid and
  cheap, but loose (it doubles the order and adds two curves).
* (c) **the example-level mechanism under replace-one, directly**
  (:func:`dpfair_jax.privacy.replace_rdp.replace_rdp_of_event`): a change of one ``s_i`` replaces
  that record's clipped contribution (norm ``<= C``) by another of norm ``<= C``, its sampling
  unchanged: exactly replace-one of that record. Each Poisson-subsampled Gaussian step (multiplier
  ``z``, rate ``q``) is charged the Renyi divergence of the 1-D pair ``q N(-1, z^2) + (1 - q)
  N(0, z^2)`` vs ``q N(+1, z^2) + (1 - q) N(0, z^2)``, by certified quadrature (tails bounded,
  a grid-error estimate added, rounded up); an unsampled Gaussian the closed form ``alpha (2/z)^2 / 2``;
  composition sums. Assumption: this antipodal pair, the one dp-accounting's PLD uses for
  ``AdjacencyType.REPLACE``, dominates every pair of rows of norm ``<= C`` (checked numerically in
  2-D over angles and norms by ``tests/privacy/test_replace_rdp.py``). (c) is below (b) wherever
  (b) is finite (equal to first order at high noise, where (c) gains through the orders (b) skips);
  on the tradeoff study's runs (c) binds, (a) only when few steps read ``s`` (``docs/privacy_units.md``).

:func:`attribute_selection_epsilon` puts the curve through Papernot-Steinke random stopping
(dp-accounting's repeat-and-select formula, the same as the example-level selection) and converts
it to epsilon at delta. Host-side, float64.

Privacy: upper bounds for the relation "replace_one" restricted to the record's ``s`` (recorded as
``unit="sensitive_attribute"``, ``relation="replace_one"``); they say nothing about a change of a
record's features or label, or about adding or removing a record.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from scipy import special

from dpfair_jax import _validation as V
from dpfair_jax.privacy.replace_rdp import replace_rdp_of_event
from dpfair_jax.privacy.selection import ORDERS, RandomStopping, smallest_meeting

__all__ = [
    "ORDERS",
    "CLIPPED_SUM_FACTOR",
    "MOVED_CELL_FACTOR",
    "shift",
    "amplified_multiplier",
    "poisson_participation",
    "membership_visible_rdp",
    "replace_rdp_from_add_remove",
    "replace_rdp_of_event",
    "attribute_rdp",
    "attribute_selection_epsilon",
    "calibrate_attribute_selection",
    "check_unit",
]


#: Sensitivity, in clip units, of a sum of rows clipped to ``C`` when one record's ``s_i`` changes:
#: its clipped row is replaced by another of norm ``<= C`` (``2 C``), as under replace-one.
CLIPPED_SUM_FACTOR = 2.0
#: The same for a row that ``s_i`` only moves between cells (a one-hot ``e_{s_i}`` times a vector
#: clipped to ``C``, or one count of a histogram): two orthogonal rows of equal norm, ``sqrt(2) C``.
MOVED_CELL_FACTOR = math.sqrt(2.0)


#: the largest order at which the weak-triangle route (b) is evaluated (its cost grows with 2a)
MAX_TRIANGLE_ORDER = 64.0


def shift(noise_multiplier: float, factor: float) -> float:
    """Shift/std of a Gaussian release of multiplier ``noise_multiplier`` (std = multiplier x clip)
    under a change of one ``s_i`` of sensitivity ``factor`` x clip: ``factor / z`` (``inf`` at 0)."""
    z = float(noise_multiplier)
    if z < 0 or not math.isfinite(z):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier!r}.")
    return math.inf if z == 0 else float(factor) / z


def amplified_multiplier(noise_multiplier: float, factor: float) -> float:
    """``z / factor``: the add/remove multiplier of the same shift, which the paper's Theorem 3.3
    accounting puts through the Poisson-subsampled Gaussian (amplified) for the attribute unit.
    That record is what the paper states, not a bound this module proves (module docstring)."""
    return float(noise_multiplier) / float(factor)


def poisson_participation(steps: int, sample_rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ks, pmf, log_pmf)`` of ``K ~ Bin(steps, sample_rate)`` over every ``k`` (none dropped: at
    high orders the Renyi sum weights a tail atom by ``exp(alpha^2 k mu^2 / 2)``, so atoms whose
    probability underflows in float64 still count, through ``log_pmf``)."""
    from scipy import stats

    steps = V.check_int("steps", steps, minimum=1)
    V.check_sample_rate(sample_rate)
    ks = np.arange(steps + 1, dtype=np.float64)
    logp = stats.binom.logpmf(ks, steps, float(sample_rate))
    return ks, np.exp(logp), logp


def membership_visible_rdp(orders, mu_step: float, participation: tuple[np.ndarray, np.ndarray], *,
                           extra_mu: float = 0.0) -> np.ndarray:
    """Exact RDP at ``orders`` of Gaussian releases whose batch membership is visible (module (a)):
    ``log sum_k P(K = k) exp((alpha - 1) alpha (k mu_step^2 + extra_mu^2) / 2) / (alpha - 1)``.

    ``participation``: ``(ks, pmf)`` or ``(ks, pmf, log_pmf)`` (:func:`poisson_participation`,
    every atom; for a point mass at ``k`` this is the Gaussian's ``alpha k mu_step^2 / 2``). A law
    whose negligible atoms were dropped (``privacy.membership.participation_distribution``)
    understates the high orders: pass every atom."""
    a = np.asarray(orders, np.float64)
    if np.any(a <= 1.0):
        raise ValueError("orders must be > 1.")
    mu_step, extra_mu = float(mu_step), float(extra_mu)
    if not (mu_step >= 0.0 and extra_mu >= 0.0):
        raise ValueError(f"mu_step and extra_mu must be >= 0 (inf: no noise), got {mu_step!r}, {extra_mu!r}.")
    if math.isinf(mu_step) or math.isinf(extra_mu):
        return np.full(a.shape, np.inf)
    ks, pmf = participation[0], participation[1]
    with np.errstate(divide="ignore"):
        logp = np.asarray(participation[2] if len(participation) > 2 else np.log(pmf), np.float64)
    mu2 = np.asarray(ks, np.float64)[None, :] * mu_step**2 + extra_mu**2  # [1, K]
    expo = (a[:, None] - 1.0) * a[:, None] * mu2 / 2.0 + logp[None, :]
    return special.logsumexp(expo, axis=1) / (a - 1.0)


def _add_remove_rdp(event: dp_accounting.DpEvent, orders) -> np.ndarray:
    acc = dp_accounting.rdp.RdpAccountant(list(orders), dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    if not acc.supports(event):
        raise ValueError(f"the RDP accountant cannot account {type(event).__name__} under add/remove.")
    acc.compose(event)
    return np.asarray(acc._rdp, np.float64)  # noqa: SLF001 (the per-order curve of the composed event)


def replace_rdp_from_add_remove(event: dp_accounting.DpEvent | None, orders) -> np.ndarray:
    """RDP at ``orders`` under a replacement of one record (hence of one ``s_i``) from the add/remove
    curve of ``event`` (module (b)): ``(2a - 1) / (2 (a - 1)) r(2a) + r(2a - 1)``, evaluated at the
    orders ``a <= MAX_TRIANGLE_ORDER`` where ``2a`` is an integer (``r`` there by dp-accounting's
    exact integer-order formula) and ``inf`` (a valid bound) at the others. ``None``: no example-level event (``inf``)."""
    a = np.asarray(orders, np.float64)
    out = np.full(a.shape, np.inf)
    if event is None or isinstance(event, dp_accounting.NonPrivateDpEvent):
        return out
    # only where 2a is an integer: dp-accounting's integer-order formula (fast, exact); inf elsewhere
    use = (np.abs(2.0 * a - np.round(2.0 * a)) < 1e-9) & (a <= MAX_TRIANGLE_ORDER)
    if not np.any(use):
        return out
    au = np.round(2.0 * a[use]) / 2.0
    uniq = np.unique(np.concatenate([2.0 * au, 2.0 * au - 1.0]))
    r = dict(zip(uniq.tolist(), _add_remove_rdp(event, uniq).tolist()))
    r2 = np.asarray([r[x] for x in (2.0 * au).tolist()])
    r1 = np.asarray([r[x] for x in (2.0 * au - 1.0).tolist()])
    out[use] = (2.0 * au - 1.0) / (2.0 * (au - 1.0)) * r2 + r1
    return out


def attribute_rdp(mu_step: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0,
                  example_event: dp_accounting.DpEvent | None = None, orders=ORDERS) -> np.ndarray:
    """One run's RDP under a change of one ``s_i``: the pointwise minimum of (a)
    :func:`membership_visible_rdp`, (b) :func:`replace_rdp_from_add_remove` of ``example_event``
    and (c) :func:`~dpfair_jax.privacy.replace_rdp.replace_rdp_of_event` of ``example_event``."""
    a = membership_visible_rdp(orders, mu_step, participation, extra_mu=extra_mu)
    b = replace_rdp_from_add_remove(example_event, orders)
    c = replace_rdp_of_event(example_event, orders)
    return np.minimum(a, np.minimum(b, c))


def attribute_selection_epsilon(run_rdp: np.ndarray, law: RandomStopping | None, delta: float, *,
                                orders=ORDERS) -> float:
    """Epsilon at ``delta`` of the best of ``K ~ law`` runs of curve ``run_rdp`` (``law=None``: one
    run); 0 when the curve is 0 (a run that reads no ``s``)."""
    V.check_delta(delta)
    r = np.asarray(run_rdp, np.float64)
    if np.all(r == 0.0):
        return 0.0
    if np.all(~np.isfinite(r)):
        return math.inf
    o = np.asarray(orders, np.float64)
    if law is not None:
        r = np.asarray(_rdp._compute_rdp_repeat_and_select(o, r, float(law.mean), float(law.shape)))  # noqa: SLF001
    eps, _ = _rdp.compute_epsilon(o, r, float(delta))
    return float(eps)


def check_unit(unit: Any) -> str:
    """``unit`` if it is ``"example"`` or ``"sensitive_attribute"`` (the names of
    :data:`dpfair_jax.privacy.records.UNITS` a study can run), else ``ValueError``."""
    V.check_choice("privacy_unit", unit, ("example", "sensitive_attribute"))
    return unit


def calibrate_attribute_selection(make_rdp, law: RandomStopping | None, epsilon: float, delta: float, *,
                                  lo: float = 0.05, hi: float = 500.0, rtol: float = 1e-3) -> float:
    """Smallest noise multiplier ``z`` (bisection in log space) with
    ``attribute_selection_epsilon(make_rdp(z), law, delta) <= epsilon``; ``make_rdp(z)`` is one
    run's curve at :data:`ORDERS` (it decreases in ``z``)."""
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    f = lambda z: attribute_selection_epsilon(make_rdp(z), law, delta)  # noqa: E731
    if f(hi) > epsilon:
        raise ValueError(f"no noise multiplier <= {hi} reaches epsilon={epsilon} for the sensitive-attribute "
                         "unit; raise epsilon or lower the mean number of runs.")
    return smallest_meeting(f, lo, hi, epsilon, rtol)
