"""Audit games of Jagielski et al.'s (2019) DP post-processing (:mod:`dpfair_jax.algorithms.jagielski`)
and DP-oracle-learner (:mod:`dpfair_jax.algorithms.jagielski_in`, below), as
:class:`~dpfair_jax.audit.fit_spend.FitSpendGame` games on each module's ``fit`` / ``spend``.

The release is the noisy confusion histogram ``N[a, h, y]`` (``fit``'s
``diagnostics["noisy_counts"]``); the post-processed probabilities ``params`` are a function of
it (the LP), so the histogram is the strongest thing to test.

* ``jagielski``: the default configuration (``privacy_unit="sensitive_attribute"``, the
  authors' unit; ``JagielskiHparams()``: ``noise_multiplier = 1``, claim ``epsilon = 1``).
  Neighbours differ in one record's ``s`` only (replace-one; the canary, ``yhat = y = 1``,
  moves from cell ``(0, 1, 1)`` to cell ``(1, 1, 1)``). Statistic
  ``clip(N[1,1,1] - c[1,1,1], 0, 1) + clip(c[0,1,1] - N[0,1,1], 0, 1)`` with ``c`` the counts of
  ``D0``: a monotone transform of the Laplace likelihood ratio of the two moved cells (it takes
  its top value 2 exactly where the ratio is ``e^epsilon``).
* ``jagielski_example``: ``privacy_unit="example"`` (add/remove of the canary, L1 sensitivity 1;
  claim ``epsilon = 1``). Statistic ``clip(N[0,1,1] - c[0,1,1], 0, 1)``.

Bounds: Clopper-Pearson threshold bounds
(:func:`~dpfair_jax.audit.lower_bounds.epsilon_lower_bound_from_scores`). Planted bugs (each must
give a lower bound above its claim): ``"noise"`` / ``"noise_half"`` (Laplace multiplier x 1/10 /
x 1/2, :func:`~dpfair_jax.audit.fit_spend.plant`) and, for ``jagielski``, ``"example_sensitivity"``:
the run noised for the example unit (L1 sensitivity 1, the add/remove histogram) while the claim is
the sensitive-attribute spend (a move between two cells changes the histogram by 2 in L1).

Games of Jagielski et al.'s DP-oracle-learner (:mod:`dpfair_jax.algorithms.jagielski_in`) on
``jagielski_in.fit`` / ``jagielski_in.spend``, the default ``JagielskiInConfig()`` (``T = 100``
rounds, ``delta = 1e-5``) and the default ``JagielskiInHparams()`` (``count_epsilon =
oracle_epsilon = auditor_epsilon = 0.1``; claim: the zCDP composition, ``epsilon = 5.40``):

* ``jagielski_in``: the default unit ``"sensitive_attribute"``; the canary (``y = 1``, the one
  record the class's single classifier predicts 1 on) has ``s = 0`` in ``D0`` and ``s = 1`` in
  ``D1``. Positives are rare (10 per group of 100), so the label block ``y = 1`` has the smallest
  released counts and the move shifts the Auditor's released true-positive gap by exactly its L1
  sensitivity ``1/m_{0,1} + 1/m_{1,1}`` each round.
* ``jagielski_in_example``: ``privacy_unit="example"``; the canary ``(h = 1, y = 1, s = 0)`` is
  replaced by ``(h = 1, y = 0, s = 1)`` (replace-one), group 0 with few positives and group 1 with
  few negatives, so the two moved cells are the two smallest and the shift is again the L1
  sensitivity ``1/m_{0,1} + 1/m_{1,0}``.

* ``jagielski_in_oracle``: the Learner's draws, the ``jagielski_in`` pair with a second,
  all-zero classifier in the class; statistic: over the rounds, +1 where the released draw is
  world 1's exact minimizer of the round's score ``err(h) + <w_t, d(h)>`` and not world 0's, -1
  the reverse (``w_t`` from the released multipliers, ``d`` at the released denominators).
  Planted bugs: ``"oracle_noise"`` (``oracle_epsilon x 100``: the exponential mechanism's
  temperature / 100) and ``"oracle_off"`` (the exact argmin). At ``oracle_epsilon = 0.1`` and a
  score sensitivity ``B`` times the rate gaps' the mechanism is near uniform (bug-free bound ~0.1);
  ``x 10`` is not separable (bound 1.8 at 4,000 trials).

In the first two games the class has one member, so the Learner's exponential mechanism is
trivial (its budget is charged, not exercised: they audit the count release and the ``T``
Auditor releases). Statistic (released
outputs only: ``noisy_counts``, ``released``): with ``mu_w = d(h)`` of world ``w`` at the released
denominators, the summed Laplace log-likelihood ratio of the ``T`` releases over its per-round
maximum, ``sum_t sum_j (|r_tj - mu_0j| - |r_tj - mu_1j|) / ||mu_1 - mu_0||_1`` (in ``[-T, T]``),
plus ``4 T`` if the released counts equal ``D1``'s exactly and minus ``4 T`` if they equal
``D0``'s (probability ~0 with any count noise). Planted bugs: ``"auditor_noise"``
(``auditor_epsilon x 10``: the Auditor's Laplace scale / 10), ``"auditor_off"`` (the Auditor's noise
removed) and ``"count_off"`` (the count release un-noised). A halved Auditor scale is not
separable from the claim at ``delta = 1e-5`` by threshold counting (the composition over 100
rounds keeps the gap between the Laplace steps' true curve and the claim above what halving adds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import jagielski
from dpfair_jax.algorithms import jagielski_in
from dpfair_jax.audit.fit_spend import FitSpendGame, plant
from dpfair_jax.privacy.oracle_learner import public_denominators

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "ALGORITHMS", "jagielski_game", "jagielski_mechanism",
           "jagielski_example_mechanism", "jagielski_in_game", "jagielski_in_mechanism",
           "jagielski_in_example_mechanism", "jagielski_in_oracle_mechanism"]

_IN_BUGS = ("auditor_noise", "auditor_off", "count_off")
_ORACLE_BUGS = ("oracle_noise", "oracle_off")
FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "jagielski": ("noise", "noise_half", "example_sensitivity"),
    "jagielski_example": ("noise", "noise_half"),
    "jagielski_in": _IN_BUGS,
    "jagielski_in_example": _IN_BUGS,
    "jagielski_in_oracle": _ORACLE_BUGS,
}
# jagielski_in*: at 4,000 trials "auditor_noise" clears the claim by 0.2-0.5 only (threshold bound
# saturating at log(2000 / 3.7) = 6.3); 8,000 leaves a margin
SUITE_TRIALS = {"quick": {"jagielski": 40000, "jagielski_example": 20000, "jagielski_in": 8000,
                          "jagielski_in_example": 8000, "jagielski_in_oracle": 8000},
                "full": {"jagielski": 200000, "jagielski_example": 200000, "jagielski_in": 80000,
                         "jagielski_in_example": 80000, "jagielski_in_oracle": 80000}}
ALGORITHMS = {"jagielski": "jagielski", "jagielski_example": "jagielski", "jagielski_in": "jagielski_in",
              "jagielski_in_example": "jagielski_in", "jagielski_in_oracle": "jagielski_in"}

_NOISE = (("noise_multiplier", None),)


def _records(n: int, num_groups: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(yhat, y, s)`` of ``n`` rows, every cell populated; the last row (the canary) has
    ``yhat = y = 1`` and ``s = 0``."""
    rng = np.random.default_rng(seed)
    yhat = rng.integers(0, 2, n).astype(np.int32)
    y = rng.integers(0, 2, n).astype(np.int32)
    s = (np.arange(n) % num_groups).astype(np.int32)
    yhat[-1], y[-1], s[-1] = 1, 1, 0
    return yhat, y, s


