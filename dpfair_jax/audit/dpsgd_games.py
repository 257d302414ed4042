"""Audit games of DP-SGD, output perturbation and the paper-001 mitigation, each a
:class:`~dpfair_jax.audit.fit_spend.FitSpendGame` on the module's ``fit`` / ``spend``.

Each builder has the contract of :mod:`dpfair_jax.audit.mechanism_audits`:
``builder(*, bug=None, **kw) -> (mechanism_fn(key, flag) -> scalar, info)``; ``flag = 0`` runs
``fit`` on ``D0``, ``flag = 1`` on its neighbour ``D1``, and higher statistics mean "``D1``".
``info`` has ``claimed_epsilon``, ``delta`` (the module's ``spend`` of the nominal hparams, the
larger over the two worlds' sizes) and ``relation``. Each ``*_game`` function returns the game
itself.

Canary design (all families): the canary's contribution lies along a direction no other record
touches, and it is far beyond the clip norm, so its clipped contribution is exactly ``C`` (or
``2 C`` replace-one) along that direction; the statistic is the release's coordinate along it,
in units of the accounted shift. Clip norm ``C = 3`` everywhere, so a noise std that drops its
``* clip_norm`` (noise ``z`` instead of ``z C``) is a factor 3 too small and shows.

* ``dpsgd``: :func:`dpfair_jax.algorithms.dpsgd.fit` with a ``models.logistic`` model (default
  intercept) and every default of ``DPSGDConfig`` but ``diagnostics=False`` (not released):
  Poisson sampling at ``q = 16/32`` with the default padding, ``per_example="auto"`` (GLM ghost
  norms), SGD. Add/remove by literally dropping the canary row (``D0`` has ``n - 1`` rows, ``D1``
  all ``n``; both worlds computed, selected by ``flag``). Every row but the canary is 0 in
  feature 0; the canary is ``x = 100 C e_0``, ``y = 1``, so its logistic gradient
  ``(sigma(w x) - 1)(x, 1)`` has norm ``~50 C`` and points along ``-e_0`` (up to its intercept
  entry ``1/(100 C)`` of it), orthogonal to every other gradient. The learning rate ``1e-4`` keeps
  ``|w_0 x_0| < 1`` so the canary stays unsaturated. Statistic: ``w_T[0] B / (lr C)`` = number of
  steps the canary was sampled + ``N(0, T z^2)``. Claim: ``dpsgd.spend`` (the default RDP
  accountant, truncation charge included), the larger over ``n - 1`` and ``n`` rows (``D0``'s
  rate ``B / (n - 1)``).
* ``dpsgd_replace``: the same with ``sampling="fixed_size"`` (replace-one, sensitivity ``2 C``):
  the canary's label flips (``y = 1`` in ``D0``, 0 in ``D1``), so its clipped gradient turns from
  ``-C e_0`` to ``+C e_0``. Statistic ``-w_T[0] B / (lr C)``.
* ``dpsgd_mlp``: ``dpsgd`` with ``models.mlp(hidden=(4,), activation="tanh")`` (the dense ghost
  path). The first layer's kernel row 0 starts at 0, so the canary ``100 C e_0`` has hidden
  pre-activations ~0 and its gradient on that row is ``-(1/2) 100 C v`` (``v`` the output
  kernel), nearly all of its norm; no other row touches kernel row 0. Statistic: that row's
  projection on ``v / ||v||`` (initial ``v``) times ``B / (lr C)``.
* ``output_perturbation``: :func:`dpfair_jax.algorithms.output_perturbation.fit` on its default
  config (logistic, intercept, 30 Newton steps), ``reg = 1``, a public ``radius`` (the corrected
  default: a data-derived radius is not private) and the multiplier of
  ``output_perturbation.calibrate`` for ``(1, 1e-5)``. Replace-one: the canary ``radius e_0`` flips
  its label; statistic: the release's projection on ``theta*(D1) - theta*(D0)`` over the nominal
  noise std. The ``"data_radius"`` variant uses its own pair (a radius leak needs a norm change):
  ``D0``'s canary is ``10 radius e_0``, ``D1``'s is ``0.1 radius e_0`` (same label), each world's
  run takes the radius from its data (the former ``radius=None`` default: the largest row norm;
  ``FitSpendGame.world_hparams``), and the statistic is ``-||theta~ - theta*(D1)||^2`` (``D1``'s
  noise is ~7x smaller).
* ``mitigation``: :func:`dpfair_jax.algorithms.mitigation.fit` at ``gamma1 = gamma2 = 1`` (the
  paper's choice), logistic model, Poisson sampling at ``q = 1/2``, one step. Its releases are the
  parameters and the noisy group statistics (``private_group_sums``, Gaussian with sensitivity
  ``sqrt 3``). The canary is alone in group 1 (add/remove by dropping its row) with
  ``x = 100 C e_0``, ``y = 1`` and ``w_0`` initialised to ``-30 / (100 C)``: its prediction is
  saturated, so the penalty gradients (``~sigma'``) vanish, its update contribution is ``-C e_0``
  after clipping, and it adds ``(1, 1, ~0)`` to group 1's statistics. Statistic: the likelihood
  ratio direction of both releases, ``w_T[0] B / (lr C) / z^2 + (S_1,count + S_1,norm) /
  (3 z_s^2)`` with the multipliers the variant runs. Claim: ``mitigation.spend`` (both Gaussians
  composed in one Poisson-sampled event), the larger over ``n - 1`` and ``n`` rows.

Planted bugs (each must give a lower bound above the claimed epsilon; all but ``data_radius``
through :func:`~dpfair_jax.audit.fit_spend.plant`):

* ``"noise"``: noise multiplier / 10, the nominal spend claimed;
* ``"noise_half"``: noise multiplier / 2 (``dpsgd``, ``dpsgd_mlp``);
* ``"clip_unscaled"``: noise std ``z`` instead of ``z C`` at ``C = 3`` (the ``* clip_norm``
  dropped), i.e. multiplier / 3;
* ``"clipping"``: clipping disabled (clip norm x 1e4) with the noise std of the nominal clip;
* ``"data_radius"`` (``output_perturbation``): the feature-norm bound taken from the data;
* ``"stats_noise"`` (``mitigation``): the group statistics' multiplier / 10.

Sizes: the ``delta`` of the DP-SGD and mitigation games is ``1e-2`` (a claim is a curve; this
point of it is where ``N`` trials have power: at ``1e-5`` a factor-2 noise bug cannot be told
from the claim with ``1e5`` trials). ``dpsgd_replace`` cannot catch ``noise_half`` at any
affordable size: the RDP bound of sampling without replacement under replace-one (the only
accountant dp-accounting offers for it) is ~2x the epsilon its worst-case pair reaches, so its
smallest detected factor is ``clip_unscaled`` (1/3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.audit.fit_spend import FitSpendGame, plant
from dpfair_jax.audit.games import check_family_bug

__all__ = [
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "ALGORITHMS",
    "dpsgd_game",
    "dpsgd_mechanism",
    "dpsgd_replace_mechanism",
    "dpsgd_mlp_mechanism",
    "output_perturbation_game",
    "output_perturbation_mechanism",
    "mitigation_game",
    "mitigation_mechanism",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "dpsgd": ("noise", "noise_half", "clip_unscaled", "clipping"),
    "dpsgd_replace": ("noise", "clip_unscaled", "clipping"),
    "dpsgd_mlp": ("noise", "noise_half", "clipping"),
    "output_perturbation": ("noise", "data_radius"),
    "mitigation": ("noise", "stats_noise"),
}
ALGORITHMS: dict[str, str] = {"dpsgd": "dpsgd", "dpsgd_replace": "dpsgd", "dpsgd_mlp": "dpsgd",
                              "output_perturbation": "output_perturbation", "mitigation": "mitigation"}

# trials per world (every trial is a few rows and one or two steps). Quick: each family's variants
# in about 10-40 s on two CPU cores; every bug is caught and every default passes at these sizes.
SUITE_TRIALS = {
    "quick": {"dpsgd": 50000, "dpsgd_replace": 50000, "dpsgd_mlp": 20000,
              "output_perturbation": 20000, "mitigation": 20000},
    "full": {"dpsgd": 200000, "dpsgd_replace": 200000, "dpsgd_mlp": 100000,
             "output_perturbation": 100000, "mitigation": 100000},
}

Builder = Callable[..., tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]]
_DPSGD_NOISE = (("noise_multiplier", "clip_norm"),)
_check_bug = functools.partial(check_family_bug, FAMILY_BUGS)


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


def _canary_rows(n: int, d: int, seed: int, canary: float) -> tuple[np.ndarray, np.ndarray]:
    """``(x [n, d], y [n])``: Gaussian rows that are 0 in feature 0 with random labels, and the
    canary as the last row, ``x = canary e_0``, ``y = 1``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 0] = 0.0
    y = rng.integers(0, 2, size=n).astype(np.int32)
    x[-1] = 0.0
    x[-1, 0] = canary  # the canary: last row
    y[-1] = 1
    return x, y


