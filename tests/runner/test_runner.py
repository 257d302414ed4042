"""Tests of the experiment registry, results store, resumable sweeps and plots."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpfair_jax.privacy import accounting
from dpfair_jax.runner import context, plots, registry, store
from dpfair_jax.runner.context import provenance
from dpfair_jax.runner.context import RunContext, run_experiment
from dpfair_jax.runner.registry import Experiment

from _studies import EXPERIMENTS, load_study

kit = load_study("kit")

REPO = Path(__file__).resolve().parents[2]

# The chunk computation used in-process and in the SIGKILLed subprocess: deterministic in the chunk.
COMPUTE_SRC = textwrap.dedent("""
    import time
    import numpy as np
    import pandas as pd

    CALLS = []

    def compute(chunk):
        CALLS.append(chunk["i"])
        time.sleep(chunk.get("sleep", 0.0))
        rng = np.random.default_rng(chunk["i"])
        n = 3 + chunk["i"] % 4
        return pd.DataFrame({"i": chunk["i"], "j": np.arange(n), "value": rng.normal(size=n) / 3.0,
                             "label": [f"c{chunk['i']}"] * n})
""")


def _compute_ns() -> dict:
    ns: dict = {}
    exec(COMPUTE_SRC, ns)  # noqa: S102 - test helper shared with a subprocess
    return ns


def _noop(config, ctx):
    return None


def _exp(name="t_exp", run=_noop, paper="kit", configs=None) -> Experiment:
    return Experiment(name=name, paper=paper, description="test experiment",
                      configs=configs or {"quick": {"seed": 3, "n": 2}, "full": {"seed": 3, "n": 20}},
                      run=run, module="tests.test_runner")


def _ctx(tmp_path, name="t_exp", config=None) -> RunContext:
    return RunContext(_exp(name), config or {"seed": 3, "n": 2}, tmp_path / "runs" / name, progress=False)


CHUNKS = [{"i": i} for i in range(8)]


# --------------------------------------------------------------------------------------------
# registry


def test_experiment_validation():
    with pytest.raises(ValueError, match="paper"):
        _exp(paper="banana")
    assert _exp(paper="007").paper == "007"  # a study folder may name a new paper
    with pytest.raises(ValueError, match="quick"):
        _exp(configs={"full": {"a": 1}})
    with pytest.raises(ValueError, match="JSON"):
        _exp(configs={"quick": {"a": object()}})
    with pytest.raises(ValueError, match="configs has key"):
        _exp(configs={"quick": {}, "medium": {}})
    with pytest.raises(ValueError, match="letters"):
        _exp(name="a/b")
    assert _exp(paper="paper_3").paper == "003"
    assert _exp(paper=1).paper == "001"


def test_register_get_and_conflicts():
    exp = registry.register(_exp("t_reg"))
    try:
        assert registry.get("t_reg") is exp
        registry.register(_exp("t_reg"))  # same module: re-import replaces
        other = Experiment("t_reg", "kit", "x", {"quick": {}}, _noop, module="elsewhere")
        with pytest.raises(ValueError, match="registered by both"):
            registry.register(other)
        with pytest.raises(ValueError, match="valid names:.*t_reg"):
            registry.get("t_missing")
    finally:
        registry.unregister("t_reg")


def test_overrides_and_resolve_config():
    assert registry.parse_overrides(["a=1", "b=0.5", "c=[1, 2]", "d=true", "e=hello", "f=null", "g=x=y"]) == {
        "a": 1, "b": 0.5, "c": [1, 2], "d": True, "e": "hello", "f": None, "g": "x=y"}
    with pytest.raises(ValueError, match="key=value"):
        registry.parse_overrides(["novalue"])
    exp = _exp(configs={"quick": {"lr": 0.1, "steps": 3}})
    cfg = registry.resolve_config(exp, "quick", {"lr": 1})
    assert cfg == {"lr": 1.0, "steps": 3} and isinstance(cfg["lr"], float)
    with pytest.raises(ValueError, match="valid keys: lr, steps"):
        registry.resolve_config(exp, "quick", {"lrr": 1})
    with pytest.raises(ValueError, match="no 'full' config"):
        registry.resolve_config(exp, "full")
    # the registered config is not mutated
    assert exp.configs["quick"]["lr"] == 0.1


def test_discover_reports_broken_module_and_keeps_others(tmp_path, monkeypatch):
    (tmp_path / "t_good_mod.py").write_text(textwrap.dedent("""
        from dpfair_jax.runner.registry import Experiment, register
        register(Experiment("t_discovered", "002", "d", {"quick": {}}, lambda c, x: None))
    """))
    (tmp_path / "t_broken_mod.py").write_text(textwrap.dedent("""
        from dpfair_jax.runner.registry import Experiment, register
        register(Experiment("t_half", "002", "d", {"quick": {}}, lambda c, x: None))
        raise RuntimeError('boom at import')
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = registry.discover(["t_broken_mod", "t_good_mod"])
        assert "t_broken_mod" in found.errors and "boom at import" in found.errors["t_broken_mod"]
        assert "RuntimeError" in found.tracebacks["t_broken_mod"]
        names = [e.name for e in found.experiments]
        assert "t_discovered" in names and "t_half" not in names
        assert "t_broken_mod" not in sys.modules
    finally:
        registry.unregister("t_discovered")
        sys.modules.pop("t_good_mod", None)


