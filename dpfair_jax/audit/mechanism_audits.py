"""Audits of the kit's algorithms: one loop over the games of each algorithm's public trio.

Every game is a :class:`~dpfair_jax.audit.fit_spend.FitSpendGame`: the mechanism is the
algorithm's ``fit(key, data, hparams, config)`` on its default configuration and the claim is its
``spend(config, sizes, hparams)``; a planted bug changes what ``fit`` runs with, never the claim
(or, for an earlier record, is a claim-side variant). The registry is keyed by algorithm module
(:data:`ALGORITHM_GAMES`, one entry per name of ``dpfair_jax.algorithms.ALGORITHMS``); an algorithm
without a game would be listed in :data:`NO_GAME` with the reason (it is empty). Games of
privacy primitives that no algorithm wraps (group-weighted aggregation) live in
:mod:`~dpfair_jax.audit.primitive_games`, beside :mod:`~dpfair_jax.audit.sum_audits`, and are
listed in :data:`PRIMITIVE_FAMILIES`.

The scenarios (data pair, statistic, hparams) live in one module per paper's algorithms:

* :mod:`~dpfair_jax.audit.dpsgd_games`: ``dpsgd`` (Poisson, add/remove, GLM ghost norms),
  ``dpsgd_replace`` (fixed-size, replace-one), ``dpsgd_mlp`` (dense ghost path),
  ``output_perturbation`` and ``mitigation`` (paper 001);
* :mod:`~dpfair_jax.audit.fermi_games`: ``fermi`` (all features, Poisson ``q < 1``, noisy group
  frequencies) and ``fermi_sensitive`` (the sensitive-attribute unit, membership-visible), with
  parametric bounds;
* :mod:`~dpfair_jax.audit.budget_tailoring_games`: ``budget_tailoring`` (stage 2) and
  ``budget_tailoring_stage1`` (paper 000);
* :mod:`~dpfair_jax.audit.mean_estimation_games`: ``stratified_coinpress`` and
  ``mean_add_remove`` (paper 003);
* :mod:`~dpfair_jax.audit.reductions_games`: ``exponential_sampling`` and ``private_cgoo``
  (paper 002);
* :mod:`~dpfair_jax.audit.pfld_games`: ``pfld`` and ``pfld_epoch``;
  :mod:`~dpfair_jax.audit.sgda_games`: ``sgda``; :mod:`~dpfair_jax.audit.synthesis_games`:
  ``synthesis`` (papers 004 and 003);
* :mod:`~dpfair_jax.audit.jagielski_games`: ``jagielski`` (the sensitive-attribute unit, its
  default) and ``jagielski_example`` (add/remove of a record), Jagielski et al.'s DP
  post-processing (paper 004's EO baseline), and ``jagielski_in`` (the sensitive-attribute unit,
  its default), ``jagielski_in_example`` (replace-one of a record) and ``jagielski_in_oracle``
  (the Learner's draws), their DP-oracle-learner;
* :mod:`~dpfair_jax.audit.primitive_games`: ``group_weighted`` (a privacy primitive).

Every module is a :class:`~dpfair_jax.audit.games.GameModule`: it exports ``FAMILY_BUGS`` (planted
bugs per family), ``SUITE_TRIALS`` (quick and full trials per world), ``BUILDERS`` (``builder(*,
bug=None, **kw) -> (mechanism_fn(key, flag) -> scalar, info)``, ``info`` with ``claimed_epsilon``,
``delta``, ``relation``; :func:`game` reads it as an :class:`~dpfair_jax.audit.games.AuditGame`)
and ``ALGORITHMS`` (the algorithm module each family audits, ``None`` for a primitive). A family
whose statistic has a known Gaussian law names its bound in ``info["bound"]`` and its module offers
``parametric_bound(info, with_canary, without, confidence)`` (:mod:`~dpfair_jax.audit.parametric`);
the others use Clopper-Pearson threshold bounds
(:func:`~dpfair_jax.audit.lower_bounds.epsilon_lower_bound_from_scores`).

A row passes when the bug-free variant's lower bound is at most its claimed epsilon and a planted
bug's lower bound is above its claim (the audit has the power to see it).
"""

from __future__ import annotations

import functools

