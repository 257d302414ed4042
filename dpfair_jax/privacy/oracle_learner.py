"""Privacy arithmetic of Jagielski et al.'s (2019) DP-oracle-learner (their Section 4, a private
version of Agarwal et al.'s 2018 exponentiated-gradient reduction) for equalized odds over a public
finite class ``H`` of binary classifiers.

The run reads the private data three ways, each through a function here:

1. once, the ``[K, 2]`` group-label counts ``n_{a,y}`` with Laplace noise
   (:func:`noisy_group_label_counts`); the released counts, clipped below at 1, are the public
   denominators of every group rate afterwards (the true counts are never used);
2. each round, the Learner's private cost-sensitive oracle: the exponential mechanism over ``H``
   with score ``err(h) + <w, d(h)>`` (:func:`oracle_draw`, sensitivity :func:`score_sensitivity`);
3. each round, the Auditor's Laplace release of the rate differences ``d(h_t)``
   (:func:`noisy_rate_differences`, L1 sensitivity :func:`rate_difference_sensitivity`).

``d(h)[a-1, y] = N_{a,y}(h)/m_{a,y} - N_{0,y}(h)/m_{0,y}`` for ``a = 1..K-1`` (group 0 the anchor),
``N_{a,y}(h) = |{i : s_i = a, y_i = y, h(x_i) = 1}|`` and ``m`` the public denominators; ``y = 0``
gives the false-positive and ``y = 1`` the true-positive rate gaps.

Privacy units (neighbouring relation replace-one in both):

* ``"sensitive_attribute"`` (theirs): one record's ``s_i`` changes, ``x_i, y_i`` (so ``h(x_i)``
  for an ``s``-blind class and the error) are public; the record moves between two cells of one
  label block.
* ``"example"``: one whole record ``(x_i, y_i, s_i)`` is replaced (``n`` public); a record leaves
  one cell and enters any cell, and the error ``(1/n) sum_i 1[h(x_i) != y_i]`` moves by ``1/n``.
* ``"example"`` under add/remove (``relation="add_remove"``, the public tradeoff study's unit): one
  whole record is added or removed; it enters or leaves one cell (the histogram's L1 sensitivity
  is 1), ``n`` is not public, so the Learner's error is the error count over the released total
  ``N~ = max(1, sum of the noisy counts)`` (:func:`error_denominator`, public), which moves by at
  most ``1/N~``.

A cell ``(a, y)``'s numerator moves by at most 1 per record; it enters the rate differences with
weight ``c(a, y) = 1/m_{a,y}`` (``a >= 1``: one coordinate) or ``1/m_{0,y}`` in each of the ``K-1``
coordinates of its block (``a = 0``). Hence (exact, attained by the all-ones classifier):

* L1 sensitivity of ``d``: the sum of the two largest ``c(a, y)`` over the cells of one label block
  (attribute) or over all ``2K`` cells (example), with ``c(0, y) = (K-1)/m_{0,y}``;
* L-inf sensitivity of ``d``: ``max_y (1/m_{0,y} + 1/min_{a>=1} m_{a,y})`` (both units);
* score sensitivity: ``B`` times the L-inf one (``||w||_1 <= ||lambda||_1 <= B``; exact under the
  attribute unit), plus ``1/n`` under the example unit (an upper bound there, at most ``1/n`` above
  the exact one: the largest rate move keeps the label, the error's move changes it).

Under add/remove (example unit) only one cell's numerator moves, by at most 1, so (exact, attained
by ``h = 1``): L1 sensitivity of ``d`` the largest ``c(a, y)`` over all ``2K`` cells; L-inf
sensitivity ``max_{a,y} 1/m_{a,y}``; score sensitivity ``B`` times that plus ``1/N~``.

Accounting (:func:`oracle_learner_epsilon`): the count release is pure ``eps_c``-DP, each round
pure ``(eps_o + eps_a)``-DP (exponential mechanism at ``eps_o``, Laplace at ``eps_a``); the run's
epsilon at ``delta`` is the minimum of four valid bounds: basic composition, advanced composition
(Dwork, Rothblum, Vadhan 2010) over the ``T`` rounds, zCDP (``eps^2/2`` per Laplace release and
``eps_o^2/8`` per exponential mechanism, which is ``eps_o``-bounded-range: Cesar & Rogers 2021)
converted at ``delta``, and the privacy-loss distribution of ``dp_accounting`` (Laplace PLDs, the
exponential mechanism as the worst pure ``eps_o``-DP pair).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import zcdp as _zcdp

__all__ = ["ORACLE_UNITS", "ORACLE_RELATIONS", "check_relation", "error_denominator", "learner_error", "group_label_cells", "group_label_counts", "noisy_group_label_counts", "public_denominators",
           "cell_weights", "rate_difference_sensitivity", "rate_difference_linf_sensitivity",
           "score_sensitivity", "noisy_rate_differences", "oracle_draw", "advanced_composition_epsilon",
           "oracle_learner_bounds", "oracle_learner_epsilon", "oracle_learner_event", "oracle_learner_curve",
           "paper_round_epsilon"]

#: the privacy units of the oracle learner; the relation is replace-one under both
ORACLE_UNITS = ("sensitive_attribute", "example")

#: the neighbouring relations: replace-one (both units; the default) and add/remove (example unit only)
ORACLE_RELATIONS = ("replace_one", "add_remove")

#: the group-label histogram's L1 sensitivity: 2 under replace-one (one record leaves a cell, enters
#: one), 1 under add/remove (one record enters or leaves one cell)
_COUNT_L1 = _rel.histogram_sensitivity("l1")


def check_relation(unit: str, relation: str) -> str:
    """``relation`` if one of :data:`ORACLE_RELATIONS` valid for ``unit`` (add/remove: the example
    unit only; a change of one ``s_i`` is a replacement), else a ``ValueError``."""
    V.check_choice("unit", unit, ORACLE_UNITS)
    V.check_choice("relation", relation, ORACLE_RELATIONS)
    if relation == "add_remove" and unit != "example":
        raise ValueError(f"relation 'add_remove' needs privacy_unit 'example' (a change of one s_i is a "
                         f"replacement), got {unit!r}.")
    return relation


def _add_remove(relation: str) -> bool:
    return V.check_choice("relation", relation, ORACLE_RELATIONS) == "add_remove"


def error_denominator(noisy_counts: jax.Array, n: int, relation: str = "replace_one") -> Any:
    """The Learner's error denominator: the public ``n`` (returned as given) under replace-one;
    under add/remove (``n`` not public) the released total ``max(1, sum of the noisy counts)``
    (post-processing of the count release)."""
    if _add_remove(relation):
        return jnp.maximum(jnp.sum(jnp.asarray(noisy_counts, jnp.float32)), 1.0)
    return n


def learner_error(mean_error: jax.Array, preds: jax.Array, y: jax.Array, noisy_counts: jax.Array,
                  relation: str = "replace_one") -> jax.Array:
    """The error term of the Learner's score: ``mean_error [M]`` as given under replace-one (``n``
    public); under add/remove each candidate's error count over :func:`error_denominator`, which
    moves by at most ``1 / N~`` when one record is added or removed."""
    if not _add_remove(relation):
        return mean_error
    wrong = jnp.sum(jnp.abs(preds - jnp.asarray(y, jnp.float32)), axis=-1)
    return wrong / error_denominator(noisy_counts, preds.shape[-1], relation)


def group_label_cells(y: jax.Array, s: jax.Array) -> jax.Array:
    """The cell ``2 s + y`` of each record in the ``[K, 2]`` group-label histogram."""
    return 2 * jnp.asarray(s, jnp.int32) + jnp.asarray(y, jnp.int32)


def group_label_counts(y: jax.Array, s: jax.Array, num_groups: int) -> jax.Array:
    """The exact ``[2K]`` counts of :func:`group_label_cells` (flat; private: release them only
    through :func:`noisy_group_label_counts`)."""
    cells = group_label_cells(y, s)
    return jax.ops.segment_sum(jnp.ones(cells.shape, jnp.float32), cells, num_segments=2 * num_groups)


def noisy_group_label_counts(key: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
                             epsilon: Any, relation: str = "replace_one") -> jax.Array:
    """``[K, 2]`` counts ``n_{a,y}`` plus Laplace noise of scale ``2 / epsilon`` (L1 sensitivity 2
    of a histogram under replace-one; ``1 / epsilon`` under add/remove; ``epsilon = inf``, traced:
    no noise).

    Privacy: pure ``epsilon``-DP under ``relation`` (replace-one: either unit of
    :data:`ORACLE_UNITS`; add/remove: the example unit)."""
    V.check_choice("relation", relation, ORACLE_RELATIONS)
    counts = group_label_counts(y, s, num_groups)
    eps = jnp.asarray(epsilon, jnp.float32)
    return _mech.add_laplace(key, counts, _COUNT_L1, relation, eps).reshape((num_groups, 2))


def public_denominators(noisy_counts: jax.Array) -> jax.Array:
    """The released counts clipped below at 1 (post-processing): the rates' public denominators."""
    return jnp.maximum(jnp.asarray(noisy_counts, jnp.float32), 1.0)