def test_default_discovery_finds_kit():
    folders = registry.study_folders(EXPERIMENTS)
    assert folders[0].name == "kit"
    assert all(f.name == "kit" or f.name.startswith("paper_") for f in folders)
    found = registry.discover([EXPERIMENTS / "kit"])
    assert "kit_accounting" in [e.name for e in found.experiments]


# --------------------------------------------------------------------------------------------
# store


def test_csv_round_trip_is_exact_and_lossless_copy(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({
        "x": np.concatenate([rng.normal(size=50) * 10.0 ** rng.integers(-300, 300, 50), [0.1 + 0.2, 1 / 3, -0.0]]),
        "k": np.arange(53, dtype=np.int64),
        "name": [f"g{i}" for i in range(53)],
    })
    hashes = store.write_table(df, tmp_path, "t")
    # exact with the round-trip parser (pandas 2's default float parser is not exact; pandas 3's is)
    back = pd.read_csv(tmp_path / "t.csv", **store.csv_read_options())
    np.testing.assert_array_equal(back["x"].to_numpy(), df["x"].to_numpy())
    pd.testing.assert_frame_equal(store.read_table(tmp_path, "t"), df)
    assert set(hashes) == {"t.csv", "t.pkl"} or set(hashes) == {"t.csv", "t.parquet"}
    for fname, digest in hashes.items():
        assert store.sha256_file(tmp_path / fname) == digest
    with pytest.raises(ValueError, match="DataFrame"):
        store.write_table({"a": [1]}, tmp_path, "bad")


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = tmp_path / "sub" / "f.json"
    digest = store.atomic_write_json(path, {"b": np.float32(1.5), "a": [np.int64(2)], "n": float("nan"),
                                            "i": -float("inf")})
    assert store.sha256_file(path) == digest
    assert json.loads(path.read_text()) == {"a": [2], "b": 1.5, "n": None, "i": "-inf"}
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]


def test_stable_hash():
    a = store.stable_hash({"x": 1, "y": [np.float64(0.5), "s"]})
    assert a == store.stable_hash({"y": [0.5, "s"], "x": 1})
    assert a != store.stable_hash({"x": 1.0, "y": [0.5, "s"]})
    assert store.results_root("/x") == Path("/x")


def test_results_root_env(monkeypatch):
    monkeypatch.setenv(store.ENV_RESULTS, "/tmp/somewhere")
    assert store.results_root() == Path("/tmp/somewhere")
    monkeypatch.delenv(store.ENV_RESULTS)
    assert store.results_root() == Path("results")


# --------------------------------------------------------------------------------------------
# map_chunks: resume and corruption


def test_map_chunks_resume_after_exception(tmp_path):
    ref_ns = _compute_ns()
    reference = _ctx(tmp_path / "ref").map_chunks(CHUNKS, ref_ns["compute"])
    assert len(ref_ns["CALLS"]) == len(CHUNKS)
    assert reference["i"].tolist() == [c["i"] for c in CHUNKS for _ in range(3 + c["i"] % 4)]

    ns = _compute_ns()
    k = 3

    def failing(chunk):
        if len(ns["CALLS"]) == k:
            raise KeyboardInterrupt  # as Ctrl-C would, after k finished chunks
        return ns["compute"](chunk)

    with pytest.raises(KeyboardInterrupt):
        _ctx(tmp_path).map_chunks(CHUNKS, failing)
    assert ns["CALLS"] == [0, 1, 2]

    ns2 = _compute_ns()
    ctx = _ctx(tmp_path)
    resumed = ctx.map_chunks(CHUNKS, ns2["compute"])
    assert ns2["CALLS"] == [3, 4, 5, 6, 7]  # only the missing chunks
    assert ctx.chunk_stats == {"computed": 5, "reused": 3, "corrupt": 0}
    pd.testing.assert_frame_equal(resumed, reference)

    ns3 = _compute_ns()
    again = _ctx(tmp_path).map_chunks(CHUNKS, ns3["compute"])
    assert ns3["CALLS"] == []
    pd.testing.assert_frame_equal(again, reference)


def test_chunk_identity_depends_on_config_and_stage(tmp_path):
    ns = _compute_ns()
    _ctx(tmp_path).map_chunks(CHUNKS[:2], ns["compute"])
    _ctx(tmp_path, config={"seed": 3, "n": 5}).map_chunks(CHUNKS[:2], ns["compute"])
    _ctx(tmp_path).map_chunks(CHUNKS[:2], ns["compute"], desc="other_stage")
    _ctx(tmp_path).map_chunks(list(reversed(CHUNKS[:2])), ns["compute"])  # same chunks: reused
    assert ns["CALLS"] == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "no_sidecar", "bad_sidecar", "no_data"])
def test_corrupt_chunk_is_recomputed(tmp_path, damage, capsys):
    ns = _compute_ns()
    ctx = _ctx(tmp_path)
    reference = ctx.map_chunks(CHUNKS, ns["compute"])
    cid = ctx.chunk_id(CHUNKS[5], "chunks")
    data, side = store.ChunkCache(ctx.workdir / "chunks").paths(cid)
    if damage == "flip_byte":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:10])
    elif damage == "no_sidecar":
        side.unlink()
    elif damage == "bad_sidecar":
        side.write_text("{not json")
    else:
        data.unlink()
    ns2 = _compute_ns()
    ctx2 = _ctx(tmp_path)
    out = ctx2.map_chunks(CHUNKS, ns2["compute"])
    assert ns2["CALLS"] == [5]
    assert ctx2.chunk_stats["corrupt"] == 1
    assert "corrupt" in capsys.readouterr().err
    pd.testing.assert_frame_equal(out, reference)
    assert store.ChunkCache(ctx.workdir / "chunks").status(cid).state == "ok"


