"""Exact clipped group sums of a one-feature least-squares problem (a fast path of paper 000).

Privacy: the table computes the same clipped sums as summing over the examples (up to float
rounding); it adds no noise and changes no sensitivity. Its float32 prefix sums cancel, so each
evaluated sum is clamped to the range its clipped terms allow (``[-Delta W_k, Delta W_k]`` for
gradients, ``[0, Delta^2 W_k]`` for losses): rounding never takes a sum past its bound.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax.privacy.precision import full_precision

__all__ = ["ClippedSumTable", "clipped_sum_table", "table_group_sums"]


class ClippedSumTable(NamedTuple):
    """Per-group clipped gradient and loss sums of ``y ~ theta x`` (one feature, squared loss)
    tabulated as exact piecewise polynomials of ``theta`` (built by :func:`clipped_sum_table`).

    Example ``i``'s clipped gradient ``clip(a_i theta - b_i, -Delta, Delta)`` (``a = 2x^2``,
    ``b = 2xy``) is ``-Delta`` below ``lo_i = (b_i - Delta)/a_i``, linear up to ``hi_i = (b_i +
    Delta)/a_i`` and ``+Delta`` above; its clipped loss ``min((theta x_i - y_i)^2, Delta^2)`` is
    ``Delta^2`` outside ``y_i/x_i -+ Delta/|x_i|`` and quadratic inside. Both are continuous, so
    a group sum is a base value plus, for every breakpoint ``t_e <= theta``, a polynomial change
    (``alpha_e theta + beta_e`` for gradients, ``q2 theta^2 + q1 theta + q0`` for losses): sorted
    breakpoints and prefix sums of the coefficients give every sum at any ``theta`` with one
    binary search, ``O(K log n)`` instead of ``O(n K)`` per evaluation (exact up to float
    rounding). ``grad_keys``/``loss_keys`` are sortable int32 keys of the breakpoints;
    ``grad_prefix [2n+1, 3, K]`` holds prefix sums of (alpha, beta, clipped-count change),
    ``loss_prefix [2n+1, 3, K]`` of (q2, q1, q0); ``grad_base [2, K]`` is (``-Delta W_k``,
    ``W_k``) and ``loss_base [K]`` the sums at ``theta -> -inf``; ``clip`` is ``Delta``.
    ``domain`` (``[lo, hi]`` or None): when set, breakpoints outside it were moved just outside
    it (same sums for every theta in ``[lo, hi]``, wrong outside), which makes the sort several
    times cheaper when most breakpoints lie outside the projection box of the descent.
    """

    grad_keys: jax.Array
    grad_prefix: jax.Array
    grad_base: jax.Array
    loss_keys: jax.Array
    loss_prefix: jax.Array
    loss_base: jax.Array
    clip: jax.Array
    domain: jax.Array | None = None


def _sortable_key(v: jax.Array) -> jax.Array:
    """Monotone map float32 -> int32 (integer order equals float order; sorts 4x faster on CPU)."""
    bits = jax.lax.bitcast_convert_type(jnp.asarray(v, jnp.float32), jnp.int32)
    return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)


def _event_prefix(lo, hi, pay_lo, pay_hi, onehot, domain=None):
    """Sorted keys of the 2n breakpoints and prefix sums of their per-group coefficients.

    Returns ``keys [2n]`` (ascending) and ``prefix [2n+1, C, K]`` with ``prefix[j]`` the sum over
    the breakpoints of rank ``< j`` (rows, so a lookup gathers one contiguous row). Sorting the
    int32 keys alone and placing each event at its rank (binary search, then a scatter-add that
    merges exact ties) is 2-3x faster on CPU than sorting the keys with a permutation operand;
    the prefix sums are a pairwise (associative) scan, 30% faster than ``cumsum`` on XLA:CPU and
    more accurate. With ``domain = [a, b]`` the breakpoints below ``a`` are summed up front
    (pairwise, so no long float32 chain at one rank) and those above ``b`` dropped; their keys
    move to ``a - 1`` / ``b + 1``, ties that sort fast.
    """
    t = jnp.concatenate([lo, hi])
    pay = jnp.concatenate([pay_lo, pay_hi], axis=0)  # [2n, C]
    member = jnp.concatenate([onehot, onehot], axis=0)  # [2n, K]
    per_group = (pay[:, :, None] * member[:, None, :]).reshape(t.shape[0], -1)  # [2n, C*K]
    base = None
    if domain is not None:
        below, above = t < domain[0], t > domain[1]
        base = jnp.sum(jnp.where(below[:, None], per_group, 0.0), axis=0)
        per_group = jnp.where((below | above)[:, None], 0.0, per_group)
        t = jnp.clip(t, domain[0] - 1.0, domain[1] + 1.0)
    keys = _sortable_key(t)
    sorted_keys = jax.lax.sort(keys, is_stable=False)
    rank = jnp.searchsorted(sorted_keys, keys, side="left", method="scan_unrolled")
    # Row 0 stays zero: prefix[j] sums the events of rank < j.
    placed = jnp.zeros((t.shape[0] + 1, per_group.shape[1]), per_group.dtype).at[rank + 1].add(per_group)
    prefix = jax.lax.associative_scan(jnp.add, placed, axis=0)
    if base is not None:
        prefix = prefix + base
    return sorted_keys, prefix.reshape(prefix.shape[0], pay.shape[1], member.shape[1])


@full_precision
def clipped_sum_table(x: jax.Array, y: jax.Array, onehot: jax.Array, clip: Any, *,
                      domain: tuple[float, float] | None = None) -> ClippedSumTable:
    """Build the :class:`ClippedSumTable` of one-feature data ``x [n]``, ``y [n]`` with weighted
    group membership ``onehot [n, K]`` and clip bound ``clip`` (``Delta``). ``O(n log n)``, once
    per dataset; then :func:`table_group_sums` evaluates the clipped sums at any ``theta`` (any
    ``theta`` in ``domain = (lo, hi)`` when given). jit/vmap-able (one table per trial under
    ``vmap``)."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, x.dtype)
    onehot = jnp.asarray(onehot, x.dtype)
    c = jnp.asarray(clip, x.dtype)
    nz = x != 0
    xs_ = jnp.where(nz, x, 1.0)
    # Gradients (x = 0: gradient 0, never clipped: zero coefficients, base count 0).
    a, b = 2.0 * xs_ * xs_, 2.0 * xs_ * y
    g_lo = jnp.where(nz, (b - c) / a, 0.0)
    g_hi = jnp.where(nz, (b + c) / a, 0.0)
    pay_lo = jnp.stack([jnp.where(nz, a, 0.0), jnp.where(nz, c - b, 0.0), jnp.where(nz, -1.0, 0.0)], 1)
    pay_hi = jnp.stack([jnp.where(nz, -a, 0.0), jnp.where(nz, c + b, 0.0), jnp.where(nz, 1.0, 0.0)], 1)
    count0 = (nz.astype(x.dtype)) @ onehot  # clipped below every lo
    dom = None if domain is None else jnp.asarray(domain, x.dtype)
    grad_keys, grad_prefix = _event_prefix(g_lo, g_hi, pay_lo, pay_hi, onehot, dom)
    grad_base = jnp.stack([-c * count0, count0])
    # Losses (x = 0: constant min(y^2, Delta^2), folded into the base).
    ratio, half = y / xs_, c / jnp.abs(xs_)
    l_lo = jnp.where(nz, ratio - half, 0.0)
    l_hi = jnp.where(nz, ratio + half, 0.0)
    q = jnp.stack([xs_ * xs_, -2.0 * xs_ * y, y * y - c * c], 1) * nz[:, None]
    loss_keys, loss_prefix = _event_prefix(l_lo, l_hi, q, -q, onehot, dom)
    loss_base = jnp.where(nz, c * c, jnp.minimum(y * y, c * c)) @ onehot
    return ClippedSumTable(grad_keys, grad_prefix, grad_base, loss_keys, loss_prefix, loss_base, c,
                           dom)


