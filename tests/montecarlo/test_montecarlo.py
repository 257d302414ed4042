"""Tests for dpfair_jax.montecarlo: equality with Python loops, chunking/sharding invariance,
one compile per sweep, tidy frames and t-interval summaries against NumPy/SciPy, bad inputs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpfair_jax import montecarlo as mc

KEY = jax.random.key(0)
# Compiles dominate this file's run time: tests share a few (fn, num_trials, chunk_size) layouts so
# that the engine's compile cache is reused across tests.
N = 37
GRID = {"sigma": [0.0, 0.5, 2.0], "clip": [0.5, 1.0]}
T = 6


def reduce_trial(k: jax.Array) -> dict:
    """A trial with a matrix product (whose compiled form may depend on the chunk shape)."""
    z = jax.random.normal(k, (65, 3))
    x, w = z[:64], z[64]
    r = x @ w
    return {"m": jnp.sum(jnp.tanh(r) * x[:, 0]), "g": r @ x, "u": z[64, :2]}


def soa_trial(k: jax.Array) -> dict:
    """Element-wise ops and reductions in structure-of-arrays layout (the benchmark's kind of trial)."""
    z = jax.random.normal(k, (4, 200))
    x0, x1, e, w = z[0], z[1], z[2], z[3, :2]
    y = 0.5 * x0 - x1 + 0.1 * e
    r = w[0] * x0 + w[1] * x1 - y
    scale = jnp.minimum(1.0, 1.0 / (jnp.abs(r) * jnp.sqrt(x0 * x0 + x1 * x1) + 1e-12))
    g = jnp.stack([jnp.sum(scale * r * x0), jnp.sum(scale * r * x1)])
    return {"g": g, "mse": jnp.mean(r * r), "w": w}


def dp_point(k: jax.Array, sigma: jax.Array, clip: jax.Array) -> dict:
    """A small clipped noisy mean whose noise scale and clip norm are swept."""
    z = jax.random.normal(k, (65,))
    x = 2.0 * z[:64]
    clipped = jnp.clip(x, -clip, clip)
    est = (clipped.sum() + sigma * clip * z[64]) / 64.0
    return {"est": est, "pair": jnp.stack([est, clipped.mean()])}


def grid_sweep(**kw) -> mc.SweepResult:
    return mc.sweep(dp_point, KEY, GRID, T, chunk_size=3, **kw)


def _assert_bitwise(a, b):
    for (pa, la), (pb, lb) in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b)):
        assert pa == pb
        np.testing.assert_array_equal(np.asarray(la), np.asarray(lb), err_msg=str(pa))


# ------------------------------------------------------------------------------------- run_trials


def test_trial_keys_are_split_keys():
    ks = mc.trial_keys(KEY, 5)
    np.testing.assert_array_equal(jax.random.key_data(ks), jax.random.key_data(jax.random.split(KEY, 5)))
    raw = mc.trial_keys(jax.random.PRNGKey(0), 5)  # raw uint32 keys are accepted too
    np.testing.assert_array_equal(jax.random.key_data(raw), jax.random.key_data(ks))


def test_run_trials_equals_python_loop():
    out = mc.run_trials(reduce_trial, KEY, N, chunk_size=3)
    single = jax.jit(reduce_trial)
    loop = [single(k) for k in mc.trial_keys(KEY, N)]
    ref = jax.tree.map(lambda *xs: np.stack(xs), *loop)
    assert out["g"].shape == (N, 3) and out["u"].shape == (N, 2)
    np.testing.assert_array_equal(np.asarray(out["u"]), ref["u"])  # random draws: bitwise
    np.testing.assert_allclose(np.asarray(out["m"]), ref["m"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["g"]), ref["g"], rtol=1e-5, atol=1e-4)
    assert len(np.unique(np.asarray(out["m"]))) == N  # the trials are different draws


def draws_trial(k: jax.Array) -> dict:
    """Random draws and element-wise maps only: no floating-point reduction whose compiled order
    could depend on the chunk shape, so any layout must give the same bits."""
    a, b = jax.random.split(k)
    z = jax.random.normal(a, (3,))
    return {"z": z, "e": jnp.exp(z[0]) * jax.random.uniform(b), "i": jax.random.randint(b, (2,), 0, 1000)}


