"""DP-SGDA's static settings (:class:`SGDAConfig`), traced hyperparameters (:class:`SGDAHparams`), results, and
the host-side checks run before any compute."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.algorithms._trio import hparams_pytree
from dpfair_jax.privacy import sampling as _smp


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
