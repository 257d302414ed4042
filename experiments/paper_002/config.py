"""Quick and full configs of the paper-002 experiments (``CONFIGS[name] = {"quick": ..., "full": ...}``).

The paper has no experiments; quick sizes check its algorithms and bounds in minutes on a CPU,
full sizes use larger grids, more epsilons and 500-1000 seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax.runner.registry import Constraint

__all__ = ["CONFIGS", "CONSTRAINTS"]

_SYN_QUICK = {"dataset": "synthetic", "group_sizes": [4000, 1000], "slopes": [1.0, -1.0], "noise_sd": 0.3,
              "group_intercepts": [0.0, 0.5], "grid_per_axis": 31, "grid_radius": 1.5,
              "intercepts": [-0.5, -0.25, 0.0, 0.25, 0.5, 0.75], "loss_bound": 4.0, "slack": 0.5, "temperature": 200.0, "penalty_smoothing": 5000.0,
              "alpha": 0.05, "epsilons": [0.3, 1.0, 3.0, 10.0], "delta": 1e-6, "steps": 30, "fw_steps": 3000,
              "seeds": 64, "seed": 0, "fairlearn": True, "public_fraction": 0.2, "claim_prefix": "p002_syn", "title": "synthetic, bounded group loss"}
_SYN_FULL = dict(_SYN_QUICK, group_sizes=[40000, 4000], grid_per_axis=61,
                 intercepts=[-0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0], epsilons=[0.1, 0.3, 1.0, 3.0, 10.0, 30.0],
                 steps=60, fw_steps=10000, seeds=1000)
_LAW_QUICK = {"dataset": "law", "groups": "race", "target": "zfya", "features": ["LSAT", "UGPA"],
              "grid_per_axis": 9, "grid_radius": 0.8, "intercepts": [-0.4, -0.2, 0.0, 0.2],
              "loss_bound": 9.0, "slack": 0.5, "temperature": 200.0, "penalty_smoothing": 5000.0, "alpha": 0.05, "epsilons": [0.3, 1.0, 3.0, 10.0], "delta": 1e-6,
              "steps": 30, "fw_steps": 3000, "seeds": 32, "seed": 0, "fairlearn": True, "public_fraction": 0.2,
              "claim_prefix": "p002_law",
              "title": "Law school (race), bounded group loss"}
_LAW_FULL = dict(_LAW_QUICK, grid_per_axis=17, intercepts=[-0.6, -0.4, -0.2, 0.0, 0.2, 0.4],
                 epsilons=[0.1, 0.3, 1.0, 3.0, 10.0, 30.0], steps=60, fw_steps=10000, seeds=500)


def _eo_cfgs(dataset: str, features: list[str], target: str = "income", eo_bound: float = 0.05) -> dict:
    quick = {"dataset": dataset, "groups": "sex", "target": target, "features": features, "num_angles": 16,
             "thresholds": [float(v) for v in np.linspace(-2.0, 3.0, 21)], "alpha": 0.05, "eo_bound": eo_bound,
             "eta": 50.0, "penalty_smoothing": 5000.0, "epsilons": [1.0, 3.0, 10.0, 30.0], "seeds": 64,
             "fw_steps": 3000, "dpfermi": False, "seed": 0, "public_fraction": 0.2,
             "exact_epsilon_range": [0.1, 1.0e4], "exact_epsilon_points": 61,
             "fermi": {"lams": [0.0, 2.5], "seeds": 2, "epochs": 2, "batch_size": 1024, "lr_theta": 0.2,
                       "lr_w": 0.5, "clip_theta": 2.0, "clip_w": 3.0, "radius": 5.0}}
    full = dict(quick, num_angles=32, thresholds=[float(v) for v in np.linspace(-2.5, 3.5, 41)],
                epsilons=[0.3, 1.0, 3.0, 10.0, 30.0], seeds=1000, fw_steps=10000, dpfermi=True,
                fermi={"lams": [0.0, 0.5, 1.0, 2.5], "seeds": 5, "epochs": 50, "batch_size": 1024,
                       "lr_theta": 0.005, "lr_w": 0.01, "clip_theta": 2.0, "clip_w": 3.0, "radius": 5.0})
    return {"quick": quick, "full": full}


CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "reductions_synthetic_bgl": {"quick": _SYN_QUICK, "full": _SYN_FULL},
    "reductions_law_bgl": {"quick": _LAW_QUICK, "full": _LAW_FULL},
    "reductions_sample_complexity": {
        "quick": {"rs": [0.25, 0.5, 1.0], "Ks": [8, 32, 128], "epsilons": [0.125, 0.25, 0.5, 0.9],
                  "n": 100000, "trials": 2000, "delta": 1e-6, "seed": 0,
                  "lemma58": {"trials": 1000, "steps": 10, "n": 2000, "control": False}},
        "full": {"rs": [0.1, 0.25, 0.5, 1.0], "Ks": [4, 16, 64, 256, 1024],
                 "epsilons": [0.05, 0.1, 0.25, 0.5, 0.9], "n": 1000000, "trials": 20000,
                 "delta": 1e-6, "seed": 0, "lemma58": {"trials": 20000, "steps": 10, "n": 2000, "control": True}},
    },
    "reductions_scaling": {
        "quick": {"Ks": [2, 4, 8, 16], "alphas": [0.1, 0.05, 0.025, 0.0125], "num_decisions": 1001,
                  "noise_var": 0.05, "slack": 0.5, "epsilon": 1.0, "delta": 1e-6, "level": 0.9,
                  "n_range": [10.0, 1.0e22], "n_points": 700, "seed": 0},
        "full": {"Ks": [2, 4, 8, 16, 32, 64], "alphas": [0.2, 0.1, 0.05, 0.025, 0.0125, 0.00625],
                 "num_decisions": 4001, "noise_var": 0.05, "slack": 0.5, "epsilon": 1.0, "delta": 1e-6,
                 "level": 0.9, "n_range": [10.0, 1.0e26], "n_points": 1500, "seed": 0},
    },
    "reductions_adult_eo": _eo_cfgs("adult", ["education-num", "marital-status_Married-civ-spouse"]),
    "reductions_credit_eo": _eo_cfgs("credit", ["PAY_0", "LIMIT_BAL"], target="default", eo_bound=0.01),
}

#: ``--set`` ranges beyond the defaults by key name (``dpfair_jax.runner.registry.default_constraint``).
CONSTRAINTS: dict[str, Constraint] = {
    "alpha": Constraint(0, 1, low_open=True, high_open=True, doc="the CGOO accuracy"),
    "public_fraction": Constraint(0, 1, low_open=True, high_open=True,
                                  doc="share of the rows held out as public data"),
}
