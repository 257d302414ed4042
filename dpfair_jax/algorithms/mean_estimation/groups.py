"""Group sizes, recombination weights and the checks shared by the stratified mean estimators.

Paper 003 (eqs. 2-3): the estimators divide each group's noisy sum by its size and recombine the
group means with weights ``w_g``. Under replace-one within a stratum
(``"replace_one_within_group"``) the sizes are public; under add/remove and general replace-one
(a record may move to another stratum) they are released as Gaussian noisy counts
(:func:`noisy_counts`, budget :func:`resolve_count_rho`) and those replace the sizes everywhere.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax._validation import is_traced
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy.mechanisms import gaussian_noise
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.zcdp_noise import gaussian_std, pure_dp_rho

__all__ = ["RELATIONS", "DEFAULT_COUNT_FRACTION", "StratifiedEstimate", "resolve_count_rho",
           "public_weights", "noisy_counts"]

RELATIONS = ("replace_one_within_group", "replace_one", "add_remove")
# Under add/remove and replace-one (across strata) the group sizes are noised with count_rho = DEFAULT_COUNT_FRACTION x the
# estimator's own zCDP budget unless count_rho is given (charged on top of that budget).
DEFAULT_COUNT_FRACTION = 0.1


class StratifiedEstimate(NamedTuple):
    """Output of the stratified estimators.

    ``estimate [d]``: the recombined global estimate ``sum_g w_g mu_g`` (eq. 3);
    ``group_means [k, d]``: the private per-group estimates (the released group statistics);
    ``weights [k]``: the recombination weights (sum to 1 over present groups);
    ``sizes [k]``: the sizes used as denominators: exact (replace-one within a group, public sizes)
    or the noisy counts (add/remove, replace-one, or ``count_rho`` given), set to 0 where a noisy count is below 1;
    ``present [k]``: bool, the group has at least one member (or a noisy count >= 1);
    ``radius [k]``: COINPRESS's final radius per group (the clip half-width for clipped means).
    """

    estimate: jax.Array
    group_means: jax.Array
    weights: jax.Array
    sizes: jax.Array
    present: jax.Array
    radius: jax.Array


# ------------------------------------------------------------------------------------------------
# host-side checks
# ------------------------------------------------------------------------------------------------
def _as_2d(x: Any) -> tuple[jax.Array, bool]:
    x = jnp.asarray(x, jnp.float32)
    if x.ndim == 1:
        return x[:, None], True
    if x.ndim != 2:
        raise ValueError(f"x must have shape [n] or [n, d], got {x.shape}.")
    return x, False


def _check_data(x: Any, s: Any = None, num_groups: int = 1) -> None:
    if np.ndim(x) not in (1, 2):
        raise ValueError(f"x must have shape [n] or [n, d], got {np.shape(x)}.")
    if np.shape(x)[0] == 0:
        raise ValueError("x is empty; pass at least one row.")
    v.check_finite("x", x)
    if s is not None:
        v.check_int("num_groups", num_groups, minimum=1)
        v.check_shape("s", s, ndim=1)
        v.check_same_length(x=x, s=s)
        v.check_group_ids(s, num_groups, "s")


def _check_relation(relation: Any) -> str:
    """The relation's record name (one of :data:`RELATIONS`); "swap" is refused."""
    return rel.relation_name(relation)


def _check_gamma(gamma: Any) -> None:
    if is_traced(gamma):
        return
    g = np.asarray(gamma, np.float64)
    if np.any(~np.isfinite(g)) or np.any(g <= 0) or np.any(g >= 1):
        raise ValueError(f"gamma must lie in (0, 1) (a failure probability), got {gamma!r}.")


def _check_weights(weights: Any, num_groups: int) -> None:
    if weights is None:
        return
    if np.shape(weights) != (num_groups,):
        raise ValueError(f"weights must have shape ({num_groups},), one per group, got {np.shape(weights)}.")
    v.check_positive("weights", weights, allow_zero=True)
    if not is_traced(weights) and float(np.sum(weights)) <= 0:
        raise ValueError("weights sum to 0; pass public group weights with a positive sum.")


