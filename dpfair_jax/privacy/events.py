"""DP-SGD style accounting on ``dp_accounting``: events, accountants, and the calibration of a
noise multiplier to an ``(epsilon, delta)`` target (:func:`calibration_target`, :func:`step_up_until`).

Poisson sampling is accounted under add/remove-one neighbours; fixed-size batches drawn without
replacement under replace-one neighbours; shuffled epochs without amplification
(:func:`shuffled_event`: at most ``ceil(steps / steps_per_epoch)`` composed Gaussians per record).
Host-side, float64 (re-exported by
:mod:`dpfair_jax.privacy.accounting`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting import dp_event as _ev
from scipy import optimize

from dpfair_jax import _validation as V
from dpfair_jax.privacy import relations as _relations
from dpfair_jax.privacy.records import ACCOUNTANTS, SAMPLINGS





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
    ``sampling="without_replacement"`` (``dpsgd.spend`` and ``fermi.spend`` do this). Shuffled
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
    return epsilon_curve(event, accountant=accountant, relation=relation)(delta)


_COMPOSED: dict = {}  # (repr(event), accountant, relation) -> composed accountant (only read)
_COMPOSED_MAX = 32


def epsilon_curve(
    event: dp_accounting.DpEvent, *, accountant: str = "rdp", relation: str | None = None
) -> Callable[[float], float]:
    """``delta -> epsilon`` of ``event``: :func:`epsilon_of_event` with the accountant composed once.

    The accountant's composition (e.g. the RDP of a Poisson-subsampled Gaussian at every order)
    is the cost of :func:`epsilon_of_event`; evaluating the returned curve at several deltas (as
    ``sampling.truncated_spend`` does) reuses it, and the last few composed accountants are kept
    (keyed by the event's ``repr``, exact for its floats and their types), so repeated fits of one
    configuration compose once. Each value equals :func:`epsilon_of_event`'s.
    """
    key = (repr(event), accountant, relation)
    acc = _COMPOSED.get(key)
    if acc is None:
        acc = _make_accountant(event, accountant, relation)
        if len(_COMPOSED) >= _COMPOSED_MAX:
            _COMPOSED.pop(next(iter(_COMPOSED)))
        _COMPOSED[key] = acc

    def at(delta: float) -> float:
        V.check_delta(delta)
        return float(acc.get_epsilon(float(delta)))

    return at


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


class BelowAccountantResolution(ValueError):
    """A target epsilon below what the RDP accountant can certify at the run's settings."""


def _below_resolution(target: float, delta: float, floor: float) -> str:
    return (f"target_epsilon={target!r} is below what the RDP accountant can certify at these settings "
            f"(delta={delta!r}, sample rate and steps as given): its epsilon levels off near {floor:.3g} "
            "however large the noise; use accountant='pld' (tight for small epsilons), or raise the target.")


def _check_calibration(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str,
                       sampling: str, relative_noise: Sequence[float], rtol: float,
                       extra_event: dp_accounting.DpEvent | None) -> tuple[int, tuple[float, ...]]:
    """The checks of :func:`calibrate_noise_multiplier`, before any accountant call: ``(steps, rel)``."""
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
    return steps, rel


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
    steps, rel = _check_calibration(target_epsilon, delta, sample_rate, steps, accountant, sampling,
                                    relative_noise, rtol, extra_event)
    target = float(target_epsilon)

    def eps(z: float) -> float:
        ev = dpsgd_event(z, sample_rate, steps, sampling=sampling, relative_noise=rel,
                         dataset_size=dataset_size)
        if extra_event is not None:
            ev = dp_accounting.ComposedDpEvent([extra_event, ev])
        return epsilon_of_event(ev, delta, accountant=accountant)

    factor, hi = 2.0, 1.0
    if accountant == "pld":
        # PLD is slow for small multipliers and never above RDP: start from the (cheap) RDP
        # calibration, which meets the target, and search downwards in small steps.
        try:
            hi = calibrate_noise_multiplier(
                target, delta, sample_rate, steps, accountant="rdp", sampling=sampling,
                relative_noise=rel, dataset_size=dataset_size, rtol=1e-4, extra_event=extra_event,
            )
            factor = 1.25
        except BelowAccountantResolution:
            pass  # a target only PLD certifies: bracket upwards from 1 under PLD
    while (e_hi := eps(hi)) > target:
        hi *= factor
        if hi > 1e8:
            if accountant == "rdp":
                raise BelowAccountantResolution(_below_resolution(target, delta, e_hi))
            raise ValueError(
                f"no noise multiplier up to 1e8 reaches target_epsilon={target!r} at delta={delta!r}; "
                "raise target_epsilon or delta, or lower sample_rate/steps."
            )
    if accountant == "rdp" and e_hi == 0.0 and hi > 1.0:
        # the RDP conversion levels off above the target and then drops to 0 only through
        # rounding at huge multipliers: that is no certificate of the target
        raise BelowAccountantResolution(_below_resolution(target, delta, eps(hi / factor)))
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
    epsilon_of: Callable[[Any], float], noise_multiplier: float | tuple[float, ...], target_epsilon: float, *,
    growth: float = 1.0 + 1e-9, max_steps: int = 100, ceiling: float = math.inf,
) -> Any:
    """The first of ``z, z g, z g^2, ...`` (``g = growth``, at most ``max_steps`` values, none
    above ``ceiling``) with ``epsilon_of(z) <= target_epsilon``, where ``z = noise_multiplier`` is
    a float or a tuple of multipliers scaled together (e.g. a descent and an ascent multiplier).

    The calibrations of the SGD family share this step: ``z`` comes from a solver (e.g.
    :func:`calibrate_noise_multiplier`) and ``epsilon_of`` is the algorithm's own spend; the default
    ``growth`` absorbs the rounding between the two (relative-noise ratios, sensitivity factors), so
    that ``spend(calibrate(...)).epsilon <= target`` holds exactly. A larger ``growth`` brackets a
    root from below. Raises ``ValueError`` when no step reaches the target.

    Privacy: the returned multiplier meets ``target_epsilon`` as ``epsilon_of`` accounts it.
    """
    z = tuple(float(x) for x in noise_multiplier) if isinstance(noise_multiplier, tuple) else float(noise_multiplier)
    for _ in range(V.check_int("max_steps", max_steps, minimum=1)):
        if epsilon_of(z) <= target_epsilon:
            return z
        z = tuple(x * growth for x in z) if isinstance(z, tuple) else z * growth
        if (max(z) if isinstance(z, tuple) else z) > ceiling:
            break
    raise ValueError(f"calibration did not reach epsilon <= {target_epsilon!r} (noise multiplier up to "
                     f"{z!r}); raise epsilon.")


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