def test_chunked_equals_unchunked_bitwise():
    # each trial gets its own key in its own slot whatever the chunking and padding
    base = mc.run_trials(draws_trial, KEY, N)
    for chunk in (1, 3, 16, N, 100):  # 3 and 16 do not divide 37: the last chunk is padded
        _assert_bitwise(mc.run_trials(draws_trial, KEY, N, chunk_size=chunk), base)


def test_chunked_reductions_equal_to_rounding():
    # XLA's CPU backend compiles reductions and dots per chunk shape: equal up to float32 rounding
    for trial, exact, close in [(reduce_trial, "u", "g"), (soa_trial, "w", "g")]:
        base = mc.run_trials(trial, KEY, N)
        out = mc.run_trials(trial, KEY, N, chunk_size=3)
        np.testing.assert_array_equal(np.asarray(out[exact]), np.asarray(base[exact]))  # draws: bitwise
        np.testing.assert_allclose(np.asarray(out[close]), np.asarray(base[close]), rtol=1e-5, atol=1e-4)


def test_plan_chunks_covers_with_little_padding():
    for n in [1, 7, 37, 1000, 1001]:
        for dev in [1, 4]:
            m = -(-n // dev)
            for c in [None, 1, 3, 100, 300, 5000]:
                p = mc.plan_chunks(n, dev, c)
                assert p.padded >= n and p.chunk == (m if c is None else min(c, m))
                assert p.padded - n < dev * p.chunk  # less than one chunk wasted per device
    assert mc.plan_chunks(1000, 1, 300) == mc.Plan(1000, 1, 4, 300)
    assert mc.plan_chunks(1000, 4, 50) == mc.Plan(1000, 4, 5, 50)


def test_memory_budget_picks_a_chunk():
    per, fixed = mc.estimate_trial_memory(soa_trial, KEY)
    assert per >= 4 * 200 * 4  # at least the random draws of one trial
    budget = fixed + 16 * per + per // 2
    assert mc.plan_chunks(N, 1, (budget - fixed) // per).chunk == 16
    _assert_bitwise(mc.run_trials(soa_trial, KEY, N, memory_budget_bytes=budget),
                    mc.run_trials(soa_trial, KEY, N, chunk_size=16))  # same chunk shape: bitwise
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        mc.run_trials(soa_trial, KEY, N, memory_budget_bytes=16)


def test_run_trials_mesh_one_device_matches():
    mesh = mc.trial_mesh(jax.devices()[:1])
    _assert_bitwise(mc.run_trials(reduce_trial, KEY, N, chunk_size=3, mesh=mesh),
                    mc.run_trials(reduce_trial, KEY, N, chunk_size=3))


_SUBPROCESS = textwrap.dedent(
    """
    import sys
    import jax, numpy as np
    sys.path.insert(0, {tests!r})
    import test_montecarlo as t
    from dpfair_jax import montecarlo as mc
    assert jax.device_count() == 4, jax.devices()
    mesh = mc.trial_mesh()
    r = mc.run_trials(t.reduce_trial, t.KEY, t.N, chunk_size=3, mesh=mesh)
    q = mc.run_trials(t.draws_trial, t.KEY, t.N, mesh=mesh)
    s = t.grid_sweep(mesh=mesh)
    np.savez({out!r}, m=r["m"], g=r["g"], u=r["u"], draws=q["z"], est=s.values["est"], pair=s.values["pair"],
             sharded=len(r["m"].sharding.device_set))
    """
)


@pytest.mark.slow
def test_four_host_devices_equal_one(tmp_path: Path):
    out = tmp_path / "four.npz"
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env["JAX_PLATFORMS"] = "cpu"
    code = _SUBPROCESS.format(tests=str(Path(__file__).parent), out=str(out))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    four = np.load(out)
    assert int(four["sharded"]) == 4
    # the reference runs on the host CPU too (on a GPU machine the default device is the GPU)
    on_cpu = contextlib.nullcontext() if jax.default_backend() == "cpu" else jax.default_device(jax.devices("cpu")[0])
    with on_cpu:
        one = mc.run_trials(reduce_trial, KEY, N, chunk_size=3)  # same chunk shape: bitwise
        one_draws = mc.run_trials(draws_trial, KEY, N)  # 10 trials per device vs 37 at once
        s1 = grid_sweep()
    for name in ("m", "g", "u"):
        np.testing.assert_array_equal(four[name], np.asarray(one[name]), err_msg=name)
    np.testing.assert_array_equal(four["draws"], np.asarray(one_draws["z"]))
    np.testing.assert_array_equal(four["est"], np.asarray(s1.values["est"]))
    np.testing.assert_array_equal(four["pair"], np.asarray(s1.values["pair"]))


# ------------------------------------------------------------------------------------------ sweep


def test_sweep_equals_nested_loops_with_common_random_numbers():
    res = grid_sweep()
    assert res.values["est"].shape == (3, 2, T)
    assert res.values["pair"].shape == (3, 2, T, 2)
    single = jax.jit(dp_point)
    keys = mc.trial_keys(KEY, T)
    for i, s in enumerate(GRID["sigma"]):
        for j, c in enumerate(GRID["clip"]):
            for t in range(T):
                ref = single(keys[t], jnp.float32(s), jnp.float32(c))
                np.testing.assert_allclose(res.values["est"][i, j, t], ref["est"], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(res.values["pair"][i, j, t], ref["pair"], rtol=1e-5, atol=1e-6)
    # common random numbers: the clipped data mean (independent of sigma) is the same draw at
    # every sigma for a given trial and clip, bitwise
    cm = np.asarray(res.values["pair"][..., 1])
    np.testing.assert_array_equal(cm[0], cm[1])
    np.testing.assert_array_equal(cm[0], cm[2])
    assert not np.array_equal(cm[0, 0], cm[0, 1])


def test_sweep_compiles_once_and_does_not_retrace_new_values(caplog):
    traces = []

    def fn(k, lam, eta):
        traces.append(1)
        return {"loss": lam * jax.random.normal(k) + eta}

    lam1, lam2 = np.linspace(0.5, 1, 5), np.linspace(1, 2, 5)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        r1 = mc.sweep(fn, KEY, {"lam": lam1, "eta": [1.0, 2.0, 3.0]}, 4, chunk_size=7)
        n_traces = len(traces)
        # new values, same shapes: no new trace and no new compile
        r2 = mc.sweep(fn, KEY, {"lam": lam2, "eta": [4.0, 5.0, 6.0]}, 4, chunk_size=7)
    compiles = [r.getMessage() for r in caplog.records
                if "Compiling" in r.getMessage() and "_engine" in r.getMessage()]
    assert len(compiles) == 1, compiles
    assert len(traces) == n_traces <= 2  # one output check + one trace for all 15 grid points
    # r2 differs from r1 exactly as the hyperparameters say (common random numbers)
    eps = (np.asarray(r1.values["loss"])[:, 0, :] - 1.0) / lam1[:, None]
    np.testing.assert_allclose(np.asarray(r2.values["loss"])[:, 0, :], lam2[:, None] * eps + 4.0, rtol=1e-5, atol=1e-5)


def test_fn_takes_traced_hyperparameters_under_jitted_vmap():
    res = grid_sweep()
    f = jax.jit(jax.vmap(dp_point, in_axes=(None, 0, None)))
    out = f(mc.trial_keys(KEY, T)[2], jnp.asarray(GRID["sigma"], jnp.float32), jnp.float32(1.0))
    np.testing.assert_allclose(np.asarray(out["est"]), np.asarray(res.values["est"][:, 1, 2]), rtol=1e-5, atol=1e-6)


def test_to_frame_and_summary_against_numpy():
    res = grid_sweep()
    df = res.to_frame()
    assert df.shape == (3 * 2 * T, 2 + 1 + 1 + 2)
    assert list(df.columns) == ["sigma", "clip", "trial", "est", "pair[0]", "pair[1]"]
    est = np.asarray(res.values["est"])
    row = df[(df["sigma"] == 2.0) & (df["clip"] == 1.0) & (df["trial"] == 3)]
    assert len(row) == 1 and row["est"].item() == est[2, 1, 3]
    assert row["pair[1]"].item() == np.asarray(res.values["pair"])[2, 1, 3, 1]
    assert df["trial"].max() == T - 1

    summ = res.summary(confidence=0.9)
    assert len(summ) == 3 * 2 * 3  # grid points x metrics (array metric expanded)
    assert list(summ.columns) == ["sigma", "clip", "metric", "count", "mean", "sd", "se", "ci_low", "ci_high"]
    s = summ[(summ["sigma"] == 0.5) & (summ["clip"] == 0.5) & (summ["metric"] == "est")].iloc[0]
    x = est[1, 0].astype(np.float64)
    lo, hi = stats.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert s["count"] == T
    np.testing.assert_allclose(s["mean"], x.mean(), rtol=1e-12)
    np.testing.assert_allclose(s["sd"], x.std(ddof=1), rtol=1e-12)
    np.testing.assert_allclose(s["se"], stats.sem(x), rtol=1e-12)
    np.testing.assert_allclose([s["ci_low"], s["ci_high"]], [lo, hi], rtol=1e-10)
    # the frame and the summary agree through pandas as well
    g = df.groupby(["sigma", "clip"])["pair[0]"].agg(["mean", "std"]).reset_index()
    sp = summ[summ["metric"] == "pair[0]"].merge(g, on=["sigma", "clip"], suffixes=("", "_pd"))
    assert len(sp) == 6
    np.testing.assert_allclose(sp["mean"], sp["mean_pd"], rtol=1e-6)
    np.testing.assert_allclose(sp["sd"], sp["std"], rtol=1e-5)
    with pytest.raises(ValueError, match="confidence"):
        res.summary(confidence=95)


def test_summarize_nan_and_single_trial():
    st = mc.summarize(np.array([[1.0, np.nan], [3.0, np.nan], [np.nan, 2.0]]))
    np.testing.assert_array_equal(st["count"], [2, 1])
    np.testing.assert_allclose(st["mean"], [2.0, 2.0])
    assert np.isnan(st["sd"][1]) and np.isnan(st["ci_low"][1])
    np.testing.assert_allclose(st["ci_high"][0], 2.0 + stats.t.ppf(0.975, 1) * np.sqrt(2.0) / np.sqrt(2.0))


def test_sweep_integer_grid():
    def fn(k, m):
        return {"s": jnp.sum(jax.random.normal(k, (4,)) * m)}

    res = mc.sweep(fn, KEY, {"m": np.array([1, 2, 3])}, 3)
    assert res.values["s"].shape == (3, 3)
    np.testing.assert_allclose(np.asarray(res.values["s"][1]), 2 * np.asarray(res.values["s"][0]), rtol=1e-6)
    assert res.to_frame()["m"].dtype.kind == "i"


# ------------------------------------------------------------------------------------- bad inputs


def _ok(k):
    return {"x": jax.random.normal(k)}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_trials=0), "num_trials"),
        (dict(num_trials=2.5), "num_trials"),
        (dict(num_trials=4, chunk_size=0), "chunk_size"),
        (dict(num_trials=4, chunk_size=1.5), "chunk_size"),
        (dict(num_trials=4, chunk_size=2, memory_budget_bytes=10**6), "either chunk_size"),
        (dict(num_trials=4, mesh="cpu"), "mesh"),
    ],
)
def test_run_trials_bad_inputs(kwargs, match):
    n = kwargs.pop("num_trials")
    with pytest.raises(ValueError, match=match):
        mc.run_trials(_ok, KEY, n, **kwargs)


