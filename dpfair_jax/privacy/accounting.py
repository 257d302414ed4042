"""Host-side privacy accounting: dp-accounting wrappers, zCDP algebra, exact Gaussian calibration.

Everything here runs on the host in float64 before any device code is traced (DESIGN.md,
"host accounting, device noise"). The outputs are plain Python floats (noise multipliers,
epsilons, rhos) that device code takes as array arguments.

Contents
--------
* DP-SGD style accounting on ``dp_accounting`` (RDP and PLD accountants):
  :func:`dpsgd_event`, :func:`epsilon_of_event`, :func:`delta_of_event`, :func:`dpsgd_epsilon`,
  :func:`calibrate_noise_multiplier`, and for the algorithms' ``calibrate``: :func:`calibration_target`
  (the checked ``(epsilon, delta)`` target) and :func:`step_up_until` (a solved multiplier nudged up
  until the algorithm's own spend meets the target). Poisson sampling is accounted under add/remove-one
  neighbours; fixed-size batches drawn without replacement under replace-one neighbours; shuffled
  epochs without amplification (:func:`shuffled_event`: at most ``ceil(steps / steps_per_epoch)``
  composed Gaussians per record).
* zCDP (Bun & Steinke 2016): :func:`gaussian_rho`, :func:`gaussian_sigma_for_rho`,
  :func:`compose_rho`, :func:`pure_dp_to_rho`, :func:`zcdp_to_dp`, :func:`dp_to_rho`, and the
  :class:`ZcdpLedger` that checks named charges add up to a total. These accept arrays (one value
  per grid point of a study) and return float64 arrays elementwise, each element equal to the
  scalar path at that point; scalars stay Python floats.
* :func:`analytic_gaussian_sigma`: the exact Gaussian calibration of Balle & Wang (ICML 2018).
* :class:`PrivacySpend`: what one run spends, JSON-serialisable.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import dp_accounting
import jax
import numpy as np
from dp_accounting import dp_event as _ev
from scipy import optimize, special

from dpfair_jax import _validation as V
from dpfair_jax.privacy import relations as _relations

__all__ = [
    "ACCOUNTANTS",
    "SAMPLINGS",
    "RELATIONS",
    "UNITS",
    "dpsgd_event",
    "epsilon_of_event",
    "delta_of_event",
    "dpsgd_epsilon",
    "calibrate_noise_multiplier",
    "calibration_target",
    "step_up_until",
    "effective_noise_multiplier",
    "gaussian_rho",
    "gaussian_sigma_for_rho",
    "compose_rho",
    "pure_dp_to_rho",
    "zcdp_to_dp",
    "dp_to_rho",
    "analytic_gaussian_sigma",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "classical_gaussian_sigma",
    "participation_distribution",
    "membership_visible_delta",
    "membership_visible_epsilon",
    "calibrate_membership_visible",
    "shuffled_participations",
    "shuffled_event",
    "PrivacySpend",
    "ZcdpLedger",
]

ACCOUNTANTS = ("rdp", "pld")
SAMPLINGS = ("poisson", "without_replacement")
RELATIONS = _relations.RELATION_NAMES  # ("add_remove", "replace_one", "replace_one_within_group")
UNITS = ("example", "sensitive_attribute", "group_member", "user")
ZCDP_METHODS = ("cks", "bun_steinke")



# ---------------------------------------------------------------------------------------------
# DP-SGD events and accountants
# ---------------------------------------------------------------------------------------------


def _check_relative_noise(relative_noise: Any) -> tuple[float, ...]:
    try:
        rel = tuple(float(r) for r in relative_noise)
    except TypeError as err:
        raise ValueError(
            f"relative_noise must be a sequence of positive numbers, got {relative_noise!r}."
        ) from err
    if not rel:
        raise ValueError("relative_noise must hold at least one entry (use (1.0,) for one Gaussian).")
    V.check_positive("relative_noise", np.asarray(rel))
    return rel


def effective_noise_multiplier(noise_multipliers: Sequence[float]) -> float:
    """Noise multiplier of one Gaussian equivalent to several on the same batch.

    Releasing Gaussians with multipliers ``z_j`` of queries of sensitivity 1 each is equivalent
    (post-processing both ways) to one Gaussian with ``z_eff = (sum_j z_j^-2)^(-1/2)``
    (Mironov, Talwar, Zhang 2019, Sec. 3). Any ``z_j == 0`` gives ``0`` (no privacy).
    """
    z = np.asarray([float(v) for v in noise_multipliers], dtype=np.float64)
    if z.size == 0:
        raise ValueError("noise_multipliers must hold at least one entry.")
    V.check_positive("noise_multipliers", z, allow_zero=True)
    if np.any(z == 0):
        return 0.0
    return float(np.sum(z**-2.0) ** -0.5)


def _sample_counts(sample_rate: float, dataset_size: int | None) -> tuple[int, int]:
    """(sample_size, dataset_size) with sample_size / dataset_size == sample_rate."""
    if dataset_size is not None:
        n = V.check_int("dataset_size", dataset_size, minimum=1)
        b = int(round(sample_rate * n))
        if b < 1 or abs(b - sample_rate * n) > 1e-6 * max(1.0, sample_rate * n):
            raise ValueError(
                f"sample_rate * dataset_size = {sample_rate * n!r} is not a whole batch size; "
                "pass sample_rate = batch_size / dataset_size for sampling without replacement."
            )
        return b, n
    frac = Fraction(sample_rate).limit_denominator(10**9)
    if abs(float(frac) - sample_rate) > 1e-12 * sample_rate:
        raise ValueError(
            "sampling='without_replacement' needs dataset_size (the batch size is "
            "sample_rate * dataset_size); pass dataset_size=n."
        )
    return int(frac.numerator), int(frac.denominator)


def dpsgd_event(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    *,
    sampling: str = "poisson",
    relative_noise: Sequence[float] = (1.0,),
    dataset_size: int | None = None,
) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of ``steps`` subsampled steps, each releasing one or more Gaussians.

    Each step samples a batch (Poisson with probability ``sample_rate``, or a fixed-size batch of
    ``sample_rate * dataset_size`` records drawn without replacement) and releases, for every entry
    ``r_j`` of ``relative_noise``, the clipped sum of a sensitivity-1 query plus Gaussian noise of
    standard deviation ``noise_multiplier * r_j`` (e.g. the descent and ascent updates of DP-SGDA:
    ``relative_noise=(1.0, 1.0)``). Several Gaussians on one batch are composed *inside* the
    sampled event, so the accountant sees them as one Gaussian with multiplier
    :func:`effective_noise_multiplier`.

    Privacy: Poisson sampling is accounted under add/remove-one neighbours, sampling without
    replacement under replace-one neighbours (:func:`epsilon_of_event` picks the relation from
    the event). A zero noise multiplier returns ``NonPrivateDpEvent`` (epsilon = inf). The
    multiplier is relative to the query's sensitivity under that relation: a sum of per-example
    gradients clipped to ``C`` has sensitivity ``C`` under add/remove but ``2C`` under replace-one,
    so noise of std ``sigma`` on it is ``noise_multiplier = sigma / (2C)`` for
    ``sampling="without_replacement"`` (``dpsgd.privacy`` and ``fermi.privacy`` do this). Shuffled
    epochs are not sampling without replacement: account them with :func:`shuffled_event`.
    """
    V.check_noise_multiplier(noise_multiplier)
    V.check_sample_rate(sample_rate)
    steps = V.check_int("steps", steps, minimum=1)
    V.check_choice("sampling", sampling, SAMPLINGS)
    rel = _check_relative_noise(relative_noise)
    z = float(noise_multiplier)
    if z == 0.0:
        return dp_accounting.NonPrivateDpEvent()
    gaussians = [dp_accounting.GaussianDpEvent(z * r) for r in rel]
    inner = gaussians[0] if len(gaussians) == 1 else dp_accounting.ComposedDpEvent(gaussians)
    if sampling == "poisson":
        step = dp_accounting.PoissonSampledDpEvent(float(sample_rate), inner)
    else:
        b, n = _sample_counts(float(sample_rate), dataset_size)
        step = dp_accounting.SampledWithoutReplacementDpEvent(n, b, inner)
    return dp_accounting.SelfComposedDpEvent(step, steps)


