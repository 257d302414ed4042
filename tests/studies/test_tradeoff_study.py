"""The public tradeoff study: table, spends (selection accounted inside epsilon), the selection
itself, splits, the frontier comparison and the refusal of bad inputs before compute."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld_epoch as PE
from dpfair_jax.privacy import selection as S
from dpfair_jax.studies import tradeoff as T

LAW = S.RandomStopping(mean=1.5, shape=1.0)


def _frame(n: int = 1200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n)
    a = rng.normal(size=n) + 0.9 * sex
    b = rng.normal(size=n)
    y = (a + 0.5 * b + 0.4 * rng.normal(size=n) > 0.7).astype(int)
    return pd.DataFrame({"a": a, "b": b, "job": rng.choice(["x", "y", "z"], n),
                         "sex": np.where(sex == 1, "m", "f"), "label": np.where(y == 1, "yes", "no")})


KW = dict(target="label", group="sex", lams=[1.0], epsilons=[2.0, math.inf], replicates=2, epochs=2,
          batch_size=100, runs=LAW)


@pytest.fixture(scope="module")
def study():
    return T.tradeoff_frontier_study(_frame(), **KW)


@pytest.mark.slow
def test_table_and_spends(study):
    t = study.table
    assert len(t) == 4 * 2 * 2  # 4 methods (DP-SGD at lambda 0 only) x 2 epsilons x 2 replicates, one lambda
    assert set(t["method"]) == set(T.METHODS) and set(t.loc[t["method"] == "dpsgd", "lam"]) == {0.0}
    assert (t["unit"] == "example-level").all() and (t["metric"] == "dp_violation").all()
    assert t["error"].between(0, 1).all() and (t["violation"] >= 0).all()
    assert t["degenerate"].dtype == bool and "num_runs" not in t.columns
    fin = t[np.isfinite(t["epsilon"])]
    assert (fin["spend_epsilon"] <= fin["epsilon"]).all() and (fin["spend_epsilon"] >= 0.95 * fin["epsilon"]).all()
    # the padding's truncation charge comes out of the target delta, not on top of it
    assert (fin["spend_delta"] <= study.info["delta"]).all()
    assert np.isinf(t.loc[~np.isfinite(t["epsilon"]), "spend_epsilon"]).all()
    assert (fin["noise_theta"] > 0).all() and (t.loc[~np.isfinite(t["epsilon"]), "noise_theta"] == 0).all()
    for (m, e), part in t.groupby(["method", "epsilon"]):
        sp = study.spends[(m, e)]
        assert (part["spend_epsilon"] == sp.epsilon).all() and (part["spend_delta"] == sp.delta).all()
        assert sp.unit == "example" and sp.relation == "add_remove"
        # every chosen candidate lies in the method's grid
        grid = T._grid(m, None, None)
        for _, row in part.iterrows():
            assert {f: row[f"hp_{f}"] for f in grid[0]} == grid[int(row["candidate"])]
    fig = study.plot(title="toy")
    assert all("example-level" in ax.get_title() for ax in fig.axes if ax.get_title())


@pytest.mark.slow
def test_selection_spend_is_the_accounted_selection_of_each_method(study):
    """The recorded spend is the random-stopping bound over one run's event, and that run event is
    the one each algorithm's own accountant states (DP-FERMI's privacy(), PF-LD's spend())."""
    n, delta = study.info["n_train"], study.info["delta"]
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=study.info["steps"], batch_size=100)
    zt, zw = study.info["noise"]["dpfermi@2"]
    import dp_accounting

    from dpfair_jax.privacy import accounting as A

    want = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(50.0), A.dpsgd_event(
        float(zt), 100 / n, study.info["steps"], relative_noise=(1.0, zw / zt))])
    assert T._fermi_event(cfg, n, zt, zw) == want
    sp = study.spends[("dpfermi", 2.0)]
    inner = sp.event.event  # RepeatAndSelectDpEvent(run event + score release)
    assert inner.events[0] == T._fermi_event(cfg, n, zt, zw)
    assert inner.events[1].noise_multiplier == 30.0
    assert sp.event.mean == LAW.mean and sp.event.shape == LAW.shape
    assert sp.epsilon == pytest.approx(S.selection_epsilon(inner, LAW, delta))
    pcfg = PE.PFLDEpochConfig(model=cfg.model, num_groups=2, epochs=2, batch_size=100, delta=delta)
    zt, zv = study.info["noise"]["pfld_epoch@2"]
    assert study.spends[("pfld_epoch", 2.0)].event.event.events[0] == PE.spend(
        pcfg, n, PE.PFLDEpochHparams(noise_theta=zt, noise_violation=zv)).event


