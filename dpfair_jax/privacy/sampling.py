"""Batch sampling whose accounting is known: Poisson (padded, masked), fixed-size and shuffled.

* :func:`poisson_batch` -- every example joins the batch independently with probability ``q``.
  Shapes must be static, so the sample is padded (or truncated) to ``max_batch_size`` rows with a
  0/1 mask. Accounted as the Poisson-subsampled Gaussian (``sampling="poisson"``, add/remove-one,
  ``q = batch_size / n`` with ``n`` public, see "Dataset size" below).
  Truncation (more than ``max_batch_size`` examples drawn) changes the mechanism; it is handled by
  choosing ``max_batch_size`` with :func:`max_batch_size_for` so that its probability is tiny, and
  charging it to delta with :func:`truncation_delta` (the truncated run differs from the exact one
  with probability at most ``T * P(Binomial(n+1, q) > B)``, so ``(eps, delta)``-DP for the exact
  mechanism gives ``(eps, delta + (1 + e^eps) T P(Bin(n+1, q) > B))``-DP for the truncated one).
  :func:`poisson_sample` also reports the drawn size, so a run can drop-and-report overflow steps.
* :func:`fixed_size_batch` -- each step an independent uniformly random subset of exactly
  ``batch_size`` rows. Accounted exactly as sampling without replacement
  (``sampling="without_replacement"``, replace-one neighbours).
* :func:`shuffled_batches` -- one permutation per epoch cut into disjoint batches (what most code
  does). Accounted *without* amplification (replace-one, sensitivity ``2 C``): a record is in at
  most ``k = ceil(steps / steps_per_epoch)`` batches, so the run is at most ``k`` composed
  Gaussians (:func:`dpfair_jax.privacy.accounting.shuffled_event`, exact epsilon from
  ``accounting.participation_distribution(steps, "shuffle", ...)`` with
  ``accounting.membership_visible_epsilon``). The common convention of accounting shuffled epochs
  as sampling without replacement is not a theorem (an adversary who can tell which batch holds
  the record sees its ``k`` Gaussians in full), so the kit does not use it; Poisson or
  :func:`fixed_size_batch` give amplification with a proof.

Dataset size. Under add/remove-one the kit computes the Poisson rate as ``q = batch_size / n``
from the size ``n`` of the dataset it is given, and ``n`` differs by one between neighbours. The
kit treats ``n`` as public: the guarantee is for the rate ``q`` the run used, and the spend does
not charge for revealing ``n`` (the convention of Opacus, whose sample rate is
``batch_size / len(dataset)``). If ``n`` must stay private, release a noisy ``n`` and charge it,
or fix ``q`` in advance from a public number. Under replace-one (fixed-size and shuffled
batches) both neighbours have the same ``n``.

:func:`accounting_for` returns the ``sampling=`` name, sample rate and neighbouring relation to pass
to :mod:`dpfair_jax.privacy.accounting` for each scheme.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy.relations import replace_factor

__all__ = [
    "PoissonSample",
    "poisson_sample",
    "max_poisson_n",
    "poisson_batch",
    "fixed_size_batch",
    "shuffled_batches",
    "steps_per_epoch",
    "poisson_truncation_probability",
    "max_batch_size_for",
    "truncation_delta",
    "truncated_spend",
    "calibration_delta",
    "SamplingSpec",
    "accounting_for",
    "SAMPLING_SCHEMES",
    "SamplingReport",
]

SAMPLING_SCHEMES = ("poisson", "fixed_size", "shuffle")


@dataclasses.dataclass(frozen=True)
class SamplingReport:
    """What a ``fit`` ran, read from the program it executed (not from its config): ``steps``, the
    number of composed sampled steps (a ``lax.scan``'s length; for unsampled algorithms the number
    of composed releases of the main mechanism); ``sampler``, the sampler called (``"poisson"``,
    ``"fixed_size"``, ``"shuffle"`` or ``None``); ``sample_rate``, the rate passed to it (Poisson:
    ``batch_size / n``; fixed-size: ``batch_size / n``); ``batch_width``, the rows each step
    processes (the Poisson padding, or the batch size); ``epochs``, the shuffled permutations drawn;
    ``dataset_size``, the ``n`` sampled from; ``releases``, other releases as ``(name, count)``
    pairs (e.g. ``("noisy_histogram", 1)``).

    Static facts (a pytree without leaves), so it passes through ``jit``/``vmap``; compare it with
    the ``DpEvent`` of the algorithm's ``spend`` (tests/privacy/test_fit_reports_match_spend.py).
    """

    steps: int
    sampler: str | None = None
    sample_rate: float | None = None
    batch_width: int | None = None
    epochs: int | None = None
    dataset_size: int | None = None
    releases: tuple = ()

    def with_releases(self, *pairs: tuple[str, int]) -> "SamplingReport":
        """This report with ``pairs`` appended to :attr:`releases`."""
        return dataclasses.replace(self, releases=tuple(self.releases) + tuple(pairs))


jax.tree_util.register_dataclass(
    SamplingReport, data_fields=[],
    meta_fields=["steps", "sampler", "sample_rate", "batch_width", "epochs", "dataset_size", "releases"])


class PoissonSample(NamedTuple):
    """A padded Poisson sample: ``indices [B]``, ``mask [B]`` (1 = real row), the drawn size
    (before truncation) and whether it was truncated."""

    indices: jax.Array
    mask: jax.Array
    num_sampled: jax.Array
    truncated: jax.Array


def _index_dtype() -> Any:
    """int64 where jax's x64 mode is on, else int32: the dtype positions accumulate in."""
    return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32


