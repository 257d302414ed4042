"""Stratified private synthetic data (paper 003, Sec. 6, Figs. 4, 5, 7).

Two pieces:

- A small vectorized JAX **marginal synthesizer** for categorical tables (integer codes): all
  one-way and two-way marginals are measured at once as the Gram matrix ``O^T O`` of the one-hot
  rows plus symmetric Gaussian noise; a maximum spanning tree of the noisy mutual informations
  (post-processing) orders the columns, and rows are sampled root-first from the noisy one-way
  marginal and then each column from its noisy conditional given its tree parent
  (``mode="tree"``, an MST-like model without graphical-model inference) or from one-way
  marginals only (``mode="independent"``). Strata are native: with group ids ``s`` every stratum
  gets its own noisy marginals and tree in one program (segment weights, ``num_groups`` static),
  and sampled rows carry a stratum id.
- :class:`StratifiedSynthesizer`: fits **any** private synthesizer with ``fit(df)``/``sample(n)``
  per stratum (e.g. smartnoise-synth's MST: :func:`mst_factory`, the ``synth`` extra, imported
  lazily) and samples in proportion to the strata (paper: ``D_i`` w.p. ``|G_i| / sum_j |G_j|``).

Privacy (marginal synthesizer): one record changes ``d(d+1)/2`` entries of the upper triangle of
``O^T O`` by 1 (add/remove), so the Gram matrix has L2 sensitivity ``sqrt(d(d+1)/2)`` and noise
``sigma = sqrt(d(d+1)/2) / sqrt(2 rho)`` gives ``rho``-zCDP; the tree, the conditionals and the
samples are post-processing. Strata are disjoint, so fitting every stratum with the full ``rho``
is ``rho``-zCDP overall (parallel composition). The **stratum proportions** used for sampling
are the exact private counts in the paper's code (not private: pass public ``proportions`` or use
``count_rho`` for noisy counts, :func:`stratum_counts`); the study
(:func:`dpfair_jax.studies.synthesis.synthesis_study`) releases noisy counts with a share of the
budget (:data:`COUNT_FRACTION`, charged in :func:`spend`), and the paper's dropping of
strata below ``0.001 n`` is likewise a non-private decision (not done here).

The marginal synthesizer as one algorithm (the kit's shape): :func:`fit` ``(key, codes,
hparams, config)`` fits the strata's marginals with ``(1 - count_fraction) rho`` and releases the
noisy stratum counts with ``count_fraction rho`` (:class:`SynthesisConfig`,
:class:`SynthesisHparams`); :func:`spend` states the run's zCDP ledger and :func:`calibrate` sets
``rho`` for a target (epsilon, delta).

Layout: :mod:`.marginals` (the synthesizer and the noisy counts), :mod:`.synthesizers`
(wrappers for the study); this module holds the trio.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy.sampling import SamplingReport
from dpfair_jax.algorithms._trio import FitResult, hparams_pytree, is_traced
from dpfair_jax.algorithms.synthesis.marginals import (
    CategoricalTable,
    MarginalModel,
    fit_marginal_synthesizer,
    marginal_sigma,
    sample_marginal_synthesizer,
    stratum_counts,
    stratum_proportions,
)
from dpfair_jax.algorithms.synthesis.smartnoise import mst_factory
from dpfair_jax.algorithms.synthesis.synthesizers import (
    JaxMarginalSynthesizer,
    StratifiedSynthesizer,
)


__all__ = [
    "CategoricalTable",
    "MarginalModel",
    "fit_marginal_synthesizer",
    "sample_marginal_synthesizer",
    "marginal_sigma",
    "stratum_proportions",
    "StratifiedSynthesizer",
    "JaxMarginalSynthesizer",
    "mst_factory",
    "stratum_counts",
    "COUNT_FRACTION",
    "SynthesisConfig",
    "SynthesisHparams",
    "SynthesisRelease",
    "fit",
    "spend",
    "calibrate",
]


# Stratified and vanilla runs of the study release noisy stratum counts (sampling proportions and
# the number of synthetic rows) with this fraction of rho; the synthesizers get the rest.
COUNT_FRACTION = 0.1


# ------------------------------------------------------------------------------------------------
# fit / spend / calibrate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SynthesisConfig:
    """Static choices of a marginal-synthesizer run (add/remove neighbours: one row).

    ``domains``: category count per column (public schema). ``num_groups``: the strata (public
    values). ``mode``: ``"tree"`` or ``"independent"``. ``counts``: ``"noisy"`` releases the
    stratum counts (sampling proportions and size) as Gaussian noisy counts with
    ``count_fraction`` of ``rho``; ``"none"`` releases none (sample with public proportions).
    ``delta``: the delta at which the zCDP spend is stated.
    """

    domains: tuple[int, ...]
    num_groups: int = 1
    mode: str = "tree"
    counts: str = "noisy"
    count_fraction: float = COUNT_FRACTION
    delta: float = 1e-9

    def validate(self) -> "SynthesisConfig":
        if not isinstance(self.domains, tuple) or not self.domains:
            raise ValueError(f"domains must be a non-empty tuple of category counts, got {self.domains!r}.")
        for j, m in enumerate(self.domains):
            v.check_int(f"domains[{j}]", m, minimum=1)
        v.check_int("num_groups", self.num_groups, minimum=1)
        v.check_choice("mode", self.mode, ("tree", "independent"))
        v.check_choice("counts", self.counts, ("noisy", "none"))
        if self.counts == "noisy" and not 0.0 < float(self.count_fraction) < 1.0:
            raise ValueError(f"count_fraction must lie in (0, 1), got {self.count_fraction!r}.")
        v.check_delta(self.delta, "delta")
        return self

    @property
    def fraction(self) -> float:
        """The share of ``rho`` spent on the noisy counts (0 without them)."""
        return float(self.count_fraction) if self.counts == "noisy" else 0.0


@hparams_pytree
class SynthesisHparams:
    """``rho``: the run's total zCDP budget (marginals plus the noisy counts)."""

    rho: Any = 1.0

    def validate(self) -> "SynthesisHparams":
        if not is_traced(self.rho):
            v.check_rho(self.rho, "hparams.rho")
        return self


