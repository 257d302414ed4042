"""Tests of the ``dpfair`` command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from dpfair_jax import cli
from dpfair_jax.runner import registry
from dpfair_jax.runner.registry import Discovery, Experiment

REPO = Path(__file__).resolve().parents[2]
SMALL_KIT = ["--set", "num_seeds=16", "--set", "seeds_per_chunk=8", "--set", "samples=256",
             "--set", "sigmas=[1.0, 2.0]"]


def _run_cli(*args: str, cwd: Path = REPO, env_out: Path | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    if env_out is not None:
        env["DPFAIR_RESULTS"] = str(env_out)
    return subprocess.run([sys.executable, "-m", "dpfair_jax.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def _one_line_error(err: str) -> str:
    # warnings about other experiment modules that fail to import may precede the error
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("dpfair: warning: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("dpfair: error: ")
    return lines[0]


def test_list(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("kit_accounting"))
    assert line.split()[1] == "kit" and "Gaussian" in line


@pytest.mark.parametrize("argv, fragment", [
    (["run", "no_such_experiment"], "unknown experiment 'no_such_experiment'; valid names:"),
    (["run", "kit_accounting", "--quick", "--set", "bogus=1"], "valid keys: delta, num_seeds"),
    (["run", "kit_accounting", "--set", "novalue"], "--set expects key=value"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
    (["run"], "required"),
    (["reproduce", "--only", "9"], "--only must be one of 000, 001, 002, 003, 004, kit"),
])
def test_bad_input_exits_nonzero_with_one_line(argv, fragment, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert fragment in _one_line_error(captured.err)


def test_report_without_runs_fails_cleanly(tmp_path, capsys):
    assert cli.main(["report", "--out", str(tmp_path)]) == 1
    assert "no runs under" in _one_line_error(capsys.readouterr().err)


@pytest.mark.slow
def test_run_kit_quick_subprocess(tmp_path):
    proc = _run_cli("run", "kit_accounting", "--quick", *SMALL_KIT, env_out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = tmp_path / "runs" / "kit_accounting"
    claims = json.loads((d / "claims.json").read_text())
    assert {c["id"] for c in claims} >= {"kit_gaussian_noise_variance"}
    assert all(c["passed"] for c in claims), claims
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["config"]["sigmas"] == [1.0, 2.0] and cfg["overrides"]["samples"] == 256
    assert (d / "figures" / "noise_std_ratio.png").is_file()
    assert "claims hold" in proc.stdout
    assert "HOLDS          kit_gaussian_noise_variance: measured max_abs_z" in proc.stdout
    # bad input from a real process: exit 2, one line, no traceback
    bad = _run_cli("run", "kit_accounting", "--quick", "--set", "nope=1", env_out=tmp_path)
    assert bad.returncode == 2 and "valid keys" in _one_line_error(bad.stderr)
    # python -m dpfair_jax is the same program
    listing = subprocess.run([sys.executable, "-m", "dpfair_jax", "list"], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
    assert listing.returncode == 0 and "kit_accounting" in listing.stdout


def _fake_discovery(monkeypatch, exps, errors=None):
    monkeypatch.setattr(registry, "discover", lambda modules=None: Discovery(list(exps), dict(errors or {}), {}))


def _tiny(config, ctx):
    ctx.add_claim(f"{ctx.name}_claim", "a tiny claim", measured=config["x"], target=1, passed=config["x"] == 1)


def _crash(config, ctx):
    raise RuntimeError("crashed on purpose")


def test_reproduce_runs_all_then_report(tmp_path, monkeypatch, capsys):
    exps = [Experiment("t_cli_a", "000", "first", {"quick": {"x": 1}, "full": {"x": 2}}, _tiny),
            Experiment("t_cli_b", "kit", "second", {"quick": {"x": 1}}, _tiny)]
    _fake_discovery(monkeypatch, exps)
    assert cli.main(["reproduce", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert text.count("| a tiny claim | 1 | 1 | holds |  |") == 2 and "### t_cli_a" in text and "### t_cli_b" in text
    capsys.readouterr()
    assert cli.main(["reproduce", "--quick", "--only", "0", "--out", str(tmp_path / "only")]) == 0
    assert [p.name for p in (tmp_path / "only" / "runs").iterdir()] == ["t_cli_a"]


def test_reproduce_continues_past_failures(tmp_path, monkeypatch, capsys):
    exps = [Experiment("t_cli_crash", "001", "crashes", {"quick": {}}, _crash),
            Experiment("t_cli_ok", "kit", "fine", {"quick": {"x": 1}}, _tiny)]
    _fake_discovery(monkeypatch, exps, {"dpfair_experiments.paper_003.study": "SyntaxError: bad"})
    assert cli.main(["reproduce", "--quick", "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "1 experiment(s) failed: t_cli_crash" in err and "1 module(s) failed to import" in err
    assert "Traceback" not in err
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert "| a tiny claim | 1 | 1 | holds |  |" in text and "paper_003" in text and "crashed on purpose" in text


def test_run_failure_exit_code(tmp_path, monkeypatch, capsys):
    registry.register(Experiment("t_cli_crash2", "kit", "crashes", {"quick": {}, "full": {}}, _crash,
                                 module="tests.test_cli"))
    try:
        _fake_discovery(monkeypatch, registry.all_experiments())
        assert cli.main(["run", "t_cli_crash2", "--out", str(tmp_path)]) == 1
        line = _one_line_error(capsys.readouterr().err)
        assert "crashed on purpose" in line and "error.txt" in line
    finally:
        registry.unregister("t_cli_crash2")


def test_bench_collects_results(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "common.py").write_text("raise SystemExit('helpers are not run')\n")
    (bench / "fast_thing.py").write_text(textwrap.dedent("""
        import json, sys
        from pathlib import Path
        out = Path(__file__).parent / "results"
        out.mkdir(exist_ok=True)
        rows = [{"name": "step", "machine": "cpu", "baseline": "opacus", "value": 2.5, "unit": "x",
                 "ratio": 2.5, "target": ">= 2", "met": True, "quick": "--quick" in sys.argv}]
        (out / "fast_thing.json").write_text(json.dumps(rows))
    """))
    assert cli.main(["bench", "--quick", "--dir", str(bench)]) == 0
    table = (bench / "results" / "README.md").read_text()
    header = "| name | machine | baseline | value | unit | ratio | target | met |"
    assert header in table and "| step | cpu | opacus | 2.5 | x | 2.5 | >= 2 | yes |" in table
    assert json.loads((bench / "results" / "fast_thing.json").read_text())[0]["quick"] is True
    (bench / "broken.py").write_text("import sys; sys.exit(3)\n")
    capsys.readouterr()
    assert cli.main(["bench", "--dir", str(bench)]) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dpfair: error: ") and "broken.py (exit 3)" in last and "Traceback" not in err


def test_bench_jax_privacy_baseline_skips_without_jax_privacy(tmp_path):
    # `dpfair bench` runs every benchmarks/*.py; this one must exit 0 with a message, and write
    # no rows, where jax-privacy (bench extra) is absent.
    script = REPO / "benchmarks" / "jax_privacy_baseline.py"
    assert script.name not in cli._NOT_SCRIPTS and not script.name.startswith("_")
    out = tmp_path / "rows.json"
    code = ("import runpy, sys; sys.modules['jax_privacy'] = None; "
            f"sys.argv = [{str(script)!r}, '--quick', '--no-reexec', '--out', {str(out)!r}]; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "jax_privacy_baseline skipped" in proc.stdout and "pip install jax-privacy" in proc.stdout
    assert not out.exists()


def test_bench_missing_dir(tmp_path, capsys):
    assert cli.main(["bench", "--dir", str(tmp_path / "nope")]) == 2
    assert "no benchmarks directory" in _one_line_error(capsys.readouterr().err)


def test_audit(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "dpfair_jax.audit", types.ModuleType("dpfair_jax.audit"))
    assert cli.main(["audit", "--out", str(tmp_path)]) == 1
    assert "run_audit" in _one_line_error(capsys.readouterr().err)

    calls = []

    def run_audit(*, quick, out, **kwargs):
        calls.append((quick, out))
        return [{"mechanism": "gaussian", "passed": True}]

    fake = types.ModuleType("dpfair_jax.audit")
    fake.run_audit = run_audit
    monkeypatch.setitem(sys.modules, "dpfair_jax.audit", fake)
    assert cli.main(["audit", "--quick", "--out", str(tmp_path)]) == 0
    assert calls == [(True, tmp_path / "audit")]
    fake.run_audit = lambda *, quick, out, **kw: [{"mechanism": "gaussian", "passed": False}]
    capsys.readouterr()
    assert cli.main(["audit", "--out", str(tmp_path)]) == 1
    assert "audit found failures" in _one_line_error(capsys.readouterr().err)


def test_audit_family(tmp_path, monkeypatch, capsys):
    from dpfair_jax import audit

    calls = []

    def run_audit(*, quick, out, **kwargs):
        calls.append(kwargs)
        return [{"mechanism": kwargs["families"][0], "passed": True}]

    monkeypatch.setattr(audit, "run_audit", run_audit)
    assert cli.main(["audit", "--quick", "--family", "fermi", "--family", "sgda_shuffle",
                     "--out", str(tmp_path)]) == 0
    assert calls == [{"mechanisms": True, "families": ("fermi", "sgda_shuffle")}]
    assert cli.main(["audit", "--family", "no_such_family", "--out", str(tmp_path)]) == 2
    assert "unknown audit family ['no_such_family']" in _one_line_error(capsys.readouterr().err)
    assert cli.main(["audit", "--family", "fermi", "--sums-only", "--out", str(tmp_path)]) == 2
    assert len(calls) == 1  # refused before any compute


# The interrupted run: the real CLI in a child process whose chunk cache holds the fourth chunk
# back (after three saved chunks it signals readiness and sleeps), so SIGINT always lands mid-run.
_PAUSED_RUN = textwrap.dedent("""
    import pathlib, sys, time
    from dpfair_jax import cli
    from dpfair_jax.runner import store

    ready, argv = pathlib.Path(sys.argv[1]), sys.argv[2:]
    save, saved = store.ChunkCache.save, []

    def held_save(self, *args, **kwargs):
        if len(saved) == 3:
            ready.touch()
            while True:
                time.sleep(0.1)
        saved.append(save(self, *args, **kwargs))
        return saved[-1]

    store.ChunkCache.save = held_save
    sys.exit(cli.main(argv))
