"""The vectorized JAX marginal synthesizer for categorical tables (paper 003, Sec. 6): noisy one- and
two-way marginals, a maximum spanning tree per stratum, ancestral sampling, and the noisy stratum
counts that set the sampling proportions.

Privacy: every marginal and count is released through ``privacy.release_noise`` /
``privacy.mechanisms`` at the zCDP budget the caller passes (:mod:`dpfair_jax.algorithms.synthesis` charges it)."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.privacy.mechanisms import symmetric_gaussian_noise


class CategoricalTable(NamedTuple):
    """Integer-coded categorical data: ``codes int32[n, d]`` with ``codes[:, j] < domains[j]``."""

    codes: np.ndarray
    domains: tuple[int, ...]
    columns: tuple[str, ...]


class MarginalModel(NamedTuple):
    """A fitted marginal synthesizer: ``tables [k, d, d, V, V]`` (non-negative noisy pair
    marginals, ``tables[g, a, a]`` diagonal = one-way), ``order [k, d]`` and ``parent [k, d]``
    (sampling order per stratum; parent column of ``order[g, j]`` or -1), ``domains [d]``."""

    tables: jax.Array
    order: jax.Array
    parent: jax.Array
    domains: tuple[int, ...]


def marginal_sigma(d: int, rho: Any) -> jax.Array:
    """Noise std on each Gram entry: ``sqrt(d (d+1) / 2) / sqrt(2 rho)`` (rho-zCDP, add/remove):
    :func:`~dpfair_jax.privacy.release_noise.zcdp_gaussian_std` at the add/remove
    :func:`~dpfair_jax.privacy.release_noise.one_hot_gram_sensitivity`."""
    return _rn.zcdp_gaussian_std(_rn.one_hot_gram_sensitivity(d).under(rel.ADD_REMOVE), rho)


def _check_codes(codes: Any, domains: Sequence[int]) -> None:
    v.check_shape("codes", codes, ndim=2)
    d = np.shape(codes)[1]
    if len(domains) != d:
        raise ValueError(f"domains has {len(domains)} entries but codes has {d} columns; one domain size per column.")
    for j, m in enumerate(domains):
        v.check_int(f"domains[{j}]", m, minimum=1)
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"codes must be integer category codes, got dtype {arr.dtype}.")
    if arr.size and (arr.min() < 0 or np.any(arr.max(axis=0) >= np.asarray(domains))):
        raise ValueError("codes has values outside [0, domains[j]) in some column; recode or raise domains.")


def _one_hot_rows(codes: jax.Array, V: int) -> jax.Array:
    n, d = codes.shape
    return jax.nn.one_hot(codes, V, dtype=jnp.float32).reshape(n, d * V)


def _mutual_information(tables: jax.Array) -> jax.Array:
    """MI of every column pair from the (noisy, clamped) joint tables ``[k, d, d, V, V]``."""
    tot = jnp.sum(tables, axis=(-1, -2), keepdims=True)
    p = tables / jnp.maximum(tot, 1e-12)
    pa = jnp.sum(p, axis=-1, keepdims=True)
    pb = jnp.sum(p, axis=-2, keepdims=True)
    ratio = p / jnp.maximum(pa * pb, 1e-30)
    return jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.maximum(ratio, 1e-30)), 0.0), axis=(-1, -2))


def _fit_tables(key, codes, s, mask, rho, num_groups: int, V: int, domains: tuple[int, ...]):
    n, d = codes.shape
    O = _one_hot_rows(codes, V)  # [n, dV]
    W = jax.nn.one_hot(s, num_groups, dtype=jnp.float32) * mask[:, None]  # [n, k]
    # per-stratum Gram: G_g = O^T diag(W_g) O, written as (W_g * O)^T @ O without transposes of O
    grams = jnp.einsum("nk,na,nb->kab", W, O, O)
    sigma = marginal_sigma(d, rho)
    keys = jax.random.split(key, num_groups)
    noise = jax.vmap(lambda kk: symmetric_gaussian_noise(kk, d * V, 1.0))(keys)
    noisy = jnp.maximum(grams + sigma * noise, 0.0)
    t = noisy.reshape(num_groups, d, V, d, V).transpose(0, 1, 3, 2, 4)  # [k, d, d, V, V]
    valid = jnp.arange(V)[None, :] < jnp.asarray(domains)[:, None]  # [d, V]
    vm = valid[:, None, :, None] & valid[None, :, None, :]
    eye = jnp.eye(V, dtype=bool)
    same = jnp.eye(d, dtype=bool)[:, :, None, None]
    vm = vm & (~same | eye[None, None])  # one-way marginals live on the diagonal blocks' diagonals
    return jnp.where(vm[None], t, 0.0)


def _max_spanning_trees(mi: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Prim's algorithm on ``[k, d, d]`` mutual informations, vectorized over strata."""
    k, d, _ = mi.shape
    order = np.zeros((k, d), np.int32)
    parent = np.full((k, d), -1, np.int32)
    if mode == "independent" or d == 1:
        order[:] = np.arange(d)
        return order, parent
    rows = np.arange(k)
    in_tree = np.zeros((k, d), bool)
    in_tree[:, 0] = True
    best = mi[:, 0, :].copy()
    best_par = np.zeros((k, d), np.int32)
    for step in range(1, d):
        cand = np.where(in_tree, -np.inf, best)
        j = np.argmax(cand, axis=1)
        in_tree[rows, j] = True
        order[:, step] = j
        parent[:, step] = best_par[rows, j]
        upd = mi[rows, j, :] > best
        best = np.where(upd, mi[rows, j, :], best)
        best_par = np.where(upd, j[:, None], best_par)
    return order, parent


