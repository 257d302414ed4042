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
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.algorithms._trio import FitResult, hparams_pytree
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import minmax_noise as _mm
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import sampling as _smp
from dpfair_jax.privacy.precision import full_precision

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

PyTree = Any
_TINY = 1e-30
SAMPLINGS = ("poisson", "shuffle", "fixed_size")
PROJECTIONS = ("ball", "box", "none")
ITERATES = ("last", "random")


@dataclasses.dataclass(frozen=True)
class SGDAConfig:
    """Static settings: ``steps`` T, expected ``batch_size`` m, ``sampling`` (``"poisson"``,
    ``"shuffle"``, ``"fixed_size"``), ``max_batch_size`` (Poisson padding; default from
    :func:`default_max_batch_size`), ``projection`` (``"ball"`` Frobenius radius, ``"box"``
    entrywise, ``"none"``), ``iterate`` (``"last"`` or ``"random"``), ``sensitivity_factor``
    (L2 sensitivity of a clipped sum in clip units: 1 add/remove, 2 replace-one; the noise std is
    ``multiplier x clip x sensitivity_factor``) and ``delta`` (the delta :func:`spend` states;
    accounting only).

    What :func:`fit` trains: ``private_loss(theta, w, example) -> scalar`` for ONE example (a
    static callable; its per-example gradients in ``theta`` and ``w`` are clipped and noised) and
    the gradient path: ``linear`` (GLM ghost norms), ``cnn_model`` (CNN ghost norms) or ``model``
    (the dispatcher's path for any ``models.Model``), at most one (see :func:`dpsgda`). The start:
    ``theta_shape``/``w_shape`` give :func:`fit`'s default ``theta0``/``w0`` (float32 zeros of
    those shapes; pass ``theta0=``/``w0=`` for pytrees or other values). ``w_relative``: the
    ratio ``noise_w / noise_theta`` that :func:`calibrate` sets."""

    steps: int
    batch_size: int
    sampling: str = "poisson"
    max_batch_size: int | None = None
    projection: str = "ball"
    iterate: str = "last"
    sensitivity_factor: float = 1.0
    delta: float = 1e-5
    private_loss: Callable[..., Any] | None = None
    linear: bool = False
    cnn_model: Any = None
    model: Any = None
    theta_shape: tuple[int, ...] | None = None
    w_shape: tuple[int, ...] | None = None
    w_relative: float = 1.0

    def validate(self, n: int) -> "SGDAConfig":
        v.check_int("steps", self.steps, minimum=1)
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_choice("sampling", self.sampling, SAMPLINGS)
        v.check_choice("projection", self.projection, PROJECTIONS)
        v.check_choice("iterate", self.iterate, ITERATES)
        v.check_positive("sensitivity_factor", self.sensitivity_factor)
        v.check_positive("w_relative", self.w_relative)
        v.check_delta(self.delta)
        if self.private_loss is not None and not callable(self.private_loss):
            raise ValueError("private_loss must be a callable f(theta, w, example) -> scalar.")
        if sum((bool(self.linear), self.cnn_model is not None, self.model is not None)) > 1:
            raise ValueError("pass at most one of linear=True, cnn_model and model.")
        if self.batch_size > n:
            raise ValueError(f"batch_size ({self.batch_size}) must be <= n ({n}); lower batch_size.")
        if self.max_batch_size is not None:
            v.check_int("max_batch_size", self.max_batch_size, minimum=self.batch_size)
        spe = n // self.batch_size
        if self.sampling == "shuffle" and self.steps % spe:
            raise ValueError(
                f"steps ({self.steps}) must be a multiple of the steps per epoch n // batch_size = {spe} "
                "for sampling='shuffle'; use epochs * (n // batch_size) steps."
            )
        return self

    def padded_batch(self, n: int) -> int:
        if self.sampling != "poisson":
            return self.batch_size
        if self.max_batch_size is not None:
            return min(self.max_batch_size, n)
        return default_max_batch_size(n, self.batch_size)


