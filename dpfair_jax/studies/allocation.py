"""Paper 000's two-group (and K-group) Monte Carlo study of DPSE vs DPNoSE, as library pieces.

"Privacy Budget Tailoring in Private Data Analysis", Sec. 6: per-group linear data
``y = beta_k x + sigma_k e`` with ``x ~ N(0, 1)`` (one feature, no intercept), every method of
:mod:`dpfair_jax.algorithms.budget_tailoring` at every budget ``rho`` on the same data (common
random numbers), scored by the population MSPE ``(theta - beta_k)^2 + sigma_k^2``.

- :func:`two_group_trial`: one trial of one scenario (any number of groups K): fresh data and
  fresh noise, all methods x budgets; :func:`two_group_study`: trials x scenarios x budgets of one
  group-size vector as one compiled program (``montecarlo.run_trials``).
- :func:`method_configs`, :func:`hyperparams_from`: the static configs and traced hyperparameters
  of the methods (:data:`PRIVATE_METHODS`) from a settings dict such as :data:`SETTINGS` (the
  paper's choices: ``T = 50``, learning rate 0.1, ``Delta = 2``, ``C_P = [-5, 5]``, ``tau = 0.2
  rho``, ``G = 1``).
- :func:`trial_chunk_size`, :func:`budget_batch`: the program's batching rules.

Privacy: every run is ``rho``-zCDP under the settings' relation (``"replace_one_within_group"``:
one record replaced by another of the same group, sizes public, the paper's setting, by default; ``"add_remove"`` charges noisy group counts ``count_fraction`` of ``rho``):
the spend of :func:`dpfair_jax.algorithms.budget_tailoring.spend` for its config and budget.
A budget ``rho = inf`` is each method's non-private limit. The data here are simulated.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.montecarlo import run_trials

__all__ = [
    "METHODS",
    "PRIVATE_METHODS",
    "SETTINGS",
    "budget_batch",
    "hyperparams_from",
    "method_configs",
    "trial_chunk_size",
    "two_group_study",
    "two_group_trial",
]

# Private methods evaluated per budget, and the rho-free non-private references.
PRIVATE_METHODS = ("dpse", "dpnose", "equal", "dpse_fair", "equal_fair")
METHODS = PRIVATE_METHODS  # rho = inf in a budget grid gives each method's non-private limit

#: The paper's settings of every method (Sec. 6 and notes C.5); a study adds its grid to them.
SETTINGS: dict[str, Any] = dict(
    steps=50,
    learning_rate=0.1,
    clip=2.0,
    box=5.0,
    tau_fraction=0.2,
    fairness_weight=1.0,
    thresholds=0.0,
    stats_bound_x=3.0,
    stats_bound_y=30.0,
    scaling="group_mean",
    relation="replace_one_within_group",  # public group sizes (the paper's setting); "add_remove": noisy counts
    count_fraction=0.05,  # share of rho for the noisy counts under add_remove (unused otherwise)
    delta=1e-5,
    clipped_sums="table",  # "table" (exact, O(log n) per step) or "direct" (sum over examples)
)


def method_configs(settings: dict[str, Any]) -> dict[str, bt.Config]:
    """The static :class:`budget_tailoring.Config` of each method for the given settings."""
    common = dict(steps=int(settings["steps"]), box=float(settings["box"]),
                  scaling=settings.get("scaling", "group_mean"),
                  relation=settings.get("relation", "replace_one_within_group"))
    return {
        "dpse": bt.Config(method="dpse", **common),
        "dpnose": bt.Config(method="pooled", **common),
        "equal": bt.Config(method="equal", **common),
        "dpse_fair": bt.Config(method="dpse", fairness=True, **common),
        "equal_fair": bt.Config(method="equal", fairness=True, **common),
    }


def hyperparams_from(settings: dict[str, Any], rho: Any = 1.0) -> bt.Hyperparams:
    """Traced hyperparameters of a run from the config values."""
    return bt.Hyperparams(
        rho=rho,
        tau_fraction=float(settings["tau_fraction"]),
        learning_rate=float(settings["learning_rate"]),
        clip=float(settings["clip"]),
        fairness_weight=float(settings["fairness_weight"]),
        thresholds=float(settings["thresholds"]),
        stats_bound_x=float(settings["stats_bound_x"]),
        stats_bound_y=float(settings["stats_bound_y"]),
        count_fraction=float(settings.get("count_fraction", 0.05)),
    )


def _synthetic(z, sizes: tuple[int, ...], slopes, noise_sd):
    """Per-group linear data, one feature: ``x ~ N(0, 1)``, ``y = beta_k x + sigma_k e``.

    The model of ``data.synthetic.ols_mixture`` (paper 000 Sec. 6, App. A.1), written on given
    standard normal draws ``z [2n]`` so that a trial draws all its randomness in one call.
    Returns (x [n, 1], y [n], s [n]) with rows ordered by group.
    """
    n = int(sum(sizes))
    s = jnp.asarray(np.repeat(np.arange(len(sizes), dtype=np.int32), sizes))
    x = z[:n]
    y = x * slopes[s] + noise_sd[s] * z[n: 2 * n]
    return x[:, None], y, s


def two_group_trial(key: jax.Array, slopes: jax.Array, noise_sd: jax.Array, rhos: jax.Array,
                    *, sizes: tuple[int, ...], settings: dict[str, Any]) -> dict[str, jax.Array]:
    """One trial of one scenario (any K): fresh data and fresh noise, every method at every budget.

    All of the trial's randomness is one ``jax.random.normal(key, ...)`` call: the data's ``2n``
    draws, then for budget ``r`` and method ``m`` the draws of one run (see
    :func:`budget_tailoring.fit_many_from_draws`). The data are shared by all budgets and methods
    (common random numbers, paired comparisons); the noise is not. The data are prepared once
    per trial (``settings["clipped_sums"]``: ``"table"``, the default, tabulates the exact clipped
    sums of the one-feature problem, :func:`budget_tailoring.prepare`; ``"direct"`` sums over
    the examples at every step; both give the same numbers up to float rounding). A budget
    ``rho = inf`` gives
    each method's non-private limit. Returns ``mspe [R, M, K]`` (population MSPE), ``theta
    [R, M, P]``, ``se [R, K]`` (DPSE's allocation) and ``fallback [R]``.
    """
    k = len(sizes)
    n = int(sum(sizes))
    cfgs = method_configs(settings)
    configs = tuple(cfgs[name] for name in PRIVATE_METHODS)
    slopes = jnp.asarray(slopes, jnp.float32)
    noise_sd = jnp.broadcast_to(jnp.asarray(noise_sd, jnp.float32), (k,))
    r_count, m_count = rhos.shape[0], len(configs)
    per_run = bt.num_draws(configs[0].steps, 1, k)
    z = jax.random.normal(key, (2 * n + r_count * m_count * per_run,), jnp.float32)
    x, y, s = _synthetic(z[: 2 * n], sizes, slopes, noise_sd)
    noise = z[2 * n:].reshape(r_count, m_count, per_run)
    betas = slopes[:, None]
    i_dpse = PRIVATE_METHODS.index("dpse")

    mode = settings.get("clipped_sums", "table")
    prepared = bt.prepare(x, y, s, k, configs[0], clip=float(settings["clip"]),
                          clipped_sums=mode)

    def at_budget(zr, rho):
        theta, diag = bt.fit_many_prepared(zr, prepared, hyperparams_from(settings, rho), configs)
        mspe = jax.vmap(lambda th: bt.population_mspe(th, betas, noise_sd))(theta)
        return mspe, theta, diag.se[i_dpse], diag.fallback[i_dpse]

    # With the clipped-sum table a descent step no longer touches the n examples: run all
    # budgets side by side. Without it, batch the budgets so a step's temporaries stay in cache.
    batch = int(settings.get("budget_batch") or 0) or (
        r_count if prepared.table is not None else budget_batch(n, r_count))
    mspe, theta, se, fb = jax.lax.map(lambda a: at_budget(*a), (noise, rhos), batch_size=batch)
    return {"mspe": mspe, "theta": theta, "se": se, "fallback": fb}


def budget_batch(n: int, num_budgets: int, target: int = 16384) -> int:
    """Budgets run side by side in a trial (``lax.map`` batch size): about ``target`` example-runs
    per step (with 3 methods per descent), so a step's temporaries stay in cache on CPU."""
    return int(min(num_budgets, max(1, round(target / (3 * n)))))


def trial_chunk_size(n: int, setting: Any = "auto", backend: str | None = None,
                     cores: int | None = None) -> int:
    """Trials vmapped per chunk of a study with ``n`` examples per trial.

    ``"auto"`` on CPU: about 50,000 example-trials per chunk, rounded down to a multiple of the
    CPU cores (``cores``; default ``os.cpu_count()``; at least one multiple), at most
    ``max(24, cores)``. Measured on a 2-core CPU with the clipped-sum table: large chunks win at
    small n (24 trials 20% faster than 2 at n = 600-2,100), and chunks that split evenly over the
    cores are 10-15% faster than odd ones (n = 10,100: 2, 4 or 6 trials 4.2-4.3 ms per trial,
    3 or 5 trials 4.7-4.9 ms; n = 5,100: 8 or 10 trials 2.1-2.2 ms, 3 or 5 trials 2.8-3.0 ms).
    On an accelerator (``backend`` other than ``"cpu"``; default: JAX's default backend) wide
    chunks keep the device busy: about 5,000,000 example-trials per chunk, between 1 and 1000
    (a few hundred MB of working set per chunk). An int is used as given.
    """
    if setting != "auto":
        return int(setting)
    backend = jax.default_backend() if backend is None else backend
    n = max(int(n), 1)
    if backend != "cpu":
        return int(max(1, min(1000, round(5_000_000 / n))))
    cores = max(1, int(cores if cores is not None else (os.cpu_count() or 1)))
    chunk = min(max(24, cores), round(50_000 / n))
    return int(max(cores, chunk - chunk % cores))


def two_group_study(key: jax.Array, scenarios_slopes: Any, scenarios_sd: Any, rhos: Any, *,
                    sizes: tuple[int, ...], settings: dict[str, Any], num_trials: int,
                    chunk_size: int | None = None) -> dict[str, np.ndarray]:
    """All trials x scenarios x budgets of one group-size vector as one compiled program.

    ``scenarios_slopes [S, K]`` and ``scenarios_sd [S]`` (or ``[S, K]``) are the scenarios,
    ``rhos [R]`` the budgets. Trial ``t`` uses ``montecarlo.trial_keys(key, num_trials)[t]``;
    scenario ``j`` folds ``j`` into it. Returns the outputs of :func:`two_group_trial` with leading
    axes ``[num_trials, S]`` as NumPy arrays.
    """
    fn = _study_fn(tuple(int(n) for n in sizes), _freeze(settings), _freeze(scenarios_slopes),
                   _freeze(scenarios_sd), _freeze(rhos))
    out = run_trials(fn, key, num_trials, chunk_size=chunk_size)
    return jax.tree_util.tree_map(np.asarray, out)


def _freeze(value: Any) -> Any:
    """Hashable copy of a config value (dicts, lists and arrays to tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, np.ndarray, jax.Array)):
        return tuple(_freeze(v) for v in np.asarray(value, dtype=object).tolist()) if np.ndim(
            value) else float(np.asarray(value))
    return value


@functools.lru_cache(maxsize=32)
def _study_fn(sizes, settings, slopes, sds, rhos):
    """The per-trial function of a study, cached so that ``run_trials`` reuses its program."""
    settings = dict(settings)
    slopes = jnp.asarray(np.asarray(slopes, np.float64), jnp.float32)
    sds = jnp.asarray(np.asarray(sds, np.float64), jnp.float32)
    rhos = jnp.asarray(np.asarray(rhos, np.float64), jnp.float32)
    scen = jnp.arange(slopes.shape[0])

    def fn(k):
        return jax.lax.map(lambda a: two_group_trial(
            jax.random.fold_in(k, a[0]), a[1], a[2], rhos, sizes=sizes, settings=settings),
            (scen, slopes, sds))

    return fn