""")


@pytest.mark.slow
def test_ctrl_c_then_rerun_resumes(tmp_path):
    import glob
    import os
    import signal
    import time

    args = ["run", "kit_accounting", "--quick", "--out", str(tmp_path), "--set", "num_seeds=32",
            "--set", "seeds_per_chunk=1", "--set", "samples=64", "--set", "sigmas=[1.0, 2.0]"]
    ready = tmp_path / "three_chunks_saved"
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_RUN, str(ready), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    pattern = str(tmp_path / "runs" / "kit_accounting" / "chunks" / "*.json")
    deadline = time.monotonic() + 300
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    if not ready.exists():
        if proc.poll() is None:
            proc.kill()  # never left holding its chunk
        pytest.fail(f"the run did not reach its fourth chunk: {proc.communicate(timeout=60)[1]}")
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=300)  # generous: a loaded CI machine
    finally:
        if proc.poll() is None:
            proc.kill()
    meta_path = tmp_path / "runs" / "kit_accounting" / "meta.json"
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("dpfair: interrupted; finished chunks are saved")
    assert "Traceback" not in err
    meta = json.loads(meta_path.read_text())
    assert meta["status"] == "interrupted"
    assert len(glob.glob(pattern)) == 3 and meta["chunks"]["computed"] == 3
    again = subprocess.run([sys.executable, "-m", "dpfair_jax.cli", *args, "--no-progress"], capture_output=True,
                           text=True, cwd=REPO, timeout=300, env=dict(os.environ))
    assert again.returncode == 0, again.stderr
    meta = json.loads(meta_path.read_text())
    assert meta["status"] == "complete"
    assert meta["chunks"]["reused"] == 3 and meta["chunks"]["computed"] == 64 - 3 + 2


def test_summary_counts_skipped_claims_and_formula_checks_apart():
    from types import SimpleNamespace

    from dpfair_jax import cli

    rows = [{"passed": True, "status": "holds"}, {"passed": False, "status": "fails"},
            {"passed": False, "status": "skipped"}, {"passed": False, "status": "reconstruction"},
            {"passed": True, "status": "holds", "kind": "formula"}]
    res = SimpleNamespace(claims=rows, meta={"wall_seconds": 1.0, "chunks": {"reused": 4}}, name="x",
                          status="complete", run_dir="d")
    line = cli._summary(res)
    assert "1/3 claims hold, 1 reconstruction, 1 skipped; 1/1 formula checks hold" in line
    assert "4 chunks reused from an earlier run (--fresh recomputes them)" in line
    # rows written before the statuses were renamed
    res.claims = [{"passed": True, "status": "passed"}, {"passed": False, "status": "failed"}]
    assert "1/2 claims hold" in cli._summary(res)


def test_compile_cache_on_by_default_in_a_user_folder(tmp_path, monkeypatch, capsys):
    """run/reproduce/audit turn the persistent compilation cache on (flag, then env, ``off``, then
    the user-level folder) and leave the caller's JAX settings as they were; list and report do not
    import JAX for it."""
    import jax

    exps = [Experiment("t_cli_cache", "kit", "cache", {"quick": {"x": 1}}, _tiny)]
    _fake_discovery(monkeypatch, exps)
    monkeypatch.delenv("DPFAIR_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    before = jax.config.jax_compilation_cache_dir
    seen = []
    monkeypatch.setattr(cli, "cmd_run", lambda args: seen.append(jax.config.jax_compilation_cache_dir) or 0)
    cli._COMMANDS["run"] = cli.cmd_run
    try:
        assert cli.main(["run", "t_cli_cache", "--quick", "--out", str(tmp_path / "r")]) == 0
        assert seen[-1] == str((tmp_path / "xdg" / "dpfair_jax" / "xla").resolve())
        assert jax.config.jax_compilation_cache_dir == before  # restored
        assert cli.main(["--compile-cache", str(tmp_path / "flag"), "run", "t_cli_cache", "--quick"]) == 0
        assert seen[-1] == str((tmp_path / "flag").resolve())
        monkeypatch.setenv("DPFAIR_COMPILE_CACHE", "off")
        assert cli.main(["run", "t_cli_cache", "--quick"]) == 0
        assert seen[-1] == before
    finally:
        monkeypatch.undo()
        cli._COMMANDS["run"] = cli.cmd_run
    assert not cli._enable_compile_cache(None, "list") and not cli._enable_compile_cache(None, "report")