def test_map_chunks_bad_inputs(tmp_path):
    ctx = _ctx(tmp_path)
    with pytest.raises(ValueError, match="list of dicts"):
        ctx.map_chunks({"i": 1}, lambda c: pd.DataFrame())
    with pytest.raises(ValueError, match="chunks\\[1\\] must be a dict"):
        ctx.map_chunks([{"i": 0}, 3], lambda c: pd.DataFrame())
    with pytest.raises(ValueError, match="duplicate"):
        ctx.map_chunks([{"i": 0}, {"i": 0}], lambda c: pd.DataFrame())
    with pytest.raises(ValueError, match="JSON"):
        ctx.map_chunks([{"i": object()}], lambda c: pd.DataFrame())
    with pytest.raises(ValueError, match="return a pandas.DataFrame"):
        ctx.map_chunks([{"i": 0}], lambda c: [1, 2])
    assert ctx.map_chunks([], lambda c: pd.DataFrame()).empty


def test_resume_after_sigkill(tmp_path):
    """A real SIGKILL mid-sweep: the restart computes only what is missing, same final table."""
    root = tmp_path / "killed"
    chunks = [{"i": i, "sleep": 0.15} for i in range(12)]
    script = tmp_path / "sweep.py"
    script.write_text(COMPUTE_SRC + textwrap.dedent(f"""
        from dpfair_jax.runner.context import RunContext
        from dpfair_jax.runner.registry import Experiment
        exp = Experiment("t_exp", "kit", "test experiment", {{"quick": {{"seed": 3, "n": 2}}}},
                         lambda c, x: None, module="tests.test_runner")
        ctx = RunContext(exp, {{"seed": 3, "n": 2}}, {str(root / "runs" / "t_exp")!r}, progress=False)
        ctx.map_chunks({chunks!r}, compute)
        print("finished")
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO)
    chunk_dir = root / "runs" / "t_exp" / "chunks"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(chunk_dir.glob("*.json"))) < 3:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    ctx = RunContext(_exp(), {"seed": 3, "n": 2}, root / "runs" / "t_exp", progress=False)
    cache = store.ChunkCache(chunk_dir)
    saved = [c["i"] for c in chunks if cache.status(ctx.chunk_id(c, "chunks")).state == "ok"]
    assert 3 <= len(saved) < len(chunks)
    ns = _compute_ns()
    fast = [dict(c, sleep=0.15) for c in chunks]
    out = ctx.map_chunks(fast, ns["compute"])
    assert sorted(ns["CALLS"]) == [c["i"] for c in chunks if c["i"] not in saved]
    ref_ns = _compute_ns()
    reference = _ctx(tmp_path / "ref").map_chunks([{"i": i, "sleep": 0.0} for i in range(12)], ref_ns["compute"])
    pd.testing.assert_frame_equal(out, reference)


# --------------------------------------------------------------------------------------------
# run_experiment: claims, privacy, meta


def _claims_run(config, ctx):
    ctx.add_claim("t_ok", "a passing claim", measured=np.float32(0.5), target="<= 1", passed=np.bool_(True))
    ctx.add_claim("t_fail", "a failing claim", measured=float("nan"), target=[0, 1], passed=False, paper="003",
                  reason="the measurement was NaN")
    ctx.record_privacy("release", {"epsilon": 1.0, "delta": 1e-5, "relation": "add_remove", "unit": "example"})
    ctx.record_compile_time(0.25)
    ns = _compute_ns()
    df = ctx.map_chunks([{"i": i} for i in range(config["n"])], ns["compute"])
    return df


def test_run_experiment_writes_claims_privacy_meta(tmp_path):
    exp = _exp(run=_claims_run)
    res = run_experiment(exp, size="quick", root=tmp_path, progress=False)
    d = tmp_path / "runs" / "t_exp"
    assert res.ok and res.run_dir == d
    claims = json.loads((d / "claims.json").read_text())
    assert isinstance(claims, list) and len(claims) == 2
    for c in claims:
        assert set(c) == {"id", "paper", "statement", "measured", "target", "passed", "kind", "status", "reason",
                          "target_met"}
        assert isinstance(c["passed"], bool) and c["paper"] in registry.PAPERS
    assert claims[0] == {"id": "t_ok", "paper": "kit", "statement": "a passing claim", "measured": 0.5,
                         "target": "<= 1", "passed": True, "kind": "claim", "status": "holds", "reason": None,
                         "target_met": True}
    assert claims[1]["measured"] is None and claims[1]["paper"] == "003" and claims[1]["passed"] is False
    assert claims[1]["status"] == "fails" and claims[1]["kind"] == "claim"
    assert claims[1]["reason"] == "the measurement was NaN"
    assert json.loads((d / "privacy.json").read_text())["release"]["relation"] == "add_remove"
    meta = json.loads((d / "meta.json").read_text())
    assert meta["seed"] == 3 and meta["status"] == "complete" and meta["compile_seconds"] == 0.25
    for pkg in ("jax", "jaxlib", "numpy", "dp-accounting", "flax", "optax"):
        assert meta["versions"][pkg]
    assert meta["devices"]["device_count"] >= 1 and meta["devices"]["device_kind"]
    assert meta["wall_seconds"] >= 0 and meta["start_time"] <= meta["end_time"]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["config"] == {"seed": 3, "n": 2} and cfg["size"] == "quick"
    assert cfg["code_version"] == meta["code_version"] == context.code_version(exp)
    assert len(cfg["code_version"]["package"]) == 64
    # the returned table is saved as "results", exactly
    table = store.read_table(d, "results")
    pd.testing.assert_frame_equal(table, _compute_ns()["compute"]({"i": 0}).pipe(
        lambda a: pd.concat([a, _compute_ns()["compute"]({"i": 1})], ignore_index=True)))
    manifest = json.loads((d / "manifest.json").read_text())["sha256"]
    assert manifest["results.csv"] == store.sha256_file(d / "results.csv")
    assert not any(k.startswith("chunks/") for k in manifest)


def test_stale_chunks_pruned_and_fresh(tmp_path):
    exp = _exp(run=_claims_run)
    run_experiment(exp, size="full", root=tmp_path, progress=False)
    chunk_dir = tmp_path / "runs" / "t_exp" / "chunks"
    assert len(list(chunk_dir.glob("*.pkl"))) == 20
    run_experiment(exp, size="quick", root=tmp_path, progress=False)
    assert len(list(chunk_dir.glob("*.pkl"))) == 2  # the full run's chunks are stale
    (tmp_path / "runs" / "t_exp" / "stray.txt").write_text("x")
    run_experiment(exp, size="quick", root=tmp_path, fresh=True, progress=False)
    assert not (tmp_path / "runs" / "t_exp" / "stray.txt").exists()


def test_claim_and_privacy_validation(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.add_claim("c1", "s", 1, 1, True)
    with pytest.raises(ValueError, match="already added"):
        ctx.add_claim("c1", "s", 1, 1, True)
    with pytest.raises(ValueError, match="paper"):
        ctx.add_claim("c2", "s", 1, 1, True, paper="9")
    with pytest.raises(ValueError, match="single boolean"):
        ctx.add_claim("c3", "s", 1, 1, np.array([True, False]))
    with pytest.raises(ValueError, match="non-empty"):
        ctx.add_claim("", "s", 1, 1, True)
    with pytest.raises(ValueError, match="relation"):
        ctx.record_privacy("p", {"epsilon": 1.0, "delta": 1e-5})
    with pytest.raises(ValueError, match="epsilon"):
        ctx.record_privacy("p", {"relation": "replace_one", "unit": "example"})
    with pytest.raises(ValueError, match="'unit' must be one of example, sensitive_attribute"):
        ctx.record_privacy("p", {"relation": "replace_one", "epsilon": 1.0})
    with pytest.raises(ValueError, match="table name"):
        ctx.save_table(pd.DataFrame(), "../x")


def test_formula_checks_and_skipped_claims(tmp_path):
    """Formula checks are rows of kind "formula"; a claim whose cell is absent is a skipped row
    (passed False, status "skipped", a reason), never left out; ids are unique over both kinds."""
    ctx = _ctx(tmp_path)
    chk = ctx.add_check("f1", "closed form vs SciPy", measured=1e-14, target="<= 1e-12", passed=True)
    assert chk["kind"] == "formula" and chk["status"] == "holds" and chk["reason"] is None
    bad = ctx.add_check("f2", "ledger vs hand", measured=None, target="importable", passed=False,
                        reason="dpfair_jax.privacy.accounting failed to import (ImportError: x)")
    assert bad["status"] == "fails" and "ImportError" in bad["reason"]
    # a failing formula check without a reason: a coding error in the kit, said so
    assert ctx.add_check("f3", "s", 1, 0, False)["reason"] == context.FORMULA_FAILURE
    sk = ctx.skip_claim("c_cell", "needs the K = 5 cell", "the grid has no K = 5 cell", target="> 0.1")
    assert sk == {"id": "c_cell", "paper": "kit", "statement": "needs the K = 5 cell", "measured": None,
                  "target": "> 0.1", "passed": False, "kind": "claim", "status": "skipped",
                  "reason": "the grid has no K = 5 cell", "target_met": None}
    on_disk = json.loads((ctx.workdir / "claims.json").read_text())
    assert [(c["id"], c["kind"], c["status"]) for c in on_disk] == [
        ("f1", "formula", "holds"), ("f2", "formula", "fails"), ("f3", "formula", "fails"),
        ("c_cell", "claim", "skipped")]
    with pytest.raises(ValueError, match="already added"):
        ctx.skip_claim("f1", "s", "r")
    with pytest.raises(ValueError, match="reason"):
        ctx.skip_claim("c2", "s", "  ")
    with pytest.raises(ValueError, match="kind"):
        ctx.add_claim("c3", "s", 1, 1, True, kind="theorem")
    nan = ctx.add_claim("c4", "s", float("nan"), 1, float("nan"), reason="no measurement")
    assert nan["passed"] is False and nan["status"] == "fails"


def test_claim_statuses_and_reasons(tmp_path):
    """status: holds / fails / untestable / reconstruction / skipped; every status but "holds" has a
    reason, and a claim that fails (or is labelled) without one is an error naming the claim."""
    ctx = _ctx(tmp_path)
    held = ctx.add_claim("h", "s", 0.5, "< 1", True, reason="why it would fail")
    assert held["status"] == "holds" and held["passed"] is True and held["reason"] is None
    with pytest.raises(ValueError, match=r"claim 'f' fails \(measured 2, target \"< 1\"\) but gives no reason"):
        ctx.add_claim("f", "s", 2, "< 1", False)
    with pytest.raises(ValueError, match="claim 'f' fails"):
        ctx.add_claim("f", "s", 2, "< 1", False, reason="   ")
    assert "f" not in {c["id"] for c in ctx.claims}  # nothing recorded
    fail = ctx.add_claim("f", "s", 2, "< 1", False, reason="the paper's margin is within one standard error")
    assert (fail["status"], fail["passed"], fail["target_met"]) == ("fails", False, False)
    rec = ctx.add_claim("r", "s", 0.2, "lower", True, status="reconstruction", reason="Alg. 4 is not specified")
    assert (rec["status"], rec["passed"], rec["target_met"]) == ("reconstruction", False, True)
    unt = ctx.add_claim("u", "s", None, "lower", False, status="untestable", reason="no GEM port")
    assert (unt["status"], unt["passed"], unt["reason"]) == ("untestable", False, "no GEM port")
    with pytest.raises(ValueError, match="claim 'u2' is 'untestable' but gives no reason"):
        ctx.add_claim("u2", "s", None, "lower", False, status="untestable")
    with pytest.raises(ValueError, match="status must be one of holds, fails, underpowered, untestable, reconstruction, skipped"):
        ctx.add_claim("x", "s", 1, 1, True, status="passed")
    with pytest.raises(ValueError, match="'holds' with passed=False"):
        ctx.add_claim("x", "s", 1, 1, False, status="holds")
    with pytest.raises(ValueError, match="'fails' with passed=True"):
        ctx.add_claim("x", "s", 1, 1, True, status="fails", reason="r")
    # inside a run the error fails the run, naming the claim
    res = run_experiment(_exp(run=lambda c, x: x.add_claim("t_no_reason", "s", 0, 1, False)), root=tmp_path,
                         progress=False, raise_errors=False)
    assert res.status == "failed" and "claim 't_no_reason' fails" in res.error
    cmp = ctx.comparison(0.124, 0.130, ci=(-0.010, -0.002))
    assert cmp == {"value": 0.124, "vs": 0.130, "diff": pytest.approx(-0.006), "ci": [-0.010, -0.002], "level": 0.95}


def _kit_small() -> dict:
    return {"num_seeds": 2, "seeds_per_chunk": 2, "samples": 64, "sigmas": [1.0]}


def test_kit_missing_mechanisms_is_a_fail_row(tmp_path, monkeypatch):
    """No silent substitute: without privacy.mechanisms the noise claim is a FAIL row with the
    import error (formerly jax.random.normal was measured instead and the claim passed)."""
    import sys

    import dpfair_jax.privacy as privacy_pkg

    registry.discover()
    monkeypatch.setitem(sys.modules, "dpfair_jax.privacy.mechanisms", None)
    monkeypatch.delattr(privacy_pkg, "mechanisms", raising=False)
    res = run_experiment(registry.get("kit_accounting"), size="quick", overrides=_kit_small(), root=tmp_path,
                         progress=False)
    assert res.ok
    by = {c["id"]: c for c in res.claims}
    row = by["kit_gaussian_noise_variance"]
    assert row["passed"] is False and row["status"] == "fails" and row["kind"] == "claim"
    assert "dpfair_jax.privacy.mechanisms" in row["reason"]
    assert not (res.run_dir / "gaussian_noise.csv").exists()
    assert all(by[cid]["status"] == "holds" for cid, _ in kit.ACCOUNTING_CHECKS)  # the accountant still runs


def test_kit_missing_accounting_is_fail_rows(tmp_path, monkeypatch):
    """Without privacy.accounting every accountant check is a FAIL row (formerly they were
    dropped and the run reported only its passing claims)."""
    import sys

    import dpfair_jax.privacy as privacy_pkg

    registry.discover()
    import dpfair_jax.privacy.mechanisms  # noqa: F401 - loaded before the accountant goes missing

    monkeypatch.setitem(sys.modules, "dpfair_jax.privacy.accounting", None)
    monkeypatch.delattr(privacy_pkg, "accounting", raising=False)
    res = run_experiment(registry.get("kit_accounting"), size="quick", overrides=_kit_small(), root=tmp_path,
                         progress=False)
    by = {c["id"]: c for c in res.claims}
    assert by["kit_gaussian_noise_variance"]["status"] == "holds"
    for cid, _ in kit.ACCOUNTING_CHECKS:
        assert by[cid]["status"] == "fails" and by[cid]["kind"] == "formula", by.get(cid)
        assert "dpfair_jax.privacy.accounting" in by[cid]["reason"]


def test_kit_accountant_rows_are_formula_checks(tmp_path):
    registry.discover()
    res = run_experiment(registry.get("kit_accounting"), size="quick", overrides=_kit_small(), root=tmp_path,
                         progress=False)
    kinds = {c["id"]: (c["kind"], c["status"]) for c in res.claims}
    assert kinds.pop("kit_gaussian_noise_variance") == ("claim", "holds")
    assert kinds == {cid: ("formula", "holds") for cid, _ in kit.ACCOUNTING_CHECKS}


def test_record_privacy_spend_object(tmp_path):
    ctx = _ctx(tmp_path)
    spend = accounting.PrivacySpend(epsilon=2.0, delta=1e-6, rho=0.1, relation="replace_one",
                                    unit="sensitive_attribute")
    rec = ctx.record_privacy("train", spend)
    on_disk = json.loads((ctx.workdir / "privacy.json").read_text())["train"]
    assert on_disk == rec and on_disk["epsilon"] == 2.0 and on_disk["unit"] == "sensitive_attribute"


def test_failed_run_records_status_and_traceback(tmp_path):
    def boom(config, ctx):
        ctx.add_claim("before", "s", 1, 1, True)
        raise RuntimeError("broken experiment")

    exp = _exp(run=boom)
    with pytest.raises(RuntimeError):
        run_experiment(exp, root=tmp_path, progress=False)
    res = run_experiment(exp, root=tmp_path, progress=False, raise_errors=False)
    d = tmp_path / "runs" / "t_exp"
    assert res.status == "failed" and "broken experiment" in res.error
    assert json.loads((d / "meta.json").read_text())["status"] == "failed"
    assert "RuntimeError: broken experiment" in (d / "error.txt").read_text()
    # a later good run clears the old error
    run_experiment(_exp(), root=tmp_path, progress=False)
    assert not (d / "error.txt").exists()


# --------------------------------------------------------------------------------------------
# plots


def _seed_frame():
    rng = np.random.default_rng(1)
    rows = [{"eps": e, "method": m, "data": p, "seed": s, "err": 1 / e + (m == "b") + rng.normal() * 0.1}
            for e in (0.5, 1.0, 2.0, np.inf) for m in ("a", "b") for p in ("x", "y") for s in range(7)]
    return pd.DataFrame(rows)


def test_summarize_matches_scipy():
    from scipy import stats

    df = _seed_frame()
    s = plots.summarize(df, ["eps", "method"], "err")
    part = df[(df.eps == 1.0) & (df.method == "b")]["err"].to_numpy()
    row = s[(s.eps == 1.0) & (s.method == "b")].iloc[0]
    lo, hi = stats.t.interval(0.95, len(part) - 1, loc=part.mean(), scale=stats.sem(part))
    assert row["n"] == 14 and math.isclose(row["mean"], part.mean(), rel_tol=1e-12)
    assert math.isclose(row["ci_low"], lo, rel_tol=1e-10) and math.isclose(row["ci_high"], hi, rel_tol=1e-10)
    one = plots.summarize(df.iloc[:1], ["eps"], "err")
    assert np.isnan(one["ci_low"].iloc[0])


def test_plot_helpers(tmp_path):
    df = _seed_frame()
    fig = plots.tradeoff(df[np.isfinite(df.eps)], "eps", "err", hue="method", panel="data")
    axes = fig.get_axes()
    assert len(axes) == 2 and len(axes[0].get_lines()) == 2 and len(axes[0].collections) == 2
    fig = plots.error_vs_budget(df, "eps", "err", hue="method")
    ax = fig.get_axes()[0]
    assert ax.get_xscale() == "log"
    ref = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(ref) == 1 and math.isclose(ref[0].get_ydata()[0], df[np.isinf(df.eps)]["err"].mean())
    fig = plots.grouped_bars(df, "data", "err", hue="method")
    assert len(fig.get_axes()[0].patches) == 4
    ctx = _ctx(tmp_path)
    path = ctx.save_figure(fig, "bars")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="not a column"):
        plots.tradeoff(df, "eps", "nope")
    with pytest.raises(ValueError, match="band"):
        plots.tradeoff(df, "eps", "err", band="iqr")


def _texts(fig):
    """Every drawn, non-empty text of ``fig`` (tick labels only at ticks inside the view), with its
    window extent after a draw."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks = set()
    shown = set()
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick, loc in zip(axis.get_major_ticks(), axis.get_majorticklocs()):
                ticks.update((tick.label1, tick.label2))
                if lo - 1e-9 * abs(hi - lo) <= loc <= hi + 1e-9 * abs(hi - lo):
                    shown.update(t for t in (tick.label1, tick.label2) if t.get_visible())
    return [(t, t.get_window_extent(renderer)) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text() and (t not in ticks or t in shown)]


def _overlaps(fig):
    """Pairs of texts whose boxes overlap (tick labels, axis labels, titles, legend entries)."""
    boxes = _texts(fig)
    out = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            inter = ba.intersection(ba, bb)
            if inter is not None and inter.width > 1 and inter.height > 1:
                out.append((a.get_text(), b.get_text()))
    return out


def test_plots_one_font_no_overlaps_clipped_bands_and_full_legends(tmp_path):
    """One font family in every text (also text added after the helpers, and figures made with
    pyplot once saved through ctx.save_figure); no overlapping labels; bands of a non-negative
    quantity stop at 0; the legend names every hue level, the band and the reference."""
    from matplotlib.collections import PolyCollection

    rng = np.random.default_rng(0)
    rows = [{"eps": e, "seed": s, "err": rng.exponential(0.03), "method": m, "data": d}
            for e in (0.5, 1.0, 2.0, 4.0, 8.0, np.inf) for s in range(4)
            for m in ("a very long method name", "b", "c", "d", "e") for d in ("adult", "credit")]
    df = pd.DataFrame(rows)
    fig = plots.error_vs_budget(df, "eps", "err", hue="method", panel="data", title="error vs budget")
    ax0 = fig.get_axes()[0]
    ax0.set_title("added after the helper")  # outside the helper's style context
    fams = {t.get_fontname() for t, _ in _texts(plots.finish(fig))}
    assert fams == {plots.FONT}
    assert _overlaps(fig) == []
    legend = fig.legends[0]  # one legend below the panels (5 methods + band + reference)
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:5] == ["a very long method name", "b", "c", "d", "e"]
    assert labels[5] == "shaded: 95% CI of the mean over 4 seeds"
    assert labels[6] == "dashed: non-private (eps = inf), mean"
    assert legend.get_title().get_text() == "method"
    # bands: the raw t-interval goes below 0 for these near-zero errors; the drawn band does not
    raw = plots.summarize(df[np.isfinite(df.eps) & (df.data == "adult")], ["eps", "method"], "err")
    assert (raw["ci_low"] < 0).any()
    lows = [p.get_paths()[0].vertices[:, 1].min() for p in ax0.collections if isinstance(p, PolyCollection)]
    assert lows and min(lows) >= 0
    # explicit bounds, and a log axis keeps the band positive
    fig = plots.tradeoff(df[np.isfinite(df.eps)], "eps", "err", hue="method", bounds=(0.01, 0.05), logy=True)
    ys = np.concatenate([p.get_paths()[0].vertices[:, 1] for p in fig.get_axes()[0].collections])
    assert ys.min() >= 0.01 - 1e-12 and ys.max() <= 0.05 + 1e-12
    with pytest.raises(ValueError, match="low < high"):
        plots.tradeoff(df, "eps", "err", bounds=(1, 0))
    # without hue: the line, the band and the reference are still named
    fig = plots.tradeoff(df[np.isfinite(df.eps)], "eps", "err", reference=0.02, reference_label="target")
    names = [t.get_text() for t in fig.get_axes()[0].get_legend().get_texts()]
    assert names == ["mean of err", "shaded: 95% CI of the mean over 40 seeds", "dashed: target"]
    # bars: error bars clipped at 0, long categories slanted and not overlapping, legend names the bars
    bars = pd.DataFrame([{"cat": c, "v": abs(rng.normal(0.01, 0.05)), "m": m}
                         for c in ("sex (binary)", "race (five groups)", "age buckets", "marital status")
                         for m in ("x", "y") for _ in range(3)])
    fig = plots.grouped_bars(bars, "cat", "v", hue="m")
    ax = fig.get_axes()[0]
    from matplotlib.container import ErrorbarContainer

    errs = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    lows = [seg[:, 1].min() for c in errs for seg in c.lines[2][0].get_segments()]
    assert len(lows) == 8 and min(lows) >= 0
    assert (plots.summarize(bars, ["cat", "m"], "v")["ci_low"] < 0).any()  # raw intervals cross 0
    assert _overlaps(fig) == [] and [t.get_text() for t in fig.legends[0].get_texts()][-1].startswith("bars: 95% CI")
    # a pyplot figure in another font is brought to the one family when saved through the context
    import matplotlib.pyplot as plt

    with plt.rc_context({"font.family": "sans-serif"}):
        pfig, pax = plt.subplots()
        pax.plot([1, 2], [1, 2], label="x")
        pax.legend()
        pax.set_title("pyplot")
    ctx = _ctx(tmp_path)
    ctx.save_figure(pfig, "pyplot_fig")
    from matplotlib.text import Text

    assert {t.get_fontname() for t in pfig.findobj(Text) if t.get_text()} == {plots.FONT}
    # a figure without a layout engine whose colorbars were placed before saving (as paper 001's
    # Fig 12): constrained layout cannot take it over, so it is saved with its own layout
    from matplotlib.figure import Figure

    cfig = Figure(figsize=(8, 3))
    caxes = cfig.subplots(1, 2, squeeze=False)
    for cax in caxes[0]:
        im = cax.imshow(np.arange(16.0).reshape(4, 4), origin="lower")
        cfig.colorbar(im, ax=cax)
    assert ctx.save_figure(cfig, "colorbars").read_bytes()[:4] == b"\x89PNG"


def test_interrupted_run_is_recorded_and_reraised(tmp_path):
    def interrupted(config, ctx):
        ctx.map_chunks([{"i": 0}], _compute_ns()["compute"])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(_exp(run=interrupted), root=tmp_path, progress=False, raise_errors=False)
    d = tmp_path / "runs" / "t_exp"
    assert json.loads((d / "meta.json").read_text())["status"] == "interrupted"
    assert len(list((d / "chunks").glob("*.pkl"))) == 1  # kept for the resume
    assert not (d / ".lock").exists()


def test_run_lock(tmp_path):
    d = tmp_path / "runs" / "t_exp"
    d.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (d / ".lock").write_text(f"{context.platform.node()} {sleeper.pid}")
        with pytest.raises(ValueError, match="in use by another run"):
            run_experiment(_exp(), root=tmp_path, progress=False)
    finally:
        sleeper.kill()
        sleeper.wait()
    # the holder is gone (as after SIGKILL): the stale lock is taken over
    assert run_experiment(_exp(), root=tmp_path, progress=False).ok
    assert not (d / ".lock").exists()


def test_kit_noise_sweep_compiles_once_and_exact_epsilon():
    import jax

    from dpfair_jax.privacy.mechanisms import gaussian_mechanism

    fn = kit._noise_fn(gaussian_mechanism)
    ids = np.arange(4, dtype=np.int32)
    out = [fn(jax.random.key(0), ids, np.float32(s), 64) for s in (0.5, 1.0, 3.0)]
    assert fn._cache_size() == 1  # sigma is traced: one program for the whole grid
    # common random numbers: same keys, so variances scale exactly with sigma^2
    np.testing.assert_allclose(np.asarray(out[2]) / np.asarray(out[1]), 9.0, rtol=1e-5)
    from scipy import stats

    for sigma, delta in ((0.7, 1e-5), (2.0, 1e-6), (10.0, 1e-3)):
        eps = kit.exact_gaussian_epsilon(sigma, delta)
        # Balle & Wang (2018) Thm. 8, evaluated directly
        d = stats.norm.cdf(1 / (2 * sigma) - eps * sigma) - np.exp(eps) * stats.norm.cdf(-1 / (2 * sigma) - eps * sigma)
        assert math.isclose(d, delta, rel_tol=1e-7)


# --------------------------------------------------------------------------------------------
# progress in logs, resumed runs and the code version in chunk identities


def test_progress_lines_without_a_terminal_and_resume_message(tmp_path, capsys):
    """No visible bar (not a terminal, or progress=False): one line per finished chunk with the time
    left; a rerun says how many chunks it reused and that --fresh starts over."""
    ns = _compute_ns()
    _ctx(tmp_path).map_chunks(CHUNKS[:4], ns["compute"], desc="sweep")
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "sweep: chunk" in ln]
    assert len(lines) == 4, err
    assert lines[0].startswith("[t_exp] sweep: chunk 1/4 done (") and "about " in lines[0]
    assert lines[0].endswith(" left")
    assert lines[-1].startswith("[t_exp] sweep: chunk 4/4 done") and lines[-1].endswith("about 0 s left")
    ctx = _ctx(tmp_path)
    ctx.map_chunks(CHUNKS[:6], ns["compute"], desc="sweep")
    err = capsys.readouterr().err
    assert "[t_exp] sweep: reusing 4 of 6 finished chunks of an earlier run with the same config and code " \
           "(rerun with --fresh to recompute them)." in err
    assert [ln for ln in err.splitlines() if "sweep: chunk" in ln][0].startswith("[t_exp] sweep: chunk 5/6 done")
    assert any("reusing 4 of 6" in m for m in ctx.messages)  # kept for meta.json; per-chunk lines are not
    assert not any("sweep: chunk" in m for m in ctx.messages)