def _canary_coordinate(model_name: str, params0: Any) -> Callable[[Any], jax.Array]:
    """The parameter coordinate the canary moves: ``w[0, 0]`` of the logistic model; for the MLP,
    the first layer's kernel row 0 projected on the initial output kernel ``v / ||v||``."""
    if model_name == "logistic":
        return lambda p: p["w"][0, 0]
    first, last = sorted(params0["layers"])
    v = np.asarray(params0["layers"][last]["kernel"][:, 0], np.float64)
    v_hat = jnp.asarray(v / np.linalg.norm(v), jnp.float32)
    return lambda p: jnp.dot(p["layers"][first]["kernel"][0], v_hat)


def dpsgd_game(family: str = "dpsgd", *, bug: str | None = None, noise_multiplier: float | None = None,
               clip_norm: float = 3.0, n: int = 32, batch_size: int | None = None, steps: int | None = None,
               delta: float = 1e-2, learning_rate: float = 1e-4, canary_scale: float = 100.0,
               seed: int = 0) -> FitSpendGame:
    """The game of ``family`` (``"dpsgd"``, ``"dpsgd_replace"`` or ``"dpsgd_mlp"``; module doc) on
    ``dpsgd.fit``; ``None`` sizes take the family's defaults (``dpsgd_replace``: ``z = 1.5``,
    ``B = 24``, one step; the others ``z = 1``, ``B = 16``, two steps).

    Privacy: the claim is ``dpsgd.spend`` of the nominal hparams (add/remove-one under Poisson,
    replace-one with sensitivity ``2 C`` under fixed-size batches), the larger over both worlds.
    """
    from dpfair_jax.algorithms import dpsgd

    V.check_choice("family", family, ("dpsgd", "dpsgd_replace", "dpsgd_mlp"))
    _check_bug(family, bug)
    replace = family == "dpsgd_replace"
    noise_multiplier = (1.5 if replace else 1.0) if noise_multiplier is None else noise_multiplier
    batch_size = (24 if replace else 16) if batch_size is None else batch_size
    steps = (1 if replace else 2) if steps is None else steps
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
    d = 3
    x, y = _canary_rows(n, d, seed, float(canary_scale) * float(clip_norm))
    model_name = "mlp" if family == "dpsgd_mlp" else "logistic"
    model, params0 = _game_model(model_name, d, seed)
    coordinate = _canary_coordinate(model_name, params0)
    config = dpsgd.DPSGDConfig(model=model, sampling="fixed_size" if replace else "poisson", delta=float(delta),
                               batch_size=batch_size, steps=steps,
                               diagnostics=False)  # every other field at its default
    hp = dpsgd.DPSGDHparams(learning_rate=float(learning_rate), clip_norm=float(clip_norm),
                            noise_multiplier=float(noise_multiplier))
    scale = batch_size / (float(learning_rate) * float(clip_norm))
    c0 = float(coordinate(params0))
    xj = jnp.asarray(x)
    if replace:
        y0 = jnp.asarray(y)
        flip = jnp.zeros((n,), jnp.int32).at[-1].set(-1)  # y_canary 1 -> 0

        def neighbours(flag: jax.Array):
            return (xj, y0 + flag.astype(jnp.int32) * flip)

        def stat(res) -> jax.Array:
            return -(coordinate(res.params) - c0) * scale

        pair, sizes = neighbours, (n, n)
    else:
        pair, sizes = ((xj[:-1], jnp.asarray(y[:-1])), (xj, jnp.asarray(y))), None

        def stat(res) -> jax.Array:
            return (coordinate(res.params) - c0) * scale

    mode = dpsgd.resolve_per_example(model, params0)[0]
    return FitSpendGame(
        algorithm=dpsgd, config=config, hparams=hp, neighbours=pair, statistic=stat, sizes=sizes,
        relation="replace_one" if replace else "add_remove", fit_kwargs={"params": params0},
        run_hparams=plant(hp, bug, _DPSGD_NOISE),
        info={"noise_multiplier": float(noise_multiplier), "clip_norm": float(clip_norm),
              "sample_rate": batch_size / n, "steps": steps, "per_example_path": mode, "model": model_name},
    )


