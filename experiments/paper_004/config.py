"""Quick and full configs of the paper-004 experiments (``CONFIGS[name] = {"quick": ..., "full": ...}``).

Tradeoff studies (``fermi_{adult,credit}_{dp,eo}``, Parkinsons, non-binary Adult): four methods,
lambda log-spaced up to 40, every method tuned per (epsilon, lambda, split) on validation by
random stopping with the same law (``runs_mean``, ``runs_shape``) over the candidate grids below,
DP-SGD trained to convergence (20 epochs, learning rate tuned; a converged non-private logistic
regression is the reference). Full: 8 splits, epsilon in {0.5, 1, 3, 9, inf} ({0.5, 1, 3, inf} for
EO), for one GPU (expected 1-1.5 minutes per setting on an H100/H200, about 5 for the four).
Quick: a smoke check on a 6,000-row subset, 2 splits, 2 lambdas, eps in {1, inf}.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONFIGS"]

_INF = float("inf")

_TAB_FULL = {
    "replicates": 8, "epochs": 20, "batch_size": 1024, "val_size": 0.15, "test_size": 0.2,
    "lams": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0],
    "methods": ["dpfermi", "pfld_stochastic", "pfld_epoch", "dpsgd"],
    "selection": "private", "runs_mean": 8.0, "runs_shape": 1.0,
    "lr_grid": [0.1, 0.3, 1.0, 3.0], "clip_grid": [1.0, 4.0],
    "fermi_lr_w_grid": [0.05, 0.5], "fermi_radius_grid": [1.0, 5.0],
    "pfld_lr_w_grid": [0.05, 0.5], "pfld_box_grid": [0.5, 2.0],
    "pfld_dual_lr_grid": [1.0, 10.0], "pfld_epoch_box_grid": [1.0, 5.0],
    "score_noise": 30.0, "w_noise_ratio": 4.0, "violation_noise_ratio": 10.0,
    "slack": 0.01, "converge_tol": 0.005, "verdict_min_replicates": 5, "bootstrap": 10000, "max_rows": 0, "delta": 0.0,
    "seed": 0, "path": "",
}
_TAB_QUICK = dict(_TAB_FULL, replicates=2, epochs=4, batch_size=256, lams=[1.0, 8.0], runs_mean=2.0,
                  max_rows=6000, slack=0.02, converge_tol=0.02, bootstrap=500)


def _cfgs(dataset: str, fairness: str, epsilons: list, **extra) -> dict:
    full = dict(_TAB_FULL, dataset=dataset, fairness=fairness, epsilons=epsilons, **extra)
    quick = dict(_TAB_QUICK, dataset=dataset, fairness=fairness, epsilons=[1.0, _INF], **extra)
    return {"quick": quick, "full": full}


_OFFICIAL_FULL = {"dataset": "adult", "epochs": 200, "batch_size": 1024, "lr_theta": 0.005, "lr_w": 0.01,
                  "clip_theta": 5.0, "clip_w": 5.0, "radius": 5.0, "lams": [0.0, 0.25, 0.5, 1.0, 1.5, 2.5],
                  "epsilon": 1.0, "seeds": 5, "max_rows": 0, "seed": 0}

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "fermi_adult_dp": _cfgs("adult", "dp", [0.5, 1.0, 3.0, 9.0, _INF]),
    "fermi_credit_dp": _cfgs("credit", "dp", [0.5, 1.0, 3.0, 9.0, _INF]),
    "fermi_parkinsons_dp": _cfgs("parkinsons", "dp", [0.5, 1.0, 3.0, 9.0, _INF]),
    "fermi_credit_eo": _cfgs("credit", "eo", [0.5, 1.0, 3.0, _INF]),
    "fermi_adult_eo": _cfgs("adult", "eo", [0.5, 1.0, 3.0, _INF]),
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