def _fake_program(kind, cfg, model, num_classes, n_val):
    """Stands in for the compiled training program: each run's validation error count is a known
    function of its candidate (lowest for lr_theta = 1, clip_theta = 4), its test error encodes it."""
    import jax.numpy as jnp

    def prog(train, val, test, keys, lam, zt, z2, zs, hp):
        bad = jnp.abs(jnp.log10(hp["lr_theta"])) + jnp.abs(hp["clip_theta"] - 4.0)
        L = lam.shape[0]
        return {"score_errors": 10.0 + 7.0 * bad, "error": 0.1 + 0.01 * bad, "dp_violation": jnp.full(L, 0.2),
                "eo_violation": jnp.full(L, 0.3), "ermi": jnp.zeros(L), "pred_share": jnp.full(L, 0.6),
                "truncated_steps": jnp.zeros(L), "params": {"w": jnp.stack([hp["lr_theta"], hp["clip_theta"]], -1)}}

    return prog


@pytest.mark.slow
def test_selection_picks_the_best_scored_run(monkeypatch):
    """Wiring of the selection (training replaced by a known score): the non-private arg-max picks
    the best grid point in every row; random stopping picks the best of the K candidates it drew
    (the study's internal search plan) and reports that run's (noisy) score, never K."""
    monkeypatch.setattr(T, "_program", _fake_program)
    kw = {**KW, "epsilons": [2.0], "lams": [0.5, 1.0]}
    res = T.tradeoff_frontier_study(_frame(), **kw, selection="nonprivate")
    t = res.table
    assert (t["selection"] == "nonprivate_argmax").all() and np.isinf(t["spend_epsilon"]).all()
    assert "not accounted" in res.spends[("dpfermi", 2.0)].notes
    for m, part in t.groupby("method"):
        assert (part["hp_lr_theta"] == 1.0).all() and (part["hp_clip_theta"] == 4.0).all()
        assert part["error"].to_numpy() == pytest.approx(0.1)
    law = S.RandomStopping(mean=6.0, shape=1.0)
    res = T.tradeoff_frontier_study(_frame(), **{**kw, "runs": law}, methods=["dpfermi", "dpsgd"], seed=3)
    t = res.table
    n_val = res.info["n_val"]
    assert (t["selection"] == "random_stopping(mean=6, shape=1)").all()
    for _, row in t.iterrows():
        grid = T._grid(row["method"], None, None)
        bad = [abs(math.log10(c["lr_theta"])) + abs(c["clip_theta"] - 4.0) for c in grid]
        chosen = bad[int(row["candidate"])]
        assert row["val_error_noisy"] * n_val == pytest.approx(10.0 + 7.0 * chosen, abs=1e-3)
        assert row["error"] == pytest.approx(0.1 + 0.01 * chosen, abs=1e-6)
    # the draws are K ~ law runs on uniform candidates (the plan is internal: K is never in a row);
    # each row's candidate is the best of its search's draws
    grids = {m: T._grid(m, None, None) for m in ("dpfermi", "dpsgd")}
    plan = T._search_plan(("dpfermi", "dpsgd"), grids, [2.0], [0.5, 1.0], 2, law, 3)
    ks = np.array([len(sr["cands"]) for sr in plan])
    assert ks.mean() > 2.0 and (ks >= 1).all() and len(plan) == len(t)
    for sr in plan:
        row = t[(t["method"] == sr["method"]) & (t["lam"] == sr["lam"]) & (t["replicate"] == sr["replicate"])]
        bad = [abs(math.log10(grids[sr["method"]][c]["lr_theta"])) + abs(grids[sr["method"]][c]["clip_theta"] - 4.0)
               for c in sr["cands"]]
        assert len(row) == 1 and int(row["candidate"].iloc[0]) in set(sr["cands"].tolist())
        assert row["error"].iloc[0] == pytest.approx(0.1 + 0.01 * min(bad), abs=1e-6)


class _Ctx:
    """A runner context stand-in: keeps the log and the privacy records, runs the chunks."""

    def __init__(self):
        self.messages, self.records = [], []

    def log(self, message):
        self.messages.append(message)

    def record_privacy(self, name, spend, *, not_covered=None):
        self.records.append((name, spend.to_dict(), not_covered))

    def map_chunks(self, chunks, compute, desc=""):
        return pd.concat([compute(c) for c in chunks], ignore_index=True)


