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

Public names: :func:`train`, :func:`privacy`, :func:`resolve_per_example`, :func:`resolve_steps`,
:func:`clipped_grad_sum`, :func:`output_loss_for`; the trio :func:`fit` / :func:`spend` /
:func:`calibrate` with :class:`DPSGDConfig` and :class:`DPSGDHparams`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.privacy.precision import full_precision

__all__ = ["train", "privacy", "clipped_grad_sum", "resolve_per_example", "resolve_steps",
           "output_loss_for", "check_labels", "GLM_MODELS", "DPSGDConfig", "DPSGDHparams", "DPSGDResult",
           "fit", "spend", "calibrate"]

GLM_MODELS = ("linear", "logistic", "multinomial_logistic")
PER_EXAMPLE_MODES = ("auto", "vmap", "ghost")


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

    ``loss`` may be a callable, ``"logistic"``, ``"cross_entropy"`` or ``"squared"``; by default it
    follows the model (logistic -> logistic, multinomial -> cross-entropy, linear -> squared) and,
    for an MLP, the data (``num_classes == 0``: squared; one output: logistic; else cross-entropy).
    """
    return _models.output_loss(model, num_classes, loss)


def resolve_per_example(model_or_loss: Any, params: Any = None, per_example: str = "auto"
                        ) -> tuple[str, str | None]:
    """How per-example norms will be computed: ``("glm" | "mlp" | "cnn" | "vmap", activation)``.

    What the model declares about its layers decides (``models.Model.layers``, read by
    ``privacy.clipping.per_example_path``): ghost norms for the GLMs, the MLP and the float32 CNN
    of :mod:`dpfair_jax.models` (a CNN built with ``compute_dtype=jnp.bfloat16`` declares none),
    ``vmap(grad)`` for anything else. ``"ghost"`` raises if ghost norms are not available;
    ``"vmap"`` forces the generic path. ``activation`` is the MLP's (else ``None``). ``params`` is
    not needed (kept for callers that pass it).
    """
    v.check_choice("per_example", per_example, PER_EXAMPLE_MODES)
    try:
        mode = _clip.per_example_path(model_or_loss, per_example)
    except ValueError as err:
        raise ValueError(f"per_example='ghost': {err}") from err
    act = model_or_loss.hparams.get("activation") if mode == "mlp" else None
    return mode, act


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
    mode, _ = resolve_per_example(model_or_loss, None, per_example)
    if isinstance(model_or_loss, _models.Model):
        return mode, model_or_loss, output_loss_for(model_or_loss, num_classes, loss)
    if loss is not None:
        raise ValueError("loss= is only used with a model; model_or_loss is already a loss.")
    return mode, model_or_loss, None


def check_labels(y: Any, mask: Any, out_loss: Any, model: Any) -> None:
    """Refuse, on the host, labels the output loss cannot take: ``models.binary_logistic_loss``
    needs ``y`` in {0, 1}, ``models.softmax_cross_entropy`` integers in ``[0, model.num_outputs)``
    (rows with ``mask == 0`` are ignored; other losses and traced labels are not checked)."""
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

    The step :func:`train` takes (``privacy.clipping.clipped_grad_sum``, with the same path
    selection and the loss :func:`output_loss_for` picks), for custom loops. ``mask [B]`` weights
    the examples (padding rows 0). ``norms`` and ``losses`` are per example (not private). Add
    Gaussian noise of std ``noise_multiplier * clip_norm`` (``privacy.mechanisms``) and normalise
    by the expected batch size to get a DP-SGD gradient. jit/vmap-able.

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
    std = noise_multiplier * clip_norm
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
        noisy = _mech.gaussian_mechanism(k_noise, sums, std)
        grad = jax.tree_util.tree_map(lambda g: g / denominator, noisy)
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


# ------------------------------------------------------------------------------------------------
# Public API
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
    Raises ``ValueError`` naming the field otherwise."""
    spe = _sampling.steps_per_epoch(n, batch_size)
    if (steps is None) == (epochs is None):
        raise ValueError("pass exactly one of steps= or epochs=.")
    if epochs is not None:
        return spe * v.check_int("epochs", epochs, minimum=1)
    steps = v.check_int("steps", steps, minimum=1)
    if sampling == "shuffle" and steps % spe:
        raise ValueError(
            f"with sampling='shuffle', steps must be a multiple of the {spe} steps per epoch "
            f"(n // batch_size); got steps={steps}. Pass epochs= instead."
        )
    return steps


