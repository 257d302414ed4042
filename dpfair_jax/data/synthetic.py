"""Synthetic data generators of the papers, as pure functions of a PRNG key.

Every generator takes ``key`` first, has static output shapes (sizes, dimensions and the number of
groups are Python ints) and traced parameters (slopes, noise levels, Dirichlet ``alpha``, norms,
margins, label noise, group ratios), so a whole study is ``jax.vmap`` over keys and parameters
inside one ``jax.jit``. Each returns ``Synthetic(data, truth)``: a :class:`~dpfair_jax.data.Dataset`
and a NamedTuple of the generating parameters (arrays), e.g. to measure estimation error.

Host-side checks (static sizes, parameter shapes, concrete values) run before tracing; traced
parameters are checked only when they are concrete.

- :func:`ols_mixture` -- per-group linear regression (paper 000, Sec. 6 / App. A.1).
- :func:`gaussian_mixture` -- 1-D (or d-D) Gaussian mixture with Dirichlet(alpha) group sizes
  (paper 003, Sec. 5 / Fig. 3; reference ``helpers/utils.py::model``).
- :func:`dirichlet_log_proportions` -- a symmetric Dirichlet draw in log space (paper 003, Thm 9).
- :func:`two_group_classification` -- two groups with controllable size ratio, feature norms,
  margins and label noise (paper 001, Thms 1-5 and App. C studies).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset, DatasetInfo

__all__ = [
    "Synthetic",
    "OLSTruth",
    "MixtureTruth",
    "ClassificationTruth",
    "ols_mixture",
    "dirichlet_log_proportions",
    "gaussian_mixture",
    "two_group_classification",
    "counts_to_group_ids",
]


class Synthetic(NamedTuple):
    """A generated dataset and the parameters that generated it (both pytrees)."""

    data: Dataset
    truth: Any


class OLSTruth(NamedTuple):
    """Parameters of :func:`ols_mixture`: ``slopes [K, P]``, ``intercepts [K]``, ``noise_sd [K]``."""

    slopes: jax.Array
    intercepts: jax.Array
    noise_sd: jax.Array


class MixtureTruth(NamedTuple):
    """Parameters of :func:`gaussian_mixture`.

    ``log_proportions [k]`` (the Dirichlet draw, in log space), ``proportions [k]``, ``sizes [k]``
    (int32 realized group sizes, summing to ``n``), ``means [k, d]`` (group means) and
    ``population_mean [d]`` (the size-weighted mean of the group means).
    """

    log_proportions: jax.Array
    proportions: jax.Array
    sizes: jax.Array
    means: jax.Array
    population_mean: jax.Array


class ClassificationTruth(NamedTuple):
    """Parameters of :func:`two_group_classification` (per-group arrays have shape ``[2]``).

    ``direction [d]`` is the unit normal of the Bayes decision boundary ``x . direction = 0``
    (the same for both groups); ``sizes [2]`` are the realized group sizes.
    """

    direction: jax.Array
    sizes: jax.Array
    norms: jax.Array
    margins: jax.Array
    label_noise: jax.Array
    positive_rate: jax.Array


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _is_concrete(value: Any) -> bool:
    return not isinstance(value, jax.core.Tracer)


def _per_group(name: str, value: Any, k: int, *, trailing: tuple[int, ...] = ()) -> jax.Array:
    """Broadcast a scalar or ``[k, *trailing]`` parameter to ``[k, *trailing]`` (float32)."""
    arr = jnp.asarray(value, dtype=jnp.float32)
    target = (k, *trailing)
    if arr.ndim == 0 or arr.shape == target:
        return jnp.broadcast_to(arr, target)
    if trailing and arr.shape == (k,):
        return jnp.broadcast_to(arr.reshape((k,) + (1,) * len(trailing)), target)
    raise ValueError(f"{name} must be a scalar or have shape {target}, got shape {tuple(arr.shape)}.")


def _check_concrete_positive(name: str, value: Any, *, allow_zero: bool = False) -> None:
    if _is_concrete(value):
        v.check_finite(name, np.asarray(value, dtype=np.float64))
        v.check_positive(name, value, allow_zero=allow_zero)


def _check_concrete_unit(name: str, value: Any, *, low_open: bool, high: float) -> None:
    if not _is_concrete(value):
        return
    arr = np.asarray(value, dtype=np.float64)
    bad = (arr <= 0 if low_open else arr < 0) | (arr > high) | ~np.isfinite(arr)
    if np.any(bad):
        lo = "(0" if low_open else "[0"
        raise ValueError(f"{name} must lie in {lo}, {high}], got {value!r}.")


def counts_to_group_ids(counts: jax.Array, n: int) -> jax.Array:
    """Group ids ``int32[n]`` with ``counts[g]`` consecutive rows of group ``g`` (static ``n``).

    ``counts`` may be traced (e.g. a Dirichlet draw rounded to sizes) as long as it is
    non-negative and sums to ``n``; the output shape depends only on ``n``, which is what makes a
    random number of rows per group vmap-able.
    """
    ends = jnp.cumsum(jnp.asarray(counts, dtype=jnp.int32))
    return jnp.searchsorted(ends, jnp.arange(n, dtype=jnp.int32), side="right").astype(jnp.int32)


# --------------------------------------------------------------------------------------------
# paper 000: per-group OLS mixture
# --------------------------------------------------------------------------------------------


def ols_mixture(
    key: jax.Array,
    group_sizes: tuple[int, ...] | list[int],
    slopes: Any,
    noise_sd: Any = 1.0,
    *,
    dim: int = 1,
    intercepts: Any = 0.0,
    x_dist: str = "normal",
    x_scale: Any = 1.0,
) -> Synthetic:
    """Per-group linear model of paper 000: ``Y_i = <X_ki, beta_k> + b_k + N(0, sigma_k^2)``.

    Paper 000, Sec. 6 and App. A.1 (``Y_k ~ N(X_k beta_k, sigma_e^2 I)``, ``sigma_e = 1``). The
    paper does not specify the distribution of ``X`` or the dimension ``P``; the scalar slope
    pairs it sweeps (e.g. ``(-10, 10)``) suggest ``P = 1``, the default here. ``X`` is
    ``x_scale * N(0, 1)`` (``x_dist="normal"``) or ``x_scale * U[0, 1]`` (``"uniform"``).

    Args:
      key: threefry PRNG key.
      group_sizes: static group sizes ``(n_1, ..., n_K)``, each >= 1 (rows are ordered by group).
      slopes: ``[K]`` (one slope per group, broadcast over ``dim``) or ``[K, dim]``; traced.
      noise_sd: scalar or ``[K]`` noise standard deviations sigma_k >= 0; traced.
      dim: static number of features ``P``.
      intercepts: scalar or ``[K]`` per-group intercepts (default 0); traced.
      x_dist: ``"normal"`` or ``"uniform"``.
      x_scale: scale of ``X`` (traced).

    Returns:
      ``Synthetic(data, OLSTruth)``; ``data`` is a regression ``Dataset`` (``num_classes=0``)
      with ``x: f32[n, dim]``, ``y: f32[n]``, ``s: int32[n]``.
    """
    v.check_threefry_key(key)
    sizes = tuple(v.check_int(f"group_sizes[{i}]", g, minimum=1) for i, g in enumerate(group_sizes))
    if not sizes:
        raise ValueError("group_sizes must list at least one group size (an int >= 1 per group).")
    dim = v.check_int("dim", dim, minimum=1)
    v.check_choice("x_dist", x_dist, ("normal", "uniform"))
    k, n = len(sizes), int(sum(sizes))
    slope_arr = jnp.asarray(slopes, dtype=jnp.float32)
    if slope_arr.shape == (k,):
        slope_arr = jnp.broadcast_to(slope_arr[:, None], (k, dim))
    elif slope_arr.shape != (k, dim):
        raise ValueError(
            f"slopes must have shape ({k},) or ({k}, {dim}) for {k} groups and dim={dim}, "
            f"got {tuple(slope_arr.shape)}."
        )
    sd = _per_group("noise_sd", noise_sd, k)
    b = _per_group("intercepts", intercepts, k)
    _check_concrete_positive("noise_sd", noise_sd, allow_zero=True)
    _check_concrete_positive("x_scale", x_scale)
    if _is_concrete(slopes):
        v.check_finite("slopes", np.asarray(slopes, dtype=np.float64))

    s = jnp.asarray(np.repeat(np.arange(k, dtype=np.int32), sizes))
    kx, ke = jax.random.split(key)
    if x_dist == "normal":
        x = jax.random.normal(kx, (n, dim), dtype=jnp.float32)
    else:
        x = jax.random.uniform(kx, (n, dim), dtype=jnp.float32)
    x = x * jnp.asarray(x_scale, dtype=jnp.float32)
    y = jnp.sum(x * slope_arr[s], axis=1) + b[s] + sd[s] * jax.random.normal(ke, (n,), jnp.float32)
    info = DatasetInfo(
        feature_names=tuple(f"x{j}" for j in range(dim)),
        group_names=tuple(f"group{g}" for g in range(k)),
        task="regression",
        source="synthetic.ols_mixture (paper 000)",
    )
    data = Dataset(x=x, y=y, s=s, num_groups=k, num_classes=0, info=info)
    return Synthetic(data, OLSTruth(slopes=slope_arr, intercepts=b, noise_sd=sd))


# --------------------------------------------------------------------------------------------
# paper 003: Gaussian mixture with Dirichlet group sizes
# --------------------------------------------------------------------------------------------


def dirichlet_log_proportions(key: jax.Array, alpha: Any, k: int) -> jax.Array:
    """Log of a symmetric Dirichlet(alpha * 1_k) draw, computed in log space (``f32[k]``).

    ``log g_i = L_i - logsumexp(L)`` with ``L_i = log Gamma(alpha)`` variates from
    ``jax.random.loggamma``: a direct Dirichlet draw underflows to zeros (and NaN logs) for
    alpha below about 0.2 (paper 003, Thm 9 and the notes' E1). ``alpha`` may be traced.
    """
    k = v.check_int("k", k, minimum=1)
    _check_concrete_positive("alpha", alpha)
    a = jnp.broadcast_to(jnp.asarray(alpha, dtype=jnp.float32), (k,))
    log_gamma = jax.random.loggamma(key, a, shape=(k,), dtype=jnp.float32)
    return log_gamma - jax.nn.logsumexp(log_gamma)


def _largest_remainder(real_sizes: jax.Array, n: int) -> jax.Array:
    """Integer sizes summing to ``n``: floors plus one for the largest fractional parts."""
    floors = jnp.floor(real_sizes)
    remaining = n - jnp.sum(floors)
    frac = real_sizes - floors
    rank = jnp.argsort(jnp.argsort(-frac))  # 0 for the largest fractional part
    return (floors + (rank < remaining)).astype(jnp.int32)


def gaussian_mixture(
    key: jax.Array,
    n: int,
    k: int,
    alpha: Any,
    d: int = 1,
    *,
    mean_sd: Any = 1.0,
    sd: Any = 1.0,
    sizes: str = "rounded",
) -> Synthetic:
    """Gaussian mixture with Dirichlet(alpha) group sizes (paper 003, Sec. 5, Fig. 3).

    Reference generator (``helpers/utils.py::model``): ``g ~ Dir(alpha 1_k)``; group means
    ``mu_i ~ N(0, mean_sd^2 I_d)``; rows of group ``i`` are ``N(mu_i, sd^2 I_d)``. The Dirichlet is
    drawn in log space (:func:`dirichlet_log_proportions`), so tiny alpha does not underflow.

    Group sizes keep a static shape (``n`` rows) under ``vmap``:

    - ``sizes="rounded"`` (default): the reference's ``safe_dir_draw`` (every real size ``n g_i``
      below 1 gets +1, taken from the largest group), then largest-remainder rounding, so the
      sizes are integers >= 1 summing exactly to ``n`` (requires ``n >= k``). The reference rounds
      each size and sets the last to ``n`` minus the others, which can go negative for a tiny last
      group; largest-remainder rounding is the corrected form. If the largest group cannot give
      away the rows (``n`` close to ``k``), the sizes are ``1 + (n - k) g_i`` rounded the same way.
    - ``sizes="multinomial"``: each row's group is drawn from ``Categorical(g)`` (groups may be
      empty).

    Rows are ordered by group. ``y`` is all zeros (a mean-estimation dataset: the data is ``x``).

    Returns:
      ``Synthetic(data, MixtureTruth)`` with ``data.x: f32[n, d]``, ``data.s: int32[n]``.
    """
    v.check_threefry_key(key)
    n = v.check_int("n", n, minimum=1)
    k = v.check_int("k", k, minimum=1)
    d = v.check_int("d", d, minimum=1)
    v.check_choice("sizes", sizes, ("rounded", "multinomial"))
    if sizes == "rounded" and n < k:
        raise ValueError(
            f"n={n} is smaller than k={k}: sizes='rounded' gives every group at least one row; "
            "raise n or use sizes='multinomial'."
        )
    _check_concrete_positive("alpha", alpha)
    _check_concrete_positive("mean_sd", mean_sd, allow_zero=True)
    _check_concrete_positive("sd", sd, allow_zero=True)

    k_dir, k_mu, k_grp, k_x = jax.random.split(key, 4)
    log_p = dirichlet_log_proportions(k_dir, alpha, k)
    p = jnp.exp(log_p)
    if sizes == "rounded":
        real = n * p
        small = real < 1.0
        fixed = real + small - jnp.sum(small) * jax.nn.one_hot(jnp.argmax(real), k, dtype=real.dtype)
        # When n is close to k the largest group cannot give away that many rows; then every group
        # gets one row and the other n - k follow the proportions.
        fallback = (n - k) * p + 1.0
        counts = _largest_remainder(jnp.where(jnp.min(fixed) >= 1.0, fixed, fallback), n)
        s = counts_to_group_ids(counts, n)
    else:
        s = jnp.sort(jax.random.categorical(k_grp, log_p, shape=(n,))).astype(jnp.int32)
        counts = jnp.bincount(s, length=k).astype(jnp.int32)
    means = jnp.asarray(mean_sd, jnp.float32) * jax.random.normal(k_mu, (k, d), jnp.float32)
    x = means[s] + jnp.asarray(sd, jnp.float32) * jax.random.normal(k_x, (n, d), jnp.float32)
    population_mean = (counts.astype(jnp.float32) @ means) / n
    info = DatasetInfo(
        feature_names=tuple(f"x{j}" for j in range(d)),
        group_names=tuple(f"group{g}" for g in range(k)),
        task="regression",
        source="synthetic.gaussian_mixture (paper 003)",
    )
    data = Dataset(x=x, y=jnp.zeros((n,), jnp.float32), s=s, num_groups=k, num_classes=0, info=info)
    truth = MixtureTruth(log_proportions=log_p, proportions=p, sizes=counts, means=means,
                         population_mean=population_mean)
    return Synthetic(data, truth)


# --------------------------------------------------------------------------------------------
# paper 001: two-group classification
# --------------------------------------------------------------------------------------------


def two_group_classification(
    key: jax.Array,
    n: int,
    ratio: Any = 1.0,
    *,
    d: int = 2,
    norms: Any = 1.0,
    margins: Any = 1.0,
    label_noise: Any = 0.0,
    positive_rate: Any = 0.5,
) -> Synthetic:
    """Two groups with controllable size ratio, feature norms, margins and label noise (paper 001).

    Group 0 is the reference ("majority") group and group 1 the other; ``ratio = n_1 / n_0``
    (paper 001, App. C.2, Fig. 11 varies ``p_b / p_a``). The realized ``n_1 = round(n ratio /
    (1 + ratio))`` and the rows are ordered by group, so ``ratio`` may be traced with a static
    ``n``. For a row of group ``g`` with clean label ``c ~ Bernoulli(positive_rate_g)``::

        x = (2c - 1) * margins_g * e_1 + norms_g * z / sqrt(d),   z ~ N(0, I_d)
        y = c, flipped with probability label_noise_g

    so ``E||x - E[x | c, g]||^2 = norms_g^2`` (input norms drive gradient norms and clipping,
    Thm 3-4) and ``margins_g`` is the distance of the class means to the Bayes boundary
    ``x_1 = 0`` (distance to the boundary drives the Hessian trace, Thm 5). All per-group
    parameters are scalars or ``[2]`` arrays and may be traced.

    Returns:
      ``Synthetic(data, ClassificationTruth)``; ``data`` is a binary classification ``Dataset``.
    """
    v.check_threefry_key(key)
    n = v.check_int("n", n, minimum=2)
    d = v.check_int("d", d, minimum=1)
    _check_concrete_positive("ratio", ratio)
    _check_concrete_positive("norms", norms, allow_zero=True)
    _check_concrete_positive("margins", margins, allow_zero=True)
    _check_concrete_unit("label_noise", label_noise, low_open=False, high=1.0)
    _check_concrete_unit("positive_rate", positive_rate, low_open=False, high=1.0)
    nrm = _per_group("norms", norms, 2)
    mrg = _per_group("margins", margins, 2)
    flip = _per_group("label_noise", label_noise, 2)
    pos = _per_group("positive_rate", positive_rate, 2)

    r = jnp.asarray(ratio, jnp.float32)
    n1 = jnp.round(n * r / (1.0 + r)).astype(jnp.int32)
    counts = jnp.stack([n - n1, n1]).astype(jnp.int32)
    s = counts_to_group_ids(counts, n)

    k_c, k_z, k_f = jax.random.split(key, 3)
    clean = jax.random.bernoulli(k_c, pos[s]).astype(jnp.int32)
    direction = jax.nn.one_hot(0, d, dtype=jnp.float32)
    z = jax.random.normal(k_z, (n, d), jnp.float32)
    x = ((2 * clean - 1) * mrg[s])[:, None] * direction + nrm[s][:, None] * z / jnp.sqrt(d)
    flipped = jax.random.bernoulli(k_f, flip[s]).astype(jnp.int32)
    y = jnp.abs(clean - flipped).astype(jnp.int32)
    info = DatasetInfo(
        feature_names=tuple(f"x{j}" for j in range(d)),
        group_names=("group0", "group1"),
        label_names=("0", "1"),
        task="classification",
        source="synthetic.two_group_classification (paper 001)",
    )
    data = Dataset(x=x, y=y, s=s, num_groups=2, num_classes=2, info=info)
    truth = ClassificationTruth(direction=direction, sizes=counts, norms=nrm, margins=mrg,
                                label_noise=flip, positive_rate=pos)
    return Synthetic(data, truth)
