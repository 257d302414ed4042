"""The full DP-FERMI Adult grid as one compiled program: 15 seeds x 6 lambdas x 5 epsilons, 200 epochs,
batch 1024 (paper 004, Fig 2 settings), with the kit's ``algorithms.fermi``.

One ``jax.jit`` program: seeds are evaluated in chunks (``montecarlo.run_trials``), the 30 grid points of
a seed are vmapped and share that seed's batches; lambdas and noise multipliers are traced arrays. The
program is compiled ahead of time (``.lower().compile()``) so compile time is reported apart from run
time, then run once.

``--quick`` runs all 30 grid points for ``--quick-seeds`` seeds, at ``--quick-epochs`` and twice
that many epochs, and extrapolates the run time linearly to 15 seeds x 200 epochs (rows marked
``extrapolated``): the difference of the two runs gives the time per step (steps run in a
``lax.scan``), the rest is per-run fixed cost (evaluation); seeds scale linearly (chunks).

Also :func:`roofline`: FLOPs and bytes per step from ``models.flops_per_example`` and the batch, and
the lower bounds on time they imply for a given peak (defaults: an H100 SXM's datasheet figures).
On a GPU the script also measures the card's ceilings (a 1 GiB copy, an fp32 matrix product) and
reports the achieved FLOP/s and bytes/s of the run against them, and the time per step of all runs
(the grid is a sequence of 6,800 small steps: latency, not FLOPs or bytes, bounds it). The target
row compares compile + run with 10 minutes on CPU and with 15 seconds on a GPU.

Run: ``python benchmarks/fermi_grid.py [--quick]``; writes ``benchmarks/results/fermi_grid.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

SEEDS, LAMS, EPSILONS = 15, (0.0, 0.25, 0.5, 1.0, 1.5, 2.5), (0.5, 1.0, 3.0, 9.0, float("inf"))
EPOCHS, BATCH = 200, 1024
HP = {"lr_theta": 0.005, "lr_w": 0.01, "clip_theta": 2.0, "clip_w": 3.0, "radius": 5.0}
# Datasheet peaks of one H100 SXM (dense FP32 without tensor cores, HBM3 bandwidth).
H100_FP32_FLOPS, H100_HBM_BYTES_S = 67e12, 3.35e12
# Datasheet peaks by accelerator name (FP32 FLOP/s, memory bytes/s); the H200 is the H100's chip
# with HBM3e. On a GPU the script also measures both ceilings (``measure_ceilings``).
DATASHEET_PEAKS = {"H100": (67e12, 3.35e12), "H200": (67e12, 4.8e12)}


def roofline(flops_per_example: int, d: int, batch_size: int, steps: int, runs: int, *,
             num_params: int | None = None, peak_flops: float = H100_FP32_FLOPS,
             bandwidth: float = H100_HBM_BYTES_S, dtype_bytes: int = 4) -> dict:
    """Roofline estimate of a DP training grid.

    Per step and run: FLOPs ``~ 3 x flops_per_example x batch`` (forward, output gradient, clipped-sum
    contraction; the ghost norms add ``O(batch x d)``, included as ``2 d`` per example); bytes
    ``~ 2 x batch x d x dtype_bytes`` (the gathered batch is read for the forward pass and for the
    clipped-sum contraction) plus reading and writing the parameters. Returns totals, the arithmetic
    intensity (FLOP/byte) and the compute- and memory-bound lower limits on seconds.
    """
    p = d + 1 if num_params is None else num_params
    flops_step = 3 * flops_per_example * batch_size + 2 * d * batch_size
    bytes_step = 2 * batch_size * d * dtype_bytes + 2 * p * dtype_bytes
    total_steps = steps * runs
    flops, nbytes = flops_step * total_steps, bytes_step * total_steps
    return {"flops_per_step": flops_step, "bytes_per_step": bytes_step, "intensity_flop_per_byte": flops_step / bytes_step,
            "total_flops": flops, "total_bytes": nbytes, "compute_bound_s": flops / peak_flops,
            "memory_bound_s": nbytes / bandwidth, "bound_s": max(flops / peak_flops, nbytes / bandwidth)}


def datasheet_peaks(device_kind: str) -> tuple[float, float, str]:
    """(FP32 FLOP/s, bytes/s, label) of the named accelerator; the H100's figures when unknown."""
    for name, (flops, bw) in DATASHEET_PEAKS.items():
        if name in device_kind.upper():
            return flops, bw, name
    return H100_FP32_FLOPS, H100_HBM_BYTES_S, "H100 (assumed)"