def dpsgd_mechanism(*, bug: str | None = None, **kw: Any):
    """DP-SGD on its defaults (Poisson, GLM ghost norms), logistic model, add/remove of a gradient
    canary (module doc). Privacy: the claim is ``dpsgd.spend`` (add/remove-one, RDP)."""
    return dpsgd_game("dpsgd", bug=bug, **kw).build()


def dpsgd_replace_mechanism(*, bug: str | None = None, **kw: Any):
    """DP-SGD with ``sampling="fixed_size"`` (replace-one: the canary's label flips), logistic model,
    default per-example path. Privacy: ``dpsgd.spend`` (replace-one, sensitivity ``2 C``)."""
    return dpsgd_game("dpsgd_replace", bug=bug, **kw).build()


def dpsgd_mlp_mechanism(*, bug: str | None = None, **kw: Any):
    """``dpsgd`` with a one-hidden-layer tanh MLP (the dense ghost-norm path). Privacy: as ``dpsgd``."""
    return dpsgd_game("dpsgd_mlp", bug=bug, **kw).build()


# ------------------------------------------------------------------------------------------------
# Output perturbation (paper 001)
# ------------------------------------------------------------------------------------------------
def output_perturbation_game(*, bug: str | None = None, epsilon: float = 1.0, delta: float = 1e-5,
                             n: int = 10, radius: float = 1.0, seed: int = 0) -> FitSpendGame:
    """``output_perturbation.fit`` on its default config with a public radius and the multiplier
    ``calibrate`` gives for ``(epsilon, delta)``, replace-one (module doc).

    Privacy: the claim is ``output_perturbation.spend`` (analytic Gaussian, replace-one), given a
    public bound ``radius`` on the row norms.
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
    config = op.OutputPerturbationConfig(delta=float(delta))  # every other field at its default
    hp = op.calibrate(config, n, (float(epsilon), float(delta)),
                      hparams=op.OutputPerturbationHparams(reg=1.0, radius=r))
    key0 = jax.random.key(seed)
    if bug != "data_radius":
        x[-1] = (r, 0.0)
        y0, y1 = y.copy(), y.copy()
        y0[-1], y1[-1] = 1, 0
        xj = jnp.asarray(x)
        ref0 = op.fit(key0, (xj, jnp.asarray(y0)), hp, config)
        ref1 = op.fit(key0, (xj, jnp.asarray(y1)), hp, config)
        t0, t1 = (np.asarray(ref.diagnostics["theta_star"], np.float64) for ref in (ref0, ref1))
        u = jnp.asarray((t1 - t0) / np.linalg.norm(t1 - t0), jnp.float32)
        std = float(ref0.diagnostics["std"])
        y0j, t0j = jnp.asarray(y0), jnp.asarray(t0, jnp.float32)
        flip = jnp.zeros((n,), jnp.int32).at[-1].set(-1)

        def neighbours(flag: jax.Array):
            return (xj, y0j + flag.astype(jnp.int32) * flip)

        def stat(res) -> jax.Array:
            return jnp.dot(res.params - t0j, u) / std

        return FitSpendGame(
            algorithm=op, config=config, hparams=hp, neighbours=neighbours, statistic=stat, sizes=(n, n),
            relation="replace_one", run_hparams=plant(hp, bug, (("noise_multiplier", None),)),
            info={"std": std, "shift": float(np.linalg.norm(t1 - t0)), "sensitivity": float(ref0.diagnostics["sensitivity"])},
        )
    y[-1] = 1
    x0, x1 = x.copy(), x.copy()
    x0[-1], x1[-1] = (10.0 * r, 0.0), (0.1 * r, 0.0)
    r0, r1 = (float(np.linalg.norm(a.astype(np.float64), axis=1).max()) for a in (x0, x1))  # from the data
    d0, d1 = (jnp.asarray(x0), jnp.asarray(y)), (jnp.asarray(x1), jnp.asarray(y))
    hp0, hp1 = (op.OutputPerturbationHparams(noise_multiplier=hp.noise_multiplier, reg=hp.reg, radius=rr)
                for rr in (r0, r1))
    ref1 = op.fit(key0, d1, hp1, config)
    t1j, std = ref1.diagnostics["theta_star"], float(ref1.diagnostics["std"])

    def stat_radius(res) -> jax.Array:
        return -jnp.sum(jnp.square(res.params - t1j)) / std**2

    return FitSpendGame(
        algorithm=op, config=config, hparams=hp, neighbours=(d0, d1), statistic=stat_radius,
        relation="replace_one", world_hparams=(hp0, hp1), info={"std": std, "radii": (r0, r1)},
    )


def output_perturbation_mechanism(*, bug: str | None = None, **kw: Any):
    """``(mechanism_fn, info)`` of :func:`output_perturbation_game`. Privacy: as the game's."""
    return output_perturbation_game(bug=bug, **kw).build()


