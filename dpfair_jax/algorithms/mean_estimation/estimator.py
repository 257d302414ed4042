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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax._validation import is_traced
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.sampling import SamplingReport
from dpfair_jax.privacy.zcdp_noise import pure_dp_epsilon, pure_dp_rho

from .._trio import FitResult, hparams_pytree
from .clipped import _gaussian_run, _laplace_run
from .coinpress import REFERENCE_BETA, _check_coinpress, _coinpress_run
from .groups import DEFAULT_COUNT_FRACTION, _check_data, _check_gamma, _check_weights
from .ledger import _gaussian_spend, _laplace_spend, _stratified_spend

__all__ = ["METHODS", "COUNTS", "MeanConfig", "MeanHparams", "fit", "spend", "calibrate"]

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


@hparams_pytree
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

    def validate(self, config: "MeanConfig | None" = None) -> "MeanHparams":
        """Check the fields ``config.method`` uses (every field without a config); traced values
        are skipped."""
        method = None if config is None else config.method
        if method in (None, "laplace"):
            v.check_epsilon(self.epsilon)
            v.check_positive("R", self.R, allow_zero=True)
            _check_gamma(self.gamma)
        if method != "laplace":
            v.check_rho(self.rho)
            v.check_finite("center", self.center)
        if method in (None, "gaussian"):
            v.check_clip_norm(self.clip, "clip")
        if method in (None, "coinpress"):
            v.check_positive("radius", self.radius)
        if config is not None:
            _check_weights(self.weights, config.num_groups)
        return self


def _budget(config: MeanConfig, hparams: MeanHparams) -> Any:
    """The estimator's own zCDP budget (traced-friendly)."""
    if config.method == "laplace":
        return pure_dp_rho(hparams.epsilon)
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
def fit(key: jax.Array, data: Any, hparams: MeanHparams, config: MeanConfig) -> FitResult:
    """The stratified mean of ``data`` (``(x, s)``, a ``Dataset`` (``x``, ``s``), or ``x`` alone
    for one group) by ``config.method``: the clipped Laplace mean (eqs. 2-3), the clipped Gaussian
    mean or StratCOINPRESS (Sec. 5), with the sizes and count budget of ``config``. Pure in
    ``key`` and the traced fields of ``hparams``.

    Returns a :class:`FitResult`: ``params`` the :class:`StratifiedEstimate` (all of it released:
    the recombined ``estimate``, the ``group_means``, the ``weights``, the ``sizes`` (exact and
    public under ``"replace_one_within_group"`` with ``counts="auto"``, else the noisy counts),
    ``present`` and the final ``radius``, each a function of the noisy releases and public
    values); ``diagnostics`` ``{"rho", "count_rho"}``: the zCDP charged (the estimator's budget
    plus ``count_rho``; for the pure Laplace path ``epsilon^2 / 2``, the rho its spend records)
    and the part spent on noisy counts (0 with exact sizes), public functions of the
    hyperparameters; ``spend`` is :func:`spend` (``None`` when the budget is traced);
    ``report`` the releases.

    Privacy: :func:`spend` (``config``, the sizes, ``hparams``) states what this spends.
    """
    config = config.validate()
    hparams.validate(config)
    v.check_threefry_key(key)
    x, s = _split_data(data, config.num_groups)
    k = config.num_groups
    _check_data(x, s, k)
    relation = config.relation
    budget = _budget(config, hparams)
    count_rho = config.count_fraction * budget if config.noisy_counts else None
    steps = 1
    if config.method == "laplace":
        means = _laplace_run(key, x, s, k, R=hparams.R, gamma=hparams.gamma, epsilon=hparams.epsilon,
                             weights=hparams.weights, relation=relation, variant=config.variant,
                             count_rho=count_rho)
    elif config.method == "gaussian":
        means = _gaussian_run(key, x, s, k, center=hparams.center, clip=hparams.clip, rho=hparams.rho,
                              weights=hparams.weights, relation=relation, count_rho=count_rho)
    else:
        rhos = budget * jnp.asarray(config.split, jnp.float32)
        steps = int(rhos.shape[0])  # CoinPress iterations run (one per budget share)
        means = _coinpress_run(key, x, s, k, center=hparams.center, radius=hparams.radius, rhos=rhos,
                               weights=hparams.weights, relation=relation, clip_mode=config.clip_mode,
                               beta=config.beta, count_rho=count_rho)
    c = jnp.zeros_like(budget) if count_rho is None else count_rho
    report = SamplingReport(steps=steps, releases=(("noisy_counts", 1),) if count_rho is not None else ())
    traced = is_traced(hparams.epsilon if config.method == "laplace" else hparams.rho)
    record = None if traced else _spend(config, hparams)
    return FitResult(means, {"rho": budget + c, "count_rho": c}, record, report)


