"""Distinguishing games as one compiled program, and an audit row from their outcomes.

A *game* runs a mechanism many times on two neighbouring data sets (``flag = 0``: without the
canary, ``flag = 1``: with it) and records a scalar attack statistic per run. All trials of both
worlds are one jitted program: ``vmap`` over the two worlds inside each trial, and the trial axis
evaluated by :func:`dpfair_jax.montecarlo.run_trials` (``vmap`` over trial keys, chunked with
``lax.map(batch_size=)``, sharded over a mesh if given). The statistics then go to
:mod:`dpfair_jax.audit.lower_bounds` on the host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax import montecarlo
from dpfair_jax.audit.lower_bounds import epsilon_lower_bound_from_scores

__all__ = ["GameResult", "run_game", "audit_mechanism", "check_family_bug", "AUDIT_COLUMNS"]

AUDIT_COLUMNS = (
    "mechanism",
    "planted_bug",
    "claimed_epsilon",
    "delta",
    "epsilon_lower_bound",
    "confidence",
    "trials",
    "passed",
)


def check_family_bug(family_bugs: dict[str, tuple[str, ...]], family: str, bug: str | None) -> None:
    """Refuse a planted ``bug`` that ``family_bugs[family]`` does not name (``None`` = bug-free)."""
    if bug is not None:
        V.check_choice("bug", bug, family_bugs[family])


class GameResult(NamedTuple):
    """Attack statistics of a game, one per trial: ``without`` (flag 0) and ``with_canary`` (flag 1)."""

    without: np.ndarray
    with_canary: np.ndarray


@functools.lru_cache(maxsize=64)
def _trial_fn(mechanism_fn: Callable[[jax.Array, jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    """One trial of both worlds; cached per mechanism so repeated games reuse the compiled program."""

    def trial(k: jax.Array) -> jax.Array:
        flags = jnp.array([0, 1], dtype=jnp.int32)
        stats = jax.vmap(mechanism_fn)(jax.random.split(k, 2), flags)
        return jnp.reshape(stats, (2,))

    return trial


def run_game(
    mechanism_fn: Callable[[jax.Array, jax.Array], jax.Array],
    key: jax.Array,
    num_trials: int,
    *,
    chunk_size: int | None = None,
    mesh: Any = None,
) -> GameResult:
    """Run ``mechanism_fn(key, dataset_flag) -> scalar statistic`` ``num_trials`` times per world.

    Trial ``t`` splits its key in two and evaluates both worlds with ``vmap`` over
    ``dataset_flag = [0, 1]`` (a traced int32, so the mechanism must select the data with array
    operations, e.g. ``base + flag * canary``). Worlds and trials use independent keys.
    """
    V.check_threefry_key(key)
    num_trials = V.check_int("num_trials", num_trials, minimum=1)
    if not callable(mechanism_fn):
        raise ValueError("mechanism_fn must be callable as mechanism_fn(key, dataset_flag).")
    out = montecarlo.run_trials(_trial_fn(mechanism_fn), key, num_trials, chunk_size=chunk_size, mesh=mesh)
    out = np.asarray(out, dtype=np.float64)
    return GameResult(out[:, 0], out[:, 1])


def audit_mechanism(
    mechanism_fn: Callable[[jax.Array, jax.Array], jax.Array],
    key: jax.Array,
    *,
    mechanism: str,
    claimed_epsilon: float,
    delta: float = 0.0,
    num_trials: int = 2000,
    planted_bug: str | None = None,
    confidence: float = 0.95,
    selection: str = "split",
    thresholds: Sequence[float] | None = None,
    chunk_size: int | None = None,
    mesh: Any = None,
) -> dict[str, Any]:
    """Audit one mechanism: run the game, bound epsilon from below, and judge the claim.

    Returns a row with :data:`AUDIT_COLUMNS` plus ``threshold`` and ``selection``. ``passed`` is
    ``epsilon_lower_bound <= claimed_epsilon`` for a real mechanism (no evidence against the
    claim), and ``epsilon_lower_bound > claimed_epsilon`` for one with a ``planted_bug`` (named;
    the audit has the power to catch it). The row's ``planted_bug`` is the name or ``"none"``. Higher statistics must mean "canary in".

    Privacy: the bound is valid at ``confidence`` for the neighbouring pair the mechanism
    encodes (with/without the canary), see :func:`epsilon_lower_bound_from_scores`.
    """
    V.check_epsilon(claimed_epsilon, "claimed_epsilon")
    if not isinstance(mechanism, str) or not mechanism:
        raise ValueError(f"mechanism must be a non-empty name, got {mechanism!r}.")
    game = run_game(mechanism_fn, key, num_trials, chunk_size=chunk_size, mesh=mesh)
    bound = epsilon_lower_bound_from_scores(
        game.with_canary, game.without, delta, confidence, selection=selection, thresholds=thresholds
    )
    if planted_bug is not None and (not isinstance(planted_bug, str) or not planted_bug):
        raise ValueError(f"planted_bug must be None or the bug's name, got {planted_bug!r}.")
    bug = planted_bug is not None
    passed = bound.epsilon_lower_bound > claimed_epsilon if bug else bound.epsilon_lower_bound <= claimed_epsilon
    return {
        "mechanism": mechanism,
        "planted_bug": planted_bug if bug else "none",
        "claimed_epsilon": float(claimed_epsilon),
        "delta": float(delta),
        "epsilon_lower_bound": float(bound.epsilon_lower_bound),
        "confidence": float(confidence),
        "trials": int(num_trials),
        "passed": bool(passed),
        "threshold": float(bound.threshold),
        "selection": bound.selection,
    }
