"""DP-SGDA's run (paper 004, Algorithm 2): the batches each step uses, the clipped sums of one batch, the
Gaussian noise on them and the simultaneous update, all in one ``lax.scan`` (:func:`dpsgda`).

Privacy: each step releases the two noisy clipped sums of one sampled batch; the accounting is
:mod:`dpfair_jax.algorithms.sgda.ledger`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax import models as _models
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import minmax_noise as _mm
from dpfair_jax.privacy import sampling as _smp
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.algorithms.sgda.config import (
    PyTree,
    SGDAConfig,
    SGDAHparams,
    SGDAResult,
    _check_run,
    _n_rows,
    project,
)


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

def _keep_if(pick: jax.Array, kept: PyTree, new: PyTree) -> PyTree:
    """``new`` where ``pick`` else ``kept``, leaf by leaf (the random iterate's selection)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pick, b, a), kept, new)


def _step_fn(data: PyTree, sums_fn: Callable, k_noise: jax.Array, std_theta: jax.Array, std_w: jax.Array,
             t_hat: jax.Array, hparams: SGDAHparams, config: SGDAConfig) -> Callable:
    """One step of the scan, ``(carry, t, indices, mask, truncated) -> (carry, stats)``: the batch's
    clipped sums, their noise (key ``fold_in(k_noise, t)``), the simultaneous update and, for
    ``iterate="random"``, the selected iterate; the run's static choices are the arguments."""

    def step(carry, t, idx, mask, trunc):
        theta, w, sel_theta, sel_w = carry
        batch = jax.tree_util.tree_map(lambda a: a[idx], data)
        sums = sums_fn(theta, w, batch, mask)
        s_th, s_w = _noisy_sums(jax.random.fold_in(k_noise, t), sums, std_theta, std_w)
        new_theta, new_w = _update(theta, w, s_th, s_w, hparams, config)
        if config.iterate == "random":
            pick = (t + 1) == t_hat
            sel_theta, sel_w = _keep_if(pick, sel_theta, new_theta), _keep_if(pick, sel_w, new_w)
        return (new_theta, new_w, sel_theta, sel_w), _step_stats(trunc, sums, mask)

    return step


def _result(final: tuple, stats: tuple, report: Any, config: SGDAConfig) -> SGDAResult:
    """The :class:`SGDAResult` of the scan's final carry and per-step stats."""
    theta, w, sel_theta, sel_w = final
    trunc, cth, cw = stats
    diag = {"truncated_steps": jnp.sum(trunc), "clipped_frac_theta": jnp.mean(cth), "clipped_frac_w": jnp.mean(cw)}
    if config.iterate == "random":
        return SGDAResult(sel_theta, sel_w, theta, w, diag, report)
    return SGDAResult(theta, w, theta, w, diag, report)


@full_precision
def dpsgda(key: jax.Array, data: PyTree, theta0: PyTree, w0: PyTree, hparams: SGDAHparams, config: SGDAConfig,
           *, private_loss: Callable[..., jax.Array], public_loss: Callable[..., jax.Array] | None = None,
           batch_key: jax.Array | None = None, validate: bool = True, linear: bool = False,
           cnn_model: Any = None, model: Any = None) -> SGDAResult:
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
    step = _step_fn(data, sums_fn, k_noise, std_theta, std_w, t_hat, hparams, config)
    final, stats, report = _scan_batches(step, (theta0, w0, theta0, w0), k_batch, n, config)
    return _result(final, stats, report, config)