def test_refuses_rbg_and_key_arrays():
    rbg = jax.random.key(0, impl="rbg")
    with pytest.raises(ValueError, match="threefry"):
        mc.run_trials(_ok, rbg, 3)
    with pytest.raises(ValueError, match="threefry"):
        mc.sweep(lambda k, a: {"x": a}, rbg, {"a": [1.0]}, 3)
    with pytest.raises(ValueError, match="threefry"):
        mc.trial_keys(rbg, 3)
    with pytest.raises(ValueError, match="single PRNG key"):
        mc.run_trials(_ok, jax.random.split(KEY, 3), 3)
    with pytest.raises(ValueError, match="PRNG key"):
        mc.run_trials(_ok, np.zeros(3, np.float32), 3)


@pytest.mark.parametrize(
    "grid, match",
    [
        ({}, "empty"),
        ([1.0, 2.0], "dict"),
        ({"a": [[1.0, 2.0]]}, "1-D"),
        ({"a": 1.0}, "1-D"),
        ({"a": []}, "empty"),
        ({"a": ["x", "y"]}, "numbers"),
        ({"trial": [1.0]}, "reserved"),
        ({"not a name": [1.0]}, "identifier"),
    ],
)
def test_sweep_bad_grids(grid, match):
    with pytest.raises(ValueError, match=match):
        mc.sweep(lambda k, **p: {"x": jax.random.normal(k)}, KEY, grid, 2)