def cell_weights(denominators: jax.Array) -> jax.Array:
    """``c [K, 2]``: the L1 change of ``d`` when one cell's numerator moves by 1 (module docstring):
    ``(K-1)/m_{0,y}`` for the anchor, ``1/m_{a,y}`` for ``a >= 1``."""
    m = jnp.asarray(denominators, jnp.float32)
    k = m.shape[-2]
    return jnp.concatenate([(k - 1) / m[..., :1, :], 1.0 / m[..., 1:, :]], axis=-2)


def _two_largest(x: jax.Array) -> jax.Array:
    top = jax.lax.top_k(x, 2)[0]
    return top[..., 0] + top[..., 1]


def rate_difference_sensitivity(denominators: jax.Array, unit: str, relation: str = "replace_one") -> jax.Array:
    """L1 sensitivity of ``d [K-1, 2]`` under ``unit`` for public ``denominators [K, 2]``: the sum
    of the two largest :func:`cell_weights` within one label block (attribute) or over all cells
    (example). Exact: attained by ``h = 1`` and a record moved between the two worst cells.
    Add/remove (example unit): the largest :func:`cell_weights` (one cell moves; exact, ``h = 1``)."""
    check_relation(unit, relation)
    c = cell_weights(denominators)
    if _add_remove(relation):
        return jnp.max(c.reshape(c.shape[:-2] + (-1,)), axis=-1)
    if unit == "sensitive_attribute":
        return jnp.max(_two_largest(jnp.swapaxes(c, -1, -2)), axis=-1)
    return _two_largest(c.reshape(c.shape[:-2] + (-1,)))


