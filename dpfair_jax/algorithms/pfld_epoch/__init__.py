"""PF-LD as Tran, Fioretto and Van Hentenryck specify it (AAAI 2021): per-epoch Lagrangian dual.

"Differentially Private and Fair Deep Learning: A Lagrangian Dual Approach" trains a model on the
Lagrangian of a fairness-constrained problem::

    min_theta max_{lam >= 0}  (1/n) sum_i loss(theta; x_i, y_i) + mu * sum_{c,g,j} lam_{c,g,j} (|h_{c,g,j}(theta)| - tol)

with the constraint values of the soft predictions ``F(x, theta)`` (demographic parity: one
condition; equalized odds: one condition per label ``c = y``)::

    h_{c,g,j}(theta) = P(yhat = j | s = g, c) - P(yhat = j | c).

``mu`` is the study's fairness knob (``hparams.lam``). Each epoch runs DP-SGD on the primal with the
multipliers held fixed, then releases the full-data violation with Gaussian noise and takes one
projected dual step; this is what separates it from the stochastic variant of
:mod:`dpfair_jax.algorithms.pfld` (signed multipliers moved every step on a batch's violation):

1. primal (``S = ceil(n / m)`` Poisson-sampled DP-SGD steps per epoch): the per-example gradient of
   ``loss_i + mu * pen_i`` is clipped to ``clip_theta`` and noised (multiplier ``noise_theta``), with
   ``pen_i = sum_j F_j(x_i) [nu_{c_i, s_i, j} / p(s_i | c_i) - sum_g nu_{c_i, g, j}]`` and
   ``nu = lam * sign(h_hat)`` (so ``(1/n) sum_i pen_i = sum_{c,g,j} p(c) nu_{c,g,j} h_{c,g,j}``: the
   gradient of ``sum lam |h|`` at the released sign; constraints of label ``c`` weighted by
   ``p(c)``). The sign and the group frequencies ``p(g | c)`` come from the last release, so the
   per-example terms depend on the data only through example ``i``;
2. release (once per epoch, the whole training set): the soft joint counts
   ``J_{c,g,j} = sum_i 1{c_i = c, s_i = g} F_j(x_i)``, each example's ``[C, k, l]`` contribution
   clipped to L2 norm ``clip_violation`` (its norm is ``|F(x_i)|_2 <= 1``, so the default 1 changes
   nothing) and Gaussian noise of std ``noise_violation * clip_violation`` added
   (:func:`dpfair_jax.privacy.mechanisms.gaussian_noise`). From the noisy counts:
   ``n_{c,g} = max(sum_j J_{c,g,j}, 1)``, ``h_hat``, ``p(g | c)``;
3. dual step: ``lam <- clip(lam + lr_dual (|h_hat| - tol), 0, radius)`` (non-negative, bounded by
   the multiplier box ``radius``), ``sign <- sign(h_hat) 1{|h_hat| > tol}`` (a subgradient of
   ``max(0, |h| - tol)`` at the released violation).

The multipliers start at 0, so the first epoch is plain DP-SGD. Everything is one ``lax.scan``
over epochs around :func:`dpfair_jax.algorithms.sgda.dpsgda` (the ascent variable unused and
frozen); every field of :class:`PFLDEpochHparams` is traced, so a grid over ``lam`` is one
``vmap``.

Departures from the paper (stated): the constraints use soft predictions (the paper's
"expected" predictions); the sign of ``h`` in the primal penalty is the released one (its sign on
the batch would be a batch-dependent, unclipped statistic); the violation release is clipped
per example with its own bound and noised with its own multiplier (the paper bounds its
sensitivity through the predictions' range).

Privacy (``privacy_unit = "all_features"``, example-level, add/remove, ``n`` public as in
:mod:`.fermi`): the run composes ``T = epochs * S`` Poisson-subsampled Gaussians (rate
``q = batch_size / n``, multiplier ``noise_theta``, sensitivity ``clip_theta``) with ``epochs``
Gaussian releases of the soft joint counts (no subsampling, multiplier ``noise_violation``,
sensitivity ``clip_violation``). Everything else is post-processing. :func:`spend` states that
event (RDP accountant) with the Poisson padding's truncation probability added to delta;
:func:`calibrate` sets ``noise_theta`` with ``noise_violation = config.violation_noise_ratio *
noise_theta``.

The sensitive-attribute unit (paper 004's Definition 2.2, a change of one ``s_i``): the same run,
accounted by :func:`attribute_spend` / :func:`attribute_rdp` (the primal gradient and the violation
releases read ``s``; :mod:`dpfair_jax.privacy.attribute`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from dpfair_jax import _validation as v
from dpfair_jax.algorithms import fermi, sgda
from dpfair_jax.algorithms._trio import FitResult, hparams_pytree
from dpfair_jax.algorithms.pfld_epoch.terms import penalty_one, soft_counts, violations_from_counts
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import clipping as C  # noqa: F401  (pfld_epoch.C: the clipping the terms use)
from dpfair_jax.privacy import mechanisms as Mech
from dpfair_jax.privacy import minmax_noise as MM
from dpfair_jax.privacy import sampling as Smp
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "PFLDEpochConfig",
    "PFLDEpochHparams",
    "fit",
    "spend",
    "calibrate",
    "run_event",
    "check_hparams",
    "attribute_rdp",
    "attribute_spend",
]

FAIRNESS = ("dp", "eo")
_REL_KEY = 0x76696F6C  # fold_in tag of the violation releases' keys


@dataclasses.dataclass(frozen=True)
class PFLDEpochConfig:
    """Static settings (hashable).

    ``model``: a :class:`dpfair_jax.models.Model`; ``num_groups`` k, ``num_classes`` l (2 for a
    one-logit model); ``epochs`` (dual updates), ``batch_size`` m (expected Poisson batch, ``S =
    ceil(n / m)`` steps per epoch); ``fairness`` ``"dp"`` or ``"eo"``; ``violation_noise_ratio``:
    ``noise_violation / noise_theta`` set by :func:`calibrate`; ``max_batch_size``: Poisson padding
    (default ``sgda.default_max_batch_size``); ``delta``: the delta :func:`spend` states;
    ``grad_path``: ``"auto"`` (exact GLM ghost norms for (multinomial) logistic models) or
    ``"generic"`` (``vmap(grad)``). The privacy unit is example-level (all features), add/remove.
    """

    model: Any
    num_groups: int
    num_classes: int = 2
    epochs: int = 10
    batch_size: int = 256
    fairness: str = "dp"
    violation_noise_ratio: float = 10.0
    max_batch_size: int | None = None
    delta: float = 1e-5
    grad_path: str = "auto"

    privacy_unit = "all_features"
    relation = "add_remove"

    def validate(self, n: int | None = None) -> "PFLDEpochConfig":
        v.check_int("num_groups", self.num_groups, minimum=2)
        v.check_int("num_classes", self.num_classes, minimum=2)
        v.check_int("epochs", self.epochs, minimum=1)
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_choice("fairness", self.fairness, FAIRNESS)
        v.check_choice("grad_path", self.grad_path, ("auto", "generic"))
        v.check_positive("violation_noise_ratio", self.violation_noise_ratio)
        v.check_delta(self.delta)
        outs = getattr(self.model, "num_outputs", None)
        if outs is None:
            raise ValueError("model must be a dpfair_jax.models.Model (with num_outputs).")
        if not (outs == self.num_classes or (outs == 1 and self.num_classes == 2)):
            raise ValueError(f"model has {outs} output(s) but num_classes={self.num_classes}; use "
                             "logistic() for 2 classes or multinomial_logistic(num_classes).")
        if n is not None:
            self.sgda_config(n).validate(n)
        return self

    @property
    def num_conditions(self) -> int:
        return self.num_classes if self.fairness == "eo" else 1

    def steps_per_epoch(self, n: int) -> int:
        return int(math.ceil(n / self.batch_size))

    def steps(self, n: int) -> int:
        """Total primal steps ``T = epochs * ceil(n / batch_size)``."""
        return self.epochs * self.steps_per_epoch(n)

    def sgda_config(self, n: int) -> sgda.SGDAConfig:
        """The primal DP-SGD of one epoch (the ascent variable is unused)."""
        return sgda.SGDAConfig(steps=self.steps_per_epoch(n), batch_size=self.batch_size,
                               sampling="poisson", max_batch_size=self.max_batch_size,
                               projection="none", iterate="last", sensitivity_factor=1.0)


@hparams_pytree
class PFLDEpochHparams:
    """Traced hyperparameters (scalars, or arrays under ``vmap``).

    ``lam``: the weight ``mu`` of the Lagrangian term (the fairness knob); ``lr_theta``: primal step;
    ``lr_dual``: dual step; ``clip_theta``: per-example clip of the primal gradient;
    ``clip_violation``: per-example clip of the released counts' contributions; ``noise_theta`` /
    ``noise_violation``: noise multipliers (std = multiplier x clip); ``radius``: the multiplier box
    ``0 <= lam_{c,g,j} <= radius``; ``tol``: the constraint tolerance (``|h| <= tol``).
    """

    lam: Any = 1.0
    lr_theta: Any = 0.5
    lr_dual: Any = 1.0
    clip_theta: Any = 1.0
    clip_violation: Any = 1.0
    noise_theta: Any = 0.0
    noise_violation: Any = 0.0
    radius: Any = 10.0
    tol: Any = 0.0

    def validate(self) -> "PFLDEpochHparams":
        """Refuse out-of-range fields on the host, traced values skipped (:func:`check_hparams`)."""
        v.check_positive("lam", self.lam, allow_zero=True)
        v.check_positive("tol", self.tol, allow_zero=True)
        for name in ("lr_theta", "lr_dual", "radius", "clip_violation"):
            v.check_positive(name, getattr(self, name))
        v.check_positive("clip_theta", self.clip_theta, allow_inf=True)
        for name in ("noise_theta", "noise_violation"):
            v.check_noise_multiplier(getattr(self, name), name)
        return self


def check_hparams(hparams: PFLDEpochHparams) -> PFLDEpochHparams:
    """Refuse out-of-range fields on the host before compute (traced values are skipped):
    ``lam``, ``tol`` >= 0 finite; step sizes > 0 finite; clips > 0 (``clip_theta`` may be inf only
    without noise); noise multipliers >= 0 finite; ``radius`` > 0 finite."""
    if not isinstance(hparams, PFLDEpochHparams):
        raise ValueError(f"hparams must be PFLDEpochHparams, got {type(hparams).__name__}.")
    return hparams.validate()


def _check_data(data: Dataset, config: PFLDEpochConfig) -> None:
    if not isinstance(data, Dataset):
        raise ValueError("data must be a dpfair_jax.data.Dataset (x, y, s, num_groups).")
    if data.mask is not None:
        raise ValueError("fit does not take padded datasets (mask); drop the padding rows first.")
    if data.num_groups != config.num_groups:
        raise ValueError(f"data.num_groups={data.num_groups} but config.num_groups="
                         f"{config.num_groups}; make them equal.")
    shape = getattr(config.model, "input_shape", None)
    if shape is not None and tuple(shape) != tuple(data.x.shape[1:]):
        raise ValueError(f"the model expects examples of shape {tuple(shape)} but data.x has "
                         f"{tuple(data.x.shape[1:])}.")
    if v.is_traced(data.x):
        return
    v.check_finite("x", data.x)
    v.check_group_ids(data.s, config.num_groups, "s", min_size=1)
    v.check_labels(data.y, config.num_classes, "y")


def _grad_path(config: PFLDEpochConfig, data: Dataset) -> str:
    if config.grad_path == "generic":
        return "generic"
    name = getattr(config.model, "name", "")
    if name in ("logistic", "multinomial_logistic") and data.x.ndim == 2:
        return "linear"
    return "generic"


class _EpochRun(NamedTuple):
    """What every epoch of one :func:`fit` run shares (keys, data, the primal's settings)."""

    model: Any
    hparams: PFLDEpochHparams
    examples: dict  # x, y, s and the condition c of every row
    path: str
    mu: jax.Array
    sgda_hparams: sgda.SGDAHparams
    sgda_config: sgda.SGDAConfig
    std_rel: jax.Array
    k_run: jax.Array
    k_batch: jax.Array
    k_rel: jax.Array
    shape: tuple  # (C, k, l)


def _primal_epoch(run: _EpochRun, theta, nu, p_s, e, seen: dict):
    """Epoch ``e``'s ``S`` DP-SGD steps on ``loss_i + mu pen_i`` at the held ``nu``, ``p(g | c)``
    (:func:`dpfair_jax.algorithms.sgda.dpsgda`, the ascent variable unused)."""
    model, mu = run.model, run.mu

    def loss_of_logits(z, w, ex):
        probs = E.soft_prediction(z)
        return fermi.task_loss(model, z, ex["y"]) + mu * penalty_one(probs, ex["s"], ex["c"], nu, p_s)

    if run.path == "linear":
        private = loss_of_logits
    else:
        def private(th, w, ex):
            return loss_of_logits(model.apply(th, ex["x"]), w, ex)

    res = sgda.dpsgda(jax.random.fold_in(run.k_run, e), run.examples, theta, jnp.zeros((), jnp.float32),
                      run.sgda_hparams, run.sgda_config, private_loss=private,
                      batch_key=jax.random.fold_in(run.k_batch, e), validate=False, linear=run.path == "linear")
    seen["epoch"] = res.report
    return res


def _violation_release(run: _EpochRun, theta, e, seen: dict) -> tuple[jax.Array, jax.Array]:
    """Epoch ``e``'s noisy release of the full-data soft joint counts: ``(h_hat, p(g | c))``."""
    Cn, k, _ = run.shape
    ex = run.examples
    probs = E.soft_predictions(run.model.apply(theta, ex["x"]))
    J = soft_counts(probs, ex["s"], ex["c"], Cn, k, run.hparams.clip_violation)
    J = J + Mech.gaussian_noise(jax.random.fold_in(run.k_rel, e), J.shape, run.std_rel, J.dtype)
    seen["violations"] = seen.get("violations", 0) + 1
    return violations_from_counts(J)


def _epoch(run: _EpochRun, seen: dict, carry, e):
    """One epoch: the primal steps, the violation release, the projected dual step."""
    theta, lam, sign, p_s = carry
    res = _primal_epoch(run, theta, lam * sign, p_s, e, seen)
    theta = res.theta
    h, p_new = _violation_release(run, theta, e, seen)
    hp = run.hparams
    lam = jnp.clip(lam + hp.lr_dual * (jnp.abs(h) - hp.tol), 0.0, hp.radius)
    active = jnp.sign(h) * (jnp.abs(h) > hp.tol)  # subgradient of max(0, |h| - tol)
    return (theta, lam, active, p_new), (h, res.diagnostics["truncated_steps"],
                                         res.diagnostics["clipped_frac_theta"])


@full_precision
def fit(key: jax.Array, data: Dataset, hparams: PFLDEpochHparams, config: PFLDEpochConfig, *,
        batch_key: jax.Array | None = None, params0: Any = None, validate: bool = True
        ) -> FitResult:
    """Train PF-LD (per-epoch dual updates); pure in ``(key, data, hparams)``, jit/vmap-able.

    ``batch_key`` (optional) draws the Poisson batches (runs vmapped over hyperparameters may share
    them); ``params0`` overrides ``config.model.init``. ``validate=False`` skips the host checks
    (for use under ``vmap`` after checking once).

    Returns :class:`~dpfair_jax.algorithms.FitResult`: ``params`` the model parameters;
    ``diagnostics``: ``violations`` (the noisy ``h_hat`` released each epoch, ``[epochs, C, k,
    l]``), ``multipliers`` and ``signs`` (the final ``lam`` and ``sign(h_hat)``, ``[C, k, l]``,
    post-processing of the releases): all three released and covered by ``spend``;
    ``truncated_steps`` (depends on the sampling only) and ``clipped_frac_theta`` (computed from
    the private data: do not publish); ``spend`` = :func:`spend` ``(config, n, hparams)``
    (``None`` when a noise multiplier is traced); ``report``: the SamplingReport (every epoch's
    Poisson steps in ``steps``, ``epochs`` the epochs run, ``("violations", epochs)`` the noisy
    releases).

    Privacy: (epsilon, delta)-DP at the example level under add/remove with the epsilon of
    :func:`spend` for the same config, data size and noise multipliers (module docstring).
    """
    n = int(data.x.shape[0])
    if validate:
        config.validate(n)
        _check_data(data, config)
        v.check_threefry_key(key)
        check_hparams(hparams)
    Cn, k, l = config.num_conditions, config.num_groups, config.num_classes
    k_init, k_run, k_batch = jax.random.split(key, 3)
    k_rel = jax.random.fold_in(key, _REL_KEY)
    k_batch = k_batch if batch_key is None else batch_key
    d = data.x.shape[1:] if data.x.ndim > 2 else data.x.shape[1]
    theta0 = config.model.init(k_init, d) if params0 is None else params0
    c = data.y if config.fairness == "eo" else jnp.zeros_like(data.s)
    hp = sgda.SGDAHparams(lr_theta=hparams.lr_theta, lr_w=0.0, clip_theta=hparams.clip_theta,
                          clip_w=0.0, noise_theta=hparams.noise_theta, noise_w=0.0, radius=jnp.inf)
    run = _EpochRun(config.model, hparams, {"x": data.x, "y": data.y, "s": data.s, "c": c},
                    _grad_path(config, data), jnp.asarray(hparams.lam, jnp.float32), hp, config.sgda_config(n),
                    MM.clipped_sum_std(hparams.noise_violation, hparams.clip_violation), k_run, k_batch, k_rel,
                    (Cn, k, l))
    seen: dict = {}
    init = (theta0, jnp.zeros((Cn, k, l), jnp.float32), jnp.zeros((Cn, k, l), jnp.float32),
            jnp.full((Cn, k), 1.0 / k, jnp.float32))
    (theta, lam, sign, _), (hs, trunc, clipped) = jax.lax.scan(functools.partial(_epoch, run, seen), init,
                                                               jnp.arange(config.epochs))
    diag = {"multipliers": lam, "signs": sign, "violations": hs, "truncated_steps": jnp.sum(trunc),
            "clipped_frac_theta": jnp.mean(clipped)}
    epochs_run = int(hs.shape[0])  # the outer scan's length; each epoch traced once
    per = seen["epoch"]
    report = dataclasses.replace(per, steps=epochs_run * per.steps, epochs=epochs_run).with_releases(
        ("violations", epochs_run * seen["violations"]))
    recorded = None
    if not v.is_traced(hparams.noise_theta, hparams.noise_violation):
        recorded = _spend(config, n, v.host_float("noise_theta", hparams.noise_theta),
                          v.host_float("noise_violation", hparams.noise_violation))
    return FitResult(theta, diag, recorded, report)


# ------------------------------------------------------------------------------------------------
# privacy: spend and calibrate
# ------------------------------------------------------------------------------------------------
def run_event(config: PFLDEpochConfig, n: int, noise_theta: float, noise_violation: float
              ) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of one run: ``T`` Poisson-subsampled Gaussians (multiplier ``noise_theta``)
    composed with ``epochs`` Gaussians (multiplier ``noise_violation``); ``NonPrivateDpEvent`` when
    either multiplier is 0."""
    if noise_theta == 0 or noise_violation == 0:
        return dp_accounting.NonPrivateDpEvent()
    steps = A.dpsgd_event(float(noise_theta), config.batch_size / n, config.steps(n))
    releases = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(float(noise_violation)),
                                                 config.epochs)
    return dp_accounting.ComposedDpEvent([steps, releases])


def truncation_charge(config: PFLDEpochConfig, n: int, epsilon: float) -> float:
    """The Poisson padding's truncation probability over the run at ``epsilon`` (0 when the padded
    batch holds every row): the part of delta the spends charge for it."""
    B = config.sgda_config(n).padded_batch(n)
    if B >= n:
        return 0.0
    return Smp.truncation_delta(n, config.batch_size / n, B, config.steps(n), epsilon)


def spend(config: PFLDEpochConfig, sizes: Any, hparams: PFLDEpochHparams) -> A.PrivacySpend:
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of :func:`fit` with these
    multipliers: :func:`run_event` through the RDP accountant at ``config.delta`` minus the Poisson
    padding's truncation probability (``accounting.truncated_spend``: the spend's delta is
    ``config.delta``). ``sizes``: the training size ``n`` (an int, or
    per-group sizes that sum to it; treated as public, as the sampling rate ``m / n``)."""
    n = v.training_size(sizes)
    config.validate(n)
    check_hparams(hparams)
    zt, zv = v.host_float("noise_theta", hparams.noise_theta), v.host_float("noise_violation", hparams.noise_violation)
    return _spend(config, n, zt, zv)


