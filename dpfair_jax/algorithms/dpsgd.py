"""Generic DP-SGD (Abadi et al. 2016) on the privacy primitives, as one ``lax.scan``.

Each step samples a batch (Poisson with a padded, masked batch; independent fixed-size batches; or
shuffled epochs), computes per-example gradients, clips each to L2 norm ``C`` over the whole
parameter pytree, sums, adds ``N(0, (sigma C)^2 I)``, divides by the public batch size (the
*expected* size ``q n`` under Poisson sampling) and hands the result to an optax optimizer.

Per-example norms come from ghost norms where the model allows (``models.linear``, ``logistic``,
``multinomial_logistic``: one dense layer; ``models.mlp``: a dense stack; ``models.cnn``: conv
layers and the dense head, ``privacy.ghost.cnn_clipped_grad_sum``), and from ``vmap(grad)``
otherwise (any per-example loss over any pytree, and mixed-precision CNNs built with
``compute_dtype``, whose bfloat16 ``apply`` the float32 ghost forward pass does not reproduce).
Norms, clipping, noise and the update are float32 in every mode (at least the precision of ``x``),
whatever a model computes internally. ``clip_norm``,
``noise_multiplier`` and ``learning_rate`` are traced, so ``jax.jit(jax.vmap(...))`` over a grid of
them is one program; shapes (batch size, steps, model) are static.

Public names: :func:`train`, :func:`privacy`, :func:`resolve_per_example`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import aggregation as _agg
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import ghost as _ghost
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.privacy.precision import full_precision

__all__ = ["train", "privacy", "clipped_grad_sum", "resolve_per_example", "output_loss_for",
           "GLM_MODELS"]

GLM_MODELS = ("linear", "logistic", "multinomial_logistic")
_LOSSES = {
    "logistic": _models.binary_logistic_loss,
    "cross_entropy": _models.softmax_cross_entropy,
    "squared": _models.squared_loss,
}
PER_EXAMPLE_MODES = ("auto", "vmap", "ghost")


class _Config(NamedTuple):
    """Static (hashable) configuration of one compiled training program."""

    mode: str  # "glm", "mlp", "cnn" or "vmap"
    model: Any  # models.Model or None
    loss: Callable  # per-example loss: (params, x_i, y_i) for "vmap"; (outputs[B, ...], y) for ghost
    activation: str | None
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
    """Per-example loss ``(outputs, y) -> [B]`` for a ``models.Model``.

    ``loss`` may be a callable, ``"logistic"``, ``"cross_entropy"`` or ``"squared"``; by default it
    follows the model (logistic -> logistic, multinomial -> cross-entropy, linear -> squared) and,
    for an MLP, the data (``num_classes == 0``: squared; one output: logistic; else cross-entropy).
    """
    if callable(loss):
        return loss
    if loss is not None:
        return _LOSSES[v.check_choice("loss", loss, _LOSSES)]
    if model.name == "logistic":
        return _LOSSES["logistic"]
    if model.name == "multinomial_logistic":
        return _LOSSES["cross_entropy"]
    if model.name == "linear" or num_classes == 0:
        return _LOSSES["squared"]
    return _LOSSES["logistic"] if model.num_outputs == 1 else _LOSSES["cross_entropy"]


def _mlp_layers(params: Any) -> list[dict]:
    layers = params["layers"]
    return [{"w": layers[k]["kernel"], "b": layers[k]["bias"]} for k in sorted(layers)]


def _mlp_params(like: Any, grads: list[dict]) -> Any:
    keys = sorted(like["layers"])
    return {"layers": {k: {"kernel": g["w"], "bias": g["b"]} for k, g in zip(keys, grads)}}


_ACTIVATION_CACHE: dict[Any, str | None] = {}


def _detect_mlp_activation(model: _models.Model, params: Any) -> str | None:
    """Find the activation under which the ghost forward pass reproduces ``model.apply``.

    Checked on random parameters of the same shapes (the identity does not depend on the values),
    evaluated eagerly even while tracing. Returns None when no activation matches.
    """
    shapes = tuple((tuple(l["w"].shape), tuple(l["b"].shape)) for l in _mlp_layers(params))
    cache_key = (model, shapes)
    if cache_key in _ACTIVATION_CACHE:
        return _ACTIVATION_CACHE[cache_key]
    rng = np.random.default_rng(0)
    found = None
    with jax.ensure_compile_time_eval():
        fake = {"layers": {k: {"kernel": jnp.asarray(rng.normal(size=ws), jnp.float32),
                               "bias": jnp.asarray(rng.normal(size=bs), jnp.float32)}
                           for k, (ws, bs) in zip(sorted(params["layers"]), shapes)}}
        x = jnp.asarray(rng.normal(size=(3, shapes[0][0][0])), jnp.float32)
        ref = jnp.reshape(model.apply(fake, x), (3, -1))
        for name, act in _models.ACTIVATIONS.items():
            out, _ = _clip.mlp_forward(_mlp_layers(fake), x, act)
            if out.shape == ref.shape and bool(jnp.allclose(out, ref, rtol=1e-5, atol=1e-5)):
                found = name
                break
    _ACTIVATION_CACHE[cache_key] = found
    return found


def resolve_per_example(model_or_loss: Any, params: Any, per_example: str = "auto") -> tuple[str, str | None]:
    """How per-example norms will be computed: ``("glm" | "mlp" | "cnn" | "vmap", activation)``.

    ``"auto"`` uses ghost norms for the GLMs, the MLP (when its activation is recognised) and the
    CNN (when ``privacy.ghost.cnn_forward`` reproduces its ``apply``: float32 models; one built with
    ``compute_dtype=jnp.bfloat16`` gets ``"vmap"``) of :mod:`dpfair_jax.models`, and
    ``vmap(grad)`` for anything else; ``"ghost"`` raises if ghost norms are not available;
    ``"vmap"`` forces the generic path. The checks run once per model and parameter shapes
    (cached).
    """
    v.check_choice("per_example", per_example, PER_EXAMPLE_MODES)
    mode, act = "vmap", None
    if isinstance(model_or_loss, _models.Model):
        if model_or_loss.name in GLM_MODELS:
            mode = "glm"
        elif model_or_loss.name == "mlp":
            act = _detect_mlp_activation(model_or_loss, params)
            mode = "mlp" if act is not None else "vmap"
        elif model_or_loss.name == "cnn":
            mode = "cnn" if _ghost.cnn_matches_apply(model_or_loss, params) else "vmap"
    if per_example == "vmap":
        return "vmap", None
    if per_example == "ghost" and mode == "vmap":
        raise ValueError(
            "per_example='ghost' needs a models.linear/logistic/multinomial_logistic, models.mlp or "
            "float32 models.cnn model (not compute_dtype=bfloat16); use per_example='auto' or "
            "'vmap' for other models and loss functions."
        )
    return mode, act


# ------------------------------------------------------------------------------------------------
# One step's clipped sum
# ------------------------------------------------------------------------------------------------
def _clipped_sum(cfg: _Config, params, xb, yb, mask, clip_norm, x_sq=None):
    """Returns (clipped gradient sum, norms [B], per-example losses [B])."""
    if cfg.mode == "glm":
        w = params["w"]
        z = xb @ w
        if "b" in params:
            z = z + params["b"]

        def total(zz):
            out = zz[:, 0] if zz.shape[1] == 1 else zz
            losses = cfg.loss(out, yb)
            return jnp.sum(losses), losses

        dz, losses = jax.grad(total, has_aux=True)(z)
        sums, norms = _clip.glm_clipped_grad_sum(xb, dz, clip_norm, mask, fit_intercept="b" in params,
                                                 x_sq_norms=x_sq)
        grads = {"w": sums["w"]}
        if "b" in params:
            grads["b"] = sums["b"]
        return grads, norms, losses
    if cfg.mode == "mlp":
        act = _models.ACTIVATIONS[cfg.activation]

        def out_loss(out, y):
            return cfg.loss(out[:, 0] if out.shape[1] == 1 else out, y)

        grads, norms, losses = _clip.mlp_clipped_grad_sum(
            _mlp_layers(params), xb, yb, out_loss, clip_norm, activation=act, mask=mask
        )
        return _mlp_params(params, grads), norms, losses
    if cfg.mode == "cnn":
        # Book-keeping ghost clipping: one backward pass w.r.t. the pre-activations, norms from
        # the conv patches and the head; the sum comes back in the model's param structure.
        return _ghost.cnn_clipped_grad_sum(cfg.model, params, xb, yb, cfg.loss, clip_norm, mask=mask)
    # generic vmap(grad) path
    vg = jax.vmap(jax.value_and_grad(cfg.loss), in_axes=(None, 0, 0))
    losses, grads = vg(params, xb, yb)
    norms = _clip.per_example_norms(grads)
    c = _clip.clip_factors(norms, clip_norm) * mask
    return _clip.weighted_sum(grads, c), norms, losses


def _resolve_path(model_or_loss: Any, params: Any, per_example: str, num_classes: int | None,
                  loss: Any) -> tuple[str, str | None, Any, Callable]:
    """``(mode, activation, model or None, loss)``: the loss takes ``(outputs, y)`` on the ghost
    paths and ``(params, x_i, y_i)`` on the vmap path."""
    mode, act = resolve_per_example(model_or_loss, params, per_example)
    if isinstance(model_or_loss, _models.Model):
        out_loss = output_loss_for(model_or_loss, num_classes, loss)
        loss_fn = _PerExampleLoss(model_or_loss.apply, out_loss) if mode == "vmap" else out_loss
        return mode, act, model_or_loss, loss_fn
    if callable(model_or_loss):
        if loss is not None:
            raise ValueError("loss= is only used with a models.Model; model_or_loss is already a loss.")
        return mode, act, None, model_or_loss
    raise ValueError("model_or_loss must be a models.Model or a per-example loss function.")


@full_precision
def clipped_grad_sum(model_or_loss: Any, params: Any, xb: jax.Array, yb: jax.Array, *,
                     clip_norm: Any, mask: jax.Array | None = None, per_example: str = "auto",
                     num_classes: int | None = None, loss: Any = None
                     ) -> tuple[Any, jax.Array, jax.Array]:
    """One batch's sum of per-example gradients clipped to ``clip_norm``: ``(sums, norms, losses)``.

    The primitive :func:`train` applies at every step (same path selection: ghost norms for GLMs,
    dense MLPs and float32 CNNs, ``vmap(grad)`` otherwise), for custom loops. ``mask [B]`` weights
    the examples (padding rows 0). ``norms`` and ``losses`` are per example (not private). Add
    Gaussian noise of std ``noise_multiplier * clip_norm`` (e.g. ``aggregation.noisy_sum``) and
    normalise by the expected batch size to get a DP-SGD gradient. jit/vmap-able.

    Privacy: the sum has L2 sensitivity ``clip_norm`` under add/remove-one (``2 clip_norm``
    replace-one); it is not private until noise is added.
    """
    v.check_clip_norm(clip_norm)
    mode, act, model, loss_fn = _resolve_path(model_or_loss, params, per_example, num_classes, loss)
    b = int(np.shape(xb)[0])
    cfg = _Config(mode, model, loss_fn, act, b, b, b, 1, "fixed_size", optax.sgd, False)
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

    def step(carry, inputs):
        params, opt_state = carry
        k, idx_given = inputs
        k_sample, k_noise = jax.random.split(k)
        if cfg.sampling == "poisson":
            sample = _sampling.poisson_sample(k_sample, cfg.n, q, cfg.max_batch_size)
            idx, mask, truncated = sample.indices, sample.mask.astype(dt), sample.truncated
        elif cfg.sampling == "fixed_size":
            idx = _sampling.fixed_size_batch(k_sample, cfg.n, cfg.batch_size)
            mask, truncated = jnp.ones((cfg.batch_size,), dt), jnp.array(False)
        else:
            idx, mask, truncated = idx_given, jnp.ones((cfg.batch_size,), dt), jnp.array(False)
        if data_mask is not None:
            mask = mask * data_mask[idx].astype(dt)
        xb, yb = x[idx], y[idx]
        x_sq = None if x_sq_all is None else x_sq_all[idx]
        sums, norms, losses = _clipped_sum(cfg, params, xb, yb, mask, clip_norm, x_sq)
        noisy = _agg.noisy_sum(k_noise, sums, std)
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
    else:
        idx_all = jnp.zeros((cfg.steps, 1), jnp.int32)
    (params, _), diag = jax.lax.scan(step, (params, opt_state), (keys[:-1], idx_all))
    return params, diag


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


def _resolve_steps(n: int, batch_size: int, steps: int | None, epochs: int | None, sampling: str) -> int:
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
def train(
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
      model_or_loss: a ``models.Model`` (loss from :func:`output_loss_for`, or ``loss=``), or a
        per-example loss ``loss(params, x_i, y_i) -> scalar`` over any parameter pytree.
      params: initial parameters.
      data: a ``Dataset`` (its ``mask`` is honoured) or ``(x, y[, mask])``.
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
    v.check_finite("params", params)
    v.check_clip_norm(clip_norm)
    v.check_noise_multiplier(noise_multiplier)
    v.check_choice("sampling", sampling, _sampling.SAMPLING_SCHEMES)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= the number of rows n ({n}).")
    steps = _resolve_steps(n, batch_size, steps, epochs, sampling)
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
    mode, act, model, loss_fn = _resolve_path(model_or_loss, params, per_example, num_classes, loss)
    cfg = _Config(mode, model, loss_fn, act, n, batch_size, max_batch_size, steps, sampling,
                  optimizer, bool(diagnostics))
    return _train_program(cfg, key, params, x, y, data_mask, clip_norm, noise_multiplier, learning_rate)


class _PerExampleLoss(NamedTuple):
    """``loss(params, x_i, y_i) = output_loss(apply(params, x_i), y_i)`` (hashable)."""

    apply: Callable
    output_loss: Callable

    def __call__(self, params, xi, yi):
        return self.output_loss(self.apply(params, xi), yi)


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
    from dpfair_jax.privacy import accounting as _acc

    v.check_noise_multiplier(noise_multiplier)
    v.check_delta(delta)
    v.check_choice("sampling", sampling, _sampling.SAMPLING_SCHEMES)
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    steps = _resolve_steps(n, batch_size, steps, epochs, sampling)
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