def rate_difference_linf_sensitivity(denominators: jax.Array, relation: str = "replace_one") -> jax.Array:
    """L-inf sensitivity of ``d``: ``max_y (1/m_{0,y} + 1/min_{a>=1} m_{a,y})`` (both units,
    replace-one); ``max_{a,y} 1/m_{a,y}`` under add/remove (one cell moves by 1; exact, ``h = 1``)."""
    m = jnp.asarray(denominators, jnp.float32)
    if _add_remove(relation):
        return jnp.max(1.0 / m.reshape(m.shape[:-2] + (-1,)), axis=-1)
    return jnp.max(1.0 / m[..., 0, :] + 1.0 / jnp.min(m[..., 1:, :], axis=-2), axis=-1)


def score_sensitivity(denominators: jax.Array, bound: Any, n: Any, unit: str, relation: str = "replace_one"
                      ) -> jax.Array:
    """Sensitivity of every Learner score ``err(h) + <w, d(h)>`` with ``||w||_1 <= bound``:
    ``bound`` times :func:`rate_difference_linf_sensitivity`, plus ``1/n`` under the example unit
    (the error's change; the error is public under the attribute unit). ``bound`` may be traced.
    Under add/remove ``n`` is the error's public denominator :func:`error_denominator` (traced)."""
    check_relation(unit, relation)
    err = 1.0 / n if unit == "example" else 0.0
    return jnp.asarray(bound, jnp.float32) * rate_difference_linf_sensitivity(denominators, relation) + err


