"""Several JAX processes (``python -m dpfair_jax.launch``, 2 CPU processes x 2 host devices, gloo):
``run_trials``/``sweep`` over the global mesh equal the one-process results bitwise; the launcher
stops every process within a bounded time when one dies; a process that cannot reach the
coordinator errors within its timeout; the launcher's and ``initialize``'s environment handling."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import launch
from dpfair_jax import montecarlo as mc


def _gloo_missing() -> str | None:
    try:
        from jax._src.lib import _jax
    except ImportError as err:  # pragma: no cover - jaxlib layout changed
        return f"jaxlib internals not found ({err})"
    if not hasattr(_jax, "make_gloo_tcp_collectives"):
        return "this jaxlib has no gloo CPU collectives"
    return None


needs_gloo = pytest.mark.skipif(_gloo_missing() is not None, reason=str(_gloo_missing()))

KEY = jax.random.key(0)
GRID = {"sigma": [0.0, 0.5, 2.0], "clip": [0.5, 1.0]}


def reduce_trial(k: jax.Array, data: dict) -> dict:
    """A matrix product and reductions (their compiled form may depend on the chunk shape), with
    ``data`` shared by all trials (replicated on every process)."""
    x = jax.random.normal(k, (64, 3)) * data["scale"]
    r = x @ data["w"]
    return {"m": jnp.sum(jnp.tanh(r) * x[:, 0]), "g": r @ x}


def dp_point(k: jax.Array, sigma: jax.Array, clip: jax.Array) -> dict:
    """A clipped noisy mean with the noise scale and the clip norm swept."""
    z = jax.random.normal(k, (65,))
    clipped = jnp.clip(2.0 * z[:64], -clip, clip)
    est = (clipped.sum() + sigma * clip * z[64]) / 64.0
    return {"est": est, "pair": jnp.stack([est, clipped.mean()])}


DATA = {"w": jnp.array([0.5, -1.0, 2.0]), "scale": jnp.arange(1.0, 4.0)}


def _compute(mesh) -> dict[str, np.ndarray]:
    """run_trials (37 trials over 4 devices in chunks of 3, padding included) and a 3 x 2 x 6 sweep."""
    r = mc.gather(mc.run_trials(reduce_trial, KEY, 37, chunk_size=3, mesh=mesh, data=DATA))
    s = mc.gather(mc.sweep(dp_point, KEY, GRID, 6, chunk_size=3, mesh=mesh))
    assert isinstance(s, mc.SweepResult)
    out = {"m": r["m"], "g": r["g"], "est": s.values["est"], "pair": s.values["pair"]}
    assert all(isinstance(v, np.ndarray) for v in out.values())  # host-local NumPy on every process
    return out


_ENGINE_WORKER = textwrap.dedent(
    """
    import sys
    from dpfair_jax import launch
    info = launch.initialize()
    import jax, numpy as np
    sys.path.insert(0, {tests!r})
    import test_multiprocess as t
    from dpfair_jax import montecarlo as mc
    out = t._compute(mc.trial_mesh())
    np.savez({out!r} + f"/p{{jax.process_index()}}.npz", processes=jax.process_count(),
             devices=jax.device_count(), primary=mc.is_primary(), source=info.source, **out)
    """
)


def _launch(args: list[str], processes: int = 2, devices: int = 2, timeout: float = 120, **kw):
    cmd = [sys.executable, "-m", "dpfair_jax.launch", "--processes", str(processes),
           "--devices-per-process", str(devices), *kw.pop("extra", []), "--", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _cpu():
    """The references run on the host CPU (on a GPU machine the default device is the GPU)."""
    return contextlib.nullcontext() if jax.default_backend() == "cpu" else jax.default_device(jax.devices("cpu")[0])


@needs_gloo
def test_run_trials_and_sweep_two_processes_equal_one(tmp_path: Path):
    worker = tmp_path / "worker.py"
    worker.write_text(_ENGINE_WORKER.format(tests=str(Path(__file__).parent), out=str(tmp_path)))
    proc = _launch([str(worker)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    with _cpu():
        ref = _compute(None)  # one process, one device, the same chunk shape (gather: plain copies)
    assert mc.is_primary()
    for i in (0, 1):
        got = np.load(tmp_path / f"p{i}.npz")
        assert int(got["processes"]) == 2 and int(got["devices"]) == 4
        assert bool(got["primary"]) == (i == 0) and str(got["source"]) == "launcher"
        for name, want in ref.items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"process {i}: {name}")


_BLOCKING_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from dpfair_jax import launch
    launch.initialize()
    import jax, numpy as np
    from jax.experimental import multihost_utils
    i = jax.process_index()
    open(os.path.join({out!r}, f"pid{{i}}"), "w").write(str(os.getpid()))
    if i == 1 and sys.argv[1] == "exit":
        time.sleep(1.0)
        open(os.path.join({out!r}, "t_exit"), "w").write(repr(time.time()))
        os._exit(7)
    if i == 1:
        time.sleep(600)
    multihost_utils.sync_global_devices("never reached by process 1")  # process 0 blocks here
    """
)


