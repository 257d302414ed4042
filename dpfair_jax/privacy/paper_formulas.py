"""The papers' closed-form noise and budget formulas, beside the accountant.

Each function implements one stated formula, names the equation, and (where the paper is wrong
or ambiguous) offers the corrected behaviour by default and the literal one behind a named
option. They are host-side float64 helpers; algorithms take the resulting stds/budgets as
traced arrays. For tight accounting of the same mechanisms use
:mod:`dpfair_jax.privacy.accounting` (RDP/PLD), which these formulas can be checked against.

Paper 004 (Lowy, Gupta, Razaviyayn, ICLR 2023, DP-FERMI)
    :func:`dpfermi_noise` (Theorem 3.3 / D.2), :func:`dpsgda_noise` (Theorem E.1 / E.3),
    :func:`dpfermi_min_steps`, :func:`official_dpfermi_calibration` (the authors' code),
    :func:`moments_accountant_noise_multiplier` (the recipe every stated sigma follows).
Paper 000 (Privacy Budget Tailoring, zCDP)
    :func:`budget_tailoring_split`, :func:`stage1_budgets`, :func:`stage1_noise_stds`,
    :func:`stage2_group_budgets`, :func:`stage2_noise_stds`, :func:`dpnose_noise_stds`,
    :func:`budget_tailoring_ledger`, and the sensitivity helpers
    :func:`clipped_sum_sensitivity`, :func:`bounded_scalar_sum_sensitivity`,
    :func:`gram_sensitivity`.
Paper 002 (Alabi, reductions)
    :func:`advanced_composition` (Lemma A.4), :func:`cgoo_per_step_privacy` (Algorithm 2,
    lines 4-7), :func:`jagielski_per_step_epsilon` (Jagielski et al. 2018, App. C).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy.accounting import ZcdpLedger

__all__ = [
    "FermiNoise",
    "moments_accountant_noise_multiplier",
    "dpfermi_min_steps",
    "dpfermi_noise",
    "dpsgda_noise",
    "OfficialFermiCalibration",
    "official_dpfermi_calibration",
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
    "clipped_sum_sensitivity",
    "bounded_scalar_sum_sensitivity",
    "gram_sensitivity",
    "advanced_composition",
    "advanced_composition_epsilon",
    "cgoo_per_step_privacy",
    "jagielski_per_step_epsilon",
]

_RELATIONS = ("add_remove", "replace_one")


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


# =============================================================================================
# Paper 000: Privacy Budget Tailoring (zCDP)
# =============================================================================================


def clipped_sum_sensitivity(clip_norm: float, relation: str = "add_remove") -> float:
    """l2-sensitivity of a sum of vectors clipped to norm ``clip_norm``: C (add/remove), 2C (replace)."""
    V.check_clip_norm(clip_norm)
    V.check_choice("relation", relation, _RELATIONS)
    return float(clip_norm) * (1.0 if relation == "add_remove" else 2.0)


def bounded_scalar_sum_sensitivity(lower: float, upper: float, relation: str = "add_remove") -> float:
    """Sensitivity of a sum of scalars clipped to ``[lower, upper]``.

    ``max(|lower|, |upper|)`` under add/remove, ``upper - lower`` under replace-one (e.g. squared
    residuals clipped to ``[0, Delta^2]`` have sensitivity ``Delta^2`` under both).
    """
    lo, hi = V.as_float("lower", lower), V.as_float("upper", upper)
    if not hi > lo:
        raise ValueError(f"upper must exceed lower, got lower={lo!r}, upper={hi!r}.")
    V.check_choice("relation", relation, _RELATIONS)
    return max(abs(lo), abs(hi)) if relation == "add_remove" else hi - lo


def gram_sensitivity(row_norm_bound: float, relation: str = "add_remove") -> float:
    """Frobenius sensitivity of ``X^T X`` (or l2 of ``X^T y``) for rows with ``||x|| <= U``.

    ``U^2`` under add/remove (paper 000 Lemma C.1, reading U as a row-norm bound), ``sqrt(2) U^2``
    under replace-one (``||x x^T - x' x'^T||_F^2 <= 2 U^4``). For ``X^T y`` with ``|y| <= U`` the
    replace-one bound ``sqrt(2) U^2`` is conservative (the exact bound is ``2 U^2`` only when
    ``x' = -x``; use :func:`clipped_sum_sensitivity` with ``U^2`` for that one).
    """
    V.check_positive("row_norm_bound", row_norm_bound)
    V.check_choice("relation", relation, _RELATIONS)
    u2 = float(row_norm_bound) ** 2
    return u2 if relation == "add_remove" else math.sqrt(2.0) * u2


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
        float(stat_sensitivity) / math.sqrt(2.0 * b.tau_xx),
        float(stat_sensitivity) / math.sqrt(2.0 * b.tau_xy),
        float(se_sensitivity) / math.sqrt(2.0 * b.tau_se),
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
    grad = float(grad_sensitivity) / np.sqrt(2.0 * budgets)
    loss = None
    if algorithm == 2:
        if loss_sensitivity is None:
            raise ValueError("algorithm 2 releases group losses too: pass loss_sensitivity (Delta^2).")
        V.check_positive("loss_sensitivity", loss_sensitivity)
        loss = float(loss_sensitivity) / np.sqrt(2.0 * budgets)
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
        return np.array([float(grad_sensitivity) * math.sqrt(steps / (2.0 * rho))])
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


def advanced_composition_epsilon(epsilon: float, k: int, delta_bar: float) -> float:
    """``eps_bar = eps sqrt(2 k log(1/delta_bar)) + k eps (e^eps - 1)`` (paper 002 Lemma A.4;
    Dwork, Rothblum, Vadhan 2010)."""
    V.check_epsilon(epsilon)
    k = V.check_int("k", k)
    V.check_delta(delta_bar, "delta_bar")
    e = float(epsilon)
    return e * math.sqrt(2.0 * k * math.log(1.0 / delta_bar)) + k * e * math.expm1(e)


def advanced_composition(epsilon: float, delta: float, k: int, delta_bar: float) -> tuple[float, float]:
    """k-fold adaptive composition of (eps, delta)-DP mechanisms is
    ``(eps_bar, k delta + delta_bar)``-DP (paper 002 Lemma A.4). ``delta`` may be 0."""
    d = V.as_float("delta", delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}.")
    k = V.check_int("k", k)
    return advanced_composition_epsilon(epsilon, k, delta_bar), k * d + float(delta_bar)


def _largest_eps_step(target: float, steps: int, delta_bar: float) -> float:
    lo, hi = 0.0, target  # eps_bar(target) >= target for k >= 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid > 0 and advanced_composition_epsilon(mid, steps, delta_bar) <= target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo


def cgoo_per_step_privacy(
    epsilon: float, delta: float, steps: int, *, oracle: str = "approximate", variant: str = "exact"
) -> tuple[float, float]:
    """Per-call budget (eps', delta') of the private oracle in paper 002 Algorithm 2 (lines 4-7).

    ``oracle="pure"`` (LOPT_{eps,0}): ``delta' = 0`` and the composition slack is ``delta``.
    ``oracle="approximate"``: ``delta' = delta/(2T)`` (so ``T delta' = delta/2``) and the slack
    ``delta_bar`` is at most ``delta/2``.

    ``variant``:
      * ``"exact"`` (default): the largest eps' whose T-fold advanced composition (Lemma A.4,
        both terms) is at most epsilon, by bisection, with ``delta_bar = delta`` (pure) or
        ``delta/2`` (approximate). Always valid, and the least noisy choice Lemma A.4 allows.
      * ``"closed_form"``: ``eps / (2 sqrt(2T log(1/delta_bar)))`` with the same ``delta_bar``
        (the corollary after Lemma A.4; it drops the ``T eps'(e^eps' - 1)`` term, so it is valid
        when that term is at most eps/2, roughly eps <= 4 log(1/delta_bar); a warning says when not).
      * ``"paper"``: lines 5 and 7 literally: pure ``eps/(2 sqrt(2T log(1/delta)))``; approximate
        ``eps/(2 sqrt(2T log(2/delta')))`` with ``delta' = delta/(2T)`` (i.e. ``delta_bar =
        delta/(4T)``, valid but more conservative than needed).

    Privacy: T adaptive calls of an (eps', delta')-DP oracle are (epsilon, delta)-DP (Lemma 5.8).
    Note that line 10 of the algorithm reads the data without noise (notes B.5); that gap is not
    covered by this budget.
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    steps = V.check_int("steps", steps)
    V.check_choice("oracle", oracle, ("pure", "approximate"))
    V.check_choice("variant", variant, ("exact", "closed_form", "paper"))
    eps, dlt = float(epsilon), float(delta)
    delta_step = 0.0 if oracle == "pure" else dlt / (2.0 * steps)
    delta_bar = dlt if oracle == "pure" else dlt / 2.0
    if variant == "exact":
        return _largest_eps_step(eps, steps, delta_bar), delta_step
    if variant == "paper" and oracle == "approximate":
        delta_bar = delta_step / 2.0  # log(2/delta') = log(1/delta_bar)
    eps_step = eps / (2.0 * math.sqrt(2.0 * steps * math.log(1.0 / delta_bar)))
    total = advanced_composition_epsilon(eps_step, steps, delta_bar)
    if total > eps * (1.0 + 1e-12):
        warnings.warn(
            f"per-step epsilon {eps_step:.4g} composes to {total:.4g} > epsilon={eps:.4g} under "
            "Lemma A.4 (the closed form drops the T eps'(e^eps'-1) term); use variant='exact'.",
            stacklevel=2,
        )
    return eps_step, delta_step


def jagielski_per_step_epsilon(epsilon: float, delta: float, steps: int) -> float:
    """Per-iteration budget of Jagielski et al. (2018) DP-oracle-learner: ``eps / (4 sqrt(T log(1/delta)))``
    (as quoted in paper 002, App. C)."""
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    steps = V.check_int("steps", steps)
    return float(epsilon) / (4.0 * math.sqrt(steps * math.log(1.0 / delta)))
