"""dpfair_jax.fairness: fairness and group-utility metrics (see ``metrics``), a trained classifier's
test evaluation (``evaluation``), the ERMI regularizer (``ermi``) and trade-off frontiers (``frontier``)."""

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

from dpfair_jax.fairness.evaluation import Metrics, degeneracy, evaluate, predict

from dpfair_jax.fairness.frontier import (
    area_between,
    frontier_curve,
    frontier_table,
    plot_frontiers,
    relative_violation_gain,
    violation_at_error,
)

__all__ = [
    "Metrics",
    "degeneracy",
    "evaluate",
    "predict",
    "area_between",
    "frontier_curve",
    "frontier_table",
    "plot_frontiers",
    "relative_violation_gain",
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