def _contains(event: Any, cls: type) -> bool:
    if isinstance(event, cls):
        return True
    if isinstance(event, _ev.ComposedDpEvent):
        return any(_contains(e, cls) for e in event.events)
    inner = getattr(event, "event", None)
    return inner is not None and _contains(inner, cls)


def _gaussian_only_multiplier(event: Any) -> float | None:
    """Effective multiplier of a nest of Composed/SelfComposed Gaussians, else None."""
    if isinstance(event, _ev.GaussianDpEvent):
        return float(event.noise_multiplier)
    if isinstance(event, _ev.ComposedDpEvent):
        zs = [_gaussian_only_multiplier(e) for e in event.events]
        if any(z is None for z in zs) or not zs:
            return None
        return effective_noise_multiplier(zs)
    if isinstance(event, _ev.SelfComposedDpEvent):
        z = _gaussian_only_multiplier(event.event)
        return None if z is None else (0.0 if z == 0 else z / math.sqrt(event.count))
    return None


def _simplify_for_pld(event: Any) -> Any:
    """Rewrite Poisson-sampled nests of Gaussians as one sampled Gaussian (exact, see above)."""
    if isinstance(event, _ev.PoissonSampledDpEvent):
        z = _gaussian_only_multiplier(event.event)
        if z is not None:
            return _ev.PoissonSampledDpEvent(event.sampling_probability, _ev.GaussianDpEvent(z))
        return event
    if isinstance(event, _ev.SelfComposedDpEvent):
        return _ev.SelfComposedDpEvent(_simplify_for_pld(event.event), event.count)
    if isinstance(event, _ev.ComposedDpEvent):
        return _ev.ComposedDpEvent([_simplify_for_pld(e) for e in event.events])
    return event


def _default_relation(event: Any) -> str:
    return "replace_one" if _contains(event, _ev.SampledWithoutReplacementDpEvent) else "add_remove"


