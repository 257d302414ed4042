"""DP-FERMI (paper 004, Algorithm 1): differentially private fair learning with the ERMI regularizer.

Lowy, Gupta, Razaviyayn (ICLR 2023). Solves the min-max form (eq. 4/6, Theorem 3.2)::

    min_theta max_{W in W}  (1/n) sum_i [ loss(theta; x_i, y_i) + lam * omega_i * psi_i(theta, W_{c_i}) ]

with noisy DP-SGDA (:func:`dpfair_jax.algorithms.sgda.dpsgda`). ``psi_i`` is
:func:`dpfair_jax.fairness.ermi.psi` on the soft predictions ``F(x_i, theta)``: ``[1 - p, p]`` for a
one-logit model, the softmax otherwise (binary or multi-class targets, any number of groups).

* Demographic parity (``fairness="dp"``): one ``W [k, l]``, group frequencies ``p_S``.
* Equalized odds (``fairness="eo"``, Appendix B eq. 5 / F.2.4): one ``W_y`` per label, each
  example uses ``W_{y_i}`` and ``p_{S|Y}(. | y_i)``; the plain average over examples equals eq. 5
  with its ``p_Y(y)`` weights (``eo_weighted=False``: the unweighted sum of the authors' code,
  per-example weight ``omega_i = 1 / p_Y(y_i)``).

Privacy units (``privacy_unit``; default ``"all_features"``, the unit under which subsampling
amplifies and DP-SGD is a baseline of the same unit):

* ``"sensitive_attribute"`` (the paper's Definition 2.2: neighbours differ in one ``s_i``, the
  substitution relation, recorded as ``relation="replace_one"``): only the part of ``psi_i`` that
  depends on ``s_i``, ``2 sum_j W_{s_i j} F_j / sqrt(p_S(s_i))``, is private. Its per-example
  gradients (in theta and W) are clipped to ``C_theta``, ``C_w``, summed, noised and scaled by
  ``lam``; the task loss and the s-free part ``-sum W^2 F - 1`` use exact gradients. Those exact
  gradients are *public but membership-revealing*: a record with a large task gradient shows in
  the output whether it was in the batch, so amplification by subsampling does not apply. In each
  step where a record is sampled, its s-dependent part is a plain Gaussian release at sensitivity
  ``2C`` (one clipped vector replaced by another). :func:`privacy` and :func:`calibrate` therefore
  account this unit exactly as the membership-visible mixture
  ``delta(eps) = sum_k Bin(k; T, q) delta_G(eps; sqrt(k) mu)``
  (:func:`dpfair_jax.privacy.accounting.membership_visible_delta`; ``mu`` the per-step shift over
  the noise of both updates; shuffled batches: ``k`` = the number of epochs). Accounting it as a
  Poisson-subsampled Gaussian (the paper's Theorem 3.3 and earlier versions of this kit)
  understates epsilon several-fold; the audit keeps that as the planted bug
  ``"subsampled_accounting"``. At ``lam = 0`` nothing is noised and ``s`` is unused: such a run is
  not DP-SGD but a non-private model that ignores ``s``.
* ``"all_features"`` (Theorem 3.3's second part, Algorithm 2's view): the whole per-example
  gradient of ``loss + lam * psi`` is clipped in theta (``C_theta``) and ``lam * grad_W psi`` in W
  (``lam * C_w``); nothing unnoised depends on the batch, so Poisson sampling is accounted as the
  Poisson-subsampled Gaussian under add/remove (``q = batch_size / n``, ``n`` treated as public),
  fixed-size batches as sampling without replacement under replace-one (sensitivity ``2C``), and
  shuffled batches under replace-one *without* amplification: a record is in at most one batch per
  epoch, so the run is at most ``epochs`` composed Gaussians (the membership-visible curve at a
  point mass, exact; sampling-without-replacement accounting is not proven for shuffling).

Group frequencies (``config.group_frequencies``): ``P_S`` (DP), ``P_{S|Y}`` and the ``1/p_Y``
weights (EO) enter every example's term, so computing them from the private data (the paper, notes
II.6) lets one record rescale every sampled term. Default ``"noisy"``: they come from one noisy
``[labels x groups]`` histogram (:func:`dpfair_jax.privacy.mechanisms.noisy_histogram`, noise
multiplier ``config.count_noise_multiplier`` under the run's relation, clamped at 1 count), charged
to the spend by :func:`privacy`. ``"public"``: the caller passes public ``p_s`` (and ``p_y`` where
needed) to :func:`fit`; nothing is charged.

Corrected behaviour (default) vs the paper (notes II.5, II.10, II.11):

* W-noise scales with ``lam`` (``lam * V_t``); Algorithm 1 line 6 adds ``V_t`` unscaled, which is
  private only for ``lam <= 1`` (``variant="paper"`` reproduces it).
* Clipping acts on each example's gradient; ``clip_mode="official_batch"`` reproduces the public
  code (per-sample gradients divided by the batch size before clipping, i.e. threshold ``m C``)
  while its noise stays calibrated to ``C`` (NOT private as claimed; for comparison only).
* The full ERMI with ``F = [1 - p, p]``; ``ermi_form="one_cell"`` keeps only ``W[0, 1]`` (the
  code's logistic path, notes II.10-2).
* ``W_0 = 0`` (Algorithm 1); ``w_init="randn"`` is the code's standard-normal start.
* ``P_S`` is computed from the private ``s`` without noise in the paper (notes II.6); here it is a
  noisy, charged estimate by default, or public (see "Group frequencies").

The kit's common interface: ``fit(key, data, hparams, config) -> FermiResult``,
``spend(config, n, hparams) -> PrivacySpend`` (what :func:`privacy` records, at ``config.delta``)
and ``calibrate(config, n, (epsilon, delta), hparams) -> hparams`` (noise multipliers set).
Noise calibration: :func:`calibrate` / :func:`calibrate_noise` (the kit's accountant, both noisy
updates composed each step, sampling as run), or the paper's closed forms in
:mod:`dpfair_jax.algorithms.fermi_theory` (``dpfermi_noise``: Theorem 3.3 / D.2;
``official_dpfermi_calibration``: the authors' code) turned into :func:`fit`'s multipliers by
:func:`theorem33_multipliers`, so the two can be compared.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax import models as M
from dpfair_jax.algorithms import sgda
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.fairness.evaluation import degeneracy, predict
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import clipping, ghost
from dpfair_jax.privacy import mechanisms as Mech
from dpfair_jax.privacy import sampling as Smp
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.relations import replace_factor

__all__ = [
    "FermiConfig",
    "FermiHparams",
    "FermiResult",
    "check_hparams",
    "fit",
    "spend",
    "calibrate",
    "calibrate_noise",
    "init_w",
    "privacy",
    "theorem33_multipliers",
    "task_loss",
]

FAIRNESS = ("dp", "eo")
UNITS = ("sensitive_attribute", "all_features")
VARIANTS = ("corrected", "paper")
CLIP_MODES = ("per_example", "official_batch")
W_INITS = ("zeros", "randn")
ERMI_FORMS = ("full", "one_cell")
GROUP_FREQUENCIES = ("noisy", "public")
_COUNT_KEY = 0x636F756E  # fold_in tag of the noisy-histogram key (keeps the other keys unchanged)


@dataclasses.dataclass(frozen=True)
class FermiConfig:
    """Static settings of a DP-FERMI run.

    ``model``: a :class:`dpfair_jax.models.Model` (logistic, multinomial logistic, MLP, CNN).
    ``steps``/``batch_size``/``sampling``/``projection``/``iterate``/``max_batch_size`` as in
    :class:`~dpfair_jax.algorithms.sgda.SGDAConfig`. ``num_groups`` k and ``num_classes`` l (of the
    targets; 2 for a one-logit model). Named departures: ``variant``, ``clip_mode``, ``w_init``,
    ``ermi_form``, ``eo_weighted`` (see the module docstring). ``group_frequencies``
    (``"noisy"``: a noisy, charged histogram with ``count_noise_multiplier``; ``"public"``: passed
    to :func:`fit`). ``delta``: the delta :func:`spend` states and :func:`calibrate` targets
    (accounting only; the run does not depend on it). ``grad_path="auto"`` uses exact
    ghost norms for (multinomial) logistic models (``sgda.dpsgda(linear=True)``) and for float32
    ``models.cnn`` models (``sgda.dpsgda(cnn_model=...)``: book-keeping ghost clipping of the
    theta-gradients, ``privacy.ghost.cnn_ghost_backward``; a CNN built with ``compute_dtype``
    keeps ``vmap(grad)``); ``"generic"`` forces ``vmap(grad)`` over the parameters (same numbers
    up to float rounding, slower). MLPs always take ``vmap(grad)``.
    """

    model: Any
    num_groups: int
    num_classes: int = 2
    steps: int = 100
    batch_size: int = 1024
    fairness: str = "dp"
    privacy_unit: str = "all_features"
    variant: str = "corrected"
    clip_mode: str = "per_example"
    w_init: str = "zeros"
    ermi_form: str = "full"
    eo_weighted: bool = True
    sampling: str = "poisson"
    projection: str = "ball"
    iterate: str = "last"
    max_batch_size: int | None = None
    grad_path: str = "auto"
    group_frequencies: str = "noisy"
    count_noise_multiplier: float = 50.0
    delta: float = 1e-5

    def validate(self, n: int | None = None) -> "FermiConfig":
        v.check_int("num_groups", self.num_groups, minimum=2)
        v.check_int("num_classes", self.num_classes, minimum=2)
        v.check_choice("fairness", self.fairness, FAIRNESS)
        v.check_choice("privacy_unit", self.privacy_unit, UNITS)
        v.check_choice("variant", self.variant, VARIANTS)
        v.check_choice("clip_mode", self.clip_mode, CLIP_MODES)
        v.check_choice("w_init", self.w_init, W_INITS)
        v.check_choice("ermi_form", self.ermi_form, ERMI_FORMS)
        v.check_choice("grad_path", self.grad_path, ("auto", "generic"))
        v.check_choice("group_frequencies", self.group_frequencies, GROUP_FREQUENCIES)
        v.check_positive("count_noise_multiplier", self.count_noise_multiplier)
        v.check_delta(self.delta)
        if self.ermi_form == "one_cell" and (self.num_classes != 2 or self.fairness != "dp"):
            raise ValueError("ermi_form='one_cell' is the authors' binary DP code path; use "
                             "num_classes=2 and fairness='dp', or ermi_form='full'.")
        outs = getattr(self.model, "num_outputs", None)
        if outs is None:
            raise ValueError("model must be a dpfair_jax.models.Model (with num_outputs).")
        if not (outs == self.num_classes or (outs == 1 and self.num_classes == 2)):
            raise ValueError(f"model has {outs} output(s) but num_classes={self.num_classes}; use "
                             "logistic() for 2 classes or multinomial_logistic(num_classes).")
        if n is not None:
            self.sgda_config().validate(n)
        return self

    @property
    def num_conditions(self) -> int:
        return self.num_classes if self.fairness == "eo" else 1

    def sensitivity_factor(self) -> float:
        """L2 sensitivity of a clipped sum in clip units under the run's relation
        (:func:`dpfair_jax.privacy.relations.replace_factor`: 1 add/remove, 2 replace-one)."""
        return replace_factor(self.relation())

    def accountant_sampling(self) -> str:
        """dp-accounting sampling of the all-features unit: ``"poisson"``, ``"without_replacement"``
        (fixed-size batches) or ``"shuffle"`` (no amplification; :func:`privacy` accounts it as
        composed Gaussians, not through ``accounting.dpsgd_event``)."""
        return {"poisson": "poisson", "fixed_size": "without_replacement"}.get(self.sampling, "shuffle")

    def relation(self) -> str:
        """The neighbouring relation of the spend: substitution of one ``s_i`` (``"replace_one"``)
        for the sensitive-attribute unit; for all features add/remove with Poisson sampling,
        replace-one with shuffled or fixed-size batches."""
        if self.privacy_unit == "sensitive_attribute" or self.sampling != "poisson":
            return "replace_one"
        return "add_remove"

    def sgda_config(self) -> sgda.SGDAConfig:
        return sgda.SGDAConfig(
            steps=self.steps, batch_size=self.batch_size, sampling=self.sampling,
            max_batch_size=self.max_batch_size, projection=self.projection, iterate=self.iterate,
            sensitivity_factor=self.sensitivity_factor(),
        )


class FermiHparams(NamedTuple):
    """Traced hyperparameters: fairness weight ``lam``, step sizes, clip norms, noise multipliers
    (std on a clipped sum = multiplier x clip x sensitivity factor; from :func:`calibrate`) and the
    radius of the W ball/box.

    Defaults train at :class:`FermiConfig`'s default 100 steps of 1024 (measured with ``lam`` 0
    and 1, with and without noise for epsilon = 1: test error 0.167 on Adult, base rate 0.248;
    0.176 on an imbalanced synthetic set, base rate 0.252; 0.182 with 600 rows and batches of 64).
    The paper's tabular step sizes (``lr_theta=0.005, lr_w=0.01``, for 200 epochs) left those runs
    at the base rate with constant predictions (a DP violation of 0 that means nothing);
    :func:`dpfair_jax.fairness.evaluate` and ``FermiResult.diagnostics`` flag such runs (``degenerate``)."""

    lam: Any = 1.0
    lr_theta: Any = 1.0
    lr_w: Any = 0.1
    clip_theta: Any = 1.0
    clip_w: Any = 1.0
    noise_theta: Any = 0.0
    noise_w: Any = 0.0
    radius: Any = 5.0


class FermiResult(NamedTuple):
    """Model ``params``, the ascent variable ``W [C, k, l]`` and ``diagnostics``: DP-SGDA's
    (``truncated_steps``, ``clipped_frac_theta``, ``clipped_frac_w``), the final model's
    ``train_error`` and its :func:`~dpfair_jax.fairness.degeneracy` flags on the training data
    (``constant_predictions``, ``at_base_rate``, ``degenerate``, ``majority_share``,
    ``base_error``). The diagnostics are
    computed from the private training data and are not differentially private: use them to
    flag runs, do not release them."""

    params: Any
    W: jax.Array
    diagnostics: dict


def init_w(key: jax.Array, config: FermiConfig) -> jax.Array:
    """``W_0``: zeros (Algorithm 1) or standard normal (``w_init="randn"``, the authors' code)."""
    shape = (config.num_conditions, config.num_groups, config.num_classes)
    if config.w_init == "zeros":
        return jnp.zeros(shape, jnp.float32)
    return jax.random.normal(key, shape, jnp.float32)


def task_loss(model, logits: jax.Array, y) -> jax.Array:
    """The task loss of ONE example from its logits (as ``model.apply`` returns them for one
    example): binary logistic loss for a one-logit model, softmax cross-entropy otherwise. The
    loss DP-FERMI and PF-LD minimize besides their fairness term."""
    if model.num_outputs == 1:
        return M.binary_logistic_loss(logits, y)
    return M.softmax_cross_entropy(logits, y)


def _frequencies(config: FermiConfig, data: dict, key: jax.Array, p_s=None, p_y=None):
    """``(P [C, k], example weights [n])`` from ``data = {"x", "y", "s"}``: the group frequencies
    of each condition (``P_S`` for DP, ``P_{S|Y}`` for EO) and the per-example weights
    (``1 / p_Y(y_i)`` for unweighted EO, else 1).

    ``group_frequencies="noisy"``: from one noisy ``[l, k]`` histogram of ``(y, s)``
    (:func:`dpfair_jax.privacy.mechanisms.noisy_histogram`, charged by :func:`privacy`), cells
    clamped at 1. ``"public"``: ``p_s`` (``[k]`` or ``[l, k]``) and, for unweighted EO under the
    all-features unit, ``p_y`` are the caller's public values (under the sensitive-attribute unit
    ``y`` is public, so ``p_Y`` may come from the data).
    """
    k, l = config.num_groups, config.num_classes
    n = data["x"].shape[0]
    unweighted_eo = config.fairness == "eo" and not config.eo_weighted
    if config.group_frequencies == "noisy":
        counts = Mech.noisy_histogram(
            key, data["y"] * k + data["s"], l * k, noise_multiplier=config.count_noise_multiplier,
            relation=config.relation(),
        ).reshape(l, k)
        counts = jnp.maximum(counts, 1.0)
        if config.fairness == "eo":
            P = counts / jnp.sum(counts, axis=1, keepdims=True)
        else:
            P = (jnp.sum(counts, axis=0) / jnp.sum(counts))[None]
        p_y_hat = jnp.sum(counts, axis=1) / jnp.sum(counts)
    else:
        P = jnp.asarray(p_s, jnp.float32)
        P = P[None] if P.ndim == 1 else P
        p_y_hat = None if p_y is None else jnp.asarray(p_y, jnp.float32)
        if unweighted_eo and p_y_hat is None:  # y is public under the sensitive-attribute unit
            p_y_hat = jnp.mean(jax.nn.one_hot(data["y"], l), axis=0)
    if not unweighted_eo:
        return P, jnp.ones((n,), jnp.float32)
    return P, 1.0 / jnp.maximum(p_y_hat[data["y"]], 1e-12)


def _check_frequencies(config: FermiConfig, p_s, p_y) -> None:
    """The frequencies' source must match the config (so :func:`privacy` charges what :func:`fit` does)."""
    if config.group_frequencies == "noisy":
        if p_s is not None or p_y is not None:
            raise ValueError("p_s/p_y given but config.group_frequencies='noisy' (the default releases "
                             "them privately); set group_frequencies='public' to use public values.")
        return
    if p_s is None:
        raise ValueError("config.group_frequencies='public' needs public group frequencies: pass p_s "
                         "([k] for DP, [num_classes, k] for EO) to fit, or use group_frequencies='noisy'.")
    if isinstance(p_s, jax.core.Tracer):
        return
    arr = np.asarray(p_s, np.float64)
    ok = {(config.num_groups,), (1, config.num_groups)} if config.fairness == "dp" else {
        (config.num_classes, config.num_groups)}
    if arr.shape not in ok:
        raise ValueError(f"p_s must have shape {sorted(ok)[0]}, got {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("p_s must hold positive, finite group frequencies.")
    if (config.fairness == "eo" and not config.eo_weighted and p_y is None
            and config.privacy_unit == "all_features"):
        raise ValueError("unweighted EO under privacy_unit='all_features' with public frequencies needs "
                         "public label frequencies: pass p_y ([num_classes]) to fit.")


def _fermi_parts(config: FermiConfig, P: jax.Array):
    """``parts(logits, W, ex) -> (task loss, s-free part, s-dependent part)`` of one example
    (:func:`task_loss` and :func:`dpfair_jax.fairness.ermi.psi_parts`; rows of ``W`` taken with
    :func:`~dpfair_jax.fairness.ermi.select_row`, whose per-example gradient is not a scatter)."""
    model = config.model
    cell = E.one_cell_mask(config.num_groups, config.num_classes) if config.ermi_form == "one_cell" else 1.0

    def parts(logits, W, ex):
        probs = E.soft_prediction(logits)
        Wc = E.select_row(W, ex["c"]) * cell
        pub, sens = E.psi_parts(probs, ex["s"], Wc, P[ex["c"]], masked_row=True)
        return task_loss(model, logits, ex["y"]), ex["wt"] * pub, ex["wt"] * sens

    return parts


def _grad_path(config: FermiConfig, x: jax.Array, theta0: Any) -> str:
    """``"linear"`` (GLM ghost norms), ``"cnn"`` (CNN ghost norms) or ``"generic"`` (vmap), from
    what the model declares (:func:`dpfair_jax.privacy.clipping.per_example_path`: ``Model.layers``)
    for features ``x`` and parameters shaped like ``theta0``. DP-SGDA has no dense-stack ghost
    path: MLPs take ``vmap(grad)``."""
    kind = clipping.per_example_path(config.model, "vmap" if config.grad_path == "generic" else "auto")
    if kind == "glm" and x.ndim == 2:
        return "linear"
    if kind == "cnn" and ghost.cnn_matches_apply(config.model, theta0):
        return "cnn"
    return "generic"


def _losses(config: FermiConfig, parts_z, lam, linear: bool):
    """``(private_loss, public_loss)`` per example for the configured privacy unit; functions of
    the logits (``linear``: the GLM and CNN ghost paths) or of the model parameters."""
    if linear:
        parts = parts_z
    else:
        def parts(theta, W, ex):
            return parts_z(config.model.apply(theta, ex["x"]), W, ex)
    if config.privacy_unit == "sensitive_attribute":
        def private(theta, W, ex):
            return lam * parts(theta, W, ex)[2]

        def public(theta, W, ex):
            task, pub, _ = parts(theta, W, ex)
            return task + lam * pub

        return private, public

    def private_all(theta, W, ex):
        task, pub, sens = parts(theta, W, ex)
        return task + lam * (pub + sens)

    return private_all, None


def _check_data(data: Dataset, config: FermiConfig) -> None:
    if not isinstance(data, Dataset):
        raise ValueError("data must be a dpfair_jax.data.Dataset (x, y, s, num_groups).")
    if data.num_groups != config.num_groups:
        raise ValueError(f"data.num_groups={data.num_groups} but config.num_groups="
                         f"{config.num_groups}; make them equal.")
    shape = getattr(config.model, "input_shape", None)
    if shape is not None and tuple(shape) != tuple(data.x.shape[1:]):
        raise ValueError(f"the model expects examples of shape {tuple(shape)} but data.x has "
                         f"{tuple(data.x.shape[1:])}; build the model with input_dim={data.x.shape[1]} "
                         "(or the data's image shape).")
    if isinstance(data.x, jax.core.Tracer):
        return
    v.check_finite("x", data.x)
    v.check_group_ids(data.s, config.num_groups, "s", min_size=1)
    v.check_labels(data.y, config.num_classes, "y")


def check_hparams(hparams: FermiHparams) -> FermiHparams:
    """Refuse, on the host and before any compute, every :class:`FermiHparams` field out of range:
    ``lam >= 0`` finite; the DP-SGDA fields as :func:`dpfair_jax.algorithms.sgda.check_hparams`
    (step sizes ``> 0`` finite; clip norms and radius ``> 0``, ``inf`` allowed: no clipping / no
    projection, an infinite clip only with zero noise; noise multipliers ``>= 0`` finite). Traced
    values are skipped (checked where they were made). Returns ``hparams``."""
    if not isinstance(hparams, FermiHparams):
        raise ValueError(f"hparams must be a fermi.FermiHparams, got {type(hparams).__name__}.")
    v.check_positive("lam", hparams.lam, allow_zero=True)
    sgda.check_hparams(sgda.SGDAHparams(**{f: getattr(hparams, f) for f in sgda.SGDAHparams._fields}))
    return hparams


def _as_float32(hparams: FermiHparams) -> FermiHparams:
    """Every field as a float32 array, so Python floats, NumPy scalars and arrays of one shape all
    reach the compiled program with one signature (the values are those the run uses anyway)."""
    return FermiHparams(*(jnp.asarray(f, jnp.float32) for f in hparams))


@full_precision
def fit(
    key: jax.Array,
    data: Dataset,
    hparams: FermiHparams,
    config: FermiConfig,
    *,
    batch_key: jax.Array | None = None,
    params0: Any = None,
    p_s: Any = None,
    p_y: Any = None,
    validate: bool = True,
    parts_builder: Any = None,
) -> FermiResult:
    """Train with DP-FERMI (Algorithm 1); pure in ``(key, data, hparams)``, jit/vmap-able.

    ``hparams`` fields are traced (vmap over ``lam`` and the noise multipliers to sweep a grid).
    ``batch_key`` (optional) draws the batches, so runs vmapped over hyperparameters can share
    them. ``params0`` overrides ``config.model.init``. ``p_s`` (``[k]`` or ``[l, k]`` for EO) and
    ``p_y`` (``[l]``): public frequencies, only with ``config.group_frequencies="public"`` (the
    default draws them from a noisy histogram charged by :func:`privacy`). ``parts_builder(config,
    P) -> parts`` replaces the ERMI terms by another regularizer split the same way (used by
    :mod:`.pfld`).

    Called eagerly, it runs one compiled program per ``(config, parts_builder)`` and argument
    shapes: the key, the data, every ``hparams`` field (as float32), ``p_s``/``p_y``, ``params0``
    and ``batch_key`` are its traced arguments, so a Python loop over lambdas, noise multipliers,
    step sizes or seeds compiles once (build the config, and its model, once outside the loop: a new
    model object is a new program). Called inside a ``jit``/``vmap`` (any argument traced), it is
    traced into the caller's program.

    Privacy: (epsilon, delta)-DP for the unit ``config.privacy_unit`` when the noise multipliers
    come from :func:`calibrate` with the same config and data size (see the module docstring for
    the relation and accounting); ``variant="paper"`` with ``lam > 1`` and
    ``clip_mode="official_batch"`` void that guarantee.
    """
    if validate:
        config.validate(data.x.shape[0])
        _check_data(data, config)
        v.check_threefry_key(key)
        check_hparams(hparams)
        _check_frequencies(config, p_s, p_y)
    if data.mask is not None:
        raise ValueError("fit does not take padded datasets (mask); drop the padding rows first.")
    examples = {"x": data.x, "y": data.y, "s": data.s}
    args = (key, examples, hparams, batch_key, params0, p_s, p_y)
    builder = parts_builder or _fermi_parts
    if any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves(args)):
        return _fit_impl(config, builder, *args)  # inside the caller's jit/vmap: its program
    return _fit_program(config, builder, key, examples, _as_float32(hparams), *args[3:])


def _fit_impl(config: FermiConfig, parts_builder: Any, key: jax.Array, data: dict, hparams: FermiHparams,
              batch_key: Any, params0: Any, p_s: Any, p_y: Any) -> FermiResult:
    """The body of :func:`fit` on checked inputs (``data``: ``{"x", "y", "s"}``)."""
    k_init, k_w, k_run = jax.random.split(key, 3)
    model = config.model
    x = data["x"]
    theta0 = model.init(k_init, x.shape[1:] if x.ndim > 2 else x.shape[1]) if params0 is None else params0
    W0 = init_w(k_w, config)
    P, weights = _frequencies(config, data, jax.random.fold_in(key, _COUNT_KEY), p_s, p_y)
    lam = jnp.asarray(hparams.lam, jnp.float32)
    examples = {
        "x": x,
        "y": data["y"],
        "s": data["s"],
        "c": data["y"] if config.fairness == "eo" else jnp.zeros_like(data["s"]),
        "wt": weights,
    }
    m = config.batch_size
    official = config.clip_mode == "official_batch"
    batch_scale = float(m) if official else 1.0
    if config.privacy_unit == "sensitive_attribute":
        clip_theta = lam * hparams.clip_theta
    else:
        clip_theta = jnp.asarray(hparams.clip_theta, jnp.float32)
    clip_w = lam * hparams.clip_w
    noise_theta = jnp.asarray(hparams.noise_theta, jnp.float32) / batch_scale
    noise_w = jnp.asarray(hparams.noise_w, jnp.float32) / batch_scale
    if config.variant == "paper":  # V_t not scaled by lam (Alg. 1 line 6 as printed)
        noise_w = jnp.where(lam > 0, noise_w / jnp.maximum(lam, 1e-30), 0.0)
    hp = sgda.SGDAHparams(
        lr_theta=hparams.lr_theta, lr_w=hparams.lr_w, clip_theta=clip_theta * batch_scale,
        clip_w=clip_w * batch_scale, noise_theta=noise_theta, noise_w=noise_w, radius=hparams.radius,
    )
    parts = parts_builder(config, P)
    path = _grad_path(config, x, theta0)
    private, public = _losses(config, parts, lam, path != "generic")
    res = sgda.dpsgda(
        k_run, examples, theta0, W0, hp, config.sgda_config(), private_loss=private,
        public_loss=public, batch_key=batch_key, validate=False, linear=path == "linear",
        cnn_model=config.model if path == "cnn" else None,
    )
    yhat = predict(model, res.theta, x)
    train = {"train_error": jnp.mean((yhat != data["y"]).astype(jnp.float32)),
             **degeneracy(yhat, data["y"], config.num_classes)}
    return FermiResult(res.theta, res.w, {**res.diagnostics, **train})


_fit_program = jax.jit(_fit_impl, static_argnums=(0, 1))


# ------------------------------------------------------------------------------------------------
# privacy: the kit's accountant and the paper's closed form
# ------------------------------------------------------------------------------------------------
def _participation(config: FermiConfig, n: int):
    """Law of the number of steps a given record is sampled in (membership-visible accounting)."""
    if config.sampling == "shuffle":
        return A.participation_distribution(config.steps, "shuffle",
                                            steps_per_epoch=Smp.steps_per_epoch(n, config.batch_size))
    return A.participation_distribution(config.steps, config.sampling, sample_rate=config.batch_size / n)


def _count_mu(config: FermiConfig) -> float:
    """Shift/std of the noisy group-frequency histogram (0 when the frequencies are public)."""
    return 1.0 / config.count_noise_multiplier if config.group_frequencies == "noisy" else 0.0


def _count_event(config: FermiConfig):
    if config.group_frequencies != "noisy":
        return None
    return dp_accounting.GaussianDpEvent(float(config.count_noise_multiplier))


def calibrate_noise(
    config: FermiConfig,
    n: int,
    epsilon: float,
    delta: float,
    *,
    w_relative: float = 1.0,
    accountant: str = "rdp",
) -> tuple[float, float]:
    """Noise multipliers ``(z_theta, z_w = w_relative * z_theta)`` for (epsilon, delta)-DP
    (:func:`calibrate` returns them set in a :class:`FermiHparams`).

    Sensitive-attribute unit: the membership-visible mixture solved exactly for the per-step shift
    ``mu = sqrt(z_theta^-2 + z_w^-2)`` (:func:`dpfair_jax.privacy.accounting.calibrate_membership_visible`),
    with the noisy-frequency histogram composed in. All features: both noisy updates of every step
    composed on the same sampled batch with the sampling the run uses (Poisson: add/remove;
    fixed-size: without replacement, replace-one) and the histogram composed once
    (``accounting.calibrate_noise_multiplier``, ``accountant``); shuffled batches: no
    amplification, the exact curve of ``epochs`` composed Gaussians with the histogram
    (``calibrate_membership_visible`` at the shuffle point mass, as for the sensitive attribute).
    ``epsilon = inf`` returns ``(0, 0)``.

    Privacy: as :func:`fit` for ``config.privacy_unit``; :func:`privacy` of the result is at most
    ``epsilon``, with the Poisson padding's truncation probability added to ``delta`` (it grows with
    ``e^epsilon``: with the default padding, mean + 8 standard deviations, it is below 1e-10 at
    epsilon <= 3 on tabular sizes but can exceed a ``delta = 1/n^2`` at epsilon = 9, e.g. 3.7e-8 on
    Adult; the recorded spend states it, and a larger ``config.max_batch_size`` lowers it).
    """
    config.validate(n)
    v.check_epsilon(epsilon, allow_inf=True)
    v.check_delta(delta)
    v.check_positive("w_relative", w_relative)
    if math.isinf(float(epsilon)):
        return 0.0, 0.0
    w = float(w_relative)
    if config.privacy_unit == "sensitive_attribute" or config.sampling == "shuffle":
        mu = A.calibrate_membership_visible(float(epsilon), float(delta), _participation(config, n),
                                            extra_mu=_count_mu(config))
        z = math.sqrt(1.0 + w**-2) / mu
        return float(z), float(z * w)
    z = A.calibrate_noise_multiplier(
        float(epsilon), float(delta), config.batch_size / n, config.steps, accountant=accountant,
        sampling=config.accountant_sampling(), relative_noise=(1.0, w),
        dataset_size=None if config.sampling == "poisson" else n, extra_event=_count_event(config),
    )
    return float(z), float(z * w)


def privacy(config: FermiConfig, n: int, noise_theta: float, noise_w: float, delta: float,
            *, accountant: str = "rdp"):
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of one run with these multipliers.

    Sensitive-attribute unit: exact membership-visible accounting (``accountant="exact"``, no
    ``DpEvent``), relation ``"replace_one"`` (substitution of one ``s_i``). All features: the
    ``DpEvent`` of the subsampled steps (and the histogram) through ``accountant``; with shuffled
    batches no amplification: ``epochs`` composed Gaussians (``accounting.shuffled_event``), epsilon
    from their exact curve (``accountant="exact"``). All include the noisy group-frequency
    histogram when ``config.group_frequencies="noisy"``.
    """
    config.validate(n)
    v.check_noise_multiplier(noise_theta, "noise_theta")
    v.check_noise_multiplier(noise_w, "noise_w")
    v.check_delta(delta)
    unit = "sensitive_attribute" if config.privacy_unit == "sensitive_attribute" else "example"
    freq = ("group frequencies from a noisy histogram (noise multiplier "
            f"{config.count_noise_multiplier:g}, charged)" if config.group_frequencies == "noisy"
            else "group frequencies public (supplied by the caller, not charged)")
    if noise_theta == 0 or noise_w == 0:
        return A.PrivacySpend(math.inf, float(delta), relation=config.relation(), unit=unit,
                              notes="zero noise: no guarantee")
    notes = f"DP-FERMI {config.fairness}, unit {config.privacy_unit}, variant={config.variant}; {freq}"
    event = None
    if config.privacy_unit == "sensitive_attribute":
        mu_step = math.sqrt(float(noise_theta) ** -2 + float(noise_w) ** -2)
        eps = A.membership_visible_epsilon(mu_step, float(delta), _participation(config, n),
                                           extra_mu=_count_mu(config))
        used = "exact"
        notes += ("; membership-visible accounting (public task gradients reveal batch membership: "
                  "no amplification by subsampling); lam = 0 runs leave s unused and are not private "
                  "for examples")
    elif config.sampling == "shuffle":
        spe = Smp.steps_per_epoch(n, config.batch_size)
        mu_step = math.sqrt(float(noise_theta) ** -2 + float(noise_w) ** -2)
        eps = A.membership_visible_epsilon(mu_step, float(delta), _participation(config, n),
                                           extra_mu=_count_mu(config))
        event = A.shuffled_event(float(noise_theta), config.steps, spe,
                                 relative_noise=(1.0, float(noise_w) / float(noise_theta)))
        extra = _count_event(config)
        if extra is not None:
            event = dp_accounting.ComposedDpEvent([extra, event])
        used = "exact"
        notes += (f"; shuffled epochs without amplification: at most "
                  f"{A.shuffled_participations(config.steps, spe)} composed Gaussians per record, exact curve")
    else:
        event = A.dpsgd_event(
            float(noise_theta), config.batch_size / n, config.steps, sampling=config.accountant_sampling(),
            relative_noise=(1.0, float(noise_w) / float(noise_theta)),
            dataset_size=None if config.sampling == "poisson" else n,
        )
        extra = _count_event(config)
        if extra is not None:
            event = dp_accounting.ComposedDpEvent([extra, event])
        eps = A.epsilon_of_event(event, float(delta), accountant=accountant)
        used = accountant
    extra_delta = 0.0
    if config.sampling == "poisson":
        B = config.sgda_config().padded_batch(n)
        extra_delta = Smp.truncation_delta(n, config.batch_size / n, B, config.steps, eps) if B < n else 0.0
        notes += f"; Poisson padding {B} rows (truncation delta {extra_delta:.2e} included)"
    if config.variant == "paper" or config.clip_mode == "official_batch":
        notes += "; LITERAL variant: the guarantee holds only for lam <= 1 / per-example clipping"
    return A.PrivacySpend(eps, min(float(delta) + extra_delta, 0.999999), event=event,
                          relation=config.relation(), unit=unit, accountant=used, notes=notes)


def _size(sizes: Any) -> int:
    """The training size ``n`` from ``sizes``: an int, or per-group sizes (summed)."""
    n = int(np.sum(np.asarray(sizes))) if np.ndim(sizes) else sizes
    return v.check_int("sizes (the training size n)", n, minimum=1)


def _host_float(name: str, value: Any) -> float:
    if isinstance(value, jax.core.Tracer) or np.ndim(value) != 0:
        raise ValueError(f"hparams.{name} must be one host number for spend (one spend per grid "
                         f"point), got {type(value).__name__} of shape {np.shape(value)}.")
    return float(value)


def spend(config: FermiConfig, sizes: Any, hparams: FermiHparams) -> A.PrivacySpend:
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of ``fit(key, data, hparams,
    config)``: :func:`privacy` at ``hparams.noise_theta``, ``hparams.noise_w`` and
    ``config.delta`` (RDP for the Poisson and fixed-size all-features runs, exact otherwise).

    ``sizes``: the training size ``n`` (an int, or per-group sizes that sum to it; treated as
    public, as the sampling rate ``batch_size / n``). The other fields of ``hparams`` do not enter
    the spend (the clip norms set the noise scale, not the privacy); the noise multipliers must be
    host numbers (one spend per grid point).

    Privacy: as :func:`privacy`, for the unit and relation of ``config``.
    """
    config.validate()
    n = _size(sizes)
    check_hparams(hparams)
    zt, zw = _host_float("noise_theta", hparams.noise_theta), _host_float("noise_w", hparams.noise_w)
    return privacy(config, n, zt, zw, config.delta)


def calibrate(config: FermiConfig, sizes: Any, target: tuple[float, float],
              hparams: FermiHparams = FermiHparams(), *, w_relative: float = 1.0) -> FermiHparams:
    """``hparams`` with ``noise_theta = z`` and ``noise_w = w_relative * z`` set so that
    ``spend(config, sizes, result).epsilon <= target[0]`` (:func:`calibrate_noise`, tight to its
    root finder's tolerance).

    ``target = (epsilon, delta)`` with ``delta == config.delta`` (the delta :func:`spend` states;
    set ``FermiConfig(delta=...)``); ``epsilon = inf`` gives zero noise (no guarantee). ``sizes`` as
    in :func:`spend`.

    Privacy: the returned multipliers make :func:`fit` (epsilon, delta)-DP for ``config``'s unit,
    with the Poisson padding's truncation probability added to delta in the spend.
    """
    config.validate()
    n = _size(sizes)
    if not isinstance(target, tuple) or len(target) != 2:
        raise ValueError(f"target must be an (epsilon, delta) tuple, got {target!r}.")
    eps, delta = target
    v.check_epsilon(eps, "target epsilon", allow_inf=True)
    v.check_delta(delta, "target delta")
    if float(delta) != float(config.delta):
        raise ValueError(f"target delta={delta} differs from config.delta={config.delta}, the delta "
                         "the spend is stated at; set FermiConfig(delta=...) to the target's.")
    if not isinstance(hparams, FermiHparams):
        raise ValueError(f"hparams must be a fermi.FermiHparams, got {type(hparams).__name__}.")
    zt, zw = calibrate_noise(config, n, float(eps), float(delta), w_relative=w_relative)
    out = hparams._replace(noise_theta=zt, noise_w=zw)
    while math.isfinite(float(eps)) and spend(config, n, out).epsilon > float(eps):  # solver rounding
        zt, zw = zt * (1.0 + 1e-9), zw * (1.0 + 1e-9)
        out = hparams._replace(noise_theta=zt, noise_w=zw)
    return out


def theorem33_multipliers(config: FermiConfig, sigma_theta: float, sigma_w: float,
                          clip_theta: float, clip_w: float) -> tuple[float, float]:
    """Noise multipliers that make :func:`fit` add the paper's noise (Theorem 3.3 stds on the averaged
    gradient, times ``lam``): ``z = sigma m / (C k)``, with ``k`` the sensitivity factor.

    The stds come from :func:`dpfair_jax.algorithms.fermi_theory.dpfermi_noise` or
    ``official_dpfermi_calibration``. Privacy: what the paper's recipe states, not what
    :func:`privacy` accounts for the result (compare the two with :func:`privacy`)."""
    fct = config.sensitivity_factor()
    m = config.batch_size
    return sigma_theta * m / (clip_theta * fct), sigma_w * m / (clip_w * fct)
