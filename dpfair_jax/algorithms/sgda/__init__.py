"""Noisy DP stochastic gradient descent-ascent (paper 004, Algorithm 2) for smooth min-max problems.

Solves ``min_theta max_{w in W} F(theta, w) = (1/n) sum_i f(theta, w; z_i)`` with *simultaneous*
(Jacobi) updates on two timescales (separate step sizes ``lr_theta``, ``lr_w``)::

    B_t   ~ Poisson(q) sample (or a shuffled / fixed-size batch), m = q n its expected size
    g_t   = (1/m) [ sum_{i in B_t} clip(grad_theta f_priv(theta_t, w_t; z_i), C_theta) + N(0, s_theta^2 I) ]
            + (1/m) sum_{i in B_t} grad_theta f_pub(theta_t, w_t; z_i)
    h_t   = (1/m) [ sum_{i in B_t} clip(grad_w f_priv(theta_t, w_t; z_i), C_w) + N(0, s_w^2 I) ]
            + (1/m) sum_{i in B_t} grad_w f_pub(theta_t, w_t; z_i)
    theta_{t+1} = theta_t - lr_theta g_t
    w_{t+1}     = Proj_W(w_t + lr_w h_t)                    (Frobenius ball or box of radius R)

with ``s = noise_multiplier * C * sensitivity_factor``. The per-example loss is split into a
*private* part (clipped, noised: everything that depends on the protected data) and an optional
*public* part (exact gradients: terms that do not depend on it, e.g. the task loss when only the
sensitive attribute is protected). Algorithm 2 as printed has no public part and no clipping (it
assumes Lipschitz ``f`` with sensitivity ``2 L / m``); per-example clipping gives the same bound for
any ``f`` (corrected default; ``clip = inf`` recovers the printed algorithm on Lipschitz problems).
Returns the last iterate (the paper's recommendation in practice) or a uniformly random iterate
``theta_{t_hat}``, ``t_hat ~ U{1..T}`` (Theorem E.3).

Everything is one ``lax.scan``; step sizes, clip norms, noise multipliers and the radius are traced
(:class:`SGDAHparams`), so a grid of them is one ``vmap``. Shapes (steps, batch size) are static
(:class:`SGDAConfig`).

Privacy: each step releases two Gaussian sums on one sampled batch (descent and ascent); with
Poisson sampling at rate ``q`` this is the Poisson-subsampled Gaussian with effective multiplier
``(z_theta^-2 + z_w^-2)^-1/2`` (``accounting.dpsgd_event(..., relative_noise=(1, z_w/z_theta))``),
under add/remove-one neighbours when ``sensitivity_factor = 1`` (``q = batch_size / n`` with ``n``
treated as public). Fixed-size batches are accounted as sampling without replacement under
replace-one (``sensitivity_factor = 2``); shuffled batches under replace-one without amplification,
``epochs`` composed Gaussians (``accounting.shuffled_event``; sampling-without-replacement
accounting is not proven for shuffling).
Poisson batches are padded to ``max_batch_size`` (overflow charged with
``sampling.truncation_delta``; the number of truncated steps is reported).

A ``public_loss`` voids that accounting whenever its gradient depends on which records were
sampled (it always does: it is a sum over the batch): the unnoised term shows each record's
membership in each batch, so amplification by subsampling no longer applies. Account such a run as
membership-visible Gaussian releases
(:func:`dpfair_jax.privacy.accounting.membership_visible_epsilon` with
:func:`~dpfair_jax.privacy.accounting.participation_distribution`), as
:func:`dpfair_jax.algorithms.fermi.spend` does for the sensitive-attribute unit.

The kit's trio: ``fit(key, data, hparams, config) -> FitResult`` (the loss and the gradient path
in :class:`SGDAConfig`), :func:`spend`, :func:`calibrate`; :func:`dpsgda` is the lower-level
building block (public parts, shared batch keys) that DP-FERMI and PF-LD run on.

Layout: :mod:`.config` (settings, hyperparameters, checks), :mod:`.steps` (the run),
:mod:`.ledger` (spend, calibrate); this module holds :func:`fit`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpfair_jax import _validation as v
from dpfair_jax.algorithms._trio import FitResult
from dpfair_jax.algorithms.sgda.config import (
    ITERATES,
    PROJECTIONS,
    SAMPLINGS,
    PyTree,
    SGDAConfig,
    SGDAHparams,
    SGDAParams,
    SGDAResult,
    _check_run,
    _n_rows,
    check_hparams,
    default_max_batch_size,
    project,
)
from dpfair_jax.algorithms.sgda.steps import dpsgda
from dpfair_jax.algorithms.sgda.ledger import _spend, calibrate, spend


__all__ = [
    "SGDAConfig",
    "SGDAHparams",
    "SGDAParams",
    "SGDAResult",
    "fit",
    "spend",
    "calibrate",
    "dpsgda",
    "project",
    "check_hparams",
    "default_max_batch_size",
]


# ------------------------------------------------------------------------------------------------
# the kit's common interface: fit, spend, calibrate
# ------------------------------------------------------------------------------------------------
def _starts(config: SGDAConfig, theta0: PyTree, w0: PyTree) -> tuple[PyTree, PyTree]:
    """``theta0``/``w0`` as given, else float32 zeros of ``config.theta_shape``/``config.w_shape``."""
    out = []
    for name, given, shape in (("theta0", theta0, config.theta_shape), ("w0", w0, config.w_shape)):
        if given is None:
            if shape is None:
                raise ValueError(f"sgda.fit needs a start: pass {name}= or set SGDAConfig("
                                 f"{name[:-1]}_shape=...) for zeros of that shape.")
            given = jnp.zeros(tuple(shape), jnp.float32)
        out.append(given)
    return out[0], out[1]


def fit(key: jax.Array, data: PyTree, hparams: SGDAHparams, config: SGDAConfig, *, theta0: PyTree = None,
        w0: PyTree = None, batch_key: jax.Array | None = None) -> FitResult:
    """Noisy DP-SGDA (Algorithm 2) on ``config.private_loss``, a loss private as a whole, on the
    gradient path of ``config`` (``linear``, ``cnn_model``, ``model`` or generic ``vmap(grad)``;
    see :func:`dpsgda`). No public part (it would make batch membership visible, which
    :func:`spend` does not account; see the module docstring).

    ``data``: a pytree of arrays with a leading axis of ``n`` examples. ``theta0``/``w0``: the
    start (default: float32 zeros of ``config.theta_shape``/``config.w_shape``). ``batch_key``:
    draws the batches only (runs vmapped over hyperparameters may share them). Every input is
    checked once, on the host, before any compute.

    Returns :class:`~dpfair_jax.algorithms.FitResult`: ``params`` = :class:`SGDAParams` (the
    returned iterate ``theta`` and its partner ``w``; released, covered by ``spend``);
    ``diagnostics``: ``theta_last``, ``w_last`` (the last iterates; post-processing of the noisy
    updates, covered), ``truncated_steps`` (Poisson overflow count; depends on the sampling only),
    ``clipped_frac_theta``, ``clipped_frac_w`` (computed from the private data: do not publish);
    ``spend`` = :func:`spend` ``(config, n, hparams)`` (``None`` when the noise multipliers are
    traced); ``report``: the run's SamplingReport.

    Privacy: (epsilon, delta)-DP as :func:`spend` states for ``config``, whole records protected.
    """
    n = _n_rows(data)
    _check_run(key, n, hparams, config)
    if not callable(config.private_loss):
        raise ValueError("sgda.fit needs SGDAConfig(private_loss=f) with f(theta, w, example) -> scalar.")
    theta0, w0 = _starts(config, theta0, w0)
    res = dpsgda(key, data, theta0, w0, hparams, config, private_loss=config.private_loss, batch_key=batch_key,
                 validate=False, linear=config.linear, cnn_model=config.cnn_model, model=config.model)
    recorded = None
    if not v.is_traced(hparams.noise_theta, hparams.noise_w):
        recorded = _spend(config, n, v.host_float("noise_theta", hparams.noise_theta),
                          v.host_float("noise_w", hparams.noise_w))
    diag = {**res.diagnostics, "theta_last": res.theta_last, "w_last": res.w_last}
    return FitResult(SGDAParams(res.theta, res.w), diag, recorded, res.report)
