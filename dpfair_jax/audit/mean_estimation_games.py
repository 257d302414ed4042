"""Audit games of the private means of paper 003 (:mod:`dpfair_jax.algorithms.mean_estimation`).

Each builder has the contract of :mod:`dpfair_jax.audit.mechanism_audits`:
``builder(*, bug=None, **kw) -> (mechanism_fn(key, flag) -> scalar, info)``, ``flag = 0`` runs
the public estimator on ``D0`` and ``flag = 1`` on its neighbour ``D1``, higher statistics mean
"``D1``"; ``info`` has ``claimed_epsilon``, ``delta`` and ``relation`` (what the kit's own spend
function reports for that configuration). Both families drive
:func:`~dpfair_jax.algorithms.mean_estimation.stratified_coinpress` on its default configuration
(two COINPRESS steps with the paper's ``[1/4, 3/4]`` split, prior ball ``B(0, 3)``,
``clip_mode="fresh"``, size-fraction weights); only the total budget is set small (``rho = 0.05``)
so that the claimed epsilon is within reach of a few thousand trials.

* ``stratified_coinpress``: replace-one within a stratum (the default relation; exact sizes,
  public by the relation). Two strata; the canary ``+canary_scale`` (far outside every clip
  ball) in stratum 0 becomes ``-canary_scale`` in ``D1``, which moves stratum 0's clipped sum by
  ``2 C_t`` in every step, the full sensitivity. Statistic: ``-group_means[0]``, the released
  estimate of the canary's stratum (the recombined estimate would add stratum 1's noise).
* ``mean_add_remove``: ``relation="add_remove"`` with its default noisy counts
  (``count_rho = DEFAULT_COUNT_FRACTION * sum(rhos)``). ``D1`` is ``D0`` plus a canary
  ``+canary_scale`` in stratum 0 (both worlds computed, selected by ``flag``); the other rows of
  stratum 0 are ``+-1`` with sum 0, so the canary's clipped contribution ``C_t`` is the only
  systematic move of the stratum's estimate. The canary changes stratum 0's size by one: if the
  released ``sizes[0]`` is an integer (exact sizes), the statistic is ``1000 (sizes[0] - n0 -
  0.5)``, which separates the worlds with certainty; otherwise it is ``group_means[0] *
  sizes[0]``, the last step's noisy clipped sum (plus a small term from the first step's
  centre). Noisy counts are integers with probability ~0, so for the corrected default the
  statistic is that noisy sum. Claim:
  :func:`~dpfair_jax.algorithms.mean_estimation.stratified_privacy` with
  ``relation="add_remove"`` (``sum(rhos)`` plus the default count budget).

Planted bugs (the audit must report a lower bound above the claimed epsilon):

* ``"noise"``: every budget x 100 (every noise std / 10, the counts' included), the nominal
  spend claimed;
* ``"noise_third"``: every budget x 9 (noise std / 3), the nominal spend claimed.
  ``stratified_coinpress``: std / 2 shows only in the tails of the statistic (lower bounds
  1.17-1.74 over seven keys at 400,000 trials per world against the claimed 1.31: not reliably
  caught), so the registered factor is std / 3, caught at 100,000 trials. ``mean_add_remove``: Std / 2 is not caught here even at 10^6 trials per world (lower bounds 1.10-1.45
  against the claimed 1.38: the noisy denominators add variance); std / 3 is the smallest
  factor caught at 40,000 trials (std / 2.5 needs about 100,000);
* ``"exact_counts"`` (``mean_add_remove``): the former add/remove path, exact group sizes in
  every denominator, radius and returned ``sizes``, claiming the former spend ``sum(rhos)``
  (no count charge). It runs the estimator's internal path with the count release switched off;
  the library has no option for it.
"""

from __future__ import annotations

import functools

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.audit.games import check_family_bug
from dpfair_jax.privacy.accounting import zcdp_to_dp

__all__ = [
    "ALGORITHMS",
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "stratified_coinpress_mechanism",
    "mean_add_remove_mechanism",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "stratified_coinpress": ("noise", "noise_third"),
    "mean_add_remove": ("noise", "noise_third", "exact_counts"),
}
ALGORITHMS: dict[str, str] = {"stratified_coinpress": "mean_estimation", "mean_add_remove": "mean_estimation"}

# trials per world, sized so that every planted bug is caught at both sizes ("noise_third" of the
# replace-one game at 100,000; "noise_third" and "exact_counts" of the add/remove game at 40,000).
SUITE_TRIALS = {"quick": {"stratified_coinpress": 100000, "mean_add_remove": 40000},
                "full": {"stratified_coinpress": 400000, "mean_add_remove": 200000}}

_BUDGET_FACTOR = {None: 1.0, "noise": 100.0, "noise_half": 4.0, "noise_third": 9.0, "exact_counts": 1.0}


_check_bug = functools.partial(check_family_bug, FAMILY_BUGS)


def _check_common(rho: float, delta: float, canary_scale: float) -> np.ndarray:
    V.check_rho(rho)
    V.check_delta(delta)
    V.check_positive("canary_scale", canary_scale)
    return me.coinpress_rhos(float(rho))