class _SkippedOrderFilter(logging.Filter):
    """Drop dp-accounting's per-order warning when a fractional RDP order fails to converge.

    The RDP accountant then excludes that order from the minimum over orders, which can only make
    the reported epsilon larger (conservative); the warning repeats for every call and order.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in str(record.msg)


logging.getLogger("absl").addFilter(_SkippedOrderFilter())


def _make_accountant(event: Any, accountant: str, relation: str | None) -> Any:
    V.check_choice("accountant", accountant, ACCOUNTANTS)
    if not isinstance(event, dp_accounting.DpEvent):
        raise ValueError(f"event must be a dp_accounting.DpEvent, got {type(event).__name__}.")
    relation = _default_relation(event) if relation is None else relation
    rel = _relations.as_relation(relation)
    if accountant == "rdp":
        acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=rel)
    else:
        if _contains(event, _ev.SampledWithoutReplacementDpEvent):
            raise ValueError(
                "accountant='pld' cannot account sampling without replacement in dp-accounting "
                "0.6; use accountant='rdp' (or sampling='poisson')."
            )
        event = _simplify_for_pld(event)
        acc = dp_accounting.pld.PLDAccountant(neighboring_relation=rel)
    if not acc.supports(event):
        other = "pld" if accountant == "rdp" else "rdp"
        raise ValueError(
            f"accountant={accountant!r} cannot handle the event {event!r} under relation "
            f"{relation!r}; try accountant={other!r} or a different sampling/relation."
        )
    acc.compose(event)
    return acc


def epsilon_of_event(
    event: dp_accounting.DpEvent, delta: float, *, accountant: str = "rdp", relation: str | None = None
) -> float:
    """Epsilon of ``event`` at ``delta`` with the RDP or PLD accountant of ``dp_accounting``.

    ``relation`` defaults to replace-one when the event samples without replacement and to
    add/remove-one otherwise.
    """
    V.check_delta(delta)
    acc = _make_accountant(event, accountant, relation)
    return float(acc.get_epsilon(float(delta)))


def delta_of_event(
    event: dp_accounting.DpEvent, epsilon: float, *, accountant: str = "rdp", relation: str | None = None
) -> float:
    """Delta of ``event`` at ``epsilon`` (same accountants and relations as :func:`epsilon_of_event`)."""
    V.check_epsilon(epsilon)
    acc = _make_accountant(event, accountant, relation)
    return float(acc.get_delta(float(epsilon)))


def dpsgd_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    *,
    accountant: str = "rdp",
    sampling: str = "poisson",
    mechanisms_per_step: int = 1,
    relative_noise: Sequence[float] | None = None,
    dataset_size: int | None = None,
) -> float:
    """Epsilon spent by ``steps`` DP-SGD steps at ``delta``.

    Each step releases ``mechanisms_per_step`` Gaussians with multiplier ``noise_multiplier`` on
    the same sampled batch (or, if given, one per entry of ``relative_noise`` with multiplier
    ``noise_multiplier * r_j``). See :func:`dpsgd_event` for the privacy statement.
    """
    V.check_delta(delta)
    k = V.check_int("mechanisms_per_step", mechanisms_per_step, minimum=1)
    if relative_noise is not None and k != 1:
        raise ValueError(
            "pass either mechanisms_per_step or relative_noise, not both "
            "(relative_noise=(1.0,) * k is k Gaussians of equal noise)."
        )
    rel = (1.0,) * k if relative_noise is None else relative_noise
    event = dpsgd_event(
        noise_multiplier, sample_rate, steps, sampling=sampling, relative_noise=rel,
        dataset_size=dataset_size,
    )
    return epsilon_of_event(event, delta, accountant=accountant)


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    *,
    accountant: str = "rdp",
    sampling: str = "poisson",
    relative_noise: Sequence[float] = (1.0,),
    dataset_size: int | None = None,
    rtol: float = 1e-6,
    extra_event: dp_accounting.DpEvent | None = None,
) -> float:
    """Smallest noise multiplier ``z`` whose run is (``target_epsilon``, ``delta``)-DP.

    Each of the ``steps`` steps applies one Gaussian per entry of ``relative_noise`` with
    multiplier ``z * relative_noise[j]`` (e.g. ``(1.0, 1.0)`` for the two noisy updates of
    descent-ascent). The accountant's epsilon decreases in ``z``: bracket by doubling, solve
    ``log eps(z) = log target`` by Brent's method on ``log z``, then step up until the target
    holds, so the returned ``z`` meets the target and lies within ``rtol`` of the smallest that
    does (up to the accountant's own resolution). ``extra_event`` (fixed, e.g. a noisy histogram
    released once) is composed with the steps.

    Privacy: as :func:`dpsgd_event` (add/remove-one for Poisson, replace-one without replacement).
    """
    V.check_epsilon(target_epsilon)
    V.check_delta(delta)
    V.check_sample_rate(sample_rate)
    steps = V.check_int("steps", steps, minimum=1)
    V.check_choice("accountant", accountant, ACCOUNTANTS)
    V.check_choice("sampling", sampling, SAMPLINGS)
    rel = _check_relative_noise(relative_noise)
    V.check_positive("rtol", rtol)
    if sampling == "without_replacement" and accountant == "pld":
        raise ValueError(
            "accountant='pld' cannot account sampling without replacement in dp-accounting 0.6; "
            "use accountant='rdp'."
        )
    target = float(target_epsilon)
    if extra_event is not None and not isinstance(extra_event, dp_accounting.DpEvent):
        raise ValueError(f"extra_event must be a dp_accounting.DpEvent or None, got {extra_event!r}.")
    if extra_event is not None and epsilon_of_event(extra_event, delta, accountant=accountant) > target:
        raise ValueError(f"extra_event alone spends more than target_epsilon={target!r} at delta={delta!r}; "
                         "raise its noise or the target.")

    def eps(z: float) -> float:
        ev = dpsgd_event(z, sample_rate, steps, sampling=sampling, relative_noise=rel,
                         dataset_size=dataset_size)
        if extra_event is not None:
            ev = dp_accounting.ComposedDpEvent([extra_event, ev])
        return epsilon_of_event(ev, delta, accountant=accountant)

    factor = 2.0
    if accountant == "pld":
        # PLD is slow for small multipliers and never above RDP: start from the (cheap) RDP
        # calibration, which meets the target, and search downwards in small steps.
        hi = calibrate_noise_multiplier(
            target, delta, sample_rate, steps, accountant="rdp", sampling=sampling,
            relative_noise=rel, dataset_size=dataset_size, rtol=1e-4, extra_event=extra_event,
        )
        factor = 1.25
    else:
        hi = 1.0
    while eps(hi) > target:
        hi *= factor
        if hi > 1e8:
            raise ValueError(
                f"no noise multiplier up to 1e8 reaches target_epsilon={target!r} at delta={delta!r}; "
                "raise target_epsilon or delta, or lower sample_rate/steps."
            )
    lo = hi / factor
    while eps(lo) <= target:
        hi = lo
        lo /= factor
        if lo < 1e-6:
            return float(hi)
    # eps(lo) > target >= eps(hi): Brent on log z, then step up until the target holds
    g = lambda u: math.log(max(eps(math.exp(u)), 1e-300)) - math.log(target)  # noqa: E731
    u = optimize.brentq(g, math.log(lo), math.log(hi), xtol=rtol / 4.0, rtol=4 * np.finfo(float).eps)
    z = min(math.exp(u), hi)
    for _ in range(20):  # a discretised accountant may need a few small steps up
        if z >= hi or eps(z) <= target:
            return float(z)
        z = min(z * (1.0 + rtol / 2.0), hi)
    return float(hi)


def calibration_target(target: Any, stated_delta: float) -> tuple[float, float]:
    """``(epsilon, delta)`` of a ``calibrate(config, sizes, target)`` target, checked on the host:
    a pair with ``epsilon > 0`` finite and ``delta`` in (0, 1) equal to ``stated_delta``, the delta
    the algorithm's spend states epsilon at (its ``config.delta``).

    Privacy: none (validation). A target delta other than the stated one would calibrate for a
    guarantee that the recorded spend does not state.
    """
    try:
        eps, delta = target
    except (TypeError, ValueError):
        raise ValueError(f"target must be an (epsilon, delta) pair, got {target!r}.") from None
    V.check_epsilon(eps)
    V.check_delta(delta)
    if float(delta) != float(stated_delta):
        raise ValueError(f"target delta {delta!r} differs from config.delta {stated_delta!r}; "
                         "set config.delta to the target's delta.")
    return float(eps), float(delta)


def step_up_until(
    epsilon_of: Callable[[float], float], noise_multiplier: float, target_epsilon: float, *, max_steps: int = 100
) -> float:
    """The first of ``z, z (1 + 1e-9), z (1 + 1e-9)^2, ...`` (at most ``max_steps``) with
    ``epsilon_of(z) <= target_epsilon``, where ``z = noise_multiplier`` comes from a solver
    (e.g. :func:`calibrate_noise_multiplier`) and ``epsilon_of`` is the algorithm's own spend: it
    absorbs the rounding between the two (relative-noise ratios, sensitivity factors), so that
    ``spend(calibrate(...)).epsilon <= target`` holds exactly. Raises ``ValueError`` when no step
    reaches the target.

    Privacy: the returned multiplier meets ``target_epsilon`` as ``epsilon_of`` accounts it.
    """
    z = float(noise_multiplier)
    for _ in range(V.check_int("max_steps", max_steps, minimum=1)):
        if epsilon_of(z) <= target_epsilon:
            return z
        z *= 1.0 + 1e-9
    raise ValueError(f"calibration did not reach epsilon <= {target_epsilon!r}.")


# ---------------------------------------------------------------------------------------------
# Membership-visible subsampled Gaussians (exact, binomial mixture)
# ---------------------------------------------------------------------------------------------


def participation_distribution(
    steps: int, sampling: str, *, sample_rate: float | None = None, steps_per_epoch: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Law of ``K``, the number of steps in which one given record is in the batch: ``(ks, pmf)``.

    ``sampling="poisson"`` or ``"fixed_size"`` (each step an independent batch, the record in it
    with probability ``sample_rate``): ``K ~ Binomial(steps, sample_rate)``. ``"shuffle"``
    (disjoint batches of a fresh permutation per epoch of ``steps_per_epoch`` steps): a point mass
    at the largest possible count, ``ceil(steps / steps_per_epoch)`` (an upper bound: the privacy
    curve below increases with ``K``).
    """
    steps = V.check_int("steps", steps, minimum=1)
    V.check_choice("sampling", sampling, ("poisson", "fixed_size", "shuffle"))
    if sampling == "shuffle":
        spe = V.check_int("steps_per_epoch", steps_per_epoch, minimum=1)
        return np.asarray([math.ceil(steps / spe)], np.float64), np.ones(1, np.float64)
    V.check_sample_rate(sample_rate)
    from scipy import stats

    ks = np.arange(steps + 1, dtype=np.float64)
    logp = stats.binom.logpmf(ks, steps, float(sample_rate))
    keep = logp > -745.0  # exp underflows below this: those k carry no mass in float64
    return ks[keep], np.exp(logp[keep])


