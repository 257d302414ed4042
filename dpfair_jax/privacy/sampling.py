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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax import _validation as v
from dpfair_jax.privacy.relations import replace_factor

__all__ = [
    "PoissonSample",
    "poisson_sample",
    "poisson_batch",
    "fixed_size_batch",
    "shuffled_batches",
    "steps_per_epoch",
    "poisson_truncation_probability",
    "max_batch_size_for",
    "truncation_delta",
    "SamplingSpec",
    "accounting_for",
    "SAMPLING_SCHEMES",
]

SAMPLING_SCHEMES = ("poisson", "fixed_size", "shuffle")


class PoissonSample(NamedTuple):
    """A padded Poisson sample: ``indices [B]``, ``mask [B]`` (1 = real row), the drawn size
    (before truncation) and whether it was truncated."""

    indices: jax.Array
    mask: jax.Array
    num_sampled: jax.Array
    truncated: jax.Array


def _check_poisson(n, sample_rate, max_batch_size) -> tuple[int, int]:
    n = v.check_int("n", n, minimum=1)
    v.check_sample_rate(sample_rate)
    max_batch_size = v.check_int("max_batch_size", max_batch_size, minimum=1)
    if max_batch_size > n:
        raise ValueError(f"max_batch_size ({max_batch_size}) must be <= n ({n}).")
    return n, max_batch_size


def poisson_sample(key: jax.Array, n: int, sample_rate: Any, max_batch_size: int) -> PoissonSample:
    """Poisson sampling of ``range(n)`` at rate ``sample_rate``, padded to ``max_batch_size`` rows.

    ``n`` and ``max_batch_size`` are static; ``sample_rate`` may be traced. The selected indices
    come first (ascending), padding rows hold index 0 with mask 0. If more than ``max_batch_size``
    examples are drawn, the first ``max_batch_size`` are kept and ``truncated`` is True; then
    ``num_sampled`` is ``max_batch_size + 1`` (a lower bound on the drawn size). The cost is
    ``O(max_batch_size)``, independent of ``n`` (geometric gaps of a Bernoulli process).

    Privacy: Poisson subsampling with rate ``q`` (add/remove-one neighbours); see the module
    docstring for the truncation charge. ``q = batch_size / n`` treats the dataset size ``n`` as
    public (module docstring, "Dataset size").
    """
    v.check_threefry_key(key)
    n, max_batch_size = _check_poisson(n, sample_rate, max_batch_size)
    return _poisson_sample(key, jnp.asarray(sample_rate, jnp.float32), n, max_batch_size)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _poisson_sample(key: jax.Array, q: jax.Array, n: int, max_batch_size: int) -> PoissonSample:
    # A Bernoulli(q) process over 0..n-1 has i.i.d. Geometric(q) gaps between selected indices, so
    # the first B+1 selected indices are cumulative sums of B+1 geometric draws: O(B), not O(n).
    gaps = jax.random.geometric(key, q, (max_batch_size + 1,), dtype=jnp.int32)
    cap = jnp.int32(n + 1)
    gaps = jnp.minimum(gaps, cap)  # a gap past n ends the sample anyway
    if (max_batch_size + 1) * (n + 1) < 2**31 - 1:
        pos = jnp.cumsum(gaps) - 1
    else:
        # Saturating sum (min(a + b, n + 1) is associative for a, b >= 0): no int32 overflow.
        pos = jax.lax.associative_scan(lambda a, b: jnp.minimum(a + b, cap), gaps) - 1
    inside = pos < n
    idx = jnp.where(inside[:max_batch_size], pos[:max_batch_size], 0)
    mask = inside[:max_batch_size].astype(jnp.float32)
    truncated = inside[max_batch_size]
    count = jnp.sum(inside[:max_batch_size], dtype=jnp.int32) + truncated.astype(jnp.int32)
    return PoissonSample(idx.astype(jnp.int32), mask, count, truncated)


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

