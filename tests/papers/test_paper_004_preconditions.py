"""Paper 004's convergence preconditions on constructed tables: each check holds or fails for itself,
and a claim on a method whose precondition fails is untestable (never fails)."""

import math

import numpy as np
import pandas as pd

from dpfair_jax.runner import registry

from _studies import load_study_module

PRE = load_study_module("paper_004", "preconditions")
CL = load_study_module("paper_004", "claims")


class _Ctx:
    name, seed = "fermi_adult_dp", 0

    def __init__(self):
        self.claims, self.tables = [], {}

    def add_claim(self, cid, statement, measured, target, passed, paper=None, *, kind="claim", reason=None,
                  status=None):
        assert status == "holds" or reason, (cid, status)  # every row that does not hold says why
        self.claims.append({"id": cid, "status": status, "reason": reason, "measured": measured})

    def add_verdict(self, cid, statement, verdict, paper=None, *, reason=None, extra=None):
        self.claims.append({"id": cid, "status": verdict.status, "reason": verdict.reason,
                            "measured": {**verdict.as_measured(), **(extra or {})}})

    def skip_claim(self, cid, statement, reason, *, target=None, paper=None, kind="claim"):
        self.claims.append({"id": cid, "status": "skipped", "reason": reason})

    def save_table(self, df, name):
        self.tables[name] = df


LAMS = (1.0, 8.0)


def _table(fermi_inf_violation=(0.10, 0.05), gaps=None, lr=1.0, replicates=8, seed=0) -> pd.DataFrame:
    """DP-FERMI's frontier (error 0.15 / 0.17 at lambda 1 / 8) with violations ``fermi_inf_violation``
    at eps = inf (0.10 / 0.05 at the finite epsilons), each baseline one point at error 0.17 (DP-SGD
    0.16) whose violation is 0.05 + gap; every run selected at learning rate ``lr``."""
    rng = np.random.default_rng(seed)
    gaps = {"pfld_epoch": 0.03, "pfld_stochastic": -0.03, "dpsgd": 0.0} if gaps is None else gaps
    rows = []
    for r in range(replicates):
        for e in (1.0, 3.0, math.inf):
            vio = fermi_inf_violation if math.isinf(e) else (0.10, 0.05)
            rows += [{"method": "dpfermi", "epsilon": e, "lam": lam, "replicate": r, "error": err,
                      "violation": v + 0.001 * rng.normal(), "hp_lr_theta": lr}
                     for lam, err, v in zip(LAMS, (0.15, 0.17), vio)]
            for b, g in gaps.items():
                for lam in ((0.0,) if b == "dpsgd" else LAMS):
                    rows.append({"method": b, "epsilon": e, "lam": lam, "replicate": r,
                                 "error": 0.16 if b == "dpsgd" else 0.17, "hp_lr_theta": lr,
                                 "violation": 0.05 + g + 0.002 * rng.normal() - 0.001 * lam})
    return pd.DataFrame(rows)


def _reference(errors=None, violations=None) -> pd.DataFrame:
    errors = errors or {0.0: 0.16, 1.0: 0.15, 8.0: 0.17}
    violations = violations or {0.0: 0.05, 1.0: 0.10, 8.0: 0.05}
    return pd.DataFrame([{"replicate": r, "lam": lam, "error": errors[lam], "violation": violations[lam],
                          "objective": 0.3, "grad_norm": 1e-12} for r in range(8) for lam in errors])


def _config(**kw):
    config = dict(registry.get("fermi_adult_dp").configs["full"], epsilons=[1.0, 3.0, math.inf],
                  lr_grid=[0.1, 1.0, 10.0])
    config.update(kw)
    return config


def _run(table, ref, config):
    ctx = _Ctx()
    gates = PRE.precondition_rows(ctx, config, table, ref)

    class Res:
        pass

    Res.table = table
    CL._frontier_claim(ctx, config, Res(), "dp_violation", gates)
    return {c["id"]: c for c in ctx.claims}, gates


def test_every_precondition_holds_and_the_claims_are_decided():
    by, gates = _run(_table(), _reference(), _config())
    pre = [c for c in by.values() if "_precondition_" in c["id"]]
    # reference: DP-FERMI and DP-SGD; monotone: the three fair methods; lr edge: all four
    assert len(pre) == 2 + 3 + 4 and all(c["status"] == "holds" for c in pre) and gates == {}
    assert by["fermi_adult_dp_lower_violation_vs_pfld_epoch"]["status"] == "holds"
    assert by["fermi_adult_dp_lower_violation_vs_pfld_stochastic"]["status"] == "fails"