def _spend(config: PFLDEpochConfig, n: int, zt: float, zv: float) -> A.PrivacySpend:
    """:func:`spend` on checked inputs (host multipliers)."""
    notes = (f"PF-LD per-epoch dual ({config.fairness}): {config.steps(n)} Poisson-subsampled "
             f"DP-SGD steps (q = {config.batch_size}/{n}) + {config.epochs} full-data violation "
             "releases")
    if zt == 0 or zv == 0:
        return A.PrivacySpend(math.inf, config.delta, relation="add_remove", unit="example",
                              notes=notes + "; zero noise: no guarantee")
    event = run_event(config, n, zt, zv)
    eps, total, extra = A.truncated_spend(  # the truncation charge comes out of delta
        lambda d: A.epsilon_of_event(event, d, accountant="rdp"), float(config.delta),
        lambda e: truncation_charge(config, n, e))
    B = config.sgda_config(n).padded_batch(n)
    notes += f"; Poisson padding {B} rows (truncation delta {extra:.2e} included)"
    return A.PrivacySpend(eps, min(total, 0.999999), event=event, relation="add_remove",
                          unit="example", accountant="rdp", notes=notes)


def calibrate(config: PFLDEpochConfig, sizes: Any, target: tuple[float, float], *,
              hparams: PFLDEpochHparams | None = None) -> PFLDEpochHparams:
    """``hparams`` (default :class:`PFLDEpochHparams`) with ``noise_theta = z`` and
    ``noise_violation = config.violation_noise_ratio * z``, ``z`` the smallest (within 0.5%) with
    ``spend(config, sizes, result).epsilon <= target[0]``.

    ``target = (epsilon, delta)`` with ``delta == config.delta``
    (:func:`~dpfair_jax.privacy.accounting.calibration_target`).

    Privacy: the returned multipliers make :func:`fit` (epsilon, delta)-DP as :func:`spend` states.
    """
    n = v.training_size(sizes)
    config.validate(n)
    eps_t, _ = A.calibration_target(target, config.delta)
    hparams = PFLDEpochHparams() if hparams is None else hparams
    if not isinstance(hparams, PFLDEpochHparams):
        raise ValueError(f"hparams must be PFLDEpochHparams, got {type(hparams).__name__}.")
    r = float(config.violation_noise_ratio)
    target_eps = float(eps_t)
    # the truncation charge at the target comes out of delta (refused when it alone reaches delta)
    delta = A.calibration_delta(target_eps, float(config.delta), truncation_charge(config, n, target_eps))

    def eps(z: float) -> float:
        return A.epsilon_of_event(run_event(config, n, z, r * z), delta, accountant="rdp")

    lo = A.calibrate_noise_multiplier(target_eps, delta, config.batch_size / n,
                                      config.steps(n), rtol=1e-3)  # the primal steps alone
    hi = A.step_up_until(eps, lo, target_eps, growth=1.5, max_steps=10**6, ceiling=1e6)  # bracket
    if hi > lo:
        u = optimize.brentq(lambda t: math.log(eps(math.exp(t))) - math.log(target_eps),
                            math.log(lo), math.log(hi), xtol=1e-3)
        z = A.step_up_until(eps, min(math.exp(u), hi), target_eps, growth=1.002, max_steps=10**6)
    else:
        z = hi
    return dataclasses.replace(hparams, noise_theta=float(z), noise_violation=float(r * z))


