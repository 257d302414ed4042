"""Monte Carlo benchmark: 1000 trials of DP linear regression by full-batch noisy clipped GD.

One trial draws a data set (n = 10,000, d = 2, ``y = x w* + 0.5 e``), runs 200 steps of full-batch
gradient descent on the squared loss with per-example clipping to norm C, Gaussian noise
``N(0, sigma^2 C^2 I)`` on the clipped sum, and division by n (clip, sum, noise, normalize), and
returns the final parameters and the training MSE. Privacy of one trial: each step is a Gaussian
mechanism with L2 sensitivity C under add/remove-one (full batch, no subsampling), so 200 steps
compose to the Gaussian mechanism with noise multiplier ``sigma / sqrt(200)`` (``dpsgd_event`` with
sample rate 1). The benchmark only times it.

Implementations (all float32, same hyperparameters):

(a) ``run_trials`` (one jitted program; chunks of ``--chunk`` trials by ``lax.map`` of ``vmap``;
    default 2 on CPU, where one chunk's data (160 kB per trial) stays in L2 cache, and all trials
    at once elsewhere), plus other chunk sizes, the unchunked vmap and a plain
    ``lax.map(batch_size=)`` for comparison;
(b) a Python loop over the jitted single trial;
(c) NumPy naive: a loop over trials with row-major ``[n, 2]`` arrays, as research code usually is;
(d) NumPy careful: all trials vectorized in structure-of-arrays layout (one ``[trials, n]`` array per
    feature), processed in cache-sized blocks of trials with in-place updates.

The JAX trial is written in structure-of-arrays layout (one vector per feature): on XLA's CPU
backend an ``[n, 2]`` per-example gradient array vmapped over trials was ~10x slower (see
``notes/performance_cpu.md``). Targets on a 2-core CPU: (a) >= 3x (d) and >= 20x (c). On an
accelerator: (a) >= 100x (b), and (a) within 10x the time of one trial run by the same program
(``run_trials`` with one trial; row ``jax_one_trial``, compared as ``one_trial_x10``).

``--quick`` runs fewer trials for (b), (c), (d) and extrapolates linearly to 1000 (the ``unit``
column says so). Times are the best of ``--repeats`` after a warm-up; compile time is reported apart.
Each row also carries ``cpu_s`` (process CPU time per 1000 trials, all threads) and ``cpu_ratio``
(the same comparison in CPU time), which other jobs on a shared machine disturb less than wall time.
The same script runs unchanged on a GPU (the NumPy rows then still run on the host CPU).

    python benchmarks/montecarlo.py [--quick] [--trials 1000] [--chunk C] [--chunks 1,10,50] [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

N_EX, STEPS = 10_000, 200
W_TRUE = (1.0, -0.5)
NOISE_SD, CLIP, SIGMA, LR = 0.5, 1.0, 1.0, 0.5
TARGETS = {"numpy_careful": 3.0, "numpy_naive": 20.0}
# On an accelerator (the H100 targets): the whole program against a Python loop of the
# jitted trial, and 1000 trials within 10x the time of one trial run as the same program.
ACCEL_TARGETS = {"jax_python_loop_jitted": 100.0, "one_trial_x10": 1.0}


# ------------------------------------------------------------------------------------------- JAX


def jax_trial(key):
    """One trial in structure-of-arrays layout: returns {"w": f32[2], "mse": f32[]}."""
    import jax
    import jax.numpy as jnp

    kx, ky, kn = jax.random.split(key, 3)
    xs = jax.random.normal(kx, (2, N_EX))  # one row per feature
    x0, x1 = xs
    y = W_TRUE[0] * x0 + W_TRUE[1] * x1 + NOISE_SD * jax.random.normal(ky, (N_EX,))
    xnorm = jnp.sqrt(x0 * x0 + x1 * x1)
    noise = (SIGMA * CLIP) * jax.random.normal(kn, (STEPS, 2))

    def step(w, z):
        r = w[0] * x0 + w[1] * x1 - y  # per-example gradient is r_i * x_i, its norm |r_i| ||x_i||
        c = r * jnp.minimum(1.0, CLIP / jnp.maximum(jnp.abs(r) * xnorm, 1e-12))  # clip
        g = (xs @ c + z) / N_EX  # sum (as [2, n] @ [n]), noise, normalize
        return w - LR * g, None

    w, _ = jax.lax.scan(step, jnp.zeros(2, jnp.float32), noise)
    r = w[0] * x0 + w[1] * x1 - y
    return {"w": w, "mse": jnp.mean(r * r)}


# ----------------------------------------------------------------------------------------- NumPy


def numpy_naive(num_trials: int, seed: int = 0):
    """Per-trial loop, row-major [n, 2] data, per-example gradient matrix each step."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w_true = np.asarray(W_TRUE, np.float32)
    ws, mses = [], []
    for _ in range(num_trials):
        x = rng.standard_normal((N_EX, 2), dtype=np.float32)
        y = x @ w_true + NOISE_SD * rng.standard_normal(N_EX, dtype=np.float32)
        w = np.zeros(2, np.float32)
        for _ in range(STEPS):
            r = x @ w - y
            grads = r[:, None] * x  # per-example gradients [n, 2]
            norms = np.linalg.norm(grads, axis=1)
            grads = grads * np.minimum(1.0, CLIP / np.maximum(norms, 1e-12))[:, None]
            g = (grads.sum(axis=0) + SIGMA * CLIP * rng.standard_normal(2, dtype=np.float32)) / N_EX
            w = w - LR * g
        ws.append(w)
        mses.append(np.mean((x @ w - y) ** 2))
    return {"w": np.stack(ws), "mse": np.asarray(mses)}