def max_poisson_n() -> int:
    """Largest ``n`` :func:`poisson_sample` accepts: ``n + 1`` (the cap of a gap, and of a
    position) must be exact in the index dtype (int32: ``2^31 - 2``; int64 under x64:
    ``2^63 - 2``)."""
    return int(jnp.iinfo(_index_dtype()).max) - 1


def _check_poisson(n, sample_rate, max_batch_size) -> tuple[int, int]:
    n = v.check_int("n", n, minimum=1)
    v.check_sample_rate(sample_rate)
    max_batch_size = v.check_int("max_batch_size", max_batch_size, minimum=1)
    if max_batch_size > n:
        raise ValueError(f"max_batch_size ({max_batch_size}) must be <= n ({n}).")
    limit = max_poisson_n()
    if n > limit:
        raise ValueError(
            f"n ({n}) is beyond the exact range of the {jnp.dtype(_index_dtype()).name} positions of "
            f"poisson_sample (n + 1 must be <= {limit + 1}); enable jax x64 "
            "(jax.config.update('jax_enable_x64', True)) for int64 positions.")
    return n, max_batch_size


def _rate_down(sample_rate: Any, dtype: Any) -> jax.Array:
    """``sample_rate`` in ``dtype``, rounded DOWN (the largest value of ``dtype`` <= the rate), so the
    rate the sampler uses never exceeds the rate the accountant is given. Traced rates are already
    in a JAX dtype and are only cast (a cast to a wider float is exact)."""
    if isinstance(sample_rate, jax.core.Tracer):
        return jnp.asarray(sample_rate).astype(dtype)
    q = np.asarray(sample_rate, np.float64)
    qd = q.astype(np.dtype(dtype))
    qd = np.where(qd.astype(np.float64) > q, np.nextafter(qd, np.zeros_like(qd)), qd)
    return jnp.asarray(qd, dtype)


def _uniform_fine(key: jax.Array, shape: tuple, dtype: Any) -> jax.Array:
    """Uniforms ``v`` in ``[0, 1)`` with a fine grid near 0, from two words of ``p`` random bits
    each (``p`` = the float's significand width: 24 for float32, 53 for float64); see
    :func:`_uniform_from_bits`."""
    p = jnp.finfo(dtype).nmant + 1
    udt, width = (jnp.uint64, 64) if jnp.dtype(dtype) == jnp.dtype(jnp.float64) else (jnp.uint32, 32)
    bits = jax.random.bits(key, (2, *shape), udt) >> (width - p)
    return _uniform_from_bits(bits[0], bits[1], dtype)