def _cell_counts(yhat: np.ndarray, y: np.ndarray, s: np.ndarray, num_groups: int) -> np.ndarray:
    """The exact ``[K, 2, 2]`` counts (host reference; the game knows ``D0``)."""
    c = np.zeros((num_groups, 2, 2), np.float64)
    np.add.at(c, (s, yhat, y), 1.0)
    return c


def jagielski_game(
    *, bug: str | None = None, privacy_unit: str = "sensitive_attribute", n: int = 40, num_groups: int = 2,
    hparams: jagielski.JagielskiHparams | None = None, seed: int = 0,
) -> FitSpendGame:
    """The game of the module docstring for ``privacy_unit`` (the config is
    ``JagielskiConfig(num_groups=num_groups, privacy_unit=privacy_unit)``, the hparams the
    defaults unless given).

    Privacy: the claim is ``jagielski.spend`` of the nominal config and hparams (pure
    ``1 / noise_multiplier``-DP; replace-one of ``s_i`` or add/remove of a record).
    """
    family = "jagielski" if privacy_unit == "sensitive_attribute" else "jagielski_example"
    V.check_choice("privacy_unit", privacy_unit, tuple(jagielski.UNITS))
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS[family])
    n = V.check_int("n", n, minimum=8)
    cfg = jagielski.JagielskiConfig(num_groups=num_groups, privacy_unit=privacy_unit).validate()
    hp = (jagielski.JagielskiHparams() if hparams is None else hparams).validate()
    yhat, y, s = _records(n, num_groups, seed)
    if family == "jagielski":
        s1 = s.copy()
        s1[-1] = 1
        d0, d1 = (yhat, y, s), (yhat, y, s1)
        c0 = _cell_counts(yhat, y, s, num_groups)
        lo, hi = float(c0[0, 1, 1]), float(c0[1, 1, 1])

        def stat(res) -> jax.Array:
            nc = res.diagnostics["noisy_counts"]
            return jnp.clip(nc[1, 1, 1] - hi, 0.0, 1.0) + jnp.clip(lo - nc[0, 1, 1], 0.0, 1.0)
    else:
        d0, d1 = (yhat[:-1], y[:-1], s[:-1]), (yhat, y, s)
        lo = float(_cell_counts(*d0, num_groups)[0, 1, 1])

        def stat(res) -> jax.Array:
            return jnp.clip(res.diagnostics["noisy_counts"][0, 1, 1] - lo, 0.0, 1.0)

    data = tuple(tuple(jnp.asarray(a) for a in d) for d in (d0, d1))
    run_cfg = dataclasses.replace(cfg, privacy_unit="example") if bug == "example_sensitivity" else None
    return FitSpendGame(
        algorithm=jagielski, config=cfg, hparams=hp, neighbours=data, statistic=stat,
        relation=jagielski.UNITS[privacy_unit],
        run_hparams=plant(hp, bug if bug in ("noise", "noise_half") else None, _NOISE), run_config=run_cfg,
    )


