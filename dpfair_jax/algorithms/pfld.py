"""PF-LD baseline (Tran, Fioretto, Van Hentenryck 2021): private fair learning by Lagrangian duality.

Paper 004 compares DP-FERMI with this method ("Tran et al. 2021b"). PF-LD trains with DP-SGD on
the Lagrangian of the fairness-constrained problem and moves the multipliers by (projected) dual
ascent on privatized constraint violations. Here the constraints are the demographic-parity
(or, per label, equalized-odds) gaps of the soft predictions,

    h_{c,g,j}(theta) = E_i[ F_j(x_i) (1{s_i = g} / p_{S|c}(g) - 1) | c_i = c ]
                     = P(yhat = j | s = g, c) - P(yhat = j | c),

and the Lagrangian is ``mean_i loss_i + lam * sum_{c,g,j} nu_{c,g,j} h_{c,g,j}``, with signed
multipliers ``nu`` (the difference of the two non-negative multipliers of ``h <= 0`` and
``-h <= 0``) kept in the box ``|nu| <= radius`` (so ``lam * radius`` bounds the penalty weight).
The per-example terms split exactly like ERMI's: the s-free part ``-sum_{g,j} nu_{c,g,j} F_j`` and
the s-dependent part ``sum_j nu_{c,s_i,j} F_j / p_{S|c}(s_i)``. Training is the same noisy DP-SGDA as
DP-FERMI (:func:`dpfair_jax.algorithms.fermi.fit` with this regularizer): descent on theta, ascent
on nu by the noisy violations, the same clipping, sampling and accountant, hence the same epsilon
for the same noise multipliers.

Departure (stated): Tran et al. update the multipliers once per epoch with violations measured on
the whole data set; here they move every step on the batch's privatized violation (the stochastic
version, which lets both methods share one accountant and one step schedule).

The kit's common interface: :func:`fit`, :func:`spend`, :func:`calibrate` (DP-FERMI's, with
this regularizer).

Privacy: as :func:`dpfair_jax.algorithms.fermi.fit` for the same config: the all-features unit by
default (add/remove for Poisson sampling, the subsampled Gaussian), the sensitive-attribute unit
accounted as membership-visible releases (substitution of one ``s_i``); the group frequencies
``P_{S|c}`` in the constraints come from the same noisy, charged histogram as DP-FERMI's by
default (:func:`dpfair_jax.algorithms.fermi.spend` states it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dpfair_jax.algorithms import fermi as _F
from dpfair_jax.algorithms._trio import FitResult
from dpfair_jax.fairness import ermi as E
from dpfair_jax.privacy.precision import full_precision

__all__ = ["fit", "spend", "calibrate", "config", "violations", "attribute_spend"]


def _pfld_parts(config: _F.FermiConfig, P: jax.Array):
    model = config.model

    def parts(logits, nu, ex):
        probs = E.soft_prediction(logits)
        nuc = nu[ex["c"]]  # [k, l]
        pc = P[ex["c"]]  # [k]
        pub = -jnp.sum(jnp.sum(nuc, axis=0) * probs)
        inv = jnp.where(pc > 0, 1.0 / jnp.maximum(pc, 1e-12), 0.0)
        sens = jnp.sum(nuc[ex["s"]] * probs) * inv[ex["s"]]
        return _F.task_loss(model, logits, ex["y"]), ex["wt"] * pub, ex["wt"] * sens

    return parts


def config(**kwargs) -> _F.FermiConfig:
    """A :class:`~dpfair_jax.algorithms.fermi.FermiConfig` for PF-LD (box projection of the
    multipliers by default)."""
    kwargs.setdefault("projection", "box")
    return _F.FermiConfig(**kwargs)


@full_precision
def fit(key, data, hparams: _F.FermiHparams, config: _F.FermiConfig, *, batch_key=None, params0=None,
        p_s=None, p_y=None, validate: bool = True) -> FitResult:
    """Train PF-LD; same keywords, traced hyperparameters, result and privacy as
    :func:`dpfair_jax.algorithms.fermi.fit` (``diagnostics["W"]`` holds the multipliers
    ``nu [C, k, l]``, released and covered by ``spend``; ``hparams.radius`` is the multiplier
    bound)."""
    _check_config(config)
    return _F.fit(key, data, hparams, config, batch_key=batch_key, params0=params0, p_s=p_s, p_y=p_y,
                  validate=validate, parts_builder=_pfld_parts)


def _check_config(config: _F.FermiConfig) -> None:
    if config.ermi_form != "full":
        raise ValueError("ermi_form does not apply to PF-LD; leave it at 'full'.")


def spend(config: _F.FermiConfig, sizes, hparams: _F.FermiHparams):
    """The spend of :func:`fit`: :func:`dpfair_jax.algorithms.fermi.spend` (the same releases:
    noisy descent and ascent updates on each sampled batch, the noisy frequency histogram).

    Privacy: as :func:`dpfair_jax.algorithms.fermi.spend` for ``config``'s unit.
    """
    _check_config(config)
    return _F.spend(config, sizes, hparams)


def calibrate(config: _F.FermiConfig, sizes, target: tuple[float, float], *,
              hparams: _F.FermiHparams | None = None) -> _F.FermiHparams:
    """``hparams`` with the noise multipliers of :func:`dpfair_jax.algorithms.fermi.calibrate`
    (``noise_w = config.w_relative * noise_theta``) so that ``spend(config, sizes, result).epsilon
    <= target[0]``; ``target = (epsilon, config.delta)``.

    Privacy: as :func:`dpfair_jax.algorithms.fermi.calibrate` for ``config``'s unit."""
    _check_config(config)
    return _F.calibrate(config, sizes, target, hparams=hparams)


def attribute_spend(config: _F.FermiConfig, sizes, hparams: _F.FermiHparams):
    """The spend of the all-features run of :func:`fit` for the sensitive-attribute unit (a change
    of one ``s_i``): :func:`dpfair_jax.algorithms.fermi.attribute_spend` (the same releases read
    ``s``: both clipped updates and the noisy histogram). ``config.privacy_unit =
    "sensitive_attribute"`` is the other way to protect only ``s`` (task gradient exact,
    membership visible, :func:`spend`).

    Privacy: (epsilon, delta)-DP under substitution of one record's ``s_i``."""
    _check_config(config)
    return _F.attribute_spend(config, sizes, hparams)


def violations(probs, s, num_groups: int, weights=None) -> jax.Array:
    """The constraint values ``h_{g,j} = P(yhat=j | s=g) - P(yhat=j)`` of soft predictions ``[k, l]``."""
    joint = E.joint_distribution(probs, s, num_groups, weights)
    p_s = jnp.sum(joint, axis=1, keepdims=True)
    return joint / jnp.maximum(p_s, 1e-12) - jnp.sum(joint, axis=0, keepdims=True)