def _lookup(keys: jax.Array, prefix: jax.Array, theta: jax.Array) -> jax.Array:
    """Prefix row of the breakpoints ``<= theta``: ``[C, K]``."""
    j = jnp.searchsorted(keys, _sortable_key(theta), side="right", method="scan_unrolled")
    return prefix[j]


@full_precision
def table_group_sums(table: ClippedSumTable, theta: Any, *, losses: bool = True
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-group clipped sums at scalar ``theta``: (gradient sums ``[K]``, loss sums ``[K]``,
    weighted count of clipped gradients ``[K]``); equal (up to float rounding) to summing
    ``clip(2 (theta x_i - y_i) x_i, -Delta, Delta)``, ``min((theta x_i - y_i)^2, Delta^2)`` and
    ``1[|2 (theta x_i - y_i) x_i| > Delta]`` over each group's examples."""
    theta = jnp.asarray(theta, table.grad_prefix.dtype)
    g = _lookup(table.grad_keys, table.grad_prefix, theta)
    # The prefix sums cancel in float32 (-Delta W_k + theta A + B); every group sum is clamped
    # to the range its clipped terms allow (|gradient| <= Delta and a count in [0, W'_k], W'_k the
    # weight of the group's examples with x != 0; losses in [0, loss_base], their value when every
    # such example's loss is at its cap Delta^2), so rounding never takes a sum outside it.
    w = table.grad_base[1]  # W'_k
    gmax = table.clip * w
    gsum = jnp.clip(table.grad_base[0] + theta * g[0] + g[1], -gmax, gmax)
    clipped = jnp.clip(table.grad_base[1] + g[2], 0.0, w)
    if losses:
        lq = _lookup(table.loss_keys, table.loss_prefix, theta)
        lsum = jnp.clip(table.loss_base + theta * theta * lq[0] + theta * lq[1] + lq[2], 0.0, table.loss_base)
    else:
        lsum = jnp.zeros_like(gsum)
    return gsum, lsum, clipped