@hparams_pytree
class SGDAHparams:
    """Traced hyperparameters (scalars, or arrays under ``vmap``).

    ``noise_*`` are noise multipliers: the noise on the clipped *sum* has std
    ``noise * clip * sensitivity_factor``. ``clip_* = inf`` disables clipping (then only zero noise
    is meaningful). ``radius`` is the projection radius of ``W`` (ignored for ``"none"``).
    """

    lr_theta: Any = 0.005
    lr_w: Any = 0.01
    clip_theta: Any = 1.0
    clip_w: Any = 1.0
    noise_theta: Any = 0.0
    noise_w: Any = 0.0
    radius: Any = 5.0

    def validate(self) -> "SGDAHparams":
        """Refuse out-of-range fields on the host, traced values skipped (:func:`check_hparams`)."""
        for name in ("lr_theta", "lr_w"):
            v.check_positive(name, getattr(self, name))
        for name in ("clip_theta", "clip_w", "radius"):
            v.check_positive(name, getattr(self, name), allow_inf=True)
        for name in ("noise_theta", "noise_w"):
            v.check_noise_multiplier(getattr(self, name), name)
        _check_noise_with_clip(self)
        return self


class SGDAParams(NamedTuple):
    """What :func:`fit` releases (``FitResult.params``): the returned iterate ``theta`` (the min
    variable) and its partner ``w`` (the max variable)."""

    theta: PyTree
    w: PyTree


class SGDAResult(NamedTuple):
    """What :func:`dpsgda` (lower level: use fit) returns: ``theta`` (returned iterate), ``w`` (its partner), ``theta_last``, ``w_last``,
    ``diagnostics`` (``truncated_steps``, ``clipped_frac_theta``, ``clipped_frac_w``: mean over
    steps of the fraction of sampled examples whose gradient was clipped) and ``report``: the
    :class:`~dpfair_jax.privacy.sampling.SamplingReport` of the steps run."""

    theta: PyTree
    w: PyTree
    theta_last: PyTree
    w_last: PyTree
    diagnostics: dict
    report: _smp.SamplingReport | None = None


def default_max_batch_size(n: int, batch_size: int) -> int:
    """Static padding for Poisson batches: mean + 8 standard deviations (overflow probability
    below 1e-14 per step; charge ``sampling.truncation_delta`` for exactness)."""
    q = batch_size / n
    return int(min(n, math.ceil(batch_size + 8.0 * math.sqrt(n * q * (1 - q)) + 8)))


def project(w: PyTree, radius: Any, kind: str) -> PyTree:
    """Projection onto ``{||w||_F <= radius}`` (``"ball"``), ``{|w_ij| <= radius}`` (``"box"``)
    or the identity (``"none"``)."""
    if kind == "none":
        return w
    if kind == "box":
        return jax.tree_util.tree_map(lambda x: jnp.clip(x, -radius, radius), w)
    sq = sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(w))
    norm = jnp.sqrt(sq)
    scale = jnp.where(norm <= radius, 1.0, radius / jnp.maximum(norm, _TINY))
    return jax.tree_util.tree_map(lambda x: x * scale, w)


def _n_rows(data: PyTree) -> int:
    return int(jax.tree_util.tree_leaves(data)[0].shape[0])


# ------------------------------------------------------------------------------------------------
# sampling: which rows each step uses
# ------------------------------------------------------------------------------------------------
def _draw_fn(key, n: int, config: SGDAConfig, seen: dict | None = None):
    """``t -> (indices, mask, truncated)`` for Poisson and fixed-size sampling. When traced, the
    draw writes the sampler it calls, its rate, ``n`` and the width it returns into ``seen``."""
    seen = {} if seen is None else seen
    m = config.batch_size
    B = config.padded_batch(n)
    if config.sampling == "poisson":
        q = m / n

        def draw_poisson(t):
            sample = _smp.poisson_sample(jax.random.fold_in(key, t), n, q, B)
            seen.update(sampler="poisson", sample_rate=q, dataset_size=n,
                        batch_width=int(sample.indices.shape[0]))
            return sample.indices, sample.mask, sample.truncated

        return draw_poisson

    def draw(t):
        idx = _smp.fixed_size_batch(jax.random.fold_in(key, t), n, m)
        seen.update(sampler="fixed_size", sample_rate=m / n, dataset_size=n, batch_width=int(idx.shape[0]))
        return idx, jnp.ones((m,), jnp.float32), jnp.asarray(False)

    return draw


