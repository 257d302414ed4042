"""Accuracy and error: per group, overall, and the paper-004 summary of one model."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from dpfair_jax.fairness.metrics._core import (
    Array,
    _check_common,
    _check_predictions,
    _check_true_labels,
    _core_dp,
    _core_eo,
    _core_group_accuracy,
    _hard_labels,
    _jit,
    _safe_div,
)


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