def measure_ceilings(repeats: int = 5) -> dict:
    """Measured ceilings of the default device: a 1 GiB device-to-device pass (``x * c``: bytes
    read + written) and an 8192^3 float32 matrix product at ``precision=HIGHEST`` (no TF32)."""
    import jax
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.key(0), (1 << 28,), jnp.float32)
    scale = jax.jit(lambda v: v * 1.0001)
    a = jax.random.normal(jax.random.key(1), (8192, 8192), jnp.float32)
    b = jax.random.normal(jax.random.key(2), (8192, 8192), jnp.float32)
    mm = jax.jit(lambda u, v: jnp.dot(u, v, precision=jax.lax.Precision.HIGHEST))
    t_copy = common.timed(scale, x, repeats=repeats).best_s
    t_mm = common.timed(mm, a, b, repeats=repeats).best_s
    return {"bytes_s": 2 * x.size * 4 / t_copy, "fp32_flops": 2 * 8192**3 / t_mm}


def _load_adult():
    from dpfair_jax.data import tabular

    try:
        train, test = tabular.load("adult", seed=0)
        return train, test, "adult"
    except (ImportError, FileNotFoundError, OSError) as err:  # fall back to Adult-sized synthetic data
        import jax
        import jax.numpy as jnp

        from dpfair_jax.data import make_dataset

        print(f"Adult not available ({err}); using synthetic data of Adult's size")
        k = jax.random.split(jax.random.key(0), 3)
        x = jax.random.normal(k[0], (45_222, 102))
        y = (x[:, 0] + jax.random.normal(k[1], (45_222,)) > 1.0).astype(jnp.int32)
        s = (jax.random.uniform(k[2], (45_222,)) < 0.33).astype(jnp.int32)
        full = make_dataset(x, y, s, num_groups=2, num_classes=2)
        return full.take(jnp.arange(33_916)), full.take(jnp.arange(33_916, 45_222)), "synthetic-adult-size"


