"""DP-SGD's static choices (:class:`DPSGDConfig`) and traced hyperparameters (:class:`DPSGDHparams`),
with their host-side checks."""

from __future__ import annotations

import dataclasses
from typing import Any

import optax

from dpfair_jax import _validation as v
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import sampling as _sampling
from dpfair_jax.algorithms._trio import hparams_pytree


GLM_MODELS = ("linear", "logistic", "multinomial_logistic")
PER_EXAMPLE_MODES = ("auto", "vmap", "ghost")

@dataclasses.dataclass(frozen=True)
class DPSGDConfig:
    """Static choices of a DP-SGD run (:func:`fit`).

    ``model``: a ``models.Model``, a flax ``nnx.Module``, a pure ``apply(params, x)`` (with
    ``loss``) or a per-example loss ``loss(params, x_i, y_i)`` (the per-example path follows the
    model's layer declaration: ghost norms for the kit's GLMs, MLP and float32 CNN, ``vmap(grad)``
    for everything else, user modules included); ``loss``: the output loss for a model
    (``"logistic"``, ``"cross_entropy"``, ``"squared"`` or a callable; default from the model);
    ``sampling``: ``"poisson"`` (padded to ``max_batch_size``, default from
    ``sampling.max_batch_size_for`` with overflow probability 1e-9 over the run), ``"fixed_size"``
    (independent uniform batches) or ``"shuffle"`` (shuffled epochs); ``relation``: the
    neighbouring relation of the spend, ``None`` for the sampling's own (Poisson: add/remove;
    fixed-size and shuffled: replace-one; another value is refused); ``accountant``: ``"rdp"`` or
    ``"pld"`` (not used by shuffled epochs, whose curve is exact); ``delta``: the delta the spend
    states epsilon at; ``optimizer``: an optax factory called as ``optimizer(learning_rate)``, or a
    ready ``GradientTransformation`` (then ``hparams.learning_rate`` is not used); ``per_example``:
    ``"auto"``, ``"ghost"`` (raise if unavailable) or ``"vmap"`` (:func:`resolve_per_example`);
    ``batch_size``: the (expected, for Poisson) batch size, ``q = batch_size / n``; ``steps``: the
    number of steps (from epochs: :func:`resolve_steps`; with ``"shuffle"``, whole epochs);
    ``max_batch_size``: the padded Poisson width; ``diagnostics``: record per-step diagnostics.
    """

    model: Any = None
    loss: Any = None
    sampling: str = "poisson"
    relation: str | None = None
    accountant: str = "rdp"
    delta: float = 1e-5
    optimizer: Any = optax.sgd
    per_example: str = "auto"
    batch_size: int = 256
    steps: int = 100
    max_batch_size: int | None = None
    diagnostics: bool = True

    def validate(self) -> "DPSGDConfig":
        """Refuse out-of-range choices on the host, naming the field."""
        if self.model is None:
            raise ValueError("config.model is required (a models.Model, an nnx module, an apply with "
                             "loss=, or a per-example loss function).")
        v.check_choice("sampling", self.sampling, _sampling.SAMPLING_SCHEMES)
        v.check_choice("accountant", self.accountant, ("rdp", "pld"))
        v.check_choice("per_example", self.per_example, PER_EXAMPLE_MODES)
        v.check_delta(self.delta)
        if self.sampling == "fixed_size" and self.accountant == "pld":
            raise ValueError("accountant='pld' cannot account sampling='fixed_size' (sampling without "
                             "replacement); use accountant='rdp'.")
        if self.relation is not None:
            own = _rel.relation_name(_sampling.accounting_for(self.sampling, 2, 1).relation)
            if _rel.relation_name(self.relation) != own:
                raise ValueError(f"relation={self.relation!r} does not match sampling={self.sampling!r}, "
                                 f"which is accounted under {own!r}; leave relation=None or change sampling.")
        _check_optimizer(self.optimizer)
        v.check_int("batch_size", self.batch_size, minimum=1)
        v.check_int("steps", self.steps, minimum=1)
        if self.max_batch_size is not None:
            v.check_int("max_batch_size", self.max_batch_size, minimum=self.batch_size)
        return self


def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, optax.GradientTransformation) and not callable(optimizer):
        raise ValueError("optimizer must be an optax factory (e.g. optax.sgd) or a GradientTransformation.")


@hparams_pytree
class DPSGDHparams:
    """Hyperparameters of a DP-SGD run: ``learning_rate``, ``clip_norm``, ``noise_multiplier``
    (may be traced arrays; a registered pytree, so ``montecarlo.sweep`` and ``vmap`` grid them;
    ``batch_size`` and ``steps`` are in :class:`DPSGDConfig`)."""

    learning_rate: Any = 0.1
    clip_norm: Any = 1.0
    noise_multiplier: Any = 1.0

    def validate(self) -> "DPSGDHparams":
        """Refuse, on the host, every field out of range (traced values are skipped), naming it."""
        v.check_positive("learning_rate", self.learning_rate)
        v.check_clip_norm(self.clip_norm)
        v.check_noise_multiplier(self.noise_multiplier)
        return self
