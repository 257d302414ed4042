"""Quick and full configs of the paper-004 experiments (``CONFIGS[name] = {"quick": ..., "full": ...}``).

Quick sizes run on a CPU in minutes; full sizes are the paper's grids (Figs 2-9: 15 seeds, 200
epochs, lambda in {0, ..., 2.5}, epsilon in {0.5, 1, 3, 9, inf}).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONFIGS"]

_TAB_FULL = {
    "seeds": 15, "epochs": 200, "batch_size": 1024, "lr_theta": 0.005, "lr_w": 0.01,
    "clip_theta": 2.0, "clip_w": 3.0, "radius": 5.0, "pfld_radius": 1.0,
    "lams": [0.0, 0.25, 0.5, 1.0, 1.5, 2.5], "methods": ["dpfermi", "pfld"],
    "error_slack": 0.01, "seed_block": 5, "split_seed": 0, "delta": 0.0, "seed": 0, "path": "",
    "unit": "all_features",
}
_TAB_QUICK = dict(_TAB_FULL, seeds=2, epochs=2, lr_theta=0.2, lr_w=0.5, lams=[0.0, 1.0, 2.5],
                  seed_block=2, error_slack=0.02)


def _cfgs(dataset: str, fairness: str, epsilons: list, quick_eps: list, **extra) -> dict:
    full = dict(_TAB_FULL, dataset=dataset, fairness=fairness, epsilons=epsilons, **extra)
    quick = dict(_TAB_QUICK, dataset=dataset, fairness=fairness, epsilons=quick_eps, **extra)
    return {"quick": quick, "full": full}


_INF = float("inf")

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "fermi_adult_dp": _cfgs("adult", "dp", [0.5, 1.0, 3.0, 9.0, _INF], [1.0]),
    "fermi_credit_dp": _cfgs("credit", "dp", [0.5, 1.0, 3.0, 9.0, _INF], [1.0]),
    "fermi_parkinsons_dp": _cfgs("parkinsons", "dp", [0.5, 1.0, 3.0, 9.0, _INF], [1.0]),
    "fermi_credit_eo": _cfgs("credit", "eo", [0.5, 1.0, 3.0, _INF], [1.0]),
    "fermi_adult_eo": _cfgs("adult", "eo", [0.5, 1.0, 3.0, _INF], [1.0]),
    "fermi_adult_nonbinary": {
        "quick": dict(_TAB_QUICK, dataset="adult", fairness="dp", target="age9", groups="race",
                      epsilons=[3.0], methods=["dpfermi"], lams=[0.0, 2.0]),
        "full": dict(_TAB_FULL, dataset="adult", fairness="dp", target="age9", groups="race",
                     epsilons=[3.0, 9.0, _INF], methods=["dpfermi", "pfld"], seeds=5, epochs=50),
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
