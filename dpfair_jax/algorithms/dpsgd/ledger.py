"""DP-SGD's inputs and run shape, what a run spends (:func:`spend`) and the multiplier that meets a
target (:func:`calibrate`).

Privacy: Poisson under add/remove-one (plus the padding's truncation charge), fixed-size batches
under replace-one (sampling without replacement), shuffled epochs without amplification."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from dpfair_jax.data.dataset import Dataset
from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.algorithms.dpsgd.config import DPSGDConfig, DPSGDHparams


# Inputs, steps and the program's shape
# ------------------------------------------------------------------------------------------------
def _unpack_data(data: Any) -> tuple[Any, Any, Any, int | None]:
    if isinstance(data, Dataset):
        return data.x, data.y, data.mask, data.num_classes
    if isinstance(data, (tuple, list)) and len(data) in (2, 3):
        x, y = data[0], data[1]
        mask = data[2] if len(data) == 3 else None
        return x, y, mask, None
    raise ValueError("data must be a Dataset or a tuple (x, y) / (x, y, mask).")


def resolve_steps(n: int, batch_size: int, steps: int | None = None, epochs: int | None = None,
                  sampling: str = "poisson") -> int:
    """The number of steps of a run given ``steps=`` or ``epochs=`` (exactly one): an epoch is
    ``n // batch_size`` steps; with ``sampling="shuffle"``, ``steps`` must be whole epochs.
    Raises ``ValueError`` naming the field otherwise. Lower level: use fit (records no spend). Use it to set ``DPSGDConfig.steps`` (or
    ``MitigationConfig.steps``) from a number of epochs:
    ``DPSGDConfig(..., batch_size=b, steps=resolve_steps(n, b, epochs=3))``."""
    spe = _sampling.steps_per_epoch(n, batch_size)
    if (steps is None) == (epochs is None):
        raise ValueError("pass exactly one of steps= or epochs=.")
    if epochs is not None:
        return spe * v.check_int("epochs", epochs, minimum=1)
    steps = v.check_int("steps", steps, minimum=1)
    _check_whole_epochs(steps, spe, sampling)
    return steps


def _check_whole_epochs(steps: int, steps_per_epoch: int, sampling: str) -> None:
    if sampling == "shuffle" and steps % steps_per_epoch:
        raise ValueError(
            f"with sampling='shuffle', steps must be a multiple of the {steps_per_epoch} steps per epoch "
            f"(n // batch_size); got steps={steps}. Set steps from epochs (resolve_steps(n, batch_size, "
            "epochs=...)) instead."
        )


class _Shape(NamedTuple):
    """The run's accounting spec (``sampling.accounting_for``) and static batch width."""

    spec: Any
    width: int


def _shape(config: "DPSGDConfig", n: int) -> _Shape:
    """Check a validated config against the number of rows ``n`` (no re-validation) and return
    the accounting spec and the static batch width: the padded Poisson batch (``max_batch_size``,
    default ``sampling.max_batch_size_for`` with overflow probability 1e-9 over the run, at most
    ``n``), or ``batch_size`` for fixed-size and shuffled batches."""
    if config.batch_size > n:
        raise ValueError(f"batch_size ({config.batch_size}) must be <= the number of rows n ({n}).")
    spec = _sampling.accounting_for(config.sampling, n, config.batch_size)
    _check_whole_epochs(config.steps, spec.steps_per_epoch, config.sampling)
    if config.sampling != "poisson":
        return _Shape(spec, config.batch_size)
    width = config.max_batch_size
    if width is None:
        width = _sampling.max_batch_size_for(n, spec.sample_rate, config.steps)
    return _Shape(spec, min(width, n))