def _uniform_from_bits(hi: jax.Array, lo: jax.Array, dtype: Any) -> jax.Array:
    """``v = hi 2^-p + lo 2^-2p`` for ``p``-bit integers ``hi``, ``lo`` (exact in ``dtype`` before the
    sum's rounding, which is monotone): ``P(v < x)`` is ``x`` to a relative ``2^-p`` for every
    ``x >= 2^-p`` and to an absolute ``2^-2p`` below. Sums rounded up to 1 are held at the largest
    float below 1, so ``log1p(-v)`` stays finite."""
    p = jnp.finfo(dtype).nmant + 1
    scale = jnp.asarray(2.0**-p, dtype)
    u = hi.astype(dtype) * scale + lo.astype(dtype) * (scale * scale)
    return jnp.minimum(u, jnp.asarray(1.0 - 2.0**-p, dtype))


def _gaps_from_uniform(u: jax.Array, log1mq: jax.Array, cap: int, idt: Any) -> jax.Array:
    """Geometric(q) gaps ``floor(log1p(-v) / log1p(-q)) + 1`` (support 1, 2, ...; inversion of
    ``P(G > k) = (1 - q)^k``), capped at ``cap`` and returned in the integer dtype ``idt``.
    ``q = 1`` (``log1p(-q) = -inf``) gives 1. Gaps at or above the largest float ``<= cap`` are the
    cap (a gap that large ends the sample; below ``2^p`` the float is exact)."""
    g = jnp.floor(jnp.log1p(-u) / log1mq) + 1.0
    thr = np.asarray(cap, np.float64).astype(np.dtype(u.dtype))
    if float(thr) > cap:
        thr = np.nextafter(thr, np.zeros_like(thr))
    big = g >= jnp.asarray(thr, u.dtype)
    return jnp.where(big, jnp.asarray(cap, idt), jnp.where(big, 1.0, g).astype(idt))


