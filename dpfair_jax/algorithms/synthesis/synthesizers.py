"""Synthesizer wrappers for the study: a generic pandas-facing wrapper of the marginal synthesizer
(:class:`JaxMarginalSynthesizer`) and :class:`StratifiedSynthesizer` (one synthesizer per stratum,
parallel composition); smartnoise-synth's MST is in :mod:`.smartnoise`."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.algorithms.synthesis.marginals import (
    _largest_remainder,
    fit_marginal_synthesizer,
    sample_marginal_synthesizer,
)


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