def test_study_releases_only_the_winner_whatever_k(monkeypatch):
    """The selection's spend covers the winning run only: with a one-candidate grid (every run
    the same, its output known), the table, the log and the privacy records are the same whether
    each search draws K = 1 or K = 37 runs; no column names K or the losing runs."""
    import re

    monkeypatch.setattr(T, "_program", _fake_program)
    monkeypatch.setattr(S, "calibrate_for_selection", lambda *a, **k: 5.0)  # the noise is not at issue here
    kw = {**KW, "methods": ["dpsgd"], "epsilons": [2.0], "replicates": 1,
          "runs": S.RandomStopping(mean=6.0, shape=1.0), "search": {"dpsgd": {"lr_theta": [1.0], "clip_theta": [4.0]}}}
    seen = []
    for k in (1, 37):
        monkeypatch.setattr(S, "draw_num_runs", lambda key, law, k=k: k)
        ctx = _Ctx()
        t = T.tradeoff_frontier_study(_frame(), **kw, ctx=ctx).table
        log = [re.sub(r"[0-9.]+ s\b", "_ s", m) for m in ctx.messages]  # wall times aside
        seen.append((t, log, ctx.records))
    (t1, log1, rec1), (t2, log2, rec2) = seen
    assert len(t1) == 1
    pd.testing.assert_frame_equal(t1, t2)
    assert log1 == log2 and rec1 == rec2
    assert not {"num_runs", "runs", "scores", "cands", "candidates"} & set(t1.columns)


def test_replicate_splits_are_disjoint_sized_and_standardized():
    ds = T._as_dataset(_frame(), "label", "sex", None)
    sp = T.replicate_splits(ds, replicates=3, val_size=0.2, test_size=0.25, seed=1)
    (xtr, ytr, str_), (xva, _, _), (xte, _, _) = sp["train"], sp["val"], sp["test"]
    assert (xtr.shape[1], xva.shape[1], xte.shape[1]) == (660, 240, 300)  # n - both, ceil(0.2 n), ceil(0.25 n)
    raw = np.asarray(ds.x)
    for r in range(3):
        np.testing.assert_allclose(xtr[r][:, :2].mean(0), 0.0, atol=1e-9)  # numeric columns: train moments
        assert set(np.unique(xtr[r][:, 2:])) <= {0.0, 1.0}  # one-hot columns untouched
        rows = [tuple(np.round(v, 9)) for v in np.concatenate([xtr[r], xva[r], xte[r]])[:, 2:]]
        assert len(rows) == len(raw)
    assert not np.array_equal(xte[0], xte[1])
    for r, (tr, va, te) in enumerate(T._permutation_splits(1200, 3, 0.2, 0.25, 1)):
        assert (len(tr), len(va), len(te)) == (660, 240, 300)
        np.testing.assert_array_equal(np.sort(np.concatenate([tr, va, te])), np.arange(1200))
    # the former stratified split, only on request
    st = T.replicate_splits(ds, replicates=2, val_size=0.2, test_size=0.25, seed=1, stratify=True)
    assert abs(st["train"][1][0].mean() - np.asarray(ds.y).mean()) < 0.01
    assert abs(st["train"][2][0].mean() - np.asarray(ds.s).mean()) < 0.01


@pytest.mark.parametrize("field", ["y", "s"])
def test_splits_do_not_move_when_one_record_changes(field):
    """The default split is a function of (seed, n): changing one record's label or group moves no
    row between train, validation and test (the former stratified split moved hundreds at this n)."""
    ds = T._as_dataset(_frame(2000, seed=4), "label", "sex", None)
    base = T.replicate_splits(ds, replicates=3, seed=2)
    v = np.asarray(getattr(ds, field)).copy()
    for i in (0, 777, 1999):
        w = v.copy()
        w[i] = 1 - w[i]
        other = T.replicate_splits(ds.replace(**{field: w}), replicates=3, seed=2)
        changed = 0
        for name in ("train", "val", "test"):
            np.testing.assert_array_equal(base[name][0], other[name][0])  # same rows, same order, same moments
            changed += int(np.sum(base[name][1 if field == "y" else 2] != other[name][1 if field == "y" else 2]))
        assert changed == 3  # the changed record itself, in each of the 3 replicates


def test_a_split_without_a_group_is_refused_with_its_name():
    frame = _frame(600, seed=1)
    frame.loc[5, "sex"] = "x"  # a group of one row: at most one split can hold it
    ds = T._as_dataset(frame, "label", "sex", None)
    with pytest.raises(ValueError, match=r"replicate 0: the (train|val|test) split \(\d+ rows\) has no rows of "
                                         r"group\(s\) \[\d\]; use more data, merge small groups"):
        T.replicate_splits(ds, replicates=2, seed=0)
    with pytest.raises(ValueError, match="leave an empty split"):
        T.replicate_splits(T._as_dataset(_frame(8), "label", "sex", None), val_size=0.5, test_size=0.5)


