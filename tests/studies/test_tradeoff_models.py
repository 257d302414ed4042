"""The public tradeoff study gives back its released models (the winner of each search, with the
row's spend; saveable with ``save_run``) and shows progress without revealing the number of runs."""

from __future__ import annotations

import logging
import math
import re

import jax
import numpy as np
import pandas as pd
import pytest

from dpfair_jax import models as M
from dpfair_jax.fairness import evaluation as EV
from dpfair_jax.privacy import selection as S
from dpfair_jax.serialization import load_run
from dpfair_jax.studies import tradeoff as T
from dpfair_jax.studies.tradeoff import progress as P

LAW = S.RandomStopping(mean=1.5, shape=1.0)
KW = dict(target="label", group="sex", lams=[1.0], epsilons=[2.0, math.inf], replicates=2, epochs=1,
          batch_size=100, runs=LAW, methods=["dpfermi", "dpsgd"])


def _frame(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n)
    a = rng.normal(size=n) + 0.9 * sex
    b = rng.normal(size=n)
    y = (a + 0.5 * b + 0.4 * rng.normal(size=n) > 0.7).astype(int)
    return pd.DataFrame({"a": a, "b": b, "sex": np.where(sex == 1, "m", "f"), "label": np.where(y == 1, "yes", "no")})


@pytest.fixture(scope="module")
def study():
    return T.tradeoff_frontier_study(_frame(), **KW, progress=False)


@pytest.mark.slow
def test_every_row_has_its_winning_model_with_the_rows_spend(study):
    t = study.table
    keys = [(r.method, float(r.epsilon), float(r.lam), int(r.replicate)) for r in t.itertuples()]
    assert list(study.models) == keys
    init = M.logistic().init(jax.random.key(0), 2)  # features a, b
    for (m, e, lam, r), row in zip(keys, t.to_dict("records")):
        sel = study.model(method=m, epsilon=e, lam=lam, replicate=r)
        leaves = jax.tree_util.tree_leaves(sel.params)
        assert all(isinstance(x, np.ndarray) and x.dtype == np.float32 for x in leaves)
        assert jax.tree_util.tree_structure(sel.params) == jax.tree_util.tree_structure(init)
        assert [x.shape for x in leaves] == [x.shape for x in jax.tree_util.tree_leaves(init)]
        assert sel.spend is study.spends[(m, e)]
        assert sel.hparams == {k[3:]: v for k, v in row.items() if k.startswith("hp_") and not pd.isna(v)}
        assert sel.metrics["error"] == row["error"] and sel.metrics["candidate"] == row["candidate"]


@pytest.mark.slow
def test_the_returned_model_reproduces_its_rows_test_metrics(study):
    """The model's own predictions on the replicate's test split (rebuilt from the seed) give
    exactly the row's test error and violation: the model is the one the row measured."""
    ds = T._as_dataset(_frame(), "label", "sex", None)
    splits = T.replicate_splits(ds, replicates=2, val_size=0.15, test_size=0.2, standardize=True, seed=0)
    test = T._stack(ds, splits["test"])
    for row in study.table.to_dict("records"):
        sel = study.model(row["method"], row["epsilon"], row["lam"], row["replicate"])
        part = jax.tree_util.tree_map(lambda a: a[row["replicate"]], test)
        got = EV.evaluate(M.logistic(), sel.params, part, 2)
        assert float(got["error"]) == row["error"]
        assert float(got["dp_violation"]) == pytest.approx(row["dp_violation"], abs=1e-6)


