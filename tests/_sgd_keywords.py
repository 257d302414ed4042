"""Keyword-style calls of ``dpsgd.fit``/``spend`` and ``mitigation.fit``/``spend`` for the SGD tests:
each helper builds the config and hparams from the keywords and calls the trio (nothing else), so a
test can state a run in one line. ``epochs=`` sets ``config.steps`` through ``dpsgd.resolve_steps``."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpfair_jax import models
from dpfair_jax.algorithms import dpsgd, mitigation
from dpfair_jax.data.dataset import Dataset


def _rows(data: Any) -> int:
    return int(data.n if isinstance(data, Dataset) else np.shape(data[0])[0])


def dpsgd_config(*, n: int, batch_size: int, steps: int | None = None, epochs: int | None = None,
                 sampling: str = "poisson", model: Any = None, **fields: Any) -> dpsgd.DPSGDConfig:
    steps = dpsgd.resolve_steps(n, batch_size, steps, epochs, sampling)
    return dpsgd.DPSGDConfig(model=models.logistic() if model is None else model, sampling=sampling,
                             batch_size=batch_size, steps=steps, **fields)


def dpsgd_fit_kw(key, model, params, data, *, clip_norm, noise_multiplier, learning_rate=0.1,
                batch_size, steps=None, epochs=None, sampling="poisson", with_report=False, **fields):
    """``(params, diagnostics)`` of ``dpsgd.fit`` (``with_report``: the whole ``FitResult``)."""
    cfg = dpsgd_config(n=_rows(data), batch_size=batch_size, steps=steps, epochs=epochs, sampling=sampling,
                       model=model, **fields)
    hp = dpsgd.DPSGDHparams(learning_rate=0.1 if learning_rate is None else learning_rate,
                            clip_norm=clip_norm, noise_multiplier=noise_multiplier)
    res = dpsgd.fit(key, data, hp, cfg, params=params)
    return res if with_report else (res.params, res.diagnostics)


def dpsgd_spend_kw(noise_multiplier, *, n, batch_size, delta, steps=None, epochs=None, sampling="poisson",
                  accountant="rdp", max_batch_size=None):
    """``dpsgd.spend`` of the run these keywords describe."""
    cfg = dpsgd_config(n=n, batch_size=batch_size, steps=steps, epochs=epochs, sampling=sampling, delta=delta,
                       accountant=accountant, max_batch_size=max_batch_size)
    return dpsgd.spend(cfg, n, dpsgd.DPSGDHparams(noise_multiplier=noise_multiplier))


def mitigation_config(*, n: int, batch_size: int, steps: int | None = None, epochs: int | None = None,
                      model: Any = None, **fields: Any) -> mitigation.MitigationConfig:
    steps = dpsgd.resolve_steps(n, batch_size, steps, epochs, "poisson")
    return mitigation.MitigationConfig(model=models.logistic() if model is None else model,
                                       batch_size=batch_size, steps=steps, **fields)


def mitigation_fit_kw(key, model, params, data, *, gamma1, gamma2, clip_norm, noise_multiplier,
                     stats_noise_multiplier, learning_rate=0.1, batch_size, steps=None, epochs=None,
                     with_report=False, **fields):
    """``(params, diagnostics)`` of ``mitigation.fit`` (``with_report``: the whole ``FitResult``)."""
    n = data.n if isinstance(data, Dataset) else int(np.shape(data[0])[0])
    cfg = mitigation_config(n=n, batch_size=batch_size, steps=steps, epochs=epochs, model=model, **fields)
    hp = mitigation.MitigationHparams(gamma1=gamma1, gamma2=gamma2,
                                      learning_rate=0.1 if learning_rate is None else learning_rate,
                                      clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                                      stats_noise_multiplier=stats_noise_multiplier)
    res = mitigation.fit(key, data, hp, cfg, params=params)
    return res if with_report else (res.params, res.diagnostics)


def mitigation_spend_kw(noise_multiplier, stats_noise_multiplier, *, n, batch_size, delta, steps=None,
                       epochs=None, accountant="rdp", max_batch_size=None, gamma1=None, gamma2=None,
                       stats_every=0):
    """``mitigation.spend`` of the run these keywords describe (gammas left out: the statistics
    are charged, as for any penalized run)."""
    cfg = mitigation_config(n=n, batch_size=batch_size, steps=steps, epochs=epochs, delta=delta,
                            accountant=accountant, max_batch_size=max_batch_size, stats_every=stats_every)
    charged = gamma1 is None or gamma2 is None
    hp = mitigation.MitigationHparams(gamma1=1.0 if charged else gamma1, gamma2=1.0 if charged else gamma2,
                                      noise_multiplier=noise_multiplier, stats_noise_multiplier=stats_noise_multiplier)
    return mitigation.spend(cfg, n, hp)


__all__ = ["dpsgd_config", "dpsgd_fit_kw", "dpsgd_spend_kw", "mitigation_config", "mitigation_fit_kw",
           "mitigation_spend_kw"]
