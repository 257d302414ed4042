"""Fast paths of budget tailoring (paper 000): several methods on one dataset as one batched
computation, and a dataset prepared once (optionally as a :class:`~.tables.ClippedSumTable`) for
many runs.

Privacy: each entry of a batched result is that method's run (``rho``-zCDP each, as :func:`.fit`);
the noise draws passed to :func:`fit_many_from_draws` must be fresh i.i.d. ``N(0, 1)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax._validation import is_traced
from dpfair_jax.privacy.precision import full_precision

from .core import (Config, Diagnostics, Hyperparams, _budget, _denominators, _prepare, _run_draws, _spent,
                   _split_draws)
from .stage1 import _stage1
from .stage2 import _descent, _release_params, _scalar_ols
from .tables import ClippedSumTable, clipped_sum_table

__all__ = ["fit_many", "fit_many_from_draws", "fit_many_prepared", "prepare", "Prepared"]


@full_precision
def fit_many(keys: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
             hparams: Hyperparams, configs: tuple[Config, ...], weights: jax.Array | None = None
             ) -> tuple[jax.Array, Diagnostics]:
    """Lower level: use :func:`~.algorithm.fit` (records no spend; :func:`~.ledger.spend` states
    each entry's). Several methods on the same data as one batched computation: entry ``m`` equals
    ``fit_arrays(keys[m], x, y, s, num_groups, hparams, configs[m])``.

    The configs may differ only in ``method``, ``fairness`` and ``scaling``; the methods with the
    same ``fairness`` share one vmapped descent (the methods differ only in traced scales and noise
    stds), which keeps the compiled program small. No host validation (use inside jit/vmap).
    Returns ``theta [M, P]`` and stacked :class:`Diagnostics`.

    Privacy: each entry is that method's run (``rho``-zCDP each); releasing several entries
    composes their budgets.
    """
    configs = tuple(configs)
    base = dataclasses.replace(configs[0], method="dpse", fairness=False, scaling="group_mean")
    for c in configs:
        c.validate()
        if dataclasses.replace(c, method="dpse", fairness=False, scaling="group_mean") != base:
            raise ValueError("fit_many configs may differ only in method, fairness and scaling; "
                             "run the others separately.")
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, base.fit_intercept)
    z = jax.vmap(lambda k: _run_draws(k, base.steps, xs.shape[0], num_groups, xs.dtype))(keys)
    return _fit_many_soa(z, xs, yy, onehot, n_k, xnorm, hparams, configs)


@full_precision
def fit_many_from_draws(draws: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array,
                        num_groups: int, hparams: Hyperparams, configs: tuple[Config, ...],
                        weights: jax.Array | None = None) -> tuple[jax.Array, Diagnostics]:
    """Lower level: use :func:`~.algorithm.fit` (records no spend). :func:`fit_many` with the
    standard normal draws given (``[M, num_draws(T, P, K)]``).

    ``fit_many(keys, ...)`` is this with ``draws[m] = normal(keys[m], (num_draws,))``. A Monte
    Carlo study can draw a whole trial's randomness in one call and slice it (fewer threefry
    calls to compile). The draws must be fresh i.i.d. N(0, 1) for the privacy guarantee.
    """
    configs = tuple(configs)
    _check_same_but_method(configs)
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, configs[0].fit_intercept)
    return _fit_many_soa(draws, xs, yy, onehot, n_k, xnorm, hparams, configs)


class Prepared(NamedTuple):
    """A dataset in the layout the descent uses, built once and shared by many runs
    (:func:`prepare`): ``xs [P, n]``, ``y [n]``, weighted one-hot ``onehot [n, K]``, ``n_k [K]``,
    row norms ``xnorm [n]`` and, for one feature with squared loss, the exact
    :class:`ClippedSumTable` (else ``None``)."""

    xs: jax.Array
    y: jax.Array
    onehot: jax.Array
    n_k: jax.Array
    xnorm: jax.Array
    table: ClippedSumTable | None


@full_precision
def prepare(x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int, config: Config, *,
            clip: Any = None, weights: jax.Array | None = None,
            clipped_sums: str = "auto") -> Prepared:
    """Lay out one dataset for many runs (budgets, methods) of :func:`fit_many_prepared`.

    ``clipped_sums``: ``"table"`` builds the :class:`ClippedSumTable` (needs one feature, no
    intercept, squared loss, and ``clip``: the ``Delta`` every run on it will use), so that each
    descent step costs ``O(K log n)`` instead of ``O(nK)`` after one ``O(n log n)`` sort: worth it
    when many runs share the data (a Monte Carlo trial with a budget grid). ``"direct"`` sums
    over the examples at every step; ``"auto"`` builds the table whenever it applies and ``clip``
    is given. Results agree up to float rounding (tested). jit/vmap-able.
    """
    v.check_choice("clipped_sums", clipped_sums, ("auto", "table", "direct"))
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, config.fit_intercept)
    applies = _scalar_ols(xs, config) and clip is not None
    if clipped_sums == "table" and not applies:
        raise ValueError("clipped_sums='table' needs one feature (fit_intercept=False), "
                         "loss='squared' and the clip bound (clip=...); use 'direct' otherwise.")
    # The descent projects onto [-box, box] and starts at 0, so every lookup lies in the box.
    domain = (-config.box, config.box) if math.isfinite(config.box) else None
    table = (clipped_sum_table(xs[0], yy, onehot, clip, domain=domain)
             if applies and clipped_sums != "direct" else None)
    return Prepared(xs, yy, onehot, n_k, xnorm, table)


@full_precision
def fit_many_prepared(draws: jax.Array, prepared: Prepared, hparams: Hyperparams,
                      configs: tuple[Config, ...]) -> tuple[jax.Array, Diagnostics]:
    """Lower level: use :func:`~.algorithm.fit` (records no spend). :func:`fit_many_from_draws` on
    a :class:`Prepared` dataset (shared by many calls).

    With a clipped-sum table, every run uses the table's ``Delta``: ``hparams.clip`` is replaced
    by it (noise, clipping and stage 1 stay consistent, so the privacy guarantee is for that
    ``Delta``); a concrete ``hparams.clip`` that differs raises.
    """
    configs = tuple(configs)
    if prepared.table is not None:
        tc, hc = prepared.table.clip, hparams.clip
        if not is_traced(tc, hc):
            if not np.allclose(np.asarray(tc), np.asarray(hc), rtol=1e-6):
                raise ValueError(f"hparams.clip={hc!r} differs from the clip the data were "
                                 f"prepared with ({float(tc)!r}); prepare again with that clip.")
        hparams = dataclasses.replace(hparams, clip=tc)
    return _fit_many_soa(draws, prepared.xs, prepared.y, prepared.onehot, prepared.n_k,
                         prepared.xnorm, hparams, configs, prepared.table)


def _check_same_but_method(configs):
    base = dataclasses.replace(configs[0], method="dpse", fairness=False, scaling="group_mean")
    for c in configs:
        c.validate()
        if dataclasses.replace(c, method="dpse", fairness=False, scaling="group_mean") != base:
            raise ValueError("fit_many configs may differ only in method, fairness and scaling; "
                             "run the others separately.")
    return base


def _fit_many_soa(z, xs, yy, onehot, n_k, xnorm, hparams, configs, table=None):
    base = _check_same_but_method(configs)
    num_groups = onehot.shape[1]
    m_count = len(configs)
    steps, p = base.steps, xs.shape[0]
    z1, zc, z2 = jax.vmap(lambda zz: _split_draws(zz, steps, p, num_groups))(z)
    equal = jnp.full((num_groups,), 1.0 / math.sqrt(num_groups), xs.dtype)
    budgets = [_budget(hparams, c, xs.dtype) for c in configs]  # (rho_c, tau, mu) per method
    # group sizes per method: public, or that run's noisy counts (add/remove)
    dens = jnp.stack([_denominators(zc[m], n_k, budgets[m][0], c) for m, c in enumerate(configs)])
    is_dpse = np.array([c.method == "dpse" for c in configs])
    if is_dpse.any():
        tau = budgets[int(np.flatnonzero(is_dpse)[0])][1]
        dp_idx = np.flatnonzero(is_dpse)  # stage 1 runs only for the DPSE methods
        se_d, fb_d, beta_d = jax.vmap(
            lambda zz, dd: _stage1(zz, xs, yy, onehot, dd, xnorm, tau, hparams, base, table))(
                z1[dp_idx], dens[dp_idx])
        se_all = jnp.broadcast_to(equal, (m_count, num_groups)).at[dp_idx].set(se_d)
        fb_all = jnp.zeros((m_count,), bool).at[dp_idx].set(fb_d)
        beta_all = jnp.zeros((m_count, xs.shape[0]), xs.dtype).at[dp_idx].set(beta_d)
    else:
        se_all = jnp.broadcast_to(equal, (m_count, num_groups))
        fb_all = jnp.zeros((m_count,), bool)
        beta_all = jnp.zeros((m_count, xs.shape[0]), xs.dtype)
    sel = jnp.asarray(is_dpse)
    se = jnp.where(sel[:, None], se_all, equal)
    fb = sel & fb_all
    beta1 = jnp.where(sel[:, None], beta_all, 0.0)
    rels, stds, rho1, rho2, rhoc = [], [], [], [], []
    for m, c in enumerate(configs):  # host-side bookkeeping over the (few, static) methods
        rho_c, tau_m, mu = budgets[m]
        rel, std = _release_params(se[m], mu, dens[m], hparams, c)
        rels.append(rel)
        stds.append(std)
        r1, r2, rc = _spent(c, rho_c, tau_m, mu, se[m])
        rho1.append(r1)
        rho2.append(r2)
        rhoc.append(rc)
    thetas = [None] * m_count
    clipped = [None] * m_count
    for fair in (False, True):
        idx = [m for m, c in enumerate(configs) if c.fairness == fair]
        if not idx:
            continue
        cfg = dataclasses.replace(base, fairness=fair)
        rel = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[rels[m] for m in idx])
        sel_idx = np.asarray(idx)
        th, cl = jax.vmap(lambda za, zb, r: _descent((za, zb), xs, yy, onehot, xnorm, r, hparams,
                                                     cfg, table))(z2[0][sel_idx], z2[1][sel_idx],
                                                                  rel)
        for j, m in enumerate(idx):
            thetas[m], clipped[m] = th[j], cl[j]
    diag = Diagnostics(se=se, fallback=fb, beta_stage1=beta1, noise_std=jnp.stack(stds),
                       rho_stage1=jnp.stack(rho1), rho_stage2=jnp.stack(rho2),
                       fraction_clipped=jnp.stack(clipped), rho_counts=jnp.stack(rhoc),
                       counts=dens)
    return jnp.stack(thetas), diag
