"""The paper's other baselines in the public tradeoff study: their configs, events and programs.

* ``"mitigation"`` (label "Tran et al. 2021a"): paper 001's (gamma1, gamma2) mitigation
  (:mod:`dpfair_jax.algorithms.mitigation`, a reconstruction) with ``gamma1 = gamma2 = lambda``
  (paper 001's (1, 1) is on the default grid); DP-SGD with the penalty's private group statistics,
  their noise multiplier :data:`MITIGATION_STATS_RATIO` times the update's. Its candidates: the
  learning rate and the clip norm. It is not tied to DP or EO (the penalties equalize gradient
  norms and prediction uncertainty across groups): the study reports the violation it asks for.
* ``"jagielski_post"`` (label "Jagielski et al. 2019 (post-processing)", ``fairness="eo"``
  only): a DP-SGD base classifier (DP-FERMI's program at lambda = 0, as ``"dpsgd"``), then
  Jagielski et al.'s DP post-processing (:mod:`dpfair_jax.algorithms.jagielski`) on the training
  split's Laplace-noised confusion counts, with the constraints' slack ``gamma = min(1,``
  :data:`JAGIELSKI_SLACK` ``/ lambda)`` (lambda = 0: the base classifier). The post-processed
  classifier is randomized and uses the group at test time; its test metrics are its expected
  ones (each test row weighted by its probability of each prediction), its score the expected
  validation error count (each term in [0, 1]: sensitivity 1).

* ``"jagielski_in"`` (label "Jagielski et al. 2019 (in-processing)", ``fairness="eo"`` only):
  their DP-oracle-learner over a public class, in :mod:`.oracle` (its units, class and accounting).

Privacy (example level, add/remove, the study's default unit): one run of ``"mitigation"`` is
:func:`dpfair_jax.algorithms.mitigation.spend`'s event (statistics charged for every
candidate); one run of ``"jagielski_post"`` composes the DP-SGD base's event with the Laplace
release of the ``[K, 2, 2]`` counts (L1 sensitivity 1 under add/remove, noise multiplier
:data:`JAGIELSKI_COUNT_RATIO` times the base's). Both then go through the study's private
selection like every method. Other units are refused for these two (:func:`check_methods`):
Jagielski et al.'s own unit is the sensitive attribute, but the study's base classifier would have
to be accounted for it too. ``"jagielski_in"`` runs under both study units (:mod:`.oracle`).
"""

from __future__ import annotations

import dp_accounting
import jax
import jax.numpy as jnp

from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import jagielski as J
from dpfair_jax.algorithms import mitigation as MI
from dpfair_jax.fairness import ermi as E
from dpfair_jax.fairness import evaluation as EV
from dpfair_jax.fairness.metrics import demographic_parity_pairwise, equalized_odds_violation
from dpfair_jax.studies.tradeoff import oracle as OR
from dpfair_jax.studies.tradeoff.methods import EXTRA_METHODS, ORACLE_METHODS

__all__ = ["MITIGATION_STATS_RATIO", "JAGIELSKI_COUNT_RATIO", "JAGIELSKI_SLACK", "NOISE_RATIOS",
           "check_methods", "configs", "run_event", "sampling_shape", "run_one"]

#: mitigation: the group statistics' noise multiplier over the update's (MitigationHparams' default 3 / 1)
MITIGATION_STATS_RATIO = 3.0
#: jagielski_post: the Laplace counts' noise multiplier over the base DP-SGD's
JAGIELSKI_COUNT_RATIO = 5.0
#: jagielski_post: the EO constraints' slack at lambda = 1 (gamma = min(1, JAGIELSKI_SLACK / lambda))
JAGIELSKI_SLACK = 0.1
_DPSGD_W_RATIO = 1000.0  # as methods._DPSGD_W_RATIO: the base is DP-FERMI's program at lambda = 0
#: the second noise multiplier of each baseline over its first (the study's ``w_ratio``)
NOISE_RATIOS = {"mitigation": MITIGATION_STATS_RATIO, "jagielski_post": _DPSGD_W_RATIO,
                "jagielski_in": OR.COUNT_RATIO}

