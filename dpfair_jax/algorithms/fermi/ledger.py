"""DP-FERMI's accounting (paper 004): the trio's :func:`spend` / :func:`calibrate`;
:func:`theorem33_multipliers` maps the paper's closed-form stds (:mod:`dpfair_jax.algorithms.fermi.theory`)
to :func:`~dpfair_jax.algorithms.fermi.fit`'s multipliers.

Privacy: the sensitive-attribute unit and shuffled batches are accounted exactly as
membership-visible Gaussian mixtures (no amplification); the all-features unit with Poisson or
fixed-size batches through the subsampled ``DpEvent`` of both noisy updates per step; the noisy
group-frequency histogram is composed in whenever it is drawn (see :mod:`dpfair_jax.algorithms.fermi`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import dp_accounting

from dpfair_jax import _validation as v
from dpfair_jax.algorithms.fermi.config import FermiConfig, FermiHparams, check_hparams
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import minmax_noise as MM
from dpfair_jax.privacy import sampling as Smp

__all__ = ["spend", "calibrate", "theorem33_multipliers", "attribute_change_rdp", "attribute_spend",
           "theorem33_attribute_event"]


def _participation(config: FermiConfig, n: int):
    """Law of the number of steps a given record is sampled in (membership-visible accounting)."""
    if config.sampling == "shuffle":
        return A.participation_distribution(config.steps, "shuffle",
                                            steps_per_epoch=Smp.steps_per_epoch(n, config.batch_size))
    return A.participation_distribution(config.steps, config.sampling, sample_rate=config.batch_size / n)


def _count_mu(config: FermiConfig) -> float:
    """Shift/std of the noisy group-frequency histogram (0 when the frequencies are public)."""
    return 1.0 / config.count_noise_multiplier if config.group_frequencies == "noisy" else 0.0


def _count_event(config: FermiConfig):
    if config.group_frequencies != "noisy":
        return None
    return dp_accounting.GaussianDpEvent(float(config.count_noise_multiplier))


def _calibrate_noise(config: FermiConfig, n: int, epsilon: float, delta: float, w_relative: float,
                     accountant: str = "rdp") -> tuple[float, float]:
    """Noise multipliers ``(z_theta, z_w = w_relative * z_theta)`` for (epsilon, delta)-DP, on
    checked inputs (:func:`calibrate` returns them set in a :class:`FermiHparams`).

    Sensitive-attribute unit: the membership-visible mixture solved exactly for the per-step shift
    ``mu = sqrt(z_theta^-2 + z_w^-2)`` (:func:`dpfair_jax.privacy.accounting.calibrate_membership_visible`),
    with the noisy-frequency histogram composed in. All features: both noisy updates of every step
    composed on the same sampled batch with the sampling the run uses (Poisson: add/remove;
    fixed-size: without replacement, replace-one) and the histogram composed once
    (``accounting.calibrate_noise_multiplier``, ``accountant``); shuffled batches: no
    amplification, the exact curve of ``epochs`` composed Gaussians with the histogram
    (``calibrate_membership_visible`` at the shuffle point mass, as for the sensitive attribute).
    ``epsilon = inf`` returns ``(0, 0)``.

    Privacy: as :func:`fit` for ``config.privacy_unit``; :func:`_spend` of the result is at most
    ``epsilon``, with the Poisson padding's truncation probability added to ``delta`` (it grows with
    ``e^epsilon``: with the default padding, mean + 8 standard deviations, it is below 1e-10 at
    epsilon <= 3 on tabular sizes but can exceed a ``delta = 1/n^2`` at epsilon = 9, e.g. 3.7e-8 on
    Adult; the recorded spend states it, and a larger ``config.max_batch_size`` lowers it).
    """
    w = float(w_relative)
    if config.privacy_unit == "sensitive_attribute" or config.sampling == "shuffle":
        mu = A.calibrate_membership_visible(float(epsilon), float(delta), _participation(config, n),
                                            extra_mu=_count_mu(config))
        z = MM.multiplier_for_shift(mu, w)
        return float(z), float(z * w)
    z = A.calibrate_noise_multiplier(
        float(epsilon), float(delta), config.batch_size / n, config.steps, accountant=accountant,
        sampling=config.accountant_sampling(), relative_noise=(1.0, w),
        dataset_size=None if config.sampling == "poisson" else n, extra_event=_count_event(config),
    )
    return float(z), float(z * w)


def _spend(config: FermiConfig, n: int, noise_theta: float, noise_w: float, *, accountant: str = "rdp"):
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of one run with these multipliers
    at ``config.delta``, on checked inputs (:func:`spend` checks them).

    Sensitive-attribute unit: exact membership-visible accounting (``accountant="exact"``, no
    ``DpEvent``), relation ``"replace_one"`` (substitution of one ``s_i``). All features: the
    ``DpEvent`` of the subsampled steps (and the histogram) through ``accountant``; with shuffled
    batches no amplification: ``epochs`` composed Gaussians (``accounting.shuffled_event``), epsilon
    from their exact curve (``accountant="exact"``). All include the noisy group-frequency
    histogram when ``config.group_frequencies="noisy"``.
    """
    delta = config.delta
    eps_at = None  # epsilon of the exact mechanism at a given delta
    unit = "sensitive_attribute" if config.privacy_unit == "sensitive_attribute" else "example"
    freq = ("group frequencies from a noisy histogram (noise multiplier "
            f"{config.count_noise_multiplier:g}, charged)" if config.group_frequencies == "noisy"
            else "group frequencies public (supplied by the caller, not charged)")
    if noise_theta == 0 or noise_w == 0:
        return A.PrivacySpend(math.inf, float(delta), relation=config.relation(), unit=unit,
                              notes="zero noise: no guarantee")
    notes = f"DP-FERMI {config.fairness}, unit {config.privacy_unit}, variant={config.variant}; {freq}"
    event = None
    if config.privacy_unit == "sensitive_attribute":
        mu_step = MM.combined_shift(float(noise_theta), float(noise_w))
        part = _participation(config, n)
        eps_at = lambda d: A.membership_visible_epsilon(mu_step, d, part, extra_mu=_count_mu(config))  # noqa: E731
        eps = eps_at(float(delta))
        used = "exact"
        notes += ("; membership-visible accounting (public task gradients reveal batch membership: "
                  "no amplification by subsampling); lam = 0 runs leave s unused and are not private "
                  "for examples")
    elif config.sampling == "shuffle":
        spe = Smp.steps_per_epoch(n, config.batch_size)
        mu_step = MM.combined_shift(float(noise_theta), float(noise_w))
        eps = A.membership_visible_epsilon(mu_step, float(delta), _participation(config, n),
                                           extra_mu=_count_mu(config))
        event = A.shuffled_event(float(noise_theta), config.steps, spe,
                                 relative_noise=(1.0, float(noise_w) / float(noise_theta)))
        extra = _count_event(config)
        if extra is not None:
            event = dp_accounting.ComposedDpEvent([extra, event])
        used = "exact"
        notes += (f"; shuffled epochs without amplification: at most "
                  f"{A.shuffled_participations(config.steps, spe)} composed Gaussians per record, exact curve")
    else:
        event = A.dpsgd_event(
            float(noise_theta), config.batch_size / n, config.steps, sampling=config.accountant_sampling(),
            relative_noise=(1.0, float(noise_w) / float(noise_theta)),
            dataset_size=None if config.sampling == "poisson" else n,
        )
        extra = _count_event(config)
        if extra is not None:
            event = dp_accounting.ComposedDpEvent([extra, event])
        eps_at = lambda d: A.epsilon_of_event(event, d, accountant=accountant)  # noqa: E731
        eps = eps_at(float(delta))
        used = accountant
    total = float(delta)
    if config.sampling == "poisson":
        B = config.sgda_config().padded_batch(n)
        eps, total, extra_delta = A.truncated_spend(
            eps_at, float(delta),
            lambda e: Smp.truncation_delta(n, config.batch_size / n, B, config.steps, e) if B < n else 0.0)
        notes += f"; Poisson padding {B} rows (truncation delta {extra_delta:.2e} included)"
    if config.variant == "paper" or config.clip_mode == "official_batch":
        notes += "; LITERAL variant: the guarantee holds only for lam <= 1 / per-example clipping"
    return A.PrivacySpend(eps, min(total, 0.999999), event=event,
                          relation=config.relation(), unit=unit, accountant=used, notes=notes)






