"""Jagielski et al.'s (2019) DP-oracle-learner (in-processing, their Section 4) as the tradeoff
study's method ``"jagielski_in"`` (label "Jagielski et al. 2019 (in-processing)", ``fairness="eo"``
only, binary target): :mod:`dpfair_jax.algorithms.jagielski_in` over a public class of threshold
classifiers, its uniform mixture evaluated as a randomized classifier.

The public class ``H`` (:func:`public_class`; ``2 P T + 2`` classifiers: ``1[w_p . x + b_p > t]``
and its complement for each direction ``p`` and threshold ``t``, and the two constants):

* ``privacy_unit="example"``: data-independent: the ``d`` coordinate axes (one feature each) and
  :data:`PROJECTIONS` directions drawn once from the public seed :data:`CLASS_SEED` (standard
  normal over ``sqrt(d)``), ``b = 0``, thresholds :data:`PROJECTION_THRESHOLDS` on the (z-scored)
  features;
* ``privacy_unit="sensitive_attribute"``: ``x`` and ``y`` are public, so logistic regressions fit
  on the training split's ``(x, y)`` (Newton, ridge :data:`RIDGE`), one per positive-label weight in
  :data:`LABEL_WEIGHTS`, thresholded at the probabilities :data:`PROBABILITY_THRESHOLDS`. Neither
  class reads ``s``.

One run: the class's predictions on the training split, :func:`~dpfair_jax.algorithms.jagielski_in.fit`
with :data:`STEPS` rounds, the multiplier bound ``B = lambda`` (the study's knob: at the saddle
point the mixture minimizes ``err(Q) + lambda max(0, max_j |d_j(Q)| - gamma)``, the max EO gap
penalized with weight lambda; lambda = 0 is the unconstrained Learner), the candidate's Auditor step
``eta`` and slack ``gamma`` (default 0, not searched); the released mixture ``q`` predicts 1
on a row with probability ``sum_h q_h h(x)``; test metrics and the validation score (the expected
validation error count, sensitivity 1) as ``"jagielski_post"``'s.

Noise from the study's multiplier ``z`` (calibrated like every method's): the Auditor's Laplace
at ``eps_a = 1/z``, the exponential mechanism at ``eps_o =`` :data:`ORACLE_FACTOR` ``/ z``, the
counts at ``eps_c = 1 / (`` :data:`COUNT_RATIO` ``z)``; ``z = 0`` (epsilon = inf): noiseless.

Privacy: the run's event is :func:`dpfair_jax.privacy.oracle_learner.oracle_learner_event` (pure
steps: Laplace counts, ``T`` x (exponential mechanism as ``ZCDpEvent(eps_o^2/8)``, Laplace)).
Example unit: the algorithm's add/remove variant (``relation="add_remove"``: counts at L1
sensitivity 1, one-cell rate sensitivities, the Learner's error over the released total count), so
the event holds under the study's add/remove relation; it goes through the study's selection with
the noisy score like every method. Sensitive-attribute unit: the algorithm's attribute unit (a
change of one ``s_i``, replace-one; ``x, y`` public), the event's RDP curve
(:func:`~dpfair_jax.privacy.oracle_learner.oracle_learner_curve`) through the attribute unit's
selection; the score reads no ``s``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.algorithms import jagielski_in as JI
from dpfair_jax.privacy import oracle_learner as OL

__all__ = ["STEPS", "COUNT_RATIO", "ORACLE_FACTOR", "PROJECTIONS", "PROJECTION_THRESHOLDS",
           "LABEL_WEIGHTS", "PROBABILITY_THRESHOLDS", "CLASS_SEED", "config", "hparams", "epsilons", "run_event",
           "attribute_rdp", "public_class", "class_preds", "run_one"]

#: the rounds T of every run
STEPS = 100
#: the counts' Laplace noise multiplier over the Auditor's (eps_c = 1 / (COUNT_RATIO z))
COUNT_RATIO = 0.2
#: the exponential mechanism's epsilon times z (its zCDP eps_o^2/8 is then a Gaussian's at z)
ORACLE_FACTOR = 2.0
#: example unit: the number of random directions (beside the d axes) and the thresholds on the projections
PROJECTIONS = 32
PROJECTION_THRESHOLDS = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5)
#: attribute unit: the positive-label weights of the logistic fits and the probability thresholds
LABEL_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)
PROBABILITY_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: the public seed of the example unit's directions (fixed: every run and replicate has one class)
CLASS_SEED = 2019
#: ridge and Newton steps of the attribute unit's logistic fits
RIDGE = 1e-2
NEWTON_STEPS = 25
#: the study unit -> the algorithm's (privacy_unit, relation)
_UNIT = {"example": ("example", "add_remove"), "sensitive_attribute": ("sensitive_attribute", "replace_one")}


def config(num_groups: int, unit: str, delta: float) -> JI.JagielskiInConfig:
    """The algorithm's config for the study's ``unit`` (:data:`STEPS` rounds)."""
    pu, rel = _UNIT[unit]
    return JI.JagielskiInConfig(num_groups=num_groups, steps=STEPS, privacy_unit=pu, relation=rel,
                                delta=float(delta)).validate()


def epsilons(z, z_count):
    """``(count_epsilon, oracle_epsilon, auditor_epsilon) = (1/z_count, ORACLE_FACTOR/z, 1/z)``
    (``inf`` where the multiplier is 0: no noise); host floats or traced arrays."""
    if not isinstance(z, jax.Array) and not isinstance(z_count, jax.Array):
        inv = lambda v: math.inf if float(v) == 0.0 else 1.0 / float(v)  # noqa: E731
        return inv(z_count), ORACLE_FACTOR * inv(z), inv(z)
    z, zc = jnp.asarray(z, jnp.float32), jnp.asarray(z_count, jnp.float32)
    inf = jnp.asarray(jnp.inf, jnp.float32)

    def inv(v):
        return jnp.where(v > 0, 1.0 / jnp.where(v > 0, v, 1.0), inf)

    return inv(zc), ORACLE_FACTOR * inv(z), inv(z)


def hparams(lam, z, z_count, eta, gamma) -> JI.JagielskiInHparams:
    """One run's hyperparameters (traceable): ``B = lam``, the candidate's ``eta`` and ``gamma``,
    the noise fields from the multipliers (:func:`epsilons`)."""
    ec, eo, ea = epsilons(jnp.asarray(z, jnp.float32), jnp.asarray(z_count, jnp.float32))
    return JI.JagielskiInHparams(B=jnp.asarray(lam, jnp.float32), eta=eta, gamma=gamma, count_epsilon=ec,
                                 oracle_epsilon=eo, auditor_epsilon=ea)


def run_event(cfg: JI.JagielskiInConfig, z: float, ratio: float):
    """One run's ``DpEvent`` (without the score) at multiplier ``z``: :func:`OL.oracle_learner_event`."""
    ec, eo, ea = epsilons(float(z), float(ratio) * float(z))
    return OL.oracle_learner_event(ec, eo, ea, cfg.steps)


