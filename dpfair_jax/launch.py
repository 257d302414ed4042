"""Several JAX processes on one machine, and the same program on a cluster.

Launcher (one machine, CPU processes; tests and laptops)::

    python -m dpfair_jax.launch --processes N [--devices-per-process D] [--port P] -- <python args>

starts ``N`` copies of ``python <python args>``. Process ``i`` finds the coordinator (process 0,
``127.0.0.1:P``, a free port unless ``--port`` is given), ``N`` and ``i`` in the environment
variables ``DPFAIR_COORDINATOR_ADDRESS``, ``DPFAIR_NUM_PROCESSES`` and ``DPFAIR_PROCESS_ID``, and
runs on CPU (``JAX_PLATFORMS=cpu``) with ``D`` host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=D``) and gloo cross-process collectives. The
program calls ``initialize()`` before any other JAX call; ``jax.devices()`` then lists the
``N * D`` devices of all processes and ``montecarlo.trial_mesh()`` spans them.

``initialize()`` in a program:

* under the launcher: ``jax.distributed.initialize(coordinator_address, num_processes, process_id)``
  from those variables, with bounded initialization, heartbeat and shutdown timeouts;
* on a cluster (SLURM with several tasks, Open MPI, Cloud TPU / GKE worker variables,
  ``JAX_COORDINATOR_ADDRESS``, or ``DPFAIR_DISTRIBUTED=1`` to force it): ``jax.distributed.initialize()``
  with no addresses, which reads the scheduler's environment itself;
* otherwise (or with ``DPFAIR_DISTRIBUTED=0``): nothing, one process.

Failure behaviour: a process that cannot join the coordinator prints which one and exits with
status 1 at the initialization timeout (``--init-timeout``, default 60 s). The launcher polls its children; when
one exits with a non-zero status or is killed, it prints which one, sends SIGINT to the others,
SIGKILL after ``--grace`` seconds (default 3), and exits with that status (128 + signal number
for a signal). Ctrl-C is passed on to the children; a child whose launcher dies exits itself. ``--timeout`` bounds the whole run. On a
cluster, a dead peer is detected by JAX's coordination service after the heartbeat timeout
(``DPFAIR_HEARTBEAT_TIMEOUT``, default 30 s), which ends the other processes with an error.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "ENV_COORDINATOR",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "Distributed",
    "allgather_object",
    "broadcast_object",
    "child_env",
    "free_port",
    "initialize",
    "is_launched",
    "is_primary",
    "launch",
    "main",
    "process_count",
    "process_index",
]

ENV_COORDINATOR = "DPFAIR_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "DPFAIR_NUM_PROCESSES"
ENV_PROCESS_ID = "DPFAIR_PROCESS_ID"
ENV_INIT_TIMEOUT = "DPFAIR_INIT_TIMEOUT"
ENV_HEARTBEAT_TIMEOUT = "DPFAIR_HEARTBEAT_TIMEOUT"
ENV_SHUTDOWN_TIMEOUT = "DPFAIR_SHUTDOWN_TIMEOUT"
ENV_DISTRIBUTED = "DPFAIR_DISTRIBUTED"
ENV_LAUNCHER_PID = "DPFAIR_LAUNCHER_PID"

DEFAULT_INIT_TIMEOUT = 60
DEFAULT_HEARTBEAT_TIMEOUT = 30
DEFAULT_SHUTDOWN_TIMEOUT = 30
_DEVICE_FLAG = "--xla_force_host_platform_device_count"


@dataclasses.dataclass(frozen=True)
class Distributed:
    """How this process was set up: ``source`` is "launcher", "cluster" or "single"."""

    process_index: int
    process_count: int
    source: str


# ------------------------------------------------------------------------------------ in a program


def _env_int(env: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(f"{name} is not set; start the program with python -m dpfair_jax.launch.")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}.") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return value


def _on_cluster(env: Mapping[str, str]) -> bool:
    """Environment variables of a multi-process job that ``jax.distributed.initialize()`` reads."""
    flag = env.get(ENV_DISTRIBUTED, "").strip().lower()
    if flag in ("0", "false", "no"):
        return False
    if flag in ("1", "true", "yes"):
        return True
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return True
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
    if all(v in env for v in slurm) and env.get("SLURM_NTASKS", "1").isdigit() and int(env["SLURM_NTASKS"]) > 1:
        return True
    if "OMPI_MCA_orte_hnp_uri" in env and int(env.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1:
        return True
    return bool(env.get("TPU_WORKER_HOSTNAMES") and "," in env["TPU_WORKER_HOSTNAMES"])


def _timeouts(env: Mapping[str, str]) -> dict[str, int]:
    """The bounded timeouts, under the keyword names this JAX version's ``initialize`` accepts."""
    import inspect

    import jax

    wanted = {
        "initialization_timeout": _env_int(env, ENV_INIT_TIMEOUT, DEFAULT_INIT_TIMEOUT, 1),
        "heartbeat_timeout_seconds": _env_int(env, ENV_HEARTBEAT_TIMEOUT, DEFAULT_HEARTBEAT_TIMEOUT, 1),
        "shutdown_timeout_seconds": _env_int(env, ENV_SHUTDOWN_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT, 1),
    }
    accepted = inspect.signature(jax.distributed.initialize).parameters
    return {k: v for k, v in wanted.items() if k in accepted}


