"""What a DP-SGDA run spends (:func:`spend`) and the noise multipliers that meet a target (:func:`calibrate`).

Privacy: Poisson sampling under add/remove-one (subsampled Gaussian, RDP, plus the padding's
truncation charge), fixed-size batches under replace-one (sampling without replacement), shuffled
epochs under replace-one without amplification (composed Gaussians, exact curve)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import minmax_noise as _mm
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import sampling as _smp
from dpfair_jax.algorithms.sgda.config import SGDAConfig, SGDAHparams, check_hparams


def _relation(config: SGDAConfig) -> str:
    """Poisson sampling: add/remove (``n`` public); fixed-size and shuffled batches: replace-one."""
    return "add_remove" if config.sampling == "poisson" else "replace_one"


def _effective(config: SGDAConfig) -> float:
    """Noise multiplier relative to the clipped sum's sensitivity under :func:`_relation`, per unit
    of ``hparams.noise_*``: ``sensitivity_factor / replace_factor(relation)``."""
    return float(config.sensitivity_factor) / _rel.replace_factor(_relation(config))


def spend(config: SGDAConfig, sizes: Any, hparams: SGDAHparams) -> _acc.PrivacySpend:
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of ``fit(key, data, hparams, config)``
    at ``config.delta``: both noisy updates of a step released on one sampled batch, with effective
    multipliers ``noise_* x sensitivity_factor / replace_factor(relation)``.

    Poisson sampling: the Poisson-subsampled Gaussian (``q = batch_size / n``), add/remove, RDP,
    plus the padding's truncation probability in delta; fixed-size batches: sampling without
    replacement, replace-one, RDP; shuffled epochs: no amplification, ``epochs`` composed Gaussians
    with their exact curve, replace-one. ``sizes``: the training size ``n`` (an int, or per-group
    sizes that sum to it). Zero noise on either update: ``epsilon = inf``.

    Privacy: the (epsilon, delta) of the run for whole records (unit ``"example"``).
    """
    n = v.training_size(sizes)
    config.validate(n)
    check_hparams(hparams)
    return _spend(config, n, v.host_float("noise_theta", hparams.noise_theta),
                  v.host_float("noise_w", hparams.noise_w))


def _spend(config: SGDAConfig, n: int, zt: float, zw: float) -> _acc.PrivacySpend:
    """:func:`spend` on checked inputs (host multipliers ``zt``, ``zw``)."""
    relation, T, m = _relation(config), config.steps, config.batch_size
    notes = f"DP-SGDA: {T} steps, {config.sampling} batches of {m} (n = {n}), descent and ascent released"
    if zt == 0 or zw == 0:
        return _acc.PrivacySpend(math.inf, config.delta, relation=relation, unit="example",
                                 notes=notes + "; zero noise: no guarantee")
    eff = _effective(config)
    zt_e, ratio = zt * eff, zw / zt
    if config.sampling == "shuffle":
        spe = _smp.steps_per_epoch(n, m)
        mu = _mm.combined_shift(zt_e, zw * eff)
        eps = _acc.membership_visible_epsilon(
            mu, config.delta, _acc.participation_distribution(T, "shuffle", steps_per_epoch=spe))
        event = _acc.shuffled_event(zt_e, T, spe, relative_noise=(1.0, ratio))
        return _acc.PrivacySpend(eps, config.delta, event=event, relation=relation, unit="example",
                                 accountant="exact", notes=notes + "; shuffled epochs without amplification")
    poisson = config.sampling == "poisson"
    event = _acc.dpsgd_event(zt_e, m / n, T, sampling="poisson" if poisson else "without_replacement",
                             relative_noise=(1.0, ratio), dataset_size=None if poisson else n)
    eps = _acc.epsilon_of_event(event, config.delta, accountant="rdp")
    total = config.delta
    if poisson:
        B = config.padded_batch(n)
        eps, total, extra = _acc.truncated_spend(
            lambda d: _acc.epsilon_of_event(event, d, accountant="rdp"), config.delta,
            lambda e: _smp.truncation_delta(n, m / n, B, T, e) if B < n else 0.0)
        notes += f"; Poisson padding {B} rows (truncation delta {extra:.2e} included)"
    return _acc.PrivacySpend(eps, min(total, 0.999999), event=event, relation=relation,
                             unit="example", accountant="rdp", notes=notes)


def calibrate(config: SGDAConfig, sizes: Any, target: tuple[float, float], *,
              hparams: SGDAHparams | None = None) -> SGDAHparams:
    """``hparams`` (default :class:`SGDAHparams`) with ``noise_theta = z`` and ``noise_w =
    config.w_relative * z``, ``z`` the smallest (to the solver's tolerance) with
    ``spend(config, sizes, result).epsilon <= target[0]``.

    ``target = (epsilon, delta)`` with ``delta == config.delta``
    (:func:`~dpfair_jax.privacy.accounting.calibration_target`). ``sizes`` as in :func:`spend`.

    Privacy: the returned multipliers make :func:`fit` (epsilon, delta)-DP as :func:`spend` states.
    """
    n = v.training_size(sizes)
    config.validate(n)
    eps, delta = _acc.calibration_target(target, config.delta)
    hparams = SGDAHparams() if hparams is None else hparams
    if not isinstance(hparams, SGDAHparams):
        raise ValueError(f"hparams must be an sgda.SGDAHparams, got {type(hparams).__name__}.")
    w, m, T = float(config.w_relative), config.batch_size, config.steps
    if config.sampling == "shuffle":
        part = _acc.participation_distribution(T, "shuffle", steps_per_epoch=_smp.steps_per_epoch(n, m))
        z_eff = _mm.multiplier_for_shift(_acc.calibrate_membership_visible(eps, delta, part), w)
    else:
        poisson = config.sampling == "poisson"
        if poisson:  # the padding's truncation charge comes out of the target delta
            B = config.padded_batch(n)
            delta = _acc.calibration_delta(eps, delta, _smp.truncation_delta(n, m / n, B, T, eps) if B < n else 0.0)
        z_eff = _acc.calibrate_noise_multiplier(
            eps, delta, m / n, T, sampling="poisson" if poisson else "without_replacement",
            relative_noise=(1.0, w), dataset_size=None if poisson else n)
    z = _acc.step_up_until(lambda z: _spend(config, n, z, w * z).epsilon, z_eff / _effective(config), eps)
    return dataclasses.replace(hparams, noise_theta=z, noise_w=w * z)
