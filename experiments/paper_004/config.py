"""Quick and full configs of the paper-004 experiments (``CONFIGS[name] = {"quick": ..., "full": ...}``).

Tradeoff studies (``fermi_{adult,credit}_{dp,eo}``, Parkinsons, non-binary Adult): four methods,
lambda log-spaced up to 40, every method tuned per (epsilon, lambda, split) on validation by
random stopping with the same law (``runs_mean``, ``runs_shape``) over the candidate grids below.
Every method's convergence is a precondition of its claims (``preconditions.py``): at eps = inf
against the non-private reference optimum of the ERMI objective per lambda, a monotone frontier and
a learning rate off the grid's edge. Full: the paper's 200 epochs, a learning-rate grid of
0.03..10, 8 splits, epsilon in {0.5, 1, 3, 9, inf} ({0.5, 1, 3, inf} for EO), for one GPU (the
earlier 20-epoch design took 1-1.5 minutes per setting on an H100/H200; 200 epochs about ten times
that). Quick: a smoke check on a 6,000-row subset, 4 epochs, 2 splits, 2 lambdas, eps in {1, inf}
(its preconditions may fail: its claims then read untestable).
"""

from __future__ import annotations

from typing import Any

from dpfair_jax.runner.registry import Constraint

__all__ = ["CONFIGS", "CONSTRAINTS", "PAPER_MARGINS", "PAPER_BASELINE_METHODS", "UNAVAILABLE"]

#: The paper's other baselines (``dpfair_jax.studies.tradeoff.BASELINE_METHODS``), run beside the
#: configured ``methods`` when a config sets ``paper_baselines=true`` (off by default: the full
#: run's time with them has not been measured on a GPU). Tran et al. 2021a's mitigation for both
#: notions; Jagielski et al. 2019's post-processing for equalized odds only. They are reported in
#: their own rows (their labels in the table), never as the deciding baseline of a claim (PF-LD as
#: Tran et al. specify it is).
PAPER_BASELINE_METHODS = {"dp": ["mitigation"], "eo": ["mitigation", "jagielski_post", "jagielski_in"]}

#: The paper's data sets the kit cannot run offline, each with the reason (a note row of the report).
UNAVAILABLE = {
    "retired_adult": ("Retired Adult (Ding et al. 2021, the folktables ACS income task the paper also "
                      "reports) is not available offline: folktables downloads the ACS PUMS files at run "
                      "time and no copy ships with the kit; not run"),
}

#: Ranges of the verdict keys (``--set`` is checked against them before any compute).
CONSTRAINTS = {
    "alpha": Constraint(0, 1, low_open=True, high_open=True, doc="the family-wise level of the verdicts"),
    "target_power": Constraint(0, 1, low_open=True, high_open=True, doc="the power a claim is planned for"),
    "pilot_replicates": Constraint(2, None, integer=True, doc="splits of the pilot (an sd needs 2)"),
    "max_replicates": Constraint(2, None, integer=True, doc="the budget of splits"),
    "converge_tol_violation": Constraint(0, None, low_open=True, doc="the reference check's violation tolerance"),
    "reference_iters": Constraint(1, None, integer=True, doc="Newton steps of the reference optimum"),
    "lr_edge_max_share": Constraint(0, 1, doc="the share of selections allowed at the largest learning rate"),
    "privacy_unit": Constraint(choices=("example", "sensitive_attribute"),
                               doc="the study's privacy unit (the paper's is sensitive_attribute)"),
}

_INF = float("inf")