def _scan_batches(step: Callable, init: Any, key: jax.Array, n: int, config: SGDAConfig):
    """Run ``step(carry, t, indices, mask, truncated)`` over the ``config.steps`` sampled batches
    (one ``lax.scan``; shuffled epochs as an outer scan over permutations). Returns
    ``(final carry, per-step outputs [T, ...], report)``, the :class:`~dpfair_jax.privacy.sampling.SamplingReport`
    read from the scans run (their lengths, the sampler called, the batch widths)."""
    T, m = config.steps, config.batch_size
    seen: dict = {}
    if config.sampling == "shuffle":
        spe = n // m
        ones = jnp.ones((m,), jnp.float32)

        def epoch(carry, e):
            batches = _smp.shuffled_batches(jax.random.fold_in(key, e), n, m)
            seen.update(sampler="shuffle", sample_rate=m / n, dataset_size=n,
                        batch_width=int(batches.shape[1]))
            inner = lambda c, xs: step(c, xs[0], xs[1], ones, jnp.asarray(False))
            return jax.lax.scan(inner, carry, (e * spe + jnp.arange(spe), batches))

        epochs = jnp.arange(T // spe)
        final, stats = jax.lax.scan(epoch, init, epochs)
        stats = jax.tree_util.tree_map(jnp.ravel, stats)
        seen["epochs"] = int(epochs.shape[0])
    else:
        draw = _draw_fn(key, n, config, seen)
        final, stats = jax.lax.scan(lambda c, t: step(c, t, *draw(t)), init, jnp.arange(T))
    steps = int(jax.tree_util.tree_leaves(stats)[0].shape[0])
    return final, stats, _smp.SamplingReport(steps=steps, **seen)


# ------------------------------------------------------------------------------------------------
# gradients: the clipped sums of one batch, through the kit's one per-example clipped-gradient
# dispatcher (privacy.clipping.clipped_grad_sum): generic vmap, or the model's ghost path
# ------------------------------------------------------------------------------------------------
class _Sums(NamedTuple):
    """One batch's sums before noise: clipped private sums ``theta``/``w``, the exact public sums
    ``public = (theta part, w part)`` (added after the noise; ``None`` without a public loss) and
    the clipped indicators ``c_theta``/``c_w [B]``."""

    theta: PyTree
    w: PyTree
    c_theta: jax.Array
    c_w: jax.Array
    public: tuple | None


def _clipped(norms: jax.Array, clip: Any) -> jax.Array:
    """Indicator ``[B]`` of the examples whose gradient was clipped (``norm > clip``)."""
    return (norms > jnp.asarray(clip, norms.dtype)).astype(norms.dtype)


def _generic_sums(private_loss, public_loss, hparams: SGDAHparams, theta, w, batch, mask) -> _Sums:
    """``vmap(grad)`` per-example gradients in ``(theta, w)`` (one pass), each part clipped to its
    own norm by :func:`dpfair_jax.privacy.clipping.clipped_grad_sum`; the public part as one
    batched exact gradient."""
    pub = None if public_loss is None else (lambda p, ex: public_loss(p[0], p[1], ex))
    res = _clip.clipped_grad_sum(lambda p, ex: private_loss(p[0], p[1], ex), (theta, w), batch,
                                 clip_norm=(hparams.clip_theta, hparams.clip_w), weights=mask,
                                 path="vmap", public=pub)
    (s_th, s_w), (n_th, n_w) = res.sums, res.norms
    return _Sums(s_th, s_w, _clipped(n_th, hparams.clip_theta), _clipped(n_w, hparams.clip_w), res.public)


def _model_sums(model, path: str, shape_out, private_loss, public_loss, hparams: SGDAHparams, theta, w,
                batch, mask) -> _Sums:
    """Losses of the model's outputs: the theta sums from the dispatcher's path for ``model``
    (GLM, dense-stack or CNN ghost norms; exact public part in the same pass), then the w sums
    by ``vmap(grad)`` in ``w`` at the batch's outputs."""
    def out_loss(fn):
        return lambda out, ex: jax.vmap(fn, in_axes=(0, None, 0))(shape_out(out), w, ex)

    x = batch["x"]
    res = _clip.clipped_grad_sum(model, theta, (x, batch), clip_norm=hparams.clip_theta, weights=mask,
                                 path=path, loss=out_loss(private_loss),
                                 public=None if public_loss is None else out_loss(public_loss))
    z = shape_out(res.outputs if res.outputs is not None else model.apply(theta, x))
    pub = None if public_loss is None else (lambda ww, zi, ex: public_loss(zi, ww, ex))
    res_w = _clip.clipped_grad_sum(lambda ww, zi, ex: private_loss(zi, ww, ex), w, (z, batch),
                                   clip_norm=hparams.clip_w, weights=mask, path="vmap", public=pub)
    public = None if public_loss is None else (res.public, res_w.public)
    return _Sums(res.sums, res_w.sums, _clipped(res.norms, hparams.clip_theta),
                 _clipped(res_w.norms, hparams.clip_w), public)


def _rows(out: jax.Array) -> jax.Array:
    """GLM logits ``[B, out]`` (``models.linear`` squeezes one output to ``[B]``)."""
    return out.reshape(out.shape[0], -1)


def _sums_fn(theta0: PyTree, private_loss, public_loss, hparams: SGDAHparams, linear: bool, cnn_model: Any,
             model: Any = None):
    """The gradient path: ``(theta, w, batch, mask) -> _Sums``."""
    if sum((bool(linear), cnn_model is not None, model is not None)) > 1:
        raise ValueError("pass at most one of linear=True, cnn_model and model.")
    if linear:
        if not (isinstance(theta0, dict) and "w" in theta0 and set(theta0) <= {"w", "b"}
                and jnp.ndim(theta0["w"]) == 2):
            raise ValueError('linear=True needs theta as {"w": [d, out], "b": [out]} (models.logistic layout).')
        glm = _models.linear(int(jnp.shape(theta0["w"])[1]), fit_intercept="b" in theta0)
        spec = (glm, "ghost", _rows)
    elif cnn_model is not None:
        if getattr(cnn_model, "name", None) != "cnn":
            raise ValueError("cnn_model must be a dpfair_jax.models.cnn(...) model.")
        spec = (cnn_model, "ghost", lambda out: out)
    elif model is not None:
        if not isinstance(model, _models.Model):
            raise ValueError(f"model must be a dpfair_jax.models.Model, got {type(model).__name__}.")
        spec = (model, "auto", lambda out: out)
    else:
        return lambda th, w, b, mk: _generic_sums(private_loss, public_loss, hparams, th, w, b, mk)
    return lambda th, w, b, mk: _model_sums(*spec, private_loss, public_loss, hparams, th, w, b, mk)


# ------------------------------------------------------------------------------------------------
# noise and update
# ------------------------------------------------------------------------------------------------
def _noisy_sums(key: jax.Array, sums: _Sums, std_theta: jax.Array, std_w: jax.Array):
    """Gaussian noise on the clipped sums (:func:`dpfair_jax.privacy.mechanisms.gaussian_mechanism`,
    independent draws for theta and w, one key per leaf), then the exact public sums."""
    k1, k2 = jax.random.split(key)
    s_th = _mech.gaussian_mechanism(k1, sums.theta, std_theta)
    s_w = _mech.gaussian_mechanism(k2, sums.w, std_w)
    if sums.public is not None:
        p_th, p_w = sums.public
        s_th = jax.tree_util.tree_map(jnp.add, s_th, p_th)
        s_w = jax.tree_util.tree_map(jnp.add, s_w, p_w)
    return s_th, s_w


def _update(theta: PyTree, w: PyTree, s_th: PyTree, s_w: PyTree, hparams: SGDAHparams, config: SGDAConfig):
    """Simultaneous step: ``theta - lr_theta g / m`` and ``Proj_W(w + lr_w h / m)``."""
    m = config.batch_size
    new_theta = jax.tree_util.tree_map(lambda a, g: a - hparams.lr_theta * g / m, theta, s_th)
    new_w = project(
        jax.tree_util.tree_map(lambda a, g: a + hparams.lr_w * g / m, w, s_w),
        hparams.radius, config.projection,
    )
    return new_theta, new_w


def _step_stats(trunc: jax.Array, sums: _Sums, mask: jax.Array) -> tuple:
    denom = jnp.maximum(jnp.sum(mask), 1.0)
    return trunc.astype(jnp.float32), jnp.sum(sums.c_theta * mask) / denom, jnp.sum(sums.c_w * mask) / denom


def _check_noise_with_clip(hparams: Any) -> None:
    """A positive noise multiplier on an unclipped (``clip = inf``) update would add infinite noise."""
    for z_name, c_name in (("noise_theta", "clip_theta"), ("noise_w", "clip_w")):
        z, c = getattr(hparams, z_name), getattr(hparams, c_name)
        if v.is_traced(z, c):
            continue
        if np.any(np.isinf(np.asarray(c, np.float64)) & (np.asarray(z, np.float64) > 0)):
            raise ValueError(f"{c_name}=inf (no clipping) with {z_name} > 0 adds infinite noise; use a "
                             f"finite {c_name} or {z_name}=0.")


def check_hparams(hparams: SGDAHparams) -> SGDAHparams:
    """Refuse, on the host and before any compute, every :class:`SGDAHparams` field out of range:
    step sizes ``> 0`` finite; clip norms and radius ``> 0`` (``inf`` allowed: no clipping / no
    projection; an infinite clip only with zero noise); noise multipliers ``>= 0`` finite. Traced
    values are skipped (checked where they were made). Returns ``hparams``."""
    if not isinstance(hparams, SGDAHparams):
        raise ValueError(f"hparams must be an sgda.SGDAHparams, got {type(hparams).__name__}.")
    return hparams.validate()


def _check_run(key: jax.Array, n: int, hparams: SGDAHparams, config: SGDAConfig) -> None:
    config.validate(n)
    v.check_threefry_key(key)
    check_hparams(hparams)


@full_precision
def dpsgda(
    key: jax.Array,
    data: PyTree,
    theta0: PyTree,
    w0: PyTree,
    hparams: SGDAHparams,
    config: SGDAConfig,
    *,
    private_loss: Callable[..., jax.Array],
    public_loss: Callable[..., jax.Array] | None = None,
    batch_key: jax.Array | None = None,
    validate: bool = True,
    linear: bool = False,
    cnn_model: Any = None,
    model: Any = None,
) -> SGDAResult:
    """Noisy DP-SGDA (Algorithm 2): simultaneous projected descent-ascent with clipping and noise.
    Lower level: use fit (this records no spend; it takes a public part and a shared batch key for
    DP-FERMI and PF-LD, which account their runs themselves).

    Args:
      key: threefry key for the noise (and the batches unless ``batch_key`` is given).
      data: pytree of arrays with a leading axis of ``n`` examples.
      theta0, w0: initial min and max variables (pytrees).
      hparams: :class:`SGDAHparams` (traced).
      config: :class:`SGDAConfig` (static).
      private_loss: ``f_priv(theta, w, example) -> scalar`` for ONE example; its per-example
        gradients in ``theta`` and ``w`` are clipped (to ``clip_theta``/``clip_w``) and noised.
      public_loss: optional ``f_pub(theta, w, example)`` whose gradients are used exactly.
      batch_key: key for the batch sampling only. Passing the same ``batch_key`` to runs vmapped
        over hyperparameters shares their batches (the gather is then computed once).
      linear: generalized-linear fast path. ``theta`` is ``{"w": [d, out], "b": [out]}`` (the
        layout of ``models.logistic``/``multinomial_logistic``; ``"b"`` optional), ``example["x"]``
        the features, and both losses take the example's logits instead of theta:
        ``f(logits [out], w, example)``. Per-example theta-gradients are ``x_i (x) df/dlogits_i``,
        so their norms are ``|df/dz_i| sqrt(|x_i|^2 + 1)`` (exact, never materialized) and the
        clipped sum is one matmul ``c @ x`` (the same numbers as the generic path up to float
        rounding; the dispatcher's GLM path for ``models.linear`` with theta's shape).
      cnn_model: CNN ghost-norm path. ``theta`` are the params of this ``models.cnn`` model
        (float32; see ``privacy.ghost.cnn_matches_apply``), ``example["x"]`` its inputs, and both
        losses take the example's logits (as ``model.apply`` returns them for one example) instead
        of theta, as with ``linear``. Per-example theta-gradient norms come from one ghost backward
        pass (``privacy.ghost.cnn_ghost_backward``) and the clipped sum from
        ``cnn_weighted_grad``; ``w``-gradients from the logits; the public part is one batched
        gradient (through ``ghost.cnn_forward``). The same numbers as the generic path up to
        float rounding.
      model: any ``models.Model``: both losses take the example's outputs (as ``model.apply``
        returns them for one example) and theta are its params; the per-example path is the one
        :func:`dpfair_jax.privacy.clipping.clipped_grad_sum` picks for it (GLM, dense-stack or CNN
        ghost norms where the model declares its layers, ``vmap(grad)`` otherwise).

    Every path computes its clipped sums with
    :func:`dpfair_jax.privacy.clipping.clipped_grad_sum`: theta's from the model's path (or, on the
    generic path, theta's and w's from one ``vmap(grad)`` with a clip norm per part), w's by
    ``vmap(grad)`` in ``w`` at the batch's outputs; public parts summed exactly and added after
    the noise.

    Returns:
      :class:`SGDAResult`.

    Privacy: see the module docstring. The guarantee covers the private part only; the public part
    must not depend on the protected data.
    """
    n = _n_rows(data)
    if validate:
        _check_run(key, n, hparams, config)
    k_batch, k_noise, k_iter = jax.random.split(key, 3)
    k_batch = k_batch if batch_key is None else batch_key
    t_hat = _mm.random_iterate(k_iter, config.steps)  # returned iterate index for "random"
    fct = float(config.sensitivity_factor)
    std_theta = _mm.clipped_sum_std(hparams.noise_theta, hparams.clip_theta, fct)
    std_w = _mm.clipped_sum_std(hparams.noise_w, hparams.clip_w, fct)
    sums_fn = _sums_fn(theta0, private_loss, public_loss, hparams, linear, cnn_model, model)

    def step(carry, t, idx, mask, trunc):
        theta, w, sel_theta, sel_w = carry
        batch = jax.tree_util.tree_map(lambda a: a[idx], data)
        sums = sums_fn(theta, w, batch, mask)
        s_th, s_w = _noisy_sums(jax.random.fold_in(k_noise, t), sums, std_theta, std_w)
        new_theta, new_w = _update(theta, w, s_th, s_w, hparams, config)
        if config.iterate == "random":
            pick = (t + 1) == t_hat
            sel_theta = jax.tree_util.tree_map(lambda a, b: jnp.where(pick, b, a), sel_theta, new_theta)
            sel_w = jax.tree_util.tree_map(lambda a, b: jnp.where(pick, b, a), sel_w, new_w)
        return (new_theta, new_w, sel_theta, sel_w), _step_stats(trunc, sums, mask)

    final, (trunc, cth, cw), report = _scan_batches(step, (theta0, w0, theta0, w0), k_batch, n, config)
    theta, w, sel_theta, sel_w = final
    diag = {
        "truncated_steps": jnp.sum(trunc),
        "clipped_frac_theta": jnp.mean(cth),
        "clipped_frac_w": jnp.mean(cw),
    }
    if config.iterate == "random":
        return SGDAResult(sel_theta, sel_w, theta, w, diag, report)
    return SGDAResult(theta, w, theta, w, diag, report)


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


def _relation(config: SGDAConfig) -> str:
    """Poisson sampling: add/remove (``n`` public); fixed-size and shuffled batches: replace-one."""
    return "add_remove" if config.sampling == "poisson" else "replace_one"


def _effective(config: SGDAConfig) -> float:
    """Noise multiplier relative to the clipped sum's sensitivity under :func:`_relation`, per unit
    of ``hparams.noise_*``: ``sensitivity_factor / replace_factor(relation)``."""
    return float(config.sensitivity_factor) / _rel.replace_factor(_relation(config))


def spend(config: SGDAConfig, sizes: Any, hparams: SGDAHparams) -> _acc.PrivacySpend:
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of ``fit(key, data, hparams, config)``
    at ``config.delta``: both noisy updates of a step released on one sampled batch, with effective
    multipliers ``noise_* x sensitivity_factor / replace_factor(relation)``.

    Poisson sampling: the Poisson-subsampled Gaussian (``q = batch_size / n``), add/remove, RDP,
    plus the padding's truncation probability in delta; fixed-size batches: sampling without
    replacement, replace-one, RDP; shuffled epochs: no amplification, ``epochs`` composed Gaussians
    with their exact curve, replace-one. ``sizes``: the training size ``n`` (an int, or per-group
    sizes that sum to it). Zero noise on either update: ``epsilon = inf``.

    Privacy: the (epsilon, delta) of the run for whole records (unit ``"example"``).
    """
    n = v.training_size(sizes)
    config.validate(n)
    check_hparams(hparams)
    return _spend(config, n, v.host_float("noise_theta", hparams.noise_theta),
                  v.host_float("noise_w", hparams.noise_w))


def _spend(config: SGDAConfig, n: int, zt: float, zw: float) -> _acc.PrivacySpend:
    """:func:`spend` on checked inputs (host multipliers ``zt``, ``zw``)."""
    relation, T, m = _relation(config), config.steps, config.batch_size
    notes = f"DP-SGDA: {T} steps, {config.sampling} batches of {m} (n = {n}), descent and ascent released"
    if zt == 0 or zw == 0:
        return _acc.PrivacySpend(math.inf, config.delta, relation=relation, unit="example",
                                 notes=notes + "; zero noise: no guarantee")
    eff = _effective(config)
    zt_e, ratio = zt * eff, zw / zt
    if config.sampling == "shuffle":
        spe = _smp.steps_per_epoch(n, m)
        mu = _mm.combined_shift(zt_e, zw * eff)
        eps = _acc.membership_visible_epsilon(
            mu, config.delta, _acc.participation_distribution(T, "shuffle", steps_per_epoch=spe))
        event = _acc.shuffled_event(zt_e, T, spe, relative_noise=(1.0, ratio))
        return _acc.PrivacySpend(eps, config.delta, event=event, relation=relation, unit="example",
                                 accountant="exact", notes=notes + "; shuffled epochs without amplification")
    poisson = config.sampling == "poisson"
    event = _acc.dpsgd_event(zt_e, m / n, T, sampling="poisson" if poisson else "without_replacement",
                             relative_noise=(1.0, ratio), dataset_size=None if poisson else n)
    eps = _acc.epsilon_of_event(event, config.delta, accountant="rdp")
    extra = 0.0
    if poisson:
        B = config.padded_batch(n)
        extra = _smp.truncation_delta(n, m / n, B, T, eps) if B < n else 0.0
        notes += f"; Poisson padding {B} rows (truncation delta {extra:.2e} included)"
    return _acc.PrivacySpend(eps, min(config.delta + extra, 0.999999), event=event, relation=relation,
                             unit="example", accountant="rdp", notes=notes)


def calibrate(config: SGDAConfig, sizes: Any, target: tuple[float, float], *,
              hparams: SGDAHparams | None = None) -> SGDAHparams:
    """``hparams`` (default :class:`SGDAHparams`) with ``noise_theta = z`` and ``noise_w =
    config.w_relative * z``, ``z`` the smallest (to the solver's tolerance) with
    ``spend(config, sizes, result).epsilon <= target[0]``.

    ``target = (epsilon, delta)`` with ``delta == config.delta``
    (:func:`~dpfair_jax.privacy.accounting.calibration_target`). ``sizes`` as in :func:`spend`.

    Privacy: the returned multipliers make :func:`fit` (epsilon, delta)-DP as :func:`spend` states.
    """
    n = v.training_size(sizes)
    config.validate(n)
    eps, delta = _acc.calibration_target(target, config.delta)
    hparams = SGDAHparams() if hparams is None else hparams
    if not isinstance(hparams, SGDAHparams):
        raise ValueError(f"hparams must be an sgda.SGDAHparams, got {type(hparams).__name__}.")
    w, m, T = float(config.w_relative), config.batch_size, config.steps
    if config.sampling == "shuffle":
        part = _acc.participation_distribution(T, "shuffle", steps_per_epoch=_smp.steps_per_epoch(n, m))
        z_eff = _mm.multiplier_for_shift(_acc.calibrate_membership_visible(eps, delta, part), w)
    else:
        poisson = config.sampling == "poisson"
        z_eff = _acc.calibrate_noise_multiplier(
            eps, delta, m / n, T, sampling="poisson" if poisson else "without_replacement",
            relative_noise=(1.0, w), dataset_size=None if poisson else n)
    z = _acc.step_up_until(lambda z: _spend(config, n, z, w * z).epsilon, z_eff / _effective(config), eps)
    return dataclasses.replace(hparams, noise_theta=z, noise_w=w * z)
