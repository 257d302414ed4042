"""Audit games on the default paths of DP-SGD, group-weighted aggregation, output perturbation and
the paper-001 mitigation.

Each builder has the contract of :mod:`dpfair_jax.audit.mechanism_audits`:
``builder(*, bug=None, **kw) -> (mechanism_fn(key, flag) -> scalar, info)``; ``flag = 0`` runs
the public entry point on ``D0``, ``flag = 1`` on its neighbour ``D1``, and higher statistics mean
"``D1``". ``info`` has ``claimed_epsilon``, ``delta`` (what the kit's own spend function reports
for the configuration run) and ``relation``.

Canary design (all families): the canary's contribution lies along a direction no other record
touches, and it is far beyond the clip norm, so its clipped contribution is exactly ``C`` (or
``2 C`` replace-one) along that direction; the statistic is the release's coordinate along it,
in units of the accounted shift. Clip norm ``C = 3`` everywhere, so a noise std that drops its
``* clip_norm`` (noise ``z`` instead of ``z C``) is a factor 3 too small and shows.

* ``dpsgd``: :func:`dpfair_jax.algorithms.dpsgd.train` with a ``models.logistic`` model (default
  intercept) and every default: Poisson sampling at ``q = 16/32`` with the default padding,
  ``per_example="auto"`` (GLM ghost norms), SGD. Add/remove by literally dropping the canary row
  (``D0`` has ``n - 1`` rows, ``D1`` all ``n``; both worlds computed, selected by ``flag``). Every
  row but the canary is 0 in feature 0; the canary is ``x = 100 C e_0``, ``y = 1``, so its
  logistic gradient ``(sigma(w x) - 1)(x, 1)`` has norm ``~50 C`` and points along ``-e_0``
  (up to its intercept entry ``1/(100 C)`` of it), orthogonal to every other gradient. The
  learning rate ``1e-4`` keeps ``|w_0 x_0| < 1`` so the canary stays unsaturated. Statistic:
  ``w_T[0] B / (lr C)`` = number of steps the canary was sampled + ``N(0, T z^2)``. Claim:
  :func:`~dpfair_jax.algorithms.dpsgd.privacy` of ``D1``'s run (``n`` rows, the default RDP
  accountant, truncation charge included).
* ``dpsgd_replace``: the same with ``sampling="fixed_size"`` (replace-one, sensitivity ``2 C``):
  the canary's label flips (``y = 1`` in ``D0``, 0 in ``D1``), so its clipped gradient turns from
  ``-C e_0`` to ``+C e_0``. Statistic ``-w_T[0] B / (lr C)``.
* ``dpsgd_mlp``: ``dpsgd`` with ``models.mlp(hidden=(4,), activation="tanh")`` (the dense ghost
  path). The first layer's kernel row 0 starts at 0, so the canary ``100 C e_0`` has hidden
  pre-activations ~0 and its gradient on that row is ``-(1/2) 100 C v`` (``v`` the output
  kernel), nearly all of its norm; no other row touches kernel row 0. Statistic: that row's
  projection on ``v / ||v||`` (initial ``v``) times ``B / (lr C)``.
* ``group_weighted``: :func:`dpfair_jax.privacy.aggregation.group_weighted_dp_aggregate` (the optax
  form; one ``update`` from a fresh state, which is
  :func:`~dpfair_jax.privacy.aggregation.group_weighted_private_mean` with the state's noise key),
  two groups, public weights ``(0.9, 0.1)`` and public denominators (the group sizes of ``D0``; the
  transformation requires them).
  Group 0 holds 10 rows ``+100 C e_1`` (clipped mean ``+C e_1``), group 1 40 rows with feature 1
  at 0; the canary ``-100 C e_1`` joins group 0 (add/remove via ``mask``). Group 0's multiplier
  is the analytic Gaussian calibration of ``(epsilon, delta) = (1, 1e-2)`` at sensitivity 1
  (group 1's is twice that), so the claim is ``(1, 1e-2)``. Statistic ``-out[1] n_0 / (w_0 C)``.
* ``output_perturbation``: :func:`dpfair_jax.algorithms.output_perturbation.release_minimizer` on its defaults
  (logistic, intercept, ``reg = 1``, 30 Newton steps) with a public ``radius`` (the corrected
  default: a data-derived radius is not private). Replace-one: the canary ``radius e_0`` flips its
  label; statistic: the release's projection on ``theta*(D1) - theta*(D0)`` over the noise std.
  The ``"data_radius"`` variant uses its own pair (a radius leak needs a norm change): ``D0``'s
  canary is ``10 radius e_0``, ``D1``'s is ``0.1 radius e_0`` (same label), both runs take the
  radius from the data (the former ``radius=None`` default: the largest row norm), and the
  statistic is ``-||theta~ - theta*(D1)||^2`` (``D1``'s noise is ~7x smaller).
* ``mitigation``: :func:`dpfair_jax.algorithms.mitigation.train` at ``gamma1 = gamma2 = 1``
  (the paper's choice), logistic model, Poisson sampling at ``q = 1/2``, one step. Its releases
  are the parameters and the noisy group statistics (``private_group_sums``, Gaussian with
  sensitivity ``sqrt 3``). The canary is alone in group 1 (add/remove by dropping its row) with
  ``x = 100 C e_0``, ``y = 1`` and ``w_0`` initialised to ``-30 / (100 C)``: its prediction is
  saturated, so the penalty gradients (``~sigma'``) vanish, its update contribution is ``-C e_0``
  after clipping, and it adds ``(1, 1, ~0)`` to group 1's statistics. Statistic: the likelihood
  ratio direction of both releases, ``w_T[0] B / (lr C) / z^2 + (S_1,count + S_1,norm) /
  (3 z_s^2)`` with the multipliers the variant runs. Claim:
  :func:`~dpfair_jax.algorithms.mitigation.privacy` (both Gaussians composed).

Planted bugs (each must give a lower bound above the claimed epsilon):

* ``"noise"``: noise multiplier / 10, the nominal spend claimed;
* ``"noise_half"``: noise multiplier / 2 (``dpsgd``, ``dpsgd_mlp``, ``group_weighted``);
* ``"clip_unscaled"``: noise std ``z`` instead of ``z C`` at ``C = 3`` (the ``* clip_norm``
  dropped), i.e. multiplier / 3;
* ``"clipping"``: clipping disabled (clip norm x 1e4) with the noise std of the nominal clip;
* ``"realized_denominator"`` (``group_weighted``): the group means divided by the realized
  (masked) group counts instead of public sizes, as ``aggregation.group_weighted_dp_aggregate``
  did by default before public denominators were required; the canary opposes its group's mean,
  so adding it moves the release by ``~2 C / n_0`` (twice the accounted shift);
* ``"data_radius"`` (``output_perturbation``): the feature-norm bound taken from the data;
* ``"stats_noise"`` (``mitigation``): the group statistics' multiplier / 10.

Sizes: the ``delta`` of the DP-SGD, aggregation and mitigation games is ``1e-2`` (a claim is a
curve; this point of it is where ``N`` trials have power: at ``1e-5`` a factor-2 noise bug
cannot be told from the claim with ``1e5`` trials). ``dpsgd_replace`` cannot catch ``noise_half``
at any affordable size: the RDP bound of sampling without replacement under replace-one
(the only accountant dp-accounting offers for it) is ~2x the epsilon its worst-case pair
reaches, so its smallest detected factor is ``clip_unscaled`` (1/3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.audit.games import check_family_bug

__all__ = [
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "dpsgd_mechanism",
    "dpsgd_replace_mechanism",
    "dpsgd_mlp_mechanism",
    "group_weighted_mechanism",
    "output_perturbation_mechanism",
    "mitigation_mechanism",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "dpsgd": ("noise", "noise_half", "clip_unscaled", "clipping"),
    "dpsgd_replace": ("noise", "clip_unscaled", "clipping"),
    "dpsgd_mlp": ("noise", "noise_half", "clipping"),
    "group_weighted": ("noise", "noise_half", "clip_unscaled", "clipping", "realized_denominator"),
    "output_perturbation": ("noise", "data_radius"),
    "mitigation": ("noise", "stats_noise"),
}

# trials per world (every trial is a few rows and one or two steps). Quick: each family's variants
# in about 10-40 s on two CPU cores; every bug is caught and every default passes at these sizes.
SUITE_TRIALS = {
    "quick": {"dpsgd": 50000, "dpsgd_replace": 50000, "dpsgd_mlp": 20000, "group_weighted": 100000,
              "output_perturbation": 20000, "mitigation": 20000},
    "full": {"dpsgd": 200000, "dpsgd_replace": 200000, "dpsgd_mlp": 100000, "group_weighted": 400000,
             "output_perturbation": 100000, "mitigation": 100000},
}

_UNCLIPPED = 1e4  # clip-norm multiplier of the "clipping" bug
Builder = Callable[..., tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]]


_check_bug = functools.partial(check_family_bug, FAMILY_BUGS)


def _run_scales(bug: str | None, clip_norm: float, z: Any) -> tuple[float, Any]:
    """``(clip norm, noise multiplier)`` a variant runs with, for a nominal ``(C, z)``."""
    c = float(clip_norm)
    if bug == "noise":
        return c, z / 10.0
    if bug == "noise_half":
        return c, z / 2.0
    if bug == "clip_unscaled":  # std z instead of z C
        return c, z / c
    if bug == "clipping":
        return c * _UNCLIPPED, z / _UNCLIPPED
    return c, z


# ------------------------------------------------------------------------------------------------
# DP-SGD
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _game_model(model_name: str, d: int, seed: int) -> tuple[Any, Any]:
    """The game's model and initial parameters (cached: one model object per configuration, so
    the per-example path resolution and the jitted init are reused across variants). For the MLP
    the first layer's kernel row 0 (the canary's feature) starts at 0."""
    from dpfair_jax import models as M

    if model_name == "logistic":
        model = M.logistic(input_dim=d)
        return model, model.init(jax.random.key(seed))
    model = M.mlp(hidden=(4,), out=1, activation="tanh", input_dim=d)
    params0 = model.init(jax.random.key(seed))
    first = sorted(params0["layers"])[0]
    kernel = params0["layers"][first]["kernel"].at[0].set(0.0)
    return model, {"layers": {**params0["layers"], first: {**params0["layers"][first], "kernel": kernel}}}


def _dpsgd_game(family: str, *, bug: str | None, model_name: str, sampling: str, noise_multiplier: float,
                clip_norm: float, n: int, batch_size: int, steps: int, delta: float, learning_rate: float,
                canary_scale: float, seed: int):
    from dpfair_jax.algorithms import dpsgd

    _check_bug(family, bug)
    V.check_noise_multiplier(noise_multiplier)
    V.check_clip_norm(clip_norm)
    V.check_delta(delta)
    V.check_positive("learning_rate", learning_rate)
    V.check_positive("canary_scale", canary_scale)
    n = V.check_int("n", n, minimum=4)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    steps = V.check_int("steps", steps, minimum=1)
    if not batch_size < n - 1:
        raise ValueError(f"batch_size must be < n - 1 (sampling rate < 1 on both worlds), got {batch_size}, n={n}.")
    if bug == "clip_unscaled" and float(clip_norm) == 1.0:
        raise ValueError("bug='clip_unscaled' needs clip_norm != 1 (at C = 1 it changes nothing).")
    replace = sampling == "fixed_size"
    d = 3
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 0] = 0.0
    y = rng.integers(0, 2, size=n).astype(np.int32)
    x[-1] = 0.0
    x[-1, 0] = float(canary_scale) * float(clip_norm)  # the canary: last row
    y[-1] = 1
    model, params0 = _game_model(model_name, d, seed)
    if model_name == "logistic":
        def coordinate(p):
            return p["w"][0, 0]
    else:
        first, last = sorted(params0["layers"])
        v = np.asarray(params0["layers"][last]["kernel"][:, 0], np.float64)
        v_hat = jnp.asarray(v / np.linalg.norm(v), jnp.float32)

        def coordinate(p):
            return jnp.dot(p["layers"][first]["kernel"][0], v_hat)

    spend = dpsgd.privacy(float(noise_multiplier), n=n, batch_size=batch_size, delta=float(delta), steps=steps,
                          sampling=sampling)
    c_run, z_run = _run_scales(bug, clip_norm, float(noise_multiplier))
    kw = dict(clip_norm=c_run, noise_multiplier=z_run, learning_rate=float(learning_rate), batch_size=batch_size,
              steps=steps, sampling=sampling, diagnostics=False)  # per_example left at its default
    scale = batch_size / (float(learning_rate) * float(clip_norm))
    c0 = float(coordinate(params0))
    xj = jnp.asarray(x)
    if replace:
        y0 = jnp.asarray(y)
        flip = jnp.zeros((n,), jnp.int32).at[-1].set(-1)  # y_canary 1 -> 0

        def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
            params, _ = dpsgd.train(key, model, params0, (xj, y0 + flag.astype(jnp.int32) * flip), **kw)
            return -(coordinate(params) - c0) * scale
    else:
        d0 = (xj[:-1], jnp.asarray(y[:-1]))
        d1 = (xj, jnp.asarray(y))

        def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
            p0, _ = dpsgd.train(key, model, params0, d0, **kw)
            p1, _ = dpsgd.train(key, model, params0, d1, **kw)
            return (jnp.where(flag == 1, coordinate(p1), coordinate(p0)) - c0) * scale

    mode = dpsgd.resolve_per_example(model, params0)[0]
    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(spend.delta), "relation": spend.relation,
            "noise_multiplier": float(noise_multiplier), "clip_norm": float(clip_norm),
            "sample_rate": batch_size / n, "steps": steps, "per_example_path": mode, "model": model_name}
    return mechanism_fn, info


def dpsgd_mechanism(*, bug: str | None = None, noise_multiplier: float = 1.0, clip_norm: float = 3.0,
                    n: int = 32, batch_size: int = 16, steps: int = 2, delta: float = 1e-2,
                    learning_rate: float = 1e-4, canary_scale: float = 100.0, seed: int = 0):
    """DP-SGD on its defaults (Poisson, GLM ghost norms), logistic model, add/remove of a gradient
    canary (module doc). Privacy: the claim is ``dpsgd.privacy`` (add/remove-one, RDP)."""
    return _dpsgd_game("dpsgd", bug=bug, model_name="logistic", sampling="poisson",
                       noise_multiplier=noise_multiplier, clip_norm=clip_norm, n=n, batch_size=batch_size,
                       steps=steps, delta=delta, learning_rate=learning_rate, canary_scale=canary_scale, seed=seed)


def dpsgd_replace_mechanism(*, bug: str | None = None, noise_multiplier: float = 1.5, clip_norm: float = 3.0,
                            n: int = 32, batch_size: int = 24, steps: int = 1, delta: float = 1e-2,
                            learning_rate: float = 1e-4, canary_scale: float = 100.0, seed: int = 0):
    """DP-SGD with ``sampling="fixed_size"`` (replace-one: the canary's label flips), logistic model,
    default per-example path. Privacy: ``dpsgd.privacy`` (replace-one, sensitivity ``2 C``)."""
    return _dpsgd_game("dpsgd_replace", bug=bug, model_name="logistic", sampling="fixed_size",
                       noise_multiplier=noise_multiplier, clip_norm=clip_norm, n=n, batch_size=batch_size,
                       steps=steps, delta=delta, learning_rate=learning_rate, canary_scale=canary_scale, seed=seed)


def dpsgd_mlp_mechanism(*, bug: str | None = None, noise_multiplier: float = 1.0, clip_norm: float = 3.0,
                        n: int = 32, batch_size: int = 16, steps: int = 2, delta: float = 1e-2,
                        learning_rate: float = 1e-4, canary_scale: float = 100.0, seed: int = 0):
    """``dpsgd`` with a one-hidden-layer tanh MLP (the dense ghost-norm path). Privacy: as ``dpsgd``."""
    return _dpsgd_game("dpsgd_mlp", bug=bug, model_name="mlp", sampling="poisson",
                       noise_multiplier=noise_multiplier, clip_norm=clip_norm, n=n, batch_size=batch_size,
                       steps=steps, delta=delta, learning_rate=learning_rate, canary_scale=canary_scale, seed=seed)


# ------------------------------------------------------------------------------------------------
# Group-weighted aggregation
# ------------------------------------------------------------------------------------------------
def group_weighted_mechanism(*, bug: str | None = None, epsilon: float = 1.0, delta: float = 1e-2,
                             clip_norm: float = 3.0, n0: int = 10, n1: int = 40, dim: int = 3,
                             canary_scale: float = 100.0, seed: int = 0):
    """``group_weighted_dp_aggregate`` with a canary opposing its group's mean (module doc).

    Privacy: a member of group ``k`` is protected by the Gaussian mechanism with multiplier
    ``sigma_k`` (add/remove-one, public weights and denominators); group 0's is calibrated to
    ``(epsilon, delta)`` exactly (analytic Gaussian), which is the claim.
    """
    from dpfair_jax.privacy import aggregation as agg
    from dpfair_jax.privacy.accounting import analytic_gaussian_sigma

    _check_bug("group_weighted", bug)
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_clip_norm(clip_norm)
    V.check_positive("canary_scale", canary_scale)
    n0 = V.check_int("n0", n0, minimum=2)
    n1 = V.check_int("n1", n1, minimum=1)
    dim = V.check_int("dim", dim, minimum=2)
    if bug == "clip_unscaled" and float(clip_norm) == 1.0:
        raise ValueError("bug='clip_unscaled' needs clip_norm != 1.")
    z0 = analytic_gaussian_sigma(float(epsilon), float(delta), 1.0)
    c_run, z_run0 = _run_scales(bug, clip_norm, z0)
    big = float(canary_scale) * float(clip_norm)
    rng = np.random.default_rng(seed)
    n = n0 + n1 + 1
    x = np.zeros((n, dim), np.float32)
    x[:n0, 1] = big  # group 0: clipped to +C e_1
    x[n0:n0 + n1] = rng.normal(size=(n1, dim)) * float(clip_norm)
    x[n0:n0 + n1, 1] = 0.0
    x[-1, 1] = -big  # the canary, group 0: clipped to -C e_1
    s = np.concatenate([np.zeros(n0), np.ones(n1), np.zeros(1)]).astype(np.int32)
    xj, sj = jnp.asarray(x), jnp.asarray(s)
    weights = jnp.asarray([0.9, 0.1], jnp.float32)
    den = jnp.asarray([n0, n1], jnp.float32)  # public sizes
    zj = jnp.asarray([z_run0, 2.0 * z_run0], jnp.float32)
    base_mask = jnp.ones((n,), jnp.float32).at[-1].set(0.0)
    canary_mask = jnp.zeros((n,), jnp.float32).at[-1].set(1.0)
    scale = float(n0) / (0.9 * float(clip_norm))

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        mask = base_mask + flag.astype(jnp.float32) * canary_mask
        d = agg.group_counts(sj, 2, mask) if bug == "realized_denominator" else den
        tx = agg.group_weighted_dp_aggregate(clip_norm=c_run, noise_multipliers=zj, group_weights=weights,
                                             num_groups=2, key=key, denominators=d)
        out, _ = tx.update(xj, tx.init(None), groups=sj, mask=mask)
        return -out[1] * scale

    info = {"claimed_epsilon": float(epsilon), "delta": float(delta), "relation": "add_remove",
            "noise_multiplier": float(z0), "clip_norm": float(clip_norm)}
    return mechanism_fn, info


# ------------------------------------------------------------------------------------------------
# Output perturbation (paper 001)
# ------------------------------------------------------------------------------------------------
def output_perturbation_mechanism(*, bug: str | None = None, epsilon: float = 1.0, delta: float = 1e-5,
                                  n: int = 10, radius: float = 1.0, seed: int = 0):
    """``output_perturbation.release_minimizer`` on its defaults with a public radius, replace-one (module doc).

    Privacy: ``(epsilon, delta)``-DP under replace-one (``fit``'s spend), given a public bound
    ``radius`` on the row norms.
    """
    from dpfair_jax.algorithms import output_perturbation as op

    _check_bug("output_perturbation", bug)
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_positive("radius", radius)
    n = V.check_int("n", n, minimum=3)
    r = float(radius)
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 2), np.float32)
    x[:, 1] = rng.uniform(-1.0, 1.0, size=n) * r
    x[0, 1] = r  # one row at the bound: the data radius of D1 below is r
    y = (np.arange(n) % 2).astype(np.int32)
    fit_kw = dict(epsilon=float(epsilon), delta=float(delta))  # every other argument at its default
    if bug != "data_radius":
        x[-1] = (r, 0.0)
        y0, y1 = y.copy(), y.copy()
        y0[-1], y1[-1] = 1, 0
        xj = jnp.asarray(x)
        ref0 = op.release_minimizer(jax.random.key(seed), (xj, jnp.asarray(y0)), radius=r, **fit_kw)
        ref1 = op.release_minimizer(jax.random.key(seed), (xj, jnp.asarray(y1)), radius=r, **fit_kw)
        t0, t1 = np.asarray(ref0.theta_star, np.float64), np.asarray(ref1.theta_star, np.float64)
        u = jnp.asarray((t1 - t0) / np.linalg.norm(t1 - t0), jnp.float32)
        std, spend = float(ref0.std), ref0.spend
        shrink = 10.0 if bug == "noise" else 1.0
        y0j = jnp.asarray(y0)
        flip = jnp.zeros((n,), jnp.int32).at[-1].set(-1)

        def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
            res = op.release_minimizer(key, (xj, y0j + flag.astype(jnp.int32) * flip), radius=r, **fit_kw)
            theta = res.theta_star + (res.theta - res.theta_star) / shrink
            return jnp.dot(theta - jnp.asarray(t0, jnp.float32), u) / std

        info_extra = {"shift": float(np.linalg.norm(t1 - t0)), "sensitivity": float(ref0.sensitivity)}
    else:
        y[-1] = 1
        x0, x1 = x.copy(), x.copy()
        x0[-1], x1[-1] = (10.0 * r, 0.0), (0.1 * r, 0.0)
        r0, r1 = (float(np.linalg.norm(a.astype(np.float64), axis=1).max()) for a in (x0, x1))  # from the data
        d0, d1 = (jnp.asarray(x0), jnp.asarray(y)), (jnp.asarray(x1), jnp.asarray(y))
        ref1 = op.release_minimizer(jax.random.key(seed), d1, radius=r1, **fit_kw)
        t1 = ref1.theta_star
        std, spend = float(ref1.std), ref1.spend

        def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
            a = op.release_minimizer(key, d0, radius=r0, **fit_kw).theta
            b = op.release_minimizer(key, d1, radius=r1, **fit_kw).theta
            theta = jnp.where(flag == 1, b, a)
            return -jnp.sum(jnp.square(theta - t1)) / std**2

        info_extra = {"radii": (r0, r1)}
    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(spend.delta), "relation": spend.relation,
            "std": std, **info_extra}
    return mechanism_fn, info


# ------------------------------------------------------------------------------------------------
# Mitigation (paper 001, Fig. 12 reconstruction)
# ------------------------------------------------------------------------------------------------
def mitigation_mechanism(*, bug: str | None = None, noise_multiplier: float = 1.0,
                         stats_noise_multiplier: float = 2.0, gamma1: float = 1.0, gamma2: float = 1.0,
                         clip_norm: float = 3.0, n: int = 32, batch_size: int = 16, steps: int = 1,
                         delta: float = 1e-2, learning_rate: float = 1e-4, canary_scale: float = 100.0,
                         seed: int = 0):
    """``mitigation.train`` with a saturated canary alone in its group, add/remove (module doc).

    Privacy: the claim is ``mitigation.privacy`` (statistics and update Gaussians composed in one
    Poisson-sampled event, add/remove-one), for the parameters and the released statistics.
    """
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import mitigation
    from dpfair_jax.data.dataset import Dataset

    _check_bug("mitigation", bug)
    V.check_noise_multiplier(noise_multiplier)
    V.check_noise_multiplier(stats_noise_multiplier, "stats_noise_multiplier")
    V.check_clip_norm(clip_norm)
    V.check_delta(delta)
    V.check_positive("learning_rate", learning_rate)
    V.check_positive("canary_scale", canary_scale)
    n = V.check_int("n", n, minimum=4)
    batch_size = V.check_int("batch_size", batch_size, minimum=1)
    steps = V.check_int("steps", steps, minimum=1)
    if not batch_size < n - 1:
        raise ValueError(f"batch_size must be < n - 1, got {batch_size}, n={n}.")
    z, zs = float(noise_multiplier), float(stats_noise_multiplier)
    z_run = z / 10.0 if bug == "noise" else z
    zs_run = zs / 10.0 if bug == "stats_noise" else zs
    d = 3
    big = float(canary_scale) * float(clip_norm)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 0] = 0.0
    y = rng.integers(0, 2, size=n).astype(np.int32)
    x[-1] = 0.0
    x[-1, 0] = big
    y[-1] = 1
    s = np.zeros((n,), np.int32)
    s[-1] = 1  # the canary's group has no other member
    model = M.logistic(input_dim=d)
    params0 = model.init(jax.random.key(seed))
    w00 = -30.0 / big  # sigma(w x_canary) ~ e^-30: saturated
    params0 = {**params0, "w": params0["w"].at[0, 0].set(w00)}
    d0 = Dataset(jnp.asarray(x[:-1]), jnp.asarray(y[:-1]), jnp.asarray(s[:-1]), 2)
    d1 = Dataset(jnp.asarray(x), jnp.asarray(y), jnp.asarray(s), 2)
    kw = dict(gamma1=float(gamma1), gamma2=float(gamma2), clip_norm=float(clip_norm), noise_multiplier=z_run,
              stats_noise_multiplier=zs_run, learning_rate=float(learning_rate), batch_size=batch_size,
              steps=steps)
    spend = mitigation.privacy(z, zs, n=n, batch_size=batch_size, delta=float(delta), steps=steps,
                               gamma1=float(gamma1), gamma2=float(gamma2))
    scale = batch_size / (float(learning_rate) * float(clip_norm))
    a_theta, a_stats = 1.0 / z_run**2, 1.0 / (3.0 * zs_run**2)

    def stat(p, diag):
        theta = (p["w"][0, 0] - w00) * scale
        released = jnp.sum(diag["private_group_sums"][:, 1, 0] + diag["private_group_sums"][:, 1, 1])
        return a_theta * theta + a_stats * released

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        s0 = stat(*mitigation.train(key, model, params0, d0, **kw))
        s1 = stat(*mitigation.train(key, model, params0, d1, **kw))
        return jnp.where(flag == 1, s1, s0)

    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(spend.delta), "relation": spend.relation,
            "noise_multiplier": z, "stats_noise_multiplier": zs, "gammas": (float(gamma1), float(gamma2))}
    return mechanism_fn, info


BUILDERS: dict[str, Builder] = {
    "dpsgd": dpsgd_mechanism,
    "dpsgd_replace": dpsgd_replace_mechanism,
    "dpsgd_mlp": dpsgd_mlp_mechanism,
    "group_weighted": group_weighted_mechanism,
    "output_perturbation": output_perturbation_mechanism,
    "mitigation": mitigation_mechanism,
}
