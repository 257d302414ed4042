"""Audit games of DP-FERMI (:func:`dpfair_jax.algorithms.fermi.fit`, paper 004) on its public
entry point, with parametric bounds (:mod:`dpfair_jax.audit.parametric`).

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

* ``"noise"`` / ``"noise_half"``: both noise multipliers x 1/10 / x 1/2 of the accounted ones;
* ``"clipping"`` (``fermi``): clip norms x 1e4 with the noise of the nominal clip;
* ``"paper_w_noise"`` (``fermi``): ``variant="paper"`` at ``lam = 4`` (Alg. 1 line 6's W-noise not
  scaled by ``lam``; notes II.5), W statistic;
* ``"subsampled_accounting"`` (``fermi_sensitive``): the run as it is, claimed with the earlier
  accounting of this unit as a Poisson-subsampled Gaussian (amplification that the visible
  membership voids).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi
from dpfair_jax.audit import parametric as P
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import accounting as A

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "fermi_default_mechanism", "fermi_sensitive_mechanism"]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "fermi": ("noise", "noise_half", "clipping", "paper_w_noise"),
    "fermi_sensitive": ("noise", "noise_half", "subsampled_accounting"),
}
SUITE_TRIALS = {"quick": {"fermi": 4000, "fermi_sensitive": 50000},
                "full": {"fermi": 50000, "fermi_sensitive": 400000}}
_UNCLIPPED = 1e4


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


def fermi_default_mechanism(
    *, bug: str | None = None, n: int = 32, batch_size: int = 16, noise_theta: float = 2.0,
    noise_w: float = 20.0, clip_theta: float = 3.0, clip_w: float = 2.0, lam: float = 1.0,
    delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """The ``fermi`` game (module docstring): DP-FERMI's default configuration, add/remove.

    Privacy: the Poisson-subsampled Gaussian (both updates composed) plus the noisy histogram,
    add/remove-one, all features.
    """
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS["fermi"])
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    w_stat = bug == "paper_w_noise"
    if w_stat:  # the W release carries the canary: little W noise, much theta noise
        noise_theta, noise_w, lam = 20.0, 2.0, 4.0
    model = M.logistic(fit_intercept=False, input_dim=3)
    x, y, s = _canary_data(n, canary_scale, seed)
    lr_t, lr_w = 0.01, 0.01

    def cfg(rows: int):
        return fermi.FermiConfig(model=model, num_groups=2, steps=1, batch_size=batch_size,
                                 variant="paper" if w_stat else "corrected", projection="none", delta=delta)

    cfg0, cfg1 = cfg(n - 1), cfg(n)
    claimed_hp = fermi.FermiHparams(lam=lam, noise_theta=noise_theta, noise_w=noise_w)
    spend = max((fermi.spend(c, r, claimed_hp) for c, r in ((cfg0, n - 1), (cfg1, n))), key=lambda sp: sp.epsilon)
    scale = {"noise": 0.1, "noise_half": 0.5}.get(bug, 1.0)
    c_t, c_w = clip_theta, clip_w
    if bug == "clipping":
        c_t, c_w, scale = c_t * _UNCLIPPED, c_w * _UNCLIPPED, 1.0 / _UNCLIPPED
    hp = fermi.FermiHparams(lam=lam, lr_theta=lr_t, lr_w=lr_w, clip_theta=c_t, clip_w=c_w,
                            noise_theta=noise_theta * scale, noise_w=noise_w * scale, radius=1e6)
    d0 = Dataset(jnp.asarray(x[:-1]), jnp.asarray(y[:-1]), jnp.asarray(s[:-1]), 2)
    d1 = Dataset(jnp.asarray(x), jnp.asarray(y), jnp.asarray(s), 2)
    theta0 = _theta0()

    def stat(res) -> jax.Array:
        if w_stat:
            return res.W[0, 0, 1] * batch_size / (lr_w * lam * clip_w)
        return -res.params["w"][2, 0] * batch_size / (lr_t * clip_theta)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        a = stat(fermi.fit(key, d0, hp, cfg0, params0=theta0))
        b = stat(fermi.fit(key, d1, hp, cfg1, params0=theta0))
        return jnp.where(flag == 1, b, a)

    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(spend.delta),
            "relation": spend.relation, "unit": spend.unit, "sample_rate": batch_size / n,
            "bound": "subsampled_gaussian"}
    return mechanism_fn, info


def fermi_sensitive_mechanism(
    *, bug: str | None = None, n: int = 80, batch_size: int = 4, noise_theta: float = 10.0,
    noise_w: float = 1.0, clip_theta: float = 3.0, clip_w: float = 2.0, lam: float = 1.0,
    delta: float = 1e-5, canary_scale: float = 1000.0, seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """The ``fermi_sensitive`` game (module docstring): substitution of the canary's ``s``.

    The statistic is ``(W_1[0, 1, 1] - W_1[0, 0, 1]) m / (lr_w lam C_w)`` when ``theta_1[2]`` shows
    the canary was sampled, and ``-1e9`` otherwise (read back as the indicator).

    Privacy: membership-visible Gaussian releases, substitution of one ``s_i`` (replace-one).
    """
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS["fermi_sensitive"])
    n = V.check_int("n", n, minimum=8)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    model = M.logistic(fit_intercept=False, input_dim=3)
    x, y, s = _canary_data(n, canary_scale, seed)
    lr_t, lr_w = 0.01, 0.01
    cfg = fermi.FermiConfig(model=model, num_groups=2, steps=1, batch_size=batch_size,
                            privacy_unit="sensitive_attribute", projection="none", delta=delta)
    spend = fermi.spend(cfg, n, fermi.FermiHparams(lam=lam, noise_theta=noise_theta, noise_w=noise_w))
    claimed = float(spend.epsilon)
    if bug == "subsampled_accounting":  # the earlier record: Poisson-subsampled, amplified
        event = A.dpsgd_event(noise_theta, batch_size / n, 1, relative_noise=(1.0, noise_w / noise_theta))
        claimed = A.epsilon_of_event(event, delta)
    scale = {"noise": 0.1, "noise_half": 0.5}.get(bug, 1.0)
    hp = fermi.FermiHparams(lam=lam, lr_theta=lr_t, lr_w=lr_w, clip_theta=clip_theta, clip_w=clip_w,
                            noise_theta=noise_theta * scale, noise_w=noise_w * scale, radius=1e6)
    xj, yj, s0 = jnp.asarray(x), jnp.asarray(y), jnp.asarray(s)
    onehot = jnp.zeros((n,), jnp.int32).at[-1].set(1)
    theta0 = _theta0()
    half_signal = 0.5 * lr_t * canary_scale / batch_size  # theta_1[2] moves by -lr B / m when sampled

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        data = Dataset(xj, yj, s0 + flag.astype(jnp.int32) * onehot, 2)
        res = fermi.fit(key, data, hp, cfg, params0=theta0)
        sampled = -res.params["w"][2, 0] > half_signal
        diff = (res.W[0, 1, 1] - res.W[0, 0, 1]) * batch_size / (lr_w * lam * clip_w)
        return jnp.where(sampled, diff, -1e9)

    info = {"claimed_epsilon": claimed, "delta": float(spend.delta), "relation": spend.relation,
            "unit": spend.unit, "bound": "visible_membership"}
    return mechanism_fn, info


BUILDERS = {"fermi": fermi_default_mechanism, "fermi_sensitive": fermi_sensitive_mechanism}


def parametric_bound(info: dict[str, Any], with_canary: np.ndarray, without: np.ndarray,
                     confidence: float):
    """The parametric bound named by ``info["bound"]`` for one variant's statistics."""
    if info["bound"] == "subsampled_gaussian":
        return P.subsampled_gaussian_bound(with_canary, without, info["sample_rate"], info["delta"], confidence)
    vis1, vis0 = with_canary > -1e8, without > -1e8
    return P.visible_membership_bound(np.where(vis1, with_canary, 0.0), np.where(vis0, without, 0.0),
                                      vis1, vis0, info["delta"], confidence)
