"""Audit game of DP-SGDA (:func:`dpfair_jax.algorithms.sgda.fit`, paper 004's Algorithm 2) through
its public ``fit``/``spend``.

* ``sgda``: the default :class:`~dpfair_jax.algorithms.sgda.SGDAConfig` (Poisson sampling at
  ``q = 16/32`` with the default padding, ``"ball"`` projection of radius 5, last iterate,
  ``sensitivity_factor = 1``), the generic ``vmap(grad)`` path, one step. Add/remove: ``D0`` has
  ``n - 1 = 31`` ordinary rows, ``D1`` adds the canary. The private loss is linear,
  ``f(theta, w; x, u) = <theta, x> + <w, u>`` (``theta`` in R^3, ``w`` in R^2, both starting at 0),
  so each record's gradients are its own ``(x, u)`` whatever the iterate. Ordinary rows have
  ``x = (N, N, 0)`` and ``u = (N, 0)``; the canary has ``x = 1000 e_2`` and ``u = 1000 e_1``:
  after clipping it contributes exactly ``C_theta e_2`` to the descent sum and ``C_w e_1`` to the
  ascent sum, directions no other record touches (``w`` stays far inside the ball).
  Statistics of the two releases in units of one clipped contribution,
  ``t = -theta_1[2] m / (lr_theta C_theta)`` and ``u = w_1[1] m / (lr_w C_w)``, are combined with
  the nominal multipliers' likelihood-ratio weights, ``(t / z_theta^2 + u / z_w^2) / (z_theta^-2 +
  z_w^-2)``: ``N(0, z^2)`` without the canary and ``(1 - q) N(0, z^2) + q N(1, z^2)`` with it, ``z
  = (z_theta^-2 + z_w^-2)^-1/2`` the effective multiplier the spend accounts. Bound: that law's
  exact curve at a lower confidence limit of ``1 / z`` (the estimates of
  :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`, the curve on a grid:
  :func:`~dpfair_jax.audit.pfld_games.binomial_gaussian_bound` with one step); it is the accounted
  one-step mechanism's exact curve, so the audit is tight up to the RDP conversion.
  Claim: :func:`~dpfair_jax.algorithms.sgda.spend` of the nominal multipliers (larger over the two
  worlds' sizes, truncation charge in delta).

* ``sgda_shuffle``: the same loss and canary with ``sampling="shuffle"`` (one epoch of two
  batches of 16 out of ``n = 32``), whose spend is replace-one without amplification (the
  membership-visible Gaussian, exact). Replace-one: the canary's ``(x, u)`` flips sign (``-1000``
  in ``D0``, ``+1000`` in ``D1``), so its clipped contribution moves by ``2 C`` along ``e_2`` and
  ``e_1`` in the one batch of the epoch that holds it. The combined statistic sums the noise of
  both steps: ``N(-1, 2 z^2)`` against ``N(1, 2 z^2)`` (``mu = sqrt(2) / z`` of the claim's
  ``2 / z`` per epoch). Bound: the Gaussian curve at rate 1. Claim: ``sgda.spend`` (exact curve).

Planted bugs (:func:`~dpfair_jax.audit.fit_spend.plant`, both updates; each must give a bound
above its claim): ``"noise"`` / ``"noise_half"``: noise multipliers x 1/10 / x 1/2;
``"clip_unscaled"``: std ``z`` instead of ``z C`` (``C_theta = 3``, ``C_w = 2``); ``"clipping"``:
clip norms x 1e4 with the nominal noise std (the canary, norm 1000, enters unclipped).

Sizes: ``delta = 1e-5``, ``z_theta = z_w = 1.5`` (effective 1.06; claim 3.64, the statistic's exact
curve 3.26); quick 2000 trials per world (bug-free bound ~2.5, ``"noise_half"`` ~7.2).
``sgda_shuffle``: ``z_theta = z_w = 3`` (effective 2.12; claim 4.09, the Gaussian curve at ``2 / z``
exactly; the statistic's curve 2.75), quick 2000 trials (bug-free bound ~2.2, ``"noise_half"``
~5.3).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import sgda
from dpfair_jax.audit import parametric as P
from dpfair_jax.audit.fit_spend import FitSpendGame, plant
from dpfair_jax.audit.games import check_family_bug
from dpfair_jax.audit.pfld_games import binomial_gaussian_bound

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "ALGORITHMS", "sgda_game", "sgda_shuffle_game",
           "parametric_bound"]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {"sgda": ("noise", "noise_half", "clip_unscaled", "clipping"),
                                             "sgda_shuffle": ("noise", "noise_half")}
SUITE_TRIALS = {"quick": {"sgda": 2000, "sgda_shuffle": 2000}, "full": {"sgda": 50000, "sgda_shuffle": 50000}}
ALGORITHMS = {"sgda": "sgda", "sgda_shuffle": "sgda"}


def _linear_loss(theta: dict[str, jax.Array], w: jax.Array, ex: dict[str, jax.Array]) -> jax.Array:
    """``<theta, x> + <w, u>``: per-example gradients ``(x, u)`` at every iterate."""
    return jnp.dot(theta["w"], ex["x"]) + jnp.dot(w, ex["u"])


def _canary_pair(n: int, canary_scale: float, seed: int) -> tuple[dict, dict]:
    """``(D0, D1)``: ``n - 1`` ordinary rows, and the same plus the canary (module docstring)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 3), np.float32)
    x[:, :2] = rng.normal(size=(n, 2))
    u = np.zeros((n, 2), np.float32)
    u[:, 0] = rng.normal(size=n)
    x[-1], u[-1] = (0.0, 0.0, canary_scale), (0.0, canary_scale)
    d1 = {"x": jnp.asarray(x), "u": jnp.asarray(u)}
    return {k: a[:-1] for k, a in d1.items()}, d1