@contextlib.contextmanager
def _watchdog(seconds: float, message: str) -> Iterator[None]:
    """Print ``message`` and end the process with status 1 if the block takes ``seconds`` or more.

    JAX's runtime client aborts the process (no Python exception) some seconds after its own
    deadline when the coordinator never answers; this ends it at the deadline with a clear line.
    """
    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            print(f"dpfair_jax.launch: {message}", file=sys.stderr, flush=True)
            os._exit(1)

    thread = threading.Thread(target=watch, name="dpfair-init-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def _exit_with_launcher(launcher_pid: int, who: str, every: float = 0.5) -> None:
    """End this process (status 1) when the launcher is gone, so no process is left behind."""

    def watch() -> None:
        while os.getppid() == launcher_pid:
            time.sleep(every)
        print(f"dpfair_jax.launch: {who}: the launcher (pid {launcher_pid}) is gone; exiting",
              file=sys.stderr, flush=True)
        os._exit(1)

    if os.getppid() == launcher_pid:
        threading.Thread(target=watch, name="dpfair-launcher-watch", daemon=True).start()


def initialize(env: Mapping[str, str] | None = None) -> Distributed:
    """Join the launcher's or the cluster's processes (call before any other JAX call); idempotent.

    Under the launcher, a process that has not joined the coordinator within the initialization
    timeout prints which process and address and exits with status 1 (JAX's own client would abort
    later with SIGABRT). Raises ``ValueError`` for malformed launcher variables.
    """
    import jax

    env = os.environ if env is None else env
    if jax.distributed.is_initialized():
        return Distributed(jax.process_index(), jax.process_count(), "launcher" if env.get(ENV_COORDINATOR) else "cluster")
    if env.get(ENV_COORDINATOR):
        address = env[ENV_COORDINATOR]
        n = _env_int(env, ENV_NUM_PROCESSES, minimum=1)
        i = _env_int(env, ENV_PROCESS_ID)
        if i >= n:
            raise ValueError(f"{ENV_PROCESS_ID}={i} must be below {ENV_NUM_PROCESSES}={n}.")
        timeouts = _timeouts(env)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        limit = timeouts.get("initialization_timeout", DEFAULT_INIT_TIMEOUT)
        with _watchdog(limit, f"process {i} of {n} could not join the coordinator at {address} within {limit} s "
                              "(did every process start? is the address reachable?)"):
            jax.distributed.initialize(coordinator_address=address, num_processes=n, process_id=i, **timeouts)
        if env.get(ENV_LAUNCHER_PID, "").isdigit():
            _exit_with_launcher(int(env[ENV_LAUNCHER_PID]), f"process {i} of {n}")
        return Distributed(jax.process_index(), jax.process_count(), "launcher")
    if _on_cluster(env):
        timeouts = _timeouts(env)
        limit = timeouts.get("initialization_timeout", DEFAULT_INIT_TIMEOUT)
        with _watchdog(limit, f"jax.distributed.initialize() found a cluster environment but did not join its "
                              f"coordinator within {limit} s"):
            jax.distributed.initialize(**timeouts)
        return Distributed(jax.process_index(), jax.process_count(), "cluster")
    return Distributed(0, 1, "single")


def is_launched(env: Mapping[str, str] | None = None) -> bool:
    """True in a process started by the launcher (or given its ``DPFAIR_*`` coordinates by hand)."""
    return bool((os.environ if env is None else env).get(ENV_COORDINATOR))


def process_count() -> int:
    """Processes of this JAX job: 1 unless ``jax.distributed`` is initialized (starts no backend then)."""
    import jax

    return jax.process_count() if jax.distributed.is_initialized() else 1


def process_index() -> int:
    """This process's index in the job (0 unless ``jax.distributed`` is initialized)."""
    import jax

    return jax.process_index() if jax.distributed.is_initialized() else 0


def is_primary() -> bool:
    """True on process 0 (and in a single process): the process that writes files and prints."""
    return process_index() == 0


def allgather_object(obj: object) -> list:
    """Every process's ``obj`` (any picklable value), in process order, on every process.

    A collective: every process must call it, in the same order. Two
    ``multihost_utils.process_allgather`` calls move the pickled bytes (sizes, then the padded bytes).
    Only for values this job's own processes produced (``pickle``).
    """
    if process_count() == 1:
        return [obj]
    import pickle

    import numpy as np
    from jax.experimental import multihost_utils

    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.array([data.size], np.int32))).reshape(-1)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: data.size] = data
    every = np.asarray(multihost_utils.process_allgather(padded))
    return [pickle.loads(every[p, : int(n)].tobytes()) for p, n in enumerate(sizes)]


