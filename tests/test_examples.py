"""The README's quickstart runs as written (slow: it compiles three programs)."""

import pathlib
import runpy

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quickstart_runs(capsys):
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "PrivacySpend" in out and "dp_violation" in out and "abs_error" in out
    # both private runs state their spend; DP-FERMI's includes the noisy group-frequency histogram
    assert out.count("PrivacySpend(") == 2
    assert "unit all_features" in out and "group frequencies from a noisy histogram" in out
