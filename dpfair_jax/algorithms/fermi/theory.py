"""Paper 004's closed forms (DP-FERMI, Lowy, Gupta, Razaviyayn, ICLR 2023), beside the algorithm.

:func:`dpfermi_noise` (Theorem 3.3 / D.2), :func:`dpsgda_noise` (Theorem E.1 / E.3),
:func:`dpfermi_min_steps`, :func:`official_dpfermi_calibration` (the authors' code) and
:func:`moments_accountant_noise_multiplier` (the recipe every stated sigma follows). Host-side
float64 helpers; the kit's own calibration is the exact accountant of
:mod:`dpfair_jax.privacy.accounting`, which these formulas are checked against.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from dpfair_jax import _validation as V

__all__ = [
    "FermiNoise",
    "moments_accountant_noise_multiplier",
    "dpfermi_min_steps",
    "dpfermi_noise",
    "dpsgda_noise",
    "OfficialFermiCalibration",
    "official_dpfermi_calibration",
]


# =============================================================================================
# Paper 004: DP-FERMI
# =============================================================================================


class FermiNoise(NamedTuple):
    """Noise stds of the two updates of noisy DP-SGDA: ``sigma_theta`` (descent), ``sigma_w`` (ascent)."""

    sigma_theta: float
    sigma_w: float


def moments_accountant_noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """``z = q sqrt(2 T ln(1/delta)) / epsilon``: the recipe behind every sigma of paper 004.

    Paper 004 applies Abadi et al. (2016) Thm. 1 with the constants of Bassily et al. (2019): the
    noise std added to an *averaged* minibatch gradient of l2-sensitivity ``Delta_avg`` is
    ``sigma^2 = 2 Delta_avg^2 q^2 T ln(1/delta) / epsilon^2`` with ``q = m/n``; ``z`` is
    ``sigma / Delta_avg``. (Theorem 3.3's four formulas are this recipe with the proof's
    sensitivities; see notes II.6.)

    Privacy: a closed-form sufficient condition from the moments accountant, for ONE Gaussian
    per step, valid under the paper's assumptions (epsilon <= 2 ln(1/delta), T large enough).
    Compare with :func:`dpfair_jax.privacy.accounting.dpsgd_epsilon`.
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_sample_rate(sample_rate)
    steps = V.check_int("steps", steps, minimum=1)
    return float(sample_rate) * math.sqrt(2.0 * steps * math.log(1.0 / delta)) / float(epsilon)


def dpfermi_min_steps(n: int, batch_size: int, epsilon: float) -> int:
    """Smallest T allowed by Theorem 3.3 / E.1: ``T >= (n sqrt(epsilon) / (2 m))^2``."""
    n = V.check_int("n", n)
    m = V.check_int("batch_size", batch_size)
    V.check_epsilon(epsilon)
    return int(math.ceil((n * math.sqrt(float(epsilon)) / (2.0 * m)) ** 2 - 1e-9))


def _check_fermi_assumptions(epsilon: float, delta: float, n: int, steps: int,
                             batch_size: int | None, check: bool) -> None:
    if not check:
        return
    if epsilon > 2.0 * math.log(1.0 / delta):
        raise ValueError(
            f"epsilon={epsilon!r} exceeds 2 ln(1/delta)={2 * math.log(1 / delta):.4g}, outside the "
            "range of paper 004 Thm. 3.3/E.1; lower epsilon or delta, or pass "
            "check_assumptions=False to evaluate the formula anyway."
        )
    if batch_size is not None:
        t_min = dpfermi_min_steps(n, batch_size, epsilon)
        if steps < t_min:
            raise ValueError(
                f"steps={steps} is below T_min=(n sqrt(eps)/(2m))^2={t_min} required by paper 004 "
                "Thm. 3.3/E.1; raise steps, or pass check_assumptions=False."
            )


