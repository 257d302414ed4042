"""One small problem per algorithm (per algorithm of a module), for the trio contract test
(tests/test_trio_contract.py): ``CASES[name]() -> TrioCase``. Each case is built with the public
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




# ------------------------------------------------------------------------------- min-max family


def case_sgda() -> TrioCase:
    raise NotImplementedError("sgda: fill in with the trio")




def case_fermi() -> TrioCase:
    raise NotImplementedError("fermi: fill in with the trio")




def case_pfld() -> TrioCase:
    raise NotImplementedError("pfld: fill in with the trio")




def case_pfld_epoch() -> TrioCase:
    raise NotImplementedError("pfld_epoch: fill in with the trio")




# ------------------------------------------------------------------------------- statistics family


def case_budget_tailoring() -> TrioCase:
    raise NotImplementedError("budget_tailoring: fill in with the trio")




def case_mean_estimation() -> TrioCase:
    raise NotImplementedError("mean_estimation: fill in with the trio")




# ------------------------------------------------------------------------------- release family


def case_output_perturbation() -> TrioCase:
    raise NotImplementedError("output_perturbation: fill in with the trio")




def case_synthesis() -> TrioCase:
    raise NotImplementedError("synthesis: fill in with the trio")




def case_reductions_sampling() -> TrioCase:
    raise NotImplementedError("reductions (Algorithm 1): fill in with the trio")




def case_reductions_cgoo() -> TrioCase:
    raise NotImplementedError("reductions (Algorithm 2): fill in with the trio")




CASES: dict[str, Callable[[], TrioCase]] = {
    "dpsgd": case_dpsgd,
    "mitigation": case_mitigation,
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
