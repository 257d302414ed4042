"""smartnoise-synth's AIM behind :func:`dpfair_jax.studies.aim.aim_factory` (paper 003, Fig. 5).

Input errors are checked without the extra; the fits run only where smartnoise-synth (the ``synth``
extra) is installed and are skipped with the reason otherwise (the default environment lacks it).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from dpfair_jax.studies import aim

HAS_SNSYNTH = importlib.util.find_spec("snsynth") is not None
needs_extra = pytest.mark.skipif(not HAS_SNSYNTH, reason="smartnoise-synth (the 'synth' extra) is not installed")


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta"),
    ({"epsilon": 1.0, "rounds": 0}, "rounds"),
    ({"epsilon": 1.0, "strata_columns": ["s"]}, "needs domains"),
    ({"epsilon": 1.0, "domains": {"a": 0}}, "domains"),
    ({"epsilon": 1.0, "domains": {"a": 2}, "strata_columns": ["s"]}, "not in domains"),
])
def test_bad_arguments_raise_before_any_fit(kwargs, match):
    with pytest.raises(ValueError, match=match):
        aim.aim_factory(**kwargs)


@needs_extra
def test_aim_spends_the_rho_the_kit_charges():
    """AIM converts its epsilon back to zCDP with OpenDP (``cdp_rho``); at ``epsilon =
    zcdp_to_dp(rho, delta)`` (what the study passes) it must spend at most ``rho``, the kit's charge."""
    from snsynth.utils import cdp_rho

    from dpfair_jax.privacy import accounting as acc

    for rho in (1e-4, 0.0135, 0.28):
        eps = acc.zcdp_to_dp(rho, 1e-9)
        assert cdp_rho(eps, 1e-9) <= rho * (1 + 1e-9)
        assert cdp_rho(eps, 1e-9) == pytest.approx(rho, rel=1e-6)


@pytest.mark.slow  # about 25 s of CPU (AIM's mirror descent per round)
@needs_extra
def test_aim_fits_a_tiny_table_on_the_public_schema():
    """A vanilla and a one-stratum fit on a tiny table: the categories are the schema's (a code absent
    from the rows is still in AIM's domain), the stratum column is the stratum's key, the output has
    the input's columns and codes inside the schema."""
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"a": rng.integers(0, 3, n), "s": np.ones(n, int), "c": rng.integers(0, 2, n)}).astype(str)
    dom = {"a": 4, "s": 2, "c": 2}  # code 3 of "a" never occurs: the schema, not the rows, sets the domain
    model = aim.aim_factory(20.0, 1e-9, domains=dom, rounds=4)().fit(df)
    assert model.inner._transformer.cardinality == [4, 2, 2]
    out = model.sample(300)
    assert list(out.columns) == ["a", "s", "c"] and len(out) == 300
    for c, d in dom.items():
        assert set(out[c].astype(int)) <= set(range(d))
    strat = aim.aim_factory(20.0, 1e-9, domains=dom, strata_columns=["s"], rounds=4)().fit(df)
    assert strat.inner._transformer.cardinality == [4, 2]  # "s" left out: the stratum's public key
    out = strat.sample(100)
    assert list(out.columns) == ["a", "s", "c"] and set(out["s"]) == {"1"}
    with pytest.raises(ValueError, match="constant"):
        aim.aim_factory(20.0, domains=dom, strata_columns=["c"], rounds=4)().fit(df)