def _log_delta_gaussian_mu(epsilon: float, mu: np.ndarray) -> np.ndarray:
    """Vectorized ``log delta_G(eps; mu)`` of Balle & Wang (2018) Thm. 8 for a Gaussian of
    shift/std ``mu``: ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)`` (``-inf`` at ``mu = 0``)."""
    mu = np.asarray(mu, np.float64)
    out = np.full(mu.shape, -np.inf)
    pos = mu > 0
    m = mu[pos]
    la = special.log_ndtr(m / 2.0 - epsilon / m)
    lb = epsilon + special.log_ndtr(-m / 2.0 - epsilon / m)
    ok = lb < la
    res = np.full(m.shape, -np.inf)
    res[ok] = la[ok] + np.log(-np.expm1(lb[ok] - la[ok]))
    out[pos] = res
    return out


def membership_visible_delta(
    epsilon: float, mu_step: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0
) -> float:
    """Exact delta(epsilon) of Gaussian releases whose batch membership the adversary sees.

    In each step where the record is in the batch, its protected contribution is released by a
    Gaussian mechanism with shift/std ``mu_step`` (all Gaussians of one step combined:
    ``mu_step = sqrt(sum_j mu_j^2)``); in the other steps nothing about it is released, and which
    steps those are is visible (e.g. through an unnoised, public term of the update).
    ``extra_mu`` adds one unsubsampled Gaussian release (e.g. noisy counts). Given ``K = k`` the
    whole run is one Gaussian mechanism with ``mu_k = sqrt(k mu_step^2 + extra_mu^2)``, and ``K``
    has the same law under both neighbours, so

        delta(eps) = sum_k P(K = k) delta_G(eps; mu_k)

    exactly (no amplification by subsampling). ``participation``: :func:`participation_distribution`.
    """
    if not (math.isfinite(float(epsilon)) and float(epsilon) >= 0.0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}.")
    ks, pmf = participation
    mu = np.sqrt(ks * float(mu_step) ** 2 + float(extra_mu) ** 2)
    logd = _log_delta_gaussian_mu(float(epsilon), mu) + np.log(pmf)
    top = np.max(logd)
    if not np.isfinite(top):
        return 0.0
    return float(np.exp(top) * np.sum(np.exp(logd - top)))


def membership_visible_epsilon(
    mu_step: float, delta: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0
) -> float:
    """Smallest epsilon with :func:`membership_visible_delta` ``<= delta`` (``inf`` if ``mu_step``
    is infinite, i.e. zero noise)."""
    V.check_delta(delta)
    if not math.isfinite(mu_step) or not math.isfinite(extra_mu):
        return math.inf
    d = lambda e: membership_visible_delta(e, mu_step, participation, extra_mu=extra_mu)  # noqa: E731
    if d(0.0) <= delta:
        return 0.0
    hi = 1.0
    while d(hi) > delta:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    g = lambda e: math.log(max(d(e), 1e-320)) - math.log(delta)  # noqa: E731
    eps = optimize.brentq(g, 0.0 if hi == 1.0 else hi / 2.0, hi, xtol=1e-12, rtol=1e-10)
    # step up until the target holds (brentq may land on the wrong side by one ulp-scale step)
    while d(eps) > delta:
        eps *= 1.0 + 1e-9
    return float(eps)


def calibrate_membership_visible(
    target_epsilon: float, delta: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0
) -> float:
    """Largest ``mu_step`` whose membership-visible run is (``target_epsilon``, ``delta``)-DP.

    ``delta(eps; mu_step)`` increases with ``mu_step``; solved by Brent's method on
    ``log mu_step``. Raises ``ValueError`` when ``extra_mu`` alone spends more than the target.
    """
    V.check_epsilon(target_epsilon)
    V.check_delta(delta)
    eps = float(target_epsilon)
    d = lambda m: membership_visible_delta(eps, m, participation, extra_mu=extra_mu)  # noqa: E731
    if d(0.0) > delta:
        raise ValueError(
            f"the fixed release (extra_mu={extra_mu!r}) alone exceeds (epsilon={eps!r}, delta={delta!r}); "
            "raise its noise (e.g. count_noise_multiplier) or the target."
        )
    lo, hi = 1e-3, 1.0
    while d(hi) <= delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            return float(lo)
    while d(lo) > delta:
        lo /= 2.0
        if lo < 1e-12:
            raise ValueError("no positive mu_step reaches the target; raise the target epsilon.")
    g = lambda u: math.log(max(d(math.exp(u)), 1e-320)) - math.log(delta)  # noqa: E731
    u = optimize.brentq(g, math.log(lo), math.log(hi), xtol=1e-12, rtol=1e-12)
    mu = math.exp(u)
    while d(mu) > delta:
        mu *= 1.0 - 1e-9
    return float(mu)