import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax import algorithms as _algorithms
from dpfair_jax.audit import (
    budget_tailoring_games,
    dpsgd_games,
    fermi_games,
    jagielski_games,
    mean_estimation_games,
    pfld_games,
    primitive_games,
    reductions_games,
    sgda_games,
    synthesis_games,
)
from dpfair_jax.audit.games import AuditGame, GameModule, audit_mechanism, check_family_bug

__all__ = [
    "ALGORITHM_GAMES",
    "NO_GAME",
    "PRIMITIVE_FAMILIES",
    "FAMILIES",
    "FAMILY_BUGS",
    "FAMILY_MODULES",
    "SUITE_TRIALS",
    "build",
    "game",
    "audit_family",
    "audit_family_variants",
    "mechanism_audit_suite",
]

_MODULES: tuple[GameModule, ...] = (dpsgd_games, fermi_games, budget_tailoring_games, mean_estimation_games,
                                    reductions_games, pfld_games, sgda_games, synthesis_games, jagielski_games,
                                    primitive_games)
FAMILY_MODULES: dict[str, GameModule] = {fam: mod for mod in _MODULES for fam in mod.FAMILY_BUGS}
# algorithms of dpfair_jax.algorithms.ALGORITHMS without a game here, each with a one-line reason
NO_GAME: dict[str, str] = {}
ALGORITHM_GAMES: dict[str, tuple[str, ...]] = {
    alg: tuple(f for f, mod in FAMILY_MODULES.items() if mod.ALGORITHMS[f] == alg)
    for alg in _algorithms.ALGORITHMS if alg not in NO_GAME
}
PRIMITIVE_FAMILIES: tuple[str, ...] = tuple(f for f, mod in FAMILY_MODULES.items() if mod.ALGORITHMS[f] is None)
FAMILY_BUGS: dict[str, tuple[str, ...]] = {fam: tuple(mod.FAMILY_BUGS[fam]) for fam, mod in FAMILY_MODULES.items()}
FAMILIES = tuple(FAMILY_BUGS)
SUITE_TRIALS: dict[str, dict[str, int]] = {
    size: {fam: int(mod.SUITE_TRIALS[size][fam]) for fam, mod in FAMILY_MODULES.items()}
    for size in ("quick", "full")
}


_check_bug = functools.partial(check_family_bug, FAMILY_BUGS)


def build(family: str, bug: str | None = None, **kwargs: Any):
    """``(mechanism_fn, info)`` of one family's game, bug-free or with a planted ``bug``."""
    V.check_choice("family", family, FAMILIES)
    _check_bug(family, bug)
    return FAMILY_MODULES[family].BUILDERS[family](bug=bug, **kwargs)


def game(family: str, bug: str | None = None, **kwargs: Any) -> AuditGame:
    """One family's game (:func:`build`) as an :class:`~dpfair_jax.audit.games.AuditGame`."""
    return AuditGame.from_built(build(family, bug, **kwargs))


def _variants_trial(fns: tuple) -> Callable[[jax.Array], jax.Array]:
    """One trial of every variant and both worlds: ``[num_variants, 2]`` statistics."""

    def trial(k: jax.Array) -> jax.Array:
        flags = jnp.array([0, 1], dtype=jnp.int32)
        keys = jax.random.split(k, len(fns))
        return jnp.stack([jnp.reshape(jax.vmap(fn)(jax.random.split(kk, 2), flags), (2,))
                          for fn, kk in zip(fns, keys)])

    return trial


def _bound(family: str, g: AuditGame, with_canary: np.ndarray, without: np.ndarray,
           confidence: float) -> tuple[float, float, str]:
    """``(lower bound, threshold, selection)`` for one variant's statistics."""
    from dpfair_jax.audit.lower_bounds import epsilon_lower_bound_from_scores

    if g.bound is not None:
        b = FAMILY_MODULES[family].parametric_bound(g.info, with_canary, without, confidence)
        return float(b.epsilon_lower_bound), float(b.mu_low), b.selection
    b = epsilon_lower_bound_from_scores(with_canary, without, g.info["delta"], confidence)
    return float(b.epsilon_lower_bound), float(b.threshold), b.selection