def sgda_game(
    *, bug: str | None = None, n: int = 32, batch_size: int = 16, noise_theta: float = 1.5,
    noise_w: float = 1.5, clip_theta: float = 3.0, clip_w: float = 2.0, lr_theta: float = 0.01,
    lr_w: float = 0.01, delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> FitSpendGame:
    """The ``sgda`` game (module docstring): DP-SGDA's default configuration, one step.

    Privacy: the claim is :func:`dpfair_jax.algorithms.sgda.spend` of the nominal multipliers
    (Poisson-subsampled Gaussian with both updates composed, add/remove).
    """
    check_family_bug(FAMILY_BUGS, "sgda", bug)
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    cfg = sgda.SGDAConfig(steps=1, batch_size=batch_size, delta=delta, private_loss=_linear_loss)
    hp = sgda.SGDAHparams(lr_theta=lr_theta, lr_w=lr_w, clip_theta=clip_theta, clip_w=clip_w,
                          noise_theta=noise_theta, noise_w=noise_w)
    run_hp = plant(hp, bug, (("noise_theta", "clip_theta"), ("noise_w", "clip_w")))
    prec_t, prec_w = noise_theta ** -2, noise_w ** -2
    unit_t, unit_w = batch_size / (lr_theta * clip_theta), batch_size / (lr_w * clip_w)

    def statistic(res: Any) -> jax.Array:
        t = -res.params.theta["w"][2] * unit_t
        u = res.params.w[1] * unit_w
        return (prec_t * t + prec_w * u) / (prec_t + prec_w)

    theta0 = {"w": jnp.zeros((3,), jnp.float32)}
    return FitSpendGame(
        algorithm=sgda, config=cfg, hparams=hp, neighbours=_canary_pair(n, canary_scale, seed),
        statistic=statistic, sizes=(n - 1, n), relation="add_remove", run_hparams=run_hp,
        fit_kwargs={"theta0": theta0, "w0": jnp.zeros((2,), jnp.float32)},
        info={"bound": "subsampled_gaussian", "sample_rate": batch_size / n},
    )


def sgda_shuffle_game(
    *, bug: str | None = None, n: int = 32, batch_size: int = 16, noise_theta: float = 3.0,
    noise_w: float = 3.0, clip_theta: float = 3.0, clip_w: float = 2.0, lr_theta: float = 0.01,
    lr_w: float = 0.01, delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> FitSpendGame:
    """The ``sgda_shuffle`` game (module docstring): shuffled epochs, replace-one (the canary's
    sign flips), one epoch.

    Privacy: the claim is :func:`dpfair_jax.algorithms.sgda.spend` of the nominal multipliers
    (membership-visible Gaussian releases without amplification, replace-one).
    """
    check_family_bug(FAMILY_BUGS, "sgda_shuffle", bug)
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    cfg = sgda.SGDAConfig(steps=n // batch_size, batch_size=batch_size, sampling="shuffle", delta=delta,
                          private_loss=_linear_loss)
    hp = sgda.SGDAHparams(lr_theta=lr_theta, lr_w=lr_w, clip_theta=clip_theta, clip_w=clip_w,
                          noise_theta=noise_theta, noise_w=noise_w)
    run_hp = plant(hp, bug, (("noise_theta", "clip_theta"), ("noise_w", "clip_w")))
    _, d1 = _canary_pair(n, canary_scale, seed)
    last = (jnp.arange(n) == n - 1)[:, None]

    def neighbours(flag: jax.Array) -> dict[str, jax.Array]:
        sign = 2.0 * flag.astype(jnp.float32) - 1.0  # the canary's (x, u) times -1 in D0, +1 in D1
        return {k: jnp.where(last, sign * a, a) for k, a in d1.items()}

    prec_t, prec_w = noise_theta ** -2, noise_w ** -2
    unit_t, unit_w = batch_size / (lr_theta * clip_theta), batch_size / (lr_w * clip_w)

    def statistic(res: Any) -> jax.Array:
        t = -res.params.theta["w"][2] * unit_t
        u = res.params.w[1] * unit_w
        return (prec_t * t + prec_w * u) / (prec_t + prec_w)

    theta0 = {"w": jnp.zeros((3,), jnp.float32)}
    return FitSpendGame(
        algorithm=sgda, config=cfg, hparams=hp, neighbours=neighbours, statistic=statistic,
        sizes=(n, n), relation="replace_one", run_hparams=run_hp,
        fit_kwargs={"theta0": theta0, "w0": jnp.zeros((2,), jnp.float32)},
        info={"bound": "gaussian", "sample_rate": 1.0},
    )


def parametric_bound(info: dict[str, Any], with_canary: np.ndarray, without: np.ndarray,
                     confidence: float) -> P.ParametricBound:
    """The subsampled-Gaussian bound at the game's public rate (rate 1 for ``sgda_shuffle``: a Gaussian)
    (:func:`~dpfair_jax.audit.pfld_games.binomial_gaussian_bound` with one step: the estimates of
    :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`, the curve on a grid)."""
    return binomial_gaussian_bound(with_canary, without, info["sample_rate"], 1, info["delta"], confidence)


BUILDERS = {"sgda": lambda *, bug=None, **kw: sgda_game(bug=bug, **kw).build(),
            "sgda_shuffle": lambda *, bug=None, **kw: sgda_shuffle_game(bug=bug, **kw).build()}
