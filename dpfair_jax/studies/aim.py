"""AIM (McKenna et al. 2022) through smartnoise-synth, for paper 003's Fig. 5 (optional).

The paper's synthetic-data claims rest on GEM and AIM; the kit has no port of either, and its JAX
marginal synthesizer is only MST-like. smartnoise-synth (the ``synth`` extra) ships AIM, so the
study can run it where the extra is installed and record the claim as skipped, with the reason,
where it is not. Public names: :func:`aim_available`, :func:`aim_factory`.

Privacy: ``AIMSynthesizer(epsilon, delta)`` is smartnoise-synth's (its own accounting: zCDP,
converted to ``(epsilon, delta)``); with ``preprocessor_eps = 0`` every column's domain must be
public (the study passes integer codes whose domains come from the public schema). The study fits
it with the same ``(1 - COUNT_FRACTION) rho`` as its other synthesizers, converted to epsilon.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["aim_available", "aim_factory"]

_EXTRA = "AIM needs smartnoise-synth: pip install 'dpfair_jax[synth]'"


def aim_available() -> tuple[bool, str]:
    """``(True, "")`` when ``snsynth.aim`` imports, else ``(False, reason)``."""
    try:
        from snsynth.aim import AIMSynthesizer  # noqa: F401
    except ImportError as err:  # depends on the environment
        return False, f"{_EXTRA} ({type(err).__name__}: {err})"
    return True, ""


def aim_factory(epsilon: float, delta: float = 1e-9) -> Callable[[], Any]:
    """Factory of smartnoise-synth's AIM, ``AIMSynthesizer(epsilon=epsilon, delta=delta)``, with the
    ``fit(df)`` / ``sample(n)`` interface of :class:`dpfair_jax.algorithms.synthesis.StratifiedSynthesizer`;
    raises ``ImportError`` naming the extra when smartnoise-synth is absent."""
    if not float(epsilon) > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}.")
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")
    try:
        from snsynth.aim import AIMSynthesizer
    except ImportError as err:  # depends on the environment
        raise ImportError(_EXTRA) from err

    class _AIM:
        def __init__(self):
            self.inner = AIMSynthesizer(epsilon=float(epsilon), delta=float(delta))

        def fit(self, df):
            self.inner.fit(df, preprocessor_eps=0.0)
            return self

        def sample(self, n):
            return self.inner.sample(n)

    return _AIM
