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

Modules, by metric family (every public name is re-exported here): ``rates`` (group rates and
parity gaps), ``accuracy`` (accuracy and error, the one-model summary), ``risk`` (group losses,
excessive risks, parity error); ``_core`` holds the shared checks and jitted cores.
"""

from __future__ import annotations

from dpfair_jax.fairness.metrics.accuracy import (
    accuracy,
    classification_summary,
    group_accuracy,
    group_error_rates,
    misclassification_error,
)
from dpfair_jax.fairness.metrics.rates import (
    demographic_parity_marginal,
    demographic_parity_pairwise,
    equal_opportunity_violation,
    equalized_odds_violation,
    group_counts,
    group_prediction_rates,
)
from dpfair_jax.fairness.metrics.risk import (
    ExcessiveRisk,
    excessive_risk,
    excessive_risk_gap,
    group_mean_loss,
    group_mspe,
    parity_error,
)

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