class SynthesisRelease(NamedTuple):
    """The release of :func:`fit` (its ``params``): the fitted ``model``, the noisy stratum
    ``counts`` (clamped at 0; ``None`` with ``counts="none"``) and ``proportions`` (the counts
    normalised, the sampling proportions; ``None`` likewise). Sample with
    :func:`sample_marginal_synthesizer`."""

    model: MarginalModel
    counts: np.ndarray | None
    proportions: np.ndarray | None


def _rho_split(config: SynthesisConfig, rho: float) -> tuple[float, float]:
    f = config.fraction
    return (1.0 - f) * rho, f * rho


def fit(key: jax.Array, data: Any, hparams: SynthesisHparams, config: SynthesisConfig) -> FitResult:
    """Fit the marginal synthesizer on ``data`` (codes ``[n, d]``, or ``(codes, s)`` with stratum
    ids) with ``(1 - count_fraction) rho`` per stratum and release the noisy stratum counts with
    ``count_fraction rho`` (keys: ``key`` for the marginals, ``fold_in(key, 2)`` for the counts,
    as the study). The spanning trees are computed on the host, so ``rho`` is a host number.

    Returns :class:`~dpfair_jax.algorithms.FitResult`: ``params`` the :class:`SynthesisRelease`
    (all of it released, covered by the spend); ``diagnostics`` empty; ``spend`` = :func:`spend`;
    ``report``: one synthesizer fit (plus the noisy counts).

    Privacy: ``rho``-zCDP under add/remove of one row (:func:`spend`).
    """
    config = config.validate()
    codes, s = data if isinstance(data, tuple) else (data, None)
    rho = _host_rho(hparams)
    n = int(np.shape(codes)[0])
    rho_fit, count_rho = _rho_split(config, rho)
    if s is None:
        s = np.zeros(np.shape(codes)[0], np.int32)
    model = fit_marginal_synthesizer(key, codes, config.domains, rho_fit, s=s,
                                     num_groups=config.num_groups, mode=config.mode)
    report = SamplingReport(steps=1)
    recorded = _spend(config, rho)
    if config.counts == "none":
        return FitResult(SynthesisRelease(model, None, None), {}, recorded, report)
    counts = stratum_counts(s, config.num_groups, key=jax.random.fold_in(key, 2), count_rho=count_rho)
    props = counts / counts.sum() if counts.sum() > 0 else np.full(config.num_groups, 1.0 / config.num_groups)
    return FitResult(SynthesisRelease(model, counts, props), {}, recorded,
                     report.with_releases(("stratum_counts", 1)))


