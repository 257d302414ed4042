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

Privacy units (``privacy_unit``):

* ``"sensitive_attribute"`` (the paper's Definition 2.2: neighbours differ in one ``s_i``): only
  the part of ``psi_i`` that depends on ``s_i``,
  ``2 sum_j W_{s_i j} F_j / sqrt(p_S(s_i))``, is private. Its per-example gradients (in theta and
  W) are clipped to ``C_theta``, ``C_w``, summed, noised and scaled by ``lam``; the task loss and
  the s-free part ``-sum W^2 F - 1`` use exact gradients. Changing ``s_i`` moves one clipped
  vector to another (L2 distance <= 2C) with the batch membership unchanged; it is accounted as the
  Poisson-subsampled Gaussian at sensitivity ``2C`` under add/remove (the substitution pair
  ``(1-q)N(0) + qN(a)`` vs ``(1-q)N(0) + qN(b)`` is dominated in Renyi divergence by the
  add/remove pair with shift ``|a - b|``; ``tests/test_fermi.py`` checks this numerically), or as
  sampling without replacement under replace-one for shuffled/fixed-size batches.
* ``"all_features"`` (Theorem 3.3's second part, Algorithm 2's view): the whole per-example
  gradient of ``loss + lam * psi`` is clipped in theta (``C_theta``) and ``lam * grad_W psi`` in W
  (``lam * C_w``), add/remove neighbours for Poisson sampling.

Corrected behaviour (default) vs the paper (notes II.5, II.10, II.11):

* W-noise scales with ``lam`` (``lam * V_t``); Algorithm 1 line 6 adds ``V_t`` unscaled, which is
  private only for ``lam <= 1`` (``variant="paper"`` reproduces it).
* Clipping acts on each example's gradient; ``clip_mode="official_batch"`` reproduces the public
  code (per-sample gradients divided by the batch size before clipping, i.e. threshold ``m C``)
  while its noise stays calibrated to ``C`` (NOT private as claimed; for comparison only).
* The full ERMI with ``F = [1 - p, p]``; ``ermi_form="one_cell"`` keeps only ``W[0, 1]`` (the
  code's logistic path, notes II.10-2).
* ``W_0 = 0`` (Algorithm 1); ``w_init="randn"`` is the code's standard-normal start.
* ``P_S`` is computed from the private ``s`` without noise in the paper (notes II.6); pass a public
  ``p_s`` to :func:`fit` to avoid this (the accounting here, like the paper's, ignores its O(1/n)
  effect on the other examples' terms).

Noise calibration: :func:`calibrate` (the kit's accountant, both noisy updates composed each step,
sampling as run) or :func:`theorem33_noise` / :func:`theorem33_multipliers` (the paper's closed
form, Theorem 3.3 / D.2) so the two can be compared.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.algorithms import sgda
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "FermiConfig",
    "FermiHparams",
    "FermiResult",
    "fit",
    "init_w",
    "calibrate",
    "privacy",
    "theorem33_noise",
    "theorem33_multipliers",
    "official_calibration",
    "min_steps_theorem33",
    "predict",
    "evaluate",
    "dp_violation",
    "eo_violation",
]

FAIRNESS = ("dp", "eo")
UNITS = ("sensitive_attribute", "all_features")
VARIANTS = ("corrected", "paper")
CLIP_MODES = ("per_example", "official_batch")
W_INITS = ("zeros", "randn")
ERMI_FORMS = ("full", "one_cell")


@dataclasses.dataclass(frozen=True)
class FermiConfig:
    """Static settings of a DP-FERMI run.

    ``model``: a :class:`dpfair_jax.models.Model` (logistic, multinomial logistic, MLP, CNN).
    ``steps``/``batch_size``/``sampling``/``projection``/``iterate``/``max_batch_size`` as in
    :class:`~dpfair_jax.algorithms.sgda.SGDAConfig`. ``num_groups`` k and ``num_classes`` l (of the
    targets; 2 for a one-logit model). Named departures: ``variant``, ``clip_mode``, ``w_init``,
    ``ermi_form``, ``eo_weighted`` (see the module docstring). ``grad_path="auto"`` uses exact
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
    privacy_unit: str = "sensitive_attribute"
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
        """L2 sensitivity of a clipped sum in clip units under the run's relation."""
        if self.privacy_unit == "sensitive_attribute" or self.sampling != "poisson":
            return 2.0
        return 1.0

    def accountant_sampling(self) -> str:
        return "poisson" if self.sampling == "poisson" else "without_replacement"

    def relation(self) -> str:
        return "add_remove" if self.sampling == "poisson" else "replace_one"

    def sgda_config(self) -> sgda.SGDAConfig:
        return sgda.SGDAConfig(
            steps=self.steps, batch_size=self.batch_size, sampling=self.sampling,
            max_batch_size=self.max_batch_size, projection=self.projection, iterate=self.iterate,
            sensitivity_factor=self.sensitivity_factor(),
        )


class FermiHparams(NamedTuple):
    """Traced hyperparameters: fairness weight ``lam``, step sizes, clip norms, noise multipliers
    (std on a clipped sum = multiplier x clip x sensitivity factor; from :func:`calibrate`) and the
    radius of the W ball/box. Defaults: the paper's tabular settings (eta_theta 0.005, eta_w 0.01,
    radius 5 as in the code)."""

    lam: Any = 1.0
    lr_theta: Any = 0.005
    lr_w: Any = 0.01
    clip_theta: Any = 1.0
    clip_w: Any = 1.0
    noise_theta: Any = 0.0
    noise_w: Any = 0.0
    radius: Any = 5.0


class FermiResult(NamedTuple):
    """Model ``params``, the ascent variable ``W [C, k, l]`` and ``diagnostics``."""

    params: Any
    W: jax.Array
    diagnostics: dict


def init_w(key: jax.Array, config: FermiConfig) -> jax.Array:
    """``W_0``: zeros (Algorithm 1) or standard normal (``w_init="randn"``, the authors' code)."""
    shape = (config.num_conditions, config.num_groups, config.num_classes)
    if config.w_init == "zeros":
        return jnp.zeros(shape, jnp.float32)
    return jax.random.normal(key, shape, jnp.float32)


def _task_loss(model, logits, y):
    from dpfair_jax import models as M

    if model.num_outputs == 1:
        return M.binary_logistic_loss(logits, y)
    return M.softmax_cross_entropy(logits, y)


def _probs_one(model, logits):
    return E.soft_predictions(jnp.reshape(logits, (1, -1)) if model.num_outputs > 1 else jnp.reshape(logits, (1,)))[0]


def _p_table(config: FermiConfig, data: Dataset, p_s=None) -> jax.Array:
    if p_s is not None:
        p = jnp.asarray(p_s, jnp.float32)
        return p[None] if p.ndim == 1 else p
    w = data.weights()
    if config.fairness == "eo":
        return E.conditional_group_frequencies(data.s, data.y, config.num_groups, config.num_classes, w)
    return E.group_frequencies(data.s, config.num_groups, w)[None]


def _example_weights(config: FermiConfig, data: Dataset) -> jax.Array:
    n = data.x.shape[0]
    if config.fairness == "dp" or config.eo_weighted:
        return jnp.ones((n,), jnp.float32)
    w = data.weights()
    p_y = (w @ jax.nn.one_hot(data.y, config.num_classes)) / jnp.sum(w)
    return 1.0 / jnp.maximum(p_y[data.y], 1e-12)


def _fermi_parts(config: FermiConfig, P: jax.Array):
    """``parts(logits, W, ex) -> (task loss, s-free part, s-dependent part)`` of one example."""
    model = config.model
    cell = E.one_cell_mask(config.num_groups, config.num_classes) if config.ermi_form == "one_cell" else 1.0

    def parts(logits, W, ex):
        probs = _probs_one(model, logits)
        Wc = _select_row(W, ex["c"]) * cell
        pub, sens = _psi_parts(probs, ex["s"], Wc, P[ex["c"]])
        return _task_loss(model, logits, ex["y"]), ex["wt"] * pub, ex["wt"] * sens

    return parts


def _select_row(W: jax.Array, i) -> jax.Array:
    """``W[i]`` as a masked sum over the leading axis (exactly the same values). Its gradient in
    ``W`` is elementwise; the gradient of ``W[i]`` is a scatter, which under the per-example
    ``vmap`` of DP-SGDA runs serially on XLA's CPU backend and dominated the step."""
    hit = jnp.arange(W.shape[0]) == i
    return jnp.sum(jnp.where(hit.reshape((-1,) + (1,) * (W.ndim - 1)), W, 0.0), axis=0)


def _psi_parts(probs_i: jax.Array, s_i, W: jax.Array, p_s: jax.Array):
    """:func:`ermi.psi_parts` with the row ``W[s_i]`` taken by :func:`_select_row` (same values)."""
    quad = -jnp.sum(jnp.sum(W * W, axis=0) * probs_i) - 1.0
    row = _select_row(W, s_i) * E._inv_sqrt(p_s)[s_i]
    lin = 2.0 * jnp.sum(row * probs_i)
    return quad, lin


def _grad_path(config: FermiConfig, data: Dataset, theta0: Any) -> str:
    """``"linear"`` (GLM ghost norms), ``"cnn"`` (CNN ghost norms) or ``"generic"`` (vmap)."""
    if config.grad_path == "generic":
        return "generic"
    name = getattr(config.model, "name", "")
    if name in ("logistic", "multinomial_logistic", "linear") and data.x.ndim == 2:
        return "linear"
    if name == "cnn":
        from dpfair_jax.privacy import ghost

        if ghost.cnn_matches_apply(config.model, theta0):
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
    if isinstance(data.x, jax.core.Tracer):
        return
    v.check_finite("x", data.x)
    v.check_group_ids(data.s, config.num_groups, "s", min_size=1)
    v.check_labels(data.y, config.num_classes, "y")


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
    validate: bool = True,
    parts_builder: Any = None,
) -> FermiResult:
    """Train with DP-FERMI (Algorithm 1); pure in ``(key, data, hparams)``, jit/vmap-able.

    ``hparams`` fields are traced (vmap over ``lam`` and the noise multipliers to sweep a grid).
    ``batch_key`` (optional) draws the batches, so runs vmapped over hyperparameters can share
    them. ``params0`` overrides ``config.model.init``. ``p_s`` (``[k]`` or ``[l, k]`` for EO): public
    group frequencies instead of the data's. ``parts_builder(config, P) -> parts`` replaces the
    ERMI terms by another regularizer split the same way (used by :mod:`.pfld`).

    Privacy: (epsilon, delta)-DP for the unit ``config.privacy_unit`` when the noise multipliers
    come from :func:`calibrate` with the same config and data size (see the module docstring for
    the relation and accounting); ``variant="paper"`` with ``lam > 1`` and
    ``clip_mode="official_batch"`` void that guarantee.
    """
    if validate:
        config.validate(data.x.shape[0])
        _check_data(data, config)
        v.check_threefry_key(key)
        v.check_positive("lam", hparams.lam, allow_zero=True)
    k_init, k_w, k_run = jax.random.split(key, 3)
    model = config.model
    theta0 = model.init(k_init, data.x.shape[1:] if data.x.ndim > 2 else data.x.shape[1]) if params0 is None else params0
    W0 = init_w(k_w, config)
    P = _p_table(config, data, p_s)
    lam = jnp.asarray(hparams.lam, jnp.float32)
    examples = {
        "x": data.x,
        "y": data.y,
        "s": data.s,
        "c": data.y if config.fairness == "eo" else jnp.zeros_like(data.s),
        "wt": _example_weights(config, data),
    }
    if data.mask is not None:
        raise ValueError("fit does not take padded datasets (mask); drop the padding rows first.")
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
    parts = (parts_builder or _fermi_parts)(config, P)
    path = _grad_path(config, data, theta0)
    private, public = _losses(config, parts, lam, path != "generic")
    res = sgda.dpsgda(
        k_run, examples, theta0, W0, hp, config.sgda_config(), private_loss=private,
        public_loss=public, batch_key=batch_key, validate=False, linear=path == "linear",
        cnn_model=config.model if path == "cnn" else None,
    )
    return FermiResult(res.theta, res.w, res.diagnostics)


# ------------------------------------------------------------------------------------------------
# privacy: the kit's accountant and the paper's closed form
# ------------------------------------------------------------------------------------------------
def calibrate(
    config: FermiConfig,
    n: int,
    epsilon: float,
    delta: float,
    *,
    w_relative: float = 1.0,
    accountant: str = "rdp",
) -> tuple[float, float]:
    """Noise multipliers ``(z_theta, z_w = w_relative * z_theta)`` for (epsilon, delta)-DP.

    Both noisy updates of every step are composed on the same sampled batch
    (``accounting.calibrate_noise_multiplier(..., relative_noise=(1, w_relative))``) with the
    sampling the run uses (Poisson: add/remove; shuffled or fixed-size: without replacement,
    replace-one). ``epsilon = inf`` returns ``(0, 0)``.

    Privacy: as :func:`fit` for ``config.privacy_unit``. The Poisson padding overflow adds
    ``sampling.truncation_delta`` (below 1e-10 with the default padding; see :func:`privacy`).
    """
    from dpfair_jax.privacy import accounting as A

    config.validate(n)
    v.check_epsilon(epsilon, allow_inf=True)
    v.check_delta(delta)
    v.check_positive("w_relative", w_relative)
    if math.isinf(float(epsilon)):
        return 0.0, 0.0
    z = A.calibrate_noise_multiplier(
        float(epsilon), float(delta), config.batch_size / n, config.steps, accountant=accountant,
        sampling=config.accountant_sampling(), relative_noise=(1.0, float(w_relative)),
        dataset_size=None if config.sampling == "poisson" else n,
    )
    return float(z), float(z * w_relative)


def privacy(config: FermiConfig, n: int, noise_theta: float, noise_w: float, delta: float,
            *, accountant: str = "rdp"):
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of one run with these multipliers."""
    from dpfair_jax.privacy import accounting as A
    from dpfair_jax.privacy import sampling as Smp

    config.validate(n)
    v.check_noise_multiplier(noise_theta, "noise_theta")
    v.check_noise_multiplier(noise_w, "noise_w")
    v.check_delta(delta)
    unit = "sensitive_attribute" if config.privacy_unit == "sensitive_attribute" else "example"
    if noise_theta == 0 or noise_w == 0:
        return A.PrivacySpend(math.inf, float(delta), relation=config.relation(), unit=unit,
                              notes="zero noise: no guarantee")
    event = A.dpsgd_event(
        float(noise_theta), config.batch_size / n, config.steps, sampling=config.accountant_sampling(),
        relative_noise=(1.0, float(noise_w) / float(noise_theta)),
        dataset_size=None if config.sampling == "poisson" else n,
    )
    eps = A.epsilon_of_event(event, float(delta), accountant=accountant)
    extra = 0.0
    notes = f"DP-FERMI {config.fairness}, {config.privacy_unit}, variant={config.variant}"
    if config.sampling == "poisson":
        B = config.sgda_config().padded_batch(n)
        extra = Smp.truncation_delta(n, config.batch_size / n, B, config.steps, eps) if B < n else 0.0
        notes += f"; Poisson padding {B} rows (truncation delta {extra:.2e} included)"
    if config.variant == "paper" or config.clip_mode == "official_batch":
        notes += "; LITERAL variant: the guarantee holds only for lam <= 1 / per-example clipping"
    return A.PrivacySpend(eps, min(float(delta) + extra, 0.999999), event=event,
                          relation=config.relation(), unit=unit, accountant=accountant, notes=notes)


def min_steps_theorem33(n: int, batch_size: int, epsilon: float) -> int:
    """Theorem 3.3's condition ``T >= (n sqrt(eps) / (2 m))^2``."""
    return int(math.ceil((n * math.sqrt(epsilon) / (2.0 * batch_size)) ** 2))


def theorem33_noise(
    n: int, steps: int, epsilon: float, delta: float, rho: float, *,
    lipschitz: float = 5.0, radius: float = 5.0, num_classes: int = 2,
    unit: str = "sensitive_attribute", form: str = "proof", composition: str = "paper",
) -> tuple[float, float]:
    """The paper's closed-form noise (Theorem 3.3 / D.2): ``(sigma_theta, sigma_w)``, the std of
    the Gaussian added to the *averaged* minibatch gradients (before the ``lam`` factor).

    Sensitive attributes: ``sigma_w^2 = 16 T ln(1/delta) / (eps^2 n^2 rho)``,
    ``sigma_theta^2 = 16 L^2 D^2 ln(1/delta) T / (eps^2 n^2 rho)``.
    All features: ``sigma_w^2 = 32 T ln(1/delta) (1/rho + D^2) / (eps^2 n^2)``;
    ``sigma_theta^2 = 8 L^2 D^2 T ln(1/delta) (4/rho + l^2) / (eps^2 n^2)`` (``form="proof"``, the
    proof's last line) or ``64 L^2 D^2 ln T / (eps^2 n^2 rho) + 32 D^4 L^2 l^2 T ln / (eps^2 n^2)``
    (``form="statement"``, the theorem as printed, more conservative; notes II.6).
    ``composition="paper"`` gives the printed values (each update separately (eps, delta));
    ``"joint"`` scales both stds by sqrt 2 so the two updates together meet (eps, delta) under the
    same recipe. Delegates to :func:`dpfair_jax.privacy.paper_formulas.dpfermi_noise`; the
    theorem's conditions ``eps <= 2 ln(1/delta)``, ``T >= (n sqrt(eps) / (2m))^2`` are the caller's.
    """
    from dpfair_jax.privacy import paper_formulas as PF

    v.check_choice("unit", unit, UNITS)
    v.check_choice("form", form, ("proof", "statement"))
    out = PF.dpfermi_noise(
        float(epsilon), float(delta), n, steps, float(rho), lipschitz_theta=lipschitz,
        w_bound=radius, num_classes=num_classes, privacy=unit, theta_formula=form,
        composition=composition, check_assumptions=False,
    )
    return float(out.sigma_theta), float(out.sigma_w)


def official_calibration(n_train: int, min_group_count: int, epochs: int, batch_size: int,
                         epsilon: float, *, lipschitz: float = 5.0, radius: float = 5.0) -> dict:
    """The authors' code's calibration (notes II.10-9): ``delta = 1/n^2``, ``T = epochs ceil(n/B)``,
    ``rho = (min count - 1)/n`` and the sensitive-attribute formulas of :func:`theorem33_noise`
    (``paper_formulas.official_dpfermi_calibration`` as a dict)."""
    from dpfair_jax.privacy import paper_formulas as PF

    out = PF.official_dpfermi_calibration(n_train, min_group_count, epochs, batch_size, float(epsilon),
                                          lipschitz_theta=lipschitz, radius=radius)
    return {"delta": out.delta, "steps": out.steps, "rho": out.rho, "std_theta": out.std_theta,
            "std_w": out.std_w}


def theorem33_multipliers(config: FermiConfig, sigma_theta: float, sigma_w: float,
                          clip_theta: float, clip_w: float) -> tuple[float, float]:
    """Noise multipliers that make :func:`fit` add the paper's noise (Theorem 3.3 stds on the averaged
    gradient, times ``lam``): ``z = sigma m / (C k)``, with ``k`` the sensitivity factor."""
    fct = config.sensitivity_factor()
    m = config.batch_size
    return sigma_theta * m / (clip_theta * fct), sigma_w * m / (clip_w * fct)


# ------------------------------------------------------------------------------------------------
# evaluation (test split, hard predictions): eq. 10 and eq. 11
# ------------------------------------------------------------------------------------------------
def predict(model, params, x) -> jax.Array:
    """Hard labels: ``sigmoid > 0.5`` for one-logit models, argmax otherwise."""
    out = model.apply(params, x)
    if model.num_outputs == 1:
        return (out > 0).astype(jnp.int32)
    return jnp.argmax(out, axis=-1).astype(jnp.int32)


def dp_violation(yhat, s, num_groups: int, num_classes: int) -> jax.Array:
    """Eq. 10: ``max_{y', s1, s2} |P(yhat = y' | s1) - P(yhat = y' | s2)|`` (empty groups ignored)."""
    s1 = jax.nn.one_hot(s, num_groups)
    cnt = jnp.sum(s1, axis=0)
    rates = (s1.T @ jax.nn.one_hot(yhat, num_classes)) / jnp.maximum(cnt, 1.0)[:, None]  # [k, l]
    present = (cnt > 0)[:, None]
    hi = jnp.max(jnp.where(present, rates, -jnp.inf), axis=0)
    lo = jnp.min(jnp.where(present, rates, jnp.inf), axis=0)
    return jnp.max(hi - lo)


def eo_violation(yhat, y, s, num_groups: int, num_classes: int) -> jax.Array:
    """Eq. 11: max over ``y'`` and group pairs of the gaps in ``P(yhat = y' | s, y = y')`` and
    ``P(yhat = y' | s, y != y')`` (one-vs-rest; for binary labels max(TPR gap, FPR gap))."""
    s1 = jax.nn.one_hot(s, num_groups)
    yh = jax.nn.one_hot(yhat, num_classes)
    yy = jax.nn.one_hot(y, num_classes)

    def gap(cond):  # cond [n, l]: membership of each example in the conditioning event per y'
        num = jnp.einsum("nk,nl->kl", s1, yh * cond)
        den = s1.T @ cond
        rates = num / jnp.maximum(den, 1.0)
        present = den > 0
        hi = jnp.max(jnp.where(present, rates, -jnp.inf), axis=0)
        lo = jnp.min(jnp.where(present, rates, jnp.inf), axis=0)
        return jnp.max(jnp.where(jnp.isfinite(hi - lo), hi - lo, 0.0))

    return jnp.maximum(gap(yy), gap(1.0 - yy))


def evaluate(model, params, data: Dataset, num_classes: int = 2) -> dict:
    """Test metrics: misclassification ``error``, ``dp_violation`` (eq. 10), ``eo_violation`` (eq. 11),
    and the soft ``ermi``. jit/vmap-able over ``params``."""
    yhat = predict(model, params, data.x)
    out = model.apply(params, data.x)
    probs = E.soft_predictions(out)
    return {
        "error": jnp.mean((yhat != data.y).astype(jnp.float32)),
        "dp_violation": dp_violation(yhat, data.s, data.num_groups, num_classes),
        "eo_violation": eo_violation(yhat, data.y, data.s, data.num_groups, num_classes),
        "ermi": E.ermi(probs, data.s, data.num_groups),
    }
