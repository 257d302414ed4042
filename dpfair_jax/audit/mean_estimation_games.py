"""Audit games of the private means of paper 003, each a
:class:`~dpfair_jax.audit.fit_spend.FitSpendGame` on ``mean_estimation.fit`` / ``mean_estimation.spend``.

Each builder has the contract of :mod:`dpfair_jax.audit.mechanism_audits`:
``builder(*, bug=None, **kw) -> (mechanism_fn(key, flag) -> scalar, info)``, ``flag = 0`` runs
``mean_estimation.fit`` on ``D0`` and ``flag = 1`` on its neighbour ``D1``, higher statistics
mean "``D1``"; ``info`` has ``claimed_epsilon`` (``mean_estimation.spend`` of the nominal
hparams), ``delta`` and ``relation``. Both families run StratCOINPRESS on the default
``MeanConfig`` (two COINPRESS steps with the paper's ``[1/4, 3/4]`` split, prior ball
``B(0, 3)``, ``clip_mode="fresh"``, size-fraction weights) with two strata; only the total budget
is set small (``rho = 0.05``) so that the claimed epsilon is within reach of a few thousand
trials. A planted noise bug scales ``hparams.rho`` of the run (every noise std, the counts'
included), the claim staying the nominal spend.

* ``stratified_coinpress``: replace-one within a stratum (``"replace_one_within_group"``, the
  default relation; exact sizes, public by the relation). Two strata; the canary ``+canary_scale`` (far outside every clip
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
  statistic is that noisy sum. Claim: ``mean_estimation.spend`` with ``relation="add_remove"``
  (``rho`` plus the default count budget), the larger over both worlds' sizes.

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
  (no count charge, a claim-side variant). The run is ``fit`` with
  ``relation="replace_one_within_group"`` (exact sizes) at ``4 rho``, which draws exactly the
  former add/remove noise.
* ``"cross_group"`` (``stratified_coinpress``): the former label, the within-stratum spend claimed
  for neighbours that move the canary to the other stratum (general replace-one, a claim-side
  variant: the spend's own relation does not cover this pair, so
  :meth:`~dpfair_jax.audit.fit_spend.FitSpendGame.spend` refuses the game with
  ``relation="replace_one"``). The released exact ``sizes`` differ between the worlds; the
  statistic ``-sizes[0]`` separates them with certainty, so the bound is only limited by the
  trials.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.audit.fit_spend import FitSpendGame, replace_fields
from dpfair_jax.audit.games import check_family_bug
from dpfair_jax.privacy.accounting import zcdp_to_dp

__all__ = [
    "ALGORITHMS",
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "stratified_coinpress_game",
    "stratified_coinpress_mechanism",
    "mean_add_remove_game",
    "mean_add_remove_mechanism",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "stratified_coinpress": ("noise", "noise_third", "cross_group"),
    "mean_add_remove": ("noise", "noise_third", "exact_counts"),
}
ALGORITHMS: dict[str, str] = {"stratified_coinpress": "mean_estimation", "mean_add_remove": "mean_estimation"}

# trials per world, sized so that every planted bug is caught at both sizes ("noise_third" of the
# replace-one game at 100,000; "noise_third" and "exact_counts" of the add/remove game at 40,000).
SUITE_TRIALS = {"quick": {"stratified_coinpress": 100000, "mean_add_remove": 40000},
                "full": {"stratified_coinpress": 400000, "mean_add_remove": 200000}}

_BUDGET_FACTOR = {None: 1.0, "noise": 100.0, "noise_half": 4.0, "noise_third": 9.0, "exact_counts": 1.0,
                  "cross_group": 1.0}


_check_bug = functools.partial(check_family_bug, FAMILY_BUGS)


def _check_common(rho: float, delta: float, canary_scale: float) -> None:
    V.check_rho(rho)
    V.check_delta(delta)
    V.check_positive("canary_scale", canary_scale)


def stratified_coinpress_game(
    *,
    rho: float = 0.05,
    delta: float = 1e-5,
    bug: str | None = None,
    n: int = 8,
    canary_scale: float = 1000.0,
    seed: int = 0,
) -> FitSpendGame:
    """StratCOINPRESS (``mean_estimation.fit`` on ``MeanConfig(num_groups=2)``: replace-one within
    a stratum, public sizes) with a canary replaced by its mirror image in its stratum.

    ``n`` rows in two strata (alternating ids, row 0, the canary, in stratum 0), 1-D data
    ``N(0, 1)``; ``hparams.rho = rho`` split ``[1/4, 3/4]``. Claim: ``mean_estimation.spend``.
    ``bug="cross_group"``: the canary keeps its value and moves to stratum 1 in ``D1`` (sizes
    ``(n/2, n/2)`` against ``(n/2 - 1, n/2 + 1)``), statistic ``-sizes[0]``, claim the
    within-stratum spend (module docstring).

    Privacy: ``rho``-zCDP under replace-one within a stratum; not covered across strata.
    """
    _check_bug("stratified_coinpress", bug)
    _check_common(rho, delta, canary_scale)
    n = V.check_int("n", n, minimum=4)
    config = me.MeanConfig(method="coinpress", num_groups=2, delta=float(delta))
    hp = me.MeanHparams(rho=float(rho))
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n).astype(np.float32)
    x[0] = canary_scale
    s = jnp.asarray(np.arange(n) % 2, jnp.int32)
    xj = jnp.asarray(x)
    flip = jnp.zeros((n,), jnp.float32).at[0].set(-2.0 * canary_scale)

    sizes = (int(np.sum(np.arange(n) % 2 == 0)), int(np.sum(np.arange(n) % 2 == 1)))
    run = replace_fields(hp, rho=hp.rho * _BUDGET_FACTOR[bug])
    if bug == "cross_group":
        def moved(flag: jax.Array):
            return (xj, s.at[0].set(flag.astype(jnp.int32)))  # flag 1: the canary in stratum 1

        def released_size(res) -> jax.Array:
            return -res.params.sizes[0]

        return FitSpendGame(
            algorithm=me, config=config, hparams=hp, neighbours=moved, statistic=released_size,
            sizes=(sizes, (sizes[0] - 1, sizes[1] + 1)), run_hparams=run,
            info={"relation": "replace_one"},  # the pair's relation; the claim is the within-group spend
        )

    def neighbours(flag: jax.Array):
        return (xj + flag.astype(jnp.float32) * flip, s)  # flag 1: the canary at -scale, same stratum

    def stat(res) -> jax.Array:
        return -res.params.group_means[0, 0]

    return FitSpendGame(
        algorithm=me, config=config, hparams=hp, neighbours=neighbours, statistic=stat,
        sizes=(sizes, sizes), relation="replace_one_within_group", run_hparams=run,
    )


def stratified_coinpress_mechanism(*, bug: str | None = None, **kw: Any
                                   ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`stratified_coinpress_game`. Privacy: as the game's."""
    return stratified_coinpress_game(bug=bug, **kw).build()


