"""The (gamma1, gamma2) mitigation of paper 001 (App. C.4, Fig. 12) -- a **reconstruction**.

The supplement states only the intent: two penalties added to DP-SGD, gamma1 acting on the
clipping term R^clip and gamma2 on the noise term R^noise, (1, 1) being good on all datasets; the
explicit objective is in the main text, which is not available. This module implements the reading
of the engineering notes (I.7) in a form that can be privatized and accounted:

* Theorem 3: the group with larger gradient norms suffers the larger R^clip; Theorem 4/5: the group
  with larger Hessian trace suffers the larger R^noise, and the trace grows with the prediction
  uncertainty ``u(x) = 1 - sum_k f_k(x)^2`` (App. D: the output-layer block is ``u(x) sum_j O_j^2``).
* Penalized batch objective ``L(theta; B) + gamma1 sum_a |m_a - m| + gamma2 sum_a |t_a - t|`` with
  ``m_a`` the mean per-example gradient norm ``||g_i||`` over group ``a`` of the batch (``m`` over
  the batch) and ``t_a`` the mean uncertainty ``u(x_i)`` (``t`` over the batch).
* Its gradient, with the signs and group fractions **plugged in from a private release**, is a sum
  of per-example terms: example ``i`` in group ``a`` gets
  ``g_i + gamma1 c1_a nabla ||g_i|| + gamma2 c2_a nabla u(x_i)``, where
  ``c_a = sign(stat_a - stat) / p_a - sum_b sign(stat_b - stat)`` is the derivative of
  ``sum_b |stat_b - stat|`` with respect to example ``i``'s contribution times the batch size
  (``nabla ||g_i|| = H_i g_i / ||g_i||``, a per-example Hessian-vector product).
* These augmented per-example gradients are clipped, summed and noised exactly as in DP-SGD.

Private statistics ("group-weighted noise"): each example contributes the vector
``(1, min(||g_i||, C) / C, u(x_i) / (1 - 1/K))`` (every entry in [0, 1], L2 norm <= sqrt 3) to
its group's row; the ``[K, 3]`` group sums get ``N(0, (z_s sqrt 3)^2)`` noise
(``privacy.mechanisms.gaussian_mechanism``), from which the noisy counts, fractions ``p_a``, mean
clipped norms and mean uncertainties are formed (post-processing). ``m_a`` is thus measured in
units of ``C`` from clipped norms.

Privacy: per step, two Gaussian mechanisms on the same Poisson-sampled batch, composed inside
the sampled event: the statistics (sensitivity sqrt 3, multiplier ``stats_noise_multiplier``) and
then, adaptively, the clipped sum of augmented gradients (sensitivity ``C``, multiplier
``noise_multiplier``; the coefficients ``c_a`` depend on the data only through the first
release). Add/remove-one neighbours, unit = example; :func:`privacy` accounts both (with the
RDP or PLD accountant). The statistics are charged unless the caller states ``gamma1 = gamma2 =
0`` (then they are computed but multiplied by exact zeros, so the parameters do not depend on
them). The padded Poisson batch (``max_batch_size``) comes from one helper,
:func:`padded_batch_size`, in :func:`train` and :func:`privacy`, so the truncation charge is that
of the batch width the run used. The statistics' noise key is ``fold_in(k, 2)`` of the step key
``k`` (the update's sampling and noise keys are ``split(k)``): distinct from every key the
gradient noise draws from (``fold_in(k_noise, i)`` equals ``split(k_noise, L)[i]``, the noise key
of parameter leaf ``i``, so it must not be used).

Caveat: this is a private *surrogate* of the reconstructed penalty (noisy plug-in signs and
fractions, ``psi_a`` dropped per Fig. 10, the trace replaced by its uncertainty proxy), not the
authors' method; the statistics' noise also costs budget, so at equal epsilon the model update
gets a larger noise multiplier than plain DP-SGD.

With ``gamma1 = gamma2 = 0`` :func:`train` equals ``dpsgd.train(..., per_example="vmap")``
bit for bit under the same key: same key splitting (the statistics' key is
``fold_in(k, 2)``), same batches, same noise draws, and the penalty terms enter as exact zeros.

Per-example gradients always come from ``vmap(grad)``, for every model (no ghost norms, unlike
``dpsgd.train`` for GLMs, MLPs and CNNs): the clipped vector ``g_i + gamma1 c1_a H_i g_i / ||g_i||
+ gamma2 c2_a nabla u(x_i)`` contains a per-example Hessian-vector product of ``g_i`` itself,
which is not a function of one backward pass's per-layer (input, output-gradient) pairs, so its
norm has no ghost identity and the augmented gradient has to be formed example by example.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import optax

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.algorithms import dpsgd as _dpsgd
from dpfair_jax.analysis.hessian import prediction_uncertainty
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.privacy.precision import full_precision

__all__ = ["train", "privacy", "padded_batch_size", "penalty_coefficients", "RECONSTRUCTION_NOTE",
           "STATS_SENSITIVITY", "MitigationConfig", "MitigationHparams", "MitigationResult", "fit", "spend",
           "calibrate"]

RECONSTRUCTION_NOTE = ("paper 001 (gamma1, gamma2) mitigation: reconstruction (objective not in the "
                       "supplement); private plug-in surrogate, see dpfair_jax.algorithms.mitigation")
STATS_SENSITIVITY = math.sqrt(3.0)


class _Cfg(NamedTuple):
    model: Any
    loss: Any
    n: int
    batch_size: int
    max_batch_size: int
    steps: int
    num_groups: int
    num_outputs: int
    optimizer: Any
    diagnostics: bool
    stats_every: int = 0  # 0: statistics of every step's batch; k >= 1: of the full data every k steps


def penalty_coefficients(stat: jax.Array, fractions: jax.Array) -> jax.Array:
    """``c_a = sign(stat_a - stat) / p_a - sum_b sign(stat_b - stat)`` with ``stat = sum_a p_a stat_a``.

    ``(1/B) sum_i c_{a(i)} d_i`` is the gradient of ``sum_a |stat_a - stat|`` when ``stat_a`` is
    the mean over group ``a`` of per-example quantities with gradients ``d_i`` (signs held fixed).
    """
    p = jnp.asarray(fractions)
    pop = jnp.sum(p * stat)
    sgn = jnp.sign(stat - pop)
    return sgn / jnp.maximum(p, 1e-6) - jnp.sum(sgn)


def _safe_norm(tree) -> jax.Array:
    sq = sum(jnp.sum(leaf * leaf) for leaf in jax.tree_util.tree_leaves(tree))
    return jnp.sqrt(jnp.maximum(sq, 1e-24))


def padded_batch_size(n: int, batch_size: int, steps: int, max_batch_size: int | None = None) -> int:
    """The static width of the padded Poisson batch of a :func:`train` run (and of its truncation
    charge in :func:`privacy`): ``max_batch_size`` if given (at least ``batch_size``), else
    ``sampling.max_batch_size_for(n, batch_size / n, steps)`` (overflow probability 1e-9 over the
    run); never more than ``n``.

    Privacy: draws above this width are dropped; :func:`privacy` charges
    ``sampling.truncation_delta`` at exactly this width.
    """
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    steps = v.check_int("steps", steps, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= the number of rows n ({n}).")
    if max_batch_size is None:
        max_batch_size = _sampling.max_batch_size_for(n, batch_size / n, steps)
    return min(v.check_int("max_batch_size", max_batch_size, minimum=batch_size), n)


@functools.partial(jax.jit, static_argnums=(0,))
def _program(cfg: _Cfg, key, params, x, y, s, data_mask, clip_norm, noise_multiplier,
             stats_noise_multiplier, gamma1, gamma2, learning_rate, penalty_clip_norm=None):
    # float32 at least (as dpsgd.train), whatever precision x comes in
    dt = jnp.promote_types(jnp.result_type(x), jnp.float32)
    x = x.astype(dt) if jnp.result_type(x) != dt else x
    clip_norm = jnp.asarray(clip_norm, dt)
    noise_multiplier = jnp.asarray(noise_multiplier, dt)
    separate = penalty_clip_norm is not None  # clip the loss and the penalty parts separately
    pclip = jnp.asarray(penalty_clip_norm, dt) if separate else None
    std = noise_multiplier * (clip_norm + pclip if separate else clip_norm)
    denominator = jnp.asarray(cfg.batch_size, dt)
    q = cfg.batch_size / cfg.n
    opt = cfg.optimizer if isinstance(cfg.optimizer, optax.GradientTransformation) else cfg.optimizer(learning_rate)
    opt_state = opt.init(params)
    k_cls = max(cfg.num_outputs, 2)
    u_max = 1.0 - 1.0 / k_cls
    stats_std = jnp.asarray(stats_noise_multiplier, dt) * STATS_SENSITIVITY
    g1 = jnp.asarray(gamma1, dt)
    g2 = jnp.asarray(gamma2, dt)

    def probs_one(p, xi):
        out = cfg.model.apply(p, xi)
        return jax.nn.sigmoid(out) if cfg.num_outputs == 1 else jax.nn.softmax(out)

    def grad_norm_i(p, xi, yi):
        return _safe_norm(jax.grad(cfg.loss)(p, xi, yi))

    def uncert_i(p, xi):
        return prediction_uncertainty(probs_one(p, xi)[None])[0]

    def group_stats(p, xs, ss, mask, k_stats):
        """Noisy [K, 3] sums of (1, clipped norm / C, uncertainty / u_max) and their post-processing."""
        norms = _clip.per_example_norms(jax.vmap(jax.grad(cfg.loss), in_axes=(None, 0, 0))(p, xs[0], xs[1]))
        unc = jax.vmap(uncert_i, in_axes=(None, 0))(p, xs[0])
        contrib = jnp.stack([jnp.ones_like(norms), jnp.minimum(norms, clip_norm) / clip_norm,
                             jnp.clip(unc / u_max, 0.0, 1.0)], axis=1) * mask[:, None]
        sums = jax.nn.one_hot(ss, cfg.num_groups, dtype=dt).T @ contrib  # [K, 3]
        noisy = _mech.gaussian_mechanism(k_stats, sums, stats_std)
        cnt = jnp.maximum(noisy[:, 0], 1.0)
        frac = cnt / jnp.sum(cnt)
        return noisy, frac, jnp.clip(noisy[:, 1] / cnt, 0.0, 1.0), jnp.clip(noisy[:, 2] / cnt, 0.0, 1.0)

    full_mask = jnp.ones((cfg.n,), dt) if data_mask is None else data_mask.astype(dt)
    seen: dict = {}  # what the traced step samples, for the run's SamplingReport

    def step(carry, k):
        if cfg.stats_every:  # statistics of the full data, refreshed every stats_every steps
            params, opt_state, t, held = carry
            held = jax.lax.cond(t % cfg.stats_every == 0,
                                lambda: group_stats(params, (x, y), s, full_mask, jax.random.fold_in(k, 2)),
                                lambda: held)
        else:
            params, opt_state = carry
        k_sample, k_noise = jax.random.split(k)
        sample = _sampling.poisson_sample(k_sample, cfg.n, q, cfg.max_batch_size)
        idx, mask = sample.indices, sample.mask.astype(dt)
        seen.update(sampler="poisson", sample_rate=q, batch_width=int(idx.shape[0]), dataset_size=cfg.n)
        if data_mask is not None:
            mask = mask * data_mask[idx].astype(dt)
        xb, yb, sb = x[idx], y[idx], s[idx]
        losses, grads = jax.vmap(jax.value_and_grad(cfg.loss), in_axes=(None, 0, 0))(params, xb, yb)
        norms = _clip.per_example_norms(grads)
        if cfg.stats_every:
            noisy, frac, m_a, t_a = held
        # --- private group statistics (group-weighted Gaussian noise on clipped contributions)
        unc = jax.vmap(uncert_i, in_axes=(None, 0))(params, xb)
        contrib = jnp.stack([jnp.ones_like(norms), jnp.minimum(norms, clip_norm) / clip_norm,
                             jnp.clip(unc / u_max, 0.0, 1.0)], axis=1) * mask[:, None]
        oh = jax.nn.one_hot(sb, cfg.num_groups, dtype=dt)
        sums = oh.T @ contrib  # [K, 3]
        # its own key: fold_in(k_noise, i) would be split(k_noise, L)[i], the gradient noise of leaf i
        if not cfg.stats_every:
            noisy = _mech.gaussian_mechanism(jax.random.fold_in(k, 2), sums, stats_std)
            cnt = jnp.maximum(noisy[:, 0], 1.0)
            frac = cnt / jnp.sum(cnt)
            m_a = jnp.clip(noisy[:, 1] / cnt, 0.0, 1.0)
            t_a = jnp.clip(noisy[:, 2] / cnt, 0.0, 1.0)
        c1 = penalty_coefficients(m_a, frac)[sb]
        c2 = penalty_coefficients(t_a, frac)[sb]
        # --- per-example penalty gradients (zero contributions when gamma1 = gamma2 = 0)
        pg1 = jax.vmap(jax.grad(grad_norm_i), in_axes=(None, 0, 0))(params, xb, yb)
        pg2 = jax.vmap(jax.grad(uncert_i), in_axes=(None, 0))(params, xb)
        w1 = g1 * c1
        w2 = g2 * c2

        def combine(g, a, b):
            shp = (-1,) + (1,) * (g.ndim - 1)
            return g + (w1.reshape(shp) * a + w2.reshape(shp) * b)

        if separate:  # loss part clipped to C, penalty part to C_p: sensitivity C + C_p
            pen = jax.tree_util.tree_map(lambda a, b: combine(jnp.zeros_like(a), a, b), pg1, pg2)
            cf = _clip.clip_factors(norms, clip_norm, _clip.example_size(grads)) * mask
            cfp = _clip.clip_factors(_clip.per_example_norms(pen), pclip, _clip.example_size(pen)) * mask
            sums_g = jax.tree_util.tree_map(jnp.add, _clip.weighted_sum(grads, cf), _clip.weighted_sum(pen, cfp))
        else:
            aug = jax.tree_util.tree_map(combine, grads, pg1, pg2)
            norms_aug = _clip.per_example_norms(aug)
            cf = _clip.clip_factors(norms_aug, clip_norm, _clip.example_size(aug)) * mask
            sums_g = _clip.weighted_sum(aug, cf)
        noisy_g = _mech.gaussian_mechanism(k_noise, sums_g, std)
        grad = jax.tree_util.tree_map(lambda g: g / denominator, noisy_g)
        updates, opt_state = opt.update(grad, opt_state, params)
        params = optax.apply_updates(params, updates)
        if cfg.diagnostics:
            bsz = jnp.maximum(jnp.sum(mask), 1.0)
            diag = {"loss": jnp.sum(losses * mask) / bsz, "mean_grad_norm": jnp.sum(norms * mask) / bsz,
                    "private_group_clipped_norm": m_a * clip_norm, "private_group_uncertainty": t_a * u_max,
                    "private_group_fraction": frac, "private_group_sums": noisy}
        else:
            diag = {}
        if cfg.stats_every:
            return (params, opt_state, t + 1, held), diag
        return (params, opt_state), diag

    keys = jax.random.split(key, cfg.steps + 1)
    if cfg.stats_every:
        k_cnt = cfg.num_groups
        held0 = (jnp.zeros((k_cnt, 3), dt), jnp.full((k_cnt,), 1.0 / k_cnt, dt), jnp.zeros((k_cnt,), dt),
                 jnp.zeros((k_cnt,), dt))
        (params, *_), diag = jax.lax.scan(step, (params, opt_state, jnp.int32(0), held0), keys[:-1])
    else:
        (params, _), diag = jax.lax.scan(step, (params, opt_state), keys[:-1])
    return params, diag, _sampling.SamplingReport(steps=int(keys[:-1].shape[0]), **seen)  # scan length


@full_precision
def _train(key: jax.Array, model: _models.Model, params: Any, data: Dataset, *, gamma1: Any,
          gamma2: Any, clip_norm: Any, noise_multiplier: Any, stats_noise_multiplier: Any,
          learning_rate: Any, batch_size: int, steps: int | None = None, epochs: int | None = None,
          optimizer: Any = optax.sgd, loss: Any = None, max_batch_size: int | None = None,
          diagnostics: bool = True, stats_every: int = 0, penalty_clip_norm: Any = None) -> tuple[Any, dict]:
    """DP-SGD with the (gamma1, gamma2) fairness penalties (reconstruction; see the module doc).

    ``gamma1``, ``gamma2``, ``clip_norm``, ``noise_multiplier``, ``stats_noise_multiplier`` and
    ``learning_rate`` are traced (one program for a whole gamma grid under ``vmap``). Poisson
    sampling with expected batch ``batch_size`` (the accounting of :func:`privacy`).
    ``max_batch_size``: the padded batch width (default and validation: :func:`padded_batch_size`;
    pass the same value to :func:`privacy`). Diagnostics ``private_group_*`` are the released
    (noisy) statistics: ``private_group_sums [steps, K, 3]`` the noisy sums of (1, clipped norm /
    C, uncertainty / (1 - 1/K)) per group, the others post-processing of them; ``loss`` and
    ``mean_grad_norm`` are not private.

    ``stats_every = k >= 1``: the group statistics are released from the **full data** (every row,
    no sampling) at steps 0, k, 2k, ... and held in between (default 0: from each step's batch);
    pass the same ``stats_every`` to :func:`privacy`, which then charges ``ceil(steps / k)``
    full-data Gaussian releases instead of one per sampled step. ``penalty_clip_norm = C_p``
    (default ``None``: the augmented gradient is clipped jointly to ``clip_norm``): the loss
    gradient is clipped to ``C`` and the penalty part to ``C_p`` separately, and the sum's noise is
    ``noise_multiplier (C + C_p)`` (its sensitivity), so :func:`privacy` is unchanged.

    Privacy: see the module doc; :func:`privacy` returns the spend.
    """
    v.check_threefry_key(key)
    if not isinstance(model, _models.Model):
        raise ValueError("model must be a models.Model (the penalty needs its predictions).")
    if not isinstance(data, Dataset):
        raise ValueError("data must be a Dataset (the penalty needs the group ids s).")
    v.check_shape("x", data.x, ndim=2)
    n = data.n
    v.check_finite("x", data.x)
    v.check_finite("y", data.y)
    v.check_finite("params", params)
    v.check_group_ids(data.s, data.num_groups)
    out_loss = _models.output_loss(model, data.num_classes, loss)
    _dpsgd.check_labels(data.y, data.mask, out_loss, model)
    for name, val in (("gamma1", gamma1), ("gamma2", gamma2)):
        v.check_positive(name, val, allow_zero=True)
    v.check_clip_norm(clip_norm)
    v.check_noise_multiplier(noise_multiplier)
    v.check_noise_multiplier(stats_noise_multiplier, "stats_noise_multiplier")
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= the number of rows n ({n}).")
    steps = _dpsgd.resolve_steps(n, batch_size, steps, epochs, "poisson")
    if isinstance(optimizer, optax.GradientTransformation):
        if learning_rate is not None:
            raise ValueError("learning_rate must be None when optimizer is a GradientTransformation.")
    else:
        if not callable(optimizer):
            raise ValueError("optimizer must be an optax factory (e.g. optax.sgd) or a GradientTransformation.")
        if learning_rate is None:
            raise ValueError("learning_rate is required with an optimizer factory.")
        v.check_positive("learning_rate", learning_rate)
    max_batch_size = padded_batch_size(n, batch_size, steps, max_batch_size)
    stats_every = v.check_int("stats_every", stats_every, minimum=0)
    if penalty_clip_norm is not None:
        v.check_clip_norm(penalty_clip_norm, "penalty_clip_norm")
    loss_fn = _models.example_loss(model, out_loss)
    cfg = _Cfg(model, loss_fn, n, batch_size, max_batch_size, steps, data.num_groups,
               model.num_outputs, optimizer, bool(diagnostics), stats_every)
    return _program(cfg, key, params, data.x, data.y, data.s, data.mask, clip_norm, noise_multiplier,
                    stats_noise_multiplier, gamma1, gamma2, learning_rate, penalty_clip_norm)


@functools.wraps(_train)
def train(*args: Any, **kwargs: Any) -> tuple[Any, dict]:
    return _train(*args, **kwargs)[:2]  # (params, diagnostics); fit also keeps the report


train.__name__ = train.__qualname__ = "train"


def privacy(noise_multiplier: float, stats_noise_multiplier: float, *, n: int, batch_size: int,
            delta: float, steps: int | None = None, epochs: int | None = None,
            accountant: str = "rdp", max_batch_size: int | None = None,
            gamma1: float | None = None, gamma2: float | None = None, stats_every: int = 0):
    """``PrivacySpend`` of a :func:`train` run with the same arguments.

    Per step, the statistics Gaussian (sensitivity ``sqrt 3``, multiplier
    ``stats_noise_multiplier``) and the clipped-sum Gaussian (sensitivity ``C``, multiplier
    ``noise_multiplier``) composed inside one Poisson-sampled event at ``q = batch_size / n``
    (add/remove-one, unit = example). As in ``dpsgd.privacy``, the returned ``delta`` adds the
    truncation charge ``sampling.truncation_delta`` of the padded batch, at the width
    :func:`padded_batch_size` gives for ``max_batch_size`` (pass the value given to :func:`train`).

    ``gamma1``/``gamma2``: the run's penalty weights. The statistics are charged unless both are
    given and both are 0 (the parameters then do not depend on them; the ``private_group_*``
    diagnostics do, and are not covered). Leaving them out charges the statistics.

    ``stats_every = k >= 1`` (as given to :func:`train`): the statistics are ``ceil(steps / k)``
    full-data Gaussian releases (sensitivity ``sqrt 3``, no sampling), composed with the sampled
    clipped-sum event.

    Privacy: the returned ``(epsilon, delta)`` bounds the released parameters (and the
    ``private_group_*`` diagnostics when the statistics are charged) under add/remove-one.
    """
    v.check_noise_multiplier(noise_multiplier)
    v.check_noise_multiplier(stats_noise_multiplier, "stats_noise_multiplier")
    v.check_delta(delta)
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    steps = _dpsgd.resolve_steps(n, batch_size, steps, epochs, "poisson")
    width = padded_batch_size(n, batch_size, steps, max_batch_size)
    for name, g in (("gamma1", gamma1), ("gamma2", gamma2)):
        if g is not None:
            v.check_positive(name, g, allow_zero=True)
    unpenalized = gamma1 is not None and gamma2 is not None and float(gamma1) == 0.0 and float(gamma2) == 0.0
    include_statistics = not unpenalized
    z, zs = float(noise_multiplier), float(stats_noise_multiplier)
    if z == 0.0 or (include_statistics and zs == 0.0):
        return _acc.PrivacySpend(epsilon=float("inf"), delta=float(delta), relation="add_remove",
                                 unit="example", accountant=accountant, notes="non-private")
    stats_every = v.check_int("stats_every", stats_every, minimum=0)
    rel = (1.0, zs / z) if include_statistics and not stats_every else (1.0,)
    q = batch_size / n
    event = _acc.dpsgd_event(z, q, steps, relative_noise=rel)
    if include_statistics and stats_every:
        releases = -(-steps // stats_every)
        event = dp_accounting.ComposedDpEvent(
            [event, dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(zs), releases)])
    eps = _acc.epsilon_of_event(event, delta, accountant=accountant)
    extra = _sampling.truncation_delta(n, q, width, steps, eps)
    notes = (RECONSTRUCTION_NOTE + ("" if include_statistics else
             "; gamma1 = gamma2 = 0: group statistics unused by the update, not charged")
             + f"; truncation at max_batch_size={width} adds {extra:.3g} to delta")
    return _acc.PrivacySpend(epsilon=eps, delta=min(float(delta) + extra, 1.0 - 1e-12), event=event,
                             relation="add_remove", unit="example", accountant=accountant, notes=notes)


# ------------------------------------------------------------------------------------------------
# The trio: fit / spend / calibrate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MitigationConfig:
    """Static choices of a mitigation run (:func:`fit`): ``model`` (a ``models.Model``), ``loss``
    (output loss; default from the model and the data), ``accountant`` (``"rdp"`` or ``"pld"``),
    ``delta`` (the delta the spend states epsilon at), ``optimizer``, ``max_batch_size``,
    ``diagnostics`` as in :func:`train`. Poisson sampling, add/remove-one, unit = example."""

    model: Any = None
    loss: Any = None
    accountant: str = "rdp"
    delta: float = 1e-5
    optimizer: Any = optax.sgd
    max_batch_size: int | None = None
    diagnostics: bool = True

    def validate(self) -> "MitigationConfig":
        """Refuse out-of-range choices on the host, naming the field."""
        if not isinstance(self.model, _models.Model):
            raise ValueError("config.model must be a models.Model (the penalty needs its predictions).")
        v.check_choice("accountant", self.accountant, ("rdp", "pld"))
        v.check_delta(self.delta)
        if self.max_batch_size is not None:
            v.check_int("max_batch_size", self.max_batch_size, minimum=1)
        return self


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["gamma1", "gamma2", "learning_rate", "clip_norm", "noise_multiplier",
                                "stats_noise_multiplier"],
                   meta_fields=["batch_size", "steps"])
@dataclasses.dataclass(frozen=True)
class MitigationHparams:
    """Hyperparameters (traced-able pytree; ``batch_size`` and ``steps`` static): penalty weights
    ``gamma1``, ``gamma2`` (paper 001's default (1, 1)), ``learning_rate``, ``clip_norm``, the
    update's ``noise_multiplier`` and the group statistics' ``stats_noise_multiplier``."""

    gamma1: Any = 1.0
    gamma2: Any = 1.0
    learning_rate: Any = 0.1
    clip_norm: Any = 1.0
    noise_multiplier: Any = 1.0
    stats_noise_multiplier: Any = 3.0
    batch_size: int = 256
    steps: int = 100

    def validate(self) -> "MitigationHparams":
        """Refuse, on the host, every field out of range (traced values are skipped), naming it."""
        for name in ("gamma1", "gamma2"):
            v.check_positive(name, getattr(self, name), allow_zero=True)
        v.check_positive("learning_rate", self.learning_rate)
        v.check_clip_norm(self.clip_norm)
        v.check_noise_multiplier(self.noise_multiplier)
        v.check_noise_multiplier(self.stats_noise_multiplier, "stats_noise_multiplier")
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_int("steps", self.steps, minimum=1)
        return self


class MitigationResult(NamedTuple):
    """``params``, ``diagnostics`` (``private_group_*`` are released statistics, the rest not
    private), the run's ``spend`` (``None`` when noise multipliers or gammas are traced) and
    ``report``, the :class:`~dpfair_jax.privacy.sampling.SamplingReport` of the steps run."""

    params: Any
    diagnostics: dict
    spend: Any
    report: Any = None


def _concrete(*values: Any) -> bool:
    return not any(isinstance(leaf, jax.core.Tracer) for val in values for leaf in jax.tree_util.tree_leaves(val))


def fit(key: jax.Array, data: Dataset, hparams: MitigationHparams, config: MitigationConfig, *,
        params: Any = None) -> MitigationResult:
    """:func:`train` with ``hparams`` and ``config``; returns :class:`MitigationResult`.

    ``params``: initial parameters; by default ``config.model.init`` with the first half of
    ``split(key)`` (the second trains).

    Privacy: the recorded ``spend`` is :func:`spend` ``(config, n, hparams)`` (the statistics are
    not charged when ``gamma1 = gamma2 = 0``, since the parameters then do not depend on them).
    """
    config.validate()
    hparams.validate()
    if not isinstance(data, Dataset):
        raise ValueError("data must be a Dataset (the penalty needs the group ids s).")
    model = config.model
    if params is None:
        k_init, key = jax.random.split(key)
        params = model.init(k_init, int(data.x.shape[1]))
    out, diag, report = _train(key, model, params, data, gamma1=hparams.gamma1, gamma2=hparams.gamma2,
                      clip_norm=hparams.clip_norm, noise_multiplier=hparams.noise_multiplier,
                      stats_noise_multiplier=hparams.stats_noise_multiplier,
                      learning_rate=None if isinstance(config.optimizer, optax.GradientTransformation)
                      else hparams.learning_rate,
                      batch_size=hparams.batch_size, steps=hparams.steps, optimizer=config.optimizer,
                      loss=config.loss, max_batch_size=config.max_batch_size, diagnostics=config.diagnostics)
    traced = not _concrete(hparams.noise_multiplier, hparams.stats_noise_multiplier, hparams.gamma1,
                           hparams.gamma2)
    return MitigationResult(out, diag, None if traced else spend(config, data.n, hparams), report)


def spend(config: MitigationConfig, sizes: int, hparams: MitigationHparams):
    """The ``PrivacySpend`` of :func:`fit` with these arguments (:func:`privacy` at
    ``config.delta``, gammas stated; ``sizes`` = the number of rows ``n``, public)."""
    config.validate()
    hparams.validate()
    return privacy(float(hparams.noise_multiplier), float(hparams.stats_noise_multiplier),
                   n=v.check_int("sizes", sizes, minimum=1), batch_size=hparams.batch_size,
                   delta=config.delta, steps=hparams.steps, accountant=config.accountant,
                   max_batch_size=config.max_batch_size, gamma1=float(hparams.gamma1),
                   gamma2=float(hparams.gamma2))


def calibrate(config: MitigationConfig, sizes: int, target: tuple[float, float],
              hparams: MitigationHparams | None = None) -> MitigationHparams:
    """``hparams`` (default ``MitigationHparams()``) with ``noise_multiplier`` and
    ``stats_noise_multiplier`` set so that ``spend(config, sizes, result).epsilon <= target[0]``,
    within ~1e-6 relative of the smallest: the two keep the ratio of the given ``hparams``
    (``stats_noise_multiplier / noise_multiplier``). With ``gamma1 = gamma2 = 0`` the statistics
    are not charged and only ``noise_multiplier`` is solved for (the ratio is kept).

    ``target = (epsilon, delta)``; ``delta`` must equal ``config.delta``.

    Privacy: the result makes :func:`fit` ``(epsilon, delta + truncation)``-DP (add/remove-one).
    """
    config.validate()
    hp = (MitigationHparams() if hparams is None else hparams).validate()
    n = v.check_int("sizes", sizes, minimum=1)
    eps, delta = _acc.calibration_target(target, config.delta)
    if hp.batch_size > n:
        raise ValueError(f"batch_size ({hp.batch_size}) must be <= sizes = n ({n}).")
    z0, zs0 = float(hp.noise_multiplier), float(hp.stats_noise_multiplier)
    if z0 == 0.0 or zs0 == 0.0:
        raise ValueError("hparams.noise_multiplier and stats_noise_multiplier must be > 0: calibrate "
                         "keeps their ratio.")
    ratio = zs0 / z0
    charged = not (float(hp.gamma1) == 0.0 and float(hp.gamma2) == 0.0)
    steps = _dpsgd.resolve_steps(n, hp.batch_size, hp.steps, None, "poisson")
    z = _acc.calibrate_noise_multiplier(float(eps), float(delta), hp.batch_size / n, steps,
                                        accountant=config.accountant,
                                        relative_noise=(1.0, ratio) if charged else (1.0,))

    def eps_of(zz: float) -> float:
        return spend(config, n, dataclasses.replace(hp, noise_multiplier=zz, stats_noise_multiplier=zz * ratio)).epsilon

    z = _acc.step_up_until(eps_of, z, eps)  # rounding in the spend's relative noise
    return dataclasses.replace(hp, noise_multiplier=float(z), stats_noise_multiplier=float(z * ratio))
