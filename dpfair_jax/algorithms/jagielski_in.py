"""Jagielski et al. (2019), "Differentially Private Fair Learning" (ICML), Section 4: the
DP-oracle-learner, a private version of Agarwal et al.'s (2018) exponentiated-gradient reduction,
for equalized odds over a public finite class ``H`` of binary classifiers.

gamma-fair ERM (group 0 the anchor)::

    min_{Q in Delta(H)} err(Q)   s.t.  |FP_a(Q) - FP_0(Q)| <= gamma,  |TP_a(Q) - TP_0(Q)| <= gamma,  a != 0,

with Lagrangian ``L(Q, lam) = err(Q) + lam . r(Q)``, ``lam >= 0``, ``||lam||_1 <= B`` and ``r`` the
``4(K-1)`` one-sided violations ``(d - gamma, -d - gamma)`` of the rate differences ``d [K-1, 2]``
(``y = 0``: false-positive, ``y = 1``: true-positive rate gaps). Each of ``T`` rounds:

1. ``lam_t = B exp(theta_t) / (1 + sum exp(theta_t))`` (the ``B``-scaled simplex with a slack
   coordinate, Agarwal et al.'s exponentiated gradient; ``theta_1 = 0``);
2. the Learner draws ``h_t`` by the exponential mechanism at ``oracle_epsilon`` over ``H`` with score
   ``L(h, lam_t) = err(h) + (lam+ - lam-) . d(h)`` (constant terms dropped; ``inf``: exact argmin);
3. the Auditor releases ``d(h_t)`` with Laplace noise at ``auditor_epsilon`` and steps
   ``theta_{t+1} = theta_t + eta r~(h_t)``.

The output is the uniform mixture of ``h_1..h_T``. The group rates divide by the group-label counts
released once with Laplace noise at ``count_epsilon`` (clipped below at 1): the true counts are
never used. Sensitivities, noise and the accounting are :mod:`dpfair_jax.privacy.oracle_learner`'s.

Privacy units (``config.privacy_unit``, relation replace-one in both by default):
``"sensitive_attribute"`` (theirs: ``x, y`` public, the class must not read ``s``) and ``"example"``
(one whole record; ``n`` public; the class must then be data-independent). ``config.relation =
"add_remove"`` (example unit only) runs the add/remove variant: count noise at L1 sensitivity 1,
the add/remove rate sensitivities, and the Learner's error over the released total count. The run is ``(epsilon, config.delta)``-DP
with ``epsilon`` the least of basic, advanced, zCDP and PLD composition
(:func:`~dpfair_jax.privacy.oracle_learner.oracle_learner_epsilon`); :func:`spend` records it with
Jagielski et al.'s own per-round budget ``eps / (4 sqrt(T log(1/delta)))`` in its notes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import oracle_learner as _ol
from dpfair_jax.privacy.accounting import PrivacySpend, calibration_target
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.sampling import SamplingReport

from ._trio import FitResult, hparams_pytree, is_traced

__all__ = ["OracleData", "JagielskiInConfig", "JagielskiInHparams", "rate_tables", "lagrangian_gap",
           "fit", "spend", "calibrate"]

Array = jax.Array


class OracleData(NamedTuple):
    """The public class's predictions ``preds [M, n]`` (0/1; ``h_j(x_i)``, computed without
    ``s``), the binary labels ``y [n]`` and the group ids ``s [n]`` in ``[0, K)``."""

    preds: Any
    y: Any
    s: Any


@dataclasses.dataclass(frozen=True)
class JagielskiInConfig:
    """Static choices: ``num_groups`` (K), ``steps`` (T), ``privacy_unit``
    (:data:`~dpfair_jax.privacy.oracle_learner.ORACLE_UNITS`), ``delta`` (the delta the spend states
    epsilon at), and for :func:`calibrate` the ``count_share`` of the target epsilon given to the
    count release and the ``oracle_share`` of each round's budget given to the Learner.
    ``relation``: ``"replace_one"`` (default, both units) or ``"add_remove"`` (example unit only:
    the add/remove sensitivities of :mod:`dpfair_jax.privacy.oracle_learner`, the error over the
    released total count)."""

    num_groups: int = 2
    steps: int = 100
    privacy_unit: str = "sensitive_attribute"
    delta: float = 1e-5
    count_share: float = 0.1
    oracle_share: float = 0.5
    relation: str = "replace_one"

    def validate(self) -> "JagielskiInConfig":
        """Refuse out-of-range choices on the host, naming the field."""
        V.check_int("num_groups", self.num_groups, minimum=2)
        V.check_int("steps", self.steps)
        V.check_choice("privacy_unit", self.privacy_unit, _ol.ORACLE_UNITS)
        _ol.check_relation(self.privacy_unit, self.relation)
        V.check_delta(self.delta)
        for name in ("count_share", "oracle_share"):
            if not 0.0 < float(getattr(self, name)) < 1.0:
                raise ValueError(f"{name} must lie in (0, 1), got {getattr(self, name)!r}.")
        return self


@hparams_pytree
class JagielskiInHparams:
    """Traced hyperparameters: the multiplier bound ``B`` (``||lam||_1 <= B``; theirs ``B = K``),
    the Auditor's step ``eta``, the slack ``gamma``, and the noise fields :func:`calibrate` sets:
    ``count_epsilon``, ``oracle_epsilon`` and ``auditor_epsilon`` (``inf``: that step noiseless)."""

    B: Any = 2.0
    eta: Any = 0.5
    gamma: Any = 0.0
    count_epsilon: Any = 0.1
    oracle_epsilon: Any = 0.1
    auditor_epsilon: Any = 0.1

    def validate(self) -> "JagielskiInHparams":
        """Refuse, on the host, a field out of range (traced values are skipped)."""
        V.check_positive("B", self.B)
        V.check_positive("eta", self.eta)
        V.check_positive("gamma", self.gamma, allow_zero=True)
        for name in ("count_epsilon", "oracle_epsilon", "auditor_epsilon"):
            V.check_epsilon(getattr(self, name), name, allow_inf=True)
        return self


def _check_data(data: Any, num_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(data, OracleData):
        raise ValueError("data must be a jagielski_in.OracleData(preds [M, n], y [n], s [n]).")
    preds, y, s = (np.asarray(a) for a in data)
    if preds.ndim != 2 or preds.shape[0] < 1 or preds.shape[1] < 1:
        raise ValueError(f"preds must be a non-empty [M, n] array of the class's predictions, got {preds.shape}.")
    if y.ndim != 1 or s.ndim != 1 or y.shape[0] != preds.shape[1] or s.shape[0] != preds.shape[1]:
        raise ValueError(f"y and s must be 1-D of length n = {preds.shape[1]}, got {y.shape} and {s.shape}.")
    for name, a in (("preds", preds), ("y", y)):
        if not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{name} must be binary (0/1).")
    if not np.all((s >= 0) & (s < num_groups) & (s == np.round(s))):
        raise ValueError(f"s must hold group ids in [0, {num_groups}).")
    return preds.astype(np.float32), y.astype(np.int32), s.astype(np.int32)


def rate_tables(preds: Array, y: Array, s: Array, denominators: Array) -> tuple[Array, Array]:
    """``(err [M], d [M, K-1, 2])``: each candidate's error and rate differences against group 0
    with the given ``denominators [K, 2]`` (one matrix product over the cells)."""
    k = denominators.shape[0]
    onehot = jax.nn.one_hot(_ol.group_label_cells(y, s), 2 * k, dtype=jnp.float32)
    rates = (preds @ onehot).reshape((-1, k, 2)) / denominators
    err = jnp.mean(jnp.abs(preds - y.astype(jnp.float32)), axis=-1)
    return err, rates[:, 1:, :] - rates[:, :1, :]


def _violations(d: Array, gamma: Array) -> Array:
    """``r = (d - gamma, -d - gamma)`` flattened: the ``4(K-1)`` one-sided violations."""
    flat = d.reshape(d.shape[:-2] + (-1,))
    return jnp.concatenate([flat - gamma, -flat - gamma], axis=-1)


def lagrangian_gap(err: Array, d: Array, q: Array, lam: Array, bound: Array, gamma: Array) -> Array:
    """Agarwal et al.'s saddle-point suboptimality ``nu`` of ``(q, lam)`` (``q [M]`` mixture
    weights, ``lam [4(K-1)]``): ``max(L(q, lam) - min_h L(h, lam), max_lam' L(q, lam') - L(q, lam))``."""
    r_h = _violations(d, gamma)
    l_h = err + r_h @ lam
    r_q = q @ r_h
    l_q = q @ l_h
    best_lam = q @ err + bound * jnp.maximum(0.0, jnp.max(r_q))
    return jnp.maximum(l_q - jnp.min(l_h), best_lam - l_q)


@functools.partial(jax.jit, static_argnames=("num_groups", "steps", "unit", "relation"))
def _run(key: Array, preds: Array, y: Array, s: Array, hp: JagielskiInHparams, *, num_groups: int, steps: int,
         unit: str, relation: str = "replace_one") -> dict[str, Array]:
    """The ``T`` rounds of the module docstring (one ``lax.scan``)."""
    k_count, k_rounds = jax.random.split(key)
    counts = _ol.noisy_group_label_counts(k_count, y, s, num_groups, hp.count_epsilon, relation)
    denom = _ol.public_denominators(counts)
    err, d = rate_tables(preds, y, s, denom)
    err_score = _ol.learner_error(err, preds, y, counts, relation)  # err itself under replace-one
    d_flat = d.reshape((d.shape[0], -1))
    bound = jnp.asarray(hp.B, jnp.float32)
    gamma = jnp.asarray(hp.gamma, jnp.float32)
    score_sens = _ol.score_sensitivity(denom, bound, _ol.error_denominator(counts, preds.shape[1], relation),
                                       unit, relation)
    l1_sens = _ol.rate_difference_sensitivity(denom, unit, relation)
    half = d_flat.shape[1]

    def round_(theta, k):
        k_o, k_a = jax.random.split(k)
        e = jnp.exp(theta)
        lam = bound * e / (1.0 + jnp.sum(e))
        w = lam[:half] - lam[half:]
        h = _ol.oracle_draw(k_o, err_score + d_flat @ w, hp.oracle_epsilon, score_sens)
        released, scale = _ol.noisy_rate_differences(k_a, d_flat[h], l1_sens, hp.auditor_epsilon)
        theta = theta + hp.eta * _violations(released.reshape(d.shape[1:]), gamma)
        return theta, (h, released, lam, scale)

    theta0 = jnp.zeros((2 * half,), jnp.float32)
    _, (idx, released, lams, scales) = jax.lax.scan(round_, theta0, jax.random.split(k_rounds, steps))
    q = jnp.zeros((preds.shape[0],), jnp.float32).at[idx].add(1.0 / steps)
    true_err, true_d = rate_tables(preds, y, s, _ol.public_denominators(
        _ol.group_label_counts(y, s, num_groups).reshape((num_groups, 2))))
    return {"indices": idx, "mixture": q, "noisy_counts": counts, "released": released, "lambdas": lams,
            "auditor_scale": scales[0], "oracle_sensitivity": score_sens,
            "error": q @ true_err, "violation": jnp.max(jnp.abs(q @ true_d.reshape((true_d.shape[0], -1)))),
            "gap": lagrangian_gap(err_score, d, q, jnp.mean(lams, axis=0), bound, gamma)}


def _hp_arrays(hp: JagielskiInHparams) -> JagielskiInHparams:
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), hp)


@full_precision
def fit(key: Array, data: OracleData, hparams: JagielskiInHparams, config: JagielskiInConfig, *,
        validate: bool = True) -> FitResult:
    """Run the DP-oracle-learner (module docstring) on ``data`` (:class:`OracleData`).

    Returns ``params = {"indices" [T], "mixture" [M]}`` (the Learner's draws and the uniform
    mixture's weights over the class: the release); ``diagnostics``: released (covered by the
    spend, or public functions of it): ``noisy_counts [K, 2]``, ``released [T, 2(K-1)]`` (the noisy
    rate differences), ``lambdas [T, 4(K-1)]``, ``auditor_scale`` and ``oracle_sensitivity``;
    computed from the private data (not private, do not publish): ``error`` and ``violation``
    (the mixture's error and largest rate gap with the true counts) and ``gap`` (the
    saddle-point suboptimality :func:`lagrangian_gap` of the mixture and the mean multiplier).
    ``hparams`` fields may be traced (``vmap``); ``spend`` is then ``None``. ``validate=False``
    (inside a compiled program: ``data`` may be traced) skips the checks of the data and of
    ``hparams`` and records no spend (the caller accounts the run, e.g. by :func:`spend`).

    Privacy: as :func:`spend` states, for ``config.privacy_unit`` under ``config.relation``.
    """
    V.check_threefry_key(key)
    if not isinstance(config, JagielskiInConfig):
        raise ValueError(f"config must be a JagielskiInConfig, got {type(config).__name__}.")
    config.validate()
    if not isinstance(hparams, JagielskiInHparams):
        raise ValueError(f"hparams must be a JagielskiInHparams, got {type(hparams).__name__}.")
    if validate:
        hparams.validate()
        preds, y, s = _check_data(data, config.num_groups)
        concrete = not is_traced(hparams) and not any(np.ndim(x) for x in jax.tree_util.tree_leaves(hparams))
        recorded = spend(config, int(preds.shape[1]), hparams) if concrete else None
    else:
        preds, y, s = (jnp.asarray(data.preds, jnp.float32), jnp.asarray(data.y, jnp.int32),
                       jnp.asarray(data.s, jnp.int32))
        recorded = None
    out = _run(key, jnp.asarray(preds), jnp.asarray(y), jnp.asarray(s), _hp_arrays(hparams),
               num_groups=config.num_groups, steps=config.steps, unit=config.privacy_unit,
               relation=config.relation)
    params = {"indices": out.pop("indices"), "mixture": out.pop("mixture")}
    report = SamplingReport(steps=config.steps, dataset_size=int(preds.shape[1]),
                            releases=(("laplace_counts", 1), ("exponential_mechanism", config.steps),
                                      ("laplace_rate_differences", config.steps)))
    return FitResult(params, out, recorded, report)


def _host_eps(hparams: JagielskiInHparams) -> tuple[float, float, float]:
    out = []
    for name in ("count_epsilon", "oracle_epsilon", "auditor_epsilon"):
        value = getattr(hparams, name)
        if is_traced(value) or np.ndim(value):
            raise ValueError(f"spend needs a concrete scalar hparams.{name} (host-side accounting).")
        out.append(float(value))
    return out[0], out[1], out[2]


def spend(config: JagielskiInConfig, sizes: int, hparams: JagielskiInHparams) -> PrivacySpend:
    """The spend of :func:`fit` on ``n = sizes`` rows: the least of basic, advanced, zCDP and PLD
    composition of the count release and ``T`` rounds
    (:func:`~dpfair_jax.privacy.oracle_learner.oracle_learner_epsilon`) at ``config.delta``
    (``inf`` when a noise field is ``inf``), for ``config.privacy_unit`` under ``config.relation``
    (each step is pure DP under it at the sensitivities of that relation). The notes give the bound
    used and Jagielski et al.'s per-round ``eps'`` for the same epsilon."""
    config.validate()
    hparams.validate()
    V.check_int("sizes", sizes, minimum=1)
    ec, eo, ea = _host_eps(hparams)
    eps, how = _ol.oracle_learner_epsilon(ec, eo, ea, config.steps, config.delta)
    unit = config.privacy_unit
    notes = (f"Jagielski et al. (2019) DP-oracle-learner: Laplace group-label counts (eps {ec:.4g}), {config.steps} "
             f"rounds of the exponential-mechanism oracle (eps {eo:.4g}) and a Laplace release of the rate "
             f"differences (eps {ea:.4g}); composition: {how}")
    if math.isinf(eps):
        return PrivacySpend(math.inf, float(config.delta), relation=config.relation, unit=unit,
                            notes=notes + "; a noise field is off: no guarantee")
    notes += (f"; the paper's per-round eps' for this epsilon: "
              f"{_ol.paper_round_epsilon(eps, config.delta, config.steps):.4g}")
    accountant = {"pld": "pld", "zcdp": "zcdp"}.get(how, "closed_form")
    return PrivacySpend(eps, float(config.delta), relation=config.relation, unit=unit, accountant=accountant,
                        notes=notes)


def _f32_down(x: float) -> float:
    v = np.float32(x)
    return float(np.nextafter(v, np.float32(0.0)) if float(v) > x else v)


def calibrate(config: JagielskiInConfig, sizes: int, target: tuple[float, float], *,
              hparams: JagielskiInHparams | None = None) -> JagielskiInHparams:
    """``hparams`` (default ``JagielskiInHparams()``) with the noise fields set so that
    ``spend(config, sizes, result).epsilon <= target[0]``: ``count_epsilon = count_share * eps``,
    and the largest per-round budget ``e`` (bisection) with ``oracle_epsilon = oracle_share * e``,
    ``auditor_epsilon = (1 - oracle_share) * e``; float32, rounded toward less spend.
    ``target[1]`` must equal ``config.delta``. Privacy: the result's run is ``target``-DP."""
    config.validate()
    base = (JagielskiInHparams() if hparams is None else hparams).validate()
    V.check_int("sizes", sizes, minimum=1)
    eps, delta = calibration_target(target, config.delta)
    ec = _f32_down(config.count_share * eps)
    share = float(config.oracle_share)

    def total(e: float) -> float:
        return _ol.oracle_learner_epsilon(ec, share * e, (1.0 - share) * e, config.steps, delta)[0]

    lo, hi = 0.0, eps
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(mid) <= eps else (lo, mid)
        if hi - lo <= 1e-6 * hi:
            break
    out = dataclasses.replace(base, count_epsilon=ec, oracle_epsilon=_f32_down(share * lo),
                              auditor_epsilon=_f32_down((1.0 - share) * lo))
    while spend(config, sizes, out).epsilon > eps:  # float32 rounding
        out = dataclasses.replace(out, oracle_epsilon=_f32_down(out.oracle_epsilon * (1 - 1e-6)),
                                  auditor_epsilon=_f32_down(out.auditor_epsilon * (1 - 1e-6)))
    return out