def test_an_unconverged_method_makes_its_claims_untestable_never_fails():
    # DP-FERMI at eps = inf: violation 0.10 -> 0.13 (far above the reference's 0.05 at lambda 8, and
    # rising in lambda): its reference and monotone preconditions fail
    by, gates = _run(_table(fermi_inf_violation=(0.10, 0.13)), _reference(), _config())
    assert by["fermi_adult_dp_precondition_dpfermi_reference"]["status"] == "fails"
    assert by["fermi_adult_dp_precondition_dpfermi_monotone"]["status"] == "fails"
    assert "lambda 8" in by["fermi_adult_dp_precondition_dpfermi_reference"]["reason"]
    assert set(gates) == {"dpfermi"}
    for b in ("pfld_epoch", "pfld_stochastic", "dpsgd"):
        row = by[f"fermi_adult_dp_lower_violation_vs_{b}"]
        assert row["status"] == "untestable" and "dpfermi's convergence precondition" in row["reason"]
    # the claim that would fail on its interval is untestable, and says what the interval reads
    sto = by["fermi_adult_dp_lower_violation_vs_pfld_stochastic"]
    assert sto["measured"]["status_before_gate"] == "fails" and "would read fails" in sto["reason"]


def test_the_learning_rate_at_the_grid_edge_gates_every_claim():
    by, gates = _run(_table(lr=10.0), _reference(), _config())
    edge = by["fermi_adult_dp_precondition_dpfermi_lr_edge"]
    assert edge["status"] == "fails" and edge["measured"]["share_at_top_lr"] == 1.0
    assert set(gates) == {"dpfermi", "pfld_epoch", "pfld_stochastic", "dpsgd"}
    assert all(by[f"fermi_adult_dp_lower_violation_vs_{b}"]["status"] == "untestable"
               for b in ("pfld_epoch", "pfld_stochastic", "dpsgd"))


def test_a_baseline_precondition_gates_only_its_own_claim():
    # DP-SGD's error at eps = inf 0.03 above the reference at lambda 0 (tolerance 0.005)
    by, gates = _run(_table(), _reference(errors={0.0: 0.13, 1.0: 0.15, 8.0: 0.17}), _config())
    assert by["fermi_adult_dp_precondition_dpsgd_reference"]["status"] == "fails" and set(gates) == {"dpsgd"}
    assert by["fermi_adult_dp_lower_violation_vs_dpsgd"]["status"] == "untestable"
    assert by["fermi_adult_dp_lower_violation_vs_pfld_epoch"]["status"] == "holds"


def test_no_reference_is_untestable_for_the_precondition_itself():
    ctx = _Ctx()
    gates = PRE.precondition_rows(ctx, _config(), _table(), None, "no reference for 9 classes")
    row = next(c for c in ctx.claims if c["id"].endswith("dpfermi_reference"))
    assert row["status"] == "untestable" and "9 classes" in row["reason"] and "dpfermi" in gates


def test_monotone_is_judged_on_the_mean_not_rescued_by_one_outlier_split():
    """The issue's case: a flat eps = inf frontier (0.030 at lambda 1 and 8) with one split at
    0.205 at lambda 8. A "no significant rise" test passes it (the outlier widens the interval);
    the interval of the mean increase reaches above the tolerance, so the precondition fails and
    the method's claims are untestable. Without the outlier the flat frontier holds."""
    from dpfair_jax.studies.tradeoff.convergence import monotone_check

    flat = _table(fermi_inf_violation=(0.030, 0.030))
    by, gates = _run(flat, _reference(), _config())
    assert by["fermi_adult_dp_precondition_dpfermi_monotone"]["status"] == "holds"
    out = flat.copy()
    hit = (out["method"] == "dpfermi") & np.isinf(out["epsilon"]) & (out["lam"] == 8.0) & (out["replicate"] == 3)
    assert hit.sum() == 1
    out.loc[hit, "violation"] = 0.205
    sub = out[(out["method"] == "dpfermi") & np.isinf(out["epsilon"])]
    assert monotone_check(sub, alpha=0.05)["monotone"]  # the lenient test: no significant rise
    res = PRE.monotone_rise(sub, alpha=0.05, tol=0.01)
    (pair,) = res["pairs"]
    assert not res["monotone"] and pair["lower"] < 0.0 < 0.01 < pair["upper"]
    assert abs(pair["increase"] - (0.205 - 0.030) / 8) < 0.002 and pair["max_split_increase"] > 0.17
    by, gates = _run(out, _reference(), _config())
    row = by["fermi_adult_dp_precondition_dpfermi_monotone"]
    assert row["status"] == "fails" and "upper bound" in row["reason"] and "dpfermi" in gates
    assert by["fermi_adult_dp_lower_violation_vs_pfld_epoch"]["status"] == "untestable"


def test_monotone_rise_with_one_split_uses_the_point_increase():
    sub = pd.DataFrame({"lam": [1.0, 8.0], "replicate": [0, 0], "violation": [0.05, 0.051]})
    assert not PRE.monotone_rise(sub, alpha=0.05, tol=0.01)["monotone"]
    sub["violation"] = [0.05, 0.04]
    assert PRE.monotone_rise(sub, alpha=0.05, tol=0.01)["monotone"]