def test_compare_frontiers_statuses_on_a_constructed_table():
    rows = []
    rng = np.random.default_rng(0)
    for r in range(6):
        rows.append({"method": "dpsgd", "epsilon": 1.0, "lam": 0.0, "replicate": r, "error": 0.20, "violation": 0.30})
        for lam, (e, v) in zip([1.0, 2.0], [(0.205, 0.10), (0.25, 0.02)]):
            rows.append({"method": "dpfermi", "epsilon": 1.0, "lam": lam, "replicate": r,
                         "error": e + 0.002 * rng.normal(), "violation": v + 0.005 * rng.normal()})
            rows.append({"method": "worse", "epsilon": 1.0, "lam": lam, "replicate": r,
                         "error": e + 0.002 * rng.normal(), "violation": v + 0.08 + 0.005 * rng.normal()})
            rows.append({"method": "same", "epsilon": 1.0, "lam": lam, "replicate": r,
                         "error": e + 0.002 * rng.normal(), "violation": v + 0.03 * rng.normal()})
            rows.append({"method": "better", "epsilon": 1.0, "lam": lam, "replicate": r,
                         "error": e + 0.002 * rng.normal(), "violation": max(v - 0.08, 0.0) + 0.005 * rng.normal()})
            rows.append({"method": "far", "epsilon": 1.0, "lam": lam, "replicate": r,
                         "error": e + 0.1, "violation": v})
    c = T.compare_frontiers(pd.DataFrame(rows), slack=0.01, bootstrap=500).set_index("baseline")
    assert c.loc["worse", "status"] == "lower" and c.loc["worse", "diff"] == pytest.approx(-0.08, abs=0.01)
    assert c.loc["dpsgd", "status"] == "lower" and c.loc["better", "status"] == "higher"
    assert c.loc["same", "status"] == "unresolved" and c.loc["far", "status"] == "baseline_unreached"
    assert c.loc["worse", "area"] < 0 and c.loc["better", "area"] > 0 and np.isnan(c.loc["dpsgd", "area"])
    np.testing.assert_allclose(c["level"], 0.21)


@pytest.mark.parametrize("kw, field", [
    ({"target": None}, "target"),
    ({"methods": ["dpfermi", "fair_sgd"]}, "method"),
    ({"lams": [-1.0]}, "lams"),
    ({"epsilons": [0.0]}, "epsilons"),
    ({"runs": S.RandomStopping(mean=2.0, shape=math.inf)}, "runs"),
    ({"val_size": 0.5, "test_size": 0.45}, "val_size"),
    ({"search": {"dpfermi": {"lr_theta": [1.0], "momentum": [0.9]}}}, "momentum"),
    ({"selection": "argmax"}, "selection"),
    ({"search": {"dpsgd": {"lr_theta": [-1.0]}}}, "lr_theta"),
    ({"replicates": 0}, "replicates"),
])
def test_bad_inputs_are_refused_before_compute(kw, field):
    with pytest.raises(ValueError, match=field):
        T.tradeoff_frontier_study(_frame(200), **{**KW, **kw})


@pytest.mark.slow
def test_converged_flag_separates_a_method_forced_short_of_its_optimum():
    """The per-row convergence flag on a real (non-private, eps = inf) study: DP-SGD with a workable
    learning rate converges in every replicate; DP-FERMI forced short (learning rate 1e-4) does not.
    ``frontier()`` carries the shares (1 and 0) and the plot's hollow squares sit on exactly DP-FERMI's
    points."""
    from dpfair_jax.studies.tradeoff.convergence import STATIONARITY_RTOL

    kw = {**KW, "lams": [1.0, 4.0], "epsilons": [math.inf], "epochs": 8, "methods": ["dpfermi", "dpsgd"],
          "selection": "nonprivate", "progress": False,
          "search": {"dpsgd": {"lr_theta": [3.0], "clip_theta": [4.0]},
                     "dpfermi": {"lr_theta": [1e-4], "clip_theta": [4.0], "lr_w": [0.05], "radius": [1.0]}}}
    kw.pop("runs")
    study = T.tradeoff_frontier_study(_frame(), **kw)
    t = study.table
    assert str(t["converged"].dtype) == "boolean"
    sgd, fermi = t[t["method"] == "dpsgd"], t[t["method"] == "dpfermi"]
    assert (sgd["stationarity"] <= STATIONARITY_RTOL).all() and sgd["converged"].all()
    assert (fermi["stationarity"] > 0.9).all() and not fermi["converged"].any()  # barely moved from the start
    ft = study.frontier()
    assert (ft.loc[ft["method"] == "dpsgd", "converged"] == 1.0).all()
    assert (ft.loc[ft["method"] == "dpfermi", "converged"] == 0.0).all()
    ax = study.plot().axes[0]
    squares = [ln for ln in ax.get_lines() if ln.get_marker() == "s" and ln.get_markerfacecolor() == "none"]
    got = sorted(zip(np.concatenate([ln.get_xdata() for ln in squares]), np.concatenate([ln.get_ydata() for ln in squares])))
    want = ft[ft["method"] == "dpfermi"]
    assert got == sorted(zip(want["error_mean"], want["violation_mean"]))