def test_log_lines_go_above_a_visible_bar(tmp_path, monkeypatch):
    """With a bar on screen, ctx.log, warnings and logging records are written through tqdm.write
    (above the bar) instead of over it; no per-chunk lines then."""
    import logging
    import warnings

    from tqdm.auto import tqdm

    written = []
    monkeypatch.setattr(tqdm, "write", classmethod(lambda cls, s, file=None, end="\n", nolock=False:
                                                   written.append(s)))
    ctx = RunContext(_exp(), {"seed": 3, "n": 2}, tmp_path / "runs" / "t_exp", progress=True)

    def compute(chunk):
        ctx.log(f"inside {chunk['i']}")
        warnings.warn("a warning from the study", stacklevel=1)
        logging.getLogger("dpfair_test").warning("a log record")
        return pd.DataFrame({"i": [chunk["i"]]})

    monkeypatch.setattr(logging.root, "handlers", [])  # as in the CLI: no handler configured
    ctx.map_chunks(CHUNKS[:2], compute)
    assert logging.root.handlers == []
    assert "[t_exp] inside 0" in written and "[t_exp] inside 1" in written
    assert any("a warning from the study" in w for w in written)
    assert any("a log record" in w for w in written)
    assert not any("chunk 1/2 done" in w for w in written)
    ctx.log("after the bar")  # bar gone: plain stderr
    assert "[t_exp] after the bar" not in written


