"""The checked inputs of the public tradeoff study: argument checks, data, replicate splits and the
algorithms' configs, every candidate checked on the host before any compute (internal to
:func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.studies.tradeoff import baselines as _BL
from dpfair_jax.studies.tradeoff import units as U
from dpfair_jax.studies.tradeoff.methods import _DPSGD_W_RATIO, ALL_METHODS, METHODS
from dpfair_jax.studies.tradeoff.selection import _grid
from dpfair_jax.studies.tradeoff.splits import _as_dataset, replicate_splits


def _check_study_args(fairness, methods, lams, epsilons, replicates, epochs, batch_size, val_size,
                      test_size, selection, runs, score_noise, w_noise_ratio, violation_noise_ratio):
    from dpfair_jax import _validation as V
    from dpfair_jax.privacy.selection import RandomStopping

    V.check_choice("fairness", fairness, ("dp", "eo"))
    methods = tuple(methods)
    if not methods or len(set(methods)) != len(methods):
        raise ValueError(f"methods must be a non-empty list of distinct names from {METHODS}, got {methods!r}.")
    for m in methods:
        V.check_choice("method", m, ALL_METHODS)
    _BL.check_methods(methods, fairness)
    lam_a = np.asarray(lams, float)
    if lam_a.ndim != 1 or lam_a.size == 0 or not np.all(np.isfinite(lam_a)) or np.any(lam_a < 0):
        raise ValueError(f"lams must be a non-empty list of finite numbers >= 0, got {lams!r}.")
    eps = [float(e) for e in epsilons]
    if not eps:
        raise ValueError("epsilons must hold at least one value.")
    for e in eps:
        V.check_epsilon(e, "epsilons", allow_inf=True)
    V.check_int("replicates", replicates, minimum=1)
    V.check_int("epochs", epochs, minimum=1)
    V.check_int("batch_size", batch_size, minimum=1)
    for name, val in (("val_size", val_size), ("test_size", test_size)):
        if not 0.0 < float(val) < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {val!r}.")
    if float(val_size) + float(test_size) >= 0.9:
        raise ValueError(f"val_size + test_size = {float(val_size) + float(test_size):g} leaves under 10% "
                         "for training; lower them.")
    V.check_choice("selection", selection, ("private", "nonprivate"))
    if not isinstance(runs, RandomStopping) or math.isinf(runs.shape):
        raise ValueError("runs must be a privacy.selection.RandomStopping law with a finite shape (a "
                         "Poisson law may draw K = 0 and release no model for a point).")
    for name, val in (("score_noise", score_noise), ("w_noise_ratio", w_noise_ratio),
                      ("violation_noise_ratio", violation_noise_ratio)):
        V.check_positive(name, val)
    return methods, [float(x) for x in lam_a], eps


@dataclasses.dataclass
class _Setup:
    """A study's checked inputs, splits and configs (internal to :func:`tradeoff_frontier_study`)."""

    fairness: str
    methods: tuple
    lams: list
    eps: list
    grids: dict
    ds: object
    l: int
    model: object
    splits: dict
    n: int
    n_val: int
    delta: float
    steps: int
    cfgs: dict
    private: bool
    law: object
    w_ratio: dict
    replicates: int
    score_noise: float
    violation_noise_ratio: float
    seed: int
    unit: str = "example"


def _setup(data, *, target, group, features, fairness, methods, lams, epsilons, replicates, epochs, batch_size,
           val_size, test_size, standardize, max_rows, delta, selection, runs, search, fixed, score_noise,
           w_noise_ratio, violation_noise_ratio, count_noise_multiplier, model, seed, unit="example") -> _Setup:
    """The argument checks, the data, its replicate splits and the configs; every candidate is
    checked on the host, before any compute."""
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import pfld_epoch as PE
    from dpfair_jax.privacy import selection as S

    U.check_unit(unit)
    runs = S.RandomStopping(mean=4.0, shape=1.0) if runs is None else runs
    methods, lams, eps = _check_study_args(fairness, methods, lams, epsilons, replicates, epochs, batch_size,
                                           val_size, test_size, selection, runs, score_noise, w_noise_ratio,
                                           violation_noise_ratio)
    _BL.check_methods(methods, fairness, unit)
    grids = {m: _grid(m, search, fixed) for m in methods}
    ds = _as_dataset(data, target, group, features)
    k, l = ds.num_groups, max(ds.num_classes, 2)
    if model is None:
        model = M.logistic() if l == 2 else M.multinomial_logistic(l)
    splits = replicate_splits(ds, replicates=replicates, val_size=float(val_size), test_size=float(test_size),
                              standardize=standardize, seed=seed, max_rows=max_rows)
    n, n_val = splits["train"][1].shape[1], splits["val"][1].shape[1]
    delta = 1.0 / n**2 if delta is None else float(delta)
    from dpfair_jax import _validation as V

    V.check_delta(delta)
    steps = epochs * math.ceil(n / batch_size)
    common = dict(model=model, num_groups=k, num_classes=l, steps=steps, batch_size=batch_size,
                  fairness=fairness, privacy_unit="all_features",
                  count_noise_multiplier=float(count_noise_multiplier))
    cfgs = {"fermi": F.FermiConfig(**common).validate(n), "pfld_stochastic": pfld.config(**common).validate(n),
            "pfld_epoch": PE.PFLDEpochConfig(model=model, num_groups=k, num_classes=l, epochs=epochs,
                                             batch_size=batch_size, fairness=fairness, delta=delta,
                                             violation_noise_ratio=float(violation_noise_ratio)).validate(n)}
    cfgs.update(_BL.configs(common, cfgs["fermi"], methods, unit=unit, delta=delta))
    for m in methods:  # every candidate checked on the host, before compute
        for cand in grids[m]:
            if m == "jagielski_in":
                from dpfair_jax.algorithms import jagielski_in as JI

                JI.JagielskiInHparams(eta=cand["eta"], gamma=cand["gamma"]).validate()
            elif m == "pfld_epoch":
                PE.check_hparams(PE.PFLDEpochHparams(**cand))
            else:
                F.check_hparams(F.FermiHparams(**cand))
    private = selection == "private"
    law = runs if private else None
    w_ratio = {"dpfermi": w_noise_ratio, "pfld_stochastic": w_noise_ratio, "dpsgd": _DPSGD_W_RATIO, **_BL.NOISE_RATIOS}
    return _Setup(fairness, methods, lams, eps, grids, ds, l, model, splits, n, n_val, delta, steps, cfgs,
                  private, law, w_ratio, replicates, score_noise, violation_noise_ratio, seed, unit=unit)
