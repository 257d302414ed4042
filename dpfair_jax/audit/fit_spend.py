"""One distinguishing game per algorithm, driven by the algorithm's public trio.

A :class:`FitSpendGame` names an algorithm module of :mod:`dpfair_jax.algorithms`, its static
``config`` and nominal ``hparams``, a pair of neighbouring data sets (``D0`` without the canary,
``D1`` with it) and a scalar ``statistic`` of ``fit``'s result (higher means "``D1``"). The
mechanism of world ``flag`` is ``algorithm.fit(key, D_flag, run_hparams, run_config,
**fit_kwargs)``; the claim is ``algorithm.spend(config, sizes, hparams)`` of the *nominal*
arguments, the larger epsilon over the two worlds' sizes (add/remove: ``n - 1`` and ``n``).

A planted bug is a transform of what ``fit`` runs with while the claim stays the nominal spend:
:func:`plant` scales the noise fields (``"noise"``: x 1/10, ``"noise_half"``: x 1/2), drops the
``* clip_norm`` of the noise std (``"clip_unscaled"``: multiplier / clip) or disables clipping
with the nominal std (``"clipping"``: clip x 1e4, multiplier / 1e4). Bugs that reproduce an
earlier unsafe default are a ``run_config`` the module offers or a claim-side
``claimed_epsilon`` (documented where the game is defined).

:meth:`FitSpendGame.build` returns the builder contract of
:mod:`dpfair_jax.audit.mechanism_audits`: ``(mechanism_fn(key, flag) -> scalar, info)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import relations as R

__all__ = ["FitSpendGame", "GENERIC_BUGS", "UNCLIPPED", "plant", "replace_fields"]

GENERIC_BUGS = ("noise", "noise_half", "clip_unscaled", "clipping")
UNCLIPPED = 1e4


def replace_fields(hparams: Any, **changes: Any) -> Any:
    """``hparams`` with ``changes`` (a frozen dataclass or a NamedTuple)."""
    if dataclasses.is_dataclass(hparams):
        return dataclasses.replace(hparams, **changes)
    if hasattr(hparams, "_replace"):
        return hparams._replace(**changes)
    raise ValueError(f"hparams must be a dataclass or a NamedTuple, got {type(hparams).__name__}.")


def plant(hparams: Any, bug: str | None, fields: Sequence[tuple[str, str | None]]) -> Any:
    """The hparams a planted ``bug`` of :data:`GENERIC_BUGS` runs with (``None``: ``hparams``).

    ``fields``: ``(noise field, its clip field or None)`` pairs; the noise field is a multiplier
    (std = multiplier x clip). ``"noise"`` / ``"noise_half"`` scale every noise field by 1/10 / 1/2;
    ``"clip_unscaled"`` divides each multiplier by its clip (std ``z`` instead of ``z C``);
    ``"clipping"`` multiplies each clip by :data:`UNCLIPPED` and divides its multiplier by it (the
    nominal std, no clipping in effect).

    Privacy: none; the result is what a buggy run does, audited against the nominal claim.
    """
    if bug is None:
        return hparams
    V.check_choice("bug", bug, GENERIC_BUGS)
    if not fields:
        raise ValueError("fields must name at least one (noise field, clip field) pair.")
    changes: dict[str, Any] = {}
    for noise, clip in fields:
        z = getattr(hparams, noise)
        if bug in ("noise", "noise_half"):
            changes[noise] = z * (0.1 if bug == "noise" else 0.5)
            continue
        if clip is None:
            raise ValueError(f"bug={bug!r} needs the clip field of noise field {noise!r}.")
        c = getattr(hparams, clip)
        if bug == "clip_unscaled":
            if float(c) == 1.0:
                raise ValueError(f"bug='clip_unscaled' needs {clip} != 1.")
            changes[noise] = z / c
        else:
            changes[clip] = c * UNCLIPPED
            changes[noise] = z / UNCLIPPED
    return replace_fields(hparams, **changes)


def _rows(data: Any) -> int:
    """Number of rows of a data set (a ``Dataset``, an ``(x, y[, mask])`` tuple or an array)."""
    x = data.x if hasattr(data, "x") else data[0] if isinstance(data, (tuple, list)) else data
    return int(np.shape(x)[0])


@dataclasses.dataclass(frozen=True)
class FitSpendGame:
    """A distinguishing game on ``algorithm.fit`` whose claim is ``algorithm.spend`` (module doc).

    ``algorithm``: a module with ``fit(key, data, hparams, config)`` and ``spend(config, sizes,
    hparams)``; ``config`` / ``hparams``: the nominal (claimed) arguments; ``neighbours``: the pair
    ``(D0, D1)`` (of different sizes for add/remove: both worlds are computed and the traced flag
    selects), or ``neighbours(flag) -> data`` built with array operations (one fit per world);
    ``statistic(result) -> scalar``; ``sizes``: the ``sizes`` argument of ``spend`` for each world
    (default: the rows of ``D0`` and ``D1``); ``relation``: the relation the pair encodes, checked
    against the spend's (:func:`~dpfair_jax.privacy.relations.covers`: a pair the spend's relation
    does not cover, e.g. a record moved between groups against a ``"replace_one_within_group"``
    spend, is refused, its epsilon being infinite); ``fit_kwargs``: keywords of ``fit`` (e.g. initial parameters);
    ``run_hparams`` / ``run_config``: what ``fit`` runs with (a planted bug; default the nominal);
    ``world_hparams`` / ``world_configs``: ``(D0's, D1's)`` for a bug that derives a
    hyperparameter or a config field from each world's data (needs the pair form of
    ``neighbours``; overrides ``run_hparams`` / ``run_config``);
    ``claimed_epsilon``: a claim-side variant replacing the spend's epsilon (an earlier record);
    ``info``: extra entries of the builder's ``info`` (e.g. a parametric ``bound``).
    """

    algorithm: Any
    config: Any
    hparams: Any
    neighbours: Any
    statistic: Callable[[Any], jax.Array]
    sizes: tuple[Any, Any] | None = None
    relation: str | None = None
    fit_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    run_hparams: Any = None
    run_config: Any = None
    world_hparams: tuple[Any, Any] | None = None
    world_configs: tuple[Any, Any] | None = None
    claimed_epsilon: float | None = None
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("fit", "spend"):
            if not callable(getattr(self.algorithm, name, None)):
                raise ValueError(f"algorithm must offer {name}(...), got {self.algorithm!r}.")
        if not callable(self.statistic):
            raise ValueError("statistic must be callable as statistic(fit_result) -> scalar.")
        if not callable(self.neighbours) and not (
            isinstance(self.neighbours, (tuple, list)) and len(self.neighbours) == 2
        ):
            raise ValueError("neighbours must be a pair (D0, D1) or a callable neighbours(flag) -> data.")
        for name in ("world_hparams", "world_configs"):
            pair = getattr(self, name)
            if pair is not None and (callable(self.neighbours) or len(pair) != 2):
                raise ValueError(f"{name} must be a pair (for D0, for D1) and needs neighbours as a "
                                 "pair (D0, D1).")
        if self.sizes is not None and len(self.sizes) != 2:
            raise ValueError(f"sizes must be (sizes of D0, sizes of D1), got {self.sizes!r}.")
        if self.relation is not None:
            R.as_relation(self.relation)
        if self.claimed_epsilon is not None:
            V.check_epsilon(self.claimed_epsilon, "claimed_epsilon")

    def world_sizes(self) -> tuple[Any, Any]:
        """``(sizes of D0, sizes of D1)`` as ``spend`` takes them."""
        if self.sizes is not None:
            return tuple(self.sizes)
        if callable(self.neighbours):
            return tuple(_rows(self.neighbours(jnp.int32(f))) for f in (0, 1))
        return tuple(_rows(d) for d in self.neighbours)

    def spend(self) -> Any:
        """The claim's ``PrivacySpend``: ``spend(config, sizes, hparams)``, larger epsilon over the worlds.

        Privacy: an upper bound on what either world's ``fit`` spends at the nominal arguments,
        for neighbours under the spend's relation; a game whose ``relation`` the spend does not
        cover is refused (``ValueError``).
        """
        s0, s1 = self.world_sizes()
        spends = [self.algorithm.spend(self.config, s, self.hparams) for s in ((s0,) if s0 == s1 else (s0, s1))]
        sp = max(spends, key=lambda x: x.epsilon)
        if self.relation is not None and not R.covers(sp.relation, self.relation):
            raise ValueError(f"relation={self.relation!r} is not covered by the spend's {sp.relation!r} "
                             "(epsilon = inf for such neighbours).")
        return sp

    def build(self) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
        """``(mechanism_fn(key, flag) -> scalar, info)``; ``info`` has ``claimed_epsilon``,
        ``delta``, ``relation``, ``unit`` and :attr:`info`'s entries."""
        sp = self.spend()
        hp = self.hparams if self.run_hparams is None else self.run_hparams
        cfg = self.config if self.run_config is None else self.run_config
        fit, stat, kw = self.algorithm.fit, self.statistic, dict(self.fit_kwargs)

        hp0, hp1 = (hp, hp) if self.world_hparams is None else self.world_hparams
        cfg0, cfg1 = (cfg, cfg) if self.world_configs is None else self.world_configs

        def run(key: jax.Array, data: Any, hp: Any = hp, cfg: Any = cfg) -> jax.Array:
            return jnp.asarray(stat(fit(key, data, hp, cfg, **kw)))

        if callable(self.neighbours):
            neighbours = self.neighbours

            def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
                return run(key, neighbours(flag))
        else:
            d0, d1 = self.neighbours

            def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
                return jnp.where(flag == 1, run(key, d1, hp1, cfg1), run(key, d0, hp0, cfg0))

        eps = float(sp.epsilon) if self.claimed_epsilon is None else float(self.claimed_epsilon)
        info = {"claimed_epsilon": eps, "delta": float(sp.delta), "relation": sp.relation,
                "unit": sp.unit, "spend_epsilon": float(sp.epsilon), **dict(self.info)}
        return mechanism_fn, info
