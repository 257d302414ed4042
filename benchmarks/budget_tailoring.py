"""Benchmark: paper 000's two-group study (DPSE vs DPNoSE) as one program vs loops.

The study of Figs. 2/4/6: for each majority/minority ratio (5x, 20x, 50x, 100x; minority 100
rows), 6 slope pairs x 20 budgets (+ the rho = inf column) x 1000 trials, each trial drawing fresh
data and running 5 methods (DPSE, DPNoSE pooled, equal split, and the two fairness variants) for
T = 50 full-batch clipped noisy gradient steps. Implementations (float32, same algorithm):

(a) ``studies.allocation.two_group_study``: one jitted program per ratio (``montecarlo.run_trials``: chunks
    of trials by ``lax.map`` of ``vmap``; budgets and methods vmapped inside the trial). A trial's
    data are shared by its budgets and methods, so the exact clipped-sum table
    (``budget_tailoring.prepare``) is built once per trial and every descent step is a binary
    search instead of a pass over the examples;
(b) a Python loop over a jitted single grid point (one trial at one budget: fresh data, all
    5 methods), the way a study is often scripted around a jitted function (the paper's
    structure: every grid point and trial run on its own). Both ways of computing the clipped
    sums are timed (``direct`` is faster for a single budget) and the faster is the baseline;
(b') a Python loop over a jitted single trial (one key: fresh data and all budgets of the
    scenario inside one call), i.e. the program without the batching over trials. Its ratio
    shows what batching trials adds on this machine;
(c) plain NumPy, a loop over trials, budgets, methods and steps with vectorized per-step
    arithmetic over the examples (the structure of the paper's NumPy implementation).

(b), (b') and (c) are timed on a subset of grid points (trials) and extrapolated linearly to the
full study (the ``unit`` column says so); (a) is timed on ``--trials`` trials per ratio and
extrapolated to 1000 when fewer. Compile time of (a) is reported apart. Targets (from the issue):
(a) >= 20x faster than the loop of jitted runs and >= 100x faster than NumPy.

    python benchmarks/budget_tailoring.py [--quick] [--ratios 20 100] [--trials 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGETS = {"loop": 20.0, "numpy": 100.0}


def numpy_point(rng, sizes, slopes, sd, rho, s):
    """All 5 methods at one grid point in NumPy: fresh data, then T steps per method."""
    import numpy as np

    n1, n2 = sizes
    n = n1 + n2
    grp = np.r_[np.zeros(n1, int), np.ones(n2, int)]
    x = rng.standard_normal(n)
    y = x * np.asarray(slopes)[grp] + sd * rng.standard_normal(n)
    nk = np.array([n1, n2], float)
    clip, steps, lr, box, tau_f = s["clip"], s["steps"], s["learning_rate"], s["box"], s["tau_fraction"]

    def stage1(tau):
        tau_k = tau / 3.0
        xa = x / np.maximum(1.0, np.abs(x) / s["stats_bound_x"])
        yc = np.clip(y, -s["stats_bound_y"], s["stats_bound_y"])
        xtx = xa @ xa + s["stats_bound_x"] ** 2 / np.sqrt(tau_k) * rng.standard_normal()
        xty = xa @ yc + s["stats_bound_x"] * s["stats_bound_y"] / np.sqrt(tau_k) * rng.standard_normal()
        if xtx <= 0:
            return np.full(2, 2 ** -0.5)
        beta = xty / xtx
        r2 = np.minimum((y - beta * x) ** 2, clip**2)
        ssum = np.bincount(grp, weights=r2, minlength=2) + clip**2 / np.sqrt(2 * tau_k) * rng.standard_normal(2)
        if np.any(ssum <= 0):
            return np.full(2, 2 ** -0.5)
        se = np.sqrt(ssum / nk)
        return se / np.linalg.norm(se)

    def descent(se, mu, pooled, fair):
        theta = 0.0
        for _ in range(steps):
            r = theta * x - y
            dl = 2 * r
            u = dl / np.maximum(1.0, np.abs(dl) * np.abs(x) / clip)
            g = np.bincount(grp, weights=u * x, minlength=2)
            if pooled:
                grad = (g.sum() + clip * np.sqrt(steps / (2 * mu)) * rng.standard_normal()) / n
            else:
                share = mu * se**2 / steps / (2 if fair else 1)
                m1 = (g + clip / np.sqrt(2 * share) * rng.standard_normal(2)) / nk
                if fair:
                    lsum = np.bincount(grp, weights=np.minimum(r * r, clip**2), minlength=2)
                    m2 = (lsum + clip**2 / np.sqrt(2 * share) * rng.standard_normal(2)) / nk
                    w = 1.0 + s["fairness_weight"] * (np.max(m2 - s["thresholds"]) >= 0) * (
                        np.arange(2) == np.argmax(m2 - s["thresholds"]))
                    grad = m1 @ w
                else:
                    grad = m1.sum()
            theta = float(np.clip(theta - lr * grad, -box, box))
        return theta

    eq = np.full(2, 2 ** -0.5)
    se = stage1(tau_f * rho)
    out = [descent(se, (1 - tau_f) * rho, False, False), descent(eq, rho, True, False),
           descent(eq, rho, False, False)]
    se2 = stage1(tau_f * rho)
    out += [descent(se2, (1 - tau_f) * rho, False, True), descent(eq, rho, False, True)]
    return out


def _loop_seconds(fn, calls) -> float:
    """Best of 2 timed Python loops calling the jitted ``fn`` on each argument tuple (after a
    compile-and-warm-up call)."""
    common.block(fn(*calls[0]))

    def loop():
        out = None
        for args in calls:
            out = fn(*args)
        return common.block(out)

    return common.timed(loop, repeats=2).best_s


def main(argv=None) -> None:
    common.maybe_reexec()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ratios", type=int, nargs="+", default=None)
    ap.add_argument("--trials", type=int, default=None, help="trials per ratio timed for (a)")
    ap.add_argument("--chunk-size", type=int, default=None,
                    help="trials per vmapped chunk in (a) (default: allocation.trial_chunk_size)")
    ap.add_argument("--loop-points", type=int, default=None)
    ap.add_argument("--loop-trials", type=int, default=None)
    ap.add_argument("--numpy-points", type=int, default=None)
    ap.add_argument("--note", default="", help="machine note written into every row")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-reexec", action="store_true")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    from dpfair_jax.runner import registry
    from dpfair_jax.studies import allocation as p

    # the paper's full grid, from the study's config; the timed functions are the library's
    registry.load_study(Path(__file__).resolve().parents[1] / "experiments" / "paper_000")
    settings = dict(registry.get("paper_000").configs["full"])
    ratios = args.ratios or ([20, 100] if args.quick else [5, 20, 50, 100])
    trials = args.trials or (16 if args.quick else 100)
    loop_points = args.loop_points or (42 if args.quick else 210)
    loop_trials = args.loop_trials or (6 if args.quick else 24)
    numpy_points = args.numpy_points or (2 if args.quick else 10)
    full_trials = 1000
    slopes = settings["slope_pairs"]
    eps = np.r_[np.asarray(settings["epsilons"]), np.inf]
    rhos = eps**2 / 2
    rhos32 = jnp.asarray(rhos, jnp.float32)
    points_per_ratio = len(slopes) * len(rhos) * full_trials  # grid points x trials
    trials_per_ratio = len(slopes) * full_trials
    machine = common.machine(args.note)
    rows = []
    tot = {"jax": 0.0, "loop": 0.0, "loop_trials": 0.0, "numpy": 0.0}
    for ratio in ratios:
        sizes = (ratio * settings["minority"], settings["minority"])
        key = jax.random.key(ratio)
        chunk = args.chunk_size or p.trial_chunk_size(sum(sizes), settings["chunk_size"])

        def study():
            return p.two_group_study(key, slopes, [1.0] * len(slopes), rhos, sizes=sizes,
                                     settings=settings, num_trials=trials, chunk_size=chunk)

        t0 = time.perf_counter()
        study()
        first = time.perf_counter() - t0
        tm = common.timed(study, repeats=2, warmup=False)
        jax_s = tm.best_s * full_trials / trials
        tot["jax"] += jax_s
        unit_a = "s per ratio" + (f" (timed {trials} trials, x{full_trials // trials})"
                                  if trials < full_trials else "")
        rows.append(common.row(f"jax_program_{ratio}x", jax_s, unit_a, machine_desc=machine,
                               compile_s=round(first - tm.best_s, 2), chunk_size=chunk))

        def vs(baseline: str, value: float, target: float) -> None:
            rows.append(common.row(f"jax_program_{ratio}x", jax_s, unit_a, machine_desc=machine,
                                   baseline=baseline, baseline_value=value, target=target))

        # (b) loop over jitted single grid points, both clipped-sum modes; the faster is the baseline
        pts = [(jax.random.fold_in(key, i), jnp.asarray(slopes[i % len(slopes)], jnp.float32),
                jnp.float32(rhos[i % (len(rhos) - 1)])) for i in range(loop_points)]
        loop_modes = {}
        for mode in ("direct", "table"):
            st_mode = dict(settings, clipped_sums=mode)
            single = jax.jit(lambda k, b, r, st_mode=st_mode: p.two_group_trial(
                k, b, 1.0, r[None], sizes=sizes, settings=st_mode))
            loop_modes[mode] = _loop_seconds(single, pts) * points_per_ratio / loop_points
            rows.append(common.row(f"jax_loop_jitted_points_{mode}_{ratio}x", loop_modes[mode],
                                   f"s per ratio (timed {loop_points} points, extrapolated)",
                                   machine_desc=machine))
        best_mode = min(loop_modes, key=loop_modes.get)
        loop_s = loop_modes[best_mode]
        tot["loop"] += loop_s
        vs(f"jax_loop_jitted_points_{best_mode}_{ratio}x", loop_s, TARGETS["loop"])

        # (b') loop over jitted single trials (all budgets of a scenario in one call)
        single_trial = jax.jit(lambda k, b: p.two_group_trial(k, b, 1.0, rhos32, sizes=sizes,
                                                              settings=settings))
        tks = [(jax.random.fold_in(key, 10_000 + i), jnp.asarray(slopes[i % len(slopes)], jnp.float32))
               for i in range(loop_trials)]
        lt_s = _loop_seconds(single_trial, tks) * trials_per_ratio / loop_trials
        tot["loop_trials"] += lt_s
        rows.append(common.row(f"jax_loop_jitted_trials_{ratio}x", lt_s,
                               f"s per ratio (timed {loop_trials} trials, extrapolated)",
                               machine_desc=machine))
        vs(f"jax_loop_jitted_trials_{ratio}x", lt_s, TARGETS["loop"])

        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        for i in range(numpy_points):
            numpy_point(rng, sizes, slopes[i % len(slopes)], 1.0, float(rhos[i % (len(rhos) - 1)]),
                        settings)
        np_s = (time.perf_counter() - t0) * points_per_ratio / numpy_points
        tot["numpy"] += np_s
        rows.append(common.row(f"numpy_loop_{ratio}x", np_s,
                               f"s per ratio (timed {numpy_points} points, extrapolated)",
                               machine_desc=machine))
        vs(f"numpy_loop_{ratio}x", np_s, TARGETS["numpy"])
        print(f"{ratio}x: program {jax_s:.1f} s, point loop {loop_s:.1f} s ({best_mode}), "
              f"trial loop {lt_s:.1f} s, numpy {np_s:.0f} s", flush=True)
    label = "+".join(f"{r}x" for r in ratios)
    unit_t = "s, study over these ratios (extrapolated)"
    for base, key_ in (("jax_loop_jitted_points", "loop"), ("jax_loop_jitted_trials", "loop_trials"),
                       ("numpy_loop", "numpy")):
        rows.append(common.row(f"jax_program_{label}", tot["jax"], unit_t, machine_desc=machine,
                               baseline=f"{base}_{label}", baseline_value=tot[key_],
                               target=TARGETS["numpy" if key_ == "numpy" else "loop"]))
    try:
        import os

        for r in rows[-3:]:
            r["load_1min"] = os.getloadavg()[0]
    except OSError:
        pass
    common.report("budget_tailoring", rows, args.out)


if __name__ == "__main__":
    main()
