"""Paper 004: the paper's other baselines as a config option, Parkinsons at full size, Retired Adult
marked unavailable."""

import pytest

from dpfair_jax.runner import registry
from dpfair_jax.studies import tradeoff as T

from _studies import load_study

P = load_study("paper_004")


def test_paper_baselines_are_an_option_beside_the_methods():
    from experiments.paper_004 import baselines as B
    from experiments.paper_004.config import PAPER_BASELINE_METHODS

    assert set(PAPER_BASELINE_METHODS["eo"]) == set(T.BASELINE_METHODS) | set(T.ORACLE_METHODS)
    assert not {"jagielski_post", "jagielski_in"} & set(PAPER_BASELINE_METHODS["dp"])  # equalized odds only
    for name in ("fermi_adult_dp", "fermi_credit_dp", "fermi_adult_eo", "fermi_credit_eo", "fermi_parkinsons_dp"):
        for size in ("quick", "full"):
            cfg = registry.get(name).configs[size]
            assert cfg["paper_baselines"] is False and B.study_methods(cfg) == cfg["methods"]
            on = registry.resolve_config(registry.get(name), size, {"paper_baselines": True})
            assert B.study_methods(on) == cfg["methods"] + PAPER_BASELINE_METHODS[cfg["fairness"]]
            grids = B.study_search(on, {})
            for m in T.BASELINE_METHODS:
                assert grids[m] == {"lr_theta": cfg["lr_grid"], "clip_theta": cfg["clip_grid"]}
            assert "jagielski_in" not in grids  # the study's own grid (the Auditor's step)


def test_claims_keep_the_papers_deciding_baseline():
    """The claims compare DP-FERMI with PF-LD (Tran et al.), its stochastic variant and DP-SGD only; the
    new baselines are rows of the table, not claims."""
    cfg = registry.resolve_config(registry.get("fermi_adult_eo"), "full", {"paper_baselines": True})
    from experiments.paper_004.claims import _baselines

    assert _baselines(cfg) == ["pfld_epoch", "pfld_stochastic", "dpsgd"]


def test_parkinsons_runs_at_full_size_and_retired_adult_is_marked_unavailable():
    from experiments.paper_004.config import UNAVAILABLE

    full = registry.get("fermi_parkinsons_dp").configs["full"]
    assert full["dataset"] == "parkinsons" and not full["max_rows"]  # every row
    assert "not available offline" in UNAVAILABLE["retired_adult"]


def test_retired_adult_is_a_note_row(tmp_path):
    from dpfair_jax.runner import run_experiment

    res = run_experiment(registry.get("fermi_retired_adult_dp"), size="quick", root=tmp_path)
    assert [c["id"] for c in res.claims] == ["fermi_retired_adult_dp_lower_violation_vs_pfld_epoch"]
    assert res.claims[0]["status"] == "skipped" and "not available offline" in res.claims[0]["reason"]


@pytest.mark.parametrize("unit", ["sensitive_attribute"])
def test_the_baselines_refuse_the_sensitive_attribute_unit_in_the_study(unit):
    from dpfair_jax.studies.tradeoff import baselines as BL

    with pytest.raises(ValueError, match="example level only"):
        BL.check_methods(["mitigation"], "dp", privacy_unit=unit)
