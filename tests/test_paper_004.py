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
        # an equal random-stopping budget; DP-SGD trained to convergence (20 epochs, lr tuned)
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


@pytest.mark.parametrize("statuses, replicates, expect, words", [
    (["lower", "lower", "baseline_unreached"], 5, "holds", None),
    (["lower", "higher", "unresolved"], 5, "fails", "below DP-FERMI's at equal error"),
    (["lower", "unresolved", "lower"], 5, "fails", "not resolved"),
    (["lower", "higher", "lower"], 2, "untestable", "smoke check"),
    (["lower", "lower", "lower"], 2, "untestable", "measured: DP-FERMI lower"),
])
def test_frontier_claim_status_and_reason(statuses, replicates, expect, words):
    cmp = pd.DataFrame({"epsilon": [1.0] * 3, "baseline": ["dpsgd", "pfld_epoch", "pfld_stochastic"],
                        "level": 0.16, "first_violation": 0.1, "baseline_violation": [0.2, 0.05, 0.1],
                        "diff": [-0.1, 0.05, 0.0], "diff_lo": [-0.12, 0.01, -0.02], "diff_hi": [-0.08, 0.09, 0.02],
                        "status": statuses})

    class Res:
        def compare(self, **kw):
            return cmp

    ctx = _Ctx()
    config = {"methods": ["dpfermi", "pfld_stochastic", "pfld_epoch", "dpsgd"], "slack": 0.01, "dataset": "toy",
              "fairness": "dp", "replicates": replicates, "bootstrap": 100, "epsilons": [1.0], "epochs": 3,
              "verdict_min_replicates": 5}
    P._frontier_claim(ctx, config, Res(), "dp_violation")
    (row,) = ctx.claims
    assert row["status"] == expect and row["passed"] == all(s in ("lower", "baseline_unreached") for s in statuses)
    assert row["reason"] is None if words is None else words in row["reason"]
    if "higher" in statuses:
        assert "[+0.0100, +0.0900]" in row["reason"]
    assert "frontier_comparison" in ctx.tables


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
    assert [c["id"] for c in res.claims] == ["fermi_parkinsons_dp_lower_violation_equal_error"]
    row = res.claims[0]
    assert row["status"] == "skipped" and row["passed"] is False and "Parkinsons CSV" in row["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgda_convergence", "fermi_cnn_synthetic", "fermi_adult_dp"])
def test_quick_configs_run(tmp_path, name):
    from dpfair_jax.runner import run_experiment

    res = run_experiment(registry.get(name), size="quick", root=tmp_path)
    assert res.claims