def mean_add_remove_game(
    *,
    rho: float = 0.05,
    delta: float = 1e-5,
    bug: str | None = None,
    n0: int = 50,
    n1: int = 30,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> FitSpendGame:
    """StratCOINPRESS under ``relation="add_remove"`` (``mean_estimation.fit``, default noisy
    counts); ``D1`` adds a canary.

    Stratum 0 has ``n0`` (even) rows ``+-1`` (sum 0), stratum 1 ``n1`` rows ``N(0, 1)``; the
    canary ``+canary_scale`` joins stratum 0 in ``D1``. Claim: ``mean_estimation.spend``
    (``rho`` plus the default count budget); the ``"exact_counts"`` bug runs
    ``relation="replace_one_within_group"`` at ``4 rho`` (the former add/remove noise from the
    exact sizes)
    and claims the former ``rho`` alone.

    Privacy: ``(rho + count_rho)``-zCDP under add/remove, ``count_rho`` the default
    ``DEFAULT_COUNT_FRACTION * rho``.
    """
    _check_bug("mean_add_remove", bug)
    _check_common(rho, delta, canary_scale)
    n0 = V.check_int("n0", n0, minimum=2)
    n1 = V.check_int("n1", n1, minimum=1)
    if n0 % 2:
        raise ValueError(f"n0 must be even (its rows are +-1 with sum 0), got {n0}.")
    config = me.MeanConfig(method="coinpress", num_groups=2, relation="add_remove", delta=float(delta))
    hp = me.MeanHparams(rho=float(rho))
    rng = np.random.default_rng(seed)
    x0 = np.concatenate([np.tile([1.0, -1.0], n0 // 2), rng.normal(size=n1)]).astype(np.float32)
    s0 = np.concatenate([np.zeros(n0, np.int32), np.ones(n1, np.int32)])
    x1 = np.concatenate([x0, np.float32([canary_scale])])
    s1 = np.concatenate([s0, np.zeros(1, np.int32)])
    worlds = ((jnp.asarray(x0), jnp.asarray(s0)), (jnp.asarray(x1), jnp.asarray(s1)))

    def stat(res) -> jax.Array:
        size = res.params.sizes[0]
        exact = size == jnp.round(size)
        return jnp.where(exact, 1000.0 * (size - (n0 + 0.5)), res.params.group_means[0, 0] * size)

    if bug == "exact_counts":
        # The former path: add/remove noise (sensitivity 1) with the exact sizes and no count
        # release. The public-size path (replace-one within a group) with 4x the budget draws exactly that noise
        # (sigma = 2 C / sqrt(2 * 4 rho) = C / sqrt(2 rho)) from the exact sizes.
        run_config = dataclasses.replace(config, relation="replace_one_within_group")
        run = replace_fields(hp, rho=4.0 * hp.rho)
        claimed = zcdp_to_dp(float(rho), delta)
    else:
        run_config, run, claimed = None, replace_fields(hp, rho=hp.rho * _BUDGET_FACTOR[bug]), None
    return FitSpendGame(
        algorithm=me, config=config, hparams=hp, neighbours=worlds, statistic=stat,
        sizes=((n0, n1), (n0 + 1, n1)), relation="add_remove", run_hparams=run, run_config=run_config,
        claimed_epsilon=claimed,
    )


def mean_add_remove_mechanism(*, bug: str | None = None, **kw: Any
                              ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`mean_add_remove_game`. Privacy: as the game's."""
    return mean_add_remove_game(bug=bug, **kw).build()


BUILDERS: dict[str, Callable[..., tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]]] = {
    "stratified_coinpress": stratified_coinpress_mechanism,
    "mean_add_remove": mean_add_remove_mechanism,
}