def poisson_sample(key: jax.Array, n: int, sample_rate: Any, max_batch_size: int) -> PoissonSample:
    """Poisson sampling of ``range(n)`` at rate ``sample_rate``, padded to ``max_batch_size`` rows.

    ``n`` and ``max_batch_size`` are static; ``sample_rate`` may be traced. The selected indices
    come first (ascending), padding rows hold index 0 with mask 0. If more than ``max_batch_size``
    examples are drawn, the first ``max_batch_size`` are kept and ``truncated`` is True; then
    ``num_sampled`` is ``max_batch_size + 1`` (a lower bound on the drawn size). The cost is
    ``O(max_batch_size)``, independent of ``n``: a Bernoulli(q) process over ``0..n-1`` has i.i.d.
    Geometric(q) gaps between selected indices, so the first ``B + 1`` selected indices are the
    cumulative sums of ``B + 1`` geometric gaps (minus 1).

    Exactness. Positions are summed in integers (32-bit; 64-bit when jax x64 is on), exact up to
    the first position past ``n - 1``, so every index ``< n`` can be drawn, for any ``n`` up to
    :func:`max_poisson_n` (larger ``n`` is refused). Each gap is drawn by inversion from a uniform
    with a fine grid near 0 (two words of random bits, :func:`_uniform_fine`), so
    ``P(gap = 1) = q`` holds to a relative ~``2^-24`` (float32) / ``2^-53`` (float64) even for tiny
    ``q`` (``jax.random.geometric``'s float32 uniform has a ``2^-23`` grid: relative error
    ``2^-23 / q``). A host ``sample_rate`` is rounded DOWN to the float dtype (float32; float64
    under x64), so the rate used never exceeds the one accounted.

    Residual float rounding (not charged): ``log1p`` and the division carry a few ulps of relative
    error, which moves each threshold ``P(gap <= k) = 1 - (1 - q)^k`` by a relative ~``1e-7``
    (float32) / ``1e-16`` (float64) in either direction, and gaps beyond ``2^24`` (float32) /
    ``2^53`` (float64) are integer-valued floats of that precision; the indices are exact integer
    sums of those gaps.

    Privacy: Poisson subsampling with rate ``q`` (add/remove-one neighbours); see the module
    docstring for the truncation charge. ``q = batch_size / n`` treats the dataset size ``n`` as
    public (module docstring, "Dataset size").
    """
    v.check_threefry_key(key)
    n, max_batch_size = _check_poisson(n, sample_rate, max_batch_size)
    fdt = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    return _poisson_sample(key, _rate_down(sample_rate, fdt), n, max_batch_size)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _poisson_sample(key: jax.Array, q: jax.Array, n: int, max_batch_size: int) -> PoissonSample:
    idt = _index_dtype()
    u = _uniform_fine(key, (max_batch_size + 1,), q.dtype)
    gaps = _gaps_from_uniform(u, jnp.log1p(-q), n + 1, idt)
    # Running sums in the unsigned dtype of the same width (wrapping on overflow). Every gap is at
    # most n + 1 <= 2^31 - 1 (2^63 - 1), so up to and including the first sum that reaches n + 1
    # (the first position >= n) each sum is at most 2 (n + 1) - 1 < 2^32 (2^64): exact. Rows from
    # that one on are outside, found as the running AND of "sum < n + 1" (exact on that prefix).
    udt = jnp.uint64 if idt == jnp.int64 else jnp.uint32
    sums = jnp.cumsum(gaps.astype(udt), dtype=udt)
    below = (sums < jnp.asarray(n + 1, udt)).astype(jnp.int32)
    inside = jax.lax.cummin(below, axis=0) > 0
    pos = jnp.where(inside, sums - 1, 0).astype(idt)
    idx = jnp.where(inside[:max_batch_size], pos[:max_batch_size], 0)
    mask = inside[:max_batch_size].astype(jnp.float32)
    truncated = inside[max_batch_size]
    count = jnp.sum(inside[:max_batch_size], dtype=jnp.int32) + truncated.astype(jnp.int32)
    return PoissonSample(idx.astype(idt), mask, count, truncated)


def poisson_batch(
    key: jax.Array, n: int, sample_rate: Any, max_batch_size: int
) -> tuple[jax.Array, jax.Array]:
    """``(indices [max_batch_size], mask [max_batch_size])`` of a padded Poisson sample.

    See :func:`poisson_sample` (which also returns the drawn size and the truncation flag).
    """
    sample = poisson_sample(key, n, sample_rate, max_batch_size)
    return sample.indices, sample.mask


def fixed_size_batch(key: jax.Array, n: int, batch_size: int) -> jax.Array:
    """Indices ``[batch_size]`` of a uniformly random subset of ``range(n)`` (no repeats).

    Privacy: sampling without replacement with rate ``batch_size / n``; exact accounting under
    replace-one neighbours (``accounting_for("fixed_size", ...)``).

    Cost: a random permutation of ``n`` per call (a sort, ``O(n log n)``); on CPU this can cost
    more than a whole DP-SGD step for large ``n``. :func:`poisson_sample` is ``O(batch)``.
    """
    v.check_threefry_key(key)
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= n ({n}).")
    return jax.random.choice(key, n, (batch_size,), replace=False).astype(jnp.int32)


def steps_per_epoch(n: int, batch_size: int) -> int:
    """``n // batch_size`` (the remainder of a shuffled epoch is dropped)."""
    n = v.check_int("n", n, minimum=1)
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= n ({n}).")
    return n // batch_size