def _check_sizes(config: MeanConfig, sizes: Any) -> None:
    if np.ndim(sizes) > 1 or np.size(sizes) != config.num_groups:
        raise ValueError(f"sizes must hold one size per group ({config.num_groups}), got {sizes!r}.")
    v.check_positive("sizes", sizes, allow_zero=True)




def spend(config: MeanConfig, sizes: Any, hparams: MeanHparams) -> acc.PrivacySpend:
    """The spend of :func:`fit` with these arguments: pure ``epsilon`` for the Laplace mean with
    exact sizes; otherwise the estimator's budget plus the count budget in zCDP (an
    ``accounting.ZcdpLedger``: one charge per COINPRESS step or one for the clipped means, each
    covering the disjoint strata at once by parallel composition, plus ``group_counts``),
    converted at ``config.delta``. ``sizes``: the ``num_groups`` group sizes.

    Privacy: under ``config.relation`` (``"replace_one_within_group"``: sizes public, a record
    moving to another stratum not covered; otherwise the sizes released as noisy counts, paid for).
    """
    config = config.validate()
    _check_sizes(config, sizes)
    return _spend(config, hparams)


def _spend(config: MeanConfig, hparams: MeanHparams) -> acc.PrivacySpend:
    k, relation, delta = config.num_groups, config.relation, config.delta
    if config.method == "laplace":
        eps = v.host_float("epsilon", hparams.epsilon)
        count_rho = config.count_fraction * (0.5 * eps ** 2) if config.noisy_counts else None
        return _laplace_spend(eps, delta, num_groups=k, count_rho=count_rho, relation=relation)
    rho = v.host_float("rho", hparams.rho)
    count_rho = config.count_fraction * rho if config.noisy_counts else None
    if config.method == "gaussian":
        return _gaussian_spend(rho, delta, num_groups=k, count_rho=count_rho, relation=relation)
    rhos = rho * np.asarray(config.split, np.float64)
    return _stratified_spend(rhos, k, delta, count_rho=count_rho, relation=relation)


def calibrate(config: MeanConfig, sizes: Any, target: tuple[float, float], *,
              hparams: MeanHparams | None = None) -> MeanHparams:
    """``hparams`` (default ``MeanHparams()``) with the budget field (``epsilon`` for ``laplace``,
    ``rho`` otherwise) set so that ``spend(config, sizes, result).epsilon <= target[0]``, within
    1e-9 relative.

    ``target = (epsilon, delta)`` with ``delta = config.delta`` (``accounting.calibration_target``),
    or ``delta = 0`` for the pure Laplace path (exact sizes), whose spend is pure epsilon-DP. The
    zCDP total ``dp_to_rho(epsilon, delta)`` is shared as ``budget (1 + count_fraction)`` with
    noisy counts.

    Privacy: the returned hparams make :func:`fit` ``(epsilon, delta)``-DP under ``config.relation``.
    """
    config = config.validate()
    _check_sizes(config, sizes)
    hparams = MeanHparams() if hparams is None else hparams
    if config.pure:
        eps = _pure_target(target, config)
        return dataclasses.replace(hparams, epsilon=eps)
    eps, delta = acc.calibration_target(target, config.delta)
    total = acc.dp_to_rho(eps, delta)
    budget = total / (1.0 + config.count_fraction) if config.noisy_counts else total

    def with_budget(b: float) -> MeanHparams:
        if config.method == "laplace":
            return dataclasses.replace(hparams, epsilon=pure_dp_epsilon(b))
        return dataclasses.replace(hparams, rho=b)

    out = with_budget(budget)
    while spend(config, sizes, out).epsilon > eps:  # float rounding of the shares: step down
        budget *= 1.0 - 1e-12
        out = with_budget(budget)
    return out


def _pure_target(target: Any, config: MeanConfig) -> float:
    """The epsilon of a target for the pure Laplace path: ``(epsilon, 0)`` (pure DP) or
    ``(epsilon, config.delta)`` (the shared check, ``accounting.calibration_target``)."""
    if isinstance(target, tuple) and len(target) == 2 and target[1] == 0:
        v.check_epsilon(target[0], "target epsilon")
        return float(target[0])
    return acc.calibration_target(target, config.delta)[0]
