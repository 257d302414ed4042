"""Losses and risks per group: group mean loss, MSPE, paper 001's excessive risks (eqs. 9, 10) and
paper 003's parity error (Definition 10)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.fairness.metrics._core import Array, _check_common, _row_weights, _safe_div


@functools.partial(jax.jit, static_argnames=("num_groups",))
def _group_means_last_axis(values: Array, s: Any, num_groups: int, w: Array) -> tuple[Array, Array]:
    """Weighted group means over the last axis of ``values [..., n]`` -> ``[..., K]``, counts."""
    onehot_w = jax.nn.one_hot(jnp.asarray(s, jnp.int32), num_groups, dtype=jnp.float32) * w[:, None]
    counts = jnp.sum(onehot_w, axis=0)
    return _safe_div(values.astype(jnp.float32) @ onehot_w, counts), counts


def _check_losses(name: str, values: Any, n: int) -> None:
    if np.ndim(values) < 1 or np.shape(values)[-1] != n:
        raise ValueError(
            f"{name} must have shape [..., n] with n = {n} (one value per row, as s); "
            f"got {np.shape(values)}."
        )
    v.check_finite(name, values)


def group_mean_loss(
    losses: Any, s: Any, num_groups: int, *, mask: Any = None, weights: Any = None
) -> Array:
    """Group risks ``L(theta, D_a)``: weighted mean of per-example ``losses [..., n]`` per group.

    Returns ``[..., num_groups]`` (leading axes, e.g. trials, are kept); 0 for an empty group.
    """
    n = int(np.shape(s)[0]) if np.ndim(s) == 1 else -1
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="s", n_value=s)
    _check_losses("losses", losses, n)
    w = _row_weights(n, mask, weights)
    return _group_means_last_axis(jnp.asarray(losses), s, num_groups, w)[0]


def group_mspe(
    pred: Any, y: Any, s: Any, num_groups: int, *, mask: Any = None, weights: Any = None
) -> Array:
    """Mean squared prediction error per group ``mean_{i in a} (pred_i - y_i)^2``.

    ``pred [..., n]`` (leading axes such as trials are kept), ``y [n]``; returns
    ``[..., num_groups]``, 0 for an empty group.
    """
    n = int(np.shape(s)[0]) if np.ndim(s) == 1 else -1
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y", n_value=y)
    _check_losses("pred", pred, n)
    v.check_finite("y", y)
    err = (jnp.asarray(pred, jnp.float32) - jnp.asarray(y, jnp.float32)) ** 2
    return _group_means_last_axis(err, s, num_groups, _row_weights(n, mask, weights))[0]


class ExcessiveRisk(NamedTuple):
    """Paper 001's excessive risks.

    Attributes:
      group: ``R_a = E[L(theta_private, D_a)] - L(theta*, D_a)`` per group ``[K]`` (eq. 9).
      population: ``R = E[L(theta_private, D)] - L(theta*, D)`` (eq. 10).
      group_gap: ``xi_a = |R_a - R|`` per group ``[K]`` (eq. 2); 0 for an empty group.
      gap: ``max_a xi_a``, the excessive-risk gap.
      counts: group weights ``[K]`` (0 marks an empty group).
    """

    group: Array
    population: Array
    group_gap: Array
    gap: Array
    counts: Array


def excessive_risk(
    private_losses: Any, reference_losses: Any, s: Any, num_groups: int, *,
    mask: Any = None, weights: Any = None,
) -> ExcessiveRisk:
    """Excessive risk per group and its gap (paper 001, eqs. 9, 10 and 2).

    ``private_losses``: per-example losses of the private model, ``[n]`` for one run or
    ``[T, n]`` for ``T`` runs (the expectation over the mechanism is the mean over runs).
    ``reference_losses``: per-example losses of the non-private reference, ``[n]`` (one optimum
    ``theta*``, e.g. for output perturbation) or ``[T, n]`` (a per-run reference, e.g. the
    non-private model trained with the same schedule and seed for DP-SGD; averaged the same way).
    The population risk is the weighted mean over all rows, so ``R = sum_a p_a R_a``.
    """
    n = int(np.shape(s)[0]) if np.ndim(s) == 1 else -1
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="s", n_value=s)
    for name, arr in (("private_losses", private_losses), ("reference_losses", reference_losses)):
        _check_losses(name, arr, n)
        if np.ndim(arr) > 2:
            raise ValueError(f"{name} must have shape [n] or [T, n], got {np.shape(arr)}.")
    w = _row_weights(n, mask, weights)

    def mean_over_runs(losses: Any) -> Array:
        losses = jnp.asarray(losses, jnp.float32)
        return losses if losses.ndim == 1 else jnp.mean(losses, axis=0)

    diff = mean_over_runs(private_losses) - mean_over_runs(reference_losses)  # [n]
    group, counts = _group_means_last_axis(diff, s, num_groups, w)
    population = _safe_div(jnp.sum(w * diff), jnp.sum(w))
    present = counts > 0
    group_gap = jnp.where(present, jnp.abs(group - population), 0.0)
    return ExcessiveRisk(group, population, group_gap, jnp.max(group_gap), counts)


def excessive_risk_gap(group_risk: Any, population_risk: Any, *, counts: Any = None) -> Array:
    """``max_a |R_a - R|`` (paper 001, eq. 2) from group risks ``[..., K]`` and ``R [...]``.

    Groups with ``counts == 0`` (if given) are excluded.
    """
    v.check_finite("group_risk", group_risk)
    v.check_finite("population_risk", population_risk)
    g = jnp.asarray(group_risk, jnp.float32)
    if g.ndim < 1:
        raise ValueError(f"group_risk must have a trailing group axis, got shape {g.shape}.")
    gap = jnp.abs(g - jnp.asarray(population_risk, jnp.float32)[..., None])
    if counts is not None:
        if np.shape(counts) != (g.shape[-1],):
            raise ValueError(f"counts must have shape ({g.shape[-1]},), got {np.shape(counts)}.")
        gap = jnp.where(jnp.asarray(counts) > 0, gap, 0.0)
    return jnp.max(gap, axis=-1)


def parity_error(
    true_groups: Any, est_groups: Any, true_population: Any = None,
    est_population: Any = None, *, omega: Any = None, average: bool = False,
    normalize: bool = True, group_mask: Any = None,
) -> Array:
    """Parity error of group estimates (paper 003, Definition 10, eq. 6):

        phi = omega |(f(X) - M_f(X)) / f(X)| + sum_{i=1..k} |(f(G_i) - M_f(G_i)) / f(G_i)|.

    ``true_groups``/``est_groups``: ``f(G_i)`` and ``M_f(G_i)``, shape ``[k]`` or ``[k, F]`` for a
    vector-valued ``f`` (e.g. column means, Fig. 5). ``true_population``/``est_population``:
    ``f(X)`` and ``M_f(X)``, shape ``[]`` or ``[F]`` (omit both to drop the population term).
    Vector-valued terms are summed over ``F`` (the Fig. 5 code sums over columns).

    Options (the paper's text and formula disagree; see notes/stratification_003.md section 4):

    - ``omega``: population weight, default ``1/k`` (the paper's choice; traced arrays allowed).
    - ``average=False`` (default): the formula as printed, a *sum* over strata. ``average=True``:
      the text's "average normalized absolute error", ``(1/k) sum_i``; with ``omega = 1/k`` it
      weighs the population like one stratum, as the text intends.
    - ``normalize=False``: absolute errors ``|f - M_f|`` without dividing by ``f``; with the
      population term omitted this is the Fig. 2 code's "disparate impact error".
    - ``group_mask [k]``: strata to include (e.g. strata present in the data); 0 drops a stratum,
      and ``k`` in ``1/k`` (omega's default and ``average``) becomes the number included.

    Terms whose reference value ``f`` is 0 are dropped (they are ``0/0`` NaN or inf in the paper's
    code, whose Fig. 5 sum ignores NaN), so the result is always finite.
    """
    for name, arr in (("true_groups", true_groups), ("est_groups", est_groups)):
        if np.ndim(arr) not in (1, 2):
            raise ValueError(f"{name} must have shape [k] or [k, F], got {np.shape(arr)}.")
        v.check_finite(name, arr)
    if np.shape(true_groups) != np.shape(est_groups):
        raise ValueError(
            f"true_groups {np.shape(true_groups)} and est_groups {np.shape(est_groups)} must have "
            "the same shape."
        )
    k = int(np.shape(true_groups)[0])
    if k == 0:
        raise ValueError("true_groups is empty; pass at least one stratum.")
    if (true_population is None) != (est_population is None):
        raise ValueError("pass both true_population and est_population, or neither.")
    if true_population is not None:
        want = np.shape(true_groups)[1:]
        for name, arr in (("true_population", true_population), ("est_population", est_population)):
            if np.shape(arr) != want:
                raise ValueError(f"{name} must have shape {want}, got {np.shape(arr)}.")
            v.check_finite(name, arr)
    if omega is not None:
        v.check_positive("omega", omega, allow_zero=True)
    if group_mask is not None and np.shape(group_mask) != (k,):
        raise ValueError(f"group_mask must have shape ({k},), got {np.shape(group_mask)}.")

    def term(true: Any, est: Any) -> Array:
        true = jnp.asarray(true, jnp.float32)
        err = jnp.abs(true - jnp.asarray(est, jnp.float32))
        if not normalize:
            return err
        return jnp.where(true != 0, err / jnp.where(true != 0, jnp.abs(true), 1.0), 0.0)

    strata = term(true_groups, est_groups)
    if strata.ndim == 2:
        strata = jnp.sum(strata, axis=1)
    k_eff: Any = k
    if group_mask is not None:
        gm = jnp.asarray(group_mask, jnp.float32)
        strata = strata * gm
        k_eff = jnp.maximum(jnp.sum(gm), 1.0)
    total = jnp.sum(strata) / k_eff if average else jnp.sum(strata)
    if true_population is not None:
        w = 1.0 / k_eff if omega is None else jnp.asarray(omega, jnp.float32)
        total = total + w * jnp.sum(term(true_population, est_population))
    return total