def shuffled_participations(steps: int, steps_per_epoch: int) -> int:
    """``ceil(steps / steps_per_epoch)``: the most batches one record joins in a run of shuffled
    epochs (one permutation per epoch cut into disjoint batches; a partial last epoch counts)."""
    steps = V.check_int("steps", steps, minimum=1)
    spe = V.check_int("steps_per_epoch", steps_per_epoch, minimum=1)
    return math.ceil(steps / spe)


def shuffled_event(
    noise_multiplier: float, steps: int, steps_per_epoch: int, *, relative_noise: Sequence[float] = (1.0,)
) -> dp_accounting.DpEvent:
    """``DpEvent`` of a run of shuffled epochs, without amplification by shuffling.

    One record joins at most ``k = ceil(steps / steps_per_epoch)`` batches (a data-independent
    permutation per epoch), and in the other steps its value does not enter the release. Given the
    permutations the run is therefore an adaptive composition of at most ``k`` Gaussians (one step's
    Gaussians per entry of ``relative_noise``, multiplier ``noise_multiplier * r_j``), and a
    mixture over permutations is no less private than its worst component, so
    ``SelfComposedDpEvent(step, k)`` bounds the run. Shuffling is *not* accounted as sampling
    without replacement: that amplification is not proven for shuffled epochs (an adversary who
    can tell which batch holds the record, e.g. through the other records' gradients, sees all
    ``k`` Gaussians in full). The exact epsilon of this event is
    ``membership_visible_epsilon(mu_step, delta, participation_distribution(steps, "shuffle",
    steps_per_epoch=...))`` with ``mu_step = 1 / effective_noise_multiplier(...)``.

    Privacy: ``noise_multiplier`` is relative to the clipped sum's sensitivity under the run's
    relation (replace-one: ``2 C``, so pass ``z / 2`` for noise std ``z C``). The event has no
    sampling, so :func:`epsilon_of_event` reads it with its default relation, under which a
    Gaussian's multiplier is relative to the whole shift (right for this convention); do not pass
    ``relation="replace_one"``: dp-accounting's PLD then reads the multiplier relative to half the
    shift (replace = remove + add) and doubles it.
    """
    V.check_noise_multiplier(noise_multiplier)
    rel = _check_relative_noise(relative_noise)
    k = shuffled_participations(steps, steps_per_epoch)
    z = float(noise_multiplier)
    if z == 0.0:
        return dp_accounting.NonPrivateDpEvent()
    gaussians = [dp_accounting.GaussianDpEvent(z * r) for r in rel]
    inner = gaussians[0] if len(gaussians) == 1 else dp_accounting.ComposedDpEvent(gaussians)
    return dp_accounting.SelfComposedDpEvent(inner, k)


# ---------------------------------------------------------------------------------------------
# zCDP (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020)
# ---------------------------------------------------------------------------------------------


def _is_array(*values: Any) -> bool:
    """Whether any of ``values`` has an array shape (0-d arrays and numpy scalars are scalars)."""
    return any(np.ndim(x) > 0 for x in values)


