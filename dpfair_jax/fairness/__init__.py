"""dpfair_jax.fairness: fairness and group-utility metrics (see ``metrics``)."""

from dpfair_jax.fairness.metrics import (
    ExcessiveRisk,
    accuracy,
    classification_summary,
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

from dpfair_jax.fairness.frontier import (
    area_between,
    frontier_curve,
    frontier_table,
    plot_frontiers,
    violation_at_error,
)

__all__ = [
    "area_between",
    "frontier_curve",
    "frontier_table",
    "plot_frontiers",
    "violation_at_error",
    "ExcessiveRisk",
    "accuracy",
    "classification_summary",
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