def spend(config: FermiConfig, sizes: Any, hparams: FermiHparams) -> A.PrivacySpend:
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of ``fit(key, data, hparams,
    config)`` at ``hparams.noise_theta``, ``hparams.noise_w`` and ``config.delta``.

    Sensitive-attribute unit: exact membership-visible accounting (``accountant="exact"``, no
    ``DpEvent``), relation ``"replace_one"`` (substitution of one ``s_i``). All features: the
    ``DpEvent`` of the subsampled steps (and the histogram) through the RDP accountant; with
    shuffled batches no amplification: ``epochs`` composed Gaussians (``accounting.shuffled_event``),
    epsilon from their exact curve (``accountant="exact"``). All include the noisy group-frequency
    histogram when ``config.group_frequencies="noisy"``, and Poisson runs the padding's truncation
    probability in delta.

    ``sizes``: the training size ``n`` (an int, or per-group sizes that sum to it; treated as
    public, as the sampling rate ``batch_size / n``). The other fields of ``hparams`` do not enter
    the spend (the clip norms set the noise scale, not the privacy); the noise multipliers must be
    host numbers (one spend per grid point).

    Privacy: the (epsilon, delta) of the run for the unit and relation of ``config``.
    """
    n = v.training_size(sizes)
    config.validate(n)
    check_hparams(hparams)
    zt, zw = v.host_float("noise_theta", hparams.noise_theta), v.host_float("noise_w", hparams.noise_w)
    return _spend(config, n, zt, zw)


def calibrate(config: FermiConfig, sizes: Any, target: tuple[float, float], *,
              hparams: FermiHparams | None = None) -> FermiHparams:
    """``hparams`` (default :class:`FermiHparams`) with ``noise_theta = z`` and ``noise_w =
    config.w_relative * z`` set so that ``spend(config, sizes, result).epsilon <= target[0]``,
    tight to the root finder's tolerance.

    Sensitive-attribute unit: the membership-visible mixture solved exactly for the per-step shift
    ``mu = sqrt(z_theta^-2 + z_w^-2)`` (:func:`dpfair_jax.privacy.accounting.calibrate_membership_visible`),
    with the noisy-frequency histogram composed in. All features: both noisy updates of every step
    composed on the same sampled batch with the sampling the run uses and the histogram composed
    once (``accounting.calibrate_noise_multiplier``, RDP); shuffled batches: no amplification, the
    exact curve of ``epochs`` composed Gaussians with the histogram.

    ``target = (epsilon, delta)`` with ``delta == config.delta``
    (:func:`~dpfair_jax.privacy.accounting.calibration_target`). ``sizes`` as in :func:`spend`.

    Privacy: the returned multipliers make :func:`fit` (epsilon, delta)-DP for ``config``'s unit:
    under Poisson sampling the mechanism is calibrated to ``delta`` less the padding's truncation
    probability at ``epsilon`` (it grows with ``e^epsilon``; refused when it alone reaches ``delta``;
    a larger ``config.max_batch_size`` lowers it).
    """
    n = v.training_size(sizes)
    config.validate(n)
    eps, delta = A.calibration_target(target, config.delta)
    hparams = FermiHparams() if hparams is None else hparams
    if not isinstance(hparams, FermiHparams):
        raise ValueError(f"hparams must be a fermi.FermiHparams, got {type(hparams).__name__}.")
    if config.sampling == "poisson":  # the padding's truncation charge comes out of the target delta
        B = config.sgda_config().padded_batch(n)
        delta = A.calibration_delta(eps, delta, Smp.truncation_delta(
            n, config.batch_size / n, B, config.steps, eps) if B < n and math.isfinite(eps) else 0.0)
    zt, zw = _calibrate_noise(config, n, eps, delta, config.w_relative)
    zt, zw = A.step_up_until(lambda zs: _spend(config, n, *zs).epsilon, (zt, zw), eps)  # solver rounding
    return dataclasses.replace(hparams, noise_theta=zt, noise_w=zw)


def theorem33_multipliers(config: FermiConfig, sigma_theta: float, sigma_w: float,
                          clip_theta: float, clip_w: float) -> tuple[float, float]:
    """Noise multipliers that make :func:`fit` add the paper's noise (Theorem 3.3 stds on the averaged
    gradient, times ``lam``): ``z = sigma m / (C k)``, with ``k`` the sensitivity factor.

    The stds come from :func:`dpfair_jax.algorithms.fermi.theory.dpfermi_noise` or
    ``official_dpfermi_calibration``. Privacy: what the paper's recipe states, not what
    :func:`spend` accounts for the result (compare the two with :func:`spend`)."""
    fct = config.sensitivity_factor()
    m = config.batch_size
    return (MM.multiplier_of_std(sigma_theta * m, clip_theta, fct),
            MM.multiplier_of_std(sigma_w * m, clip_w, fct))


def attribute_change_rdp(config: FermiConfig, n: int, noise_theta: float, noise_w: float, *,
                         reads_s: bool = True, orders=None):
    """RDP at ``orders`` (default :data:`dpfair_jax.privacy.attribute.ORDERS`) of an all-features,
    Poisson run of :func:`fit` under a change of one record's ``s_i`` (the sensitive-attribute unit
    for the example-level mechanism; :mod:`dpfair_jax.privacy.attribute`).

    (a) membership visible: in each step the record is sampled, both clipped per-example updates
    read ``s_i`` (shift ``2 / z`` each: one clipped row replaced by another), and the noisy
    ``(y, s)`` histogram moves one count (shift ``sqrt 2 / count_noise_multiplier``); (b) the
    example-level add/remove ``DpEvent`` of :func:`spend`, carried to the change by the weak
    triangle inequality. The pointwise minimum. ``reads_s=False`` (``lam = 0``: DP-SGD, whose
    updates multiply every ``s``-term by 0 and whose model is a function of the data without
    ``s``): the zero curve.

    Privacy: an RDP bound for substitution of one ``s_i`` only (unit ``"sensitive_attribute"``)."""
    import numpy as np

    from dpfair_jax.privacy import attribute as At

    orders = At.ORDERS if orders is None else orders
    if config.privacy_unit != "all_features" or config.sampling != "poisson":
        raise ValueError("attribute_change_rdp accounts the all-features Poisson run (the example-level "
                         f"mechanism); got privacy_unit={config.privacy_unit!r}, sampling={config.sampling!r}.")
    if not reads_s:
        return np.zeros(len(orders))
    mu = MM.combined_shift(1.0 / At.shift(noise_theta, At.CLIPPED_SUM_FACTOR),
                           1.0 / At.shift(noise_w, At.CLIPPED_SUM_FACTOR))
    extra = (At.shift(config.count_noise_multiplier, At.MOVED_CELL_FACTOR)
             if config.group_frequencies == "noisy" else 0.0)
    event = A.dpsgd_event(float(noise_theta), config.batch_size / n, config.steps,
                          relative_noise=(1.0, float(noise_w) / float(noise_theta)))
    if _count_event(config) is not None:  # the example-level event of _spend, without its epsilon
        event = dp_accounting.ComposedDpEvent([_count_event(config), event])
    part = At.poisson_participation(config.steps, config.batch_size / n)
    return At.attribute_rdp(mu, part, extra_mu=extra, example_event=event, orders=orders)


def theorem33_attribute_event(config: FermiConfig, n: int, noise_theta: float, noise_w: float):
    """The ``DpEvent`` the paper's Theorem 3.3 accounting states for a Poisson run of :func:`fit`
    under a change of one ``s_i``: the Poisson-subsampled Gaussian (amplified) of both updates at
    the change's shift (all features: one clipped row replaced, multipliers ``z / 2``; the
    sensitive-attribute unit, whose noise is already at that sensitivity: ``z``) and the histogram
    at the shift of one moved count.

    Privacy: what the paper would record, for comparison; not a bound the kit proves. For
    ``privacy_unit="sensitive_attribute"`` (membership visible) it understates: :func:`spend`
    accounts that run exactly."""
    from dpfair_jax.privacy import attribute as At
    from dpfair_jax.privacy.relations import histogram_sensitivity

    if config.sampling != "poisson":
        raise ValueError("theorem33_attribute_event states the Poisson-subsampled record; use sampling='poisson'.")
    f_sum = At.CLIPPED_SUM_FACTOR / config.sensitivity_factor()
    f_cell = At.MOVED_CELL_FACTOR / histogram_sensitivity("l2").under(config.relation())
    zt = At.amplified_multiplier(noise_theta, f_sum)
    zw = At.amplified_multiplier(noise_w, f_sum)
    event = A.dpsgd_event(zt, config.batch_size / n, config.steps, relative_noise=(1.0, zw / zt))
    if config.group_frequencies == "noisy":
        hist = dp_accounting.GaussianDpEvent(At.amplified_multiplier(config.count_noise_multiplier, f_cell))
        event = dp_accounting.ComposedDpEvent([hist, event])
    return event


def attribute_spend(config: FermiConfig, sizes: Any, hparams: FermiHparams) -> A.PrivacySpend:
    """The spend of an all-features, Poisson run of :func:`fit` for the sensitive-attribute unit
    (a change of one ``s_i``): :func:`attribute_change_rdp` at ``config.delta`` (zero when
    ``hparams.lam`` is a host 0: nothing the run releases reads ``s``), the Poisson padding's
    truncation probability in delta. The run is the one :func:`spend` accounts at the example level.

    Privacy: (epsilon, delta)-DP under substitution of one record's ``s_i`` (relation
    ``"replace_one"``, unit ``"sensitive_attribute"``)."""
    from dpfair_jax.privacy import attribute as At

    n = v.training_size(sizes)
    config.validate(n)
    check_hparams(hparams)
    zt, zw = v.host_float("noise_theta", hparams.noise_theta), v.host_float("noise_w", hparams.noise_w)
    reads_s = v.is_traced(hparams.lam) or float(hparams.lam) != 0.0
    notes = ("example-level run under a change of one s_i: min of the membership-visible curve of the parts "
             "that read s and the example-level curve under replace-one (weak triangle or direct)")
    if not reads_s:
        return A.PrivacySpend(0.0, 0.0, relation="replace_one", unit="sensitive_attribute", accountant="rdp",
                              notes="lam = 0: no release reads s (DP-SGD); nothing spent on s")
    if zt == 0 or zw == 0:
        return A.PrivacySpend(math.inf, config.delta, relation="replace_one", unit="sensitive_attribute",
                              notes=notes + "; zero noise: no guarantee")
    eps = At.attribute_selection_epsilon(attribute_change_rdp(config, n, zt, zw), None, config.delta)
    B = config.sgda_config().padded_batch(n)
    extra = Smp.truncation_delta(n, config.batch_size / n, B, config.steps, eps) if B < n else 0.0
    return A.PrivacySpend(eps, min(float(config.delta) + extra, 0.999999), relation="replace_one",
                          unit="sensitive_attribute", accountant="rdp",
                          notes=notes + f"; truncation delta {extra:.2e} included")