@full_precision
def _train(
    key: jax.Array,
    model_or_loss: Any,
    params: Any,
    data: Any,
    *,
    clip_norm: Any,
    noise_multiplier: Any,
    learning_rate: Any = None,
    batch_size: int,
    steps: int | None = None,
    epochs: int | None = None,
    sampling: str = "poisson",
    optimizer: Any = optax.sgd,
    loss: Any = None,
    per_example: str = "auto",
    max_batch_size: int | None = None,
    diagnostics: bool = True,
) -> tuple[Any, dict[str, jax.Array]]:
    """Train with DP-SGD; returns ``(params, diagnostics)``.

    Args:
      key: threefry PRNG key (sampling and noise).
      model_or_loss: a ``models.Model`` (loss from :func:`output_loss_for`, or ``loss=``); a
        flax ``nnx.Module`` of your own (``models.from_nnx``: its ``nnx.Param`` state, as a plain
        dict, is trained and returned); a pure ``apply(params, x [B, ...])`` together with
        ``loss=`` (``models.from_apply``); or a per-example loss ``loss(params, x_i, y_i) ->
        scalar`` over any parameter pytree. The per-example path follows the model's layer
        declaration (ghost norms for the kit's GLMs, MLP and float32 CNN; ``vmap(grad)`` for
        everything else, user modules included).
      params: initial parameters (``None`` for an nnx module: the module's own).
      data: a ``Dataset`` (its ``mask`` is honoured) or ``(x, y[, mask])``. With the logistic
        loss the labels must lie in {0, 1}, with cross-entropy in ``[0, num_outputs)`` (refused
        before any compute otherwise).
      clip_norm, noise_multiplier, learning_rate: traced scalars (vmappable over a grid).
      batch_size: the (expected, for Poisson) batch size; ``q = batch_size / n``.
      steps / epochs: exactly one; an epoch is ``n // batch_size`` steps.
      sampling: ``"poisson"`` (padded to ``max_batch_size``, default from
        ``sampling.max_batch_size_for`` with overflow probability 1e-9 over the run),
        ``"fixed_size"`` (independent uniform batches) or ``"shuffle"`` (shuffled epochs).
      optimizer: an optax factory called as ``optimizer(learning_rate)``, or a ready
        ``GradientTransformation`` (then ``learning_rate`` must be None).
      per_example: ``"auto"`` (ghost norms for GLMs, dense MLPs and float32 CNNs; see
        :func:`resolve_per_example`), ``"ghost"`` (raise if unavailable) or ``"vmap"``.
      diagnostics: per-step ``loss``, ``clip_fraction``, ``mean_grad_norm``, ``batch_size``,
        ``truncated`` (``[steps]`` arrays). They are computed from the private batch and are
        **not** differentially private; do not release them.

    Privacy: each step is a subsampled Gaussian mechanism with noise multiplier
    ``noise_multiplier`` relative to the clipped sum's add/remove-one sensitivity ``clip_norm``;
    the noisy mean is post-processing. :func:`privacy` accounts a run with the matching sampling
    (Poisson: add/remove-one, ``n`` public; fixed-size: without replacement, replace-one,
    sensitivity ``2 clip_norm``; shuffle: replace-one without amplification, ``epochs`` composed
    Gaussians).
    """
    v.check_threefry_key(key)
    x, y, data_mask, num_classes = _unpack_data(data)
    v.check_shape("x", x, ndim=2)
    n = v.check_same_length(x=x, y=y, mask=data_mask)
    v.check_finite("x", x)
    v.check_finite("y", y)
    target, params = _as_target(model_or_loss, params, x, loss)
    v.check_finite("params", params)
    v.check_clip_norm(clip_norm)
    v.check_noise_multiplier(noise_multiplier)
    v.check_choice("sampling", sampling, _sampling.SAMPLING_SCHEMES)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= the number of rows n ({n}).")
    steps = resolve_steps(n, batch_size, steps, epochs, sampling)
    if isinstance(optimizer, optax.GradientTransformation):
        if learning_rate is not None:
            raise ValueError("learning_rate must be None when optimizer is a GradientTransformation "
                             "(it already holds its learning rate); or pass a factory like optax.sgd.")
    else:
        if not callable(optimizer):
            raise ValueError("optimizer must be an optax factory (e.g. optax.sgd) or a GradientTransformation.")
        if learning_rate is None:
            raise ValueError("learning_rate is required with an optimizer factory.")
        v.check_positive("learning_rate", learning_rate)
    if sampling == "poisson":
        if max_batch_size is None:
            max_batch_size = _sampling.max_batch_size_for(n, batch_size / n, steps)
        max_batch_size = v.check_int("max_batch_size", max_batch_size, minimum=batch_size)
        max_batch_size = min(max_batch_size, n)
    else:
        max_batch_size = batch_size
    mode, target, out_loss = _resolve_path(target, per_example, num_classes, loss)
    check_labels(y, data_mask, out_loss, target)
    cfg = _Config(mode, target, out_loss, n, batch_size, max_batch_size, steps, sampling,
                  optimizer, bool(diagnostics))
    return _train_program(cfg, key, params, x, y, data_mask, clip_norm, noise_multiplier, learning_rate)


