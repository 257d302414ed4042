"""privacy.json records say what a study computed from private data outside the spend."""

import json

from dpfair_jax.runner.context import run_experiment
from dpfair_jax.runner.registry import Experiment
from dpfair_jax.privacy.accounting import PrivacySpend


def _run(config, ctx):
    ctx.record_privacy("release", PrivacySpend(1.0, 1e-5, notes="DP-SGD"), not_covered="standardization moments")
    ctx.record_privacy("plain", {"epsilon": 2.0, "delta": 1e-5, "relation": "replace_one", "unit": "example"})
    ctx.add_claim("t", "a claim", measured=1, target=1, passed=True)


def test_not_covered_is_kept_and_appended_to_the_notes(tmp_path):
    exp = Experiment("t_priv", "kit", "test", {"quick": {}, "full": {}}, _run)
    res = run_experiment(exp, size="quick", root=tmp_path, progress=False)
    assert res.ok
    rec = json.loads((tmp_path / "runs" / "t_priv" / "privacy.json").read_text())
    assert rec["release"]["not_covered"] == "standardization moments"
    assert rec["release"]["notes"] == "DP-SGD; NOT covered: standardization moments"
    assert "not_covered" not in rec["plain"]