def _spend(config: "DPSGDConfig", n: int, noise_multiplier: float, shape: _Shape):
    """The ``PrivacySpend`` of a run (inputs validated by the caller, ``shape = _shape(config, n)``).

    * ``"poisson"``: Poisson-subsampled Gaussian at ``q = batch_size / n`` under add/remove-one
      neighbours, with the truncation charge ``sampling.truncation_delta`` taken out of ``delta``
      (``accounting.truncated_spend``: epsilon at ``delta - charge``; a charge that alone exceeds
      ``delta`` is added to it instead). The rate uses the dataset size ``n``, which differs by one
      between add/remove neighbours: the kit treats ``n`` as public (as Opacus does) and does not
      charge for it; see ``privacy.sampling`` ("Dataset size").
    * ``"fixed_size"`` (independent uniform batches each step): sampling without replacement under
      replace-one neighbours, where the clipped sum's sensitivity is ``2 C``, so the accountant
      sees the multiplier ``noise_multiplier / 2`` (``accountant``: RDP; PLD cannot account it).
    * ``"shuffle"`` (shuffled epochs): no amplification. Each example is in at most
      ``k = ceil(steps / steps_per_epoch)`` batches (one per epoch), so the run is at most ``k``
      composed Gaussians of multiplier ``noise_multiplier / 2`` (replace-one, sensitivity ``2 C``);
      epsilon is that curve's exact value (analytic Gaussian with ``mu = 2 sqrt(k) / z``, via
      ``accounting.membership_visible_epsilon``; ``accountant`` is not used) and the event is
      ``SelfComposedDpEvent(GaussianDpEvent(z / 2), k)`` (``accounting.shuffled_event``).
      Accounting shuffling as sampling without replacement (the kit's former rule, common in code)
      is not proven and can understate epsilon; it is not offered.
    """
    sampling, steps, delta, accountant = config.sampling, config.steps, config.delta, config.accountant
    spec = shape.spec
    z = float(noise_multiplier) / spec.sensitivity_factor
    if sampling == "shuffle":
        event = _acc.shuffled_event(z, steps, spec.steps_per_epoch)
        k = _acc.shuffled_participations(steps, spec.steps_per_epoch)
        part = _acc.participation_distribution(steps, "shuffle", steps_per_epoch=spec.steps_per_epoch)
        eps = _acc.membership_visible_epsilon(1.0 / z, float(delta), part) if z > 0 else float("inf")
        return _acc.PrivacySpend(epsilon=eps, delta=float(delta), event=event, relation=spec.relation,
                                 unit="example", accountant="exact",
                                 notes=f"{spec.notes}; k = {k} participations, exact Gaussian curve")
    event = _acc.dpsgd_event(z, spec.sample_rate, steps, sampling=spec.sampling,
                             dataset_size=None if spec.sampling == "poisson" else n)
    # One composition of the accountant, evaluated at every delta truncated_spend asks for.
    eps_at = _acc.epsilon_curve(event, accountant=accountant) if z > 0 else None
    eps = eps_at(delta) if z > 0 else float("inf")
    total_delta, notes = float(delta), spec.notes
    if sampling == "poisson" and np.isfinite(eps):
        eps, total_delta, extra = _acc.truncated_spend(
            eps_at, float(delta),
            lambda e: _sampling.truncation_delta(n, spec.sample_rate, shape.width, steps, e))
        notes += f" Truncation at max_batch_size={shape.width}: {extra:.3g} of delta" + (
            " (taken out of delta)." if total_delta == float(delta) else " (added to delta).")
    return _acc.PrivacySpend(epsilon=eps, delta=total_delta, event=event, relation=spec.relation,
                             unit="example", accountant=accountant, notes=notes.strip())


def spend(config: DPSGDConfig, sizes: int, hparams: DPSGDHparams):
    """The ``PrivacySpend`` of :func:`fit` with these arguments (``sizes`` is the number of rows
    ``n``), stating epsilon at ``config.delta``; under Poisson sampling the padding's truncation
    charge is taken out of that delta. Poisson: add/remove-one, subsampled Gaussian at
    ``q = batch_size / n``, where the dataset size ``n`` is treated as public (as Opacus does; see
    ``privacy.sampling``, "Dataset size"); fixed-size: replace-one, sampling without replacement
    (multiplier halved, sensitivity ``2 C``); shuffled epochs: replace-one, ``k`` composed
    Gaussians without amplification (exact curve). Details: ``_spend``."""
    config.validate()
    hparams.validate()
    n = v.check_int("sizes", sizes, minimum=1)
    return _spend(config, n, v.host_float("noise_multiplier", hparams.noise_multiplier), _shape(config, n))


def calibrate(config: DPSGDConfig, sizes: int, target: tuple[float, float], *,
              hparams: DPSGDHparams | None = None) -> DPSGDHparams:
    """``hparams`` (default ``DPSGDHparams()``) with ``noise_multiplier`` set to the smallest (within
    ~1e-6 relative) for which ``spend(config, sizes, result).epsilon <= target[0]``.

    ``target = (epsilon, delta)``; ``delta`` must equal ``config.delta`` (the delta the spend states
    epsilon at). Poisson and fixed-size batches: ``accounting.calibrate_noise_multiplier`` with the
    sampling's accountant and relation (the multiplier times the relation's sensitivity factor);
    shuffled epochs: the exact composed-Gaussian curve (``accounting.calibrate_membership_visible``).

    Privacy: the returned multiplier makes :func:`fit` ``(epsilon, delta)``-DP under the sampling's
    relation: under Poisson sampling the mechanism is calibrated to ``delta`` less the padding's
    truncation charge at ``epsilon`` (``accounting.calibration_delta``; refused when the charge
    alone reaches ``delta``).
    """
    config.validate()
    hp = (DPSGDHparams() if hparams is None else hparams).validate()
    n = v.check_int("sizes", sizes, minimum=1)
    eps, delta = _acc.calibration_target(target, config.delta)
    shape = _shape(config, n)
    spec = shape.spec
    if config.sampling == "shuffle":
        part = _acc.participation_distribution(config.steps, "shuffle", steps_per_epoch=spec.steps_per_epoch)
        z = 1.0 / _acc.calibrate_membership_visible(float(eps), float(delta), part)
    else:
        if spec.sampling == "poisson":  # the padding's truncation charge comes out of the target delta
            delta = _acc.calibration_delta(eps, delta, _sampling.truncation_delta(
                n, spec.sample_rate, shape.width, config.steps, eps))
        z = _acc.calibrate_noise_multiplier(
            float(eps), float(delta), spec.sample_rate, config.steps, accountant=config.accountant,
            sampling=spec.sampling, dataset_size=None if spec.sampling == "poisson" else n)
    z = _acc.step_up_until(lambda zz: _spend(config, n, zz, shape).epsilon, z * spec.sensitivity_factor, eps)
    return dataclasses.replace(hp, noise_multiplier=float(z))
