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
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.privacy.mechanisms import symmetric_gaussian_noise
from dpfair_jax.privacy.sampling import SamplingReport

from ._trio import FitResult, hparams_pytree, is_traced

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


# ------------------------------------------------------------------------------------------------
# generic synthesizer wrapper
# ------------------------------------------------------------------------------------------------
class JaxMarginalSynthesizer:
    """``fit(df)``/``sample(n)`` adapter of the marginal synthesizer for categorical frames
    (columns are factorized; values are mapped back on sampling). ``rho``-zCDP per fit."""

    def __init__(self, rho: float, *, mode: str = "tree", seed: int = 0):
        v.check_rho(rho)
        self.rho, self.mode, self.seed = float(rho), mode, int(seed)

    def fit(self, df: Any) -> "JaxMarginalSynthesizer":
        import pandas as pd

        self.columns = list(df.columns)
        self.levels = [pd.Index(pd.unique(df[c])) for c in self.columns]
        codes = np.stack([lv.get_indexer(df[c]) for c, lv in zip(self.columns, self.levels)], 1)
        # the set of levels is read from the data: pass a frame whose columns are categorical
        # with public categories (their full domain) to avoid leaking which values occur.
        for j, c in enumerate(self.columns):
            if isinstance(df[c].dtype, pd.CategoricalDtype):
                self.levels[j] = pd.Index(df[c].cat.categories)
                codes[:, j] = self.levels[j].get_indexer(df[c])
        domains = [len(lv) for lv in self.levels]
        self.model = fit_marginal_synthesizer(jax.random.key(self.seed), codes.astype(np.int32), domains,
                                              self.rho, mode=self.mode)
        return self

    def sample(self, n: int) -> Any:
        import pandas as pd

        codes, _ = sample_marginal_synthesizer(jax.random.key(self.seed + 1), self.model, n)
        return pd.DataFrame({c: np.asarray(lv)[codes[:, j]] for j, (c, lv) in
                             enumerate(zip(self.columns, self.levels))})


def mst_factory(epsilon: float, delta: float = 1e-9) -> Callable[[], Any]:
    """Factory of smartnoise-synth's MST (``snsynth``, the ``synth`` extra), as in the paper's
    code: ``MSTSynthesizer(epsilon=epsilon, delta=delta)``; raises ``ImportError`` naming the extra."""
    try:
        from snsynth.mst import MSTSynthesizer  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("MST needs smartnoise-synth: pip install 'dpfair_jax[synth]'") from err

    class _MST:
        def __init__(self):
            self.inner = MSTSynthesizer(epsilon=epsilon, delta=delta)

        def fit(self, df):
            self.inner.fit(df, preprocessor_eps=0.0)
            return self

        def sample(self, n):
            return self.inner.sample(n)

    return _MST


class StratifiedSynthesizer:
    """Fit a private synthesizer per stratum; sample in proportion to the strata (paper Sec. 6).

    ``factory()`` returns a fresh synthesizer with ``fit(df)`` and ``sample(n)`` (each fit
    spends the full budget; strata are disjoint, so the total is one fit's by parallel
    composition). ``strata_columns`` name the stratifying columns. :meth:`sample` needs
    ``proportions``: public values, or noisy counts charged to the budget
    (:func:`stratum_proportions` with ``count_rho``). The paper's code samples by the exact stratum
    counts, which tells neighbouring tables apart with certainty; that is refused here (the exact
    counts stay readable as ``counts`` for analysis, not for release). Each stratum gets
    ``round(n p_g)`` rows (largest remainder) rather than the code's ``max(1, int(n p_g))``.
    """

    def __init__(self, factory: Callable[[], Any], strata_columns: Sequence[str]):
        if not callable(factory):
            raise ValueError("factory must be callable and return a synthesizer with fit/sample.")
        if not strata_columns:
            raise ValueError("strata_columns is empty; use the synthesizer directly for vanilla fits.")
        self.factory, self.strata_columns = factory, list(strata_columns)

    def fit(self, df: Any) -> "StratifiedSynthesizer":
        missing = [c for c in self.strata_columns if c not in df.columns]
        if missing:
            raise ValueError(f"strata_columns {missing} are not columns of df ({list(df.columns)}).")
        self.models, self.counts, self.keys = [], [], []
        for key, part in df.groupby(self.strata_columns, observed=True, sort=True):
            self.keys.append(key)
            self.counts.append(len(part))
            self.models.append(self.factory().fit(part.reset_index(drop=True)))
        return self

    def sample(self, n: int, proportions: Any = None) -> Any:
        import pandas as pd

        n = v.check_int("n", n, minimum=1)
        if proportions is None:
            raise ValueError("proportions is required: the exact stratum counts are private; pass public "
                             "proportions or noisy ones (stratum_proportions(s, k, key=..., count_rho=...), "
                             "charged to the budget).")
        p = np.asarray(proportions, np.float64)
        if p.shape != (len(self.models),):
            raise ValueError(f"proportions must have {len(self.models)} entries (one per fitted stratum).")
        counts = _largest_remainder(p / p.sum(), n)
        parts = [m.sample(int(c)) for m, c in zip(self.models, counts) if c > 0]
        return pd.concat(parts, ignore_index=True)



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