def attribute_rdp(cfg: JI.JagielskiInConfig, z: float, ratio: float) -> np.ndarray:
    """One run's RDP curve for a change of one ``s_i`` at :data:`dpfair_jax.privacy.attribute.ORDERS`
    (the attribute unit's sensitivities; the validation score reads no ``s``)."""
    from dpfair_jax.privacy import attribute as At

    return OL.oracle_learner_curve(run_event(cfg, z, ratio), At.ORDERS)


def _logistic(x: jax.Array, y: jax.Array, weight: float) -> jax.Array:
    """``[d + 1]``: ridge logistic regression of ``y`` on ``x`` (intercept last), positive labels
    weighted ``weight`` (Newton from 0)."""
    X = jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], axis=1)
    yf = y.astype(jnp.float32)
    w = jnp.where(y == 1, weight, 1.0)
    w = w / jnp.sum(w)
    eye = RIDGE * jnp.eye(X.shape[1], dtype=jnp.float32)

    def step(beta, _):
        p = jax.nn.sigmoid(X @ beta)
        grad = X.T @ (w * (p - yf)) + eye @ beta
        hess = X.T @ (X * (w * p * (1.0 - p))[:, None]) + eye
        return beta - jnp.linalg.solve(hess, grad), None

    beta, _ = jax.lax.scan(step, jnp.zeros((X.shape[1],), jnp.float32), None, length=NEWTON_STEPS)
    return beta


