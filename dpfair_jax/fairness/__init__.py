"""dpfair_jax.fairness: fairness and group-utility metrics (see ``metrics``)."""

from dpfair_jax.fairness.metrics import (
    ExcessiveRisk,
    accuracy,
    demographic_parity_marginal,
    demographic_parity_pairwise,
    equal_opportunity_violation,
    equalized_odds_violation,
    excessive_risk,
    excessive_risk_gap,
    group_accuracy,
    group_counts,
    group_error_rates,
    group_mean_loss,
    group_mspe,
    group_prediction_rates,
    misclassification_error,
    parity_error,
)

__all__ = [
    "ExcessiveRisk",
    "accuracy",
    "demographic_parity_marginal",
    "demographic_parity_pairwise",
    "equal_opportunity_violation",
    "equalized_odds_violation",
    "excessive_risk",
    "excessive_risk_gap",
    "group_accuracy",
    "group_counts",
    "group_error_rates",
    "group_mean_loss",
    "group_mspe",
    "group_prediction_rates",
    "misclassification_error",
    "parity_error",
]
