"""Audit game of the marginal synthesizer (:func:`dpfair_jax.algorithms.synthesis.fit`, paper 003's
MST-like synthesizer) through its public ``fit``/``spend``.

* ``synthesis``: the default :class:`~dpfair_jax.algorithms.synthesis.SynthesisConfig` (``mode =
  "tree"``, noisy stratum counts with ``count_fraction = 0.1`` of ``rho``) with two strata, three
  columns of domains ``(2, 3, 2)``, ``rho = 0.5``. Add/remove: ``D0`` has stratum 0's 200 rows,
  all equal to the canary's codes ``(1, 2, 1)``, and 40 random rows in stratum 1; ``D1`` adds the
  canary to stratum 0. The canary adds 1 to each of the ``K = d (d + 1) / 2 = 6`` cells of
  stratum 0's Gram matrix that its codes index (its one-way cells and the upper triangle of its
  pair cells) and 1 to stratum 0's count; every other cell and stratum 1's count are the same in
  both worlds. Stratum 0's counts are far above the noise (200 against standard deviations of
  2.6 and 3.2), so the clamping at 0 never acts on these cells and their noisy values are exactly
  Gaussian. Statistic: the likelihood-ratio combination ``(mu_1 Z_1 + mu_2 Z_2) / mu`` of
  ``Z_1 = sum of the K cells / (sigma sqrt K)`` (``sigma = sqrt(K) / sqrt(2 (1 - f) rho)``, the
  marginals' noise) and ``Z_2 = count_0 sqrt(2 f rho)`` (the count's), with ``mu_1 = sqrt(2 (1 -
  f) rho)``, ``mu_2 = sqrt(2 f rho)``, ``mu = sqrt(2 rho)`` at the nominal ``rho``: ``N(c, 1)``
  without the canary and ``N(c + mu, 1)`` with it (``c`` a known constant). Bound: the Gaussian
  mechanism's exact curve at a lower confidence limit of ``mu``
  (:func:`~dpfair_jax.audit.pfld_games.binomial_gaussian_bound`, one step at rate 1; the claim
  converts ``rho`` with the CKS bound, which is above that curve).
  Claim: :func:`~dpfair_jax.algorithms.synthesis.spend` (the zCDP ledger: marginals in parallel
  over the strata, plus the counts).

``synthesis.fit`` runs on the host (the spanning trees are computed with NumPy), so the game calls
it through :class:`HostFit`: one ``jax.pure_callback`` per world and trial (``vmap_method =
"sequential"``) that runs the public ``fit`` on the world's data set and hands back the fitted
tables and the noisy counts. About 7 ms per fit on one core: the quick size is 500 trials per world.

Planted bugs (each must give a bound above its claim; ``fit`` runs with a larger ``rho`` while the
claim is the nominal ``spend``): ``"noise"``: every noise std x 1/10 (``rho`` x 100);
``"noise_half"``: x 1/2 (``rho`` x 4).

Sizes: ``delta = 1e-5`` (claim 4.73; the statistic's exact curve at the nominal noise 4.38); quick
500 trials per world (bug-free bound ~3.8, ``"noise_half"`` ~8.3).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import synthesis
from dpfair_jax.audit import parametric as P
from dpfair_jax.audit.fit_spend import FitSpendGame
from dpfair_jax.audit.games import check_family_bug
from dpfair_jax.audit.pfld_games import binomial_gaussian_bound

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "ALGORITHMS", "HostFit", "HostResult",
           "synthesis_game", "parametric_bound"]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {"synthesis": ("noise", "noise_half")}
SUITE_TRIALS = {"quick": {"synthesis": 500}, "full": {"synthesis": 10000}}
ALGORITHMS = {"synthesis": "synthesis"}
_RHO_SCALE = {"noise": 100.0, "noise_half": 4.0}  # noise std x 1/10, x 1/2


class HostResult(NamedTuple):
    """What :class:`HostFit` hands back from ``synthesis.fit``: the fitted model's ``tables``
    ``[k, d, d, V, V]`` and the noisy stratum ``counts [k]`` (float32)."""

    tables: jax.Array
    counts: jax.Array


@dataclasses.dataclass(frozen=True)
class HostFit:
    """``synthesis`` as a traceable algorithm for :class:`~dpfair_jax.audit.fit_spend.FitSpendGame`:
    ``fit(key, flag, hparams, config)`` runs ``synthesis.fit(key, worlds[flag], hparams, config)``
    on the host (``jax.pure_callback``, sequential under ``vmap``) and returns a
    :class:`HostResult`; ``spend`` is ``synthesis.spend``. ``worlds``: ``(D0, D1)`` as
    ``synthesis.fit`` takes them (``(codes, s)``)."""

    worlds: Sequence[Any]
    table_shape: tuple[int, ...]

    def fit(self, key: jax.Array, flag: jax.Array, hparams: synthesis.SynthesisHparams,
            config: synthesis.SynthesisConfig) -> HostResult:
        """The public ``synthesis.fit`` of world ``flag`` (traced int32), from the host.

        Privacy: ``synthesis.fit``'s (the same call; the callback only moves its outputs)."""
        worlds = self.worlds

        def host(key_data: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            res = synthesis.fit(jax.random.wrap_key_data(key_data), worlds[int(f)], hparams, config)
            return np.asarray(res.params.model.tables, np.float32), np.asarray(res.params.counts, np.float32)

        shapes = (jax.ShapeDtypeStruct(self.table_shape, jnp.float32),
                  jax.ShapeDtypeStruct((config.num_groups,), jnp.float32))
        tables, counts = jax.pure_callback(host, shapes, jax.random.key_data(key), flag,
                                           vmap_method="sequential")
        return HostResult(tables, counts)

    @staticmethod
    def spend(config: synthesis.SynthesisConfig, sizes: Any, hparams: synthesis.SynthesisHparams):
        """:func:`dpfair_jax.algorithms.synthesis.spend`.

        Privacy: the run's zCDP ledger at ``config.delta``, add/remove."""
        return synthesis.spend(config, sizes, hparams)


def _worlds(domains: tuple[int, ...], canary: tuple[int, ...], n0: int, n1: int, seed: int):
    """``(D0, D1)`` as ``(codes, s)``: ``n0 - 1`` copies of the canary's codes in stratum 0 and
    ``n1`` random rows in stratum 1; ``D1`` adds the canary (stratum 0) as its last row."""
    rng = np.random.default_rng(seed)
    codes = np.empty((n0 + n1, len(domains)), np.int32)
    codes[:n0] = canary
    codes[n0:] = np.stack([rng.integers(0, m, n1) for m in domains], axis=1)
    s = np.r_[np.zeros(n0, np.int32), np.ones(n1, np.int32)]
    order = np.r_[np.arange(1, n0 + n1), 0]  # the canary (a stratum-0 row) last
    codes, s = codes[order], s[order]
    return (codes[:-1], s[:-1]), (codes, s)


def synthesis_game(
    *, bug: str | None = None, rho: float = 0.5, domains: tuple[int, ...] = (2, 3, 2),
    canary: tuple[int, ...] = (1, 2, 1), n0: int = 201, n1: int = 40, delta: float = 1e-5, seed: int = 0,
) -> FitSpendGame:
    """The ``synthesis`` game (module docstring): the marginal synthesizer's default configuration
    with two strata, the canary added to stratum 0 (whose ``n0 - 1`` other rows share its codes).

    Privacy: the claim is :func:`dpfair_jax.algorithms.synthesis.spend` of the nominal ``rho``
    (add/remove).
    """
    check_family_bug(FAMILY_BUGS, "synthesis", bug)
    V.check_rho(rho)
    n0 = V.check_int("n0", n0, minimum=100)
    n1 = V.check_int("n1", n1, minimum=1)
    if len(canary) != len(domains) or any(not 0 <= c < m for c, m in zip(canary, domains)):
        raise ValueError(f"canary must hold one code per column within domains {domains}, got {canary!r}.")
    cfg = synthesis.SynthesisConfig(domains=tuple(domains), num_groups=2, delta=delta)
    hp = synthesis.SynthesisHparams(rho=rho)
    run_hp = hp if bug is None else synthesis.SynthesisHparams(rho=rho * _RHO_SCALE[bug])
    d, V_ = len(domains), max(domains)
    K = d * (d + 1) // 2
    f = cfg.fraction
    mu1, mu2 = math.sqrt(2.0 * (1.0 - f) * rho), math.sqrt(2.0 * f * rho)
    sigma = math.sqrt(K) / mu1
    a, b = np.triu_indices(d)  # the canary's cells: columns a <= b at its codes
    ca, cb = np.asarray(canary)[a], np.asarray(canary)[b]

    def statistic(res: HostResult) -> jax.Array:
        z1 = jnp.sum(res.tables[0, a, b, ca, cb]) / (sigma * math.sqrt(K))
        z2 = res.counts[0] * mu2
        return (mu1 * z1 + mu2 * z2) / math.sqrt(mu1**2 + mu2**2)

    d0, d1 = _worlds(tuple(domains), tuple(canary), n0, n1, seed)
    algorithm = HostFit((d0, d1), (2, d, d, V_, V_))
    return FitSpendGame(
        algorithm=algorithm, config=cfg, hparams=hp, neighbours=lambda flag: flag,
        statistic=statistic, sizes=(len(d0[0]), len(d1[0])), relation="add_remove", run_hparams=run_hp,
        info={"bound": "subsampled_gaussian", "sample_rate": 1.0},
    )


def parametric_bound(info: dict[str, Any], with_canary: np.ndarray, without: np.ndarray,
                     confidence: float) -> P.ParametricBound:
    """The Gaussian-shift bound (:func:`~dpfair_jax.audit.pfld_games.binomial_gaussian_bound` with
    one step at rate 1: the estimates of :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`,
    the curve on a grid)."""
    return binomial_gaussian_bound(with_canary, without, info["sample_rate"], 1, info["delta"], confidence)


BUILDERS: dict[str, Callable[..., Any]] = {
    "synthesis": lambda *, bug=None, **kw: synthesis_game(bug=bug, **kw).build(),
}