def fit_marginal_synthesizer(key: jax.Array, codes: Any, domains: Sequence[int], rho: Any, *,
                             s: Any = None, num_groups: int = 1, mask: Any = None,
                             mode: str = "tree") -> MarginalModel:
    """Fit the marginal synthesizer on integer codes ``[n, d]`` (per stratum with ``s``).

    Privacy: ``rho``-zCDP under add/remove of one row (Gram sensitivity ``sqrt(d(d+1)/2)``, see
    the module docstring); every stratum uses the full ``rho`` (parallel composition).
    """
    v.check_threefry_key(key)
    _check_codes(codes, domains)
    v.check_rho(rho)
    v.check_choice("mode", mode, ("tree", "independent"))
    num_groups = v.check_int("num_groups", num_groups, minimum=1)
    n, d = np.shape(codes)
    if s is None:
        s = np.zeros(n, np.int32)
    v.check_group_ids(s, num_groups, "s")
    v.check_same_length(codes=codes, s=s, mask=mask)
    m = jnp.ones(n, jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
    domains = tuple(int(x) for x in domains)
    V = max(domains)
    tables = _fit_jit(key, jnp.asarray(codes, jnp.int32), jnp.asarray(s, jnp.int32), m,
                      jnp.asarray(rho, jnp.float32), num_groups, V, domains)
    mi = np.asarray(_mutual_information(tables), np.float64)
    order, parent = _max_spanning_trees(mi, mode)
    return MarginalModel(tables, jnp.asarray(order), jnp.asarray(parent), domains)


_fit_jit = jax.jit(_fit_tables, static_argnums=(5, 6, 7))


def _sample_core(key, tables, order, parent, row_stratum, domains):
    k, d, _, V, _ = tables.shape
    n = row_stratum.shape[0]
    valid = jnp.arange(V)[None, :] < jnp.asarray(domains)[:, None]  # [d, V]
    out = jnp.zeros((n, d), jnp.int32)
    keys = jax.random.split(key, d)
    ords = order[row_stratum]  # [n, d]
    pars = parent[row_stratum]
    for j in range(d):  # columns (static), not rows
        col = ords[:, j]
        par = pars[:, j]
        one_way = jnp.diagonal(tables[row_stratum, col, col], axis1=-2, axis2=-1)  # [n, V]
        par_safe = jnp.maximum(par, 0)
        par_val = jnp.take_along_axis(out, par_safe[:, None], axis=1)[:, 0]
        joint = tables[row_stratum, par_safe, col]  # [n, V(par), V(col)]
        cond = jnp.take_along_axis(joint, par_val[:, None, None], axis=1)[:, 0]  # [n, V]
        use_cond = (par >= 0) & (jnp.sum(cond, axis=1) > 0)
        w = jnp.where(use_cond[:, None], cond, one_way)
        vcol = valid[col]
        w = jnp.where(vcol, w, 0.0)
        w = jnp.where(jnp.sum(w, axis=1, keepdims=True) > 0, w, vcol.astype(jnp.float32))  # uniform fallback
        val = jax.random.categorical(keys[j], jnp.log(w), axis=1).astype(jnp.int32)
        out = jnp.where(jax.nn.one_hot(col, d, dtype=bool), val[:, None], out)
    return out


_sample_jit = jax.jit(_sample_core, static_argnums=(5,))


def _largest_remainder(p: np.ndarray, n: int) -> np.ndarray:
    real = p * n
    fl = np.floor(real).astype(np.int64)
    rem = n - fl.sum()
    order = np.argsort(-(real - fl), kind="stable")
    fl[order[:rem]] += 1
    return fl


def stratum_proportions(s: Any, num_groups: int, *, key: jax.Array | None = None,
                        count_rho: float | None = None) -> np.ndarray:
    """Stratum proportions for sampling: ``c_g / sum_h c_h`` with ``c`` the exact counts (the
    paper's code; only for public ``s``) or, with ``count_rho``, the Gaussian noisy counts
    ``n_g + N(0, 1/(2 count_rho))`` clamped at 0.

    Privacy: exact counts are not private (``s`` must be public); with ``count_rho``,
    ``count_rho``-zCDP under add/remove of one row (one count changes by 1).
    """
    c = stratum_counts(s, num_groups, key=key, count_rho=count_rho)
    if c.sum() <= 0:
        raise ValueError("all stratum counts are 0; nothing to sample from.")
    return c / c.sum()


def stratum_counts(s: Any, num_groups: int, *, key: jax.Array | None = None,
                   count_rho: float | None = None) -> np.ndarray:
    """Stratum counts ``[num_groups]`` (float64): exact (``count_rho=None``; not private, for
    public ``s`` only), or ``n_g + N(0, 1/(2 count_rho))`` clamped at 0.

    Privacy: with ``count_rho``, ``count_rho``-zCDP under add/remove of one row (one count changes
    by 1; Gaussian noise through :func:`dpfair_jax.privacy.mechanisms.gaussian_noise`).
    """
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_group_ids(s, num_groups, "s")
    c = np.bincount(np.asarray(s), minlength=num_groups).astype(np.float64)
    if count_rho is not None:
        if key is None:
            raise ValueError("key is required with count_rho (noisy counts).")
        v.check_threefry_key(key)
        v.check_rho(count_rho, "count_rho")
        # Delta = 1: one count moves by 1 under add/remove; the unit draw is scaled on the host
        sens = rel.histogram_sensitivity("l2").under(rel.ADD_REMOVE)
        c = np.maximum(_rn.add_gaussian_for_rho_host(key, c, sens, count_rho), 0.0)
    return c


def sample_marginal_synthesizer(key: jax.Array, model: MarginalModel, n_rows: int,
                                proportions: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``n_rows`` rows: stratum ``g`` gets ``round(n_rows * proportions[g])`` rows (largest
    remainder; default equal proportions), returns ``(codes int32[n_rows, d], strata int32[n_rows])``.

    Privacy: post-processing of the fitted model; ``proportions`` must be public or private.
    """
    v.check_threefry_key(key)
    n_rows = v.check_int("n_rows", n_rows, minimum=1)
    k = model.tables.shape[0]
    p = np.full(k, 1.0 / k) if proportions is None else np.asarray(proportions, np.float64)
    if p.shape != (k,) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"proportions must be {k} non-negative numbers with a positive sum, got {proportions!r}.")
    counts = _largest_remainder(p / p.sum(), n_rows)
    strata = np.repeat(np.arange(k), counts).astype(np.int32)
    # rows are drawn independently and each row's draws depend only on its index (partitionable
    # threefry), so padding to a power of two (one compiled program for nearby row counts) and
    # dropping the padding returns the same rows
    padded = np.zeros(1 << (n_rows - 1).bit_length(), np.int32)
    padded[:n_rows] = strata
    codes = _sample_jit(key, model.tables, model.order, model.parent, jnp.asarray(padded), model.domains)
    return np.asarray(codes)[:n_rows], strata