def broadcast_object(obj: object) -> object:
    """Process 0's ``obj`` on every process (a collective; the others' ``obj`` is ignored)."""
    if process_count() == 1:
        return obj
    return allgather_object(obj if is_primary() else None)[0]


# ------------------------------------------------------------------------------------- launcher


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def child_env(process_id: int, processes: int, address: str, devices_per_process: int,
              base: Mapping[str, str] | None = None, init_timeout: int = DEFAULT_INIT_TIMEOUT,
              heartbeat_timeout: int = DEFAULT_HEARTBEAT_TIMEOUT) -> dict[str, str]:
    """Environment of launched process ``process_id``: coordinates, CPU platform, host device count."""
    env = dict(os.environ if base is None else base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_FLAG)]
    flags.append(f"{_DEVICE_FLAG}={devices_per_process}")
    env.update({
        ENV_COORDINATOR: address,
        ENV_NUM_PROCESSES: str(processes),
        ENV_PROCESS_ID: str(process_id),
        ENV_INIT_TIMEOUT: str(init_timeout),
        ENV_HEARTBEAT_TIMEOUT: str(heartbeat_timeout),
        ENV_LAUNCHER_PID: str(os.getpid()),
        "XLA_FLAGS": " ".join(flags),
        "JAX_PLATFORMS": "cpu",
    })
    env.pop(ENV_DISTRIBUTED, None)
    return env


def _describe(code: int) -> str:
    return f"was killed by signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exited with status {code}"


def _stop(procs: Sequence[subprocess.Popen], grace: float) -> None:
    """SIGINT every running child, SIGKILL those still running after ``grace`` seconds.

    SIGINT, not SIGTERM: JAX's distributed runtime catches SIGTERM as a preemption notice and
    keeps running; SIGINT raises ``KeyboardInterrupt`` where the child is in Python code.
    """
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
    for p in procs:
        p.wait()


