"""AIM (McKenna et al. 2022) through smartnoise-synth, for paper 003's Fig. 5 (optional).

The paper's synthetic-data claims rest on GEM and AIM; the kit has no port of either, and its JAX
marginal synthesizer is only MST-like. smartnoise-synth (the ``synth`` extra) ships AIM, so the
study can run it where the extra is installed and record the claim as skipped, with the reason,
where it is not. Public names: :func:`aim_available`, :func:`aim_factory`.

Privacy: ``AIMSynthesizer(epsilon, delta)`` is smartnoise-synth's own mechanism and accounting:
it converts ``(epsilon, delta)`` to ``rho = cdp_rho(epsilon, delta)`` (OpenDP's zCDP -> approx-DP
conversion, the same Canonne-Kamath-Steinke bound as :func:`dpfair_jax.privacy.accounting.zcdp_to_dp`,
so ``epsilon = zcdp_to_dp(rho, delta)`` gives back ``rho``) and spends it as ``rho``-zCDP under
add/remove of one row (Gaussian noise of sensitivity 1 on each measured marginal, the exponential
mechanism for the selection). Its noise is drawn by OpenDP from the system's randomness, so AIM
fits are not reproducible from a key. With ``domains=`` every column's categories come from the
public schema (:class:`dpfair_jax.algorithms.synthesis.smartnoise.SchemaSynthesizer`, the same
wrapper as MST's: a ``TableTransformer`` fitted on the schema's codes, never on the rows;
``preprocessor_eps = 0``); without it smartnoise-synth learns the categories present
in the rows (a data-dependent domain, covered by no epsilon: kept only for callers with public
data). The stratified variant's stratum columns (``strata_columns``) are constant within a
stratum and are the stratum's public key: they are left out of the fit and set to that key on
sampling (what a constant column learned by smartnoise-synth gives, without reading a domain from
the rows). The sampling proportions of a stratified run must be public or noisy and charged
(:class:`dpfair_jax.algorithms.synthesis.StratifiedSynthesizer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dpfair_jax.algorithms.synthesis.smartnoise import SchemaSynthesizer, check_schema_domains

__all__ = ["aim_available", "aim_factory"]

_EXTRA = "AIM needs smartnoise-synth: pip install 'dpfair_jax[synth]'"


def aim_available() -> tuple[bool, str]:
    """``(True, "")`` when ``snsynth.aim`` imports, else ``(False, reason)``."""
    try:
        from snsynth.aim import AIMSynthesizer  # noqa: F401
    except ImportError as err:  # depends on the environment
        return False, f"{_EXTRA} ({type(err).__name__}: {err})"
    return True, ""


def aim_factory(epsilon: float, delta: float = 1e-9, *, domains: Mapping[str, int] | None = None,
                strata_columns: Sequence[str] = (), rounds: int | None = None) -> Callable[[], SchemaSynthesizer]:
    """Factory of smartnoise-synth's AIM, ``AIMSynthesizer(epsilon=epsilon, delta=delta,
    rounds=rounds)`` (``rounds=None``: AIM's default ``T = 16 d``), with the ``fit(df)`` /
    ``sample(n)`` interface of :class:`dpfair_jax.algorithms.synthesis.StratifiedSynthesizer`.
    ``domains``: the public schema (categories per column, codes ``0 .. D - 1``; the frame's
    values are read as strings); ``strata_columns``: columns constant within the fit (a stratum's
    public key), left out of AIM and set back on sampling. Privacy: module docstring
    (``rho = cdp_rho(epsilon, delta)``-zCDP per fit, add/remove). Raises ``ImportError`` naming
    the extra when smartnoise-synth is absent; ``ValueError`` on bad arguments, before any fit."""
    if not float(epsilon) > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}.")
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
        raise ValueError(f"rounds must be None (AIM's default 16 d) or an integer >= 1, got {rounds!r}.")
    dom = check_schema_domains(domains, list(strata_columns))
    try:
        from snsynth.aim import AIMSynthesizer
    except ImportError as err:  # depends on the environment
        raise ImportError(_EXTRA) from err

    def make() -> SchemaSynthesizer:
        inner = AIMSynthesizer(epsilon=float(epsilon), delta=float(delta), rounds=rounds)
        return SchemaSynthesizer(inner, dom, strata_columns)

    return make
