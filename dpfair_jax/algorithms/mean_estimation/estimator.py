"""The stratified mean estimators as one algorithm: ``fit``, ``spend`` and ``calibrate``.

:class:`MeanConfig` holds the static choices (which estimator, the neighbouring relation, how the
group sizes are handled, the COINPRESS budget split); :class:`MeanHparams` the traced ones (the
privacy budget, the clip widths and centres); ``sizes`` are the per-group sizes (a tuple or array
of ``num_groups`` entries; the accounting only needs their number, since the strata are disjoint
and each is fitted with the full budget).

Group sizes (``config.counts``): ``"auto"`` uses the exact sizes under
``"replace_one_within_group"`` (public by that relation, the paper's setting) and Gaussian noisy
counts under ``"add_remove"`` and ``"replace_one"`` (a record may move to another stratum);
``"noisy"`` releases noisy counts under every relation. Noisy counts cost ``count_rho =
config.count_fraction x`` the estimator's own zCDP budget, charged on top of it (the rule of
:func:`~dpfair_jax.algorithms.mean_estimation.resolve_count_rho`).

Privacy: ``laplace`` with exact sizes is ``epsilon``-DP (pure); every other combination is
``(budget + count_rho)``-zCDP, converted at ``config.delta`` (:func:`spend`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.sampling import SamplingReport

from .clipped import stratified_gaussian_mean, stratified_laplace_mean
from .coinpress import REFERENCE_BETA, stratified_coinpress
from .groups import DEFAULT_COUNT_FRACTION, StratifiedEstimate
from .ledger import gaussian_privacy, laplace_privacy, stratified_privacy

__all__ = ["METHODS", "COUNTS", "MeanConfig", "MeanHparams", "MeanFit", "fit", "spend", "calibrate"]

METHODS = ("laplace", "gaussian", "coinpress")
COUNTS = ("auto", "noisy")


@dataclasses.dataclass(frozen=True)
class MeanConfig:
    """Static choices of a stratified mean estimate (hashable; not traced).

    ``method``: ``"laplace"`` (clipped Laplace mean, eqs. 2-3), ``"gaussian"`` (clipped Gaussian
    mean) or ``"coinpress"`` (StratCOINPRESS, Sec. 5). ``num_groups``: the number of strata.
    ``relation``: ``"replace_one_within_group"`` (one record replaced within its stratum; sizes
    public; a record moving to another stratum is not covered), ``"replace_one"`` (any
    replacement; noisy counts) or ``"add_remove"`` (noisy counts). ``counts``: ``"auto"`` or ``"noisy"`` (module docstring);
    ``count_fraction``: the count budget over the estimator's budget. ``split``: COINPRESS's
    per-step shares of ``rho`` (its length is the number of steps). ``clip_mode``, ``beta``:
    COINPRESS's (see :func:`stratified_coinpress`); ``variant``: the Laplace clip interval.
    ``delta``: the delta at which a zCDP spend is stated.
    """

    method: str = "coinpress"
    num_groups: int = 1
    relation: str = "replace_one_within_group"
    counts: str = "auto"
    count_fraction: float = DEFAULT_COUNT_FRACTION
    split: tuple[float, ...] = (0.25, 0.75)
    clip_mode: str = "fresh"
    beta: float = REFERENCE_BETA
    variant: str = "corrected"
    delta: float = 1e-6

    def validate(self) -> "MeanConfig":
        v.check_choice("method", self.method, METHODS)
        v.check_int("num_groups", self.num_groups, minimum=1)
        relation = rel.relation_name(self.relation)  # "swap" and unknown names refused here
        v.check_choice("counts", self.counts, COUNTS)
        v.check_positive("count_fraction", self.count_fraction)
        split = np.asarray(self.split, np.float64)
        if split.ndim != 1 or split.size == 0 or np.any(split <= 0) or not math.isclose(
                float(split.sum()), 1.0, rel_tol=1e-9):
            raise ValueError(f"split must be positive shares summing to 1, got {self.split!r}.")
        v.check_choice("clip_mode", self.clip_mode, ("fresh", "cumulative"))
        if not 0 < float(self.beta) < 1:
            raise ValueError(f"beta must lie in (0, 1), got {self.beta!r}.")
        v.check_choice("variant", self.variant, ("corrected", "paper"))
        v.check_delta(self.delta, "delta")
        return self if relation == self.relation else dataclasses.replace(self, relation=relation)

    @property
    def noisy_counts(self) -> bool:
        """Whether the group sizes are released as noisy counts."""
        return self.counts == "noisy" or not rel.within_group(self.relation)

    @property
    def pure(self) -> bool:
        """Whether the spend is pure epsilon-DP (the Laplace mean with exact sizes)."""
        return self.method == "laplace" and not self.noisy_counts


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MeanHparams:
    """Traced hyperparameters (each may be a JAX array, e.g. a grid under ``vmap``).

    ``rho``: zCDP budget of ``gaussian`` and ``coinpress`` (split over COINPRESS's steps by
    ``config.split``). ``epsilon``: the Laplace mean's budget. ``center`` (``[d]``, or ``[k, d]``
    for ``gaussian``) and ``radius``: the prior ball (COINPRESS) or clip centre (Gaussian).
    ``clip``: the Gaussian clip radius (scalar or ``[k]``). ``R``, ``gamma``: the Laplace clip
    half-width ``R + sqrt(log(n_g / gamma))``. ``weights``: public recombination weights ``[k]``
    (``None``: the sizes' fractions).
    """

    rho: Any = 0.5
    epsilon: Any = 1.0
    center: Any = 0.0
    radius: Any = 3.0
    clip: Any = 1.0
    R: Any = 1.0
    gamma: Any = 0.1
    weights: Any = None


class MeanFit(NamedTuple):
    """Result of :func:`fit`: the estimate and what it spent (arrays; traced-friendly).

    ``means``: the :class:`StratifiedEstimate`; ``rho``: the zCDP charged, the estimator's budget
    plus ``count_rho`` (for the pure Laplace path, ``epsilon^2 / 2``, the rho its spend records);
    ``count_rho``: the part spent on noisy counts (0 with exact sizes).
    """

    means: StratifiedEstimate
    rho: jax.Array
    count_rho: jax.Array
    report: Any = None  # privacy.sampling.SamplingReport: the estimator's releases per group


def _budget(config: MeanConfig, hparams: MeanHparams) -> Any:
    """The estimator's own zCDP budget (traced-friendly)."""
    if config.method == "laplace":
        return 0.5 * jnp.square(jnp.asarray(hparams.epsilon, jnp.float32))
    return jnp.asarray(hparams.rho, jnp.float32)


def _split_data(data: Any, num_groups: int) -> tuple[Any, Any]:
    if isinstance(data, Dataset):
        if data.mask is not None:
            raise ValueError("data.mask is set: the estimators use every row; drop padded rows first.")
        if data.num_groups != num_groups:
            raise ValueError(f"data.num_groups={data.num_groups} but config.num_groups={num_groups}.")
        return data.x, data.s
    if isinstance(data, tuple) and len(data) == 2:
        return data
    if num_groups != 1:
        raise ValueError(f"data must be (x, s) or a Dataset with group ids for num_groups={num_groups}.")
    return data, jnp.zeros((np.shape(data)[0],), jnp.int32)


@full_precision
def fit(key: jax.Array, data: Any, hparams: MeanHparams = MeanHparams(),
        config: MeanConfig = MeanConfig()) -> MeanFit:
    """The stratified mean of ``data`` (``(x, s)``, a ``Dataset`` (``x``, ``s``), or ``x`` alone
    for one group) by ``config.method``: :func:`stratified_laplace_mean`,
    :func:`stratified_gaussian_mean` or :func:`stratified_coinpress` with the sizes and count
    budget of ``config``. Pure in ``key`` and the traced fields of ``hparams``.

    Privacy: :func:`spend` (``config``, the sizes, ``hparams``) states what this spends.
    """
    config = config.validate()
    x, s = _split_data(data, config.num_groups)
    k = config.num_groups
    budget = _budget(config, hparams)
    count_rho = config.count_fraction * budget if config.noisy_counts else None
    steps = 1
    if config.method == "laplace":
        means = stratified_laplace_mean(key, x, s, k, R=hparams.R, gamma=hparams.gamma,
                                        epsilon=hparams.epsilon, weights=hparams.weights,
                                        relation=config.relation, variant=config.variant,
                                        count_rho=count_rho)
    elif config.method == "gaussian":
        means = stratified_gaussian_mean(key, x, s, k, center=hparams.center, clip=hparams.clip,
                                         rho=hparams.rho, weights=hparams.weights,
                                         relation=config.relation, count_rho=count_rho)
    else:
        rhos = budget * jnp.asarray(config.split, jnp.float32)
        steps = int(rhos.shape[0])  # CoinPress iterations run (one per budget share)
        means = stratified_coinpress(key, x, s, k, center=hparams.center, radius=hparams.radius,
                                     rhos=rhos, weights=hparams.weights, relation=config.relation,
                                     clip_mode=config.clip_mode, beta=config.beta,
                                     count_rho=count_rho)
    c = jnp.zeros_like(budget) if count_rho is None else count_rho
    report = SamplingReport(steps=steps, releases=(("noisy_counts", 1),) if count_rho is not None else ())
    return MeanFit(means, budget + c, c, report)


def _check_sizes(config: MeanConfig, sizes: Any) -> None:
    if np.ndim(sizes) > 1 or np.size(sizes) != config.num_groups:
        raise ValueError(f"sizes must hold one size per group ({config.num_groups}), got {sizes!r}.")
    v.check_positive("sizes", sizes, allow_zero=True)




def spend(config: MeanConfig, sizes: Any, hparams: MeanHparams) -> acc.PrivacySpend:
    """The spend of :func:`fit` with these arguments: the record of
    :func:`laplace_privacy`, :func:`gaussian_privacy` or :func:`stratified_privacy` (pure
    ``epsilon`` for the Laplace mean with exact sizes; otherwise the budget plus the count budget
    in zCDP, converted at ``config.delta``). ``sizes``: the ``num_groups`` group sizes."""
    config = config.validate()
    _check_sizes(config, sizes)
    k, relation, delta = config.num_groups, config.relation, config.delta
    if config.method == "laplace":
        eps = v.host_float("epsilon", hparams.epsilon)
        count_rho = config.count_fraction * (0.5 * eps ** 2) if config.noisy_counts else None
        return laplace_privacy(eps, delta, num_groups=k, count_rho=count_rho, relation=relation)
    rho = v.host_float("rho", hparams.rho)
    count_rho = config.count_fraction * rho if config.noisy_counts else None
    if config.method == "gaussian":
        return gaussian_privacy(rho, delta, num_groups=k, count_rho=count_rho, relation=relation)
    rhos = rho * np.asarray(config.split, np.float64)
    return stratified_privacy(rhos, k, delta, count_rho=count_rho, relation=relation)


def calibrate(config: MeanConfig, sizes: Any, target: tuple[float, float],
              hparams: MeanHparams = MeanHparams()) -> MeanHparams:
    """``hparams`` with the budget field (``epsilon`` for ``laplace``, ``rho`` otherwise) set so
    that ``spend(config, sizes, result).epsilon <= target[0]``, within 1e-9 relative.

    ``target = (epsilon, delta)``: ``delta = 0`` only for the pure Laplace path; otherwise
    ``delta`` must equal ``config.delta`` (the delta the spend is stated at). The zCDP total
    ``dp_to_rho(epsilon, delta)`` is shared as ``budget (1 + count_fraction)`` with noisy counts.
    """
    config = config.validate()
    _check_sizes(config, sizes)
    eps, delta = _check_target(config, target)
    if config.pure:
        return dataclasses.replace(hparams, epsilon=eps)
    total = acc.dp_to_rho(eps, delta)
    budget = total / (1.0 + config.count_fraction) if config.noisy_counts else total

    def with_budget(b: float) -> MeanHparams:
        if config.method == "laplace":
            return dataclasses.replace(hparams, epsilon=math.sqrt(2.0 * b))
        return dataclasses.replace(hparams, rho=b)

    out = with_budget(budget)
    while spend(config, sizes, out).epsilon > eps:  # float rounding of the shares: step down
        budget *= 1.0 - 1e-12
        out = with_budget(budget)
    return out


def _check_target(config: MeanConfig, target: Any) -> tuple[float, float]:
    if not isinstance(target, tuple) or len(target) != 2:
        raise ValueError(f"target must be an (epsilon, delta) tuple, got {target!r}.")
    eps, delta = target
    v.check_epsilon(eps, "target epsilon")
    delta = v.as_float("target delta", delta)
    if delta == 0.0:
        if not config.pure:
            raise ValueError("target delta = 0 (pure DP) is reachable only by method='laplace' with "
                             "exact sizes (relation='replace_one_within_group', counts='auto'); this config's "
                             f"spend is zCDP, stated at config.delta={config.delta}.")
    elif not config.pure and delta != float(config.delta):
        raise ValueError(f"target delta={delta} differs from config.delta={config.delta}, the delta "
                         "the spend is stated at; set config.delta to the target's.")
    return float(eps), delta
