"""The paper's other baselines in the paper-004 tradeoff experiments: which methods a config runs.

``paper_baselines=true`` adds :data:`config.PAPER_BASELINE_METHODS` (Tran et al. 2021a's
mitigation; Jagielski et al. 2019's post-processing and in-processing DP-oracle-learner for
equalized odds) to the configured
``methods``. They are reported in their own rows of the table; the claims compare DP-FERMI with
the baselines of ``study._baselines`` only (PF-LD as Tran et al. specify it decides).
"""

from __future__ import annotations

from dpfair_jax.studies.tradeoff import BASELINE_METHODS

from .config import PAPER_BASELINE_METHODS

__all__ = ["study_methods", "study_search"]


def study_methods(config: dict) -> list[str]:
    """``config["methods"]``, plus the paper's other baselines for ``config["fairness"]`` when
    ``config["paper_baselines"]`` is set (each name once, in order)."""
    methods = list(config["methods"])
    if config.get("paper_baselines"):
        methods += [m for m in PAPER_BASELINE_METHODS[config["fairness"]] if m not in methods]
    return methods


def study_search(config: dict, search: dict) -> dict:
    """``search`` with the paper's other gradient-trained baselines' grids: the config's learning-rate
    and clip grids (the candidates every method shares). The oracle learner (``jagielski_in``) keeps
    the study's default grid (the Auditor's step; its multiplier bound is the study's lambda)."""
    grid = {"lr_theta": list(config["lr_grid"]), "clip_theta": list(config["clip_grid"])}
    return {**search, **{m: dict(grid) for m in PAPER_BASELINE_METHODS["eo"] if m in BASELINE_METHODS}}