# ------------------------------------------------------------------------------------------------
# the sensitive-attribute unit: the same run, accounted under a change of one s_i
# (dpfair_jax.algorithms.pfld_epoch.attribute; imported on call, since it builds on this module)
# ------------------------------------------------------------------------------------------------
def attribute_rdp(config: PFLDEpochConfig, n: int, noise_theta: float, noise_violation: float, *,
                  orders=None):
    """RDP of :func:`fit` under a change of one record's ``s_i``:
    :func:`dpfair_jax.algorithms.pfld_epoch.attribute.attribute_rdp`.

    Privacy: an RDP bound for substitution of one ``s_i`` only (unit ``"sensitive_attribute"``)."""
    from dpfair_jax.algorithms.pfld_epoch import attribute as _at

    return _at.attribute_rdp(config, n, noise_theta, noise_violation, orders=orders)


def attribute_spend(config: PFLDEpochConfig, sizes: Any, hparams: PFLDEpochHparams) -> A.PrivacySpend:
    """The spend of :func:`fit` for the sensitive-attribute unit:
    :func:`dpfair_jax.algorithms.pfld_epoch.attribute.attribute_spend`.

    Privacy: (epsilon, delta)-DP under substitution of one record's ``s_i``, relation
    ``"replace_one"``, unit ``"sensitive_attribute"``."""
    from dpfair_jax.algorithms.pfld_epoch import attribute as _at

    return _at.attribute_spend(config, sizes, hparams)