def noisy_rate_differences(key: jax.Array, d: jax.Array, l1_sensitivity: Any, epsilon: Any
                           ) -> tuple[jax.Array, jax.Array]:
    """``(d + Laplace(scale), scale)`` with ``scale = l1_sensitivity / epsilon`` (``epsilon = inf``:
    scale 0). Privacy: pure ``epsilon``-DP when ``l1_sensitivity`` bounds ``d``'s L1 change."""
    eps = jnp.asarray(epsilon, jnp.float32)
    noisy = jnp.isfinite(eps)
    scale = jnp.where(noisy, jnp.asarray(l1_sensitivity, jnp.float32) / jnp.where(noisy, eps, 1.0), 0.0)
    return d + _mech.laplace_noise(key, d.shape, scale), scale


def oracle_draw(key: jax.Array, scores: jax.Array, epsilon: Any, sensitivity: Any) -> jax.Array:
    """The Learner's private cost-sensitive oracle: the exponential mechanism over the candidates'
    ``scores`` (minimized) at ``epsilon`` and ``sensitivity``; ``epsilon = inf``: the exact argmin.

    Privacy: pure ``epsilon``-DP (and ``epsilon``-bounded-range) when ``sensitivity`` bounds every
    score's change."""
    eps = jnp.asarray(epsilon, jnp.float32)
    finite = jnp.isfinite(eps)
    sens = jnp.maximum(jnp.asarray(sensitivity, jnp.float32), jnp.finfo(jnp.float32).tiny)
    drawn = _mech.exponential_mechanism(key, scores, epsilon=jnp.where(finite, eps, 1.0), sensitivity=sens)
    return jnp.where(finite, drawn, jnp.argmin(scores, axis=-1).astype(jnp.int32))


def advanced_composition_epsilon(epsilon: float, k: int, delta_bar: float) -> float:
    """``eps sqrt(2 k log(1/delta_bar)) + k eps (e^eps - 1)``: ``k`` adaptive pure ``eps``-DP steps
    are ``(this, delta_bar)``-DP (Dwork, Rothblum, Vadhan 2010)."""
    e = float(epsilon)
    return e * math.sqrt(2.0 * k * math.log(1.0 / delta_bar)) + k * e * math.expm1(e)


def _pld_epsilon(count_eps: float, oracle_eps: float, auditor_eps: float, steps: int, delta: float) -> float:
    from dp_accounting.pld import common, privacy_loss_distribution as pld

    parts = []
    if oracle_eps > 0:
        parts.append(pld.from_privacy_parameters(common.DifferentialPrivacyParameters(oracle_eps, 0.0)))
    if auditor_eps > 0:
        parts.append(pld.from_laplace_mechanism(1.0 / auditor_eps, sensitivity=1.0))
    total = None
    if parts:
        round_pld = parts[0] if len(parts) == 1 else parts[0].compose(parts[1])
        total = round_pld.self_compose(steps)
    if count_eps > 0:
        count_pld = pld.from_laplace_mechanism(1.0 / count_eps, sensitivity=1.0)
        total = count_pld if total is None else total.compose(count_pld)
    return 0.0 if total is None else float(total.get_epsilon_for_delta(delta))


def _check_epsilons(count_epsilon: float, oracle_epsilon: float, auditor_epsilon: float) -> list[float]:
    """The three per-release epsilons as host floats, each refused unless in ``[0, inf]``."""
    names = ("count_epsilon", "oracle_epsilon", "auditor_epsilon")
    eps = [V.as_float(name, x) for name, x in zip(names, (count_epsilon, oracle_epsilon, auditor_epsilon))]
    for name, x in zip(names, eps):
        V.check_positive(name, x, allow_zero=True, allow_inf=True)
    return eps


