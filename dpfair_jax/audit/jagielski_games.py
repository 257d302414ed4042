"""Audit games of Jagielski et al.'s (2019) DP post-processing (:mod:`dpfair_jax.algorithms.jagielski`)
as :class:`~dpfair_jax.audit.fit_spend.FitSpendGame` games on ``jagielski.fit`` / ``jagielski.spend``.

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
from dpfair_jax.audit.fit_spend import FitSpendGame, plant

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "ALGORITHMS", "jagielski_game", "jagielski_mechanism",
           "jagielski_example_mechanism"]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "jagielski": ("noise", "noise_half", "example_sensitivity"),
    "jagielski_example": ("noise", "noise_half"),
}
SUITE_TRIALS = {"quick": {"jagielski": 40000, "jagielski_example": 20000},
                "full": {"jagielski": 200000, "jagielski_example": 200000}}
ALGORITHMS = {"jagielski": "jagielski", "jagielski_example": "jagielski"}

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


BUILDERS = {"jagielski": jagielski_mechanism, "jagielski_example": jagielski_example_mechanism}
