"""The compiled grid programs of the tradeoff studies: one ``vmap`` over the runs of a replicate."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.fairness import evaluation as EV
from dpfair_jax.studies.tradeoff.methods import _SCORE_TAG


def _method_fns(method: str):
    """``(config maker, module)``: the module's trio (``fit``, ``spend``, ``calibrate``) runs it."""
    if method == "dpfermi":
        return F.FermiConfig, F
    if method == "pfld":
        return pfld.config, pfld
    raise ValueError(f"unknown method {method!r}; use 'dpfermi' or 'pfld'.")


def _stack(ds, arrays):
    x, y, s = arrays
    return ds.replace(x=jnp.asarray(x, jnp.float32), y=jnp.asarray(y, jnp.int32),
                      s=jnp.asarray(s, jnp.int32), mask=None)


def _fermi_event(cfg, n: int, z_theta: float, z_w: float):
    """The ``DpEvent`` :func:`dpfair_jax.algorithms.fermi.spend` states for a run of ``cfg`` with
    these multipliers (all features, Poisson: the histogram composed with the steps)."""
    return F.spend(cfg, n, F.FermiHparams(noise_theta=float(z_theta), noise_w=float(z_w))).event


@functools.lru_cache(maxsize=16)
def _program(kind: str, cfg, model, num_classes: int, n_val: int):
    """One compiled program (cached: studies of the same shapes and configs share it): ``vmap`` over the runs of one replicate (its splits are arguments, so
    every replicate reuses the program). Outputs ``[L]``: the test metrics, the noisy validation
    score, the truncation count, ``stationarity`` (:func:`.convergence.row_stationarity` of the
    run's method at its trained model on the test split; NaN for ``"mitigation"``, whose
    penalized objective has no gradient to test, and ``"jagielski_in"``, a mixture over a finite class) and ``params`` (each run's trained model, leaves
    ``[L, ...]``)."""
    from dpfair_jax.algorithms import pfld_epoch as PE
    from dpfair_jax.privacy import mechanisms as Mech

    from dpfair_jax.studies.tradeoff import baselines as BL
    from dpfair_jax.studies.tradeoff.convergence import row_stationarity

    def one(train, val, test, key, lam, zt, z2, zs, hp):
        if kind in BL.NOISE_RATIOS:  # the paper's other baselines (their own module)
            out, val_errors, truncated = BL.run_one(kind, cfg, model, num_classes, train, val, test, key, lam,
                                                    zt, z2, hp)
            out = dict(out)
            out["score_errors"] = val_errors + Mech.gaussian_noise(jax.random.fold_in(key, _SCORE_TAG), (), zs)
            out["truncated_steps"] = truncated
            out["stationarity"] = (jnp.full((), jnp.nan, jnp.float32) if kind in ("mitigation", "jagielski_in")
                                   else row_stationarity(
                kind, model, out["params"]["classifier"], test, 0.0, num_classes=num_classes, fairness=cfg.fairness))
            return out  # its trained params are in out["params"] (BL.run_one)
        if kind == "pfld_epoch":
            h = PE.PFLDEpochHparams(lam=lam, lr_theta=hp["lr_theta"], lr_dual=hp["lr_dual"],
                                    clip_theta=hp["clip_theta"], clip_violation=hp["clip_violation"],
                                    noise_theta=zt, noise_violation=z2, radius=hp["radius"], tol=hp["tol"])
            res = PE.fit(key, train, h, cfg, validate=False)
            nu = res.diagnostics["multipliers"] * res.diagnostics["signs"]
        else:
            lr_w = jnp.where(lam > 0, hp["lr_w"] / jnp.maximum(lam, 1e-12), hp["lr_w"])  # lambda-free ascent
            h = F.FermiHparams(lam=lam, lr_theta=hp["lr_theta"], lr_w=lr_w, clip_theta=hp["clip_theta"],
                               clip_w=hp["clip_w"], noise_theta=zt, noise_w=z2, radius=hp["radius"])
            res = (pfld.fit if kind == "pfld_stochastic" else F.fit)(key, train, h, cfg, validate=False)
            nu = res.diagnostics["W"]
        params = res.params
        val_m = EV.evaluate(model, params, val, num_classes)
        # the score: the validation error count (sensitivity 1) with Gaussian noise of std zs
        noisy = val_m["error"] * n_val + Mech.gaussian_noise(jax.random.fold_in(key, _SCORE_TAG), (), zs)
        out = dict(EV.evaluate(model, params, test, num_classes))
        yhat = EV.predict(model, params, test.x)
        out["pred_share"] = jnp.max(jnp.mean(jax.nn.one_hot(yhat, num_classes), axis=0))
        out["score_errors"] = noisy
        out["truncated_steps"] = res.diagnostics["truncated_steps"]
        out["stationarity"] = row_stationarity("dpfermi" if kind == "fermi" else kind, model, params, test, lam,
                                               num_classes=num_classes, fairness=cfg.fairness, multipliers=nu)
        out["params"] = params  # the trained model: the host keeps only each search's winner
        return out

    return jax.jit(jax.vmap(one, in_axes=(None, None, None, 0, 0, 0, 0, 0, 0)))