def stratified_coinpress_mechanism(
    *,
    rho: float = 0.05,
    delta: float = 1e-5,
    bug: str | None = None,
    n: int = 8,
    canary_scale: float = 1000.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """StratCOINPRESS (default configuration, replace-one within a stratum, public sizes) with a
    canary replaced by its mirror image in its stratum.

    ``n`` rows in two strata (alternating ids, row 0, the canary, in stratum 0), 1-D data
    ``N(0, 1)``; ``rhos = coinpress_rhos(rho)``. ``claimed_epsilon``:
    ``stratified_privacy(rhos, 2, delta)``.

    Privacy: ``sum(rhos)``-zCDP under replace-one within a stratum.
    """
    _check_bug("stratified_coinpress", bug)
    rhos = _check_common(rho, delta, canary_scale)
    n = V.check_int("n", n, minimum=4)
    spend = me.stratified_privacy(rhos, 2, delta)
    run_rhos = jnp.asarray(rhos * _BUDGET_FACTOR[bug], jnp.float32)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n).astype(np.float32)
    x[0] = canary_scale
    s = jnp.asarray(np.arange(n) % 2, jnp.int32)
    xj = jnp.asarray(x)
    flip = jnp.zeros((n,), jnp.float32).at[0].set(-2.0 * canary_scale)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        xs = xj + flag.astype(jnp.float32) * flip  # flag 1: the canary at -scale, same stratum
        est = me.stratified_coinpress(key, xs, s, 2, rhos=run_rhos)
        return -est.group_means[0, 0]

    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(delta), "rho": float(spend.rho),
            "relation": spend.relation}
    return mechanism_fn, info


def mean_add_remove_mechanism(
    *,
    rho: float = 0.05,
    delta: float = 1e-5,
    bug: str | None = None,
    n0: int = 50,
    n1: int = 30,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """StratCOINPRESS under ``relation="add_remove"`` (default noisy counts); ``D1`` adds a canary.

    Stratum 0 has ``n0`` (even) rows ``+-1`` (sum 0), stratum 1 ``n1`` rows ``N(0, 1)``; the
    canary ``+canary_scale`` joins stratum 0 in ``D1``. ``rhos = coinpress_rhos(rho)``.
    ``claimed_epsilon``: ``stratified_privacy(rhos, 2, delta, relation="add_remove")`` (the
    ``"exact_counts"`` bug claims the former ``sum(rhos)`` alone).

    Privacy: ``(sum(rhos) + count_rho)``-zCDP under add/remove, ``count_rho`` the default
    ``DEFAULT_COUNT_FRACTION * sum(rhos)``.
    """
    _check_bug("mean_add_remove", bug)
    rhos = _check_common(rho, delta, canary_scale)
    n0 = V.check_int("n0", n0, minimum=2)
    n1 = V.check_int("n1", n1, minimum=1)
    if n0 % 2:
        raise ValueError(f"n0 must be even (its rows are +-1 with sum 0), got {n0}.")
    spend = me.stratified_privacy(rhos, 2, delta, relation="add_remove")
    factor = _BUDGET_FACTOR[bug]
    run_rhos = jnp.asarray(rhos * factor, jnp.float32)
    rng = np.random.default_rng(seed)
    x0 = np.concatenate([np.tile([1.0, -1.0], n0 // 2), rng.normal(size=n1)]).astype(np.float32)
    s0 = np.concatenate([np.zeros(n0, np.int32), np.ones(n1, np.int32)])
    x1 = np.concatenate([x0, np.float32([canary_scale])])
    s1 = np.concatenate([s0, np.zeros(1, np.int32)])
    worlds = ((jnp.asarray(x0), jnp.asarray(s0)), (jnp.asarray(x1), jnp.asarray(s1)))

    if bug == "exact_counts":
        # The former path: add/remove noise (sensitivity 1) with the exact sizes and no count
        # release. The public replace-one path with 4x the budget draws exactly that noise
        # (sigma = 2 C / sqrt(2 * 4 rho) = C / sqrt(2 rho)) from the exact sizes.
        def estimate(key, x, s):
            return me.stratified_coinpress(key, x, s, 2, center=0.0, radius=3.0,
                                           rhos=4.0 * jnp.asarray(run_rhos), relation="replace_one",
                                           clip_mode="fresh", beta=me.REFERENCE_BETA)
        claimed = zcdp_to_dp(float(np.sum(rhos)), delta)
    else:
        count_rho = me.resolve_count_rho("add_remove", float(np.sum(rhos))) * factor

        def estimate(key, x, s):
            if bug is None:  # the public default: count_rho left to the estimator
                return me.stratified_coinpress(key, x, s, 2, rhos=run_rhos, relation="add_remove")
            return me.stratified_coinpress(key, x, s, 2, rhos=run_rhos, relation="add_remove",
                                           count_rho=count_rho)
        claimed = float(spend.epsilon)

    def stat(key: jax.Array, x: jax.Array, s: jax.Array) -> jax.Array:
        est = estimate(key, x, s)
        size = est.sizes[0]
        exact = size == jnp.round(size)
        return jnp.where(exact, 1000.0 * (size - (n0 + 0.5)), est.group_means[0, 0] * size)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        return jnp.where(flag == 1, stat(key, *worlds[1]), stat(key, *worlds[0]))

    info = {"claimed_epsilon": float(claimed), "delta": float(delta),
            "rho": float(np.sum(rhos)) if bug == "exact_counts" else float(spend.rho),
            "relation": "add_remove"}
    return mechanism_fn, info


BUILDERS: dict[str, Callable[..., tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]]] = {
    "stratified_coinpress": stratified_coinpress_mechanism,
    "mean_add_remove": mean_add_remove_mechanism,
}