def jagielski_mechanism(*, bug: str | None = None, **kw: Any
                        ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of the ``jagielski`` family (sensitive-attribute unit, default config).

    Privacy: see :func:`jagielski_game`.
    """
    return jagielski_game(bug=bug, **kw).build()


def jagielski_example_mechanism(*, bug: str | None = None, **kw: Any
                                ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of the ``jagielski_example`` family (add/remove of a record).

    Privacy: see :func:`jagielski_game`.
    """
    return jagielski_game(bug=bug, privacy_unit="example", **kw).build()


def _oracle_worlds(privacy_unit: str, per_group: int, positives: int, learner: bool = False
                   ) -> tuple[jagielski_in.OracleData, ...]:
    """``(D0, D1)`` of the ``jagielski_in`` games (module docstring): ``per_group`` rows per
    group, the canary the last positive of group 0, the class the classifier predicting 1 on it
    alone (and, for ``learner``, the all-zero classifier)."""
    n = 2 * per_group
    s = np.repeat([0, 1], per_group).astype(np.int32)
    y = np.zeros(n, np.int32)
    if privacy_unit == "sensitive_attribute":  # few positives in both groups
        y[per_group - positives:per_group] = 1
        y[n - positives:] = 1
    else:  # few positives in group 0, few negatives in group 1
        y[per_group - positives:per_group] = 1
        y[per_group + positives:] = 1
    canary = per_group - 1  # a positive of group 0 in D0
    preds = np.zeros((2 if learner else 1, n), np.int32)
    preds[0, canary] = 1
    y1, s1 = y.copy(), s.copy()
    s1[canary] = 1
    if privacy_unit == "example":
        y1[canary] = 0
    return jagielski_in.OracleData(preds, y, s), jagielski_in.OracleData(preds, y1, s1)


def _oracle_statistic(worlds: tuple[jagielski_in.OracleData, ...], num_groups: int, steps: int
                      ) -> Callable[[Any], jax.Array]:
    """The statistic of the module docstring: the Auditor releases' normalized Laplace
    log-likelihood ratio plus ``+-4 T`` where the released counts are a world's exact counts."""
    exact = []
    for w in worlds:  # host reference: the game knows both worlds' exact [K, 2] counts
        c = np.zeros((num_groups, 2), np.float32)
        np.add.at(c, (np.asarray(w.s), np.asarray(w.y)), 1.0)
        exact.append(c)
    arrays = [tuple(jnp.asarray(a) for a in w) for w in worlds]

    def stat(res) -> jax.Array:
        counts = res.diagnostics["noisy_counts"]
        denom = public_denominators(counts)  # the run's own denominators (post-processing)
        mu0, mu1 = (jagielski_in.rate_tables(p.astype(jnp.float32), y, s, denom)[1][0].reshape(-1)
                    for p, y, s in arrays)
        r = res.diagnostics["released"]
        llr = jnp.sum(jnp.abs(r - mu0) - jnp.abs(r - mu1)) / jnp.sum(jnp.abs(mu1 - mu0))
        hit = [jnp.all(counts == jnp.asarray(c, counts.dtype)).astype(jnp.float32) for c in exact]
        return llr + 4.0 * steps * (hit[1] - hit[0])

    return stat


def _learner_statistic(worlds: tuple[jagielski_in.OracleData, ...]) -> Callable[[Any], jax.Array]:
    """``jagielski_in_oracle``'s statistic: over the rounds, the Learner's released draw
    (``params["indices"]``) counted +1 where it is world 1's exact minimizer of the round's score
    ``err(h) + <w_t, d(h)>`` and not world 0's, -1 the reverse (``w_t`` from the released
    ``lambdas``, ``d`` at the released denominators)."""
    arrays = [tuple(jnp.asarray(a) for a in w) for w in worlds]

    def stat(res) -> jax.Array:
        denom = jnp.maximum(res.diagnostics["noisy_counts"], 1.0)
        lam = res.diagnostics["lambdas"]
        half = lam.shape[-1] // 2
        w = lam[:, :half] - lam[:, half:]  # [T, 2(K-1)]
        best = []
        for p, y, s in arrays:
            err, d = jagielski_in.rate_tables(p.astype(jnp.float32), y, s, denom)
            best.append(jnp.argmin(err[None, :] + w @ d.reshape((d.shape[0], -1)).T, axis=-1))
        idx = res.params["indices"]
        return jnp.sum((idx == best[1]).astype(jnp.float32) - (idx == best[0]).astype(jnp.float32))

    return stat


def jagielski_in_game(
    *, bug: str | None = None, privacy_unit: str = "sensitive_attribute", per_group: int = 100,
    positives: int = 10, learner: bool = False, hparams: jagielski_in.JagielskiInHparams | None = None,
) -> FitSpendGame:
    """The ``jagielski_in`` games of the module docstring on ``JagielskiInConfig(privacy_unit=
    privacy_unit)`` (otherwise the default config) and the default hparams unless given;
    ``learner=True``: the ``jagielski_in_oracle`` game (two classifiers, the Learner's draws).

    Privacy: the claim is ``jagielski_in.spend`` of the nominal config and hparams at ``n =
    2 per_group`` rows (replace-one of ``s_i`` or of a whole record; ``(5.40, 1e-5)`` at the defaults).
    """
    V.check_choice("privacy_unit", privacy_unit, ("sensitive_attribute", "example"))
    if learner and privacy_unit != "sensitive_attribute":
        raise ValueError("learner=True is the sensitive-attribute game; privacy_unit must be 'sensitive_attribute'.")
    if bug is not None:
        V.check_choice("bug", bug, _ORACLE_BUGS if learner else _IN_BUGS)
    per_group = V.check_int("per_group", per_group, minimum=4)
    positives = V.check_int("positives", positives, minimum=2)
    if 2 * positives > per_group:
        raise ValueError(f"positives must be at most per_group / 2, got {positives} > {per_group} / 2.")
    cfg = jagielski_in.JagielskiInConfig(privacy_unit=privacy_unit).validate()
    hp = (jagielski_in.JagielskiInHparams() if hparams is None else hparams).validate()
    worlds = _oracle_worlds(privacy_unit, per_group, positives, learner)
    run = {"auditor_noise": {"auditor_epsilon": 10.0 * float(hp.auditor_epsilon)},
           "auditor_off": {"auditor_epsilon": float("inf")},
           "count_off": {"count_epsilon": float("inf")},
           "oracle_noise": {"oracle_epsilon": 100.0 * float(hp.oracle_epsilon)},
           "oracle_off": {"oracle_epsilon": float("inf")}}.get(bug)
    stat = _learner_statistic(worlds) if learner else _oracle_statistic(worlds, cfg.num_groups, cfg.steps)
    return FitSpendGame(
        algorithm=jagielski_in, config=cfg, hparams=hp, neighbours=worlds, statistic=stat, relation="replace_one",
        run_hparams=None if run is None else dataclasses.replace(hp, **run),
    )


def jagielski_in_mechanism(*, bug: str | None = None, **kw: Any
                           ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of the ``jagielski_in`` family (sensitive-attribute unit, default
    config). Privacy: see :func:`jagielski_in_game`."""
    return jagielski_in_game(bug=bug, **kw).build()


def jagielski_in_example_mechanism(*, bug: str | None = None, **kw: Any
                                   ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of the ``jagielski_in_example`` family (a whole record replaced).
    Privacy: see :func:`jagielski_in_game`."""
    return jagielski_in_game(bug=bug, privacy_unit="example", **kw).build()


def jagielski_in_oracle_mechanism(*, bug: str | None = None, **kw: Any
                                  ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of the ``jagielski_in_oracle`` family (the Learner's draws,
    sensitive-attribute unit, default config). Privacy: see :func:`jagielski_in_game`."""
    return jagielski_in_game(bug=bug, learner=True, **kw).build()


BUILDERS = {"jagielski": jagielski_mechanism, "jagielski_example": jagielski_example_mechanism,
            "jagielski_in": jagielski_in_mechanism, "jagielski_in_example": jagielski_in_example_mechanism,
            "jagielski_in_oracle": jagielski_in_oracle_mechanism}