def dpfermi_noise(
    epsilon: float,
    delta: float,
    n: int,
    steps: int,
    rho: float,
    *,
    lipschitz_theta: float,
    w_bound: float,
    num_classes: int = 2,
    privacy: str = "sensitive_attribute",
    theta_formula: str = "proof",
    composition: str = "joint",
    batch_size: int | None = None,
    check_assumptions: bool = True,
) -> FermiNoise:
    """Noise stds of DP-FERMI (paper 004, Theorem 3.3 = Theorem D.2).

    ``privacy="sensitive_attribute"`` (neighbours differ in one person's sensitive attribute s_i):
        ``sigma_w^2 = 16 T ln(1/delta) / (eps^2 n^2 rho)``,
        ``sigma_theta^2 = 16 L_theta^2 D^2 ln(1/delta) T / (eps^2 n^2 rho)``.
    ``privacy="all_features"`` (neighbours differ in one person's (x, s, y)):
        ``sigma_w^2 = 32 T ln(1/delta) / (eps^2 n^2) (1/rho + D^2)``, and
        ``theta_formula="proof"`` (default): the proof's last line,
        ``sigma_theta^2 = 8 L^2 D^2 T ln(1/delta) / (eps^2 n^2) (4/rho + l^2)``;
        ``theta_formula="statement"``: the theorem statement's (more conservative)
        ``64 L^2 D^2 ln T / (eps^2 n^2 rho) + 32 D^4 L^2 l^2 T ln / (eps^2 n^2)``.

    Here ``rho`` is the smallest group fraction (every data set must contain at least a rho
    fraction of every attribute), ``D = w_bound`` bounds |W_rj|, ``l = num_classes``,
    ``L = lipschitz_theta`` is the Lipschitz constant of F(x, .) (the per-example theta-gradient
    clip).

    ``composition`` (correction): the proof makes the theta updates (eps, delta)-DP and the W
    updates (eps, delta)-DP *separately*, which composes to (2 eps, 2 delta). Both are released
    at every step on the same batch, i.e. one Gaussian with multiplier ``z / sqrt(2)``;
    ``"joint"`` (default) doubles both variances (stds times sqrt 2) so the pair meets
    (eps, delta) under the same moments-accountant recipe. ``"paper"`` returns the theorem's
    values as printed.

    Privacy: (epsilon, delta)-DP (``"joint"``) for the relation above, under the theorem's
    assumptions (epsilon <= 2 ln(1/delta) and T >= (n sqrt(eps)/(2m))^2, checked when
    ``batch_size`` is given), noise added to the *averaged* minibatch updates. Paper 004 also
    ignores the dependence of P_S on s (an O(1/n) effect; notes II.6).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    n = V.check_int("n", n)
    steps = V.check_int("steps", steps)
    V.check_positive("rho", rho)
    if rho > 1:
        raise ValueError(f"rho is the smallest group fraction and must be <= 1, got {rho!r}.")
    V.check_positive("lipschitz_theta", lipschitz_theta)
    V.check_positive("w_bound", w_bound)
    num_classes = V.check_int("num_classes", num_classes, minimum=1)
    V.check_choice("privacy", privacy, ("sensitive_attribute", "all_features"))
    V.check_choice("theta_formula", theta_formula, ("proof", "statement"))
    V.check_choice("composition", composition, ("joint", "paper"))
    _check_fermi_assumptions(float(epsilon), float(delta), n, steps, batch_size, check_assumptions)

    eps, L, D, ell = float(epsilon), float(lipschitz_theta), float(w_bound), float(num_classes)
    base = steps * math.log(1.0 / delta) / (eps**2 * n**2)  # T ln(1/delta) / (eps^2 n^2)
    if privacy == "sensitive_attribute":
        var_w = 16.0 * base / rho
        var_t = 16.0 * L**2 * D**2 * base / rho
    else:
        var_w = 32.0 * base * (1.0 / rho + D**2)
        if theta_formula == "proof":
            var_t = 8.0 * L**2 * D**2 * base * (4.0 / rho + ell**2)
        else:
            var_t = 64.0 * L**2 * D**2 * base / rho + 32.0 * D**4 * L**2 * ell**2 * base
    factor = 2.0 if composition == "joint" else 1.0
    return FermiNoise(math.sqrt(factor * var_t), math.sqrt(factor * var_w))


def dpsgda_noise(
    epsilon: float,
    delta: float,
    n: int,
    steps: int,
    *,
    lipschitz_theta: float,
    lipschitz_w: float,
    composition: str = "joint",
    batch_size: int | None = None,
    check_assumptions: bool = True,
) -> FermiNoise:
    """Noise stds of generic noisy DP-SGDA (paper 004, Theorem E.1 / E.3).

    ``sigma_theta^2 = 8 T L_theta^2 ln(1/delta) / (eps^2 n^2)`` and
    ``sigma_w^2 = 8 T L_w^2 ln(1/delta) / (eps^2 n^2)`` (the recipe of
    :func:`moments_accountant_noise_multiplier` with sensitivity ``2 L / m`` of the averaged
    gradient). Theorem E.1's informal statement prints ``L_w`` in sigma_theta (a typo; E.3 has
    ``L_theta``). ``composition`` as in :func:`dpfermi_noise` (``"joint"``: stds times sqrt 2).

    Privacy: (epsilon, delta)-DP under replace-one neighbours for f(., w; z) L_theta-Lipschitz
    and f(theta, .; z) L_w-Lipschitz, noise added to the averaged minibatch gradients.
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    n = V.check_int("n", n)
    steps = V.check_int("steps", steps)
    V.check_positive("lipschitz_theta", lipschitz_theta)
    V.check_positive("lipschitz_w", lipschitz_w)
    V.check_choice("composition", composition, ("joint", "paper"))
    _check_fermi_assumptions(float(epsilon), float(delta), n, steps, batch_size, check_assumptions)
    base = 8.0 * steps * math.log(1.0 / delta) / (float(epsilon) ** 2 * n**2)
    factor = 2.0 if composition == "joint" else 1.0
    return FermiNoise(
        math.sqrt(factor * base) * float(lipschitz_theta), math.sqrt(factor * base) * float(lipschitz_w)
    )