def audit_family_variants(
    key: jax.Array,
    family: str,
    bugs: tuple[str | None, ...] | None = None,
    *,
    num_trials: int = 4000,
    confidence: float = 0.95,
    chunk_size: int | None = 2000,
    mesh: Any = None,
    **mechanism_kwargs: Any,
) -> list[dict[str, Any]]:
    """Audit rows for several variants of one family (``None`` = bug-free; default: bug-free and
    every bug of ``FAMILY_BUGS[family]``), all trials of all variants and both worlds in ONE
    compiled program (:func:`dpfair_jax.montecarlo.run_trials`).

    Each row has the :data:`~dpfair_jax.audit.games.AUDIT_COLUMNS` plus ``threshold`` (for a
    parametric bound: the lower limit of ``mu``), ``selection`` and ``relation``.
    """
    from dpfair_jax import montecarlo

    V.check_choice("family", family, FAMILIES)
    V.check_threefry_key(key)
    bugs = (None,) + FAMILY_BUGS[family] if bugs is None else tuple(bugs)
    if not bugs:
        raise ValueError("bugs must name at least one variant (None = bug-free).")
    for b in bugs:
        _check_bug(family, b)
    num_trials = V.check_int("num_trials", num_trials, minimum=4)
    c = V.as_float("confidence", confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
    games = [game(family, b, **mechanism_kwargs) for b in bugs]
    trial = _variants_trial(tuple(g.mechanism_fn for g in games))
    chunk = min(chunk_size, num_trials) if chunk_size else None
    out = np.asarray(montecarlo.run_trials(trial, key, num_trials, chunk_size=chunk, mesh=mesh),
                     dtype=np.float64)  # [T, V, 2]
    rows = []
    for j, (b, g) in enumerate(zip(bugs, games)):
        lb, thr, sel = _bound(family, g, out[:, j, 1], out[:, j, 0], c)
        eps = g.claimed_epsilon
        rows.append({
            "mechanism": family, "planted_bug": b or "none", "claimed_epsilon": eps,
            "delta": g.delta, "epsilon_lower_bound": lb, "confidence": c,
            "trials": num_trials, "passed": bool(lb > eps if b else lb <= eps),
            "threshold": thr, "selection": sel, "relation": g.relation,
        })
    return rows


def audit_family(
    key: jax.Array,
    family: str,
    *,
    bug: str | None = None,
    num_trials: int = 4000,
    confidence: float = 0.95,
    chunk_size: int | None = 2000,
    **mechanism_kwargs: Any,
) -> dict[str, Any]:
    """One audit row for one family and variant (:func:`audit_family_variants` with one variant;
    a family with a threshold bound goes through :func:`~dpfair_jax.audit.games.audit_mechanism`)."""
    V.check_choice("family", family, FAMILIES)
    _check_bug(family, bug)
    num_trials = V.check_int("num_trials", num_trials, minimum=4)
    g = game(family, bug, **mechanism_kwargs)
    if g.bound is not None:
        return audit_family_variants(key, family, (bug,), num_trials=num_trials, confidence=confidence,
                                     chunk_size=chunk_size, **mechanism_kwargs)[0]
    row = audit_mechanism(
        g.mechanism_fn, key, mechanism=family, claimed_epsilon=g.claimed_epsilon, delta=g.delta,
        num_trials=num_trials, planted_bug=bug, confidence=confidence,
        chunk_size=min(chunk_size, num_trials) if chunk_size else None,
    )
    row["relation"] = g.relation
    return row


def mechanism_audit_suite(
    key: jax.Array, *, quick: bool = True, confidence: float = 0.95, families: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """Every family of :data:`FAMILIES` (or those named), bug-free and with each of its planted
    bugs (one compiled program per family), at the :data:`SUITE_TRIALS` sizes."""
    trials = SUITE_TRIALS["quick" if quick else "full"]
    fams = FAMILIES if families is None else tuple(families)
    for f in fams:
        V.check_choice("family", f, FAMILIES)
    rows: list[dict[str, Any]] = []
    for fam in fams:  # each family's key depends on its name only (stable when families are added)
        k = jax.random.fold_in(key, zlib.crc32(fam.encode()) & 0x7FFFFFFF)
        rows += audit_family_variants(k, fam, num_trials=trials[fam], confidence=confidence)
    return rows