def launch(args: Sequence[str], processes: int, *, devices_per_process: int = 1, port: int | None = None,
           init_timeout: int = DEFAULT_INIT_TIMEOUT, heartbeat_timeout: int = DEFAULT_HEARTBEAT_TIMEOUT,
           grace: float = 3.0, timeout: float | None = None, python: str | None = None,
           env: Mapping[str, str] | None = None) -> int:
    """Run ``processes`` copies of ``python *args`` as one JAX job; return the job's exit status.

    0 when every process exits with 0. When one fails (non-zero status or a signal), the others are
    stopped (SIGINT, SIGKILL after ``grace`` s) and that process's status is returned (128 + signal
    for a signal); past ``timeout`` seconds all are stopped and 124 is returned. A message on stderr
    names the process.
    """
    processes = _check_int("processes", processes, 1)
    devices_per_process = _check_int("devices_per_process", devices_per_process, 1)
    if port is not None:
        port = _check_int("port", port, 1)
        if port > 65535:
            raise ValueError(f"port must be at most 65535, got {port}.")
    if not args:
        raise ValueError("args is empty; give the Python program to run, e.g. -- -m dpfair_jax run NAME.")
    address = f"127.0.0.1:{port if port is not None else free_port()}"
    exe = python or sys.executable
    procs: list[subprocess.Popen] = []
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)  # JAX's runtime takes SIGTERM as a preemption notice

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i in range(processes):
            procs.append(subprocess.Popen(
                [exe, *args],
                env=child_env(i, processes, address, devices_per_process, env, init_timeout, heartbeat_timeout),
                start_new_session=True,  # Ctrl-C reaches the children once, through forward()
            ))
        start = time.monotonic()
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                if not forwarded:
                    print(f"dpfair_jax.launch: process {i} of {processes} {_describe(code)}; "
                          f"stopping the others", file=sys.stderr, flush=True)
                _stop(procs, grace)
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                return 0
            if timeout is not None and time.monotonic() - start > timeout:
                running = [i for i, c in enumerate(codes) if c is None]
                print(f"dpfair_jax.launch: processes {running} still running after {timeout:g} s; stopping them",
                      file=sys.stderr, flush=True)
                _stop(procs, grace)
                return 124
            time.sleep(0.05)
    finally:
        _stop(procs, grace)
        for s, h in old.items():
            signal.signal(s, h)


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dpfair_jax.launch",
        description="Start N local CPU processes of one JAX program (jax.distributed, gloo collectives).",
        usage="%(prog)s --processes N [--devices-per-process D] [--port P] [options] -- PYTHON_ARGS...",
    )
    p.add_argument("--processes", type=int, required=True, metavar="N")
    p.add_argument("--devices-per-process", type=int, default=1, metavar="D",
                   help="host CPU devices per process (default 1)")
    p.add_argument("--port", type=int, default=None, metavar="P", help="coordinator port (default: a free one)")
    p.add_argument("--init-timeout", type=int, default=DEFAULT_INIT_TIMEOUT, metavar="S",
                   help=f"seconds to reach the coordinator (default {DEFAULT_INIT_TIMEOUT})")
    p.add_argument("--heartbeat-timeout", type=int, default=DEFAULT_HEARTBEAT_TIMEOUT, metavar="S",
                   help=f"seconds before a silent process counts as dead (default {DEFAULT_HEARTBEAT_TIMEOUT})")
    p.add_argument("--grace", type=float, default=3.0, metavar="S",
                   help="seconds between SIGINT and SIGKILL when stopping processes (default 3)")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop everything after S seconds")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("python -m dpfair_jax.launch: give the program after --, e.g. "
              "--processes 2 -- -m dpfair_jax run NAME", file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = build_parser()
    opts = parser.parse_args(argv[:cut])
    try:
        return launch(argv[cut + 1:], opts.processes, devices_per_process=opts.devices_per_process, port=opts.port,
                      init_timeout=opts.init_timeout, heartbeat_timeout=opts.heartbeat_timeout, grace=opts.grace,
                      timeout=opts.timeout)
    except ValueError as err:
        print(f"python -m dpfair_jax.launch: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
