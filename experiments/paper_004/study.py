"""Paper 004 (Lowy, Gupta, Razaviyayn, ICLR 2023): DP-FERMI experiments.

Registered experiments (``dpfair run NAME [--quick]``):

* ``fermi_adult_dp`` / ``fermi_credit_dp`` / ``fermi_parkinsons_dp`` (Figs 2, 7, 3/8): demographic
  parity (eq. 10); ``fermi_adult_eo`` / ``fermi_credit_eo`` (Figs 9, 4): equalized odds (eq. 11).
  Four methods under one example-level unit, epsilon and delta: DP-FERMI, PF-LD as Tran et al.
  specify it (per-epoch dual updates), a stochastic PF-LD-style variant and DP-SGD (lambda = 0),
  over a lambda grid log-spaced up to 40 and several train/validation/test splits
  (:func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study`). Every method is tuned per
  (epsilon, lambda, split) on validation by accounted random stopping with the same budget; the
  selection's cost is inside each run's epsilon. Claims: one per baseline, "DP-FERMI reaches a
  lower violation at equal error", decided by the verdict rule (``dpfair_jax.runner.verdict``) on one
  paired effect per split (``dpfair_jax.fairness.frontier.paired_violation_gap``) against the
  paper's own margin from its result files (``config.PAPER_MARGINS``; PF-LD is the paper's
  baseline, the stochastic variant and DP-SGD the kit's own rows), with the splits each claim
  needs (``replicates="auto"``: pilot, then that count within ``max_replicates``). Before them, the
  convergence preconditions of every method (``preconditions.py``: at eps = inf against the
  non-private reference optimum of the ERMI objective per lambda, a monotone frontier, a learning
  rate off the grid's edge); a claim on a method whose preconditions fail is untestable.
* ``fermi_official_code``: the public code's preset (one-cell ERMI with the group of cell 0 named,
  its clipping, random W0, its calibration) as a regression test on the shape of its curves.
* ``fermi_adult_nonbinary``: 9 age buckets x 5 race groups on Adult with multinomial logistic
  regression (tabular stand-in for UTK-Face, Fig 5's setting), through the same study.
* ``fermi_cnn_synthetic``: a small CNN on a synthetic image task (3 classes x 3 groups) with
  batch 32: DP-FERMI converges with small batches and non-binary Y and S (Fig 5's claim).
* ``sgda_convergence``: DP-SGDA on a synthetic nonconvex-strongly-concave problem; the stationarity
  gap vs n and epsilon against Theorem E.3's rate ``sqrt(d) / (eps n)``.
"""

from __future__ import annotations

from dpfair_jax.runner import Experiment, register

from .claims import _auto_replicates, _frontier_claim, claim_effects, replicates_for  # noqa: F401  (tests, notebooks)
from .cnn_synthetic import run_cnn_synthetic
from .config import CONFIGS
from .official_code import run_official_code
from .sgda_convergence import run_sgda_convergence
from .unavailable import run_unavailable
from .tradeoff import PARKINSONS_ENV, run_tradeoff  # noqa: F401

__all__ = ["run_tradeoff", "run_official_code", "run_sgda_convergence", "run_cnn_synthetic", "EXPERIMENTS"]


EXPERIMENTS = [
    register(Experiment("fermi_adult_dp", "004", "DP-FERMI vs both PF-LDs vs DP-SGD, tuned frontiers, Adult (sex), demographic parity (Fig 2)",
                        CONFIGS["fermi_adult_dp"], run_tradeoff)),
    register(Experiment("fermi_credit_dp", "004", "DP-FERMI vs baselines, tuned frontiers, Credit (SEX), demographic parity (Fig 7)",
                        CONFIGS["fermi_credit_dp"], run_tradeoff)),
    register(Experiment("fermi_parkinsons_dp", "004", "DP-FERMI vs baselines, tuned frontiers, Parkinsons (sex), demographic parity (Figs 3, 8)",
                        CONFIGS["fermi_parkinsons_dp"], run_tradeoff)),
    register(Experiment("fermi_credit_eo", "004", "DP-FERMI vs baselines, tuned frontiers, Credit, equalized odds (Fig 4)",
                        CONFIGS["fermi_credit_eo"], run_tradeoff)),
    register(Experiment("fermi_adult_eo", "004", "DP-FERMI vs baselines, tuned frontiers, Adult, equalized odds (Fig 9)",
                        CONFIGS["fermi_adult_eo"], run_tradeoff)),
    register(Experiment("fermi_official_code", "004", "The public code's preset (one-cell ERMI, its clipping, random W0): shape of its curves by the group of cell 0",
                        CONFIGS["fermi_official_code"], run_official_code)),
    register(Experiment("fermi_adult_nonbinary", "004",
                        "DP-FERMI with 9 age classes x 5 race groups on Adult (UTK-Face stand-in)",
                        CONFIGS["fermi_adult_nonbinary"], run_tradeoff)),
    register(Experiment("fermi_cnn_synthetic", "004", "DP-FERMI with a small CNN, batch 32, 3 classes x 3 groups (Fig 5's claim)",
                        CONFIGS["fermi_cnn_synthetic"], run_cnn_synthetic)),
    register(Experiment("sgda_convergence", "004", "DP-SGDA stationarity gap vs n and epsilon (Theorem E.3)",
                        CONFIGS["sgda_convergence"], run_sgda_convergence)),
    register(Experiment("fermi_retired_adult_dp", "004", "Retired Adult (the paper's folktables task): not available offline, a note row",
                        CONFIGS["fermi_retired_adult_dp"], run_unavailable)),
]