def _start_blocking(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    worker = tmp_path / "block.py"
    worker.write_text(_BLOCKING_WORKER.format(out=str(tmp_path)))
    cmd = [sys.executable, "-m", "dpfair_jax.launch", "--processes", "2", "--grace", "2", "--", str(worker), mode]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), worker


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.05)


@needs_gloo
@pytest.mark.slow
def test_launcher_stops_all_when_one_process_exits(tmp_path: Path):
    proc, _ = _start_blocking(tmp_path, "exit")
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    ended = time.time()
    assert proc.returncode == 7, err[-2000:]
    assert "process 1 of 2 exited with status 7" in err
    # process 0 was blocked in a collective: the launcher ended it (SIGINT, SIGKILL after 2 s)
    assert ended - float((tmp_path / "t_exit").read_text()) < 2.0 + 8.0


@needs_gloo
@pytest.mark.slow
def test_launcher_stops_all_when_one_process_is_killed(tmp_path: Path):
    proc, _ = _start_blocking(tmp_path, "sleep")
    try:
        _wait_for(tmp_path / "pid0", 60)
        _wait_for(tmp_path / "pid1", 60)
        time.sleep(0.5)  # process 0 enters the collective
        os.kill(int((tmp_path / "pid1").read_text()), signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, err[-2000:]
    assert "process 1 of 2 was killed by signal 9 (SIGKILL)" in err
    assert took < 2.0 + 8.0
    with contextlib.suppress(ProcessLookupError):  # no process is left behind
        os.kill(int((tmp_path / "pid0").read_text()), 0)
        pytest.fail("process 0 still runs after the launcher returned")


@needs_gloo
@pytest.mark.slow
def test_unreachable_coordinator_errors_within_timeout():
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{
        launch.ENV_COORDINATOR: f"127.0.0.1:{launch.free_port()}",  # nobody listens there
        launch.ENV_NUM_PROCESSES: "2", launch.ENV_PROCESS_ID: "1", launch.ENV_INIT_TIMEOUT: "3"})
    code = "from dpfair_jax import launch; launch.initialize(); print('joined')"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "process 1 of 2 could not join the coordinator" in proc.stderr and "within 3 s" in proc.stderr
    assert "joined" not in proc.stdout
    assert took < 3 + 20  # the timeout plus interpreter and JAX start-up on a busy machine


def test_launcher_timeout_and_arguments(tmp_path: Path):
    sleeper = tmp_path / "sleep.py"
    sleeper.write_text("import time\ntime.sleep(600)\n")  # any Python program can be launched
    t0 = time.monotonic()
    rc = launch.launch([str(sleeper)], 2, timeout=1.0, grace=1.0)
    assert rc == 124 and time.monotonic() - t0 < 15
    assert launch.main(["--processes", "2", str(sleeper)]) == 2  # no "--"
    assert launch.main(["--processes", "0", "--", str(sleeper)]) == 2
    with pytest.raises(ValueError, match="args"):
        launch.launch([], 2)
    with pytest.raises(ValueError, match="port"):
        launch.launch([str(sleeper)], 1, port=70000)