def numpy_careful(num_trials: int, seed: int = 0, block: int = 8):
    """Trials vectorized in structure-of-arrays layout, blocks of ``block`` trials, in-place ops.

    ``block=8`` keeps a block's arrays in cache (on the 2-core CPU it took 5.7 s CPU per 1000
    trials against 7.4 s with 32 and 10.8 s with 100).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    ws = np.empty((num_trials, 2), np.float32)
    mses = np.empty(num_trials, np.float32)
    for start in range(0, num_trials, block):
        b = min(block, num_trials - start)
        x0 = rng.standard_normal((b, N_EX), dtype=np.float32)
        x1 = rng.standard_normal((b, N_EX), dtype=np.float32)
        y = W_TRUE[0] * x0 + W_TRUE[1] * x1 + NOISE_SD * rng.standard_normal((b, N_EX), dtype=np.float32)
        xnorm = np.sqrt(x0 * x0 + x1 * x1)
        noise = (SIGMA * CLIP) * rng.standard_normal((STEPS, b, 2), dtype=np.float32)
        w = np.zeros((b, 2), np.float32)
        r = np.empty_like(x0)
        c = np.empty_like(x0)
        for t in range(STEPS):
            np.multiply(x0, w[:, :1], out=r)
            r += x1 * w[:, 1:]
            r -= y
            np.abs(r, out=c)
            c *= xnorm
            np.maximum(c, 1e-12, out=c)
            np.divide(CLIP, c, out=c)
            np.minimum(c, 1.0, out=c)
            c *= r  # clipped residuals
            g = np.stack([np.einsum("ij,ij->i", c, x0), np.einsum("ij,ij->i", c, x1)], axis=1)
            w -= LR * (g + noise[t]) / N_EX
        np.multiply(x0, w[:, :1], out=r)
        r += x1 * w[:, 1:]
        r -= y
        ws[start:start + b] = w
        mses[start:start + b] = np.einsum("ij,ij->i", r, r) / N_EX
    return {"w": ws, "mse": mses}


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials for (b), (c), (d), extrapolated")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--chunk", type=int, default=None,
                    help="chunk size of the run_trials row (default: 2 on CPU, where a chunk's data stays in "
                         "cache, else all trials at once)")
    ap.add_argument("--chunks", type=str, default=None,
                    help="comma-separated extra chunk sizes to time (default: 1,10,50 on CPU; none with --quick)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=str, default=None)
    ap.add_argument("--no-reexec", action="store_true")
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    from dpfair_jax import montecarlo as mc

    T = args.trials
    quick = args.quick
    on_cpu = jax.default_backend() == "cpu"
    if args.chunk is None:
        args.chunk = 2 if on_cpu else T
    n_loop = min(T, 100) if quick else T
    n_naive = min(T, 10) if quick else T
    n_careful = min(T, 100) if quick else T
    reps_slow = 1 if quick or T >= 500 else args.repeats  # the naive loop is long: one timed run
    import os

    machine = common.machine(f"load average {os.getloadavg()[0]:.2f} at start")
    key = jax.random.key(0)
    rows: list[dict] = []
    results: dict[str, dict] = {}

    def per_1000(seconds: float, n: int) -> float:
        return seconds * 1000.0 / n

    def unit(n: int) -> str:
        return "s / 1000 trials" + (f" (extrapolated from {n})" if n != 1000 else "")

    # (a) run_trials, chunked (the headline row), then variants
    tm = common.timed(mc.run_trials, jax_trial, key, T, chunk_size=args.chunk, repeats=args.repeats)
    results["jax_run_trials"] = jax.device_get(mc.run_trials(jax_trial, key, T, chunk_size=args.chunk))
    a_time = per_1000(tm.best_s, T)
    a_name = f"jax_run_trials_chunk{args.chunk}"
    timings = {a_name: (a_time, unit(T), tm)}

    default_extra = [1, 10, 50] if on_cpu and not quick else []
    extra = default_extra if args.chunks is None else [int(c) for c in args.chunks.split(",") if c]
    extra = [c for c in extra if c != args.chunk and c < T]
    for c in extra:
        t = common.timed(mc.run_trials, jax_trial, key, T, chunk_size=c, repeats=args.repeats)
        timings[f"jax_run_trials_chunk{c}"] = (per_1000(t.best_s, T), unit(T), t)
    if args.chunk < T:
        t = common.timed(mc.run_trials, jax_trial, key, T, repeats=args.repeats)
        timings["jax_run_trials_unchunked"] = (per_1000(t.best_s, T), unit(T), t)

    keys = mc.trial_keys(key, T)
    laxmap = jax.jit(lambda ks: jax.lax.map(jax_trial, ks, batch_size=args.chunk))
    t = common.timed(laxmap, keys, repeats=args.repeats)
    timings[f"jax_lax_map_batch{args.chunk}"] = (per_1000(t.best_s, T), unit(T), t)

    # one trial as the same program: the floor that batching trials is compared with
    t1 = common.timed(mc.run_trials, jax_trial, key, 1, repeats=max(args.repeats, 5))
    one_trial_s = t1.best_s

    # (b) Python loop over the jitted single trial
    single = jax.jit(jax_trial)
    loop_keys = list(keys[:n_loop])

    def loop():
        return [single(k) for k in loop_keys]

    t = common.timed(loop, repeats=reps_slow)
    timings["jax_python_loop_jitted"] = (per_1000(t.best_s, n_loop), unit(n_loop), t)

    # (c), (d) NumPy
    t = common.timed(numpy_careful, n_careful, repeats=reps_slow)
    timings["numpy_careful"] = (per_1000(t.best_s, n_careful), unit(n_careful), t)
    results["numpy_careful"] = numpy_careful(min(n_careful, 200))
    t = common.timed(numpy_naive, n_naive, repeats=1, warmup=False)
    timings["numpy_naive"] = (per_1000(t.best_s, n_naive), unit(n_naive), t)
    results["numpy_naive"] = numpy_naive(min(n_naive, 20))

    n_of = {"jax_python_loop_jitted": n_loop, "numpy_careful": n_careful, "numpy_naive": n_naive}
    cpu = {name: per_1000(t.best_cpu_s, n_of.get(name, T)) for name, (_, _, t) in timings.items()}
    # Baselines: every timed row, and 10x one trial's time (1000 trials within 10x one trial).
    base_value = {name: value for name, (value, _, _) in timings.items()}
    base_value["one_trial_x10"] = 10.0 * one_trial_s
    targets = dict(TARGETS) if on_cpu else {**TARGETS, **ACCEL_TARGETS}
    for name, (value, u, t) in timings.items():
        bases = (["numpy_careful", "numpy_naive", "jax_python_loop_jitted", "one_trial_x10"] if name == a_name
                 else ["numpy_careful"] if name.startswith("jax") else [None])
        for base in bases:
            rows.append(common.row(
                name, value, u, machine_desc=machine, baseline=base,
                baseline_value=base_value[base] if base else None,
                target=targets.get(base) if name == a_name else None,
                cpu_s=cpu[name], cpu_ratio=cpu.get(base, float("nan")) / cpu[name] if base else None))
    rows.append(common.row("jax_one_trial", one_trial_s, "s (one trial, run_trials with 1 trial)",
                           machine_desc=machine))
    for name, (value, u, t) in timings.items():
        if name.startswith("jax") and np.isfinite(t.first_s):
            rows.append(common.row(f"{name}_compile", t.compile_s, "s (first call - best)", machine_desc=machine))

    path = common.report("montecarlo", rows, args.out)
    print("\nsanity (mean over trials; implementations draw different random numbers):")
    for name, res in results.items():
        w = np.asarray(res["w"])
        mse = np.asarray(res["mse"])
        print(f"  {name:16s} trials={len(mse):5d}  w=({w[:, 0].mean():+.4f}, {w[:, 1].mean():+.4f})  "
              f"mse={mse.mean():.5f} +- {mse.std(ddof=1) / np.sqrt(len(mse)):.5f}")
    del path
    return rows


if __name__ == "__main__":
    if "--no-reexec" not in sys.argv:
        common.maybe_reexec([str(Path(__file__).resolve()), *sys.argv[1:]])
    main()
