"""The metrics' shared parts: host-side checks of concrete inputs (skipped under ``jit``/``vmap``),
row weights, segment sums and the jitted cores of the rates, gaps and group accuracies."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v


Array = jax.Array


# ------------------------------------------------------------------------------------------------
# host-side validation
# ------------------------------------------------------------------------------------------------


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check_common(
    *, s: Any, num_groups: int, mask: Any, weights: Any, n_name: str, n_value: Any
) -> None:
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_shape("s", s, ndim=1)
    v.check_same_length(**{n_name: n_value, "s": s, "mask": mask, "weights": weights})
    v.check_group_ids(s, num_groups, "s")
    for name, arr in (("mask", mask), ("weights", weights)):
        if arr is None or _is_tracer(arr):
            continue
        v.check_shape(name, arr, ndim=1)
        a = np.asarray(arr, dtype=np.float64)
        v.check_finite(name, a)
        if np.any(a < 0):
            raise ValueError(f"{name} must be non-negative (got min {a.min()}); fix the row weights.")


def _check_predictions(y_pred: Any, num_classes: int | None, name: str = "y_pred") -> int:
    """Validate predictions; return the number of classes they describe."""
    ndim = np.ndim(y_pred)
    if ndim not in (1, 2):
        raise ValueError(
            f"{name} must be hard labels [n], binary probabilities [n] or class probabilities "
            f"[n, C]; got shape {np.shape(y_pred)}."
        )
    dtype = jnp.result_type(y_pred) if _is_tracer(y_pred) else np.asarray(y_pred).dtype
    kind = np.dtype(dtype).kind
    if ndim == 2:
        if kind != "f":
            raise ValueError(f"{name} of shape [n, C] must hold float probabilities, got {dtype}.")
        c = int(np.shape(y_pred)[1])
        if c < 2:
            raise ValueError(f"{name} has {c} column(s); class probabilities need C >= 2.")
        if num_classes is not None and num_classes != c:
            raise ValueError(f"num_classes={num_classes} but {name} has {c} columns.")
        if not _is_tracer(y_pred):
            a = np.asarray(y_pred, dtype=np.float64)
            v.check_finite(name, a)
            if np.any(a < 0) or np.any(a > 1):
                raise ValueError(f"{name} probabilities must lie in [0, 1].")
            if a.size and np.max(np.abs(a.sum(axis=1) - 1.0)) > 1e-3:
                raise ValueError(
                    f"rows of {name} must sum to 1 (class probabilities); apply a softmax first."
                )
        return c
    if kind == "f":
        if num_classes not in (None, 2):
            raise ValueError(
                f"float {name} of shape [n] means binary P(y_hat = 1), but num_classes="
                f"{num_classes}; pass integer labels or probabilities [n, C]."
            )
        if not _is_tracer(y_pred):
            a = np.asarray(y_pred, dtype=np.float64)
            v.check_finite(name, a)
            if np.any(a < 0) or np.any(a > 1):
                raise ValueError(
                    f"float {name} of shape [n] must be probabilities P(y_hat = 1) in [0, 1]; "
                    "apply a sigmoid to logits first."
                )
        return 2
    if kind not in "iub":
        raise ValueError(f"{name} must be integer labels or float probabilities, got {dtype}.")
    c = 2 if num_classes is None else v.check_int("num_classes", num_classes, minimum=2)
    v.check_labels(y_pred, c, name)
    return c


def _check_true_labels(y: Any, num_classes: int, n_pred: Any) -> None:
    v.check_shape("y", y, ndim=1)
    v.check_same_length(y_pred=n_pred, y=y)
    v.check_labels(y, num_classes, "y")


# ------------------------------------------------------------------------------------------------
# jit-able building blocks
# ------------------------------------------------------------------------------------------------


def _row_weights(n: int, mask: Any, weights: Any, dtype=jnp.float32) -> Array:
    w = jnp.ones((n,), dtype)
    if mask is not None:
        w = w * jnp.asarray(mask, dtype)
    if weights is not None:
        w = w * jnp.asarray(weights, dtype)
    return w


def _as_probs(y_pred: Any, num_classes: int) -> Array:
    """Predictions as a [n, C] matrix of (expected) class indicators."""
    y_pred = jnp.asarray(y_pred)
    if y_pred.ndim == 2:
        return y_pred.astype(jnp.float32)
    if jnp.issubdtype(y_pred.dtype, jnp.floating):
        p = y_pred.astype(jnp.float32)
        return jnp.stack([1.0 - p, p], axis=-1)
    return jax.nn.one_hot(y_pred.astype(jnp.int32), num_classes, dtype=jnp.float32)


def _hard_labels(y_pred: Any, threshold: float = 0.5) -> Array:
    y_pred = jnp.asarray(y_pred)
    if y_pred.ndim == 2:
        return jnp.argmax(y_pred, axis=-1).astype(jnp.int32)
    if jnp.issubdtype(y_pred.dtype, jnp.floating):
        return (y_pred > threshold).astype(jnp.int32)
    return y_pred.astype(jnp.int32)


def _segsum(values: Array, s: Array, num_groups: int) -> Array:
    return jax.ops.segment_sum(values, jnp.asarray(s, jnp.int32), num_segments=num_groups)


def _safe_div(num: Array, den: Array) -> Array:
    """num / den where den > 0, else 0 (no NaN, no inf; gradient-safe)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def _range_over_present(values: Array, present: Array, axis: int = 0) -> Array:
    """max - min of ``values`` over entries with ``present``; 0 with fewer than one present."""
    hi = jnp.max(jnp.where(present, values, -jnp.inf), axis=axis)
    lo = jnp.min(jnp.where(present, values, jnp.inf), axis=axis)
    return jnp.where(jnp.any(present, axis=axis), hi - lo, 0.0)


