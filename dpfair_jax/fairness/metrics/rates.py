"""Group rates and parity gaps: group counts, prediction rates, demographic parity (pairwise, eq. 10;
marginal, eq. 2), equalized odds (eq. 11) and equal opportunity."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.fairness.metrics._core import (
    Array,
    _check_common,
    _check_predictions,
    _check_true_labels,
    _core_dp,
    _core_eo,
    _row_weights,
    _segsum,
)


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