_TAB_FULL = {
    "replicates": 8, "epochs": 200, "batch_size": 1024, "val_size": 0.15, "test_size": 0.2,
    "lams": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0],
    "methods": ["dpfermi", "pfld_stochastic", "pfld_epoch", "dpsgd"],
    "selection": "private", "runs_mean": 8.0, "runs_shape": 1.0,
    "lr_grid": [0.03, 0.1, 0.3, 1.0, 3.0, 10.0], "clip_grid": [1.0, 4.0],
    "fermi_lr_w_grid": [0.05, 0.5], "fermi_radius_grid": [1.0, 5.0],
    "pfld_lr_w_grid": [0.05, 0.5], "pfld_box_grid": [0.5, 2.0],
    "pfld_dual_lr_grid": [1.0, 10.0], "pfld_epoch_box_grid": [1.0, 5.0],
    "score_noise": 30.0, "w_noise_ratio": 4.0, "violation_noise_ratio": 10.0,
    "slack": 0.01, "bootstrap": 10000,
    # the convergence preconditions (preconditions.py, README "Preconditions"): at eps = inf each
    # method's mean test error at most converge_tol and its violation at most converge_tol_violation
    # above the non-private reference optimum of the ERMI objective (reference_iters float64 Newton
    # steps), per lambda; at most lr_edge_max_share of its selections at the grid's largest learning rate
    "converge_tol": 0.005, "converge_tol_violation": 0.01, "reference_iters": 40, "lr_edge_max_share": 0.25,
    # the verdicts (dpfair_jax.runner.verdict): Bonferroni over the experiment's baselines, and the
    # power a claim is planned for; auto_replicates=true (or replicates="auto" in a config given
    # programmatically) runs a pilot of pilot_replicates splits, then the count that brings every
    # claim's detectable effect below the paper's margin, at most max_replicates (the budget)
    "alpha": 0.05, "target_power": 0.8, "auto_replicates": False, "pilot_replicates": 4, "max_replicates": 32, "max_rows": 0, "delta": 0.0,
    "seed": 0, "path": "",
    # the paper's other baselines beside `methods` (PAPER_BASELINE_METHODS[fairness]), off by default
    "paper_baselines": False,
    # "example" (the kit's unit) or "sensitive_attribute" (the paper's Definition 2.2), checked by the study
    "privacy_unit": "example",
}
_TAB_QUICK = dict(_TAB_FULL, replicates=2, epochs=4, batch_size=256, lams=[1.0, 8.0], runs_mean=2.0,
                  lr_grid=[0.1, 0.3, 1.0, 3.0],
                  max_rows=6000, slack=0.02, converge_tol=0.02, converge_tol_violation=0.02, bootstrap=500)


def _cfgs(dataset: str, fairness: str, epsilons: list, **extra) -> dict:
    full = dict(_TAB_FULL, dataset=dataset, fairness=fairness, epsilons=epsilons, **extra)
    quick = dict(_TAB_QUICK, dataset=dataset, fairness=fairness, epsilons=[1.0, _INF], **extra)
    return {"quick": quick, "full": full}


#: The paper's own margin for each claim's statistic (dpfair_jax.fairness.frontier.paired_violation_gap),
#: computed once from the official result files (Figures/**/*.pt of the public repository
#: devanshgupta160/Stochastic-Differentially-Private-and-Fair-Learning) by
#: ``python -m experiments.paper_004.official_margins FIGURES_DIR``: per dataset and finite epsilon of
#: the paper, DP-FERMI's frontier (its lambda points, step reading) read at the baseline's test error
#: (+ 0.01 for DP-SGD, DP-FERMI's lambda = 0 point) against the baseline's test violation, then the
#: mean over the epsilons. Values: (margin, the per-epsilon gaps, the files). PF-LD (Tran et al.) is
#: the paper's baseline; DP-SGD is the kit's own comparison (the paper plots it as lambda = 0).
PAPER_MARGINS: dict[str, dict[str, tuple[float, str]]] = {
    "fermi_adult_dp": {
        "pfld_epoch": (0.0106, "official result files of Fig 2 (Adult, DP; FERMI_Multiple_Models/adult and "
                               "PFLD/adult, eps 0.5/1/3/9): PF-LD minus DP-FERMI at PF-LD's error, per eps "
                               "+0.0384/+0.0157/-0.0039/-0.0079, mean 0.0106"),
        "dpsgd": (0.1017, "official result files of Fig 2 (Adult, DP): DP-FERMI's lambda = 0 point minus its "
                          "frontier at that error + 0.01, per eps +0.0955/+0.1034/+0.1083/+0.0995, mean 0.1017"),
    },
    "fermi_credit_dp": {
        "pfld_epoch": (0.0069, "official result files of Fig 7 (Credit, DP; FERMI_Multiple_Models/credit-card "
                               "and PFLD/credit-card, eps 0.5/1/3/9): per eps +0.0100/+0.0076/+0.0035/+0.0064, "
                               "mean 0.0069"),
        "dpsgd": (0.0150, "official result files of Fig 7 (Credit, DP): lambda = 0 point minus the frontier at "
                          "its error + 0.01, per eps +0.0147/+0.0147/+0.0149/+0.0157, mean 0.0150"),
    },
    "fermi_parkinsons_dp": {
        "pfld_epoch": (0.0064, "official result files of Figs 3/8 (Parkinsons, DP, eps 0.5/1/3/9): per eps "
                               "+0.0026/+0.0101/+0.0032/+0.0097, mean 0.0064"),
        "dpsgd": (0.0079, "official result files of Figs 3/8 (Parkinsons, DP): per eps "
                          "+0.0073/+0.0074/+0.0094/+0.0074, mean 0.0079"),
    },
    "fermi_adult_eo": {
        "pfld_epoch": (0.0370, "official result files of Fig 9 (Adult, EO; Equalized Odds Experiments/"
                               "FERMI_Multiple_Models/adult and PFLD/adult_eps_*, eps 0.5/1/3): per eps "
                               "+0.0488/+0.0888/-0.0266, mean 0.0370"),
        "dpsgd": (0.0913, "official result files of Fig 9 (Adult, EO): per eps +0.0897/+0.0896/+0.0947, "
                          "mean 0.0913"),
    },
    "fermi_credit_eo": {
        "pfld_epoch": (0.0008, "official result files of Fig 4 (Credit, EO, eps 0.5/1/3): per eps "
                               "+0.0001/+0.0013/+0.0010, mean 0.0008"),
        "dpsgd": (0.0128, "official result files of Fig 4 (Credit, EO): per eps +0.0117/+0.0117/+0.0152, "
                          "mean 0.0128"),
    },
}

