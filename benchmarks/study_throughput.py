"""Throughput of the public tradeoff study: trained models per second, and compile time's share.

One model = one method, epsilon, lambda, replicate (split) and candidate at the study's epochs: the
unit of work of :func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study`, which runs all of them
as one compiled ``vmap`` per algorithm. The study runs with ``selection="nonprivate"`` so that every
candidate of every grid is trained and the model count is public (``rows x grid size``); the private
selection trains a random subset of the same program's slots.

Rows:

* ``study_models_per_s``: models / wall seconds of the whole study call (data splits, calibration,
  compile, run, evaluation, selection), first call in the process; ``compile_share``: the backend
  compile seconds (``compile_cache.track_compiles``) over that wall time;
* ``loop_models_per_s`` (the baseline): the same training (DP-FERMI, the same data size, steps and
  batch) one model per call of the public ``fermi.fit`` jitted once, in a Python loop, compile
  excluded and no evaluation; the study row's ratio is its rate over this one;
* ``study_models_per_s_after_compile``: the study's rate with the compile seconds taken out (the
  study also evaluates every model on validation and test splits, which the loop does not).

Sizes: ``--quick`` is a scaled CPU size (3,000 synthetic rows with Adult's 102 features, 2 lambdas,
2 epsilons, 2 replicates, 2 epochs); the default is paper 004's full Adult size (45,222 rows, 8
lambdas, 4 epsilons + inf, 8 replicates, 200 epochs: a GPU run). The issue's GPU goal is the full
paper-004 study in under 10 minutes on one H100 with compile under a quarter of the time.

Run: ``python benchmarks/study_throughput.py [--quick]``; writes ``benchmarks/results/study_throughput.json``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

FULL = {"n": 45_222, "d": 102, "lams": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0),
        "epsilons": (0.5, 1.0, 3.0, 9.0, math.inf), "replicates": 8, "epochs": 200, "batch_size": 1024}
QUICK = {"n": 3_000, "d": 102, "lams": (1.0, 8.0), "epsilons": (1.0, math.inf), "replicates": 2, "epochs": 2,
         "batch_size": 256}


def synthetic_adult_like(n: int, d: int, seed: int = 0):
    """A non-separable binary task with a binary group correlated with the label (Adult's shape)."""
    import numpy as np

    from dpfair_jax.data import make_dataset

    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.33).astype("int32")
    x = rng.normal(size=(n, d)).astype("float32")
    x[:, 0] += 0.8 * s
    logit = 1.5 * x[:, 0] - 1.0 * x[:, 1] + 0.5 * x[:, 2] - 1.0 + rng.logistic(size=n)
    y = (logit > 0).astype("int32")
    return make_dataset(x, y, s, num_groups=2, num_classes=2)


def count_models(study) -> int:
    """Trained models of a non-private-selection study: each row's search trains its whole grid."""
    sizes = study.info["grid_sizes"]
    per_method = study.table.groupby("method").size()
    return int(sum(int(rows) * int(sizes[m]) for m, rows in per_method.items()))


def time_study(data, size: dict) -> dict:
    from dpfair_jax import compile_cache
    from dpfair_jax.studies.tradeoff import tradeoff_frontier_study

    t0 = time.perf_counter()
    with compile_cache.track_compiles() as stats:
        study = tradeoff_frontier_study(
            data, fairness="dp", lams=size["lams"], epsilons=size["epsilons"], replicates=size["replicates"],
            epochs=size["epochs"], batch_size=size["batch_size"], selection="nonprivate", seed=0)
    wall = time.perf_counter() - t0
    models = count_models(study)
    return {"wall_s": wall, "models": models, "compile_s": stats.compile_seconds,
            "n_train": study.info["n_train"], "steps": study.info["steps"]}


def time_loop(data, size: dict, n_train: int, steps: int, calls: int) -> dict:
    """DP-FERMI trained one model per call of the jitted public ``fit`` (compile excluded)."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax import models as M
    from dpfair_jax.algorithms import fermi

    train = data.take(jnp.arange(n_train)) if hasattr(data, "take") else data
    cfg = fermi.FermiConfig(model=M.logistic(input_dim=data.x.shape[1]), num_groups=2, steps=steps,
                            batch_size=size["batch_size"], delta=1.0 / n_train**2)
    fit = jax.jit(lambda key, lam, z: fermi.fit(key, train, fermi.FermiHparams(lam=lam, noise_theta=z,
                                                                              noise_w=4.0 * z), cfg).params)
    common.block(fit(jax.random.key(0), 1.0, 1.0))  # compile
    t0 = time.perf_counter()
    for i in range(calls):
        common.block(fit(jax.random.key(i + 1), float(1 + i % 3), 1.0))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "models": calls}


def main(argv=None) -> int:
    common.maybe_reexec(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="scaled CPU size")
    parser.add_argument("--loop-calls", type=int, default=None, help="models of the loop baseline")
    parser.add_argument("--no-reexec", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    load = common.load_at_start()
    data = synthetic_adult_like(size["n"], size["d"])
    study = time_study(data, size)
    loop = time_loop(data, size, study["n_train"], study["steps"], args.loop_calls or (8 if args.quick else 4))
    desc = common.machine(f"load at start {load}")
    study_rate = study["models"] / study["wall_s"]
    loop_rate = loop["models"] / loop["wall_s"]
    label = "quick (scaled CPU size)" if args.quick else "paper 004 full Adult size"
    rows = [
        common.row("loop_models_per_s", loop_rate, "models/s", machine_desc=desc, size=label,
                   models=loop["models"], wall_s=loop["wall_s"]),
        common.row("study_models_per_s", study_rate, "models/s", machine_desc=desc, baseline="loop_models_per_s",
                   baseline_value=loop_rate, higher_is_better=True, target=1.0, size=label, models=study["models"],
                   wall_s=study["wall_s"], compile_s=study["compile_s"],
                   compile_share=study["compile_s"] / study["wall_s"], steps=study["steps"],
                   load_at_start=load),
    ]
    run_s = max(study["wall_s"] - study["compile_s"], 1e-9)
    rows.append(common.row("study_models_per_s_after_compile", study["models"] / run_s, "models/s",
                           machine_desc=desc, baseline="loop_models_per_s", baseline_value=loop_rate,
                           higher_is_better=True, size=label, models=study["models"], wall_s=run_s))
    if not args.quick:  # the GPU goal: the full study in under 10 minutes, compile under a quarter
        rows.append(common.row("full_study_minutes", study["wall_s"] / 60.0, "min", machine_desc=desc,
                               baseline="goal_10_min", baseline_value=10.0, target=1.0, size=label,
                               compile_share=study["compile_s"] / study["wall_s"]))
    common.report("study_throughput", rows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