def _host_rho(hparams: SynthesisHparams) -> float:
    if is_traced(hparams.rho) or np.ndim(hparams.rho) != 0:
        raise ValueError(f"hparams.rho must be one host number, got shape {np.shape(hparams.rho)}.")
    v.check_rho(hparams.rho, "hparams.rho")
    return float(hparams.rho)


def _check_sizes(config: SynthesisConfig, sizes: Any) -> None:
    if np.ndim(sizes) == 0:
        v.check_int("sizes", sizes, minimum=1)
    elif np.ndim(sizes) != 1 or np.size(sizes) != config.num_groups:
        raise ValueError(f"sizes must be n or one size per stratum ({config.num_groups}), got {sizes!r}.")


def spend(config: SynthesisConfig, sizes: Any, hparams: SynthesisHparams) -> acc.PrivacySpend:
    """The spend of :func:`fit`: the ledger ``marginals`` (``(1 - count_fraction) rho``, parallel
    over the strata) plus ``stratum_counts`` (``count_fraction rho``), converted at
    ``config.delta`` (CKS), add/remove. ``sizes``: ``n`` or the per-stratum sizes (the
    accounting needs neither: the strata are disjoint)."""
    config = config.validate()
    _check_sizes(config, sizes)
    return _spend(config, _host_rho(hparams))


def _spend(config: SynthesisConfig, rho: float) -> acc.PrivacySpend:
    rho_fit, count_rho = _rho_split(config, rho)
    ledger = acc.ZcdpLedger()
    ledger.charge(f"marginals (parallel over {config.num_groups} strata)", rho_fit)
    if count_rho > 0:
        ledger.charge("stratum_counts", count_rho)
    notes = (f"marginal synthesizer with {1 - config.fraction:g} rho, strata by parallel composition"
             + (f"; stratum proportions and counts from Gaussian noisy counts with "
                f"{config.fraction:g} rho" if count_rho > 0 else "; no stratum counts released")
             + "; category domains and the strata's values taken as public (the data's schema)")
    return ledger.to_spend(config.delta, relation="add_remove", notes=notes)


def calibrate(config: SynthesisConfig, sizes: Any, target: tuple[float, float], *,
              hparams: SynthesisHparams | None = None) -> SynthesisHparams:
    """``hparams`` (default ``SynthesisHparams()``) with ``rho = dp_to_rho(epsilon, delta)`` (CKS)
    for ``target = (epsilon, delta)``, so that ``spend(...).epsilon <= epsilon``; ``delta`` must
    equal ``config.delta`` (:func:`~dpfair_jax.privacy.accounting.calibration_target`)."""
    config = config.validate()
    _check_sizes(config, sizes)
    eps, delta = acc.calibration_target(target, config.delta)
    hparams = SynthesisHparams() if hparams is None else hparams
    rho = acc.dp_to_rho(eps, delta)
    out = dataclasses.replace(hparams, rho=rho)
    while _spend(config, rho).epsilon > eps:  # float rounding of the split: step down
        rho *= 1.0 - 1e-12
        out = dataclasses.replace(hparams, rho=rho)
    return out