def test_sources_digest_follows_python_sources_only(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("text\n")
    first = provenance._sources_digest(str(tmp_path))
    (tmp_path / "README.md").write_text("other text\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython.pyc").write_bytes(b"\0")
    assert provenance._sources_digest(str(tmp_path)) == first
    (tmp_path / "a.py").write_text("x = 1  # edited\n")
    assert provenance._sources_digest(str(tmp_path)) != first
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("")
    assert provenance._sources_digest(str(tmp_path)) != first


@pytest.mark.slow
def test_editing_the_study_or_the_library_recomputes_chunks(tmp_path, monkeypatch, capsys):
    """Chunk identities include the code version: a copied study folder, run, edited and rerun
    recomputes every chunk (and says why); an unchanged rerun reuses them; an edit of the
    dpfair_jax sources (seen by the next process: a changed package digest) recomputes them too."""
    import shutil

    folder = tmp_path / "studies" / "kit"
    shutil.copytree(EXPERIMENTS / "kit", folder, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        registry.load_study(folder)
        exp = registry.get("kit_accounting")
        assert registry.study_folder(exp) == folder.resolve()
        small = {"num_seeds": 4, "seeds_per_chunk": 2, "samples": 64, "sigmas": [1.0]}

        def run():
            res = run_experiment(exp, size="quick", overrides=small, root=tmp_path / "out", progress=False)
            assert res.ok
            return res.meta["chunks"], capsys.readouterr().err

        first, _ = run()
        assert first["computed"] > 0 and first["reused"] == 0
        again, err = run()
        assert again == {"computed": 0, "reused": first["computed"], "corrupt": 0}
        assert "finished chunks of an earlier run with the same config and code" in err and "--fresh" in err
        with open(folder / "study.py", "a") as fh:
            fh.write("\n# an edit of the study\n")
        edited, err = run()
        assert edited == first
        assert "belong to another config or code version" in err
        monkeypatch.setattr(provenance, "_PACKAGE_DIGEST", {})  # a new process after an edit of dpfair_jax
        real = provenance._sources_digest
        monkeypatch.setattr(provenance, "_sources_digest", lambda root: real(root) + ("-edited" if root.endswith(
            "dpfair_jax") else ""))
        lib, _ = run()
        assert lib == first
        assert context.code_version()["package"].endswith("-edited")
    finally:
        registry.load_study(EXPERIMENTS / "kit")