def _rates(y_pred, s, num_groups, num_classes, mask, weights) -> tuple[Array, Array, Array, Array]:
    probs = _as_probs(y_pred, num_classes)
    w = _row_weights(probs.shape[0], mask, weights)
    counts = _segsum(w, s, num_groups)  # [K]
    sums = _segsum(w[:, None] * probs, s, num_groups)  # [K, C]
    return _safe_div(sums, counts[:, None]), counts, probs, w


# Jitted cores (one compiled program per shape in eager use; inlined under an outer jit/vmap).
def _jit(*static: str):
    return functools.partial(jax.jit, static_argnames=("num_groups", "num_classes", *static))


@_jit("kind")
def _core_dp(y_pred, s, mask, weights, *, num_groups, num_classes, kind):
    rates, counts, probs, w = _rates(y_pred, s, num_groups, num_classes, mask, weights)
    if kind == "rates":
        return rates, counts
    if kind == "pairwise":
        return jnp.max(_range_over_present(rates, (counts > 0)[:, None], axis=0))
    marginal = _safe_div(w @ probs, jnp.sum(w))  # [C]
    dev = jnp.where((counts > 0)[:, None], jnp.abs(rates - marginal[None, :]), 0.0)
    return jnp.max(dev)


def _eo_cells(y_pred, y, s, num_groups, c, mask, weights) -> tuple[Array, Array, Array, Array]:
    """Per (group, class) rates P[y_hat=c | s, y=c] and P[y_hat=c | s, y!=c] with their weights."""
    probs = _as_probs(y_pred, c)
    w = _row_weights(probs.shape[0], mask, weights)
    y1 = jax.nn.one_hot(jnp.asarray(y, jnp.int32), c, dtype=jnp.float32)  # [n, C]
    wp = w[:, None] * probs
    hit = _segsum(wp * y1, s, num_groups)  # sum of P(c) over rows with y = c      [K, C]
    pos = _segsum(w[:, None] * y1, s, num_groups)  # weight of rows with y = c    [K, C]
    tot = _segsum(wp, s, num_groups)  # sum of P(c) over all rows                 [K, C]
    neg = _segsum(w, s, num_groups)[:, None] - pos
    return _safe_div(hit, pos), pos, _safe_div(tot - hit, neg), neg


@_jit("positive_class")
def _core_eo(y_pred, y, s, mask, weights, *, num_groups, num_classes, positive_class):
    tpr, pos, fpr, neg = _eo_cells(y_pred, y, s, num_groups, num_classes, mask, weights)
    if positive_class is not None:
        return _range_over_present(tpr[:, positive_class], pos[:, positive_class] > 0, axis=0)
    tpr_gap = _range_over_present(tpr, pos > 0, axis=0)
    fpr_gap = _range_over_present(fpr, neg > 0, axis=0)
    return jnp.max(jnp.maximum(tpr_gap, fpr_gap))


@_jit("soft")
def _core_group_accuracy(y_pred, y, s, mask, weights, threshold, *, num_groups, num_classes, soft):
    correct = _correct(y_pred, y, num_classes, threshold, soft)
    w = _row_weights(correct.shape[0], mask, weights)
    counts = _segsum(w, s, num_groups)
    return _safe_div(_segsum(w * correct, s, num_groups), counts), counts


def _correct(y_pred, y, c, threshold, soft) -> Array:
    if soft:
        probs = _as_probs(y_pred, c)
        return jnp.take_along_axis(probs, jnp.asarray(y, jnp.int32)[:, None], axis=1)[:, 0]
    return (_hard_labels(y_pred, threshold) == jnp.asarray(y, jnp.int32)).astype(jnp.float32)