_UNITS = ("example", "example-level", "all_features")
_COUNT_TAG = 0x636E74


def check_methods(methods, fairness: str, privacy_unit: str = "example") -> None:
    """Refuse, before any compute, a baseline the study cannot run or account as asked."""
    chosen = [m for m in methods if m in EXTRA_METHODS]
    if "jagielski_post" in chosen and fairness != "eo":
        raise ValueError("method 'jagielski_post' (Jagielski et al. 2019) is an equalized-odds post-processing: "
                         f"use fairness='eo' (got {fairness!r}), or drop it from methods.")
    if "jagielski_in" in chosen and fairness != "eo":
        raise ValueError("method 'jagielski_in' (Jagielski et al. 2019's DP-oracle-learner) constrains equalized "
                         f"odds only: use fairness='eo' (got {fairness!r}), or drop it from methods.")
    if "jagielski_in" in chosen and privacy_unit not in _UNITS + ("sensitive_attribute",):
        raise ValueError(f"method 'jagielski_in' is accounted for privacy_unit 'example' or "
                         f"'sensitive_attribute', got {privacy_unit!r}.")
    chosen = [m for m in chosen if m not in ORACLE_METHODS]  # accounted under both units
    if chosen and privacy_unit not in _UNITS:
        raise ValueError(f"methods {chosen} are accounted at the example level only; privacy_unit="
                         f"{privacy_unit!r} is not supported for them (drop them from methods).")


def configs(common: dict, fermi_cfg, methods, unit: str = "example", delta: float = 1e-5) -> dict:
    """The configs of the baselines among ``methods``, keyed by program (``common``: the study's
    shared config fields; ``fermi_cfg``: the study's DP-FERMI config, the Jagielski base's;
    ``unit`` and ``delta``: the study's, for ``"jagielski_in"``)."""
    out = {}
    for m in ("jagielski_post", "jagielski_in"):
        if m in methods and common["num_classes"] != 2:
            raise ValueError(f"method {m!r} needs a binary target (got "
                             f"{common['num_classes']} classes); drop it from methods.")
    if "jagielski_in" in methods:
        out["jagielski_in"] = OR.config(common["num_groups"], unit, delta)
    if "mitigation" in methods:
        out["mitigation"] = MI.MitigationConfig(model=common["model"], batch_size=common["batch_size"],
                                                steps=common["steps"], diagnostics=False).validate()
    if "jagielski_post" in methods:
        out["jagielski_post"] = fermi_cfg
    return out


def run_event(m: str, cfg, n: int, z: float, ratio: float) -> dp_accounting.DpEvent:
    """One run's ``DpEvent`` (without the score) of baseline ``m`` at multiplier ``z``."""
    if m == "jagielski_in":
        return OR.run_event(cfg, z, ratio)
    if m == "mitigation":
        hp = MI.MitigationHparams(noise_multiplier=float(z), stats_noise_multiplier=float(ratio * z))
        return MI.spend(cfg, n, hp).event  # gamma = 1: the statistics are charged
    base = F.spend(cfg, n, F.FermiHparams(noise_theta=float(z), noise_w=float(ratio * z))).event
    return dp_accounting.ComposedDpEvent([base, dp_accounting.LaplaceDpEvent(JAGIELSKI_COUNT_RATIO * float(z))])


def sampling_shape(m: str, cfg, n: int) -> tuple[int, int]:
    """``(steps, padded batch width)`` of a baseline's run (for the truncation charge;
    ``"jagielski_in"`` reads every row each round: width ``n``, no truncation)."""
    if m == "jagielski_in":
        return cfg.steps, n
    if m == "mitigation":
        return cfg.steps, MI.padded_batch_size(n, cfg.batch_size, cfg.steps, cfg.max_batch_size)
    return cfg.steps, cfg.sgda_config().padded_batch(n)