def public_class(cfg: JI.JagielskiInConfig, train) -> dict:
    """The class ``{"W" [P, d], "b" [P], "thresholds" [T]}`` (module docstring): the axes and fixed
    random directions (example unit; reads nothing) or logistic fits on the training ``(x, y)``
    (attribute unit, where they are public; ``s`` is not read)."""
    d = train.x.shape[1]
    if cfg.privacy_unit == "example":
        W = np.concatenate([np.eye(d), np.random.default_rng(CLASS_SEED).standard_normal((PROJECTIONS, d)) / math.sqrt(d)])
        return {"W": jnp.asarray(W, jnp.float32), "b": jnp.zeros((d + PROJECTIONS,), jnp.float32),
                "thresholds": jnp.asarray(PROJECTION_THRESHOLDS, jnp.float32)}
    betas = jax.vmap(lambda a: _logistic(train.x, train.y, a))(jnp.asarray(LABEL_WEIGHTS, jnp.float32))
    p = np.asarray(PROBABILITY_THRESHOLDS, np.float64)
    return {"W": betas[:, :-1], "b": betas[:, -1], "thresholds": jnp.asarray(np.log(p / (1 - p)), jnp.float32)}


def class_preds(cls: dict, x: jax.Array) -> jax.Array:
    """``[M, n]`` predictions (0/1) of the class on ``x``: per direction and threshold the
    classifier and its complement, then the constants 0 and 1 (``M = 2 P T + 2``)."""
    scores = x @ cls["W"].T + cls["b"]  # [n, P]
    h = (scores[:, :, None] > cls["thresholds"][None, None, :]).astype(jnp.float32).reshape((x.shape[0], -1))
    n = x.shape[0]
    return jnp.concatenate([h, 1.0 - h, jnp.zeros((n, 1), jnp.float32), jnp.ones((n, 1), jnp.float32)], axis=1).T


def run_one(cfg: JI.JagielskiInConfig, train, val, test, key, lam, zt, z2, hp):
    """One run: ``(test metrics with ``params = {"mixture" [M], "class"}``, validation expected error
    count, truncated steps = 0)``. Predict with ``class_preds(params["class"], x).T @ mixture``
    (the probability of a 1)."""
    from dpfair_jax.studies.tradeoff.baselines import _randomized_metrics

    cls = public_class(cfg, train)
    h = hparams(lam, zt, z2, hp["eta"], hp["gamma"])  # z2 = COUNT_RATIO * zt: the counts' multiplier
    res = JI.fit(key, JI.OracleData(class_preds(cls, train.x), train.y, train.s), h, cfg, validate=False)
    mixture = res.params["mixture"]

    def q_of(d):
        return class_preds(cls, d.x).T @ mixture

    q_test = q_of(test)
    out = _randomized_metrics(q_test, test, train.num_groups)
    mean_q = jnp.mean(q_test)
    out["pred_share"] = jnp.maximum(mean_q, 1.0 - mean_q)
    out["params"] = {"mixture": mixture, "class": cls}
    q_val = q_of(val)
    val_errors = jnp.sum(jnp.where(val.y == 1, 1.0 - q_val, q_val))
    return out, val_errors, jnp.zeros((), jnp.float32)