def oracle_learner_bounds(count_epsilon: float, oracle_epsilon: float, auditor_epsilon: float, steps: int,
                          delta: float) -> dict[str, float]:
    """The four valid epsilons at ``delta`` of one count release (pure ``count_epsilon``) and
    ``steps`` rounds of an exponential mechanism (pure ``oracle_epsilon``) and a Laplace release
    (pure ``auditor_epsilon``): ``basic``, ``advanced`` (rounds composed by advanced composition
    with slack ``delta``, the count added), ``zcdp`` (``rho = eps_c^2/2 + T (eps_o^2/8 +
    eps_a^2/2)``, CKS conversion) and ``pld`` (dp_accounting's PLD). A zero epsilon is a step
    that is not run; ``inf`` anywhere makes every bound ``inf``. Host floats."""
    steps = V.check_int("steps", steps)
    V.check_delta(delta)
    eps = _check_epsilons(count_epsilon, oracle_epsilon, auditor_epsilon)
    if any(math.isinf(x) for x in eps):
        return {"basic": math.inf, "advanced": math.inf, "zcdp": math.inf, "pld": math.inf}
    ec, eo, ea = eps
    rnd = eo + ea
    rho = ec ** 2 / 2.0 + steps * (eo ** 2 / 8.0 + ea ** 2 / 2.0)
    return {
        "basic": ec + steps * rnd,
        "advanced": ec + (advanced_composition_epsilon(rnd, steps, delta) if rnd > 0 else 0.0),
        "zcdp": float(_zcdp.zcdp_to_dp(rho, delta)) if rho > 0 else 0.0,
        "pld": _pld_epsilon(ec, eo, ea, steps, delta),
    }


def oracle_learner_epsilon(count_epsilon: float, oracle_epsilon: float, auditor_epsilon: float, steps: int,
                           delta: float) -> tuple[float, str]:
    """``(epsilon, bound)``: the least of :func:`oracle_learner_bounds` (each valid at ``delta``,
    so their minimum is) and the name of the bound that gave it."""
    bounds = oracle_learner_bounds(count_epsilon, oracle_epsilon, auditor_epsilon, steps, delta)
    name = min(bounds, key=lambda k: bounds[k])
    return bounds[name], name


def oracle_learner_event(count_epsilon: float, oracle_epsilon: float, auditor_epsilon: float,
                         steps: int) -> "dp_accounting.DpEvent":
    """The run as an RDP-accountable ``dp_accounting`` event (for composition with other releases
    and private selection): the count release ``LaplaceDpEvent(1 / eps_c)`` and ``steps`` rounds of
    the exponential mechanism as ``ZCDpEvent(eps_o^2 / 8)`` (it is ``eps_o``-bounded-range: Cesar &
    Rogers 2021) with ``LaplaceDpEvent(1 / eps_a)``. Each step is pure DP at its epsilon under the
    relation its sensitivity was computed for, so the event's bound holds under that relation. A
    zero epsilon is a step that is not run; ``inf`` anywhere: ``NonPrivateDpEvent``."""
    import dp_accounting

    steps = V.check_int("steps", steps)
    eps = _check_epsilons(count_epsilon, oracle_epsilon, auditor_epsilon)
    if any(math.isinf(x) for x in eps):
        return dp_accounting.NonPrivateDpEvent()
    ec, eo, ea = eps
    parts = ([dp_accounting.ZCDpEvent(eo ** 2 / 8.0)] if eo > 0 else []) + \
        ([dp_accounting.LaplaceDpEvent(1.0 / ea)] if ea > 0 else [])
    out = [dp_accounting.LaplaceDpEvent(1.0 / ec)] if ec > 0 else []
    if parts:
        out.append(dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(parts), steps))
    return dp_accounting.ComposedDpEvent(out)


def oracle_learner_curve(event: "dp_accounting.DpEvent", orders) -> np.ndarray:
    """The RDP curve at ``orders`` of :func:`oracle_learner_event` (dp-accounting's RDP accountant;
    its Laplace and zCDP curves depend only on the step's epsilon, so the curve holds under the
    relation of the sensitivities, e.g. a change of one ``s_i``)."""
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant(list(orders), dp_accounting.NeighboringRelation.REPLACE_ONE)
    if not acc.supports(event):
        raise ValueError(f"the RDP accountant cannot account {type(event).__name__}.")
    acc.compose(event)
    return np.asarray(acc._rdp, np.float64)  # noqa: SLF001 (the per-order curve of the composed event)


def paper_round_epsilon(epsilon: float, delta: float, steps: int) -> float:
    """Jagielski et al.'s per-round budget ``eps' = eps / (4 sqrt(T log(1/delta)))`` (for comparison;
    the kit's spend is :func:`oracle_learner_epsilon`)."""
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    steps = V.check_int("steps", steps)
    return float(epsilon) / (4.0 * math.sqrt(steps * math.log(1.0 / delta)))
