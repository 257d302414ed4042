"""Paper 004 experiments: registration, the equal-error rule, the study engine, skipping."""

import math

import numpy as np
import pandas as pd
import pytest

from dpfair_jax import models as M
from dpfair_jax.data import make_dataset
from dpfair_jax.runner import registry
from dpfair_jax.studies import tradeoff as T

from _studies import load_study

P = load_study("paper_004")


def test_registered_with_quick_and_full_and_the_study_design():
    names = {e.name for e in P.EXPERIMENTS}
    assert {"fermi_adult_dp", "fermi_credit_dp", "fermi_parkinsons_dp", "fermi_credit_eo", "fermi_adult_eo",
            "fermi_official_code", "fermi_adult_nonbinary", "fermi_cnn_synthetic", "sgda_convergence"} <= names
    for e in P.EXPERIMENTS:
        assert registry.get(e.name) is e and e.paper == "004"
        assert set(e.configs) == {"quick", "full"}
    for name in ("fermi_adult_dp", "fermi_credit_dp", "fermi_adult_eo", "fermi_credit_eo"):
        full = registry.get(name).configs["full"]
        # four methods, one unit; lambda log-spaced up to ~40 (the full ERMI); splits for intervals;
        # an equal random-stopping budget; every method trained to the paper's 200 epochs on a learning-rate grid up to 10
        assert full["methods"] == ["dpfermi", "pfld_stochastic", "pfld_epoch", "dpsgd"]
        lams = np.asarray(full["lams"])
        assert 30 <= lams.max() <= 50 and np.all(np.diff(np.log(lams)) > 0) and np.ptp(np.diff(np.log(lams))) < 0.3
        assert full["replicates"] >= 5 and full["selection"] == "private" and full["epochs"] >= 20
        assert len(full["lr_grid"]) >= 3 and full["epsilons"][:3] == [0.5, 1.0, 3.0] and math.isinf(full["epsilons"][-1])
        quick = registry.get(name).configs["quick"]
        assert quick["max_rows"] and quick["replicates"] >= 2 and set(quick) == set(full)
    official = registry.get("fermi_official_code").configs["full"]
    assert (official["lr_theta"], official["lr_w"], official["radius"], official["epochs"]) == (0.005, 0.01, 5.0, 200)
    assert max(official["lams"]) == 2.5  # the paper's range belongs to the one-cell regularizer


class _Ctx:
    name, seed = "fermi_toy_dp", 0

    def __init__(self):
        self.claims, self.tables = [], {}

    def add_claim(self, cid, statement, measured, target, passed, paper=None, *, kind="claim", reason=None,
                  status=None):
        self.claims.append({"id": cid, "passed": passed, "status": status, "reason": reason, "measured": measured})

    def comparison(self, *a, **k):
        from dpfair_jax.runner.context import comparison

        return comparison(*a, **k)

    def skip_claim(self, cid, statement, reason, *, target=None, paper=None, kind="claim"):
        self.claims.append({"id": cid, "passed": False, "status": "skipped", "reason": reason})

    def save_table(self, df, name):
        self.tables[name] = df