def _randomized_metrics(q, data, num_groups: int) -> dict:
    """Expected metrics of a randomized binary classifier predicting 1 with probability ``q``:
    each row counted as a prediction of 0 (weight ``1 - q``) and of 1 (weight ``q``)."""
    n = q.shape[0]
    yp = jnp.concatenate([jnp.zeros((n,), jnp.int32), jnp.ones((n,), jnp.int32)])
    yy = jnp.concatenate([data.y, data.y])
    ss = jnp.concatenate([data.s, data.s])
    w = jnp.concatenate([1.0 - q, q])
    probs = jnp.stack([1.0 - q, q], axis=1)
    return {"error": jnp.mean(jnp.where(data.y == 1, 1.0 - q, q)),
            "dp_violation": demographic_parity_pairwise(yp, ss, num_groups, num_classes=2, weights=w),
            "eo_violation": equalized_odds_violation(yp, yy, ss, num_groups, num_classes=2, weights=w),
            "ermi": E.ermi(probs, data.s, num_groups)}


def run_one(kind: str, cfg, model, num_classes: int, train, val, test, key, lam, zt, z2, hp):
    """One run of a baseline program: ``(test metrics and the trained ``params``, validation error
    count, truncated steps)``; ``jagielski_post``'s params are ``{"classifier": base params,
    "post_processing": J.solve_post_processing's table}`` (predict with
    :func:`dpfair_jax.algorithms.jagielski.predict_proba` on the classifier's predictions)."""
    if kind == "jagielski_in":
        return OR.run_one(cfg, train, val, test, key, lam, zt, z2, hp)
    if kind == "mitigation":
        h = MI.MitigationHparams(gamma1=lam, gamma2=lam, learning_rate=hp["lr_theta"], clip_norm=hp["clip_theta"],
                                 noise_multiplier=zt, stats_noise_multiplier=z2)
        params = MI.fit(key, train, h, cfg).params
        out = dict(EV.evaluate(model, params, test, num_classes))
        out["pred_share"] = jnp.max(jnp.mean(jax.nn.one_hot(EV.predict(model, params, test.x), num_classes), axis=0))
        val_errors = EV.evaluate(model, params, val, num_classes)["error"] * val.y.shape[0]
        out["params"] = params
        return out, val_errors, jnp.zeros((), jnp.float32)
    h = F.FermiHparams(lam=0.0, lr_theta=hp["lr_theta"], lr_w=1.0, clip_theta=hp["clip_theta"], clip_w=3.0,
                       noise_theta=zt, noise_w=z2, radius=5.0)
    res = F.fit(key, train, h, cfg, validate=False)
    k = train.num_groups
    counts = J.noisy_confusion(jax.random.fold_in(key, _COUNT_TAG), EV.predict(model, res.params, train.x),
                               train.y, train.s, k, JAGIELSKI_COUNT_RATIO * zt, "example")
    gamma = jnp.where(lam > 0, jnp.minimum(1.0, JAGIELSKI_SLACK / jnp.maximum(lam, 1e-12)), 1.0)
    p = J.solve_post_processing(counts, gamma)

    def q_of(d):
        return J.predict_proba(p, EV.predict(model, res.params, d.x), d.s)

    q_test = q_of(test)
    out = _randomized_metrics(q_test, test, k)
    mean_q = jnp.mean(q_test)
    out["pred_share"] = jnp.maximum(mean_q, 1.0 - mean_q)
    out["params"] = {"classifier": res.params, "post_processing": p}  # the randomized classifier
    val_errors = jnp.sum(jnp.where(val.y == 1, 1.0 - q_of(val), q_of(val)))
    return out, val_errors, res.diagnostics["truncated_steps"]