_OFFICIAL_FULL = {"dataset": "adult", "epochs": 200, "batch_size": 1024, "lr_theta": 0.005, "lr_w": 0.01,
                  "clip_theta": 5.0, "clip_w": 5.0, "radius": 5.0, "lams": [0.0, 0.25, 0.5, 1.0, 1.5, 2.5],
                  "epsilon": 1.0, "seeds": 5, "max_rows": 0, "seed": 0}

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "fermi_adult_dp": _cfgs("adult", "dp", [0.5, 1.0, 3.0, 9.0, _INF]),
    "fermi_credit_dp": _cfgs("credit", "dp", [0.5, 1.0, 3.0, 9.0, _INF]),
    "fermi_parkinsons_dp": _cfgs("parkinsons", "dp", [0.5, 1.0, 3.0, 9.0, _INF]),
    "fermi_credit_eo": _cfgs("credit", "eo", [0.5, 1.0, 3.0, _INF]),
    "fermi_adult_eo": _cfgs("adult", "eo", [0.5, 1.0, 3.0, _INF]),
    # not available offline: a note row (experiments/paper_004/unavailable.py)
    "fermi_retired_adult_dp": {size: {"dataset": "retired_adult", "label": "Retired Adult", "fairness": "dp"}
                               for size in ("quick", "full")},
    "fermi_official_code": {
        "quick": dict(_OFFICIAL_FULL, epochs=3, batch_size=256, lr_theta=0.2, lr_w=0.5, lams=[0.0, 2.5],
                      seeds=2, max_rows=8000),
        "full": _OFFICIAL_FULL,
    },
    "fermi_adult_nonbinary": {
        "quick": dict(_TAB_QUICK, dataset="adult", fairness="dp", target="age9", groups="race",
                      epsilons=[3.0], methods=["dpfermi", "dpsgd"], lams=[2.0], converge_tol=0.05),
        "full": dict(_TAB_FULL, dataset="adult", fairness="dp", target="age9", groups="race",
                     epsilons=[3.0, 9.0, _INF]),
    },
    "fermi_cnn_synthetic": {
        "quick": {"n_train": 512, "n_test": 512, "steps": 60, "batch_size": 32, "channels": [4],
                  "lr_theta": 0.05, "lr_w": 0.1, "clip_theta": 1.0, "clip_w": 3.0, "radius": 5.0,
                  "lams": [0.0, 2.0], "epsilons": [10.0], "seeds": 2, "seed": 0},
        "full": {"n_train": 4096, "n_test": 2048, "steps": 1500, "batch_size": 32, "channels": [8, 16],
                 "lr_theta": 0.05, "lr_w": 0.1, "clip_theta": 1.0, "clip_w": 3.0, "radius": 5.0,
                 "lams": [0.0, 1.0, 4.0], "epsilons": [10.0, 50.0, 200.0], "seeds": 5, "seed": 0},
    },
    "sgda_convergence": {
        "quick": {"d": 5, "dw": 3, "ns": [200, 800], "epsilons": [1.0, 4.0], "epochs": 5,
                  "batch_frac": 0.25, "lr_theta": 0.1, "lr_w": 0.5, "clip": 5.0, "radius": 10.0,
                  "seeds": 4, "seed": 0},
        "full": {"d": 10, "dw": 5, "ns": [250, 500, 1000, 2000, 4000, 8000],
                 "epsilons": [0.5, 1.0, 4.0, _INF], "epochs": 40, "batch_frac": 0.1,
                 "lr_theta": 0.05, "lr_w": 0.5, "clip": 5.0, "radius": 10.0, "seeds": 10, "seed": 0},
    },
}
