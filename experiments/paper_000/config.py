"""Quick and full configs of the paper-000 study (``QUICK``, ``FULL``).

Every config is the paper's method settings (:data:`dpfair_jax.studies.allocation.SETTINGS`: ``T =
50``, learning rate 0.1, ``Delta = 2``, ``C_P = [-5, 5]``, ``tau = 0.2 rho``, replace-one) plus the
study's grid: size ratios, slope pairs, the epsilon grid (``rho = eps^2 / 2``), the Fig. 3 noise
sweep, the K-group design of Tables 1-3 (the "20x" extremes; middle sizes calibrated to the paper's
DPNoSE column), the real data sets of Table 4, and the two readings of stage 2's weighting
(``readings``: group means and sums; the summed reading's two-group sweep at ``summed_ratios``).
"""

from __future__ import annotations

import numpy as np

from dpfair_jax.studies.allocation import SETTINGS

__all__ = ["FULL", "QUICK", "SLOPE_PAIRS"]

SLOPE_PAIRS = [[-10.0, 10.0], [10.0, -10.0], [10.0, 1.0], [-10.0, -1.0], [-1.0, 1.0], [1.0, -1.0]]

FULL = dict(
    SETTINGS,
    seed=0,
    trials=1000,
    chunk_size="auto",  # trials vmapped per chunk: "auto" (trial_chunk_size) or an int
    minority=100,
    ratios=[5, 20, 50, 100],
    slope_pairs=SLOPE_PAIRS,
    noise_sd=1.0,
    epsilons=np.round(np.geomspace(0.1, 10.0, 20), 4).tolist(),
    fig3_ratios=[20, 100],
    fig3_slope_pairs=[[-1.0, 1.0], [1.0, -1.0]],
    fig3_noise_sds=[0.5, 2.0, 4.0],
    kgroup_ks=[5, 10, 15, 20],
    kgroup_designs=[[10000, 500]],  # Tables 1-3 are all captioned "20x"
    kgroup_middle="calibrated",
    readings=["group_mean", "summed"],
    summed_ratios=[20, 100],
    summed_trials=1000,
    kgroup_rhos=[2.0, 4.5, 8.0],
    kgroup_trials=200,
    real_datasets=["law", "credit"],
    real_rhos=[0.005, 0.125, 0.5, 2.0, 4.5, 8.0, 12.5],
    real_trials=20,
    real_steps=100,
    real_lr=0.2,
    lemma31_draws=200000,
    digits=True,  # Sec. 6 MNIST 8-vs-2 reconstruction on sklearn's 8x8 digits
    digits_trials=200,
    digits_majority=120,
    digits_minority=20,
    digits_steps=100,
    digits_lr=0.5,
)

QUICK = dict(
    SETTINGS,
    seed=0,
    trials=40,
    chunk_size="auto",  # trials vmapped per chunk: "auto" (trial_chunk_size) or an int
    minority=100,
    ratios=[20],
    slope_pairs=[[-10.0, 10.0], [10.0, 1.0], [-10.0, -1.0]],
    noise_sd=1.0,
    epsilons=[1.0, 3.0, 10.0],
    fig3_ratios=[],
    fig3_slope_pairs=[[-1.0, 1.0]],
    fig3_noise_sds=[2.0],
    kgroup_ks=[5],
    kgroup_designs=[[10000, 500]],
    kgroup_middle="calibrated",
    readings=["group_mean", "summed"],
    summed_ratios=[20],
    summed_trials=40,
    kgroup_rhos=[2.0, 8.0],
    kgroup_trials=20,
    real_datasets=[],
    real_rhos=[0.5, 8.0],
    real_trials=10,
    real_steps=100,
    real_lr=0.2,
    lemma31_draws=20000,
    digits=False,  # the digits reconstruction runs in the full config only
    digits_trials=200,
    digits_majority=120,
    digits_minority=20,
    digits_steps=100,
    digits_lr=0.5,
)
