"""dpfair_jax.studies: the reusable parts of the papers' studies, built on the algorithms.

The studies themselves (configs, claims, figures) live outside the package, in the repository's
``experiments/`` folders; what they share with notebooks, benchmarks, audits and other studies lives
here:

- :mod:`.allocation` (paper 000): ``two_group_trial``, ``two_group_study``, ``method_configs``,
  ``hyperparams_from``, ``trial_chunk_size``, ``PRIVATE_METHODS``, ``SETTINGS``;
- :mod:`.grids` (paper 002 and its notebook): ``candidate_grid``, ``halfplane_grid``, ``clipped_square_losses``;
- :mod:`.bgl` (paper 002): ``public_private_split``, ``bgl_problem``;
- :mod:`.stratification` (paper 003): ``mixture_trial``;
- :mod:`.aim` (paper 003): ``aim_factory``, ``aim_available`` (smartnoise-synth's AIM, optional);
- :mod:`.tradeoff` (paper 004): ``tradeoff_study``, ``equal_error_table``, ``baseline_name``,
  ``plot_tradeoff``;
- :mod:`.synthesis` (paper 003): ``synthesis_study``, ``adult_synthesis_table``,
  ``column_mean_parity_error`` (its algorithm: :mod:`dpfair_jax.algorithms.synthesis`).

Code that only one paper's study uses lives in that study's folder (e.g. ``experiments/paper_002/scaling.py``,
``experiments/paper_000/kgroup_design.py``; paper 001's named data sets,
``experiments/paper_001/datasets.py``, on :func:`dpfair_jax.data.load`).
"""

from __future__ import annotations

from dpfair_jax.studies.synthesis import synthesis_study
from dpfair_jax.studies import allocation, bgl, grids, stratification, tradeoff
from dpfair_jax.studies import aim  # paper 003: smartnoise-synth's AIM (the synth extra), optional
from dpfair_jax.studies.allocation import (
    PRIVATE_METHODS,
    SETTINGS,
    hyperparams_from,
    method_configs,
    trial_chunk_size,
    two_group_study,
    two_group_trial,
)
from dpfair_jax.studies.bgl import bgl_problem, public_private_split
from dpfair_jax.studies.grids import candidate_grid, clipped_square_losses, halfplane_grid
from dpfair_jax.studies.stratification import mixture_trial
from dpfair_jax.studies.tradeoff import TradeoffStudy, baseline_name, compare_frontiers, equal_error_table, plot_tradeoff, tradeoff_frontier_study, tradeoff_study  # noqa: E501

__all__ = [
    "PRIVATE_METHODS",
    "SETTINGS",
    "aim",
    "allocation",
    "baseline_name",
    "bgl",
    "bgl_problem",
    "candidate_grid",
    "clipped_square_losses",
    "equal_error_table",
    "grids",
    "halfplane_grid",
    "hyperparams_from",
    "method_configs",
    "mixture_trial",
    "plot_tradeoff",
    "public_private_split",
    "stratification",
    "synthesis_study",
    "tradeoff",
    "tradeoff_study",
    "tradeoff_frontier_study",
    "trial_chunk_size",
    "two_group_study",
    "two_group_trial",
]