@functools.wraps(_train)
def train(*args: Any, **kwargs: Any) -> tuple[Any, dict]:
    return _train(*args, **kwargs)[:2]  # (params, diagnostics); fit also keeps the report


train.__name__ = train.__qualname__ = "train"


def privacy(
    noise_multiplier: float,
    *,
    n: int,
    batch_size: int,
    delta: float,
    steps: int | None = None,
    epochs: int | None = None,
    sampling: str = "poisson",
    accountant: str = "rdp",
    max_batch_size: int | None = None,
):
    """What a :func:`train` run spends, as ``accounting.PrivacySpend``.

    * ``"poisson"``: Poisson-subsampled Gaussian at ``q = batch_size / n`` under add/remove-one
      neighbours, plus the truncation charge ``sampling.truncation_delta`` added to ``delta`` (the
      returned ``delta`` is the total). The rate uses the dataset size ``n``, which differs by one
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
    v.check_noise_multiplier(noise_multiplier)
    v.check_delta(delta)
    v.check_choice("sampling", sampling, _sampling.SAMPLING_SCHEMES)
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    steps = resolve_steps(n, batch_size, steps, epochs, sampling)
    spec = _sampling.accounting_for(sampling, n, batch_size)
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
    eps = _acc.epsilon_of_event(event, delta, accountant=accountant) if z > 0 else float("inf")
    total_delta, notes = float(delta), spec.notes
    if sampling == "poisson" and np.isfinite(eps):
        b = max_batch_size or _sampling.max_batch_size_for(n, spec.sample_rate, steps)
        extra = _sampling.truncation_delta(n, spec.sample_rate, min(b, n), steps, eps)
        total_delta = min(float(delta) + extra, 1.0 - 1e-12)
        notes += f" Truncation at max_batch_size={min(b, n)} adds {extra:.3g} to delta."
    return _acc.PrivacySpend(epsilon=eps, delta=total_delta, event=event, relation=spec.relation,
                             unit="example", accountant=accountant, notes=notes.strip())


# ------------------------------------------------------------------------------------------------
# The trio: fit / spend / calibrate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DPSGDConfig:
    """Static choices of a DP-SGD run (:func:`fit`).

    ``model``: a ``models.Model``, a flax ``nnx.Module``, a pure ``apply(params, x)`` (with
    ``loss``) or a per-example loss ``loss(params, x_i, y_i)``; ``loss``: the output loss for a
    model (``"logistic"``, ``"cross_entropy"``, ``"squared"`` or a callable; default from the
    model); ``sampling``: ``"poisson"``, ``"fixed_size"`` or ``"shuffle"``; ``relation``: the
    neighbouring relation of the spend, ``None`` for the sampling's own (Poisson: add/remove;
    fixed-size and shuffled: replace-one; another value is refused); ``accountant``: ``"rdp"`` or
    ``"pld"`` (not used by shuffled epochs, whose curve is exact); ``delta``: the delta the spend
    states epsilon at; ``optimizer``, ``per_example``, ``max_batch_size``, ``diagnostics`` as in
    :func:`train`.
    """

    model: Any = None
    loss: Any = None
    sampling: str = "poisson"
    relation: str | None = None
    accountant: str = "rdp"
    delta: float = 1e-5
    optimizer: Any = optax.sgd
    per_example: str = "auto"
    max_batch_size: int | None = None
    diagnostics: bool = True

    def validate(self) -> "DPSGDConfig":
        """Refuse out-of-range choices on the host, naming the field."""
        if self.model is None:
            raise ValueError("config.model is required (a models.Model, an nnx module, an apply with "
                             "loss=, or a per-example loss function).")
        v.check_choice("sampling", self.sampling, _sampling.SAMPLING_SCHEMES)
        v.check_choice("accountant", self.accountant, ("rdp", "pld"))
        v.check_choice("per_example", self.per_example, PER_EXAMPLE_MODES)
        v.check_delta(self.delta)
        if self.sampling == "fixed_size" and self.accountant == "pld":
            raise ValueError("accountant='pld' cannot account sampling='fixed_size' (sampling without "
                             "replacement); use accountant='rdp'.")
        if self.relation is not None:
            own = _rel.relation_name(_sampling.accounting_for(self.sampling, 2, 1).relation)
            if _rel.relation_name(self.relation) != own:
                raise ValueError(f"relation={self.relation!r} does not match sampling={self.sampling!r}, "
                                 f"which is accounted under {own!r}; leave relation=None or change sampling.")
        if self.max_batch_size is not None:
            v.check_int("max_batch_size", self.max_batch_size, minimum=1)
        return self


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["learning_rate", "clip_norm", "noise_multiplier"],
                   meta_fields=["batch_size", "steps"])
@dataclasses.dataclass(frozen=True)
class DPSGDHparams:
    """Hyperparameters of a DP-SGD run: ``learning_rate``, ``clip_norm``, ``noise_multiplier``
    (may be traced arrays; a registered pytree, so ``montecarlo.sweep`` and ``vmap`` grid them),
    ``batch_size`` (expected, for Poisson) and ``steps`` (static)."""

    learning_rate: Any = 0.1
    clip_norm: Any = 1.0
    noise_multiplier: Any = 1.0
    batch_size: int = 256
    steps: int = 100

    def validate(self) -> "DPSGDHparams":
        """Refuse, on the host, every field out of range (traced values are skipped), naming it."""
        v.check_positive("learning_rate", self.learning_rate)
        v.check_clip_norm(self.clip_norm)
        v.check_noise_multiplier(self.noise_multiplier)
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_int("steps", self.steps, minimum=1)
        return self


class DPSGDResult(NamedTuple):
    """``params``, per-step ``diagnostics`` (not private), the run's ``spend``
    (``None`` when the noise multiplier is traced, e.g. inside ``montecarlo.sweep``: call
    :func:`spend` with the grid's values) and ``report``, the
    :class:`~dpfair_jax.privacy.sampling.SamplingReport` of the steps the program ran."""

    params: Any
    diagnostics: dict
    spend: Any
    report: Any = None


def _concrete(*values: Any) -> bool:
    return not any(isinstance(leaf, jax.core.Tracer) for val in values for leaf in jax.tree_util.tree_leaves(val))


def fit(key: jax.Array, data: Any, hparams: DPSGDHparams, config: DPSGDConfig, *,
        params: Any = None) -> DPSGDResult:
    """DP-SGD (:func:`train`) with ``hparams`` and ``config``; returns :class:`DPSGDResult`.

    ``params``: the initial parameters; by default ``config.model.init`` with the first half of
    ``split(key)`` (the second trains), or an nnx module's own. ``data``: a ``Dataset`` or
    ``(x, y[, mask])`` with ``n`` rows.

    Privacy: the recorded ``spend`` is :func:`spend` ``(config, n, hparams)``: a subsampled Gaussian
    mechanism per step with multiplier ``noise_multiplier`` on a clipped sum of sensitivity
    ``clip_norm`` (add/remove-one under Poisson sampling; ``2 clip_norm`` under replace-one for
    fixed-size and shuffled batches), accounted as :func:`privacy` does.
    """
    config.validate()
    hparams.validate()
    x = _unpack_data(data)[0]
    n = int(np.shape(x)[0])
    model = config.model
    if params is None and isinstance(model, _models.Model):
        k_init, key = jax.random.split(key)
        shape = model.input_shape or (int(np.shape(x)[1]),)
        params = model.init(k_init, shape if len(shape) > 1 else shape[0])
    elif params is None and not isinstance(model, nnx.Module):
        raise ValueError("params is required for this config.model (only a models.Model or an nnx "
                         "module provides its own).")
    out_params, diag, report = _train(key, model, params, data, clip_norm=hparams.clip_norm,
                             noise_multiplier=hparams.noise_multiplier,
                             learning_rate=None if isinstance(config.optimizer, optax.GradientTransformation)
                             else hparams.learning_rate,
                             batch_size=hparams.batch_size, steps=hparams.steps, sampling=config.sampling,
                             optimizer=config.optimizer, loss=config.loss, per_example=config.per_example,
                             max_batch_size=config.max_batch_size, diagnostics=config.diagnostics)
    recorded = spend(config, n, hparams) if _concrete(hparams.noise_multiplier) else None
    return DPSGDResult(out_params, diag, recorded, report)


def spend(config: DPSGDConfig, sizes: int, hparams: DPSGDHparams):
    """The ``PrivacySpend`` of :func:`fit` with these arguments (:func:`privacy` at
    ``config.delta``; ``sizes`` is the number of rows ``n``, public). Its ``delta`` adds the Poisson
    padding's truncation charge."""
    config.validate()
    hparams.validate()
    return privacy(float(hparams.noise_multiplier), n=v.check_int("sizes", sizes, minimum=1),
                   batch_size=hparams.batch_size, delta=config.delta, steps=hparams.steps,
                   sampling=config.sampling, accountant=config.accountant,
                   max_batch_size=config.max_batch_size)


def calibrate(config: DPSGDConfig, sizes: int, target: tuple[float, float],
              hparams: DPSGDHparams | None = None) -> DPSGDHparams:
    """``hparams`` (default ``DPSGDHparams()``) with ``noise_multiplier`` set to the smallest (within
    ~1e-6 relative) for which ``spend(config, sizes, result).epsilon <= target[0]``.

    ``target = (epsilon, delta)``; ``delta`` must equal ``config.delta`` (the delta the spend states
    epsilon at). Poisson and fixed-size batches: ``accounting.calibrate_noise_multiplier`` with the
    sampling's accountant and relation (the multiplier times the relation's sensitivity factor);
    shuffled epochs: the exact composed-Gaussian curve (``accounting.calibrate_membership_visible``).

    Privacy: the returned multiplier makes :func:`fit` ``(epsilon, delta + truncation)``-DP under
    the sampling's relation.
    """
    config.validate()
    hp = (DPSGDHparams() if hparams is None else hparams).validate()
    n = v.check_int("sizes", sizes, minimum=1)
    eps, delta = _acc.calibration_target(target, config.delta)
    if hp.batch_size > n:
        raise ValueError(f"batch_size ({hp.batch_size}) must be <= sizes = n ({n}).")
    spec = _sampling.accounting_for(config.sampling, n, hp.batch_size)
    steps = resolve_steps(n, hp.batch_size, hp.steps, None, config.sampling)
    if config.sampling == "shuffle":
        part = _acc.participation_distribution(steps, "shuffle", steps_per_epoch=spec.steps_per_epoch)
        z = 1.0 / _acc.calibrate_membership_visible(float(eps), float(delta), part)
    else:
        z = _acc.calibrate_noise_multiplier(
            float(eps), float(delta), spec.sample_rate, steps, accountant=config.accountant,
            sampling=spec.sampling, dataset_size=None if spec.sampling == "poisson" else n)
    z = _acc.step_up_until(lambda zz: spend(config, n, dataclasses.replace(hp, noise_multiplier=zz)).epsilon,
                           z * spec.sensitivity_factor, eps)
    return dataclasses.replace(hp, noise_multiplier=float(z))
