"""Audit games of the two PF-LDs (paper 004's baseline) through their public ``fit``/``spend``.

Both games are :class:`~dpfair_jax.audit.fit_spend.FitSpendGame` s on the module's default
configuration (logistic model, ghost-norm path, Poisson sampling at ``q = 16/32``, noisy
charged group frequencies or violation releases), add/remove of one canary row: ``D0`` has the
``n - 1 = 31`` ordinary rows, ``D1`` adds the canary. The claim is the module's ``spend`` of the
nominal hyperparameters, the larger epsilon over the two worlds' sizes.

Canary design (both): every ordinary row has feature 0 at ``-5`` (predicted negative with
certainty by the fixed ``theta_0 = (10, 0, 0)``), feature 1 noise and feature 2 at 0; the canary
is ``x = (5, 0, canary_scale = 1000)``, ``y = 0``, ``s = 0``, predicted positive with certainty
(logit 50). Its task-loss gradient ``(sigma(z) - y) x`` has norm ~1000, so after clipping it is
``C e_2`` (up to ``1 - 1.3e-5``), and its fairness terms vanish (``sigma'(50) ~ 0``). No other
row's theta-gradient has an ``e_2`` component, so ``theta_T[2]`` moves only by the canary's
clipped gradient and the noise; the canary stays saturated over the run (its logit moves by
``~2 (1 + z N(0, 1))`` per step).

* ``pfld``: :func:`dpfair_jax.algorithms.pfld.fit` (stochastic PF-LD, multipliers moved every
  step; :func:`~dpfair_jax.algorithms.pfld.config` defaults: box projection, noisy group
  frequencies), one step. Statistic ``-theta_1[2] m / (lr_theta C_theta)``: ``N(0, z^2)``
  without the canary, ``(1 - q) N(0, z^2) + q N(1, z^2)`` with it. Bound: that law's exact curve
  (:func:`binomial_gaussian_bound` with one step: the estimates of
  :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`, the curve on a grid). Claim:
  :func:`~dpfair_jax.algorithms.pfld.spend` (both noisy updates and the histogram composed).
* ``pfld_epoch``: :func:`dpfair_jax.algorithms.pfld_epoch.fit` (Tran et al.'s per-epoch dual),
  one epoch: ``S = ceil(n / m) = 2`` Poisson DP-SGD steps, then the full-data violation
  release. The multipliers start at 0, so the epoch's primal steps see no penalty; the final
  theta does not depend on the release. Statistic ``-theta_S[2] m / (lr_theta C_theta)``:
  ``N(0, S z^2)`` without the canary and ``sum_k Bin(S, q)(k) N(k, S z^2)`` with it (the canary
  sampled in ``k`` of the ``S`` steps). Bound: :func:`binomial_gaussian_bound` (this law's exact
  curve at a lower confidence limit of its shift/scale ratio). Claim:
  :func:`~dpfair_jax.algorithms.pfld_epoch.spend` (the ``S`` subsampled Gaussians composed with
  the release, RDP, the padding's truncation in delta).

Planted bugs (:func:`~dpfair_jax.audit.fit_spend.plant`; each must give a bound above its
claim): ``"noise"`` / ``"noise_half"``: every noise multiplier x 1/10 / x 1/2; ``"clipping"``:
every clip norm x 1e4 with the noise std of the nominal clip (the canary's gradient, norm ~1000,
then enters unclipped: a shift of ~330 units).

Sizes: ``delta = 1e-5``; ``pfld``: ``z_theta = 2``, ``z_w = 20`` (claim 1.56; the statistic's
own curve at the nominal noise 1.35); ``pfld_epoch``: ``z_theta = 1``, ``z_violation = 10`` (the
configuration's ratio; claim 5.47, the statistic's curve 4.85). Quick: 2000 trials per world
(bug-free bounds ~0.6 and ~4.2, ``"noise_half"`` ~2.5 and ~11).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from dpfair_jax import _validation as V
from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi, pfld, pfld_epoch
from dpfair_jax.audit import parametric as P
from dpfair_jax.audit.fit_spend import FitSpendGame, plant
from dpfair_jax.audit.games import check_family_bug
from dpfair_jax.data.dataset import Dataset

__all__ = [
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "ALGORITHMS",
    "pfld_game",
    "pfld_epoch_game",
    "binomial_gaussian_epsilon",
    "binomial_gaussian_bound",
    "parametric_bound",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "pfld": ("noise", "noise_half", "clipping"),
    "pfld_epoch": ("noise", "noise_half", "clipping"),
}
SUITE_TRIALS = {"quick": {"pfld": 2000, "pfld_epoch": 2000},
                "full": {"pfld": 50000, "pfld_epoch": 50000}}
ALGORITHMS = {"pfld": "pfld", "pfld_epoch": "pfld_epoch"}
_MU_CAP = 6.0  # as parametric's: beyond it the curve's epsilon exceeds any claim an audit checks


def _canary_pair(n: int, canary_scale: float, seed: int) -> tuple[Dataset, Dataset]:
    """``(D0, D1)``: ``n - 1`` ordinary rows, and the same plus the canary (module docstring)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 3), np.float32)
    x[:, 0] = -5.0
    x[:, 1] = rng.normal(size=n)
    x[-1] = (5.0, 0.0, canary_scale)
    y = (np.arange(n) % 2).astype(np.int32)
    y[-1] = 0
    s = (np.arange(n) // 2 % 2).astype(np.int32)
    s[-1] = 0
    d1 = Dataset(jnp.asarray(x), jnp.asarray(y), jnp.asarray(s), 2)
    d0 = Dataset(jnp.asarray(x[:-1]), jnp.asarray(y[:-1]), jnp.asarray(s[:-1]), 2)
    return d0, d1


def _theta0() -> dict[str, jax.Array]:
    return {"w": jnp.asarray([[10.0], [0.0], [0.0]], jnp.float32)}


def _theta_statistic(batch_size: int, lr: float, clip: float):
    """``-theta[2] m / (lr C)``: the canary's clipped contributions, in units of one, plus noise."""
    unit = batch_size / (lr * clip)

    def statistic(res: Any) -> jax.Array:
        return -res.params["w"][2, 0] * unit

    return statistic


def pfld_game(
    *, bug: str | None = None, n: int = 32, batch_size: int = 16, noise_theta: float = 2.0,
    noise_w: float = 20.0, clip_theta: float = 3.0, clip_w: float = 2.0, lam: float = 1.0,
    delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> FitSpendGame:
    """The ``pfld`` game (module docstring): stochastic PF-LD's default configuration, one step.

    Privacy: the claim is :func:`dpfair_jax.algorithms.pfld.spend` of the nominal multipliers
    (add/remove, all features).
    """
    check_family_bug(FAMILY_BUGS, "pfld", bug)
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    lr = 0.01
    cfg = pfld.config(model=M.logistic(fit_intercept=False, input_dim=3), num_groups=2, steps=1,
                      batch_size=batch_size, delta=delta)
    hp = fermi.FermiHparams(lam=lam, lr_theta=lr, lr_w=lr, clip_theta=clip_theta, clip_w=clip_w,
                            noise_theta=noise_theta, noise_w=noise_w)
    run_hp = plant(hp, bug, (("noise_theta", "clip_theta"), ("noise_w", "clip_w")))
    return FitSpendGame(
        algorithm=pfld, config=cfg, hparams=hp, neighbours=_canary_pair(n, canary_scale, seed),
        statistic=_theta_statistic(batch_size, lr, clip_theta), relation="add_remove",
        fit_kwargs={"params0": _theta0()}, run_hparams=run_hp,
        info={"bound": "subsampled_gaussian", "sample_rate": batch_size / n},
    )


def pfld_epoch_game(
    *, bug: str | None = None, n: int = 32, batch_size: int = 16, noise_theta: float = 1.0,
    clip_theta: float = 3.0, lam: float = 1.0, delta: float = 1e-5, canary_scale: float = 1000.0,
    seed: int = 0,
) -> FitSpendGame:
    """The ``pfld_epoch`` game (module docstring): PF-LD as Tran et al. specify it, one epoch of
    ``ceil(n / batch_size)`` steps and one violation release.

    Privacy: the claim is :func:`dpfair_jax.algorithms.pfld_epoch.spend` of the nominal
    multipliers (``noise_violation = violation_noise_ratio x noise_theta``; add/remove).
    """
    check_family_bug(FAMILY_BUGS, "pfld_epoch", bug)
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    lr = 0.01
    cfg = pfld_epoch.PFLDEpochConfig(model=M.logistic(fit_intercept=False, input_dim=3), num_groups=2,
                                     epochs=1, batch_size=batch_size, delta=delta)
    hp = pfld_epoch.PFLDEpochHparams(lam=lam, lr_theta=lr, clip_theta=clip_theta, noise_theta=noise_theta,
                                     noise_violation=cfg.violation_noise_ratio * noise_theta)
    run_hp = plant(hp, bug, (("noise_theta", "clip_theta"), ("noise_violation", "clip_violation")))
    steps = cfg.steps_per_epoch(n)
    if cfg.steps_per_epoch(n - 1) != steps:
        raise ValueError(f"n={n} and n - 1 give different steps per epoch; pick n with "
                         f"ceil(n / batch_size) = ceil((n - 1) / batch_size).")
    return FitSpendGame(
        algorithm=pfld_epoch, config=cfg, hparams=hp, neighbours=_canary_pair(n, canary_scale, seed),
        statistic=_theta_statistic(batch_size, lr, clip_theta), relation="add_remove",
        fit_kwargs={"params0": _theta0()}, run_hparams=run_hp,
        info={"bound": "binomial_gaussian", "sample_rate": batch_size / n, "steps": steps},
    )


def binomial_gaussian_epsilon(mu: float, sample_rate: float, steps: int, delta: float) -> float:
    """Epsilon at ``delta`` of the pair ``P = N(0, 1)``, ``Q = sum_k Bin(S, q)(k) N(k mu, 1)``
    (both orders), from its hockey-stick divergence on a fine grid; ``mu`` capped at 6 (the curve
    increases with ``mu``, so the cap keeps a lower bound). The bisection returns the lower end of
    its last interval (an epsilon at which the divergence still exceeds ``delta``).

    Privacy: the statistic's exact epsilon at ``delta`` (a post-processing of the mechanism's
    output, so at most the mechanism's)."""
    mu = min(float(mu), _MU_CAP)
    if mu <= 0.0:
        return 0.0
    S, q = int(steps), float(sample_rate)
    x = np.linspace(-13.0, S * mu + 13.0, 400_001)
    dx = x[1] - x[0]
    k = np.arange(S + 1)
    with np.errstate(divide="ignore"):
        lw = np.log(stats.binom.pmf(k, S, q))
    lp0 = stats.norm.logpdf(x)
    lp1 = special.logsumexp(lw[:, None] + stats.norm.logpdf(x[None, :] - k[:, None] * mu), axis=0)
    p0, p1 = np.exp(lp0), np.exp(lp1)

    def divergence(eps: float) -> float:
        e = math.exp(eps)
        return max(float(np.sum(np.maximum(p1 - e * p0, 0.0)) * dx),
                   float(np.sum(np.maximum(p0 - e * p1, 0.0)) * dx))

    if divergence(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while divergence(hi) > delta:
        lo, hi = hi, 2.0 * hi
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if divergence(mid) > delta else (lo, mid)
    return lo


def binomial_gaussian_bound(with_canary: np.ndarray, without: np.ndarray, sample_rate: float,
                            steps: int, delta: float, confidence: float = 0.95) -> P.ParametricBound:
    """Lower bound for a statistic that is ``N(0, s^2)`` without the canary and
    ``sum_k Bin(S, q)(k) N(k a, s^2)`` with it (the sum of ``S`` Poisson-subsampled steps, ``q``
    public): ``a`` from ``(mean_1 - mean_0) / (S q)`` at a one-sided normal limit, ``s`` from
    world 0's standard deviation at a chi-square upper limit (each at ``1 - (1 - confidence) / 2``),
    and the law's exact epsilon at ``mu_low = a_low / s_high`` (:func:`binomial_gaussian_epsilon`).
    With ``S = 1`` it is :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`'s law.

    Privacy: a lower bound on the mechanism's epsilon at ``confidence``, given the statistic's law.
    """
    x1 = np.asarray(with_canary, np.float64).ravel()
    x0 = np.asarray(without, np.float64).ravel()
    if x1.size < 4 or x0.size < 4 or not (np.all(np.isfinite(x1)) and np.all(np.isfinite(x0))):
        raise ValueError("with_canary and without must hold at least 4 finite statistics each.")
    V.check_sample_rate(sample_rate)
    steps = V.check_int("steps", steps, minimum=1)
    V.check_delta(delta)
    c = 1.0 - (1.0 - float(confidence)) / 2.0
    shift = steps * float(sample_rate)
    diff = x1.mean() - x0.mean()
    se = math.sqrt(x1.var(ddof=1) / x1.size + x0.var(ddof=1) / x0.size)
    s_hat = x0.std(ddof=1)
    s_high = s_hat * math.sqrt((x0.size - 1) / stats.chi2.ppf(1.0 - c, x0.size - 1))
    mu_hat = diff / shift / s_hat
    mu_low = max(0.0, (diff - stats.norm.ppf(c) * se) / shift / s_high)
    eps = binomial_gaussian_epsilon(mu_low, sample_rate, steps, delta)
    return P.ParametricBound(eps, float(mu_hat), float(mu_low), float(sample_rate),
                             "parametric_binomial_gaussian")


def parametric_bound(info: dict[str, Any], with_canary: np.ndarray, without: np.ndarray,
                     confidence: float) -> P.ParametricBound:
    """The bound of ``info["bound"]``'s law for one variant's statistics: the subsampled Gaussian is
    the binomial mixture with one step (the same estimates as
    :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`; the grid curve agrees with its
    PLD to 1e-4 and takes a fraction of its time at large ``mu``)."""
    steps = info["steps"] if info["bound"] == "binomial_gaussian" else 1
    return binomial_gaussian_bound(with_canary, without, info["sample_rate"], steps, info["delta"], confidence)


BUILDERS = {
    "pfld": lambda *, bug=None, **kw: pfld_game(bug=bug, **kw).build(),
    "pfld_epoch": lambda *, bug=None, **kw: pfld_epoch_game(bug=bug, **kw).build(),
}
