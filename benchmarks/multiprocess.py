"""Multi-process benchmark: one Monte Carlo study run by 1, 2 and 4 local JAX processes.

The study: ``montecarlo.sweep`` of the global Gaussian mean (``algorithms.mean_estimation.gaussian_mean``,
replace-one, ``rho``-zCDP per trial) on ``n = 2000`` draws from ``N(1, I_8)``, clip norm 6 around
the center 0, at ``rho in {0.01, 0.1, 1}`` with ``--trials`` trials per value; each trial returns the
estimate's L2 error. Every process is started by ``python -m dpfair_jax.launch`` with
``--devices-per-process`` host CPU devices (default 1) and gloo collectives, and runs the sweep over
``trial_mesh()`` (all processes' devices) in chunks of ``--chunk`` items, then ``montecarlo.gather``.

Per process count the row reports: ``value`` the steady-state seconds of the sweep plus the gather
(second call, after a barrier, timed on process 0), ``ratio`` the speed-up over one process,
``first_s`` the first call (compile included), ``wall_s`` the launcher's whole run (interpreter and
JAX start-up, joining the coordinator, both calls), ``rss_mb_max`` the largest per-process peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) and ``rss_mb_total`` their sum, and ``same_result``
whether the gathered errors are bitwise those of one process (same chunk shape: they must be).

    python benchmarks/multiprocess.py [--quick] [--trials 10000] [--processes 1,2,4]
                                      [--devices-per-process 1] [--chunk 16] [--default-device] [--out PATH]

``--default-device`` adds a row for one plain process (no launcher) on the default device, the GPU
on a GPU machine (its errors then differ from the CPU's in the last bits: ``same_result`` no).
``--quick``: 400 trials, 1 and 2 processes. Times on a machine with fewer cores than processes
measure the runtime's overhead, not a speed-up (the processes share the cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

N_EX, DIM, CLIP = 2000, 8, 6.0
RHOS = (0.01, 0.1, 1.0)


def trial(key, rho):
    """One trial: data from N(1, I_d), its private mean at zCDP ``rho`` (traced), the L2 error."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax.algorithms import mean_estimation as me

    kx, km = jax.random.split(key)
    x = 1.0 + jax.random.normal(kx, (N_EX, DIM))
    est = me.gaussian_mean(km, x, center=0.0, clip=CLIP, rho=rho)
    return {"err": jnp.linalg.norm(est - 1.0)}


def worker(args: argparse.Namespace) -> None:
    """Run inside each launched process: time the sweep twice, write this process's JSON."""
    import resource

    from dpfair_jax import launch

    info = launch.initialize()
    import jax
    from jax.experimental import multihost_utils

    from dpfair_jax import montecarlo as mc

    def study():
        res = mc.sweep(trial, jax.random.key(0), {"rho": list(RHOS)}, args.trials, chunk_size=args.chunk,
                       mesh=mc.trial_mesh())
        return mc.gather(res)

    t0 = time.perf_counter()
    study()
    first = time.perf_counter() - t0
    if info.process_count > 1:
        multihost_utils.sync_global_devices("benchmark: timed call")
    t0 = time.perf_counter()
    res = study()
    steady = time.perf_counter() - t0
    err = res.values["err"]
    out = {
        "process": info.process_index, "processes": info.process_count, "devices": jax.device_count(),
        "first_s": first, "steady_s": steady,
        "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "digest": hashlib.sha256(err.tobytes()).hexdigest(), "mean_err": [float(v) for v in err.mean(axis=-1)],
    }
    Path(args.worker_dir, f"p{info.process_index}.json").write_text(json.dumps(out))


def run_one(processes: int, args: argparse.Namespace, launched: bool = True) -> dict:
    """Launch ``processes`` workers; return the launcher's wall time and the workers' reports.

    ``launched=False``: one plain process on the default device (a GPU where there is one).
    """
    with tempfile.TemporaryDirectory() as tmp:
        work = [str(Path(__file__).resolve()), "--worker", "--worker-dir", tmp, "--trials", str(args.trials),
                "--chunk", str(args.chunk), "--no-reexec"]
        cmd = [sys.executable, "-m", "dpfair_jax.launch", "--processes", str(processes),
               "--devices-per-process", str(args.devices_per_process), "--timeout", str(args.timeout), "--", *work]
        env = None
        if not launched:
            cmd = [sys.executable, *work]
            env = {k: v for k, v in os.environ.items() if not k.startswith("DPFAIR_")}
            env["DPFAIR_DISTRIBUTED"] = "0"
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{processes} processes failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        reports = [json.loads(Path(tmp, f"p{i}.json").read_text()) for i in range(processes)]
    return {"wall_s": wall, "reports": reports}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--trials", type=int, default=None, help="trials per rho (default 10000, --quick 400)")
    p.add_argument("--processes", default=None, help="comma-separated process counts (default 1,2,4; --quick 1,2)")
    p.add_argument("--devices-per-process", type=int, default=1)
    p.add_argument("--chunk", type=int, default=16, help="items per chunk on each device (same for every count)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch before it is stopped")
    p.add_argument("--default-device", action="store_true",
                   help="add a row: one plain process on the default device (the GPU on a GPU machine)")
    p.add_argument("--note", default="")
    p.add_argument("--out", default=None)
    p.add_argument("--no-reexec", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.trials is None:
        args.trials = 400 if args.quick else 10000
    if args.worker:
        worker(args)
        return
    common.maybe_reexec()
    counts = [int(c) for c in (args.processes or ("1,2" if args.quick else "1,2,4")).split(",")]
    if counts[0] != 1:
        counts = [1, *counts]  # the baseline
    items = len(RHOS) * args.trials
    note = (f"{items} items ({len(RHOS)} rho x {args.trials} trials), chunk {args.chunk}, "
            f"{args.devices_per_process} host device(s) per process, gloo; {os.cpu_count()} cores shared by all processes")
    desc = common.machine(f"{note}; {args.note}" if args.note else note)
    rows, base, base_digest = [], None, None
    for n in counts:
        got = run_one(n, args)
        reps = got["reports"]
        steady, first = reps[0]["steady_s"], max(r["first_s"] for r in reps)
        rss = [r["rss_bytes"] / 2**20 for r in reps]
        digest = reps[0]["digest"]
        if n == 1:
            base, base_digest, base_rss = steady, digest, rss[0]
        rows.append(common.row(
            f"mean_sweep_{n}_processes", steady, "s", machine_desc=desc,
            baseline=None if n == 1 else "mean_sweep_1_processes", baseline_value=None if n == 1 else base,
            processes=n, devices=reps[0]["devices"], first_s=first, wall_s=got["wall_s"],
            rss_mb_max=max(rss), rss_mb_total=sum(rss), rss_ratio_max=max(rss) / base_rss,
            same_result=all(r["digest"] == base_digest for r in reps),
        ))
    if args.default_device:
        got = run_one(1, args, launched=False)
        rep = got["reports"][0]
        rows.append(common.row(
            "mean_sweep_default_device", rep["steady_s"], "s", machine_desc=desc, baseline="mean_sweep_1_processes",
            baseline_value=base, processes=1, devices=rep["devices"], first_s=rep["first_s"], wall_s=got["wall_s"],
            rss_mb_max=rep["rss_bytes"] / 2**20, rss_mb_total=rep["rss_bytes"] / 2**20,
            rss_ratio_max=rep["rss_bytes"] / 2**20 / base_rss, same_result=rep["digest"] == base_digest,
        ))
    common.report("multiprocess", rows, args.out)


if __name__ == "__main__":
    main()