class OfficialFermiCalibration(NamedTuple):
    """The DP-FERMI authors' calibration (``args.calculate_noise``): inputs and stds."""

    delta: float
    steps: int
    rho: float
    std_theta: float
    std_w: float


def official_dpfermi_calibration(
    n: int,
    min_group_count: int,
    epochs: int,
    batch_size: int,
    epsilon: float,
    *,
    lipschitz_theta: float = 5.0,
    radius: float = 5.0,
) -> OfficialFermiCalibration:
    """The official DP-FERMI code's noise calibration (notes II.6 / II.10 item 9), literally.

    ``delta = 1/n^2``, ``T = epochs * ceil(n / batch_size)``, ``rho = (min_group_count - 1)/n``,
    ``std_theta = sqrt(16 L^2 C^2 ln(1/delta) T / (eps^2 n^2 rho))`` with L = 5 and C = 5 (the
    Frobenius radius of W, playing D), ``std_w = sqrt(16 T ln(1/delta) / (eps^2 n^2 rho))``:
    Theorem 3.3 (sensitive attributes) with ``composition="paper"``. ``epsilon = inf`` gives
    zero noise.

    Privacy: as the code claims, (epsilon, delta)-DP w.r.t. sensitive attributes for each of the
    two updates separately; see :func:`dpfermi_noise` for the joint correction.
    """
    n = V.check_int("n", n)
    min_group_count = V.check_int("min_group_count", min_group_count, minimum=2)
    if min_group_count > n:
        raise ValueError(f"min_group_count={min_group_count} exceeds n={n}.")
    epochs = V.check_int("epochs", epochs)
    batch_size = V.check_int("batch_size", batch_size)
    V.check_epsilon(epsilon, allow_inf=True)
    delta = 1.0 / n**2
    steps = epochs * math.ceil(n / batch_size)
    rho = (min_group_count - 1) / n
    if math.isinf(epsilon):
        return OfficialFermiCalibration(delta, steps, rho, 0.0, 0.0)
    noise = dpfermi_noise(
        epsilon, delta, n, steps, rho, lipschitz_theta=lipschitz_theta, w_bound=radius,
        privacy="sensitive_attribute", composition="paper", check_assumptions=False,
    )
    return OfficialFermiCalibration(delta, steps, rho, noise.sigma_theta, noise.sigma_w)

