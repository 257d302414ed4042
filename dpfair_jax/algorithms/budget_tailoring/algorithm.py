"""Budget tailoring (paper 000): the whole method, DPSE (stage 1 then stage 2) or a baseline.

Privacy: ``rho``-zCDP under ``Config.relation`` (see :func:`fit`); :mod:`.ledger` states the spend,
which :func:`fit` records in its result.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from dpfair_jax._validation import is_traced
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy.sampling import SamplingReport
from dpfair_jax.privacy.precision import full_precision

from .core import (Config, Diagnostics, Hyperparams, _budget, _check_inputs, _denominators, _prepare,
                   _run_draws, _spent, _split_draws)
from .._trio import FitResult
from .ledger import _spend_of
from .stage1 import _stage1
from .stage2 import _stage2

__all__ = ["fit", "fit_arrays"]


@full_precision
def fit_arrays(key: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
               hparams: Hyperparams, config: Config, weights: jax.Array | None = None
               ) -> tuple[jax.Array, Diagnostics]:
    """Lower level: use :func:`fit`. :func:`fit`'s run on raw arrays without host validation (for
    use inside jit/vmap programs): ``(theta, Diagnostics)``; records no spend (:func:`spend`
    states it)."""
    return _fit_arrays(key, x, y, s, num_groups, hparams, config, weights)


def _fit_arrays(key, x, y, s, num_groups: int, hparams: Hyperparams, config: Config, weights=None):
    xs, yy, onehot, n_k, xnorm = _prepare(x, y, s, num_groups, weights, config.fit_intercept)
    return _fit_soa(key, xs, yy, onehot, n_k, xnorm, hparams, config)


def _fit_soa(key, xs, y, onehot, n_k, xnorm, hp: Hyperparams, cfg: Config):
    z1, zc, z2 = _split_draws(_run_draws(key, cfg.steps, xs.shape[0], onehot.shape[1], xs.dtype),
                              cfg.steps, xs.shape[0], onehot.shape[1])
    k_groups = onehot.shape[1]
    equal = jnp.full((k_groups,), 1.0 / math.sqrt(k_groups), xs.dtype)
    rho_c, tau, mu = _budget(hp, cfg, xs.dtype)
    den = _denominators(zc, n_k, rho_c, cfg)
    released = [("noisy_counts", 1)] if den is not n_k else []
    if cfg.method == "dpse":
        se, fallback, beta1 = _stage1(z1, xs, y, onehot, den, xnorm, tau, hp, cfg)
        released.append(("stage1", 1))
    else:
        se, fallback, beta1 = equal, jnp.array(False), jnp.zeros((xs.shape[0],), xs.dtype)
    theta, std, clipped = _stage2(z2, xs, y, onehot, den, xnorm, se, mu, hp, cfg)
    rho1, rho2, rhoc = _spent(cfg, rho_c, tau, mu, se)
    diag = Diagnostics(se=se, fallback=fallback, beta_stage1=beta1, noise_std=std,
                       rho_stage1=rho1, rho_stage2=rho2, fraction_clipped=clipped,
                       rho_counts=rhoc, counts=den,
                       report=SamplingReport(steps=int(z2[0].shape[0]), releases=tuple(released)))
    return theta, diag


@full_precision
def fit(key: jax.Array, data: Dataset, hparams: Hyperparams, config: Config) -> FitResult:
    """DPSE (``config.method="dpse"``) or a baseline on ``data``: a :class:`FitResult`.

    DPSE: Algorithm 1 with ``tau = tau_fraction * rho`` then Algorithm 2/3 with ``mu = rho - tau``
    (under add/remove: noisy counts with ``rho_c = count_fraction * rho`` first, and ``tau``,
    ``mu`` split ``rho - rho_c`` the same way). ``params`` is theta, ``P = d (+1 with
    fit_intercept)`` entries (intercept last). Pure in ``key`` and the traced fields of
    ``hparams``: ``jax.jit(jax.vmap(...))`` over keys and budgets works (``spend`` is then None).

    ``diagnostics`` (a dict): released, hence covered by ``spend``: ``se`` (the stage-1 allocation,
    post-processing of the stage-1 release), ``fallback``, ``beta_stage1`` (the private pooled
    OLS of stage 1), ``counts`` (the noisy group counts under add/remove; the exact, public sizes
    under replace-one within a group); public functions of the hyperparameters and the released
    allocation: ``noise_std``, ``rho_stage1``, ``rho_stage2``, ``rho_counts`` (the per-release
    charges, :func:`budget_ledger` itemises them); computed from the private data without noise,
    NOT to be published: ``fraction_clipped``. ``report``: the stage-2 steps run and the stage-1
    and noisy-count releases.

    Privacy: ``rho``-zCDP (Lemmas 4.1, 4.2, B.3 and composition) under ``config.relation``:
    ``"replace_one_within_group"`` with public group membership and sizes (a record moving to
    another group is not covered), or ``"add_remove"`` with the sizes released as noisy counts
    inside the budget; ``method="nonprivate"`` is not private. ``spend`` is :func:`spend`.
    """
    _check_inputs(key, data, hparams, config)
    theta, diag = _fit_arrays(key, data.x, data.y, data.s, data.num_groups, hparams, config, data.mask)
    record = None if is_traced(hparams.rho) else _spend_of(config, hparams.rho, config.delta)  # = spend(...)
    diagnostics = diag._asdict()
    report = diagnostics.pop("report")
    return FitResult(theta, diagnostics, record, report)
