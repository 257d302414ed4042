"""Several JAX processes (``python -m dpfair_jax.launch``, 2 CPU processes x 2 host devices, gloo):
``run_trials``/``sweep`` over the global mesh equal the one-process results bitwise; the launcher
stops every process within a bounded time when one dies; a process that cannot reach the
coordinator errors within its timeout; the launcher's and ``initialize``'s environment handling."""

from __future__ import annotations

import contextlib
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


def reduce_trial(k: jax.Array) -> dict:
    """A matrix product and reductions (their compiled form may depend on the chunk shape)."""
    z = jax.random.normal(k, (65, 3))
    x, w = z[:64], z[64]
    r = x @ w
    return {"m": jnp.sum(jnp.tanh(r) * x[:, 0]), "g": r @ x}


def dp_point(k: jax.Array, sigma: jax.Array, clip: jax.Array) -> dict:
    """A clipped noisy mean with the noise scale and the clip norm swept."""
    z = jax.random.normal(k, (65,))
    clipped = jnp.clip(2.0 * z[:64], -clip, clip)
    est = (clipped.sum() + sigma * clip * z[64]) / 64.0
    return {"est": est, "pair": jnp.stack([est, clipped.mean()])}


def data_trial(k: jax.Array, data: dict) -> dict:
    return {"s": jnp.sum(data["x"] * jax.random.normal(k, data["x"].shape))}


def _compute(mesh) -> dict[str, np.ndarray]:
    """The three engine paths; 37 trials over 4 devices in chunks of 3 (padding included)."""
    r = mc.gather(mc.run_trials(reduce_trial, KEY, 37, chunk_size=3, mesh=mesh))
    s = mc.gather(mc.sweep(dp_point, KEY, GRID, 6, chunk_size=3, mesh=mesh))
    q = mc.gather(mc.run_trials(data_trial, KEY, 9, chunk_size=2, mesh=mesh,
                                data={"x": jnp.arange(5.0, dtype=jnp.float32)}))
    return {"m": r["m"], "g": r["g"], "est": s.values["est"], "pair": s.values["pair"], "s": q["s"]}


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
        ref = _compute(None)  # one process, one device, the same chunk shape
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


def test_gather_single_process_is_numpy():
    with _cpu():
        r = mc.run_trials(reduce_trial, KEY, 5, chunk_size=2)
        g = mc.gather(r)
        s = mc.gather(mc.sweep(dp_point, KEY, GRID, 2))
    assert all(isinstance(v, np.ndarray) for v in g.values())
    np.testing.assert_array_equal(g["m"], np.asarray(r["m"]))
    assert isinstance(s, mc.SweepResult) and isinstance(s.values["est"], np.ndarray)
    assert s.values["est"].shape == (3, 2, 2) and mc.is_primary()
