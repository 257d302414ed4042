"""DP-SGD step throughput: non-private JAX, DP-SGD (vmap and ghost norms) and Opacus.

Adult-sized synthetic data (n = 34,000, d = 102). Two models: logistic regression (batch 1024) and
a one-hidden-layer MLP (256 tanh units, batch 256). JAX variants run many steps inside one jitted
``lax.scan`` (the DP rows call ``dpfair_jax.algorithms.dpsgd.train`` with its default Poisson
sampling, padded to a static maximum batch; the non-private row is the same sampled loop without
clipping or noise). Shuffled epochs are not used for the JAX rows: a permutation of n = 34,000 is
a sort that costs more on XLA's CPU backend than an epoch of logistic-regression steps. Opacus
runs the same models with ``grad_sample_mode="hooks"`` and ``"ghost"`` on pre-batched tensors
(no DataLoader in the timed loop), with the faster of 1 and 2 torch threads (probed first); its
rows are skipped with a message when torch/opacus are missing.

Prints a table and writes JSON rows ``{name, machine, baseline, value, unit, ratio, target, met}``
to ``benchmarks/results/dpsgd_step.json``. Throughput is the best of several repeats (examples per
second), timed round-robin over all rows so that each sees the same machine load. The script re-executes itself with ``GLIBC_TUNABLES`` set to keep glibc from returning
large buffers to the OS after every call (see notes/performance_cpu.md); ``--no-reexec`` disables
that.

    python benchmarks/dpsgd_step.py [--quick] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path

TUNABLES = "glibc.malloc.mmap_threshold=2147483647:glibc.malloc.trim_threshold=4294967295"

N, D = 34_000, 102
CONFIGS = {"logistic": {"batch": 1024, "hidden": None}, "mlp": {"batch": 256, "hidden": 256}}
CLIP, SIGMA, LR = 1.0, 1.0, 0.1
TARGETS = [  # (model, variant, baseline variant, target ratio)
    ("logistic", "dpsgd_ghost", "nonprivate", 0.5),
    ("logistic", "dpsgd_ghost", "opacus_hooks", 10.0),
    ("logistic", "dpsgd_ghost", "opacus_ghost", 3.0),
]


def _maybe_reexec(argv: list[str]) -> None:
    if "--no-reexec" in argv or os.environ.get("GLIBC_TUNABLES") == TUNABLES:
        return
    env = dict(os.environ, GLIBC_TUNABLES=TUNABLES)
    os.execve(sys.executable, [sys.executable, *argv], env)


def _machine() -> str:
    import jax

    return (f"{platform.machine()} {os.cpu_count()} CPU ({platform.processor() or 'cpu'}), "
            f"jax {jax.__version__} {jax.default_backend()}, shared with other jobs")


def _data(seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, D)).astype(np.float32)
    w = rng.normal(size=D) / np.sqrt(D)
    y = (x @ w + 0.5 * rng.normal(size=N) > 0).astype(np.int32)
    return x, y


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ------------------------------------------------------------------------------------------------
# JAX
# ------------------------------------------------------------------------------------------------
def jax_calls(x_np, y_np, steps_by_row: dict) -> dict[tuple[str, str], tuple]:
    """Compiled, warmed-up JAX runs: ``{(model, variant): (call, examples per call)}``."""
    import jax
    import jax.numpy as jnp
    import optax

    from dpfair_jax import models
    from dpfair_jax.algorithms import dpsgd
    from dpfair_jax.privacy import sampling

    x = jnp.asarray(x_np)
    y = jnp.asarray(y_np)
    out = {}
    for name, cfg in CONFIGS.items():
        bsz = cfg["batch"]
        model = models.logistic() if cfg["hidden"] is None else models.mlp((cfg["hidden"],))
        out_loss = dpsgd.output_loss_for(model, 2)
        params = model.init(jax.random.key(0), D)
        max_b = sampling.max_batch_size_for(N, bsz / N, 10_000)

        @functools.partial(jax.jit, static_argnums=(4,))
        def nonprivate(key, params, x, y, steps):
            # The same padded Poisson batches as the DP rows, without clipping or noise.
            opt = optax.sgd(LR)

            def step(carry, k):
                p, s = carry
                smp = sampling.poisson_sample(k, N, bsz / N, max_b)
                xb, yb = x[smp.indices], y[smp.indices]
                g = jax.grad(lambda pp: jnp.sum(smp.mask * out_loss(model.apply(pp, xb), yb)) / bsz)(p)
                u, s = opt.update(g, s, p)
                return (optax.apply_updates(p, u), s), None

            (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(key, steps))
            return p

        def dp(mode):
            @functools.partial(jax.jit, static_argnums=(4,))
            def run(key, params, x, y, steps):
                p, _ = dpsgd.train(key, model, params, (x, y), clip_norm=CLIP, noise_multiplier=SIGMA,
                                   learning_rate=LR, batch_size=bsz, steps=steps, sampling="poisson",
                                   max_batch_size=max_b, per_example=mode, diagnostics=False)
                return p

            return run

        variants = {"nonprivate": nonprivate, "dpsgd_vmap": dp("vmap"), "dpsgd_ghost": dp("ghost")}
        key = jax.random.key(1)
        for variant, fn in variants.items():
            steps = steps_by_row[(name, variant)]
            jax.block_until_ready(fn(key, params, x, y, steps))  # compile + warm-up
            call = functools.partial(fn, key, params, x, y, steps)
            out[(name, variant)] = ((lambda c=call: jax.block_until_ready(c())), steps * bsz)
    return out


# ------------------------------------------------------------------------------------------------
# Opacus
# ------------------------------------------------------------------------------------------------
def opacus_calls(x_np, y_np, steps_by_model: dict[str, int]) -> tuple[dict, str | None]:
    """Warmed-up Opacus runs ``{(model, variant): (call, examples per call)}``, or a skip message."""
    try:
        import numpy as np
        import torch
        from opacus import PrivacyEngine
        from torch import nn
    except ImportError as err:  # pragma: no cover - depends on the environment
        return {}, f"Opacus rows skipped: {err} (pip install torch opacus)"
    import warnings

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    # On a loaded 2-core machine torch's thread pool can collapse (2 threads ran 30x slower than 1
    # here); probe each thread count on a few steps and time Opacus with its faster setting.
    best_threads, best_time = 1, float("inf")
    for threads in sorted({1, min(2, os.cpu_count() or 1)}):
        torch.set_num_threads(threads)
        probe = _opacus_pass(torch, nn, np, PrivacyEngine, x_np, y_np, {"logistic": 20}, only=("logistic", "hooks"))
        t = _best_time(probe[("logistic", "opacus_hooks")][0], 2)
        if t < best_time:
            best_threads, best_time = threads, t
    torch.set_num_threads(best_threads)
    print(f"  (Opacus with torch threads={best_threads})", flush=True)
    return _opacus_pass(torch, nn, np, PrivacyEngine, x_np, y_np, steps_by_model), None


def _opacus_pass(torch, nn, np, PrivacyEngine, x_np, y_np, steps_by_model, only=None) -> dict:
    out = {}
    for name, cfg in CONFIGS.items():
        if only is not None and name != only[0]:
            continue
        bsz = cfg["batch"]
        steps = steps_by_model[name]
        rng = np.random.default_rng(0)
        xt = torch.from_numpy(x_np)
        yt = torch.from_numpy(y_np.astype(np.float32))[:, None]
        perm = torch.from_numpy(rng.permutation(N))
        spe = N // bsz
        rows = [perm[i * bsz:(i + 1) * bsz] for i in range(max(1, min(spe, steps)))]
        batches = [(xt[r].contiguous(), yt[r].contiguous()) for r in rows]
        for mode in ("hooks", "ghost"):
            if only is not None and mode != only[1]:
                continue
            if cfg["hidden"] is None:
                module = nn.Linear(D, 1)
            else:
                module = nn.Sequential(nn.Linear(D, cfg["hidden"]), nn.Tanh(), nn.Linear(cfg["hidden"], 1))
            opt = torch.optim.SGD(module.parameters(), lr=LR)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt), batch_size=bsz)
            engine = PrivacyEngine()
            crit = nn.BCEWithLogitsLoss()
            res = engine.make_private(module=module, optimizer=opt, data_loader=loader, criterion=crit,
                                      noise_multiplier=SIGMA, max_grad_norm=CLIP, poisson_sampling=False,
                                      grad_sample_mode=mode)
            if mode == "ghost":
                module, opt, crit, _ = res
            else:
                module, opt, _ = res
            opt.expected_batch_size = bsz  # divide by the batch size, as the JAX rows do

            def run(k):
                for i in range(k):
                    xb, yb = batches[i % len(batches)]
                    opt.zero_grad(set_to_none=True)
                    loss = crit(module(xb), yb)
                    loss.backward()
                    opt.step()

            run(min(3, steps))  # warm-up
            out[(name, f"opacus_{mode}")] = (functools.partial(run, steps), steps * bsz)
    return out


def time_round_robin(calls: dict, repeats: int) -> dict[tuple[str, str], float]:
    """Best examples/s of each call over ``repeats`` rounds; each round times every call once, so
    all rows (JAX and Opacus) are measured across the same spells of machine load."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for key, (call, _) in calls.items():
            best[key] = min(best[key], _best_time(call, 1))
    return {key: calls[key][1] / best[key] for key in calls}


# ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (fewer steps and repeats)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per row (best is kept)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "dpsgd_step.json"))
    parser.add_argument("--no-reexec", action="store_true", help="do not re-exec with GLIBC_TUNABLES")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    # Steps per timed call (Poisson batches, expected size = batch): ~0.05-0.5 s per call here.
    scale = 0.2 if args.quick else 1.0
    base_steps = {("logistic", "nonprivate"): 660, ("logistic", "dpsgd_vmap"): 660,
                  ("logistic", "dpsgd_ghost"): 660, ("mlp", "nonprivate"): 400,
                  ("mlp", "dpsgd_vmap"): 40, ("mlp", "dpsgd_ghost"): 400}
    jax_steps = {k: max(5, int(v * scale)) for k, v in base_steps.items()}
    torch_steps = {"logistic": 40 if args.quick else 200, "mlp": 10 if args.quick else 60}

    x, y = _data()
    print(f"DP-SGD step throughput (n={N}, d={D}; best of {repeats}; "
          f"GLIBC_TUNABLES={'set' if os.environ.get('GLIBC_TUNABLES') else 'unset'})", flush=True)
    calls = jax_calls(x, y, jax_steps)
    opx, skipped = opacus_calls(x, y, torch_steps)
    calls.update(opx)
    if skipped:
        print(skipped)
    values = time_round_robin(calls, repeats)

    machine = _machine()
    rows = []
    for (model, variant), val in values.items():
        base = None if variant == "nonprivate" else (model, "nonprivate")
        ratio = None if base is None or base not in values else val / values[base]
        rows.append({"name": f"{model}/{variant}", "machine": machine,
                     "baseline": None if base is None else f"{base[0]}/{base[1]}", "value": val,
                     "unit": "examples/s", "ratio": ratio, "target": None, "met": None})
    for model, variant, base_variant, target in TARGETS:
        if (model, variant) not in values or (model, base_variant) not in values:
            rows.append({"name": f"{model}/{variant}_vs_{base_variant}", "machine": machine,
                         "baseline": f"{model}/{base_variant}", "value": values.get((model, variant)),
                         "unit": "examples/s", "ratio": None, "target": target, "met": None})
            continue
        ratio = values[(model, variant)] / values[(model, base_variant)]
        rows.append({"name": f"{model}/{variant}_vs_{base_variant}", "machine": machine,
                     "baseline": f"{model}/{base_variant}", "value": values[(model, variant)],
                     "unit": "examples/s", "ratio": ratio, "target": target, "met": bool(ratio >= target)})

    print()
    print(f"{'name':40s} {'examples/s':>14s} {'ratio':>8s} {'target':>7s} {'met':>5s}")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        target = "" if r["target"] is None else f">={r['target']:g}"
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        value = "" if r["value"] is None else f"{r['value']:,.0f}"
        print(f"{r['name']:40s} {value:>14s} {ratio:>8s} {target:>7s} {met:>5s}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"\nwrote {out}  ({machine})")
    return rows


if __name__ == "__main__":
    _maybe_reexec(sys.argv)
    main()