def shuffled_batches(key: jax.Array, n: int, batch_size: int) -> jax.Array:
    """One shuffled epoch as ``[n // batch_size, batch_size]`` disjoint index batches.

    The last ``n mod batch_size`` examples of the permutation are dropped (a fresh permutation each
    epoch gives every example the same chance of being dropped).

    Privacy: accounted without amplification (replace-one, sensitivity ``2 C``): each record is in
    at most one batch per epoch, so ``E`` epochs are at most ``E`` composed Gaussians
    (``accounting.shuffled_event``; sampling-without-replacement accounting is not proven for
    shuffling and is not used, see the module docstring).

    Cost: one permutation (a sort) of ``n`` per epoch.
    """
    v.check_threefry_key(key)
    spe = steps_per_epoch(n, batch_size)
    perm = jax.random.permutation(key, n)
    return perm[: spe * batch_size].reshape(spe, batch_size).astype(jnp.int32)


# ------------------------------------------------------------------------------------------------
# Host-side helpers for accounting
# ------------------------------------------------------------------------------------------------
def poisson_truncation_probability(n: int, sample_rate: float, max_batch_size: int) -> float:
    """``P(Binomial(n, q) > max_batch_size)``: the probability one step's Poisson draw overflows."""
    from scipy import stats

    n = v.check_int("n", n, minimum=1)
    v.check_sample_rate(sample_rate)
    max_batch_size = v.check_int("max_batch_size", max_batch_size, minimum=1)
    return float(stats.binom.sf(max_batch_size, n, float(sample_rate)))


def max_batch_size_for(n: int, sample_rate: float, steps: int, overflow_probability: float = 1e-9) -> int:
    """Smallest ``B`` with ``steps * P(Binomial(n + 1, q) > B) <= overflow_probability``.

    ``n + 1`` covers the larger dataset of an add/remove pair. Use it as the static
    ``max_batch_size`` of :func:`poisson_batch`; charge :func:`truncation_delta` to delta.
    """
    from scipy import stats

    n = v.check_int("n", n, minimum=1)
    v.check_sample_rate(sample_rate)
    steps = v.check_int("steps", steps, minimum=1)
    v.check_delta(overflow_probability, "overflow_probability")
    q = float(sample_rate)
    if q >= 1.0:
        return n
    target = overflow_probability / steps
    b = int(stats.binom.isf(target, n + 1, q))
    while b < n + 1 and stats.binom.sf(b, n + 1, q) > target:
        b += 1
    while b > 1 and stats.binom.sf(b - 1, n + 1, q) <= target:
        b -= 1
    return max(1, min(b, n))


def truncation_delta(n: int, sample_rate: float, max_batch_size: int, steps: int, epsilon: float) -> float:
    """Extra delta for truncating Poisson samples at ``max_batch_size``: ``(1 + e^eps) T p``.

    ``p = P(Binomial(n + 1, q) > B)`` bounds the per-step overflow probability on either dataset of
    a neighbouring pair, so the truncated and exact runs differ with probability ``<= T p`` on each
    (total variation); an ``(eps, delta)`` guarantee of the exact mechanism then holds for the
    truncated one with ``delta + (1 + e^eps) T p``.
    """
    steps = v.check_int("steps", steps, minimum=1)
    v.check_epsilon(epsilon)
    p = poisson_truncation_probability(n + 1, sample_rate, max_batch_size)
    return float(min(1.0, (1.0 + math.exp(min(float(epsilon), 700.0))) * steps * p))


def truncated_spend(epsilon_at: Callable[[float], float], delta: float,
                    charge_at: Callable[[float], float]) -> tuple[float, float, float]:
    """``(epsilon, total_delta, charge)`` of a run whose exact mechanism is ``(epsilon_at(d), d)``-DP
    for every ``d`` and whose truncation (e.g. the padding of Poisson batches) adds ``charge_at(epsilon)``
    to delta (:func:`truncation_delta`, increasing in epsilon).

    The charge is taken out of ``delta``: the mechanism is accounted at ``delta - charge`` with
    ``charge = charge_at(epsilon)`` and ``epsilon_at(delta - charge) <= epsilon`` (a fixed point
    reached from below in a few accountant calls), so ``total_delta == delta``. When the charge
    alone reaches ``delta`` the in-budget statement does not exist and the run is stated as before,
    ``(epsilon_at(delta), delta + charge)`` (``total_delta > delta``, capped below 1).

    Privacy: the exact run is ``(epsilon, delta - charge)``-DP and differs from the truncated one on
    an event of probability folded into ``charge`` on either neighbour, so the truncated run is
    ``(epsilon, delta - charge + charge)``-DP.
    """
    eps0 = float(epsilon_at(delta))
    if not math.isfinite(eps0):
        return eps0, float(delta), 0.0
    eps = eps0
    for _ in range(50):
        c = float(charge_at(eps))
        if c <= 0.0:
            return eps, float(delta), 0.0
        if c >= delta:
            break
        e = float(epsilon_at(delta - c))
        if e <= eps:
            return eps, float(delta), c
        eps = e * (1.0 + 1e-9)  # the charge moves by ~1e-9 relative: the next check certifies it
    c0 = float(charge_at(eps0))
    return eps0, min(float(delta) + c0, 1.0 - 1e-12), c0


