"""PF-LD's per-epoch run (:mod:`dpfair_jax.algorithms.pfld_epoch`) accounted for the
sensitive-attribute unit (paper 004's Definition 2.2, a change of one record's ``s_i``;
:mod:`dpfair_jax.privacy.attribute`): the run is the one ``pfld_epoch.spend`` accounts, only the
unit differs. ``pfld_epoch.attribute_rdp`` / ``pfld_epoch.attribute_spend`` call these.

Privacy: RDP and (epsilon, delta) bounds under substitution of one ``s_i`` only (relation
``"replace_one"``, unit ``"sensitive_attribute"``).
"""

from __future__ import annotations

import math
from typing import Any

from dpfair_jax import _validation as v
from dpfair_jax.algorithms import pfld_epoch as _pe
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import attribute as At

__all__ = ["attribute_rdp", "attribute_spend"]


def attribute_rdp(config: _pe.PFLDEpochConfig, n: int, noise_theta: float, noise_violation: float, *,
                  orders=None):
    """RDP at ``orders`` (default :data:`dpfair_jax.privacy.attribute.ORDERS`) of
    :func:`~dpfair_jax.algorithms.pfld_epoch.fit` under a change of one record's ``s_i`` (paper
    004's Definition 2.2; :mod:`dpfair_jax.privacy.attribute`).

    What reads ``s``: the primal gradient (through ``pen_i``: one clipped row replaced by another,
    shift ``2 / noise_theta`` in each of the ``K ~ Bin(T, m / n)`` steps the record is sampled) and
    each epoch's soft joint counts (the record's clipped contribution ``e_c (x) e_s (x) F`` moves
    between the cells of two groups: shift ``sqrt 2 / noise_violation``, ``epochs`` times). (a)
    membership visible, exact, and :func:`~dpfair_jax.algorithms.pfld_epoch.run_event` carried to the
    change by (b) the weak triangle inequality and (c) the direct replace-one curve
    (:mod:`dpfair_jax.privacy.replace_rdp`); the pointwise minimum.

    Privacy: an RDP bound for substitution of one ``s_i`` only (unit ``"sensitive_attribute"``)."""
    orders = At.ORDERS if orders is None else orders
    mu = At.shift(noise_theta, At.CLIPPED_SUM_FACTOR)
    extra = math.sqrt(config.epochs) * At.shift(noise_violation, At.MOVED_CELL_FACTOR)
    part = At.poisson_participation(config.steps(n), config.batch_size / n)
    event = _pe.run_event(config, n, float(noise_theta), float(noise_violation))
    return At.attribute_rdp(mu, part, extra_mu=extra, example_event=event, orders=orders)


def attribute_spend(config: _pe.PFLDEpochConfig, sizes: Any, hparams: _pe.PFLDEpochHparams) -> A.PrivacySpend:
    """The spend of :func:`~dpfair_jax.algorithms.pfld_epoch.fit` with these multipliers for the
    sensitive-attribute unit (a change of one ``s_i``; :func:`attribute_rdp` converted at
    ``config.delta``, with the Poisson padding's truncation probability in delta). The run is the
    same as for :func:`~dpfair_jax.algorithms.pfld_epoch.spend`; only the unit differs.

    Privacy: (epsilon, delta)-DP under substitution of one record's ``s_i``, relation
    ``"replace_one"``, unit ``"sensitive_attribute"``."""
    n = v.training_size(sizes)
    config.validate(n)
    _pe.check_hparams(hparams)
    zt = v.host_float("noise_theta", hparams.noise_theta)
    zv = v.host_float("noise_violation", hparams.noise_violation)
    notes = (f"PF-LD per-epoch dual ({config.fairness}) under a change of one s_i: min of the "
             "membership-visible curve of the parts that read s and the example-level curve under replace-one (weak triangle or direct)")
    if zt == 0 or zv == 0:
        return A.PrivacySpend(math.inf, config.delta, relation="replace_one", unit="sensitive_attribute",
                              notes=notes + "; zero noise: no guarantee")
    eps = At.attribute_selection_epsilon(attribute_rdp(config, n, zt, zv), None, config.delta)
    extra = _pe.truncation_charge(config, n, eps)
    return A.PrivacySpend(eps, min(config.delta + extra, 0.999999), relation="replace_one",
                          unit="sensitive_attribute", accountant="rdp",
                          notes=notes + f"; truncation delta {extra:.2e} included")
