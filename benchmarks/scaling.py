"""Time and peak memory of a Monte Carlo study versus number of trials, data size n and model size d.

Each point runs in a fresh subprocess (``--worker``) so its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``; XLA's CPU buffers live outside Python's allocator, so
``tracemalloc`` does not see them) belongs to that point alone; on an accelerator the worker reports
``jax.devices()[0].memory_stats()["peak_bytes_in_use"]`` as well. The trial is ``steps`` of clipped,
noised full-batch gradient descent for least squares on ``n`` rows of dimension ``d`` (``[d]``
output per trial), run with ``montecarlo.run_trials`` and the automatic chunk size from
``--budget-mb``. Compile time is reported apart from run time.

Printed verdicts: run time ~ linear in work (slope of log time on log work, fitted over the points
above 50 ms) and memory flat in trials beyond the chunk size.

Run: ``python benchmarks/scaling.py [--quick]``; writes ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

STEPS = 20


def _worker(trials: int, n: int, d: int, budget_mb: float) -> dict:
    import jax
    import jax.numpy as jnp

    from dpfair_jax import compile_cache as cc
    from dpfair_jax import montecarlo as MC

    kx, ky = jax.random.split(jax.random.key(123))
    x = jax.random.normal(kx, (n, d))
    y = x @ jnp.linspace(-1.0, 1.0, d) + jax.random.normal(ky, (n,))
    data = {"x": x, "y": y}

    def trial(key, data):
        def step(w, k):
            r = data["x"] @ w - data["y"]  # [n]
            norms = jnp.abs(r) * jnp.sqrt(jnp.sum(jnp.square(data["x"]), 1))
            c = 1.0 / jnp.maximum(norms, 1.0)  # clip per-example gradients to norm 1
            g = (c * r) @ data["x"] + jax.random.normal(k, (d,))
            return w - 0.5 * g / n, None

        w, _ = jax.lax.scan(step, jnp.zeros(d), jax.random.split(key, STEPS))
        return w

    budget = int(budget_mb * 2**20)
    jax.block_until_ready(data)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with cc.track_compiles() as st:
        t0 = time.perf_counter()
        jax.block_until_ready(MC.run_trials(trial, jax.random.key(0), 1, data=data, memory_budget_bytes=budget))
        first_s = time.perf_counter() - t0
    per, fixed = MC.estimate_trial_memory(trial, jax.random.key(0), data=data)
    chunk = max(1, min(trials, (budget - fixed) // per))
    with cc.track_compiles() as st:
        t0 = time.perf_counter()
        out = jax.block_until_ready(MC.run_trials(trial, jax.random.key(1), trials, data=data,
                                                  memory_budget_bytes=budget))
        total_s = time.perf_counter() - t0
    # run again: now compiled
    t0 = time.perf_counter()
    jax.block_until_ready(MC.run_trials(trial, jax.random.key(2), trials, data=data, memory_budget_bytes=budget))
    run_s = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = {"trials": trials, "n": n, "d": d, "chunk": int(chunk), "bytes_per_trial": int(per),
           "compile_s": st.compile_seconds, "first_call_s": total_s, "run_s": run_s, "warm_1trial_s": first_s,
           "max_rss_mb": rss1 / 1024, "rss_after_data_mb": rss0 / 1024, "finite": bool(jnp.all(jnp.isfinite(out)))}
    try:
        stats = jax.devices()[0].memory_stats()
        if stats and "peak_bytes_in_use" in stats:
            res["device_peak_mb"] = stats["peak_bytes_in_use"] / 2**20
    except Exception:  # noqa: BLE001 - CPU devices have no memory_stats
        pass
    return res


def _point(trials: int, n: int, d: int, budget_mb: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(trials), str(n), str(d), "--budget-mb", str(budget_mb)]
    env = dict(os.environ, GLIBC_TUNABLES=common.TUNABLES)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"worker {trials=} {n=} {d=} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _slope(points: list[dict]) -> float:
    pts = [(math.log(p["trials"] * p["n"] * p["d"]), math.log(p["run_s"])) for p in points if p["run_s"] > 0.05]
    if len(pts) < 2:
        return float("nan")
    mx = sum(a for a, _ in pts) / len(pts)
    my = sum(b for _, b in pts) / len(pts)
    num = sum((a - mx) * (b - my) for a, b in pts)
    den = sum((a - mx) ** 2 for a, _ in pts)
    return num / den


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, smaller points")
    ap.add_argument("--budget-mb", type=float, default=16.0, help="memory budget per chunk (automatic chunk size)")
    ap.add_argument("--worker", nargs=3, type=int, metavar=("TRIALS", "N", "D"), help=argparse.SUPPRESS)
    ap.add_argument("--note", default="", help="appended to the machine line")
    ap.add_argument("--no-reexec", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*args.worker, args.budget_mb)))
        return
    if args.quick:
        trials, ns, ds, n0, d0, t0 = [1, 1_000, 10_000, 30_000], [1_000, 10_000], [8, 128], 1_000, 8, 100
    else:
        trials, ns, ds, n0, d0, t0 = [1, 10, 100, 1_000, 10_000, 100_000], [1_000, 10_000, 100_000], \
            [8, 32, 128, 512], 1_000, 8, 100
    done: dict[tuple, dict] = {}

    def point(t: int, n: int, d: int) -> dict:  # the series share a point: measure it once
        if (t, n, d) not in done:
            done[(t, n, d)] = _point(t, n, d, args.budget_mb)
        return done[(t, n, d)]

    series = {"trials": [point(t, n0, d0) for t in trials],
              "n": [point(t0, n, d0) for n in ns],
              "d": [point(t0, n0, d) for d in ds]}
    mdesc = common.machine("; ".join(x for x in (args.note, "each point in a subprocess with GLIBC_TUNABLES set") if x))
    rows = []
    for kind, pts in series.items():
        for p in pts:
            extra = {k: p[k] for k in ("trials", "n", "d", "chunk", "compile_s", "max_rss_mb")}
            rows.append(common.row(f"scaling {kind}: T={p['trials']} n={p['n']} d={p['d']}", p["run_s"], "s",
                                   machine_desc=mdesc, **extra))
    for kind, pts in series.items():
        s = _slope(pts)
        if math.isnan(s):
            verdict = "too few points above 50 ms to fit"
        else:
            verdict = "~linear" if abs(s - 1) < 0.25 else ("sub-linear (fixed costs dominate)" if s < 1 else "super-linear")
        print(f"{kind}: slope of log run time on log work = {s:.2f} ({verdict})")
    beyond = [p for p in series["trials"] if p["trials"] > p["chunk"]]
    if len(beyond) >= 2:
        print(f"trials beyond the chunk size: slope of log run time on log work = {_slope(beyond):.2f}")
        mems = [p["max_rss_mb"] for p in beyond]
        spread = (max(mems) - min(mems)) / min(mems)
        print(f"trials beyond the chunk size ({[p['trials'] for p in beyond]}): max RSS {mems} MB, "
              f"spread {spread:.0%} ({'flat' if spread < 0.2 else 'NOT flat'})")
    else:
        print("fewer than two trial counts exceed the chunk size; raise the trial counts or lower --budget-mb")
    common.report("scaling", rows, args.out)


if __name__ == "__main__":
    main()
