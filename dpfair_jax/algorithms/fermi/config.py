"""DP-FERMI's static configuration and traced hyperparameters (paper 004, Algorithm 1).

The named departures from the paper (``variant``, ``clip_mode``, ``w_init``, ``ermi_form``,
``eo_weighted``), the privacy units and the group-frequency sources are described in
:mod:`dpfair_jax.algorithms.fermi`.

Privacy: none here; :meth:`FermiConfig.relation` and :meth:`FermiConfig.sensitivity_factor` state
the neighbouring relation and the clipped-sum sensitivity that :mod:`.ledger` accounts and
:mod:`.algorithm` runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dpfair_jax import _validation as v
from dpfair_jax.algorithms import sgda
from dpfair_jax.algorithms._trio import hparams_pytree
from dpfair_jax.privacy.relations import replace_factor

__all__ = ["FermiConfig", "FermiHparams", "check_hparams"]

FAIRNESS = ("dp", "eo")
UNITS = ("sensitive_attribute", "all_features")
VARIANTS = ("corrected", "paper")
CLIP_MODES = ("per_example", "official_batch")
W_INITS = ("zeros", "randn")
ERMI_FORMS = ("full", "one_cell")
GROUP_FREQUENCIES = ("noisy", "public")



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
    up to float rounding, slower). ``models.mlp`` models take the dense ghost path
    (``sgda.dpsgda(model=...)``, ``privacy.clipping.clipped_grad_sum``). ``w_relative``: the ratio
    ``noise_w / noise_theta`` that :func:`calibrate` sets.
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
    w_relative: float = 1.0

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
        v.check_positive("w_relative", self.w_relative)
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
        replace-one with shuffled or fixed-size batches. Replace-one covers a record changing group:
        the frequency histogram is noised at its ``sqrt 2`` and every ``s``-term is clipped."""
        if self.privacy_unit == "sensitive_attribute" or self.sampling != "poisson":
            return "replace_one"
        return "add_remove"

    def sgda_config(self) -> sgda.SGDAConfig:
        return sgda.SGDAConfig(
            steps=self.steps, batch_size=self.batch_size, sampling=self.sampling,
            max_batch_size=self.max_batch_size, projection=self.projection, iterate=self.iterate,
            sensitivity_factor=self.sensitivity_factor(),
        )


@hparams_pytree
class FermiHparams:
    """Traced hyperparameters: fairness weight ``lam``, step sizes, clip norms, noise multipliers
    (std on a clipped sum = multiplier x clip x sensitivity factor; from :func:`calibrate`) and the
    radius of the W ball/box.

    Defaults train at :class:`FermiConfig`'s default 100 steps of 1024 (measured with ``lam`` 0
    and 1, with and without noise for epsilon = 1: test error 0.167 on Adult, base rate 0.248;
    0.176 on an imbalanced synthetic set, base rate 0.252; 0.182 with 600 rows and batches of 64).
    The paper's tabular step sizes (``lr_theta=0.005, lr_w=0.01``, for 200 epochs) left those runs
    at the base rate with constant predictions (a DP violation of 0 that means nothing);
    :func:`dpfair_jax.fairness.evaluate` and ``fit``'s diagnostics flag such runs (``degenerate``)."""

    lam: Any = 1.0
    lr_theta: Any = 1.0
    lr_w: Any = 0.1
    clip_theta: Any = 1.0
    clip_w: Any = 1.0
    noise_theta: Any = 0.0
    noise_w: Any = 0.0
    radius: Any = 5.0

    def validate(self) -> "FermiHparams":
        """Refuse out-of-range fields on the host, traced values skipped (:func:`check_hparams`)."""
        v.check_positive("lam", self.lam, allow_zero=True)
        sgda.SGDAHparams(**{f.name: getattr(self, f.name) for f in dataclasses.fields(sgda.SGDAHparams)}).validate()
        return self


def check_hparams(hparams: FermiHparams) -> FermiHparams:
    """Refuse, on the host and before any compute, every :class:`FermiHparams` field out of range:
    ``lam >= 0`` finite; the DP-SGDA fields as :func:`dpfair_jax.algorithms.sgda.check_hparams`
    (step sizes ``> 0`` finite; clip norms and radius ``> 0``, ``inf`` allowed: no clipping / no
    projection, an infinite clip only with zero noise; noise multipliers ``>= 0`` finite). Traced
    values are skipped (checked where they were made). Returns ``hparams``."""
    if not isinstance(hparams, FermiHparams):
        raise ValueError(f"hparams must be a fermi.FermiHparams, got {type(hparams).__name__}.")
    return hparams.validate()