def resolve_count_rho(relation: str, budget_rho: Any, count_rho: Any = None) -> Any:
    """The count budget a run actually spends on its group sizes.

    ``count_rho`` if given (any relation); otherwise, under ``"add_remove"`` and ``"replace_one"``
    (where a size differs between neighbours: one record added or removed, or moved to another
    stratum), ``DEFAULT_COUNT_FRACTION * budget_rho`` (``budget_rho`` is the estimator's own zCDP
    budget: ``sum(rhos)`` for COINPRESS, ``rho`` for the Gaussian mean, ``epsilon^2 / 2`` for the
    Laplace mean; traced budgets give a traced count budget); under
    ``"replace_one_within_group"``, ``None`` (exact sizes, public by the relation). Estimators and
    spend functions share this one rule.

    Privacy: the returned budget is what the noisy counts cost (``count_rho``-zCDP, Gaussian,
    sensitivity 1 under add/remove, ``sqrt 2`` under replace-one), charged on top of ``budget_rho``.
    """
    relation = _check_relation(relation)
    if count_rho is not None:
        return count_rho
    if rel.within_group(relation):
        return None
    return DEFAULT_COUNT_FRACTION * budget_rho


# ------------------------------------------------------------------------------------------------
# group sizes and weights
# ------------------------------------------------------------------------------------------------
def _counts(s: jax.Array, num_groups: int) -> jax.Array:
    return jax.ops.segment_sum(jnp.ones(s.shape, jnp.float32), s, num_segments=num_groups)


def public_weights(s_public: Any, num_groups: int) -> jax.Array:
    """Group proportions of a disjoint public sample (Pub-StratCOINPRESS): ``[num_groups]``.

    Privacy: computed from public data only; costs nothing. Groups absent from the public sample
    get weight 0 (their private estimates are then released but not recombined).
    """
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_shape("s_public", s_public, ndim=1)
    if np.shape(s_public)[0] == 0:
        raise ValueError("s_public is empty; pass the group ids of the public sample.")
    v.check_group_ids(s_public, num_groups, "s_public")
    c = _counts(jnp.asarray(s_public, jnp.int32), num_groups)
    return c / jnp.sum(c)


@full_precision
def noisy_counts(key: jax.Array, s: Any, num_groups: int, count_rho: Any, *,
                 relation: str = "add_remove") -> jax.Array:
    """Group counts plus ``N(0, sigma^2)`` with ``sigma = Delta / sqrt(2 count_rho)`` (not rounded).

    Privacy: ``count_rho``-zCDP. ``Delta = 1`` under add/remove (one count changes by 1) and
    ``sqrt 2`` under replace-one, within a group too (a record may move between strata: two
    counts change by 1; within a group none does, so ``sqrt 2`` is an upper bound there).

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    v.check_threefry_key(key)
    relation = _check_relation(relation)
    v.check_rho(count_rho, "count_rho")
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_group_ids(s, num_groups, "s")
    return _noisy_counts(key, jnp.asarray(s, jnp.int32), num_groups, count_rho, relation)


def _noisy_counts(key, s, num_groups, count_rho, relation):
    delta = rel.histogram_sensitivity("l2").under(relation)  # 1 (add/remove), sqrt 2 (replace one)
    sigma = gaussian_std(delta, jnp.asarray(count_rho, jnp.float32))
    return _counts(s, num_groups) + gaussian_noise(key, (num_groups,), sigma)


def _sizes_and_weights(key, s, num_groups, weights, count_rho, relation):
    """(denominators [k], present [k], weights [k]); denominators >= 1 where present."""
    exact = _counts(s, num_groups)
    if count_rho is None:
        sizes = exact
        present = exact > 0
    else:
        sizes = _noisy_counts(key, s, num_groups, count_rho, relation)
        present = sizes >= 1.0
        sizes = jnp.where(present, sizes, 0.0)
    if weights is None:
        w = jnp.where(present, sizes, 0.0)
    else:
        w = jnp.where(present, jnp.asarray(weights, jnp.float32), 0.0)
    total = jnp.sum(w)
    w = jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 0.0)
    return sizes, present, w


def _recombine(group_means: jax.Array, w: jax.Array) -> jax.Array:
    return w @ group_means


def _common_checks(key, x, s, num_groups, weights, relation, count_rho) -> str:
    """Validate the shared arguments; returns the relation's record name."""
    v.check_threefry_key(key)
    _check_data(x, s, num_groups)
    relation = _check_relation(relation)
    _check_weights(weights, num_groups)
    if count_rho is not None:
        v.check_rho(count_rho, "count_rho")
    return relation



def _laplace_budget(epsilon: Any) -> Any:
    """The zCDP budget of an ``epsilon``-DP release: ``epsilon^2 / 2`` (Bun and Steinke, Prop. 1.4)."""
    return pure_dp_rho(epsilon)

