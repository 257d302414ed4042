"""Paper 000's closed forms (privacy budget tailoring, zCDP), beside the algorithm.

:func:`budget_tailoring_split`, :func:`stage1_budgets`, :func:`stage1_noise_stds`,
:func:`stage2_group_budgets`, :func:`stage2_noise_stds`, :func:`dpnose_noise_stds` and
:func:`budget_tailoring_ledger`, each the paper's stated formula, as host-side float64 helpers.
The algorithm computes its stds with :mod:`dpfair_jax.privacy.relations`' sensitivities; the tests
check the two against each other.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy.accounting import ZcdpLedger, gaussian_sigma_for_rho
from dpfair_jax.privacy.zcdp_noise import host_gaussian_std_per_step

__all__ = [
    "budget_tailoring_split",
    "Stage1Budgets",
    "stage1_budgets",
    "Stage1Stds",
    "stage1_noise_stds",
    "stage2_group_budgets",
    "Stage2Stds",
    "stage2_noise_stds",
    "dpnose_noise_stds",
    "budget_tailoring_ledger",
]


def budget_tailoring_split(rho: float, tau_fraction: float = 0.2) -> tuple[float, float]:
    """Paper 000 Sec. 6: total rho = tau (stage 1) + mu (stage 2), with tau = 0.2 rho, mu = 0.8 rho."""
    V.check_rho(rho)
    if not 0.0 < tau_fraction < 1.0:
        raise ValueError(f"tau_fraction must lie in (0, 1), got {tau_fraction!r}.")
    tau = float(tau_fraction) * float(rho)
    return tau, float(rho) - tau


class Stage1Budgets(NamedTuple):
    """Stage-1 zCDP budgets of paper 000 Algorithm 1 (lines 7-9, 17)."""

    tau_k: float  # tau / (K + 1)
    tau_xx: float  # tau_k / 2, for X^T X
    tau_xy: float  # tau_k / 2, for X^T Y
    tau_se: float  # tau_k, for each group's squared-residual sum


def stage1_budgets(tau: float, num_groups: int) -> Stage1Budgets:
    """Paper 000 Algorithm 1, line 7: ``tau_k = tau/(K+1)``; X^T X and X^T Y get ``tau_k/2`` each
    and each of the K groups' SE gets ``tau_k`` (Lemma 4.1/B.1; total ``(K+1) tau_k = tau``).

    The Sec. 4 text says "tau/K for each group's SE", which with the sufficient statistics would
    exceed tau; the algorithm's ``tau/(K+1)`` is used.
    """
    V.check_rho(tau, "tau")
    k = V.check_int("num_groups", num_groups)
    tau_k = float(tau) / (k + 1)
    return Stage1Budgets(tau_k, tau_k / 2.0, tau_k / 2.0, tau_k)


class Stage1Stds(NamedTuple):
    """Noise stds of paper 000 Algorithm 1."""

    std_xx: float  # symmetric noise on X^T X (upper triangle iid)
    std_xy: float  # noise on X^T Y
    std_se: float  # noise on each group's clipped squared-residual sum


def stage1_noise_stds(
    tau: float, num_groups: int, *, stat_sensitivity: float, se_sensitivity: float
) -> Stage1Stds:
    """Stds of Algorithm 1: ``sens / sqrt(2 budget)`` for each release (Bun & Steinke Lemma 2.5).

    ``std_xx = std_xy = stat_sensitivity / sqrt(tau_k)`` (budget ``tau_k/2``; Lemma C.1 with
    ``stat_sensitivity = U^2``, see :func:`gram_sensitivity`) and
    ``std_se = se_sensitivity / sqrt(2 tau_k)`` (line 17: variance ``Delta^4/(2 tau_k)`` with
    ``se_sensitivity = Delta^2``, squared residuals clipped to ``[0, Delta^2]``).

    Privacy: tau-zCDP in total (Lemma 4.1) under whatever relation the sensitivities are for.
    """
    V.check_positive("stat_sensitivity", stat_sensitivity)
    V.check_positive("se_sensitivity", se_sensitivity)
    b = stage1_budgets(tau, num_groups)
    return Stage1Stds(
        gaussian_sigma_for_rho(stat_sensitivity, b.tau_xx),
        gaussian_sigma_for_rho(stat_sensitivity, b.tau_xy),
        gaussian_sigma_for_rho(se_sensitivity, b.tau_se),
    )


def _check_s(s: object) -> np.ndarray:
    arr = np.asarray(s, dtype=np.float64)
    V.check_shape("s", arr, ndim=1)
    V.check_finite("s", arr)
    V.check_positive("s", arr)
    total = float(np.sum(arr**2))
    if abs(total - 1.0) > 1e-9:
        raise ValueError(
            f"s must be normalised so that sum_k s_k^2 = 1 (Algorithm 1, line 23), got {total!r}; "
            "divide s by sqrt(sum(s**2))."
        )
    return arr


def stage2_group_budgets(mu: float, s: object, steps: int, *, algorithm: int = 2) -> np.ndarray:
    """Per-group, per-iteration zCDP budgets of paper 000 stage 2.

    Algorithm 2 (lines 9, 12): ``mu_T,k = mu s_k^2 / (2T)`` for *each* of the two releases
    (gradient ``M_1^k`` and loss ``M_2^k``). Algorithm 3 (line 7): ``mu s_k^2 / T`` for the one
    gradient release. Either way the T iterations spend ``mu`` in total because
    ``sum_k s_k^2 = 1`` (Lemma 4.2/B.2, B.3).
    """
    V.check_rho(mu, "mu")
    arr = _check_s(s)
    steps = V.check_int("steps", steps)
    if algorithm not in (2, 3):
        raise ValueError(f"algorithm must be 2 (with fairness) or 3 (without), got {algorithm!r}.")
    return float(mu) * arr**2 / ((2.0 if algorithm == 2 else 1.0) * steps)


class Stage2Stds(NamedTuple):
    """Group-weighted noise stds of paper 000 stage 2, one per group ([K] arrays)."""

    grad_std: np.ndarray
    loss_std: np.ndarray | None


def stage2_noise_stds(
    mu: float,
    s: object,
    steps: int,
    *,
    grad_sensitivity: float,
    loss_sensitivity: float | None = None,
    algorithm: int = 2,
) -> Stage2Stds:
    """Group-weighted Gaussian stds of paper 000 Algorithms 2/3: ``sens / sqrt(2 mu_T,k)``.

    Algorithm 2 (lines 11, 14): gradient variance ``Delta^2/(2 mu_T) = T Delta^2/(mu s_k^2)``
    and loss variance ``T Delta^4 / (mu s_k^2)`` (pass ``loss_sensitivity = Delta^2``).
    Algorithm 3 (line 9): gradient variance ``T Delta^2 / (2 mu s_k^2)``.
    Sensitivities are those of the group's clipped *sum* (:func:`clipped_sum_sensitivity`); the
    literal Algorithm 2 line 10 averages by ``1/n_k`` *before* adding this noise, which the kit's
    algorithms offer as a variant; that choice does not change these stds.

    Privacy: mu-zCDP over the T iterations (sequential composition over groups and steps).
    """
    V.check_positive("grad_sensitivity", grad_sensitivity)
    budgets = stage2_group_budgets(mu, s, steps, algorithm=algorithm)
    grad = gaussian_sigma_for_rho(float(grad_sensitivity), budgets)
    loss = None
    if algorithm == 2:
        if loss_sensitivity is None:
            raise ValueError("algorithm 2 releases group losses too: pass loss_sensitivity (Delta^2).")
        V.check_positive("loss_sensitivity", loss_sensitivity)
        loss = gaussian_sigma_for_rho(float(loss_sensitivity), budgets)
    elif loss_sensitivity is not None:
        raise ValueError("algorithm 3 releases no losses; drop loss_sensitivity.")
    return Stage2Stds(grad, loss)


def dpnose_noise_stds(
    rho: float, steps: int, num_groups: int, *, grad_sensitivity: float, variant: str = "pooled"
) -> np.ndarray:
    """Gradient noise stds of the DPNoSE baseline (paper 000; notes A.6), one per group ([K]).

    ``"pooled"`` (default, "standard DPGD with budget rho"): one pooled clipped-sum gradient per
    step with std ``Delta sqrt(T / (2 rho))``; returned as a length-1 array.
    ``"equal_split"``: Algorithm 3 with ``s_k^2 = 1/K`` and ``mu = rho``: each group's std is
    ``Delta sqrt(T K / (2 rho))`` (so their sum is K^2 times noisier in variance than pooled).

    Privacy: rho-zCDP either way.
    """
    V.check_rho(rho)
    steps = V.check_int("steps", steps)
    k = V.check_int("num_groups", num_groups)
    V.check_positive("grad_sensitivity", grad_sensitivity)
    V.check_choice("variant", variant, ("pooled", "equal_split"))
    if variant == "pooled":
        return np.array([host_gaussian_std_per_step(grad_sensitivity, rho, steps)])
    s = np.full(k, 1.0 / math.sqrt(k))
    return stage2_noise_stds(rho, s, steps, grad_sensitivity=grad_sensitivity, algorithm=3).grad_std


def budget_tailoring_ledger(
    rho: float, s: object, steps: int, *, tau_fraction: float = 0.2, algorithm: int = 2
) -> ZcdpLedger:
    """Every zCDP charge of paper 000's two stages in a :class:`ZcdpLedger` (adds up to ``rho``).

    Stage 1: ``X^T X`` and ``X^T Y`` (``tau_k/2`` each), then ``tau_k`` per group SE. Stage 2:
    per iteration and group, ``mu s_k^2/(2T)`` for the gradient and the loss (Algorithm 2) or
    ``mu s_k^2/T`` for the gradient (Algorithm 3).
    """
    arr = _check_s(s)
    tau, mu = budget_tailoring_split(rho, tau_fraction)
    b = stage1_budgets(tau, arr.size)
    steps = V.check_int("steps", steps)
    led = ZcdpLedger()
    led.charge("stage1/xtx", b.tau_xx)
    led.charge("stage1/xty", b.tau_xy)
    for k in range(arr.size):
        led.charge(f"stage1/se_group{k}", b.tau_se)
    budgets = stage2_group_budgets(mu, arr, steps, algorithm=algorithm)
    for k in range(arr.size):
        led.charge(f"stage2/grad_group{k}", float(budgets[k]), count=steps)
        if algorithm == 2:
            led.charge(f"stage2/loss_group{k}", float(budgets[k]), count=steps)
    return led


# =============================================================================================
# Paper 002: advanced composition and the per-step budgets of Algorithm 2
# =============================================================================================
