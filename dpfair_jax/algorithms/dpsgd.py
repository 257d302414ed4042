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

from dpfair_jax import models as _models
from dpfair_jax.data.dataset import Dataset
from dpfair_jax import _validation as v
from dpfair_jax.privacy import aggregation as _agg
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax._validation import is_traced

from ._trio import FitResult, hparams_pytree

__all__ = ["clipped_grad_sum", "resolve_per_example", "resolve_steps", "output_loss_for", "check_labels",
           "GLM_MODELS", "DPSGDConfig", "DPSGDHparams", "fit", "spend", "calibrate"]

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
    eps = _acc.epsilon_of_event(event, delta, accountant=accountant) if z > 0 else float("inf")
    total_delta, notes = float(delta), spec.notes
    if sampling == "poisson" and np.isfinite(eps):
        extra = _sampling.truncation_delta(n, spec.sample_rate, shape.width, steps, eps)
        total_delta = min(float(delta) + extra, 1.0 - 1e-12)
        notes += f" Truncation at max_batch_size={shape.width} adds {extra:.3g} to delta."
    return _acc.PrivacySpend(epsilon=eps, delta=total_delta, event=event, relation=spec.relation,
                             unit="example", accountant=accountant, notes=notes.strip())


# ------------------------------------------------------------------------------------------------
# The trio: fit / spend / calibrate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DPSGDConfig:
    """Static choices of a DP-SGD run (:func:`fit`).

    ``model``: a ``models.Model``, a flax ``nnx.Module``, a pure ``apply(params, x)`` (with
    ``loss``) or a per-example loss ``loss(params, x_i, y_i)`` (the per-example path follows the
    model's layer declaration: ghost norms for the kit's GLMs, MLP and float32 CNN, ``vmap(grad)``
    for everything else, user modules included); ``loss``: the output loss for a model
    (``"logistic"``, ``"cross_entropy"``, ``"squared"`` or a callable; default from the model);
    ``sampling``: ``"poisson"`` (padded to ``max_batch_size``, default from
    ``sampling.max_batch_size_for`` with overflow probability 1e-9 over the run), ``"fixed_size"``
    (independent uniform batches) or ``"shuffle"`` (shuffled epochs); ``relation``: the
    neighbouring relation of the spend, ``None`` for the sampling's own (Poisson: add/remove;
    fixed-size and shuffled: replace-one; another value is refused); ``accountant``: ``"rdp"`` or
    ``"pld"`` (not used by shuffled epochs, whose curve is exact); ``delta``: the delta the spend
    states epsilon at; ``optimizer``: an optax factory called as ``optimizer(learning_rate)``, or a
    ready ``GradientTransformation`` (then ``hparams.learning_rate`` is not used); ``per_example``:
    ``"auto"``, ``"ghost"`` (raise if unavailable) or ``"vmap"`` (:func:`resolve_per_example`);
    ``batch_size``: the (expected, for Poisson) batch size, ``q = batch_size / n``; ``steps``: the
    number of steps (from epochs: :func:`resolve_steps`; with ``"shuffle"``, whole epochs);
    ``max_batch_size``: the padded Poisson width; ``diagnostics``: record per-step diagnostics.
    """

    model: Any = None
    loss: Any = None
    sampling: str = "poisson"
    relation: str | None = None
    accountant: str = "rdp"
    delta: float = 1e-5
    optimizer: Any = optax.sgd
    per_example: str = "auto"
    batch_size: int = 256
    steps: int = 100
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
        _check_optimizer(self.optimizer)
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_int("steps", self.steps, minimum=1)
        if self.max_batch_size is not None:
            v.check_int("max_batch_size", self.max_batch_size, minimum=self.batch_size)
        return self


def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, optax.GradientTransformation) and not callable(optimizer):
        raise ValueError("optimizer must be an optax factory (e.g. optax.sgd) or a GradientTransformation.")


@hparams_pytree
class DPSGDHparams:
    """Hyperparameters of a DP-SGD run: ``learning_rate``, ``clip_norm``, ``noise_multiplier``
    (may be traced arrays; a registered pytree, so ``montecarlo.sweep`` and ``vmap`` grid them;
    ``batch_size`` and ``steps`` are in :class:`DPSGDConfig`)."""

    learning_rate: Any = 0.1
    clip_norm: Any = 1.0
    noise_multiplier: Any = 1.0

    def validate(self) -> "DPSGDHparams":
        """Refuse, on the host, every field out of range (traced values are skipped), naming it."""
        v.check_positive("learning_rate", self.learning_rate)
        v.check_clip_norm(self.clip_norm)
        v.check_noise_multiplier(self.noise_multiplier)
        return self


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


def spend(config: DPSGDConfig, sizes: int, hparams: DPSGDHparams):
    """The ``PrivacySpend`` of :func:`fit` with these arguments (``sizes`` is the number of rows
    ``n``), stating epsilon at ``config.delta``; under Poisson sampling its ``delta`` adds the
    padding's truncation charge. Poisson: add/remove-one, subsampled Gaussian at
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

    Privacy: the returned multiplier makes :func:`fit` ``(epsilon, delta + truncation)``-DP under
    the sampling's relation.
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
        z = _acc.calibrate_noise_multiplier(
            float(eps), float(delta), spec.sample_rate, config.steps, accountant=config.accountant,
            sampling=spec.sampling, dataset_size=None if spec.sampling == "poisson" else n)
    z = _acc.step_up_until(lambda zz: _spend(config, n, zz, shape).epsilon, z * spec.sensitivity_factor, eps)
    return dataclasses.replace(hp, noise_multiplier=float(z))
