"""Jagielski et al. (2019), "Differentially Private Fair Learning" (ICML): DP post-processing.

Their first algorithm is a private version of Hardt, Price and Srebro's (2016) equalized-odds
post-processing. A base classifier ``h`` is given (trained without the sensitive attribute, or
privately and accounted on its own); the post-processing learns, per group ``a`` and base
prediction ``h in {0, 1}``, the probability ``p[a, h]`` of predicting 1, from the group-conditional
confusion counts ``N[a, h, y] = |{i : s_i = a, h(x_i) = h, y_i = y}|`` only. The counts are
released with Laplace noise (their choice), then the linear program (their LP (1), relaxed by a
slack ``gamma`` as in their private version) is solved on the noisy counts (post-processing)::

    min_{p in [0,1]^{K x 2}, t0, t1}  sum_{a,h} p[a,h] (N[a,h,0] - N[a,h,1])     (expected errors)
    s.t. |TPR_a(p) - t1| <= gamma,  |FPR_a(p) - t0| <= gamma   for every group a,

with ``TPR_a = sum_h p[a,h] N[a,h,1] / sum_h N[a,h,1]`` and ``FPR_a`` the same on ``y = 0``
(``gamma = 0``: exact equalized odds, Hardt et al.'s LP). The noisy counts are clipped at 0 and
each denominator at 1 (post-processing).

Privacy unit (``config.privacy_unit``):

* ``"sensitive_attribute"`` (theirs): neighbours differ in one record's group label; the record
  moves from one cell to another, so the histogram's L1 sensitivity is 2 (the replace-one
  histogram, :func:`dpfair_jax.privacy.relations.histogram_sensitivity`). The base classifier
  and the features and labels are not protected here.
* ``"example"``: add/remove one whole record, L1 sensitivity 1; the base classifier must then be
  private on its own (e.g. DP-SGD), and its spend composed with this one (the tradeoff study's
  ``"jagielski_post"`` method does that).

The Laplace scale is ``noise_multiplier`` times the L1 sensitivity, so the release is pure
``epsilon = 1 / noise_multiplier``-DP (``dp_accounting.LaplaceDpEvent(noise_multiplier)``); the
LP is post-processing. Binary labels and binary base predictions only.

The LP runs on the host (``scipy.optimize.linprog``, HiGHS) through ``jax.pure_callback``: it
has ``2K + 2`` variables and is not a hot path; under ``vmap`` the callback solves one LP per
batch element in turn.

Their second algorithm (the DP-oracle-learner, a private version of Agarwal et al.'s
exponentiated-gradient reduction) is :mod:`dpfair_jax.algorithms.jagielski_in`; paper 002's private
reductions are in :mod:`dpfair_jax.algorithms.reductions`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.privacy import sampling as _sampling

from ._trio import FitResult, hparams_pytree

__all__ = ["UNITS", "JagielskiConfig", "JagielskiHparams", "confusion_cells", "noisy_confusion",
           "solve_post_processing", "predict_proba", "fit", "spend", "calibrate"]

#: the privacy units this release can be accounted under, with the neighbouring relation of its
#: histogram (the sensitive attribute moves a record between two cells: replace-one)
UNITS = {"sensitive_attribute": "replace_one", "example": "add_remove"}


@dataclasses.dataclass(frozen=True)
class JagielskiConfig:
    """Static choices: ``num_groups`` (K), ``privacy_unit`` (:data:`UNITS`; default theirs, the
    sensitive attribute) and ``delta`` (the delta the spend states epsilon at; the release is pure
    DP, so any delta holds)."""

    num_groups: int = 2
    privacy_unit: str = "sensitive_attribute"
    delta: float = 1e-5

    def validate(self) -> "JagielskiConfig":
        """Refuse out-of-range choices on the host, naming the field."""
        v.check_int("num_groups", self.num_groups, minimum=2)
        v.check_choice("privacy_unit", self.privacy_unit, tuple(UNITS))
        v.check_delta(self.delta)
        return self


@hparams_pytree
class JagielskiHparams:
    """``noise_multiplier``: the Laplace scale of each count over the histogram's L1 sensitivity
    (0: no noise); ``gamma``: the slack of the equalized-odds constraints (0: exact)."""

    noise_multiplier: Any = 1.0
    gamma: Any = 0.0

    def validate(self) -> "JagielskiHparams":
        """Refuse, on the host, a field out of range (traced values are skipped)."""
        v.check_noise_multiplier(self.noise_multiplier)
        v.check_positive("gamma", self.gamma, allow_zero=True)
        return self


def confusion_cells(yhat: jax.Array, y: jax.Array, s: jax.Array) -> jax.Array:
    """The histogram cell ``4 s + 2 yhat + y`` of each record (binary ``yhat`` and ``y``)."""
    return 4 * jnp.asarray(s, jnp.int32) + 2 * jnp.asarray(yhat, jnp.int32) + jnp.asarray(y, jnp.int32)


def noisy_confusion(key: jax.Array, yhat, y, s, num_groups: int, noise_multiplier, privacy_unit: str,
                    weights=None) -> jax.Array:
    """The ``[K, 2, 2]`` counts ``N[a, h, y]`` with Laplace noise of scale ``noise_multiplier``
    times their L1 sensitivity under ``privacy_unit`` (:data:`UNITS`); ``weights`` (0/1) select rows.

    Privacy: pure ``1 / noise_multiplier``-DP for ``privacy_unit``. Lower level: use fit (records no spend).
    """
    relation = UNITS[privacy_unit]
    cells = confusion_cells(yhat, y, s)
    w = jnp.ones(cells.shape, jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
    counts = jax.ops.segment_sum(w, cells, num_segments=4 * num_groups)
    nm = jnp.asarray(noise_multiplier, jnp.float32)
    eps = jnp.where(nm > 0, 1.0 / jnp.where(nm > 0, nm, 1.0), jnp.inf)
    noisy = _mech.add_laplace(key, counts, _rel.histogram_sensitivity("l1"), relation, eps)
    return noisy.reshape((num_groups, 2, 2))


def _lp_host(counts: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """The LP of the module docstring on one ``[K, 2, 2]`` count array (host, scipy HiGHS)."""
    from scipy.optimize import linprog

    c = np.maximum(np.asarray(counts, np.float64), 0.0)
    K = c.shape[0]
    nv = 2 * K + 2  # p[a, 0], p[a, 1] for each a; then t0, t1
    obj = np.zeros(nv)
    obj[:2 * K] = (c[:, :, 0] - c[:, :, 1]).reshape(-1)
    rows, rhs = [], []
    g = float(gamma)
    for a in range(K):  # host loop over the K groups of one tiny LP (not a hot path)
        for yv, t_idx in ((1, 2 * K + 1), (0, 2 * K)):
            r = np.zeros(nv)
            r[2 * a:2 * a + 2] = c[a, :, yv] / max(c[a, :, yv].sum(), 1.0)
            r_t = np.zeros(nv)
            r_t[t_idx] = 1.0
            rows += [r - r_t, r_t - r]
            rhs += [g, g]
    res = linprog(obj, A_ub=np.asarray(rows), b_ub=np.asarray(rhs), bounds=[(0.0, 1.0)] * nv, method="highs")
    if res.status != 0:  # always feasible (p constant); keep the base classifier if the solver fails
        return np.tile(np.asarray([0.0, 1.0], np.float32), (K, 1))
    return np.clip(res.x[:2 * K].reshape(K, 2), 0.0, 1.0).astype(np.float32)


def solve_post_processing(counts: jax.Array, gamma) -> jax.Array:
    """``p [K, 2]``: the LP's solution on (noisy) counts ``[K, 2, 2]`` (``jax.pure_callback``;
    vmappable, one host LP per element). Privacy: post-processing. Lower level: use fit."""
    K = counts.shape[-3]
    out = jax.ShapeDtypeStruct(counts.shape[:-3] + (K, 2), jnp.float32)

    def host(cn, gm):
        cn, gm = np.asarray(cn), np.asarray(gm)
        flat = cn.reshape((-1, K, 2, 2))
        gs = np.broadcast_to(gm, cn.shape[:-3]).reshape(-1)
        sol = np.stack([_lp_host(flat[i], gs[i]) for i in range(flat.shape[0])])
        return sol.reshape(cn.shape[:-3] + (K, 2))

    return jax.pure_callback(host, out, jnp.asarray(counts, jnp.float32), jnp.asarray(gamma, jnp.float32),
                             vmap_method="expand_dims")


def predict_proba(params: jax.Array, yhat, s) -> jax.Array:
    """``P(prediction = 1)`` of each record under the post-processed classifier ``params [K, 2]``."""
    return params[jnp.asarray(s, jnp.int32), jnp.asarray(yhat, jnp.int32)]


def _check_data(data, num_groups: int):
    try:
        yhat, y, s = data
    except (TypeError, ValueError):
        raise ValueError("data must be a (yhat, y, s) triple: the base classifier's predictions, the labels "
                         "and the group ids.") from None
    arrs = [np.asarray(a) for a in (yhat, y, s)]
    if any(a.ndim != 1 for a in arrs) or len({a.shape[0] for a in arrs}) != 1 or arrs[0].shape[0] == 0:
        raise ValueError("yhat, y and s must be non-empty 1-D arrays of one length.")
    for name, a in zip(("yhat", "y"), arrs[:2]):
        if not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{name} must be binary (0/1): the post-processing is for binary labels.")
    if not np.all((arrs[2] >= 0) & (arrs[2] < num_groups) & (arrs[2] == np.round(arrs[2]))):
        raise ValueError(f"s must hold group ids in [0, {num_groups}).")
    return arrs


def fit(key: jax.Array, data, hparams: JagielskiHparams, config: JagielskiConfig) -> FitResult:
    """DP post-processing (module docstring): noisy confusion counts, then the relaxed EO LP.

    ``data = (yhat, y, s)``: the base classifier's binary predictions, the binary labels and the
    group ids. Returns ``params = p [K, 2]`` (``P(predict 1 | s = a, yhat = h)``, apply with
    :func:`predict_proba`); ``diagnostics["noisy_counts"]`` (the released ``[K, 2, 2]`` counts,
    covered by the spend).

    Privacy: pure ``(1 / noise_multiplier)``-DP for ``config.privacy_unit`` (the base classifier is
    not covered); the recorded spend is :func:`spend`.
    """
    config.validate()
    hparams.validate()
    v.check_threefry_key(key)
    yhat, y, s = _check_data(data, config.num_groups)
    counts = noisy_confusion(key, yhat, y, s, config.num_groups, hparams.noise_multiplier, config.privacy_unit)
    params = solve_post_processing(counts, hparams.gamma)
    report = _sampling.SamplingReport(steps=1, dataset_size=int(yhat.shape[0]),
                                      releases=(("laplace_histogram", 1),))
    return FitResult(params, {"noisy_counts": counts}, spend(config, int(yhat.shape[0]), hparams), report)


def _event(noise_multiplier: float) -> dp_accounting.DpEvent:
    return dp_accounting.LaplaceDpEvent(float(noise_multiplier))


def spend(config: JagielskiConfig, sizes: int, hparams: JagielskiHparams):
    """The ``PrivacySpend`` of :func:`fit`: one Laplace release of the histogram, pure
    ``epsilon = 1 / noise_multiplier`` (closed form; ``inf`` without noise), stated at
    ``config.delta``, for ``config.privacy_unit`` (relation: replace-one for the sensitive
    attribute, add/remove for the example)."""
    config.validate()
    hparams.validate()
    v.check_int("sizes", sizes, minimum=1)
    nm = v.host_float("noise_multiplier", hparams.noise_multiplier)
    unit = config.privacy_unit
    if nm == 0.0:
        return _acc.PrivacySpend(math.inf, float(config.delta), relation=UNITS[unit], unit=unit,
                                 notes="Jagielski et al. post-processing without noise")
    eps = float(_rn.laplace_epsilon(1.0, nm))
    return _acc.PrivacySpend(eps, float(config.delta), event=_event(nm), relation=UNITS[unit], unit=unit,
                             accountant="closed_form",
                             notes=("Jagielski et al. (2019) DP post-processing: Laplace confusion counts, pure "
                                    "DP; the base classifier is not covered"))


def calibrate(config: JagielskiConfig, sizes: int, target: tuple[float, float], *,
              hparams: JagielskiHparams | None = None) -> JagielskiHparams:
    """``hparams`` (default ``JagielskiHparams()``) with ``noise_multiplier = 1 / epsilon``, so
    that ``spend(config, sizes, result).epsilon == target[0]``; ``target[1]`` must equal
    ``config.delta``. Privacy: the result makes :func:`fit` pure ``target[0]``-DP."""
    config.validate()
    hp = (JagielskiHparams() if hparams is None else hparams).validate()
    v.check_int("sizes", sizes, minimum=1)
    eps, _ = _acc.calibration_target(target, config.delta)
    nm = float(_rn.laplace_scale(1.0, float(eps)))
    while float(_rn.laplace_epsilon(1.0, nm)) > eps:  # float rounding
        nm = math.nextafter(nm, math.inf)
    return dataclasses.replace(hp, noise_multiplier=nm)
