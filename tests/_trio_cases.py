"""One small problem per algorithm (per algorithm of a module), for the trio contract test
(tests/algorithms/test_trio_contract.py): ``CASES[name]() -> TrioCase``. Each case is built with the public
trio only: a config (static choices, including the program's shape), the ``sizes`` its ``spend``
and ``calibrate`` take, a data set ``fit`` accepts, and a target ``(epsilon, config.delta)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dpfair_jax import models
from dpfair_jax.data.dataset import make_dataset

DELTA = 1e-5


class TrioCase(NamedTuple):
    module: str  # the dpfair_jax.algorithms module
    data: Any
    config: Any
    sizes: Any
    target: tuple[float, float]


def _two_group_logistic(n: int = 48, d: int = 3):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    s = np.repeat([0, 1], n // 2).astype(np.int32)
    y = (x[:, 0] + 0.5 * s + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
    return make_dataset(x, y, s, num_groups=2, num_classes=2)


# ------------------------------------------------------------------------------- SGD family


def case_dpsgd() -> TrioCase:
    from dpfair_jax.algorithms import dpsgd

    data = _two_group_logistic()
    config = dpsgd.DPSGDConfig(model=models.logistic(), delta=DELTA, batch_size=12, steps=4, diagnostics=False)
    return TrioCase("dpsgd", (data.x, data.y), config, data.n, (2.0, DELTA))




def case_mitigation() -> TrioCase:
    from dpfair_jax.algorithms import mitigation

    data = _two_group_logistic()
    config = mitigation.MitigationConfig(model=models.logistic(), delta=DELTA, batch_size=12, steps=4)
    return TrioCase("mitigation", data, config, data.n, (3.0, DELTA))




def case_jagielski() -> TrioCase:
    from dpfair_jax.algorithms import jagielski as J

    data = _two_group_logistic()
    yhat = (np.asarray(data.x)[:, 0] > 0).astype(np.int32)
    config = J.JagielskiConfig(num_groups=2, delta=DELTA)
    return TrioCase("jagielski", (yhat, np.asarray(data.y), np.asarray(data.s)), config, data.n, (1.0, DELTA))


def case_jagielski_in() -> TrioCase:
    from dpfair_jax.algorithms import jagielski_in as J

    data = _two_group_logistic()
    x0 = np.asarray(data.x)[:, 0]
    preds = np.stack([(x0 > t).astype(np.int32) for t in (-1.0, -0.5, 0.0, 0.5, 1.0)])
    config = J.JagielskiInConfig(num_groups=2, steps=4, delta=DELTA)
    return TrioCase("jagielski_in", J.OracleData(preds, np.asarray(data.y), np.asarray(data.s)), config, data.n,
                    (1.0, DELTA))




# ------------------------------------------------------------------------------- min-max family


def _bilinear_loss(theta, w, ex):
    """A smooth min-max loss of one example: ``<theta, x> <w, x> - |theta|^2 / 2``."""
    import jax.numpy as jnp

    return jnp.dot(theta, ex["x"]) * jnp.dot(w, ex["x"]) - 0.5 * jnp.dot(theta, theta)


def case_sgda() -> TrioCase:
    from dpfair_jax.algorithms import sgda

    data = _two_group_logistic()
    cfg = sgda.SGDAConfig(steps=4, batch_size=12, delta=DELTA, private_loss=_bilinear_loss,
                          theta_shape=(3,), w_shape=(3,))
    return TrioCase("sgda", {"x": data.x}, cfg, data.n, (2.0, DELTA))




def case_fermi() -> TrioCase:
    from dpfair_jax.algorithms import fermi

    data = _two_group_logistic()
    cfg = fermi.FermiConfig(model=models.logistic(input_dim=3), num_groups=2, steps=4, batch_size=12,
                            delta=DELTA)
    return TrioCase("fermi", data, cfg, data.n, (2.0, DELTA))




def case_pfld() -> TrioCase:
    from dpfair_jax.algorithms import pfld

    data = _two_group_logistic()
    cfg = pfld.config(model=models.logistic(input_dim=3), num_groups=2, steps=4, batch_size=12, delta=DELTA)
    return TrioCase("pfld", data, cfg, data.n, (2.0, DELTA))




def case_pfld_epoch() -> TrioCase:
    from dpfair_jax.algorithms import pfld_epoch

    data = _two_group_logistic()
    cfg = pfld_epoch.PFLDEpochConfig(model=models.logistic(input_dim=3), num_groups=2, epochs=2, batch_size=12,
                                     delta=DELTA)
    return TrioCase("pfld_epoch", data, cfg, data.n, (2.0, DELTA))




# ------------------------------------------------------------------------------- statistics family


def case_budget_tailoring() -> TrioCase:
    from dpfair_jax.algorithms import budget_tailoring as bt

    rng = np.random.default_rng(0)
    sizes = (30, 18)
    x = rng.normal(size=(sum(sizes), 2)).astype(np.float32)
    s = np.repeat([0, 1], sizes).astype(np.int32)
    y = (x @ np.array([1.0, -0.5]) + rng.normal(size=x.shape[0]) * (1 + s)).astype(np.float32)
    data = make_dataset(x, y, s, num_groups=2, num_classes=0)
    return TrioCase("budget_tailoring", data, bt.Config(steps=3, delta=DELTA), sizes, (2.0, DELTA))




def case_mean_estimation() -> TrioCase:
    from dpfair_jax.algorithms import mean_estimation as me

    rng = np.random.default_rng(0)
    sizes = (40, 25, 35)
    s = np.repeat(np.arange(3), sizes).astype(np.int32)
    x = (rng.normal(size=(s.size, 2)) + s[:, None]).astype(np.float32)
    config = me.MeanConfig(method="coinpress", num_groups=3, relation="add_remove", delta=DELTA)
    return TrioCase("mean_estimation", (x, s), config, sizes, (1.0, DELTA))




# ------------------------------------------------------------------------------- release family


def case_output_perturbation() -> TrioCase:
    from dpfair_jax.algorithms import output_perturbation as OP

    from dpfair_jax.data.preprocessing import bound_row_norms

    data = _two_group_logistic()
    data = data.replace(x=bound_row_norms(data.x, 1.0))  # rows within the default public radius 1
    config = OP.OutputPerturbationConfig(delta=DELTA)
    return TrioCase("output_perturbation", data, config, data.n, (1.0, DELTA))




def case_synthesis() -> TrioCase:
    from dpfair_jax.algorithms import synthesis as SY

    rng = np.random.default_rng(0)
    domains = (2, 3, 2)
    codes = np.stack([rng.integers(0, m, 40) for m in domains], 1).astype(np.int32)
    s = np.repeat([0, 1], 20).astype(np.int32)
    config = SY.SynthesisConfig(domains=domains, num_groups=2, delta=DELTA)
    return TrioCase("synthesis", (codes, s), config, 40, (1.0, DELTA))




def _grid(n: int = 50, m: int = 6, k: int = 2):
    from dpfair_jax.algorithms import reductions as R

    losses = np.random.default_rng(0).uniform(0.1, 0.6, size=(m, k)).astype(np.float32)
    problem = R.CGOO(R.sum_objective(k), R.bounded_group_loss(np.full(k, 0.3)), k)
    return R.GridData(losses, n), problem


def case_reductions_sampling() -> TrioCase:
    from dpfair_jax.algorithms import reductions as R

    data, problem = _grid()
    return TrioCase("reductions", data, R.SamplingConfig(problem, delta=DELTA), data.n, (1.0, DELTA))




def case_reductions_cgoo() -> TrioCase:
    from dpfair_jax.algorithms import reductions as R

    data, problem = _grid()
    return TrioCase("reductions", data, R.PrivateCGOOConfig(problem, steps=4, delta=DELTA), data.n, (2.0, DELTA))




CASES: dict[str, Callable[[], TrioCase]] = {
    "dpsgd": case_dpsgd,
    "mitigation": case_mitigation,
    "jagielski": case_jagielski,
    "jagielski_in": case_jagielski_in,
    "sgda": case_sgda,
    "fermi": case_fermi,
    "pfld": case_pfld,
    "pfld_epoch": case_pfld_epoch,
    "budget_tailoring": case_budget_tailoring,
    "mean_estimation": case_mean_estimation,
    "output_perturbation": case_output_perturbation,
    "synthesis": case_synthesis,
    "reductions/sampling": case_reductions_sampling,
    "reductions/cgoo": case_reductions_cgoo,
}
