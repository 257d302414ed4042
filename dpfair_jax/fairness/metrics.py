# Kept as one module (~640 lines): every public metric is built on the same private host-side checks
# and jitted cores at the top; a split would make those public.
"""Fairness and group-utility metrics, jit-able, for any number of groups and classes.

Conventions shared by every function here:

- ``s``: integer group ids ``[n]`` in ``[0, num_groups)``; ``num_groups`` is static (a Python int).
- ``y_pred`` (predictions) may be
  * hard labels, integer (or bool) ``[n]`` in ``[0, num_classes)`` (``num_classes`` defaults to 2);
  * binary soft predictions, float ``[n]`` = ``P(y_hat = 1)`` (float 0/1 hard labels are the same
    thing, so they give the same numbers);
  * class probabilities, float ``[n, C]`` (rows sum to 1).
  A soft prediction enters a rate as its expectation: ``P[y_hat = c | s]`` is the group mean of
  ``P_i(c)``, i.e. the rate of the randomized classifier of paper 004 (II.1).
- ``mask`` (1 = real row, 0 = padding) and ``weights`` (non-negative row weights) are optional and
  multiply; every rate is a weighted mean.
- **Empty groups** (total weight 0) never produce NaN: their per-group rates/losses are reported as
  ``0.0`` and they are *excluded* from every gap (a gap over fewer than two non-empty groups is 0).
  The same holds for empty (group, label) cells in the equalized-odds violation. Use
  :func:`group_counts` to see which groups are empty.

Each public function validates concrete (host) inputs first and raises ``ValueError`` naming the
argument: mismatched lengths, labels or group ids out of range, probabilities outside [0, 1],
negative weights, NaN. Under ``jit``/``vmap`` the checks see tracers and are skipped, so the same
functions are the jit-able cores (pass ``num_groups``/``num_classes`` as static Python ints, e.g.
by closing over them).

Paper references: paper 004 (DP-FERMI) eqs. 2, 10, 11; paper 001 (fairness lens) eqs. 2, 9, 10;
paper 003 (stratification) Definition 10, eq. 6.

Privacy: none of these metrics is differentially private. They read labels and sensitive
attributes directly and are meant for evaluation (test splits, simulation studies); releasing them
about a private training set spends privacy that no accountant here records.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v

Array = jax.Array

__all__ = [
    "group_counts",
    "group_prediction_rates",
    "demographic_parity_pairwise",
    "demographic_parity_marginal",
    "equalized_odds_violation",
    "equal_opportunity_violation",
    "group_accuracy",
    "group_error_rates",
    "accuracy",
    "misclassification_error",
    "group_mean_loss",
    "group_mspe",
    "ExcessiveRisk",
    "excessive_risk",
    "excessive_risk_gap",
    "parity_error",
    "classification_summary",
]


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


# ------------------------------------------------------------------------------------------------
# public metrics
# ------------------------------------------------------------------------------------------------


def group_counts(s: Any, num_groups: int, *, mask: Any = None, weights: Any = None) -> Array:
    """Total (masked, weighted) row weight per group ``[num_groups]``; 0 marks an empty group."""
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="s", n_value=s)
    w = _row_weights(np.shape(s)[0], mask, weights)
    return _segsum(w, s, num_groups)


def group_prediction_rates(
    y_pred: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None,
) -> tuple[Array, Array]:
    """Per-group prediction rates ``P[y_hat = c | s = k]`` as ``[num_groups, C]``, and group counts.

    Empty groups get a row of zeros (and count 0).
    """
    c = _check_predictions(y_pred, num_classes)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_dp(y_pred, s, mask, weights, num_groups=num_groups, num_classes=c, kind="rates")


def demographic_parity_pairwise(
    y_pred: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None,
) -> Array:
    """Demographic-parity violation, pairwise form (paper 004, App. F.1, eq. 10):

        max_{y', s1, s2} |P[y_hat = y' | s = s1] - P[y_hat = y' | s = s2]|.

    For binary predictions this is the positive-rate gap ``max_s P(y_hat=1|s) - min_s P(y_hat=1|s)``
    (fairlearn's ``demographic_parity_difference``). This is the form paper 004's tables report.
    Empty groups are excluded.
    """
    c = _check_predictions(y_pred, num_classes)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_dp(y_pred, s, mask, weights, num_groups=num_groups, num_classes=c,
                    kind="pairwise")


def demographic_parity_marginal(
    y_pred: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None,
) -> Array:
    """Demographic-parity violation relative to the marginal (paper 004, main text, eq. 2):

        max_{y'} max_s |p_hat(y_hat = y' | s) - p_hat(y_hat = y')|.

    At most the pairwise form (eq. 10) and at least half of it. Empty groups contribute 0.
    """
    c = _check_predictions(y_pred, num_classes)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_dp(y_pred, s, mask, weights, num_groups=num_groups, num_classes=c,
                    kind="marginal")


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


def equalized_odds_violation(
    y_pred: Any, y: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None,
) -> Array:
    """Equalized-odds violation (paper 004, App. F.1, eq. 11):

        max_{y', s1, s2} max(|P[y_hat=y' | s1, y=y'] - P[y_hat=y' | s2, y=y']|,
                             |P[y_hat=y' | s1, y!=y'] - P[y_hat=y' | s2, y!=y']|).

    Binary: ``max(TPR gap, FPR gap)`` (fairlearn's ``equalized_odds_difference``; the ``y' = 0``
    terms repeat the same gaps); multi-class: one-vs-rest per label, then the max over labels.
    Empty (group, label) cells are excluded.
    """
    c = _check_predictions(y_pred, num_classes)
    _check_true_labels(y, c, y_pred)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_eo(y_pred, y, s, mask, weights, num_groups=num_groups, num_classes=c,
                    positive_class=None)


def equal_opportunity_violation(
    y_pred: Any, y: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None, positive_class: int = 1,
) -> Array:
    """Equal-opportunity violation: ``max_{s1, s2} |P[y_hat=c | s1, y=c] - P[y_hat=c | s2, y=c]|``
    for ``c = positive_class`` (the TPR gap; computed by paper 004's code, not reported).

    Empty (group, label) cells are excluded.
    """
    c = _check_predictions(y_pred, num_classes)
    v.check_int("positive_class", positive_class, minimum=0)
    if positive_class >= c:
        raise ValueError(f"positive_class must be in [0, {c}), got {positive_class}.")
    _check_true_labels(y, c, y_pred)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_eo(y_pred, y, s, mask, weights, num_groups=num_groups, num_classes=c,
                    positive_class=int(positive_class))


def _correct(y_pred, y, c, threshold, soft) -> Array:
    if soft:
        probs = _as_probs(y_pred, c)
        return jnp.take_along_axis(probs, jnp.asarray(y, jnp.int32)[:, None], axis=1)[:, 0]
    return (_hard_labels(y_pred, threshold) == jnp.asarray(y, jnp.int32)).astype(jnp.float32)


def group_accuracy(
    y_pred: Any, y: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None, threshold: float = 0.5, soft: bool = False,
) -> Array:
    """Accuracy per group ``[num_groups]`` (0 for an empty group).

    Soft predictions are turned into labels (``P(y_hat=1) > threshold`` for ``[n]``, argmax for
    ``[n, C]``), as paper 004 does (sigmoid > 0.5); ``soft=True`` instead reports the expected
    accuracy ``mean_i P_i(y_i)`` of the randomized classifier.
    """
    c = _check_predictions(y_pred, num_classes)
    _check_true_labels(y, c, y_pred)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_group_accuracy(y_pred, y, s, mask, weights, threshold, num_groups=num_groups,
                                num_classes=c, soft=bool(soft))[0]


def group_error_rates(
    y_pred: Any, y: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None, threshold: float = 0.5, soft: bool = False,
) -> Array:
    """Misclassification error per group ``[num_groups]`` (1 - accuracy; 0 for an empty group)."""
    c = _check_predictions(y_pred, num_classes)
    _check_true_labels(y, c, y_pred)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    acc, counts = _core_group_accuracy(y_pred, y, s, mask, weights, threshold,
                                       num_groups=num_groups, num_classes=c, soft=bool(soft))
    return jnp.where(counts > 0, 1.0 - acc, 0.0)


def accuracy(
    y_pred: Any, y: Any, *, num_classes: int | None = None, mask: Any = None,
    weights: Any = None, threshold: float = 0.5, soft: bool = False,
) -> Array:
    """Overall (weighted) accuracy; see :func:`group_accuracy` for the prediction conventions."""
    s = np.zeros(np.shape(y)[0], np.int32)
    return group_accuracy(y_pred, y, s, 1, num_classes=num_classes, mask=mask, weights=weights,
                          threshold=threshold, soft=soft)[0]


def misclassification_error(
    y_pred: Any, y: Any, *, num_classes: int | None = None, mask: Any = None,
    weights: Any = None, threshold: float = 0.5, soft: bool = False,
) -> Array:
    """Overall misclassification error ``1 - accuracy`` (paper 004's x-axis)."""
    return 1.0 - accuracy(y_pred, y, num_classes=num_classes, mask=mask, weights=weights,
                          threshold=threshold, soft=soft)


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


def classification_summary(
    y_pred: Any, y: Any, s: Any, num_groups: int, *, num_classes: int | None = None,
    mask: Any = None, weights: Any = None, threshold: float = 0.5,
) -> dict[str, Array]:
    """The paper-004 evaluation of one model as a dict of arrays (jit/vmap friendly, e.g. as the
    return value of a Monte Carlo trial): ``error`` (misclassification error), ``accuracy``,
    ``dp_pairwise`` (eq. 10), ``dp_marginal`` (eq. 2), ``eo`` (eq. 11), ``group_accuracy [K]``,
    ``group_counts [K]``.

    The fairness violations use hard labels (thresholded / argmax), as paper 004's tables do;
    call the individual functions with probabilities for the soft versions.
    """
    c = _check_predictions(y_pred, num_classes)
    _check_true_labels(y, c, y_pred)
    _check_common(s=s, num_groups=num_groups, mask=mask, weights=weights, n_name="y_pred",
                  n_value=y_pred)
    return _core_summary(y_pred, y, s, mask, weights, threshold, num_groups=num_groups,
                         num_classes=c)


@_jit()
def _core_summary(y_pred, y, s, mask, weights, threshold, *, num_groups, num_classes):
    hard = _hard_labels(y_pred, threshold)
    args = (mask, weights)
    kw = dict(num_groups=num_groups, num_classes=num_classes)
    group_acc, counts = _core_group_accuracy(hard, y, s, *args, threshold, soft=False, **kw)
    acc = _safe_div(jnp.sum(group_acc * counts), jnp.sum(counts))
    return {
        "error": 1.0 - acc,
        "accuracy": acc,
        "dp_pairwise": _core_dp(hard, s, *args, kind="pairwise", **kw),
        "dp_marginal": _core_dp(hard, s, *args, kind="marginal", **kw),
        "eo": _core_eo(hard, y, s, *args, positive_class=None, **kw),
        "group_accuracy": group_acc,
        "group_counts": counts,
    }
