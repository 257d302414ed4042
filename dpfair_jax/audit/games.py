"""Distinguishing games as one compiled program, and an audit row from their outcomes.

A *game* runs a mechanism many times on two neighbouring data sets (``flag = 0``: without the
canary, ``flag = 1``: with it) and records a scalar attack statistic per run. All trials of both
worlds are one jitted program: ``vmap`` over the two worlds inside each trial, and the trial axis
evaluated by :func:`dpfair_jax.montecarlo.run_trials` (``vmap`` over trial keys, chunked with
``lax.map(batch_size=)``, sharded over a mesh if given). The statistics then go to
:mod:`dpfair_jax.audit.lower_bounds` on the host.

The protocol, typed: a game module (:class:`GameModule`, one per paper's algorithms, registered in
:mod:`dpfair_jax.audit.mechanism_audits`) offers one :class:`GameBuilder` per family; a builder
returns ``(mechanism_fn, info)``, read as an :class:`AuditGame` (the mechanism on the two
neighbouring data sets and the claim it is audited against).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax import montecarlo
from dpfair_jax.audit.lower_bounds import epsilon_lower_bound_from_scores
from dpfair_jax.privacy import relations as R

__all__ = ["AuditGame", "GameBuilder", "GameModule", "MechanismFn", "GameResult", "run_game", "audit_mechanism",
           "check_family_bug", "AUDIT_COLUMNS"]

MechanismFn = Callable[[jax.Array, jax.Array], jax.Array]
"""``mechanism_fn(key, dataset_flag) -> scalar statistic``: one run of the mechanism on ``D0``
(``flag = 0``, without the canary) or ``D1`` (``flag = 1``, with it), selected with array
operations on the traced flag; a higher statistic means "canary in"."""

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


@dataclasses.dataclass(frozen=True)
class AuditGame:
    """A distinguishing game as a builder returns it: the mechanism and the claim it is audited against.

    ``mechanism_fn``: :data:`MechanismFn` (the neighbouring pair ``D0``/``D1`` lives inside it);
    ``claimed_epsilon`` / ``delta``: the claim (for an algorithm, its ``spend`` at the nominal
    arguments; a planted bug changes the run, never the claim); ``relation``: the neighbouring
    relation the pair encodes (``privacy.relations``); ``bound``: the name of the parametric bound
    the game module's ``parametric_bound`` computes, or ``None`` for the Clopper-Pearson threshold
    bound (:func:`~dpfair_jax.audit.lower_bounds.epsilon_lower_bound_from_scores`); ``info``:
    the builder's whole ``info`` dict (what ``parametric_bound`` reads).
    """

    mechanism_fn: MechanismFn
    claimed_epsilon: float
    delta: float
    relation: str
    bound: str | None = None
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.mechanism_fn):
            raise ValueError("mechanism_fn must be callable as mechanism_fn(key, dataset_flag).")
        if not (math.isfinite(self.claimed_epsilon) and self.claimed_epsilon > 0):
            raise ValueError(f"claimed_epsilon must be finite and > 0, got {self.claimed_epsilon!r}.")
        if not 0.0 <= self.delta < 1.0:
            raise ValueError(f"delta must lie in [0, 1), got {self.delta!r}.")
        R.as_relation(self.relation)
        if self.bound is not None and not (isinstance(self.bound, str) and self.bound):
            raise ValueError(f"bound must be None or a parametric bound's name, got {self.bound!r}.")

    @classmethod
    def from_built(cls, built: tuple[MechanismFn, Mapping[str, Any]]) -> AuditGame:
        """The game of a builder's ``(mechanism_fn, info)``; ``info`` must name ``claimed_epsilon``,
        ``delta`` and ``relation`` (and may name ``bound``)."""
        fn, info = built
        missing = {"claimed_epsilon", "delta", "relation"} - set(info)
        if missing:
            raise ValueError(f"a game's info must name {sorted(missing)}.")
        return cls(fn, float(info["claimed_epsilon"]), float(info["delta"]), info["relation"],
                   info.get("bound"), dict(info))


class GameBuilder(Protocol):
    """``builder(*, bug=None, **kwargs) -> (mechanism_fn, info)``: one family's game, bug-free or with
    a planted ``bug`` of the module's ``FAMILY_BUGS[family]`` (:meth:`AuditGame.from_built` reads it)."""

    def __call__(self, *, bug: str | None = None, **kwargs: Any) -> tuple[MechanismFn, dict[str, Any]]: ...


@runtime_checkable
class GameModule(Protocol):
    """What a game module registers, keyed by family name (the same keys in every mapping):
    ``FAMILY_BUGS`` (planted bugs), ``SUITE_TRIALS`` (``{"quick": {family: trials per world},
    "full": {...}}``), ``BUILDERS`` (:class:`GameBuilder`) and ``ALGORITHMS`` (the audited module
    of ``dpfair_jax.algorithms``, ``None`` for a privacy primitive). A module with a family whose
    ``info`` names a ``bound`` also offers ``parametric_bound(info, with_canary, without,
    confidence)`` (:mod:`dpfair_jax.audit.parametric`)."""

    FAMILY_BUGS: Mapping[str, tuple[str, ...]]
    SUITE_TRIALS: Mapping[str, Mapping[str, int]]
    BUILDERS: Mapping[str, GameBuilder]
    ALGORITHMS: Mapping[str, str | None]


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
    mechanism_fn: MechanismFn,
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
    mechanism_fn: MechanismFn,
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