def build(train, test, *, seeds: int, epochs: int, batch_size: int = BATCH, chunk_size: int | None = None):
    """(jitted program, its arguments, config): ``program(key, lam [G], z_theta [G], z_w [G])``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dpfair_jax import models as M
    from dpfair_jax import montecarlo as MC
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.fairness import evaluate

    n = train.n
    steps = epochs * math.ceil(n / batch_size)
    delta = 1.0 / n**2
    cfg = F.FermiConfig(model=M.logistic(input_dim=train.d), num_groups=train.num_groups, num_classes=2,
                        steps=steps, batch_size=batch_size, fairness="dp", delta=delta).validate(n)
    cal = [F.calibrate(cfg, n, (e, delta)) if math.isfinite(e) else F.FermiHparams() for e in EPSILONS]  # inf: no noise
    zs = [(h.noise_theta, h.noise_w) for h in cal]
    lam_g, eps_i = (a.ravel() for a in np.meshgrid(np.asarray(LAMS), np.arange(len(EPSILONS)), indexing="ij"))
    lam_a = jnp.asarray(lam_g, jnp.float32)
    zt_a = jnp.asarray([zs[i][0] for i in eps_i], jnp.float32)
    zw_a = jnp.asarray([zs[i][1] for i in eps_i], jnp.float32)
    base = F.FermiHparams(**HP)

    def one_seed(key, lam, zt, zw):
        bkey = jax.random.fold_in(key, 7)

        def point(g, lam_g, zt_g, zw_g):
            h = dataclasses.replace(base, lam=lam_g, noise_theta=zt_g, noise_w=zw_g)
            r = F.fit(jax.random.fold_in(key, g), train, h, cfg, batch_key=bkey, validate=False)
            out = evaluate(cfg.model, r.params, test, 2)
            return {"error": out["error"], "dp_violation": out["dp_violation"]}

        return jax.vmap(point)(jnp.arange(lam.shape[0]), lam, zt, zw)

    def study(key, lam, zt, zw):
        return MC.run_trials(lambda k: one_seed(k, lam, zt, zw), key, seeds, chunk_size=chunk_size)

    return jax.jit(study), (jax.random.key(0), lam_a, zt_a, zw_a), cfg


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a fraction of the grid, extrapolated (labelled)")
    ap.add_argument("--quick-seeds", type=int, default=1)
    ap.add_argument("--quick-epochs", type=int, default=2)
    ap.add_argument("--chunk-size", type=int, default=None, help="seeds evaluated at once (default: all)")
    ap.add_argument("--note", default="", help="appended to the machine line (e.g. 'shared, loaded')")
    ap.add_argument("--no-reexec", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    common.maybe_reexec()

    import jax
    import numpy as np

    from dpfair_jax import models as M

    train, test, data_name = _load_adult()
    steps_per_epoch = math.ceil(train.n / BATCH)

    def measure(seeds: int, epochs: int):
        t0 = time.perf_counter()
        program, prog_args, cfg = build(train, test, seeds=seeds, epochs=epochs, chunk_size=args.chunk_size)
        setup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled = program.lower(*prog_args).compile()
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*prog_args))
        return setup_s, compile_s, time.perf_counter() - t0, out, cfg

    full_runs = SEEDS * len(LAMS) * len(EPSILONS)
    full_steps = EPOCHS * steps_per_epoch
    if args.quick:
        # two epoch counts separate the per-step cost from per-run fixed costs (setup, evaluation)
        seeds, epochs = args.quick_seeds, args.quick_epochs
        _, _, run_a, _, cfg_a = measure(seeds, epochs)
        setup_s, compile_s, run_s, out, cfg = measure(seeds, 2 * epochs)
        epochs = 2 * epochs
        per_step = max(run_s - run_a, 0.0) / (cfg.steps - cfg_a.steps)
        fixed = max(run_a - per_step * cfg_a.steps, 0.0)
        full_run_s = (fixed + per_step * full_steps) * SEEDS / seeds
    else:
        seeds, epochs = SEEDS, EPOCHS
        setup_s, compile_s, run_s, out, cfg = measure(seeds, epochs)
        per_step = run_s / cfg.steps
        full_run_s = run_s
    runs = seeds * len(LAMS) * len(EPSILONS)
    run_steps_per_s = runs / per_step
    err = np.asarray(out["error"])
    mdesc = common.machine(args.note)
    label = "extrapolated" if args.quick else "measured"
    params = cfg.model.init(jax.random.key(0), train.d)
    fpe = M.flops_per_example(cfg.model, params)
    on_cpu = jax.default_backend() == "cpu"
    kind = jax.devices()[0].device_kind
    peak_flops, peak_bw, peak_name = datasheet_peaks("H100" if on_cpu else kind)
    roof = roofline(fpe, train.d, BATCH, EPOCHS * steps_per_epoch, full_runs,
                    peak_flops=peak_flops, bandwidth=peak_bw)
    # what this run did, by the same count: achieved rates against the peaks
    done = roofline(fpe, train.d, BATCH, cfg.steps, runs, peak_flops=peak_flops, bandwidth=peak_bw)
    extra = {"data": data_name, "n_train": train.n, "seeds_run": seeds, "epochs_run": epochs, "runs": runs,
             "steps_per_run": cfg.steps, "mode": label}
    rows = [
        common.row("fermi_grid compile", compile_s, "s", machine_desc=mdesc, **extra),
        common.row("fermi_grid host setup (calibration)", setup_s, "s", machine_desc=mdesc, **extra),
        common.row("fermi_grid run (this size)", run_s, "s", machine_desc=mdesc, **extra),
        common.row("fermi_grid run-steps/s (marginal)", run_steps_per_s, "run-steps/s", machine_desc=mdesc, **extra),
        common.row("fermi_grid examples/s", run_steps_per_s * BATCH, "examples/s", machine_desc=mdesc, **extra),
        common.row(f"fermi_grid full 15x6x5x200ep compile+run ({label})", compile_s + full_run_s, "s",
                   machine_desc=mdesc, baseline="10-minute target" if on_cpu else "15-second target (one GPU)",
                   baseline_value=600.0 if on_cpu else 15.0, target=1.0, **extra),
        common.row(f"roofline {peak_name} fp32 lower bound, full grid", roof["bound_s"], "s",
                   machine_desc="estimate", intensity=round(roof["intensity_flop_per_byte"], 3),
                   flops_per_example=fpe),
        common.row("fermi_grid time per step of all runs", per_step * 1e6, "us (sequential step latency)",
                   machine_desc=mdesc, runs_per_step=runs, **extra),
    ]
    achieved = {"flops": done["total_flops"] / run_s, "bytes_s": done["total_bytes"] / run_s}
    ceilings = {"flops": peak_flops, "bytes_s": peak_bw}
    source = f"{peak_name} datasheet"
    if not on_cpu:
        measured = measure_ceilings()
        ceilings = {"flops": measured["fp32_flops"], "bytes_s": measured["bytes_s"]}
        source = f"measured on this {kind}"
        rows += [common.row("ceiling: fp32 matmul 8192^3 (HIGHEST)", measured["fp32_flops"], "FLOP/s", machine_desc=mdesc),
                 common.row("ceiling: device copy 1 GiB (read+write)", measured["bytes_s"], "bytes/s", machine_desc=mdesc)]
    rows += [] if on_cpu else [  # the CPU has its own, much lower ceilings: not compared here
        common.row("roofline: achieved FLOP/s (analytic count)", achieved["flops"], "FLOP/s", machine_desc=mdesc,
                   baseline=f"fp32 peak ({source})", baseline_value=ceilings["flops"], higher_is_better=True,
                   **extra),
        common.row("roofline: achieved bytes/s (analytic minimum)", achieved["bytes_s"], "bytes/s",
                   machine_desc=mdesc, baseline=f"memory bandwidth ({source})",
                   baseline_value=ceilings["bytes_s"], higher_is_better=True, **extra),
    ]
    print(f"{data_name}: n={train.n}, d={train.d}; {runs} runs x {cfg.steps} steps; "
          f"mean test error over the grid {np.nanmean(err):.4f}")
    print(f"roofline (full grid): {roof}")
    common.report("fermi_grid", rows, args.out)


if __name__ == "__main__":
    main()
