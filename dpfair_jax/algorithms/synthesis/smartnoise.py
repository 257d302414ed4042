"""smartnoise-synth synthesizers on a public schema (the ``synth`` extra): MST here, AIM in
:mod:`dpfair_jax.studies.aim`; both wrap the library's synthesizer with :class:`SchemaSynthesizer`.

Privacy: the wrapped synthesizer is smartnoise-synth's own mechanism and accounting (``(epsilon,
delta)`` converted by OpenDP's ``cdp_rho`` to ``rho``-zCDP under add/remove of one row). Left to
itself, smartnoise-synth learns each column's categories from the rows it is given: a
data-dependent domain that no epsilon covers (a category present in one table and absent from its
neighbour is released with certainty). With ``domains=`` every column's categories come from the
public schema instead (a ``TableTransformer`` fitted on the schema's codes ``0 .. D - 1``, never on
the rows; ``preprocessor_eps = 0``). Columns named in ``strata_columns`` are constant within a fit
(one stratum of :class:`~dpfair_jax.algorithms.synthesis.StratifiedSynthesizer`): they are the
stratum's public key, left out of the fit and set back on sampling. Without ``domains`` the
row-learned categories are used, which is only right for data whose categories are public anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["SchemaSynthesizer", "check_schema_domains", "schema_transformer", "mst_factory"]


def check_schema_domains(domains: Mapping[str, int] | None,
                         strata_columns: Sequence[str]) -> dict[str, int] | None:
    """``domains`` checked (one integer >= 1 per column; every strata column declared), or ``None``
    (then ``strata_columns`` must be empty: a stratum key needs the schema). Raises ``ValueError``."""
    if domains is None:
        if strata_columns:
            raise ValueError("strata_columns needs domains (the public schema of the other columns).")
        return None
    out = {}
    for c, d in domains.items():
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"domains[{c!r}] must be an integer >= 1, got {d!r}.")
        out[str(c)] = int(d)
    missing = [c for c in strata_columns if c not in out]
    if missing:
        raise ValueError(f"strata_columns {missing} are not in domains.")
    return out


def schema_transformer(columns: Sequence[str], domains: Mapping[str, int]) -> Any:
    """A smartnoise-synth ``TableTransformer`` whose categories are the schema's codes ``0 .. D - 1``
    (as strings) of every column, fitted on a public frame built from ``domains``, not on data."""
    import pandas as pd
    from snsynth.transform import LabelTransformer, TableTransformer

    width = max(domains[c] for c in columns)
    public = pd.DataFrame({c: [str(i % domains[c]) for i in range(width)] for c in columns})
    tt = TableTransformer([LabelTransformer(nullable=False) for _ in columns])
    tt.fit(public, epsilon=0.0)
    return tt


class SchemaSynthesizer:
    """``fit(df)`` / ``sample(n)`` around a smartnoise-synth synthesizer ``inner`` with the public
    schema ``domains`` (or ``None``: categories learned from the rows) and the stratum key columns
    ``strata_columns`` (module docstring). Values are read as strings of the schema's codes."""

    def __init__(self, inner: Any, domains: Mapping[str, int] | None, strata_columns: Sequence[str] = ()):
        self.inner, self.domains = inner, domains
        self.fixed = [str(c) for c in strata_columns]
        self.columns: list[str] = []
        self.key: dict[str, str] = {}

    def fit(self, df: Any) -> "SchemaSynthesizer":
        self.columns = [str(c) for c in df.columns]
        if self.domains is None:
            self.inner.fit(df, preprocessor_eps=0.0)
            return self
        missing = [c for c in self.columns if c not in self.domains]
        if missing:
            raise ValueError(f"domains has no entry for columns {missing}.")
        frame = df.astype(str)
        for c in self.fixed:
            vals = frame[c].unique()
            if len(vals) != 1:
                raise ValueError(f"strata column {c!r} must be constant within a fit (one stratum).")
            self.key[c] = vals[0]
        free = [c for c in self.columns if c not in self.fixed]
        self.inner.fit(frame[free].reset_index(drop=True), transformer=schema_transformer(free, self.domains),
                       preprocessor_eps=0.0)
        return self

    def sample(self, n: int) -> Any:
        out = self.inner.sample(n)
        if self.domains is None:
            return out
        for c, val in self.key.items():
            out[c] = val
        return out[self.columns]


def _check_budget(epsilon: float, delta: float) -> None:
    if not float(epsilon) > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}.")
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")


def mst_factory(epsilon: float, delta: float = 1e-9, *, domains: Mapping[str, int] | None = None,
                strata_columns: Sequence[str] = ()) -> Callable[[], SchemaSynthesizer]:
    """Factory of smartnoise-synth's MST (``snsynth``, the ``synth`` extra), as in the paper's
    code: ``MSTSynthesizer(epsilon=epsilon, delta=delta)`` behind :class:`SchemaSynthesizer`.
    ``domains``: the public schema (pass it: without it the categories are learned from the
    rows, covered by no epsilon); ``strata_columns``: a stratum's public key columns. Privacy:
    module docstring. Raises ``ValueError`` on bad arguments and ``ImportError`` naming the extra,
    both before any fit."""
    _check_budget(epsilon, delta)
    dom = check_schema_domains(domains, list(strata_columns))
    try:
        from snsynth.mst import MSTSynthesizer
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("MST needs smartnoise-synth: pip install 'dpfair_jax[synth]'") from err

    def make() -> SchemaSynthesizer:
        return SchemaSynthesizer(MSTSynthesizer(epsilon=float(epsilon), delta=float(delta)), dom, strata_columns)

    return make
