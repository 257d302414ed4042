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
release). Add/remove-one neighbours, unit = example; :func:`spend` accounts both (with the
RDP or PLD accountant). The statistics are charged unless the caller states ``gamma1 = gamma2 =
0`` (then they are computed but multiplied by exact zeros, so the parameters do not depend on
them). The padded Poisson batch (``max_batch_size``) comes from one helper,
:func:`padded_batch_size`, in :func:`fit` and :func:`spend`, so the truncation charge is that
of the batch width the run used. The statistics' noise key is ``fold_in(k, 2)`` of the step key
``k`` (the update's sampling and noise keys are ``split(k)``): distinct from every key the
gradient noise draws from (``fold_in(k_noise, i)`` equals ``split(k_noise, L)[i]``, the noise key
of parameter leaf ``i``, so it must not be used).

Caveat: this is a private *surrogate* of the reconstructed penalty (noisy plug-in signs and
fractions, ``psi_a`` dropped per Fig. 10, the trace replaced by its uncertainty proxy), not the
authors' method; the statistics' noise also costs budget, so at equal epsilon the model update
gets a larger noise multiplier than plain DP-SGD.

With ``gamma1 = gamma2 = 0`` :func:`fit` equals ``dpsgd.fit`` with ``per_example="vmap"``
bit for bit under the same key: same key splitting (the statistics' key is
``fold_in(k, 2)``), same batches, same noise draws, and the penalty terms enter as exact zeros.

Per-example gradients always come from ``vmap(grad)``, for every model (no ghost norms, unlike
``dpsgd.fit`` for GLMs, MLPs and CNNs): the clipped vector ``g_i + gamma1 c1_a H_i g_i / ||g_i||
+ gamma2 c2_a nabla u(x_i)`` contains a per-example Hessian-vector product of ``g_i`` itself,
which is not a function of one backward pass's per-layer (input, output-gradient) pairs, so its
norm has no ghost identity and the augmented gradient has to be formed example by example.

The compiled run (one ``lax.scan`` over the steps) is :mod:`dpfair_jax.algorithms.mitigation.program`;
this module holds the trio, the configuration and the accounting.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import dp_accounting
import jax
import jax.numpy as jnp
import optax

from dpfair_jax import _validation as v
from dpfair_jax import models as _models
from dpfair_jax.algorithms import dpsgd as _dpsgd
from dpfair_jax.data.dataset import Dataset
from dpfair_jax._validation import is_traced
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.privacy.precision import full_precision

from . import program as _mp
from .._trio import FitResult, hparams_pytree
from .program import STATS_SENSITIVITY, penalty_coefficients

__all__ = ["padded_batch_size", "penalty_coefficients", "RECONSTRUCTION_NOTE", "STATS_SENSITIVITY",
           "MitigationConfig", "MitigationHparams", "fit", "spend", "calibrate"]

RECONSTRUCTION_NOTE = ("paper 001 (gamma1, gamma2) mitigation: reconstruction (objective not in the "
                       "supplement); private plug-in surrogate, see dpfair_jax.algorithms.mitigation")
_program = _mp.program  # the compiled run (module attribute: fit calls it through this name)


def _check_shape(config: "MitigationConfig", n: int) -> None:
    """The checks of a validated config that need the number of rows ``n`` (no re-validation)."""
    if config.batch_size > n:
        raise ValueError(f"batch_size ({config.batch_size}) must be <= the number of rows n ({n}).")


def _padded_width(n: int, batch_size: int, steps: int, max_batch_size: int | None) -> int:
    if max_batch_size is None:
        max_batch_size = _sampling.max_batch_size_for(n, batch_size / n, steps)
    return min(max_batch_size, n)


def _spend(config: "MitigationConfig", n: int, noise_multiplier: float, stats_noise_multiplier: float,
           gamma1: float | None, gamma2: float | None):
    """``PrivacySpend`` of a run (inputs validated by the caller).

    Per step, the statistics Gaussian (sensitivity ``sqrt 3``, multiplier
    ``stats_noise_multiplier``) and the clipped-sum Gaussian (sensitivity ``C``, multiplier
    ``noise_multiplier``) composed inside one Poisson-sampled event at ``q = batch_size / n``
    (add/remove-one, unit = example). As in ``dpsgd.spend``, the truncation charge
    ``sampling.truncation_delta`` of the padded batch is taken out of ``delta``, at the width
    :func:`padded_batch_size` gives for ``max_batch_size``.

    ``gamma1``/``gamma2``: the run's penalty weights. The statistics are charged unless both are
    given and both are 0 (the parameters then do not depend on them; the ``private_group_*``
    diagnostics do, and are not covered). ``None`` charges the statistics.

    ``stats_every = k >= 1``: the statistics are ``ceil(steps / k)`` full-data Gaussian releases
    (sensitivity ``sqrt 3``, no sampling), composed with the sampled clipped-sum event.
    """
    batch_size, steps, delta, accountant = config.batch_size, config.steps, config.delta, config.accountant
    width = _padded_width(n, batch_size, steps, config.max_batch_size)
    unpenalized = gamma1 is not None and gamma2 is not None and float(gamma1) == 0.0 and float(gamma2) == 0.0
    include_statistics = not unpenalized
    z, zs = float(noise_multiplier), float(stats_noise_multiplier)
    if z == 0.0 or (include_statistics and zs == 0.0):
        return _acc.PrivacySpend(epsilon=float("inf"), delta=float(delta), relation="add_remove",
                                 unit="example", accountant=accountant, notes="non-private")
    stats_every = config.stats_every
    rel = (1.0, zs / z) if include_statistics and not stats_every else (1.0,)
    q = batch_size / n
    event = _acc.dpsgd_event(z, q, steps, relative_noise=rel)
    if include_statistics and stats_every:
        releases = -(-steps // stats_every)
        event = dp_accounting.ComposedDpEvent(
            [event, dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(zs), releases)])
    eps, total, extra = _acc.truncated_spend(
        lambda d: _acc.epsilon_of_event(event, d, accountant=accountant), float(delta),
        lambda e: _sampling.truncation_delta(n, q, width, steps, e))
    notes = (RECONSTRUCTION_NOTE + ("" if include_statistics else
             "; gamma1 = gamma2 = 0: group statistics unused by the update, not charged")
             + f"; truncation at max_batch_size={width}: {extra:.3g} of delta")
    return _acc.PrivacySpend(epsilon=eps, delta=min(total, 1.0 - 1e-12), event=event,
                             relation="add_remove", unit="example", accountant=accountant, notes=notes)


# ------------------------------------------------------------------------------------------------
# The trio: fit / spend / calibrate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MitigationConfig:
    """Static choices of a mitigation run (:func:`fit`): ``model`` (a ``models.Model``), ``loss``
    (output loss; default from the model and the data), ``accountant`` (``"rdp"`` or ``"pld"``),
    ``delta`` (the delta the spend states epsilon at), ``optimizer`` (an optax factory called as
    ``optimizer(learning_rate)`` or a ready ``GradientTransformation``), ``batch_size`` (the
    expected Poisson batch size, ``q = batch_size / n``), ``steps`` (from epochs:
    ``dpsgd.resolve_steps``), ``max_batch_size`` (the padded batch width; default and check:
    :func:`padded_batch_size`), ``diagnostics``; ``stats_every = k >= 1``: the group statistics
    are released from the **full data** (every row, no sampling) at steps 0, k, 2k, ... and held in
    between (default 0: from each step's batch), and the spend charges ``ceil(steps / k)``
    full-data Gaussian releases instead of one per sampled step; ``penalty_clip_norm = C_p``
    (default ``None``: the augmented gradient is clipped jointly to ``clip_norm``): the loss
    gradient is clipped to ``C`` and the penalty part to ``C_p`` separately, and the sum's noise is
    scaled to its sensitivity ``C + C_p`` (the spend is unchanged). Poisson sampling,
    add/remove-one, unit = example."""

    model: Any = None
    loss: Any = None
    accountant: str = "rdp"
    delta: float = 1e-5
    optimizer: Any = optax.sgd
    batch_size: int = 256
    steps: int = 100
    max_batch_size: int | None = None
    diagnostics: bool = True
    stats_every: int = 0
    penalty_clip_norm: float | None = None

    def validate(self) -> "MitigationConfig":
        """Refuse out-of-range choices on the host, naming the field."""
        if not isinstance(self.model, _models.Model):
            raise ValueError("config.model must be a models.Model (the penalty needs its predictions).")
        v.check_choice("accountant", self.accountant, ("rdp", "pld"))
        v.check_delta(self.delta)
        if not isinstance(self.optimizer, optax.GradientTransformation) and not callable(self.optimizer):
            raise ValueError("optimizer must be an optax factory (e.g. optax.sgd) or a GradientTransformation.")
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_int("steps", self.steps, minimum=1)
        if self.max_batch_size is not None:
            v.check_int("max_batch_size", self.max_batch_size, minimum=self.batch_size)
        v.check_int("stats_every", self.stats_every, minimum=0)
        if self.penalty_clip_norm is not None:
            v.check_clip_norm(self.penalty_clip_norm, "penalty_clip_norm")
        return self


def padded_batch_size(n: int, batch_size: int, steps: int, max_batch_size: int | None = None) -> int:
    """The static width of the padded Poisson batch of a :func:`fit` run (and of its truncation
    charge in :func:`spend`): ``max_batch_size`` if given (at least ``batch_size``), else
    ``sampling.max_batch_size_for(n, batch_size / n, steps)`` (overflow probability 1e-9 over the
    run); never more than ``n``. Lower level: use fit (records no spend).

    Privacy: draws above this width are dropped; :func:`spend` charges
    ``sampling.truncation_delta`` at exactly this width.
    """
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    steps = v.check_int("steps", steps, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= the number of rows n ({n}).")
    if max_batch_size is not None:
        v.check_int("max_batch_size", max_batch_size, minimum=batch_size)
    return _padded_width(n, batch_size, steps, max_batch_size)


@hparams_pytree
class MitigationHparams:
    """Hyperparameters (a registered pytree, every field may be traced; ``batch_size`` and
    ``steps`` are in :class:`MitigationConfig`): penalty weights ``gamma1``, ``gamma2`` (paper
    001's default (1, 1)), ``learning_rate``, ``clip_norm``, the update's ``noise_multiplier`` and
    the group statistics' ``stats_noise_multiplier``."""

    gamma1: Any = 1.0
    gamma2: Any = 1.0
    learning_rate: Any = 0.1
    clip_norm: Any = 1.0
    noise_multiplier: Any = 1.0
    stats_noise_multiplier: Any = 3.0

    def validate(self) -> "MitigationHparams":
        """Refuse, on the host, every field out of range (traced values are skipped), naming it."""
        for name in ("gamma1", "gamma2"):
            v.check_positive(name, getattr(self, name), allow_zero=True)
        v.check_positive("learning_rate", self.learning_rate)
        v.check_clip_norm(self.clip_norm)
        v.check_noise_multiplier(self.noise_multiplier)
        v.check_noise_multiplier(self.stats_noise_multiplier, "stats_noise_multiplier")
        return self


@full_precision
def fit(key: jax.Array, data: Dataset, hparams: MitigationHparams, config: MitigationConfig, *,
        params: Any = None) -> FitResult:
    """DP-SGD with the (gamma1, gamma2) fairness penalties (reconstruction; see the module doc);
    returns :class:`FitResult`.

    ``data``: a ``Dataset`` (the penalty needs the group ids ``s``). ``params``: initial
    parameters; by default ``config.model.init`` with the first half of ``split(key)`` (the second
    trains). ``gamma1``, ``gamma2``, ``clip_norm``, ``noise_multiplier``,
    ``stats_noise_multiplier`` and ``learning_rate`` may be traced (one program for a whole gamma
    grid under ``vmap``). Poisson sampling with expected batch ``config.batch_size``.

    ``diagnostics`` (``config.diagnostics``): ``private_group_*`` are the **released** (noisy)
    statistics, covered by the spend when the statistics are charged: ``private_group_sums
    [steps, K, 3]`` the noisy sums of (1, clipped norm / C, uncertainty / (1 - 1/K)) per group, the
    others post-processing of them; ``loss`` and ``mean_grad_norm`` are computed from the private
    batches and are **not** private (do not publish them).

    Privacy: see the module doc; the recorded ``spend`` is :func:`spend` ``(config, n, hparams)``
    (the statistics are not charged when ``gamma1 = gamma2 = 0``, since the parameters then do not
    depend on them); ``None`` when a multiplier or a gamma is traced.
    """
    config.validate()
    hparams.validate()
    v.check_threefry_key(key)
    if not isinstance(data, Dataset):
        raise ValueError("data must be a Dataset (the penalty needs the group ids s).")
    v.check_shape("x", data.x, ndim=2)
    n = data.n
    v.check_finite("x", data.x)
    v.check_finite("y", data.y)
    v.check_group_ids(data.s, data.num_groups)
    _check_shape(config, n)
    model = config.model
    if params is None:
        k_init, key = jax.random.split(key)
        params = model.init(k_init, int(data.x.shape[1]))
    v.check_finite("params", params)
    out_loss = _models.output_loss(model, data.num_classes, config.loss)
    _dpsgd.check_labels(data.y, data.mask, out_loss, model)
    max_batch_size = _padded_width(n, config.batch_size, config.steps, config.max_batch_size)
    loss_fn = _models.example_loss(model, out_loss)
    cfg = _mp.ProgramConfig(model, loss_fn, n, config.batch_size, max_batch_size, config.steps, data.num_groups,
               model.num_outputs, config.optimizer, bool(config.diagnostics), config.stats_every)
    out, diag, report = _program(cfg, key, params, data.x, data.y, data.s, data.mask, hparams.clip_norm,
                                 hparams.noise_multiplier, hparams.stats_noise_multiplier, hparams.gamma1,
                                 hparams.gamma2, hparams.learning_rate, config.penalty_clip_norm)
    traced = is_traced(hparams.noise_multiplier, hparams.stats_noise_multiplier, hparams.gamma1, hparams.gamma2)
    recorded = None if traced else _spend(config, n, hparams.noise_multiplier, hparams.stats_noise_multiplier,
                                          hparams.gamma1, hparams.gamma2)
    return FitResult(out, diag, recorded, report)


def spend(config: MitigationConfig, sizes: int, hparams: MitigationHparams):
    """The ``PrivacySpend`` of :func:`fit` with these arguments (``sizes`` = the number of rows
    ``n``, public), stating epsilon at ``config.delta``: per step, the statistics Gaussian
    (sensitivity ``sqrt 3``) and the clipped-sum Gaussian (sensitivity ``C``) composed inside one
    Poisson-sampled event (add/remove-one; ``config.stats_every = k``: ``ceil(steps / k)``
    full-data releases instead), the statistics not charged when ``gamma1 = gamma2 = 0``; its
    ``delta`` includes the padded batch's truncation charge."""
    config.validate()
    hparams.validate()
    n = v.check_int("sizes", sizes, minimum=1)
    _check_shape(config, n)
    return _spend(config, n, v.host_float("noise_multiplier", hparams.noise_multiplier),
                  v.host_float("stats_noise_multiplier", hparams.stats_noise_multiplier),
                  v.host_float("gamma1", hparams.gamma1), v.host_float("gamma2", hparams.gamma2))


def calibrate(config: MitigationConfig, sizes: int, target: tuple[float, float], *,
              hparams: MitigationHparams | None = None) -> MitigationHparams:
    """``hparams`` (default ``MitigationHparams()``) with ``noise_multiplier`` and
    ``stats_noise_multiplier`` set so that ``spend(config, sizes, result).epsilon <= target[0]``,
    within ~1e-6 relative of the smallest: the two keep the ratio of the given ``hparams``
    (``stats_noise_multiplier / noise_multiplier``). With ``gamma1 = gamma2 = 0`` the statistics
    are not charged and only ``noise_multiplier`` is solved for (the ratio is kept).

    ``target = (epsilon, delta)``; ``delta`` must equal ``config.delta``.

    Privacy: the result makes :func:`fit` ``(epsilon, delta)``-DP (add/remove-one), the padding's
    truncation charge taken out of the target delta first.
    """
    config.validate()
    hp = (MitigationHparams() if hparams is None else hparams).validate()
    n = v.check_int("sizes", sizes, minimum=1)
    eps, delta = _acc.calibration_target(target, config.delta)
    _check_shape(config, n)
    z0, zs0 = float(hp.noise_multiplier), float(hp.stats_noise_multiplier)
    if z0 == 0.0 or zs0 == 0.0:
        raise ValueError("hparams.noise_multiplier and stats_noise_multiplier must be > 0: calibrate "
                         "keeps their ratio.")
    ratio = zs0 / z0
    g1, g2 = float(hp.gamma1), float(hp.gamma2)
    charged = not (g1 == 0.0 and g2 == 0.0)
    width = _padded_width(n, config.batch_size, config.steps, config.max_batch_size)
    delta = _acc.calibration_delta(eps, delta, _sampling.truncation_delta(  # the truncation charge comes out
        n, config.batch_size / n, width, config.steps, eps))                 # of the target delta
    z = _acc.calibrate_noise_multiplier(float(eps), float(delta), config.batch_size / n, config.steps,
                                        accountant=config.accountant,
                                        relative_noise=(1.0, ratio) if charged else (1.0,))

    def eps_of(zz: float) -> float:
        return _spend(config, n, zz, zz * ratio, g1, g2).epsilon

    z = _acc.step_up_until(eps_of, z, eps)  # rounding in the spend's relative noise
    return dataclasses.replace(hp, noise_multiplier=float(z), stats_noise_multiplier=float(z * ratio))
