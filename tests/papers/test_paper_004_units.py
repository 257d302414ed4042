"""Paper 004's privacy unit: the config key (checked before any compute) and the Theorem 3.3 formula
row of unit_claims (the paper's amplified record against the kit's exact membership-visible epsilon)."""

from __future__ import annotations

import importlib
import math
import types

import pandas as pd
import pytest
from _studies import load_study

from dpfair_jax.runner import registry

P = load_study("paper_004")
U = importlib.import_module(P.__name__.rsplit(".", 1)[0] + ".unit_claims")


def test_privacy_unit_key_is_checked_before_any_compute():
    exp = registry.get("fermi_adult_dp")
    assert registry.resolve_config(exp, "quick", {})["privacy_unit"] == "example"
    assert registry.resolve_config(exp, "full", {"privacy_unit": "sensitive_attribute"})["privacy_unit"] == \
        "sensitive_attribute"
    with pytest.raises(ValueError, match="privacy_unit"):
        registry.resolve_config(exp, "full", {"privacy_unit": "all_features"})


class _Ctx:
    def __init__(self):
        self.rows = []

    def add_claim(self, cid, statement, **kw):
        self.rows.append(dict(kw, id=cid, statement=statement))

    def skip_claim(self, cid, statement, reason, target=None):
        self.rows.append({"id": cid, "status": "skipped", "reason": reason})


def test_formula_row_records_the_understatement_ratio():
    ctx = _Ctx()
    table = pd.DataFrame({"method": ["dpfermi", "dpsgd"], "epsilon": [1.0, 1.0], "unit_ratio": [0.99, math.nan]})
    res = types.SimpleNamespace(info={"n_train": 2000, "steps": 60, "delta": 1e-6,
                                      "privacy_unit": "sensitive_attribute"}, table=table)
    cfg = {"batch_size": 100, "epsilons": [1.0, math.inf], "w_noise_ratio": 4.0, "fairness": "dp"}
    U.record(ctx, cfg, res)
    (row,) = ctx.rows
    assert row["id"] == U.CLAIM_ID and row["kind"] == "formula" and row["passed"] is False
    (r,) = row["measured"]["per_epsilon"]
    assert r["paper_recorded"] == pytest.approx(1.0, abs=1e-3) and r["ratio"] > 1.5
    assert row["measured"]["study_rows_spend_over_thm33"] == {"dpfermi@1": 0.99}
    assert "understates" in row["reason"]
    ctx = _Ctx()
    U.record(ctx, dict(cfg, epsilons=[math.inf]), res)
    assert ctx.rows[0]["status"] == "skipped"
