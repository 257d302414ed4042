"""DP-SGD's compiled program: the model or loss each step differentiates, the clipped gradient sum
(``privacy.clipping.clipped_grad_sum``) and the ``lax.scan`` of noisy steps (:func:`_train_program`).

Privacy: clip, sum, noise (``privacy.aggregation``), then normalize by the public batch size."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from dpfair_jax import models as _models
from dpfair_jax import _validation as v
from dpfair_jax.privacy import aggregation as _agg
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.algorithms.dpsgd.config import PER_EXAMPLE_MODES


class _Config(NamedTuple):
    """Static (hashable) configuration of one compiled training program."""

    mode: str  # "glm", "mlp", "cnn" or "vmap" (clipping.per_example_path)
    target: Any  # what the dispatcher differentiates: a models.Model or a per-example loss
    loss: Any  # output loss (outputs, y) -> [B] for a model; None for a loss function
    n: int
    batch_size: int
    max_batch_size: int
    steps: int
    sampling: str
    optimizer: Any
    diagnostics: bool


# ------------------------------------------------------------------------------------------------
# Model resolution
# ------------------------------------------------------------------------------------------------
def output_loss_for(model: _models.Model, num_classes: int | None, loss: Any = None) -> Callable:
    """Per-example loss ``(outputs, y) -> [B]`` for a ``models.Model`` (``models.output_loss``).
    Lower level: use fit (records no spend).

    ``loss`` may be a callable, ``"logistic"``, ``"cross_entropy"`` or ``"squared"``; by default it
    follows the model (logistic -> logistic, multinomial -> cross-entropy, linear -> squared) and,
    for an MLP, the data (``num_classes == 0``: squared; one output: logistic; else cross-entropy).
    """
    return _models.output_loss(model, num_classes, loss)


def resolve_per_example(model_or_loss: Any, params: Any = None, per_example: str = "auto"
                        ) -> tuple[str, str | None]:
    """How per-example norms will be computed: ``("glm" | "mlp" | "cnn" | "vmap", activation)``.
    Lower level: use fit (records no spend).

    What the model declares about its layers decides (``models.Model.layers``, read by
    ``privacy.clipping.per_example_path``): ghost norms for the GLMs, the MLP and the float32 CNN
    of :mod:`dpfair_jax.models` (a CNN built with ``compute_dtype=jnp.bfloat16`` declares none),
    ``vmap(grad)`` for anything else. ``"ghost"`` raises if ghost norms are not available;
    ``"vmap"`` forces the generic path. ``activation`` is the MLP's (else ``None``). ``params`` is
    not needed (kept for callers that pass it).
    """
    v.check_choice("per_example", per_example, PER_EXAMPLE_MODES)
    mode = _path(model_or_loss, per_example)
    act = model_or_loss.hparams.get("activation") if mode == "mlp" else None
    return mode, act


def _path(model_or_loss: Any, per_example: str) -> str:
    try:
        return _clip.per_example_path(model_or_loss, per_example)
    except ValueError as err:
        raise ValueError(f"per_example='ghost': {err}") from err


def _as_target(model_or_loss: Any, params: Any, x: Any, loss: Any) -> tuple[Any, Any]:
    """``(models.Model or per-example loss, params)``: an nnx module or a pure ``apply`` (given
    with ``loss=``) become a ``Model`` (``models.from_nnx`` / ``models.from_apply``)."""
    if isinstance(model_or_loss, nnx.Module):
        model, own = _models.from_nnx(model_or_loss, np.shape(x)[1:])
        return model, own if params is None else params
    if params is None:
        raise ValueError("params is required (the initial parameters), except for an nnx module.")
    if isinstance(model_or_loss, _models.Model):
        return model_or_loss, params
    if callable(model_or_loss):
        if loss is not None:  # a pure apply(params, x) with its output loss
            return _models.from_apply(model_or_loss, params, np.shape(x)[1:]), params
        return model_or_loss, params
    raise ValueError("model_or_loss must be a models.Model, a flax nnx module, a pure apply(params, x) "
                     "(with loss=) or a per-example loss function loss(params, x_i, y_i).")


def _resolve_path(model_or_loss: Any, per_example: str, num_classes: int | None, loss: Any
                  ) -> tuple[str, Any, Any]:
    """``(mode, target, output loss or None)`` for :func:`clipping.clipped_grad_sum`."""
    mode = _path(model_or_loss, per_example)
    if isinstance(model_or_loss, _models.Model):
        return mode, model_or_loss, output_loss_for(model_or_loss, num_classes, loss)
    if loss is not None:
        raise ValueError("loss= is only used with a model; model_or_loss is already a loss.")
    return mode, model_or_loss, None


def check_labels(y: Any, mask: Any, out_loss: Any, model: Any) -> None:
    """Refuse, on the host, labels the output loss cannot take: ``models.binary_logistic_loss``
    needs ``y`` in {0, 1}, ``models.softmax_cross_entropy`` integers in ``[0, model.num_outputs)``
    (rows with ``mask == 0`` are ignored; other losses and traced labels are not checked).
    Lower level: use fit (records no spend)."""
    if out_loss is _models.binary_logistic_loss:
        k, what = 2, "the logistic loss needs labels y in {0, 1}"
    elif out_loss is _models.softmax_cross_entropy:
        k, what = int(model.num_outputs), f"cross-entropy needs integer labels y in [0, {model.num_outputs})"
    else:
        return
    if isinstance(y, jax.core.Tracer) or (mask is not None and isinstance(mask, jax.core.Tracer)):
        return
    arr = np.asarray(y)
    if mask is not None:
        arr = arr[np.asarray(mask) != 0]
    ok = arr.dtype.kind in "iub" or (arr.dtype.kind == "f" and np.all(np.mod(arr, 1) == 0))
    if arr.size and (not ok or arr.min() < 0 or arr.max() >= k):
        found = np.unique(arr)[:6]
        hint = " (map labels -1/+1 with (y + 1) // 2)" if k == 2 and np.any(arr < 0) else ""
        raise ValueError(f"y: {what}; got values {found.tolist()}{'...' if np.unique(arr).size > 6 else ''}{hint}.")


def _clipped_sum(cfg: _Config, params, xb, yb, mask, clip_norm, x_sq=None):
    """Returns (clipped gradient sum, norms [B], per-example losses [B]) from the dispatcher."""
    res = _clip.clipped_grad_sum(cfg.target, params, (xb, yb), clip_norm=clip_norm, weights=mask,
                                 path="vmap" if cfg.mode == "vmap" else "ghost", loss=cfg.loss,
                                 x_sq_norms=x_sq)
    return res.sums, res.norms, res.losses


@full_precision
def clipped_grad_sum(model_or_loss: Any, params: Any, xb: jax.Array, yb: jax.Array, *,
                     clip_norm: Any, mask: jax.Array | None = None, per_example: str = "auto",
                     num_classes: int | None = None, loss: Any = None
                     ) -> tuple[Any, jax.Array, jax.Array]:
    """One batch's sum of per-example gradients clipped to ``clip_norm``: ``(sums, norms, losses)``.

    Lower level: use fit. The step :func:`fit` takes (``privacy.clipping.clipped_grad_sum``, with
    the same path selection and the loss :func:`output_loss_for` picks), for custom loops; it
    records no spend. ``mask [B]`` weights
    the examples (padding rows 0). ``norms`` and ``losses`` are per example (not private). Add
    Gaussian noise and normalise by the expected batch size (``privacy.aggregation.noised_mean``)
    to get a DP-SGD gradient. jit/vmap-able.

    Privacy: the sum has L2 sensitivity ``clip_norm`` under add/remove-one (``2 clip_norm``
    replace-one); it is not private until noise is added.
    """
    v.check_clip_norm(clip_norm)
    mode, target, out_loss = _resolve_path(model_or_loss, per_example, num_classes, loss)
    b = int(np.shape(xb)[0])
    cfg = _Config(mode, target, out_loss, b, b, b, 1, "fixed_size", optax.sgd, False)
    dt = jnp.promote_types(jnp.result_type(xb), jnp.float32)
    w = jnp.ones((b,), dt) if mask is None else jnp.asarray(mask, dt)
    return _clipped_sum(cfg, params, xb, yb, w, jnp.asarray(clip_norm, dt))


def _make_optimizer(cfg: _Config, learning_rate):
    if isinstance(cfg.optimizer, optax.GradientTransformation):
        return cfg.optimizer
    return cfg.optimizer(learning_rate)


@functools.partial(jax.jit, static_argnums=(0,))
def _train_program(cfg: _Config, key, params, x, y, data_mask, clip_norm, noise_multiplier, learning_rate):
    # Clipping, noise and the update run in float32 (or x's precision if higher), also when the
    # model computes in bfloat16 (models.cnn(compute_dtype=...)) or x is given in a low precision.
    dt = jnp.promote_types(jnp.result_type(x), jnp.float32)
    x = x.astype(dt) if jnp.result_type(x) != dt else x
    clip_norm = jnp.asarray(clip_norm, dt)
    noise_multiplier = jnp.asarray(noise_multiplier, dt)
    denominator = jnp.asarray(cfg.batch_size, dt)
    q = cfg.batch_size / cfg.n
    opt = _make_optimizer(cfg, learning_rate)
    opt_state = opt.init(params)
    # GLM ghost norms need ||x_i||^2, which training does not change: compute them once.
    x_sq_all = jnp.sum(jnp.square(x), axis=1) if cfg.mode == "glm" else None
    seen: dict = {}  # what the traced step samples, for the run's SamplingReport

    def step(carry, inputs):
        params, opt_state = carry
        k, idx_given = inputs
        k_sample, k_noise = jax.random.split(k)
        if cfg.sampling == "poisson":
            sample = _sampling.poisson_sample(k_sample, cfg.n, q, cfg.max_batch_size)
            idx, mask, truncated = sample.indices, sample.mask.astype(dt), sample.truncated
            seen.update(sampler="poisson", sample_rate=q)
        elif cfg.sampling == "fixed_size":
            idx = _sampling.fixed_size_batch(k_sample, cfg.n, cfg.batch_size)
            mask, truncated = jnp.ones((cfg.batch_size,), dt), jnp.array(False)
            seen.update(sampler="fixed_size", sample_rate=q)
        else:
            idx, mask, truncated = idx_given, jnp.ones((cfg.batch_size,), dt), jnp.array(False)
        seen.update(batch_width=int(idx.shape[0]), dataset_size=cfg.n)
        if data_mask is not None:
            mask = mask * data_mask[idx].astype(dt)
        xb, yb = x[idx], y[idx]
        x_sq = None if x_sq_all is None else x_sq_all[idx]
        sums, norms, losses = _clipped_sum(cfg, params, xb, yb, mask, clip_norm, x_sq)
        grad = _agg.noised_mean(k_noise, sums, sensitivity=clip_norm, noise_multiplier=noise_multiplier,
                                denominator=denominator)
        updates, opt_state = opt.update(grad, opt_state, params)
        params = optax.apply_updates(params, updates)
        if cfg.diagnostics:
            bsz = jnp.sum(mask)
            safe = jnp.maximum(bsz, 1.0)
            diag = {
                "loss": jnp.sum(losses * mask) / safe,
                "clip_fraction": jnp.sum((norms > clip_norm) * mask) / safe,
                "mean_grad_norm": jnp.sum(norms * mask) / safe,
                "batch_size": bsz,
                "truncated": truncated,
            }
        else:
            diag = {}
        return (params, opt_state), diag

    keys = jax.random.split(key, cfg.steps + 1)
    if cfg.sampling == "shuffle":
        spe = cfg.n // cfg.batch_size
        epochs = cfg.steps // spe
        perms = jax.vmap(lambda k: _sampling.shuffled_batches(k, cfg.n, cfg.batch_size))(
            jax.random.split(keys[-1], epochs)
        )
        idx_all = perms.reshape(cfg.steps, cfg.batch_size)
        seen.update(sampler="shuffle", sample_rate=q, epochs=int(perms.shape[0]))
    else:
        idx_all = jnp.zeros((cfg.steps, 1), jnp.int32)
    (params, _), diag = jax.lax.scan(step, (params, opt_state), (keys[:-1], idx_all))
    report = _sampling.SamplingReport(steps=int(keys[:-1].shape[0]), **seen)  # the scan's length
    return params, diag, report