def calibration_delta(target_epsilon: float, delta: float, charge: float) -> float:
    """The delta to calibrate a mechanism to when a truncation ``charge`` (at ``target_epsilon``,
    e.g. :func:`truncation_delta`) must fit in the target ``delta``: ``delta - charge``.
    Refuses a charge that alone reaches the target (raise the padding, ``max_batch_size``).

    Privacy: a run calibrated to ``(target_epsilon, delta - charge)`` spends ``epsilon <=
    target_epsilon``, so its own charge is at most ``charge`` and the total stays within ``delta``
    (:func:`truncated_spend`).
    """
    if charge >= delta:
        raise ValueError(
            f"the truncation charge of the padded Poisson batches, {charge:.3g} at epsilon={target_epsilon!r}, "
            f"alone reaches the target delta={delta!r}; raise max_batch_size (less truncation) or delta.")
    return float(delta) - float(charge)


@dataclasses.dataclass(frozen=True)
class SamplingSpec:
    """What to pass to the accountant for a sampling scheme.

    ``sampling`` is the accountant's ``sampling=`` name (``"poisson"``, ``"without_replacement"``)
    or ``"shuffle"`` (no amplification: ``accounting.shuffled_event`` over ``steps_per_epoch``),
    ``sample_rate`` the rate ``batch_size / n`` (informational for ``"shuffle"``), ``relation`` the
    neighbouring relation, and ``sensitivity_factor`` the L2 sensitivity of a clipped sum in units
    of the clip norm under that relation (1 for add/remove-one, 2 for replace-one).
    """

    scheme: str
    sampling: str
    sample_rate: float
    relation: str
    sensitivity_factor: float
    batch_size: int
    steps_per_epoch: int
    notes: str = ""


def accounting_for(scheme: str, n: int, batch_size: int) -> SamplingSpec:
    """The accounting that matches ``scheme`` in ``("poisson", "fixed_size", "shuffle")``.

    ``batch_size`` is the expected batch size for Poisson (``q = batch_size / n``, with ``n``
    treated as public under add/remove, see the module docstring) and the exact one otherwise.
    Shuffled epochs get ``sampling="shuffle"``: no amplification (``accounting.shuffled_event``).
    """
    v.check_choice("sampling", scheme, SAMPLING_SCHEMES)
    spe = steps_per_epoch(n, batch_size)
    q = batch_size / n
    if scheme == "poisson":
        return SamplingSpec(scheme, "poisson", q, "add_remove", replace_factor("add_remove"), batch_size, spe,
                            "Poisson-subsampled Gaussian; add truncation_delta for the padded batch.")
    if scheme == "fixed_size":
        return SamplingSpec(scheme, "without_replacement", q, "replace_one", replace_factor("replace_one"),
                            batch_size, spe,
                            "sampling without replacement (exact for independent fixed-size batches)")
    return SamplingSpec(scheme, "shuffle", q, "replace_one", replace_factor("replace_one"), batch_size, spe,
                        "shuffled epochs without amplification: each record is in at most "
                        "ceil(steps / steps_per_epoch) batches, accounted as that many composed "
                        "Gaussians (sampling-without-replacement accounting is not proven for shuffling)")

