"""Generic DP-SGD (Abadi et al. 2016) on the privacy primitives, as one ``lax.scan``.

Each step samples a batch (Poisson with a padded, masked batch; independent fixed-size batches; or
shuffled epochs), computes per-example gradients, clips each to L2 norm ``C`` over the whole
parameter pytree, sums, adds ``N(0, (sigma C)^2 I)``, divides by the public batch size (the
*expected* size ``q n`` under Poisson sampling) and hands the result to an optax optimizer.

Each step's clipped sum comes from the kit's one dispatcher, ``privacy.clipping.clipped_grad_sum``:
ghost norms where the model declares its layers (``models.linear``, ``logistic``,
``multinomial_logistic``: one dense layer; ``models.mlp``: a dense stack; ``models.cnn``: conv
layers and the dense head), ``vmap(grad)`` otherwise (any per-example loss over any pytree, a
user's nnx module or pure ``apply``, and mixed-precision CNNs built with ``compute_dtype``).
Norms, clipping, noise and the update are float32 in every mode (at least the precision of ``x``),
whatever a model computes internally. ``clip_norm``,
``noise_multiplier`` and ``learning_rate`` are traced, so ``jax.jit(jax.vmap(...))`` over a grid of
them is one program; shapes (batch size, steps, model) are static.

The API is the trio :func:`fit` / :func:`spend` / :func:`calibrate` with :class:`DPSGDConfig`
(static choices: model, sampling, ``batch_size``, ``steps``, ...) and :class:`DPSGDHparams`
(``learning_rate``, ``clip_norm``, ``noise_multiplier``). Lower level (use fit):
:func:`clipped_grad_sum`, :func:`resolve_per_example`, :func:`resolve_steps`, :func:`output_loss_for`,
:func:`check_labels`.

Layout: :mod:`.config` (settings, hyperparameters), :mod:`.program` (the compiled run),
:mod:`.ledger` (inputs, spend, calibrate); this module holds :func:`fit`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from dpfair_jax import models as _models
from dpfair_jax import _validation as v
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax._validation import is_traced
from dpfair_jax.algorithms._trio import FitResult
from dpfair_jax.algorithms.dpsgd.config import GLM_MODELS, PER_EXAMPLE_MODES, DPSGDConfig, DPSGDHparams
from dpfair_jax.algorithms.dpsgd.program import (
    _as_target,
    _Config,
    _resolve_path,
    _train_program,
    check_labels,
    clipped_grad_sum,
    output_loss_for,
    resolve_per_example,
)
from dpfair_jax.algorithms.dpsgd.ledger import _shape, _spend, _unpack_data, calibrate, resolve_steps, spend


__all__ = ["clipped_grad_sum", "resolve_per_example", "resolve_steps", "output_loss_for", "check_labels",
           "GLM_MODELS", "DPSGDConfig", "DPSGDHparams", "fit", "spend", "calibrate"]


@full_precision
def fit(key: jax.Array, data: Any, hparams: DPSGDHparams, config: DPSGDConfig, *,
        params: Any = None) -> FitResult:
    """Train with DP-SGD (Abadi et al. 2016, Alg. 1) as one ``lax.scan``; returns :class:`FitResult`.

    ``data``: a ``Dataset`` (its ``mask`` is honoured) or ``(x, y[, mask])`` with ``n`` rows; with
    the logistic loss the labels must lie in {0, 1}, with cross-entropy in ``[0, num_outputs)``
    (refused before any compute otherwise). ``params``: the initial parameters; by default
    ``config.model.init`` with the first half of ``split(key)`` (the second trains), or an nnx
    module's own (``models.from_nnx``: its ``nnx.Param`` state, as a plain dict, is trained and
    returned). ``hparams`` may be traced (one program for a grid under ``jit(vmap(...))``).

    Returns ``FitResult(params, diagnostics, spend, report)``: ``params`` is the release;
    ``diagnostics`` (``config.diagnostics``) holds per-step ``loss``, ``clip_fraction``,
    ``mean_grad_norm``, ``batch_size``, ``truncated`` (``[steps]`` arrays), computed from the
    private batches and **not** private (do not release them); ``report`` the
    :class:`~dpfair_jax.privacy.sampling.SamplingReport` of the steps run.

    Privacy: each step is a subsampled Gaussian mechanism with multiplier ``noise_multiplier`` on
    a clipped sum of add/remove-one sensitivity ``clip_norm`` (``privacy.aggregation.noised_mean``;
    ``2 clip_norm`` under replace-one for fixed-size and shuffled batches); the recorded ``spend``
    is :func:`spend` ``(config, n, hparams)`` (``None`` when ``noise_multiplier`` is traced).

    Keys and cost: ``key`` must be a threefry2x32 key (``jax.random.key(seed)``); ``rbg`` /
    ``unsafe_rbg`` keys are refused, also under ``jit``/``vmap`` (under ``vmap`` they draw a whole
    batch from the first key; on CPU they also draw slower than threefry in the kit's per-leaf
    layout). On CPU the per-step Gaussian draw (one normal per parameter) costs half to all of the
    MLP's non-private step and is what separates the DP step from it (docs/performance.md, "The
    noise generator"). Neither generator is cryptographically secure: whoever knows the key can
    regenerate the noise. The host-side accounting composes the RDP (or PLD) accountant once per
    configuration and reuses it (``accounting.epsilon_curve``).
    """
    config.validate()
    hparams.validate()
    v.check_threefry_key(key)
    x, y, data_mask, num_classes = _unpack_data(data)
    v.check_shape("x", x, ndim=2)
    n = v.check_same_length(x=x, y=y, mask=data_mask)
    v.check_finite("x", x)
    v.check_finite("y", y)
    run = _shape(config, n)
    model = config.model
    if params is None and isinstance(model, _models.Model):
        k_init, key = jax.random.split(key)
        shape = model.input_shape or (int(np.shape(x)[1]),)
        params = model.init(k_init, shape if len(shape) > 1 else shape[0])
    elif params is None and not isinstance(model, nnx.Module):
        raise ValueError("params is required for this config.model (only a models.Model or an nnx "
                         "module provides its own).")
    target, params = _as_target(model, params, x, config.loss)
    v.check_finite("params", params)
    mode, target, out_loss = _resolve_path(target, config.per_example, num_classes, config.loss)
    check_labels(y, data_mask, out_loss, target)
    cfg = _Config(mode, target, out_loss, n, config.batch_size, run.width, config.steps,
                  config.sampling, config.optimizer, bool(config.diagnostics))
    out_params, diag, report = _train_program(cfg, key, params, x, y, data_mask, hparams.clip_norm,
                                              hparams.noise_multiplier, hparams.learning_rate)
    recorded = None if is_traced(hparams.noise_multiplier) else _spend(config, n, hparams.noise_multiplier, run)
    return FitResult(out_params, diag, recorded, report)