# ------------------------------------------------------------------------------------------------
# Mitigation (paper 001, Fig. 12 reconstruction)
# ------------------------------------------------------------------------------------------------
def mitigation_game(*, bug: str | None = None, noise_multiplier: float = 1.0, stats_noise_multiplier: float = 2.0,
                    gamma1: float = 1.0, gamma2: float = 1.0, clip_norm: float = 3.0, n: int = 32,
                    batch_size: int = 16, steps: int = 1, delta: float = 1e-2, learning_rate: float = 1e-4,
                    canary_scale: float = 100.0, seed: int = 0) -> FitSpendGame:
    """``mitigation.fit`` with a saturated canary alone in its group, add/remove (module doc).

    Privacy: the claim is ``mitigation.spend`` (statistics and update Gaussians composed in one
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
    config = mitigation.MitigationConfig(model=model, delta=float(delta), batch_size=batch_size,
                                         steps=steps)  # diagnostics carry the released statistics
    hp = mitigation.MitigationHparams(gamma1=float(gamma1), gamma2=float(gamma2), learning_rate=float(learning_rate),
                                      clip_norm=float(clip_norm), noise_multiplier=float(noise_multiplier),
                                      stats_noise_multiplier=float(stats_noise_multiplier))
    run = plant(hp, "noise" if bug else None,
                (("stats_noise_multiplier" if bug == "stats_noise" else "noise_multiplier", None),))
    scale = batch_size / (float(learning_rate) * float(clip_norm))
    a_theta, a_stats = 1.0 / run.noise_multiplier**2, 1.0 / (3.0 * run.stats_noise_multiplier**2)

    def stat(res) -> jax.Array:
        theta = (res.params["w"][0, 0] - w00) * scale
        sums = res.diagnostics["private_group_sums"]
        released = jnp.sum(sums[:, 1, 0] + sums[:, 1, 1])
        return a_theta * theta + a_stats * released

    return FitSpendGame(
        algorithm=mitigation, config=config, hparams=hp, neighbours=(d0, d1), statistic=stat,
        relation="add_remove", fit_kwargs={"params": params0}, run_hparams=run,
        info={"noise_multiplier": float(noise_multiplier), "stats_noise_multiplier": float(stats_noise_multiplier),
              "gammas": (float(gamma1), float(gamma2))},
    )


def mitigation_mechanism(*, bug: str | None = None, **kw: Any):
    """``(mechanism_fn, info)`` of :func:`mitigation_game`. Privacy: as the game's."""
    return mitigation_game(bug=bug, **kw).build()


BUILDERS: dict[str, Builder] = {
    "dpsgd": dpsgd_mechanism,
    "dpsgd_replace": dpsgd_replace_mechanism,
    "dpsgd_mlp": dpsgd_mlp_mechanism,
    "output_perturbation": output_perturbation_mechanism,
    "mitigation": mitigation_mechanism,
}