@pytest.mark.slow
def test_save_and_load_round_trip(study, tmp_path):
    sel = study.model("dpfermi", 2.0, 1.0, 1)
    path = sel.save(tmp_path / "dpfermi.msgpack", metadata={"dataset": "synthetic"})
    run = load_run(path, target=sel.params)
    for a, b in zip(jax.tree_util.tree_leaves(run.params), jax.tree_util.tree_leaves(sel.params)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert run.spend.epsilon == sel.spend.epsilon and run.spend.delta == sel.spend.delta
    assert run.spend.epsilon <= 2.0
    meta = run.metadata
    assert (meta["method"], meta["epsilon"], meta["lam"], meta["replicate"]) == ("dpfermi", 2.0, 1.0, 1)
    assert meta["hparams"] == sel.hparams and meta["metrics"]["error"] == sel.metrics["error"]
    assert meta["dataset"] == "synthetic"


@pytest.mark.slow
def test_an_unknown_row_is_a_clear_error(study):
    with pytest.raises(ValueError, match="no row"):
        study.model("dpfermi", 3.0, 1.0, 0)


def test_a_bad_progress_is_refused_before_compute():
    with pytest.raises(ValueError, match="progress must be"):
        T.tradeoff_frontier_study(_frame(200), **KW, progress="yes")


def _fake_program(kind, cfg, model, num_classes, n_val):
    """The compiled program replaced by a known output (the wiring is at issue, not training)."""
    import jax.numpy as jnp

    def prog(train, val, test, keys, lam, zt, z2, zs, hp):
        L = lam.shape[0]
        return {"score_errors": 10.0 + jnp.abs(jnp.log10(hp["lr_theta"])), "error": jnp.full(L, 0.1),
                "dp_violation": jnp.full(L, 0.2), "eo_violation": jnp.full(L, 0.3), "ermi": jnp.zeros(L),
                "pred_share": jnp.full(L, 0.6), "truncated_steps": jnp.zeros(L),
                "params": {"w": jnp.stack([hp["lr_theta"], hp["clip_theta"]], -1)}}

    return prog


FAST = {**KW, "methods": ["dpsgd"], "epsilons": [2.0], "replicates": 1, "runs": S.RandomStopping(mean=6.0, shape=1.0),
        "search": {"dpsgd": {"lr_theta": [1.0], "clip_theta": [4.0]}}}


@pytest.fixture()
def fake(monkeypatch):
    monkeypatch.setattr(T, "_program", _fake_program)
    monkeypatch.setattr(S, "calibrate_for_selection", lambda *a, **k: 5.0)


def test_progress_false_is_silent(fake, capsys, caplog):
    caplog.set_level(logging.INFO, logger=P.LOGGER.name)
    T.tradeoff_frontier_study(_frame(), **FAST, progress=False)
    out = capsys.readouterr()
    assert out.out == "" and out.err == "" and not caplog.records


def test_progress_logs_a_line_per_program_and_draws_a_bar(fake, capsys, caplog, monkeypatch):
    import sys
    import types

    # an imported ipykernel (other tests load it) without a running kernel is not a notebook
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    caplog.set_level(logging.INFO, logger=P.LOGGER.name)
    T.tradeoff_frontier_study(_frame(), **FAST)  # None: no terminal here, so lines only
    assert capsys.readouterr().err == ""
    lines = [r.getMessage() for r in caplog.records if r.name == P.LOGGER.name]
    assert lines == ["tradeoff dp: program fermi finished on 1 replicate(s) (1/1 programs)"]
    T.tradeoff_frontier_study(_frame(), **FAST, progress=True)
    assert "program x replicate blocks" in capsys.readouterr().err


def test_progress_and_models_do_not_reveal_the_number_of_runs(fake, monkeypatch, capsys, caplog, tmp_path):
    """Whether each search draws K = 1 or K = 37 runs, the bar, the log lines and the saved
    models are the same (a one-candidate grid: every run alike)."""
    caplog.set_level(logging.INFO, logger=P.LOGGER.name)
    seen = []
    for k in (1, 37):
        monkeypatch.setattr(S, "draw_num_runs", lambda key, law, k=k: k)
        caplog.clear()
        res = T.tradeoff_frontier_study(_frame(), **FAST, progress=True)
        err = capsys.readouterr().err
        path = res.model("dpsgd", 2.0, 0.0, 0).save(tmp_path / f"k{k}.msgpack")
        meta = load_run(path).metadata
        seen.append((err, [r.getMessage() for r in caplog.records], meta, len(res.models)))
    assert seen[0] == seen[1]
    text = seen[1][0] + "\n".join(seen[1][1]) + repr(seen[1][2])
    assert not re.search(r"\b37\b", text)