def _claim_table(replicates: int, gaps: dict, seed: int = 0) -> pd.DataFrame:
    """DP-FERMI's frontier (errors 0.15/0.17, violations 0.10/0.05) and one point per baseline at error
    0.17 whose violation is 0.05 + gap + noise (DP-SGD at 0.16: read at 0.16 + slack 0.01 = 0.17)."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(replicates):
        for e in (1.0, 3.0, math.inf):
            rows += [{"method": "dpfermi", "epsilon": e, "lam": lam, "replicate": r, "error": err, "violation": v}
                     for lam, err, v in ((1.0, 0.15, 0.10), (8.0, 0.17, 0.05))]
            for b, g in gaps.items():
                err = 0.16 if b == "dpsgd" else 0.17
                rows.append({"method": b, "epsilon": e, "lam": 0.0 if b == "dpsgd" else 1.0, "replicate": r,
                             "error": err, "violation": 0.05 + g + 0.002 * rng.normal()})
    return pd.DataFrame(rows)


class _VerdictCtx(_Ctx):
    name = "fermi_adult_dp"

    def add_verdict(self, cid, statement, verdict, paper=None, *, reason=None, extra=None):
        self.claims.append({"id": cid, "status": verdict.status, "statement": statement,
                            "measured": {**verdict.as_measured(), **(extra or {})}, "reason": reason})


def test_frontier_claims_one_verdict_per_baseline_against_the_papers_margin():
    from experiments.paper_004.config import PAPER_MARGINS

    config = dict(registry.get("fermi_adult_dp").configs["full"], epsilons=[1.0, 3.0, math.inf])
    gaps = {"pfld_epoch": 0.03, "pfld_stochastic": -0.03, "dpsgd": 0.0}

    class Res:
        table = _claim_table(8, gaps)

    ctx = _VerdictCtx()
    P._frontier_claim(ctx, config, Res(), "dp_violation")
    by = {c["id"]: c for c in ctx.claims}
    assert set(by) == {f"fermi_adult_dp_lower_violation_vs_{b}" for b in gaps}
    paper = by["fermi_adult_dp_lower_violation_vs_pfld_epoch"]
    m = paper["measured"]
    assert paper["status"] == "holds" and m["effect"] == pytest.approx(0.03, abs=0.003)
    assert m["comparisons"] == 3 and m["level"] == pytest.approx(1 - 0.05 / 3)
    assert m["paper_effect"]["value"] == PAPER_MARGINS["fermi_adult_dp"]["pfld_epoch"][0]
    assert "official result files" in m["paper_effect"]["source"] and m["replicates"] == 8
    assert 2 <= m["replicates_needed"] <= 8 and m["readings"] == "16/16"  # 8 splits x 2 finite epsilons
    assert "paper's baseline" in paper["statement"]
    sto = by["fermi_adult_dp_lower_violation_vs_pfld_stochastic"]
    assert sto["status"] == "fails" and sto["measured"]["paper_effect"]["value"] is None
    assert "kit's own comparison" in sto["statement"]
    sgd = by["fermi_adult_dp_lower_violation_vs_dpsgd"]  # no effect, the paper's 0.10 ruled out
    assert sgd["status"] == "fails" and "kit's own comparison" in sgd["statement"]
    assert "claim_effects" in ctx.tables


def test_frontier_claim_is_underpowered_at_two_noisy_splits():
    config = dict(registry.get("fermi_adult_dp").configs["quick"])

    class Res:
        table = _claim_table(2, {"pfld_epoch": 0.0, "pfld_stochastic": 0.0, "dpsgd": 0.0}, seed=1)

    t = Res.table
    sel = t["method"] == "pfld_epoch"
    t.loc[sel, "violation"] += np.where(t.loc[sel, "replicate"] == 0, 0.05, -0.05)  # split effects +-0.05
    ctx = _VerdictCtx()
    P._frontier_claim(ctx, config, Res(), "dp_violation")
    row = next(c for c in ctx.claims if c["id"].endswith("pfld_epoch"))
    assert row["status"] == "underpowered"
    assert row["measured"]["mde"] > row["measured"]["paper_effect"]["value"]
    assert row["measured"]["replicates_needed"] is None or row["measured"]["replicates_needed"] > 2


def test_replicates_for_matches_the_verdict_module():
    from dpfair_jax.runner.verdict import minimum_detectable_effect

    config = registry.get("fermi_adult_dp").configs["full"]
    n = P.replicates_for(0.01, 0.0106, config, 3)
    assert n is not None and n <= config["max_replicates"]
    mde = lambda r: minimum_detectable_effect(0.01 / math.sqrt(r), r - 1, comparisons=3)  # noqa: E731
    assert mde(n) <= 0.0106 < mde(n - 1)
    assert P.replicates_for(0.5, 0.0106, config, 3) is None  # over the budget
    assert P.replicates_for(0.02, None, config, 3) is None


def test_auto_replicates_runs_the_pilot_then_the_needed_count():
    config = dict(registry.get("fermi_adult_dp").configs["full"], epsilons=[1.0, 3.0, math.inf], _name="fermi_adult_dp")
    seen = []

    class Res:
        def __init__(self, r):
            self.table = _claim_table(r, {"pfld_epoch": 0.0, "pfld_stochastic": 0.0, "dpsgd": 0.0}, seed=2)

    def study(cfg):
        seen.append(cfg["replicates"])
        return Res(cfg["replicates"])

    count, found = P._auto_replicates(config, study)
    assert seen == [config["pilot_replicates"]] and "pfld_epoch" in found
    assert config["pilot_replicates"] <= count <= config["max_replicates"]


def test_equal_error_table_rule():
    rows = []
    # lambda=0 is shared: error 0.20, violation 0.30
    for meth, pts in {"dpfermi": [(0.0, 0.20, 0.30), (1.0, 0.205, 0.10), (2.0, 0.25, 0.01)],
                      "pfld": [(0.0, 0.20, 0.30), (1.0, 0.209, 0.15), (2.0, 0.30, 0.0)]}.items():
        for lam, err, vio in pts:
            for seed in range(2):
                rows.append({"epsilon": 1.0, "method": meth, "lam": lam, "seed": seed,
                             "error": err, "dp_violation": vio})
    t = T.equal_error_table(pd.DataFrame(rows), "dp_violation", 0.01).set_index("method")
    assert t.loc["dpsgd", "best_violation"] == pytest.approx(0.30)
    assert t.loc["dpfermi", "best_violation"] == pytest.approx(0.10)  # 0.25 error is over budget
    assert t.loc["pfld", "best_violation"] == pytest.approx(0.15)
    assert t.loc["dpfermi", "budget"] == pytest.approx(0.21)


def _toy(n=200, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 3)) + s[:, None]
    y = (x[:, 0] > 0.5).astype(int)
    return make_dataset(x, y, s)


@pytest.mark.slow
def test_tradeoff_study_grid_and_shared_lambda_zero_baseline():
    train, test = _toy(), _toy(seed=1)
    hp = {"lr_theta": 0.1, "lr_w": 0.2, "clip_theta": 1.0, "clip_w": 2.0, "radius": 2.0}
    kw = dict(model=M.logistic(), fairness="dp", lams=[0.0, 1.0], epsilons=[2.0, math.inf],
              seeds=2, epochs=1, batch_size=100, delta=1e-3, hp=hp)
    a = T.tradeoff_study(train, test, method="dpfermi", **kw)
    b = T.tradeoff_study(train, test, method="pfld", **kw)
    assert len(a) == 2 * 2 * 2 and set(a["lam"]) == {0.0, 1.0}
    assert np.all(a["truncated_steps"] == 0)
    # at lambda = 0 both methods are the same DP-SGD run (same keys, no regularizer): identical
    za = a[a["lam"] == 0].sort_values(["epsilon", "seed"])
    zb = b[b["lam"] == 0].sort_values(["epsilon", "seed"])
    np.testing.assert_allclose(za["error"].to_numpy(), zb["error"].to_numpy())
    np.testing.assert_allclose(za["dp_violation"].to_numpy(), zb["dp_violation"].to_numpy())


def test_parkinsons_skips_with_reason(tmp_path, monkeypatch):
    from dpfair_jax.data import tabular
    from dpfair_jax.runner import run_experiment

    monkeypatch.delenv(P.PARKINSONS_ENV, raising=False)
    monkeypatch.setattr(tabular, "default_parkinsons_path", lambda: None)  # no CSV anywhere
    res = run_experiment(registry.get("fermi_parkinsons_dp"), size="quick", root=tmp_path)
    assert [c["id"] for c in res.claims] == [f"fermi_parkinsons_dp_lower_violation_vs_{b}"
                                             for b in ("pfld_epoch", "pfld_stochastic", "dpsgd")]
    for row in res.claims:
        assert row["status"] == "skipped" and row["passed"] is False and "Parkinsons CSV" in row["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgda_convergence", "fermi_cnn_synthetic", "fermi_adult_dp"])
def test_quick_configs_run(tmp_path, name):
    from dpfair_jax.runner import run_experiment

    res = run_experiment(registry.get(name), size="quick", root=tmp_path)
    assert res.claims


def test_verdict_keys_are_checked_before_any_compute():
    exp = registry.get("fermi_adult_dp")
    ok = registry.resolve_config(exp, "full", {"auto_replicates": True, "max_replicates": 48, "target_power": 0.9})
    assert ok["auto_replicates"] is True and ok["max_replicates"] == 48
    for bad in ({"target_power": 1.5}, {"alpha": 0.0}, {"pilot_replicates": 1}, {"auto_replicates": 3}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            registry.resolve_config(exp, "full", bad)
