"""Paper 001 experiments: tiny end-to-end runs (files, claims, privacy records) and data helpers."""

import json

import numpy as np
import pytest

from dpfair_jax.data import load_dataset
from dpfair_jax.runner import registry, run_experiment

from _studies import load_study

P = load_study("paper_001")


def _run(name, tmp_path, **over):
    res = run_experiment(registry.get(name), size="quick", overrides=over, root=tmp_path, fresh=True)
    d = tmp_path / "runs" / name
    claims = json.loads((d / "claims.json").read_text())
    privacy = json.loads((d / "privacy.json").read_text())
    return res, d, claims, privacy


def test_registered():
    names = {e.name for e in P.EXPERIMENTS}
    assert names == {"lens_output_perturbation", "lens_dpsgd", "lens_mitigation"}
    for e in P.EXPERIMENTS:
        assert e.paper == "001" and set(e.configs) == {"quick", "full"}
        assert e.configs["full"].get("batch_size", 32) == 32


def test_output_perturbation_tiny(tmp_path):
    _, d, claims, privacy = _run("lens_output_perturbation", tmp_path, datasets=["synthetic"],
                                 epsilons=[1.0, 5.0], num_draws=200, probes=20, synthetic={"n": 300, "d": 3})
    ids = {c["id"] for c in claims}
    assert {"op_larger_trace_larger_risk", "op_theorem1_tracks_mc", "cor2_group_normalization_closes_gap"} <= ids
    by = {c["id"]: c for c in claims}
    assert by["op_theorem1_tracks_mc"]["passed"]  # small noise: Theorem 1 is accurate
    assert (d / "figures" / "fig8_output_perturbation.png").exists()
    assert privacy["output_perturbation_eps1"]["relation"] == "replace_one"


def test_missing_data_skips_every_claim(tmp_path, monkeypatch):
    """A missing data set gives each of the experiment's claims a skipped row with the reason
    (formerly one placeholder row named '<experiment>_skipped'); a path that is given but missing
    is bad input, refused before the run."""
    monkeypatch.delenv(P.PARKINSONS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared/data/parkinsons_updrs.csv from here
    with pytest.raises(ValueError, match="missing.csv' does not exist"):
        _run("lens_dpsgd", tmp_path, dataset="parkinsons", path=str(tmp_path / "missing.csv"))
    for name in ("lens_mitigation", "lens_dpsgd"):
        _, _, claims, _ = _run(name, tmp_path, dataset="parkinsons")
        assert [c["id"] for c in claims] == [cid for cid, _ in P.CLAIMS[name]]
        assert all(c["status"] == "skipped" and c["passed"] is False and c["reason"] for c in claims)
    _, _, claims, _ = _run("lens_output_perturbation", tmp_path, datasets=["parkinsons"])
    assert [c["id"] for c in claims] == [cid for cid, _ in P.CLAIMS["lens_output_perturbation"]]
    assert all(c["status"] == "skipped" for c in claims)


def test_load_dataset_group_normalization():
    (tr, _), _ = load_dataset("synthetic", synthetic={"n": 400, "d": 3}, normalization="group")
    x, s = np.asarray(tr.x), np.asarray(tr.s)
    for a in range(2):
        np.testing.assert_allclose(x[s == a].mean(0), 0, atol=1e-4)
        np.testing.assert_allclose(x[s == a].std(0), 1, atol=1e-3)
    none, reason = load_dataset("parkinsons", path="/nonexistent.csv")
    assert none is None and "skipped" in reason


@pytest.mark.slow
def test_dpsgd_and_mitigation_tiny(tmp_path):
    _, d, claims, privacy = _run("lens_dpsgd", tmp_path, seeds=2, checkpoints=2, steps_per_checkpoint=10,
                                 decomposition_rows=64, clip_norms=[0.1, 1.0], synthetic={"n": 200, "d": 3})
    assert {"fig9_group_normalization", "fig10_psi_negligible", "trace_vs_boundary"} <= {c["id"] for c in claims}
    assert np.isfinite(privacy["dpsgd_final"]["epsilon"])
    _, d, claims, privacy = _run("lens_mitigation", tmp_path, seeds=2, steps=10, gammas=[0.0, 1.0],
                                 synthetic={"n": 200, "d": 3})
    assert privacy["mitigation"]["epsilon"] > privacy["dpsgd_baseline"]["epsilon"]


@pytest.mark.slow
def test_notebook_runs(tmp_path, monkeypatch):
    import pathlib

    nb = json.loads((pathlib.Path(__file__).parents[1] / "notebooks" / "paper_001_fairness_lens.ipynb").read_text())
    monkeypatch.chdir(tmp_path)
    env: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), "notebook", "exec"), env)  # noqa: S102
    df = env["df"]
    assert np.all(np.abs(df["mc"] - df["thm1"]) <= 0.1 * df["thm1"])
    assert float(env["jnp"].max(env["jnp"].abs(env["auto"] - env["closed"]["total"]))) < 1e-4
