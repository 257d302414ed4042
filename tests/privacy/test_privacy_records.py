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


def test_privacy_spend_prints_a_short_line_and_repr_omits_the_event():
    import dp_accounting

    from dpfair_jax.privacy.records import PrivacySpend, event_summary

    inner = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
    spend = PrivacySpend(1.0, 1e-5, event=dp_accounting.ComposedDpEvent([inner] * 6), accountant="rdp")
    text = str(spend)
    assert text.startswith("(epsilon=1, delta=1e-05)-DP, unit example, add_remove, accountant rdp")
    assert "SelfComposed(PoissonSampled(q=0.01, Gaussian(z=1.1)), count=1000)" in text
    assert "... 2 more" in text and len(text) < 400
    assert "event" not in repr(spend) and "module_name" not in text
    assert event_summary(None) == "none"
    assert str(PrivacySpend(float("inf"), 0.0)).startswith("no guarantee")