def _host_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 host array (traced values are refused: accounting runs on the host)."""
    try:
        return np.asarray(value, dtype=np.float64)
    except Exception as err:  # a jax tracer, a string, ...
        raise ValueError(f"{name} must be a host number or array (accounting runs before any "
                         f"tracing), got {type(value).__name__}.") from err


def _elementwise(fn: Any, *args: Any) -> np.ndarray:
    """``fn`` (a scalar function of floats) at every element of the broadcast ``args``, float64.

    Each distinct argument tuple is evaluated once (grids repeat values)."""
    arrs = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in args])
    shape = arrs[0].shape
    flat = np.stack([a.ravel() for a in arrs], axis=1) if arrs[0].size else np.zeros((0, len(args)))
    uniq, inv = np.unique(flat, axis=0, return_inverse=True)
    vals = np.array([fn(*(float(u) for u in row)) for row in uniq], dtype=np.float64)
    return vals[np.asarray(inv).ravel()].reshape(shape)


def _fsum(values: Sequence[Any]) -> Any:
    """Exactly rounded sum (``math.fsum``) of floats, or elementwise of broadcast arrays."""
    if not _is_array(*values):
        return math.fsum(float(x) for x in values)
    arrs = np.broadcast_arrays(*[np.asarray(x, dtype=np.float64) for x in values])
    stacked = np.stack([a.ravel() for a in arrs], axis=0)
    return np.array([math.fsum(col) for col in stacked.T], dtype=np.float64).reshape(arrs[0].shape)


def gaussian_rho(sensitivity: Any, sigma: Any) -> Any:
    """rho of the Gaussian mechanism: ``sensitivity^2 / (2 sigma^2)`` (Bun & Steinke 2016, Prop. 1.6).

    Arrays broadcast (float64 result, elementwise); scalars give a float.

    Privacy: releasing ``q(D) + N(0, sigma^2 I)`` with l2-sensitivity ``sensitivity`` (under the
    caller's neighbouring relation) is rho-zCDP.
    """
    V.check_positive("sensitivity", sensitivity)
    V.check_positive("sigma", sigma)
    if _is_array(sensitivity, sigma):
        sens, sig = _host_array("sensitivity", sensitivity), _host_array("sigma", sigma)
        return np.square(sens) / (2.0 * np.square(sig))
    return float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2)


def gaussian_sigma_for_rho(sensitivity: Any, rho: Any) -> Any:
    """Noise std giving rho-zCDP: ``sensitivity / sqrt(2 rho)`` (inverse of :func:`gaussian_rho`);
    elementwise for arrays."""
    V.check_positive("sensitivity", sensitivity)
    V.check_rho(rho)
    if _is_array(sensitivity, rho):
        return _host_array("sensitivity", sensitivity) / np.sqrt(2.0 * _host_array("rho", rho))
    return float(sensitivity) / math.sqrt(2.0 * float(rho))


def compose_rho(*rhos: Any) -> Any:
    """Sequential composition: rho-zCDP and rho'-zCDP compose to (rho + rho')-zCDP (B&S Lemma 2.3).

    Arrays (e.g. one rho per grid point) broadcast and are summed elementwise (``math.fsum`` per
    element); scalars give a float."""
    if not rhos:
        raise ValueError("compose_rho needs at least one rho.")
    if _is_array(*rhos):
        vals = [_host_array("rho", r) for r in rhos]
        for r in vals:
            V.check_rho(r)
        try:
            np.broadcast_shapes(*(r.shape for r in vals))
        except ValueError as err:
            raise ValueError(f"rho arrays must broadcast to one shape, got shapes "
                             f"{[r.shape for r in vals]}.") from err
        return _fsum(vals)
    vals = [V.as_float("rho", r) for r in rhos]
    for r in vals:
        V.check_rho(r)
    return math.fsum(vals)


def pure_dp_to_rho(epsilon: Any) -> Any:
    """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4); elementwise for
    arrays."""
    V.check_epsilon(epsilon)
    if _is_array(epsilon):
        return np.square(_host_array("epsilon", epsilon)) / 2.0
    return float(epsilon) ** 2 / 2.0


def _cks_eps_at(alpha: np.ndarray | float, rho: float, log_inv_delta: float) -> np.ndarray | float:
    """CKS 2020 conversion at Renyi order alpha > 1 (Prop. 12 / Cor. 13)."""
    a = np.asarray(alpha, dtype=np.float64)
    am1 = a - 1.0
    val = a * rho + (log_inv_delta + am1 * np.log1p(-1.0 / a) - np.log(a)) / am1
    return val


def zcdp_to_dp(rho: Any, delta: Any, *, method: str = "cks") -> Any:
    """Epsilon such that rho-zCDP implies (epsilon, delta)-DP.

    * ``"bun_steinke"``: ``rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke 2016, Prop. 1.3; the
      conversion paper 000 states in Sec. 2).
    * ``"cks"`` (default, tighter): ``inf_{alpha > 1} alpha rho + (log(1/delta) + (alpha - 1)
      log(1 - 1/alpha) - log(alpha)) / (alpha - 1)`` (Canonne, Kamath & Steinke 2020, Prop. 12 /
      Cor. 13), minimised numerically in float64 over ``log(alpha - 1)``. Never above
      Bun-Steinke (it is also evaluated at Bun-Steinke's optimal order); floored at 0.

    ``rho`` and ``delta`` may be arrays (broadcast): the result is the float64 array of the scalar
    conversion at each element.
    """
    V.check_rho(rho)
    V.check_delta(delta)
    V.check_choice("method", method, ZCDP_METHODS)
    if _is_array(rho, delta):
        return _elementwise(lambda r, d: _zcdp_to_dp(r, d, method),
                            _host_array("rho", rho), _host_array("delta", delta))
    return _zcdp_to_dp(float(rho), float(delta), method)


def _zcdp_to_dp(rho: float, delta: float, method: str) -> float:
    L = math.log(1.0 / delta)
    bs = rho + 2.0 * math.sqrt(rho * L)
    if method == "bun_steinke":
        return bs
    a_bs = 1.0 + math.sqrt(L / rho)
    f = lambda u: float(_cks_eps_at(1.0 + math.exp(u), rho, L))  # noqa: E731
    u0 = math.log(a_bs - 1.0)
    # coarse grid over log(alpha - 1), then bounded Brent around the best grid point
    grid = np.linspace(u0 - 15.0, u0 + 15.0, 601)
    with np.errstate(all="ignore"):
        vals = _cks_eps_at(1.0 + np.exp(grid), rho, L)
    vals = np.where(np.isfinite(vals), vals, np.inf)
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13})
    cands = [f(u0), float(vals[j])]
    if np.isfinite(res.fun):
        cands.append(float(res.fun))
    return max(0.0, min(min(cands), bs))


def dp_to_rho(epsilon: Any, delta: Any, *, method: str = "cks") -> Any:
    """Largest rho whose :func:`zcdp_to_dp` conversion at ``delta`` is at most ``epsilon``.

    Closed form for Bun-Steinke: ``(sqrt(log(1/delta) + epsilon) - sqrt(log(1/delta)))^2``;
    bisection (relative tolerance 1e-12) for CKS, whose conversion increases with rho. Arrays
    broadcast (the scalar answer at each element).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_choice("method", method, ZCDP_METHODS)
    if _is_array(epsilon, delta):
        return _elementwise(lambda e, d: _dp_to_rho(e, d, method),
                            _host_array("epsilon", epsilon), _host_array("delta", delta))
    return _dp_to_rho(float(epsilon), float(delta), method)


def _dp_to_rho(eps: float, delta: float, method: str) -> float:
    L = math.log(1.0 / delta)
    rho_bs = (math.sqrt(L + eps) - math.sqrt(L)) ** 2
    if method == "bun_steinke":
        return rho_bs
    lo, hi = rho_bs, max(rho_bs, 1e-300)  # CKS <= BS, so the CKS rho is >= rho_bs
    while _zcdp_to_dp(hi, delta, method) <= eps:
        lo, hi = hi, hi * 2.0
    while hi / lo - 1.0 > 1e-12:
        mid = 0.5 * (lo + hi)
        if _zcdp_to_dp(mid, delta, method) <= eps:
            lo = mid
        else:
            hi = mid
    return float(lo)


# ---------------------------------------------------------------------------------------------
# Exact Gaussian calibration (Balle & Wang 2018)
# ---------------------------------------------------------------------------------------------


def _log_delta_gaussian(sigma: float, epsilon: float, sensitivity: float) -> float:
    """log of Balle & Wang (2018) Thm. 8: Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    la = float(special.log_ndtr(a - b))
    lb = float(epsilon + special.log_ndtr(-a - b))
    if lb >= la:  # only at sigma -> inf (both terms underflow alike)
        return -math.inf
    return la + math.log(-math.expm1(lb - la))


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact delta of the Gaussian mechanism N(0, sigma^2) at epsilon (Balle & Wang 2018, Thm. 8)."""
    V.check_positive("sigma", sigma)
    V.check_epsilon(epsilon)
    V.check_positive("sensitivity", sensitivity)
    return math.exp(_log_delta_gaussian(float(sigma), float(epsilon), float(sensitivity)))


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest epsilon at which the Gaussian mechanism ``N(0, sigma^2)`` is (epsilon, delta)-DP
    (Balle & Wang 2018, Thm. 8; inverse of :func:`analytic_gaussian_delta` in epsilon).

    Solves ``analytic_gaussian_delta(sigma, epsilon, sensitivity) = delta`` (decreasing in
    epsilon) by Brent's method on ``log epsilon``; where even ``epsilon = 1e-12`` meets ``delta``
    (a very large ``sigma``), returns 1e-12. The root is stepped up until an upper bound of the
    float64 formula covering its rounding is at most ``delta`` (safe side by construction).

    Privacy: ``q(D) + N(0, sigma^2)`` with l2-sensitivity ``sensitivity`` is (epsilon, delta)-DP
    for the returned epsilon.
    """
    V.check_positive("sigma", sigma)
    V.check_delta(delta)
    V.check_positive("sensitivity", sensitivity)
    sig, sens = float(sigma), float(sensitivity)
    log_target = math.log(float(delta))
    g = lambda u: _log_delta_gaussian(sig, math.exp(u), sens) - log_target  # noqa: E731
    lo, hi = math.log(1e-12), 0.0
    if g(lo) <= 0.0:
        return 1e-12
    while g(hi) > 0.0:
        hi += 1.0
    u = optimize.brentq(g, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    # the root may land a few ulps on the side where delta exceeds the target: step up
    return _step_out(math.exp(u), lambda e: _delta_meets(sig, e, sens, float(delta)))


def _delta_meets(sigma: float, epsilon: float, sensitivity: float, delta: float) -> bool:
    """Whether the Balle-Wang delta at ``(sigma, epsilon)`` is at most ``delta``, judged on an
    upper bound of the float64 formula (:func:`_log_delta_gaussian`) that covers its rounding:
    the arguments ``a - b``, ``-a - b`` (error ``<= 4 eps64 (a + b)``, times the slope of
    ``log_ndtr``, ``<= |x| + 1``), the two ``log_ndtr`` values and the sum with ``epsilon`` (a
    few ulps each); ``expm1`` of their difference is where cancellation amplifies them, so the
    bound takes the larger ``la`` and the smaller ``lb``, then a final ``(1 + 16 eps64)``."""
    tiny = np.finfo(float).eps
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    arg = 4.0 * tiny * (a + b) * (a + b + 2.0)
    la = float(special.log_ndtr(a - b))
    lb = float(epsilon + special.log_ndtr(-a - b))
    la_hi = la + 16.0 * tiny * (1.0 + abs(la)) + arg
    lb_lo = lb - 16.0 * tiny * (1.0 + abs(lb) + epsilon) - arg
    if not (math.isfinite(la_hi) and math.isfinite(lb_lo)):
        return False
    d_hi = math.exp(la_hi) * -math.expm1(min(lb_lo - la_hi, 0.0)) * (1.0 + 16.0 * tiny)
    return d_hi <= delta


def _step_out(x: float, ok: Callable[[float], bool], *, max_steps: int = 200) -> float:
    """The first of ``x``, ``x + 1 ulp``, ``x + 3 ulps``, ``x + 7 ulps``, ... (doubling steps
    upwards) with ``ok``; used after a root find so the returned value lies on the safe side of
    the root by construction. Raises ``ValueError`` when no step reaches it."""
    step = math.ulp(x)
    for _ in range(max_steps):
        if ok(x):
            return float(x)
        x, step = x + step, step * 2.0
    raise ValueError(f"could not step to the safe side of the root near {x!r}.")


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std making the Gaussian mechanism (epsilon, delta)-DP (Balle & Wang 2018).

    Solves the exact condition of Balle & Wang (ICML 2018), Theorem 8,
    ``Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) = delta`` for ``s`` (the left side
    decreases in ``s``) by Brent's method on ``log s`` and ``log delta``, evaluating the
    difference with ``log_ndtr`` and ``expm1`` so it stays accurate for large epsilon. This is
    the same calibration as their Algorithm 1 (which solves for ``s`` through
    ``alpha = sqrt(1 + v/2) -/+ sqrt(v/2)``); the tests compare the two. The root is then stepped
    up until an upper bound of the float64 formula that covers its rounding (:func:`_delta_meets`)
    is at most ``delta``, so the returned ``s`` errs on the safe side by construction.

    Privacy: ``q(D) + N(0, s^2)`` with l2-sensitivity ``sensitivity`` is (epsilon, delta)-DP,
    for any epsilon > 0 (no epsilon < 1 restriction, unlike :func:`classical_gaussian_sigma`).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_positive("sensitivity", sensitivity)
    eps, dlt, sens = float(epsilon), float(delta), float(sensitivity)
    log_target = math.log(dlt)
    g = lambda u: _log_delta_gaussian(math.exp(u), eps, sens) - log_target  # noqa: E731
    lo, hi = math.log(sens) - 1.0, math.log(sens) + 1.0
    while g(lo) < 0.0:
        lo -= 2.0
    while g(hi) > 0.0:
        hi += 2.0
    u = optimize.brentq(g, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    # the root may land a few ulps below the true sigma (delta above the target): step up
    return _step_out(math.exp(u), lambda s: _delta_meets(s, eps, sens, dlt))


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classical calibration ``sqrt(2 log(1.25/delta)) sensitivity / epsilon`` (Dwork & Roth Thm. A.1).

    Privacy: (epsilon, delta)-DP only for epsilon < 1; raises otherwise (use
    :func:`analytic_gaussian_sigma`).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_positive("sensitivity", sensitivity)
    if epsilon >= 1.0:
        raise ValueError(
            f"the classical Gaussian calibration needs epsilon < 1, got {epsilon!r}; "
            "use analytic_gaussian_sigma."
        )
    return math.sqrt(2.0 * math.log(1.25 / delta)) * float(sensitivity) / float(epsilon)


# ---------------------------------------------------------------------------------------------
# Spend records
# ---------------------------------------------------------------------------------------------


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, dp_accounting.DpEvent):
        value = value.to_named_tuple()
    if hasattr(value, "_asdict"):
        return {k: _to_jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


@jax.tree_util.register_static  # a pytree without leaves: fit results carry it through jit/vmap
@dataclasses.dataclass(frozen=True)
class PrivacySpend:
    """What one run spends: (epsilon, delta), optionally rho and the ``DpEvent``, and its meaning.

    ``relation`` is the neighbouring relation the spend covers: "add_remove", "replace_one" (any
    record replaced by any other) or "replace_one_within_group" (replaced by a record of the same
    group: group sizes fixed; a record moving between groups is not covered,
    :func:`dpfair_jax.privacy.relations.covers`); ``unit`` is what a neighbour changes ("example": a whole record; "sensitive_attribute": only a record's group
    label; "group_member", "user"). ``accountant`` says how epsilon was obtained ("rdp", "pld",
    "zcdp" conversion, "closed_form" paper formula, "exact" privacy curve, or None). ``delta = 0`` means pure
    epsilon-DP; ``epsilon = inf`` means no guarantee.
    """

    epsilon: float
    delta: float
    rho: float | None = None
    event: dp_accounting.DpEvent | None = None
    relation: str = "add_remove"
    unit: str = "example"
    accountant: str | None = None
    notes: str = ""

    def __post_init__(self) -> None:
        V.check_epsilon(self.epsilon, allow_inf=True)
        d = V.as_float("delta", self.delta)
        if not 0.0 <= d < 1.0:
            raise ValueError(f"delta must lie in [0, 1) (0 for pure DP), got {self.delta!r}.")
        if self.rho is not None:
            V.check_rho(self.rho, allow_inf=True)
        if self.event is not None and not isinstance(self.event, dp_accounting.DpEvent):
            raise ValueError(f"event must be a dp_accounting.DpEvent or None, got {self.event!r}.")
        # a name or NeighboringRelation; recorded by name ("swap" and unknown names refused)
        object.__setattr__(self, "relation", _relations.relation_name(self.relation))
        V.check_choice("unit", self.unit, UNITS)
        if self.accountant is not None:
            V.check_choice("accountant", self.accountant, ACCOUNTANTS + ("zcdp", "closed_form", "exact"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict; the event via ``DpEvent.to_named_tuple`` (nested dicts)."""
        return {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "rho": None if self.rho is None else float(self.rho),
            "event": None if self.event is None else _to_jsonable(self.event),
            "relation": self.relation,
            "unit": self.unit,
            "accountant": self.accountant,
            "notes": self.notes,
        }


class ZcdpLedger:
    """Named zCDP charges that must add up to a planned total (sequential composition).

    ``charge(name, rho, count=1)`` records ``count`` charges of ``rho`` under ``name`` (repeated
    names accumulate, e.g. one charge per iteration); ``total`` is the exactly rounded sum
    (``math.fsum``); ``assert_total(rho)`` raises ``AssertionError`` listing the charges if the
    total differs.

    A charge may be an array (e.g. one rho per grid point of a study): all array charges of one
    ledger broadcast to one shape, and ``total``, ``charges``, ``assert_total`` and ``to_dp`` then
    work elementwise (a scalar charge counts at every grid point). :meth:`at` gives one grid
    point's scalar ledger, whose :meth:`to_spend` is that point's record.
    """

    def __init__(self) -> None:
        self._history: list[tuple[str, Any, int]] = []
        self._shape: tuple[int, ...] | None = None  # broadcast shape of the array charges

    def charge(self, name: str, rho: Any, count: int = 1) -> Any:
        """Record ``count`` charges of ``rho`` (a float, or an array broadcasting with the
        ledger's other array charges) under ``name``; returns ``rho`` (a float or float64 array)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}.")
        if _is_array(rho):
            rho = _host_array("rho", rho)
            V.check_rho(rho)
            try:
                shape = np.broadcast_shapes(self._shape or (), rho.shape)
            except ValueError as err:
                raise ValueError(f"rho of shape {rho.shape} does not broadcast with the ledger's "
                                 f"other charges (shape {self._shape}); charge one shape of grid."
                                 ) from err
            self._shape = shape
        else:
            rho = V.as_float("rho", rho)
            V.check_rho(rho)
        count = V.check_int("count", count, minimum=1)
        self._history.append((name, rho, count))
        return rho

    @property
    def shape(self) -> tuple[int, ...]:
        """The broadcast shape of the charges: ``()`` for a scalar ledger."""
        return self._shape or ()

    @property
    def history(self) -> list[tuple[str, Any, int]]:
        """The charges in order, as ``(name, rho, count)``."""
        return list(self._history)

    @property
    def charges(self) -> dict[str, Any]:
        """Total rho per name, in order of first charge (arrays elementwise)."""
        out: dict[str, list[Any]] = {}
        for name, rho, count in self._history:
            out.setdefault(name, []).append(rho * count)
        return {k: self._broadcast(_fsum(v)) for k, v in out.items()}

    @property
    def total(self) -> Any:
        """The exactly rounded sum of the charges: a float, or a float64 array of :attr:`shape`."""
        return self._broadcast(_fsum([r * c for _, r, c in self._history]))

    def _broadcast(self, value: Any) -> Any:
        if self._shape is None:
            return value
        return np.broadcast_to(np.asarray(value, np.float64), self._shape).copy()

    def assert_total(self, rho: Any, rtol: float = 1e-9) -> None:
        """Raise ``AssertionError`` unless the charges add up to ``rho`` within ``rtol`` (at every
        grid point for array ledgers or an array ``rho``)."""
        V.check_rho(rho)
        if not _is_array(rho) and self._shape is None:
            ok = math.isclose(self.total, float(rho), rel_tol=rtol, abs_tol=0.0)
        else:
            total = np.asarray(self.total, np.float64)
            planned = _host_array("rho", rho)
            ok = bool(np.all(np.abs(total - planned) <= rtol * np.maximum(np.abs(total),
                                                                           np.abs(planned))))
        if not ok:
            planned = float(rho) if not _is_array(rho) else rho
            raise AssertionError(
                f"zCDP charges add up to {self.total!r}, planned {planned!r}; "
                f"charges: {self.charges}"
            )

    def at(self, index: Any) -> "ZcdpLedger":
        """The scalar ledger of one grid point: every array charge taken at ``index`` (an index
        into :attr:`shape`), scalar charges as they are."""
        if self._shape is None:
            raise ValueError("the ledger has only scalar charges; use it directly.")
        out = ZcdpLedger()
        for name, rho, count in self._history:
            value = np.broadcast_to(rho, self._shape)[index] if _is_array(rho) else rho
            if np.ndim(value) != 0:
                raise ValueError(f"index {index!r} does not pick one grid point of shape {self._shape}.")
            out.charge(name, float(value), count)
        return out

    def to_dp(self, delta: float, *, method: str = "cks") -> Any:
        """Epsilon at ``delta`` of the total (:func:`zcdp_to_dp`; elementwise for array ledgers)."""
        if not self._history:
            raise ValueError("the ledger has no charges; charge something before converting.")
        return zcdp_to_dp(self.total, delta, method=method)

    def to_spend(self, delta: float, *, method: str = "cks", relation: str = "add_remove",
                 unit: str = "example", notes: str = "") -> PrivacySpend:
        """The ledger's total as a :class:`PrivacySpend` (a scalar ledger; for an array ledger,
        take one grid point with :meth:`at` first)."""
        if self._shape is not None:
            raise ValueError(f"the ledger's charges are arrays of shape {self._shape}: one "
                             "PrivacySpend per grid point, ledger.at(index).to_spend(...); "
                             "to_dp(delta) gives every point's epsilon.")
        return PrivacySpend(
            epsilon=self.to_dp(delta, method=method), delta=float(delta), rho=self.total,
            event=dp_accounting.ZCDpEvent(self.total), relation=relation, unit=unit,
            accountant="zcdp", notes=notes or f"zCDP ledger, conversion {method}",
        )

    def __repr__(self) -> str:
        return f"ZcdpLedger(total={self.total!r}, charges={self.charges!r})"