def test_child_env_and_cluster_detection():
    base = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_foo=1", launch.ENV_DISTRIBUTED: "1"}
    env = launch.child_env(1, 2, "127.0.0.1:1234", 3, base=base)
    assert env["XLA_FLAGS"].split() == ["--xla_foo=1", "--xla_force_host_platform_device_count=3"]
    assert env[launch.ENV_PROCESS_ID] == "1" and env[launch.ENV_NUM_PROCESSES] == "2"
    assert env[launch.ENV_COORDINATOR] == "127.0.0.1:1234" and env["JAX_PLATFORMS"] == "cpu"
    assert launch.ENV_DISTRIBUTED not in env

    slurm = {"SLURM_JOB_ID": "1", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    assert launch._on_cluster({**slurm, "SLURM_NTASKS": "2"})
    assert not launch._on_cluster({**slurm, "SLURM_NTASKS": "1"})  # one task: one process
    assert not launch._on_cluster({**slurm, "SLURM_NTASKS": "2", launch.ENV_DISTRIBUTED: "0"})
    assert launch._on_cluster({"JAX_COORDINATOR_ADDRESS": "h:1"})
    assert launch._on_cluster({launch.ENV_DISTRIBUTED: "1"})
    assert not launch._on_cluster({})
    assert launch.initialize({}) == launch.Distributed(0, 1, "single")
    with pytest.raises(ValueError, match=launch.ENV_PROCESS_ID):
        launch.initialize({launch.ENV_COORDINATOR: "h:1", launch.ENV_NUM_PROCESSES: "2", launch.ENV_PROCESS_ID: "2"})
    with pytest.raises(ValueError, match=launch.ENV_NUM_PROCESSES):
        launch.initialize({launch.ENV_COORDINATOR: "h:1", launch.ENV_NUM_PROCESSES: "two", launch.ENV_PROCESS_ID: "0"})


# --------------------------------------------------------------------------------------------
# the study runner across processes

_STUDY = textwrap.dedent(
    '''
    """A small study: 6 resumable chunks of a noisy-mean sweep, tables, claims, privacy, a figure."""
    import os
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    from dpfair_jax import launch
    from dpfair_jax import montecarlo as mc
    from dpfair_jax.runner import Experiment, register

    CONFIGS = {"quick": {"seed": 0, "sigmas": [0.5, 1.0, 2.0], "blocks": 6, "trials": 48}}


    def trial(key, sigma):
        z = jax.random.normal(key, (33,))
        x = z[:32]
        return {"est": (jnp.clip(x, -1.0, 1.0).sum() + sigma * z[32]) / 32.0, "sq": jnp.mean(x @ x)}


    def run(config, ctx):
        if os.environ.get("MP_STUDY_PIDS"):
            with open(os.path.join(os.environ["MP_STUDY_PIDS"], f"pid{launch.process_index()}"), "w") as fh:
                fh.write(str(os.getpid()))
        pause = float(os.environ.get("MP_STUDY_SLEEP", "0"))

        def compute(chunk):
            time.sleep(pause)
            key = jax.random.fold_in(jax.random.key(config["seed"]), chunk["block"])
            frame = mc.sweep(trial, key, {"sigma": config["sigmas"]}, config["trials"], chunk_size=16).to_frame()
            frame.insert(0, "block", chunk["block"])
            return frame

        table = ctx.map_chunks([{"block": b} for b in range(config["blocks"])], compute, desc="noisy_mean")
        ctx.save_table(table, "results")
        summary = table.groupby("sigma")["est"].agg(["mean", "std", "count"]).reset_index()
        ctx.save_table(summary, "summary")
        z = float((summary["mean"].abs() / (summary["std"] / np.sqrt(summary["count"]))).max())
        ctx.add_claim("mp_mean_centred", "the clipped noisy mean of a symmetric sample is centred at 0",
                      measured=z, target="max |z| <= 4", passed=z <= 4)
        extra = np.asarray(mc.run_trials(lambda k: jax.random.normal(k, (8,)).sum(), jax.random.key(1), 40))
        ctx.add_claim("mp_replicated", "run_trials outside map_chunks (every process computes it)",
                      measured=float(extra.mean()), target="finite", passed=bool(np.isfinite(extra.mean())))
        ctx.record_privacy("noisy_mean", {"rho": 0.5, "relation": "replace_one", "unit": "example"})
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot(summary["sigma"], summary["std"])
        ctx.save_figure(fig, "std")


    register(Experiment("mp_study", "kit", "multi-process test study", CONFIGS, run))
    '''
)

# process i runs the CLI in <base>/p<i>: a file written by process 1 would land apart from process 0's
_CHDIR_CLI = textwrap.dedent(
    """
    import os, sys
    os.chdir(os.path.join(sys.argv[1], "p" + os.environ["DPFAIR_PROCESS_ID"]))
    from dpfair_jax.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)
_OUTPUTS = ("results.csv", "summary.csv", "claims.json", "privacy.json", "figures/std.png")


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("studies")
    (root / "mp_study").mkdir()
    (root / "mp_study" / "study.py").write_text(_STUDY)
    return root


@pytest.fixture(scope="module")
def two_process_run(study: Path, tmp_path_factory) -> Path:
    """``dpfair reproduce`` of the study by 2 processes x 2 host devices; returns the base folder."""
    if _gloo_missing():
        pytest.skip(_gloo_missing())
    base = tmp_path_factory.mktemp("two")
    (base / "p0").mkdir()
    (base / "p1").mkdir()
    wrapper = base / "chdir_cli.py"
    wrapper.write_text(_CHDIR_CLI)
    proc = _launch([str(wrapper), str(base), "reproduce", "--quick", "--experiments", str(study),
                    "--out", "results", "--no-progress"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("mp_study: complete") == 1, proc.stdout  # process 0 prints
    return base


@needs_gloo
@pytest.mark.slow
def test_study_two_processes_written_once_by_process_0(two_process_run: Path):
    run = two_process_run / "p0" / "results" / "runs" / "mp_study"
    for name in _OUTPUTS:
        assert (run / name).is_file(), name
    assert (two_process_run / "p0" / "results" / "report" / "REPORT.md").is_file()
    assert not any((two_process_run / "p1").iterdir())  # process 1 computed but wrote nothing
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["devices"]["process_count"] == 2
    assert meta["devices"]["device_count"] == 4 and meta["chunks"] == {"computed": 6, "reused": 0, "corrupt": 0}
    assert len(list((run / "chunks").glob("*.json"))) == 6
    claims = json.loads((run / "claims.json").read_text())
    assert [c["id"] for c in claims] == ["mp_mean_centred", "mp_replicated"] and all(c["passed"] for c in claims)


def _children_pids(folder: Path, timeout: float = 90) -> dict[int, int]:
    _wait_for(folder / "pid0", timeout)
    _wait_for(folder / "pid1", timeout)
    return {i: int((folder / f"pid{i}").read_text()) for i in (0, 1)}


@needs_gloo
@pytest.mark.slow
def test_study_killed_process_ends_both_and_resumes_with_one(study: Path, two_process_run: Path, tmp_path: Path):
    out = tmp_path / "results"
    chunk_dir = out / "runs" / "mp_study" / "chunks"
    env = dict(os.environ, MP_STUDY_SLEEP="0.4", MP_STUDY_PIDS=str(tmp_path))
    cmd = [sys.executable, "-m", "dpfair_jax", "run", "mp_study", "--quick", "--processes", "2",
           "--devices-per-process", "2", "--experiments", str(study), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = _children_pids(tmp_path)
        deadline = time.monotonic() + 90
        while len(list(chunk_dir.glob("*.json"))) < 2:  # the first round (one chunk per process) is saved
            assert time.monotonic() < deadline and proc.poll() is None, "no chunk was saved"
            time.sleep(0.02)
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, err[-2000:]
    assert "process 1 of 2 was killed by signal 9" in err and took < 3.0 + 10.0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pids[0], 0)
        pytest.fail("process 0 still runs after the launcher returned")
    saved = len(list(chunk_dir.glob("*.json")))
    assert 2 <= saved < 6

    # the rerun by one process computes only the missing chunks and gives the 2-process outputs
    resumed = subprocess.run([sys.executable, "-m", "dpfair_jax", "run", "mp_study", "--quick", "--experiments",
                              str(study), "--out", str(out), "--no-progress"], capture_output=True, text=True,
                             timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))  # as the launched processes
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    run = out / "runs" / "mp_study"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["devices"]["process_count"] == 1
    assert meta["chunks"] == {"computed": 6 - saved, "reused": saved, "corrupt": 0}
    ref = two_process_run / "p0" / "results" / "runs" / "mp_study"
    for name in _OUTPUTS[:4]:
        assert (run / name).read_bytes() == (ref / name).read_bytes(), name


def test_cli_processes_bad_input(capsys):
    from dpfair_jax import cli

    assert cli.main(["run", "mp_study", "--processes", "0"]) == 2
    assert "--processes must be >= 1" in capsys.readouterr().err