def test_sweep_bad_outputs():
    with pytest.raises(ValueError, match="dict"):
        mc.sweep(lambda k, a: a * 2.0, KEY, {"a": [1.0]}, 2)
    with pytest.raises(ValueError, match="clashes"):
        mc.sweep(lambda k, a: {"a": a}, KEY, {"a": [1.0]}, 2)
    with pytest.raises(ValueError, match="nested"):
        mc.sweep(lambda k, a: {"x": {"y": a}}, KEY, {"a": [1.0]}, 2)


# ------------------------------------------------------------------------------ benchmark helpers


def _bench_module(name: str):
    import importlib

    bench_dir = str(Path(__file__).resolve().parents[2] / "benchmarks")
    if bench_dir not in sys.path:
        sys.path.insert(0, bench_dir)
    return importlib.import_module(name)


def test_benchmark_common_rows_table_and_json(tmp_path: Path):
    common = _bench_module("common")
    m = "test machine"
    r1 = common.row("fast", 2.0, "s", machine_desc=m, baseline="slow", baseline_value=7.0, target=3.0)
    assert r1["ratio"] == pytest.approx(3.5) and r1["met"] is True
    r2 = common.row("rate", 10.0, "ex/s", machine_desc=m, baseline="b", baseline_value=4.0, target=3.0,
                    higher_is_better=True)
    assert r2["ratio"] == pytest.approx(2.5) and r2["met"] is False
    r3 = common.row("plain", 1.0, "s", machine_desc=m)
    assert r3["ratio"] is None and r3["met"] is None
    table = common.markdown_table([r1, r2, r3])
    assert table.splitlines()[0].startswith("| name | baseline | value |") and "| NO |" in table
    path = common.write_results("x", [r1, r2, r3], tmp_path / "x.json")
    rows = json.loads(path.read_text())
    assert [r["name"] for r in rows] == ["fast", "rate", "plain"]
    assert all(set(common.KEYS) <= set(r) for r in rows)
    with pytest.raises(ValueError, match="lacks keys"):
        common.write_results("x", [{"name": "bad"}], tmp_path / "y.json")
    t = common.timed(lambda: jnp.ones(3) * 2, repeats=2)
    assert len(t.times_s) == 2 and t.best_s <= t.median_s and t.compile_s >= 0
    assert "jax" in common.machine()


