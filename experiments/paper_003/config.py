"""Quick and full configs of the paper-003 study (``QUICK``, ``FULL``): parts theory, mixture (Fig. 3),
strata (Fig. 2) and synthesis (Figs. 4, 5, 7)."""

from __future__ import annotations

from typing import Any

from dpfair_jax.runner.registry import Constraint

__all__ = ["CONSTRAINTS", "FULL", "QUICK"]

QUICK: dict[str, Any] = {
    "seed": 0,
    "parts": ["theory", "mixture", "strata", "synthesis"],
    # theory
    "thm9_n": 196967, "thm9_ks": [3, 6, 9, 12], "thm9_alphas": [0.13, 0.3, 0.5, 0.7, 1.0, 3.0, 10.0],
    "thm9_draws": 5000,
    "tail_draws": 200000,
    "var_sizes": [7000, 2000, 800, 150, 50], "var_draws": 4000,
    "prop8_n": 8000, "prop8_ks": [1, 2, 4, 8, 16, 32], "prop8_draws": 2000,
    "R": 3.0, "gamma": 0.05, "epsilon": 1.0,
    # mixture (Fig. 3)
    "ns": [4000, 12000, 20000], "ks": [3, 12], "alphas": [0.3, 1.0, 10.0], "runs": 20,
    "rho": 0.5, "rho_split": [0.25, 0.75], "center": 0.0, "radius": 3.0, "chunk_size": 256,
    "relation": "replace_one_within_group",
    # strata (Fig. 2)
    "variables": ["hours-per-week", "education-num", "age"],
    "strata_columns": ["sex", "race", "age_bucket", "marital-status", "native_us"],
    "variable_prior": {"hours-per-week": [40.0, 80.0, 12.0], "education-num": [10.0, 12.0, 2.5],
                       "age": [40.0, 60.0, 13.0]},
    "scale_mode": "public_scale", "strata_runs": 16, "min_stratum_fraction": 0.001,
    "adult_path": None, "acs_path": None,
    # synthesis (Figs. 4, 5, 7)
    "synthesizer": "marginal", "synth_epsilons": [0.5, 5.0], "synth_delta": 1e-9,
    "synth_variants": ["vanilla", "sex", "race", "sex_race"], "synth_seeds": 1,
    "synth_rows": 8000, "classifier_trees": 10,
    # optional AIM (smartnoise-synth, the synth extra; skipped with the reason when absent)
    # (aim_seeds trials, >= 2 for the intervals; aim_rounds = AIM's T, 0 = its default 16 d; the claim is
    # decided on the cells with epsilon >= aim_min_epsilon, the paper's "higher budgets")
    "synth_aim": True, "aim_epsilons": [1.0, 5.0], "aim_variants": ["vanilla", "sex"], "aim_rows": 4000,
    "aim_seeds": 2, "aim_rounds": 0, "aim_min_epsilon": 1.0,
}
FULL: dict[str, Any] = dict(QUICK, thm9_draws=50000, tail_draws=2000000, var_draws=40000,
                            prop8_draws=40000, ns=[4000, 8000, 12000, 16000, 20000], ks=[3, 6, 12],
                            alphas=[0.3, 0.5, 0.7, 1.0, 3.0, 10.0], runs=50, strata_runs=50,
                            synth_epsilons=[0.1, 0.5, 1.0, 5.0], synth_seeds=3, synth_rows=0,
                            classifier_trees=100, aim_epsilons=[0.1, 0.5, 1.0, 5.0],
                            aim_variants=["vanilla", "sex", "race", "sex_race"], aim_rows=0, aim_seeds=3)

#: ``--set`` ranges beyond the defaults by key name (``dpfair_jax.runner.registry.default_constraint``).
CONSTRAINTS: dict[str, Constraint] = {
    "synth_rows": Constraint(0, integer=True, doc="rows of Adult fed to the synthesizer; 0 = all"),
    "aim_rows": Constraint(0, integer=True, doc="rows of Adult fed to AIM; 0 = all"),
    "aim_seeds": Constraint(1, integer=True, doc="AIM trials per cell (an interval needs >= 2)"),
    "aim_rounds": Constraint(0, integer=True, doc="AIM's rounds T; 0 = AIM's default 16 d"),
    "aim_min_epsilon": Constraint(0, doc="the claim's cells: epsilon >= this (the paper's higher budgets)"),
    "gamma": Constraint(0, 1, low_open=True, high_open=True, doc="Prop. 8's failure probability"),
}
