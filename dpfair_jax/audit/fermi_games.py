"""Audit games of DP-FERMI (paper 004) as :class:`~dpfair_jax.audit.fit_spend.FitSpendGame` games on
``fermi.fit`` / ``fermi.spend``, with parametric bounds (:mod:`dpfair_jax.audit.parametric`).

* ``fermi``: the default configuration: ``privacy_unit="all_features"``, Poisson sampling with
  ``q < 1``, group frequencies from the noisy charged histogram, the logistic model's ghost-norm
  path, clip norms other than 1. Add/remove of a canary (world 1 has one more row). One step from
  a fixed ``theta_0`` under which the canary is predicted positive with certainty and every other
  row negative; the canary alone has a third feature ``canary_scale`` (its clipped theta-gradient
  points along ``e_2``, no other row's has an ``e_2`` component) and alone moves ``W[0, 0, 1]``.
  Statistic: ``-theta_1[2] m / (lr C_theta)`` (or ``W_1[0, 0, 1] m / (lr_w lam C_w)`` for the
  W-noise bug): ``N(0, z^2)`` without the canary and ``(1 - q) N(0, z^2) + q N(1, z^2)`` with it
  (the nominal clip ``C`` sets the unit, so a noise that forgets a factor ``C`` shows as a wrong
  ``mu``). Bound: :func:`~dpfair_jax.audit.parametric.subsampled_gaussian_bound`. Claim:
  ``fermi.spend`` of the run (both updates and the histogram composed), the larger over the two
  worlds' sizes.
* ``fermi_sensitive``: ``privacy_unit="sensitive_attribute"`` (substitution of the canary's
  ``s``), Poisson sampling at ``q = 0.05``, noisy frequencies. The canary's task gradient (public,
  unnoised in this unit) is huge along ``e_2``: ``theta_1[2]`` shows whether it was sampled. Its
  s-dependent W-gradient moves from row 0 to row 1 of ``W[:, :, 1]``. Statistic: the W difference
  in the sampled trials, flagged by the visible indicator. Bound:
  :func:`~dpfair_jax.audit.parametric.visible_membership_bound`. Claim: ``fermi.spend``
  (membership-visible, exact).

Planted bugs (each must give a lower bound above its claim):

* ``"noise"`` / ``"noise_half"``: both noise multipliers x 1/10 / x 1/2 of the accounted ones
  (:func:`~dpfair_jax.audit.fit_spend.plant`);
* ``"clipping"`` (``fermi``): clip norms x 1e4 with the noise of the nominal clip (``plant``);
* ``"paper_w_noise"`` (``fermi``): the run's config is ``variant="paper"`` (the claim's stays
  ``"corrected"``) at ``lam = 4`` (Alg. 1 line 6's W-noise not scaled by ``lam``; notes II.5),
  W statistic;
* ``"subsampled_accounting"`` (``fermi_sensitive``): the run as it is, claimed with the earlier
  accounting of this unit as a Poisson-subsampled Gaussian (amplification that the visible
  membership voids).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi
from dpfair_jax.audit import parametric as P
from dpfair_jax.audit.fit_spend import FitSpendGame, plant
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import accounting as A

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "ALGORITHMS", "fermi_default_game", "fermi_default_mechanism",
           "fermi_sensitive_game", "fermi_sensitive_mechanism"]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "fermi": ("noise", "noise_half", "clipping", "paper_w_noise"),
    "fermi_sensitive": ("noise", "noise_half", "subsampled_accounting"),
}
SUITE_TRIALS = {"quick": {"fermi": 4000, "fermi_sensitive": 50000},
                "full": {"fermi": 50000, "fermi_sensitive": 400000}}
ALGORITHMS = {"fermi": "fermi", "fermi_sensitive": "fermi"}


def _canary_data(n: int, canary_scale: float, seed: int):
    """Rows: feature 0 = -5 (predicted negative by theta_0), feature 1 noise, feature 2 = 0; the
    canary (last row): feature 0 = +5 (predicted positive), feature 2 = ``canary_scale``, y = 0, s = 0."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 3), np.float32)
    x[:, 0] = -5.0
    x[:, 1] = rng.normal(size=n)
    x[-1] = (5.0, 0.0, canary_scale)
    y = (np.arange(n) % 2).astype(np.int32)
    y[-1] = 0
    s = (np.arange(n) // 2 % 2).astype(np.int32)
    s[-1] = 0
    return x, y, s


def _theta0():
    return {"w": jnp.asarray([[10.0], [0.0], [0.0]], jnp.float32)}


_NOISE = (("noise_theta", "clip_theta"), ("noise_w", "clip_w"))


def fermi_default_game(
    *, bug: str | None = None, n: int = 32, batch_size: int = 16, noise_theta: float = 2.0,
    noise_w: float = 20.0, clip_theta: float = 3.0, clip_w: float = 2.0, lam: float = 1.0,
    delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> FitSpendGame:
    """The ``fermi`` game (module docstring) as a :class:`~dpfair_jax.audit.fit_spend.FitSpendGame`.

    Privacy: the claim is ``fermi.spend`` (Poisson-subsampled Gaussian, both updates composed, plus
    the noisy histogram; add/remove-one, all features), the larger over ``n - 1`` and ``n`` rows.
    """
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS["fermi"])
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    w_stat = bug == "paper_w_noise"
    if w_stat:  # the W release carries the canary: little W noise, much theta noise
        noise_theta, noise_w, lam = 20.0, 2.0, 4.0
    x, y, s = _canary_data(n, canary_scale, seed)
    lr_t, lr_w = 0.01, 0.01
    cfg = fermi.FermiConfig(model=M.logistic(fit_intercept=False, input_dim=3), num_groups=2, steps=1,
                            batch_size=batch_size, projection="none", delta=delta)
    hp = fermi.FermiHparams(lam=lam, lr_theta=lr_t, lr_w=lr_w, clip_theta=clip_theta, clip_w=clip_w,
                            noise_theta=noise_theta, noise_w=noise_w, radius=1e6)
    d0 = Dataset(jnp.asarray(x[:-1]), jnp.asarray(y[:-1]), jnp.asarray(s[:-1]), 2)
    d1 = Dataset(jnp.asarray(x), jnp.asarray(y), jnp.asarray(s), 2)

    def stat(res) -> jax.Array:
        if w_stat:
            return res.diagnostics["W"][0, 0, 1] * batch_size / (lr_w * lam * clip_w)
        return -res.params["w"][2, 0] * batch_size / (lr_t * clip_theta)

    return FitSpendGame(
        algorithm=fermi, config=cfg, hparams=hp, neighbours=(d0, d1), statistic=stat, relation="add_remove",
        fit_kwargs={"params0": _theta0()},
        run_hparams=None if w_stat else plant(hp, bug, _NOISE),
        run_config=dataclasses.replace(cfg, variant="paper") if w_stat else None,
        info={"sample_rate": batch_size / n, "bound": "subsampled_gaussian"},
    )


def fermi_default_mechanism(*, bug: str | None = None, **kw: Any
                            ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`fermi_default_game` (the builder contract).

    Privacy: see :func:`fermi_default_game`.
    """
    return fermi_default_game(bug=bug, **kw).build()


def fermi_sensitive_game(
    *, bug: str | None = None, n: int = 80, batch_size: int = 4, noise_theta: float = 10.0,
    noise_w: float = 1.0, clip_theta: float = 3.0, clip_w: float = 2.0, lam: float = 1.0,
    delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> FitSpendGame:
    """The ``fermi_sensitive`` game (module docstring): substitution of the canary's ``s``.

    The statistic is ``(W_1[0, 1, 1] - W_1[0, 0, 1]) m / (lr_w lam C_w)`` when ``theta_1[2]`` shows
    the canary was sampled, and ``-1e9`` otherwise (read back as the indicator).

    Privacy: the claim is ``fermi.spend`` (membership-visible Gaussian releases, substitution of
    one ``s_i``, replace-one); ``"subsampled_accounting"`` claims the earlier record instead.
    """
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS["fermi_sensitive"])
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    x, y, s = _canary_data(n, canary_scale, seed)
    lr_t, lr_w = 0.01, 0.01
    cfg = fermi.FermiConfig(model=M.logistic(fit_intercept=False, input_dim=3), num_groups=2, steps=1,
                            batch_size=batch_size, privacy_unit="sensitive_attribute", projection="none",
                            delta=delta)
    hp = fermi.FermiHparams(lam=lam, lr_theta=lr_t, lr_w=lr_w, clip_theta=clip_theta, clip_w=clip_w,
                            noise_theta=noise_theta, noise_w=noise_w, radius=1e6)
    claimed = None
    if bug == "subsampled_accounting":  # the earlier record: Poisson-subsampled, amplified
        event = A.dpsgd_event(noise_theta, batch_size / n, 1, relative_noise=(1.0, noise_w / noise_theta))
        claimed = A.epsilon_of_event(event, delta)
    xj, yj, s0 = jnp.asarray(x), jnp.asarray(y), jnp.asarray(s)
    onehot = jnp.zeros((n,), jnp.int32).at[-1].set(1)
    half_signal = 0.5 * lr_t * canary_scale / batch_size  # theta_1[2] moves by -lr B / m when sampled

    def neighbours(flag: jax.Array) -> Dataset:
        return Dataset(xj, yj, s0 + flag.astype(jnp.int32) * onehot, 2)

    def stat(res) -> jax.Array:
        sampled = -res.params["w"][2, 0] > half_signal
        diff = (res.diagnostics["W"][0, 1, 1] - res.diagnostics["W"][0, 0, 1]) * batch_size / (lr_w * lam * clip_w)
        return jnp.where(sampled, diff, -1e9)

    run = plant(hp, bug if bug in ("noise", "noise_half") else None, _NOISE)
    return FitSpendGame(
        algorithm=fermi, config=cfg, hparams=hp, neighbours=neighbours, statistic=stat, sizes=(n, n),
        relation="replace_one", fit_kwargs={"params0": _theta0()}, run_hparams=run, claimed_epsilon=claimed,
        info={"bound": "visible_membership"},
    )


def fermi_sensitive_mechanism(*, bug: str | None = None, **kw: Any
                              ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`fermi_sensitive_game` (the builder contract).

    Privacy: see :func:`fermi_sensitive_game`.
    """
    return fermi_sensitive_game(bug=bug, **kw).build()


BUILDERS = {"fermi": fermi_default_mechanism, "fermi_sensitive": fermi_sensitive_mechanism}


def parametric_bound(info: dict[str, Any], with_canary: np.ndarray, without: np.ndarray,
                     confidence: float):
    """The parametric bound named by ``info["bound"]`` for one variant's statistics."""
    if info["bound"] == "subsampled_gaussian":
        return P.subsampled_gaussian_bound(with_canary, without, info["sample_rate"], info["delta"], confidence)
    vis1, vis0 = with_canary > -1e8, without > -1e8
    return P.visible_membership_bound(np.where(vis1, with_canary, 0.0), np.where(vis0, without, 0.0),
                                      vis1, vis0, info["delta"], confidence)