@pytest.mark.slow
def test_benchmark_script_smoke(tmp_path: Path):
    bench = _bench_module("montecarlo")
    rows = bench.main(["--quick", "--trials", "4", "--chunk", "2", "--chunks", "", "--repeats", "1",
                       "--out", str(tmp_path / "mc.json"), "--no-reexec"])
    names = {r["name"] for r in rows}
    assert {"jax_run_trials_chunk2", "numpy_careful", "numpy_naive", "jax_python_loop_jitted"} <= names
    assert json.loads((tmp_path / "mc.json").read_text())[0]["target"] == 3.0


def test_data_argument_is_traced_not_baked(caplog):
    def fn(k, data, shift):
        return {"v": jnp.sum(data["x"]) + shift + 0.0 * jax.random.normal(k)}

    x1, x2 = np.arange(6.0, dtype=np.float32), np.ones(6, np.float32)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        r1 = mc.sweep(fn, KEY, {"shift": [0.0, 1.0]}, 2, data={"x": x1})
        r2 = mc.sweep(fn, KEY, {"shift": [0.0, 1.0]}, 2, data={"x": x2})
    compiles = [r for r in caplog.records if "Compiling" in r.getMessage() and "_engine" in r.getMessage()]
    assert len(compiles) == 1
    np.testing.assert_allclose(np.asarray(r1.values["v"]), [[15.0, 15.0], [16.0, 16.0]])
    np.testing.assert_allclose(np.asarray(r2.values["v"]), [[6.0, 6.0], [7.0, 7.0]])
    out = mc.run_trials(lambda k, d: d * jax.random.uniform(k), KEY, 3, data=jnp.float32(2.0))
    np.testing.assert_allclose(np.asarray(out), 2.0 * np.asarray(jax.vmap(jax.random.uniform)(mc.trial_keys(KEY, 3))))
    with pytest.raises(ValueError, match="data"):
        mc.run_trials(lambda k, d: d, KEY, 3, data=jnp.array([np.nan]))
