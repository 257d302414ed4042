"""DP-SGD step throughput: non-private JAX, DP-SGD (vmap and ghost norms), Opacus, a per-sample loop.

Three models. Logistic regression (batch 1024) and a one-hidden-layer MLP (102-256-1, tanh, batch
256) on Adult-sized synthetic data (n = 34,000, d = 102); the kit's small CNN (``models.cnn``:
28x28x1 images, 3x3 convs with 16 and 32 channels, ReLU, 2x2 average pooling, 10 classes, batch
256) on synthetic images (n = 10,000). JAX variants run many steps inside one jitted ``lax.scan``
(the DP rows call ``dpfair_jax.algorithms.dpsgd.fit`` with its default Poisson sampling, padded to
a static maximum batch; the non-private row is the same sampled loop without clipping or noise; for
the CNN it differentiates ``ghost.cnn_forward``, ``model.apply``'s values with a convolution
gradient that XLA:CPU runs ~20x faster inside ``lax.scan`` than plain autodiff of ``apply``, see
docs/performance.md). Examples/s counts expected batch sizes: the JAX rows compute the padded
batch (e.g. 380 rows per expected 256 for the MLP and CNN), the torch rows exact batches.
``dpsgd_ghost`` is the default path (``per_example="auto"`` picks ghost norms for all three models;
the script prints what it resolves to), ``dpsgd_vmap`` forces ``vmap(grad)``;
``dpsgd_ghost_prebatched`` is the same DP step (``dpsgd.clipped_grad_sum``, Gaussian noise,
division by the batch size, SGD) on pre-batched tensors, timed the way the Opacus rows are. Shuffled epochs are
not used for the JAX rows: a permutation of n = 34,000 is a sort that costs more on XLA's CPU
backend than an epoch of logistic-regression steps.

PyTorch rows, on pre-batched tensors (no DataLoader in the timed loop), with the faster of 1 and 2
torch threads (probed first): Opacus with ``grad_sample_mode="hooks"`` and ``"ghost"`` (the same
models; ``nn.Conv2d``/``nn.AvgPool2d`` for the CNN), and ``torch_per_sample_loop``, the structure
of DP-FERMI's public implementation: for each example of the batch a forward and backward pass,
clip that example's gradient, accumulate; then Gaussian noise on the sum and an SGD step. It is
slow, so it is timed on a few batches only. Torch rows are skipped with a message when
torch/opacus are missing. On a GPU the torch rows run on the GPU too (CUDA-synchronized at the end
of each timed call), and the CNN is also timed with ``compute_dtype=bfloat16`` (``--bf16``; rows
``cnn/nonprivate_bf16``, ``cnn/dpsgd_bf16`` and their ratios to the float32 rows; bf16 DP-SGD
runs per-example gradients by ``vmap``, since the float32 ghost forward pass does not reproduce a
bf16 ``apply``; ``cnn/nonprivate_apply`` is the float32 twin of ``nonprivate_bf16``).

Targets (rows ``<model>/dpsgd_ghost_vs_<baseline>``): for every model, ghost-norm DP-SGD at
>= 0.5x the non-private JAX step, >= 10x Opacus hooks and >= 3x Opacus ghost (both with the
default training loop, which also samples and gathers its batches, and like for like with
``dpsgd_ghost_prebatched``); logistic DP-SGD at
>= 1000x the per-sample loop (the MLP's and CNN's ratios to the loop are reported without a
target). ``met`` is measured, not assumed.

Prints a table and writes JSON rows ``{name, machine, baseline, value, unit, ratio, target, met}``
to ``benchmarks/results/dpsgd_step.json`` (or ``--out``). Throughput is the best of several repeats
(examples per second), timed round-robin over all rows so that each sees the same machine load.
The script re-executes itself with ``GLIBC_TUNABLES`` set to keep glibc from returning large
buffers to the OS after every call (see notes/performance_cpu.md); ``--no-reexec`` disables that.

    python benchmarks/dpsgd_step.py [--quick] [--repeats R] [--out PATH] [--bf16]
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
N_IMAGES, IMAGE_SHAPE, CNN_CHANNELS, CNN_CLASSES = 10_000, (28, 28, 1), (16, 32), 10
CONFIGS = {
    "logistic": {"batch": 1024, "hidden": None},
    "mlp": {"batch": 256, "hidden": 256},
    "cnn": {"batch": 256, "hidden": None},
}
CLIP, SIGMA, LR = 1.0, 1.0, 0.1
TARGETS = [  # (model, variant, baseline variant, target ratio or None = reported only)
    *[(m, "dpsgd_ghost", base, t) for m in CONFIGS
      for base, t in (("nonprivate", 0.5), ("opacus_hooks", 10.0), ("opacus_ghost", 3.0))],
    # Like for like with Opacus (pre-batched tensors, no sampling or row gather in the timed loop).
    *[(m, "dpsgd_ghost_prebatched", base, t) for m in CONFIGS
      for base, t in (("opacus_hooks", 10.0), ("opacus_ghost", 3.0))],
    ("logistic", "dpsgd_ghost", "torch_per_sample_loop", 1000.0),
    ("mlp", "dpsgd_ghost", "torch_per_sample_loop", None),
    ("cnn", "dpsgd_ghost", "torch_per_sample_loop", None),
]


def _maybe_reexec(argv: list[str]) -> None:
    if "--no-reexec" in argv or os.environ.get("GLIBC_TUNABLES") == TUNABLES:
        return
    env = dict(os.environ, GLIBC_TUNABLES=TUNABLES)
    os.execve(sys.executable, [sys.executable, *argv], env)


def _machine() -> str:
    import jax

    try:
        load = f", load average {os.getloadavg()[0]:.2f} at start"
    except OSError:
        load = ""
    devs = jax.devices()
    accel = f", {len(devs)}x {devs[0].device_kind}" if jax.default_backend() != "cpu" else ""
    return (f"{platform.machine()} {os.cpu_count()} CPU ({platform.processor() or 'cpu'}){accel}, "
            f"jax {jax.__version__} {jax.default_backend()}{load}")


def _data(seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, D)).astype(np.float32)
    w = rng.normal(size=D) / np.sqrt(D)
    y = (x @ w + 0.5 * rng.normal(size=N) > 0).astype(np.int32)
    return x, y


def _image_data(seed: int = 1):
    """Synthetic images, flattened to rows ``[n, 784]`` (the ``Dataset`` layout), 10 classes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    flat = int(np.prod(IMAGE_SHAPE))
    x = rng.normal(size=(N_IMAGES, flat)).astype(np.float32)
    w = rng.normal(size=(flat, CNN_CLASSES)) / np.sqrt(flat)
    y = np.argmax(x @ w + 0.5 * rng.normal(size=(N_IMAGES, CNN_CLASSES)), axis=1).astype(np.int32)
    return x, y


def _datasets() -> dict:
    tab = _data()
    return {"logistic": tab, "mlp": tab, "cnn": _image_data()}


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
def _kit_model(name: str, compute_dtype=None):
    from dpfair_jax import models

    if name == "logistic":
        return models.logistic(), 2
    if name == "mlp":
        return models.mlp((CONFIGS[name]["hidden"],)), 2
    return models.cnn(CNN_CLASSES, channels=CNN_CHANNELS, image_shape=IMAGE_SHAPE,
                      compute_dtype=compute_dtype), CNN_CLASSES


def jax_calls(data: dict, steps_by_row: dict, bf16: bool = False) -> dict[tuple[str, str], tuple]:
    """Compiled, warmed-up JAX runs: ``{(model, variant): (call, examples per call)}``; with ``bf16``
    also the CNN with ``compute_dtype=bfloat16`` (rows ``cnn/nonprivate_bf16``, ``cnn/dpsgd_bf16``)."""
    import jax
    import jax.numpy as jnp
    import optax

    import numpy as np

    from dpfair_jax.algorithms import dpsgd
    from dpfair_jax.privacy import aggregation, sampling

    out = {}
    for name, cfg in CONFIGS.items():
        x_np, y_np = data[name]
        x, y = jnp.asarray(x_np), jnp.asarray(y_np)
        n = x.shape[0]
        bsz = cfg["batch"]
        model, num_classes = _kit_model(name)
        out_loss = dpsgd.output_loss_for(model, num_classes)
        params = model.init(jax.random.key(0), None if name == "cnn" else D)
        max_b = sampling.max_batch_size_for(n, bsz / n, 10_000)
        mode, _ = dpsgd.resolve_per_example(model, params, "auto")
        print(f"  {name}: per_example='auto' -> {mode!r} (padded Poisson batch {max_b})", flush=True)
        if name == "cnn":
            # The non-private CNN gradient goes through the ghost forward pass: model.apply's
            # values, with the conv gradient that stays fast inside lax.scan on XLA:CPU (plain
            # autodiff of apply is ~20x slower there; see ghost._conv2d_same).
            from dpfair_jax.privacy import ghost

            def forward(pp, xb, model=model):
                return ghost.cnn_forward(model, pp, xb)[0]
        else:
            forward = model.apply

        def make_nonprivate(forward):
            @functools.partial(jax.jit, static_argnums=(4,))
            def nonprivate(key, params, x, y, steps):
                # The same padded Poisson batches as the DP rows, without clipping or noise. (Closes
                # over this model's settings: compiled and warmed up in this iteration, never retraced.)
                opt = optax.sgd(LR)

                def step(carry, k):
                    p, s = carry
                    smp = sampling.poisson_sample(k, n, bsz / n, max_b)
                    xb, yb = x[smp.indices], y[smp.indices]
                    g = jax.grad(lambda pp: jnp.sum(smp.mask * out_loss(forward(pp, xb), yb)) / bsz)(p)
                    u, s = opt.update(g, s, p)
                    return (optax.apply_updates(p, u), s), None

                (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(key, steps))
                return p

            return nonprivate

        nonprivate = make_nonprivate(forward)

        def dp(mode, model=model):
            @functools.partial(jax.jit, static_argnums=(4,))
            def run(key, params, x, y, steps):
                cfg = dpsgd.DPSGDConfig(model=model, batch_size=bsz, steps=steps, sampling="poisson",
                                        max_batch_size=max_b, per_example=mode, diagnostics=False)
                hp = dpsgd.DPSGDHparams(learning_rate=LR, clip_norm=CLIP, noise_multiplier=SIGMA)
                return dpsgd.fit(key, (x, y), hp, cfg, params=params).params

            return run

        # The same DP step on pre-batched tensors, as the Opacus rows are timed: a pool of exact
        # batches cycled inside lax.scan; the kit's per-batch primitive (ghost norms), noise,
        # normalisation by the batch size and the SGD update.
        pool = min(16, n // bsz)
        perm = np.random.default_rng(0).permutation(n)[: pool * bsz].reshape(pool, bsz)
        xp, yp = x[jnp.asarray(perm)], y[jnp.asarray(perm)]

        @functools.partial(jax.jit, static_argnums=(4,))
        def prebatched(key, params, x, y, steps, xp=xp, yp=yp, model=model, num_classes=num_classes):
            opt = optax.sgd(LR)

            def step(carry, inp):
                p, s = carry
                i, k = inp
                sums, _, _ = dpsgd.clipped_grad_sum(model, p, xp[i], yp[i], clip_norm=CLIP,
                                                    num_classes=num_classes)
                g = jax.tree_util.tree_map(lambda a: a / bsz, aggregation.noisy_sum(k, sums, SIGMA * CLIP))
                u, s = opt.update(g, s, p)
                return (optax.apply_updates(p, u), s), None

            idx = jnp.arange(steps) % xp.shape[0]
            (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), (idx, jax.random.split(key, steps)))
            return p

        variants = {"nonprivate": nonprivate, "dpsgd_vmap": dp("vmap"), "dpsgd_ghost": dp("ghost"),
                    "dpsgd_ghost_prebatched": prebatched}
        params_of = {}
        if name == "cnn" and bf16:
            # Mixed precision (GPU): bf16 convolutions and matmuls, float32 parameters and loss.
            model16, _ = _kit_model(name, compute_dtype=jnp.bfloat16)
            params16 = model16.init(jax.random.key(0), None)
            mode16, _ = dpsgd.resolve_per_example(model16, params16, "auto")
            print(f"  cnn bf16: per_example='auto' -> {mode16!r}", flush=True)
            variants["nonprivate_apply"] = make_nonprivate(model.apply)  # float32, plain autodiff
            variants["nonprivate_bf16"] = make_nonprivate(model16.apply)
            variants["dpsgd_bf16"] = dp("auto", model16)
            params_of = {"nonprivate_bf16": params16, "dpsgd_bf16": params16}
        key = jax.random.key(1)
        for variant, fn in variants.items():
            steps = steps_by_row.get((name, variant), steps_by_row[(name, "nonprivate")])
            p0 = params_of.get(variant, params)
            jax.block_until_ready(fn(key, p0, x, y, steps))  # compile + warm-up
            call = functools.partial(fn, key, p0, x, y, steps)
            out[(name, variant)] = ((lambda c=call: jax.block_until_ready(c())), steps * bsz)
    return out


# ------------------------------------------------------------------------------------------------
# PyTorch: Opacus and the per-sample loop
# ------------------------------------------------------------------------------------------------
def torch_calls(data: dict, steps_by_model: dict[str, int], loop_steps: dict[str, int]) -> tuple[dict, str | None]:
    """Warmed-up torch runs ``{(model, variant): (call, examples per call)}``, or a skip message."""
    try:
        import numpy as np
        import torch
        from opacus import PrivacyEngine
        from torch import nn
    except ImportError as err:  # pragma: no cover - depends on the environment
        return {}, f"Opacus / per-sample loop rows skipped: {err} (pip install torch opacus)"
    import warnings

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    import jax

    # Torch runs where JAX runs: on the GPU when JAX's backend is one and torch sees it.
    dev = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    if dev == "cuda":
        print(f"  (torch on {torch.cuda.get_device_name(0)})", flush=True)
    else:
        # On a loaded 2-core machine torch's thread pool can collapse (2 threads ran 30x slower
        # than 1 here); probe each thread count on a few steps and time all torch rows with the
        # faster one.
        best_threads, best_time = 1, float("inf")
        for threads in sorted({1, min(2, os.cpu_count() or 1)}):
            torch.set_num_threads(threads)
            probe = _opacus_pass(torch, nn, np, PrivacyEngine, data, {"logistic": 20}, dev,
                                 only=("logistic", "hooks"))
            t = _best_time(probe[("logistic", "opacus_hooks")][0], 2)
            if t < best_time:
                best_threads, best_time = threads, t
        torch.set_num_threads(best_threads)
        print(f"  (torch threads={best_threads})", flush=True)
    out = _opacus_pass(torch, nn, np, PrivacyEngine, data, steps_by_model, dev)
    out.update(_per_sample_loop_pass(torch, nn, np, data, loop_steps, dev))
    return out, None


def _sync(torch, dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def _torch_module(nn, name: str):
    """The PyTorch twin of each kit model (same layer shapes; NCHW for the CNN)."""
    if name == "logistic":
        return nn.Linear(D, 1)
    if name == "mlp":
        h = CONFIGS[name]["hidden"]
        return nn.Sequential(nn.Linear(D, h), nn.Tanh(), nn.Linear(h, 1))
    layers, c, side = [], IMAGE_SHAPE[2], IMAGE_SHAPE[0]
    for cout in CNN_CHANNELS:
        layers += [nn.Conv2d(c, cout, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2)]
        c, side = cout, side // 2
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(c * side * side, CNN_CLASSES))


def _torch_batches(torch, np, data: dict, name: str, steps: int, dev: str = "cpu"):
    """Pre-batched ``(x, y)`` tensors (a few distinct batches, cycled) and the loss."""
    bsz = CONFIGS[name]["batch"]
    x_np, y_np = data[name]
    n = x_np.shape[0]
    xt = torch.from_numpy(x_np)
    if name == "cnn":
        xt = xt.reshape(n, *IMAGE_SHAPE).permute(0, 3, 1, 2).contiguous()  # NCHW
        yt = torch.from_numpy(y_np.astype(np.int64))
        crit = torch.nn.CrossEntropyLoss()
    else:
        yt = torch.from_numpy(y_np.astype(np.float32))[:, None]
        crit = torch.nn.BCEWithLogitsLoss()
    perm = torch.from_numpy(np.random.default_rng(0).permutation(n))
    rows = [perm[i * bsz:(i + 1) * bsz] for i in range(max(1, min(n // bsz, steps)))]
    return xt, yt, [(xt[r].contiguous().to(dev), yt[r].contiguous().to(dev)) for r in rows], crit


def _opacus_pass(torch, nn, np, PrivacyEngine, data, steps_by_model, dev="cpu", only=None) -> dict:
    out = {}
    for name, cfg in CONFIGS.items():
        if only is not None and name != only[0]:
            continue
        bsz = cfg["batch"]
        steps = steps_by_model[name]
        xt, yt, batches, crit = _torch_batches(torch, np, data, name, steps, dev)
        for mode in ("hooks", "ghost"):
            if only is not None and mode != only[1]:
                continue
            module = _torch_module(nn, name).to(dev)
            opt = torch.optim.SGD(module.parameters(), lr=LR)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt), batch_size=bsz)
            engine = PrivacyEngine()
            res = engine.make_private(module=module, optimizer=opt, data_loader=loader, criterion=crit,
                                      noise_multiplier=SIGMA, max_grad_norm=CLIP, poisson_sampling=False,
                                      grad_sample_mode=mode)
            if mode == "ghost":
                module, opt, loss_fn, _ = res
            else:
                (module, opt, _), loss_fn = res, crit
            opt.expected_batch_size = bsz  # divide by the batch size, as the JAX rows do

            def run(k, module=module, opt=opt, loss_fn=loss_fn, batches=batches):
                for i in range(k):
                    xb, yb = batches[i % len(batches)]
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(module(xb), yb)
                    loss.backward()
                    opt.step()
                _sync(torch, dev)

            run(min(3, steps))  # warm-up
            out[(name, f"opacus_{mode}")] = (functools.partial(run, steps), steps * bsz)
    return out


def _per_sample_loop_pass(torch, nn, np, data, steps_by_model, dev="cpu") -> dict:
    """DP-SGD as a Python loop over the examples of each batch (plain torch, no Opacus): forward and
    backward one example, clip its gradient to ``CLIP``, accumulate; then ``N(0, (SIGMA CLIP)^2)``
    noise on the sum, divide by the batch size and take an SGD step."""
    out = {}
    for name, cfg in CONFIGS.items():
        bsz = cfg["batch"]
        steps = steps_by_model[name]
        _, _, batches, crit = _torch_batches(torch, np, data, name, steps, dev)
        module = _torch_module(nn, name).to(dev)
        params = [p for p in module.parameters() if p.requires_grad]

        def run(k, module=module, params=params, crit=crit, batches=batches, bsz=bsz):
            for i in range(k):
                xb, yb = batches[i % len(batches)]
                sums = [torch.zeros_like(p) for p in params]
                for j in range(xb.shape[0]):
                    module.zero_grad(set_to_none=True)
                    loss = crit(module(xb[j:j + 1]), yb[j:j + 1])
                    loss.backward()
                    with torch.no_grad():
                        norm = torch.sqrt(sum(torch.sum(p.grad * p.grad) for p in params))
                        factor = torch.clamp(CLIP / (norm + 1e-12), max=1.0)
                        for s_, p in zip(sums, params):
                            s_.add_(p.grad * factor)
                with torch.no_grad():
                    for s_, p in zip(sums, params):
                        noisy = s_ + SIGMA * CLIP * torch.randn_like(s_)
                        p.add_(noisy, alpha=-LR / bsz)
            _sync(torch, dev)

        run(1)  # warm-up
        out[(name, "torch_per_sample_loop")] = (functools.partial(run, steps), steps * bsz)
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
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="also time the CNN in bfloat16 (default: on a GPU/TPU only)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    # Steps per timed call (Poisson batches, expected size = batch): ~0.05-0.5 s per call here
    # (the per-sample loop: one to a few batches, ~0.1-1 s each).
    scale = 0.2 if args.quick else 1.0
    base_steps = {("logistic", "nonprivate"): 660, ("logistic", "dpsgd_vmap"): 660,
                  ("logistic", "dpsgd_ghost"): 660, ("mlp", "nonprivate"): 400,
                  ("mlp", "dpsgd_vmap"): 40, ("mlp", "dpsgd_ghost"): 400,
                  ("cnn", "nonprivate"): 20, ("cnn", "dpsgd_vmap"): 4, ("cnn", "dpsgd_ghost"): 20,
                  ("logistic", "dpsgd_ghost_prebatched"): 660, ("mlp", "dpsgd_ghost_prebatched"): 400,
                  ("cnn", "dpsgd_ghost_prebatched"): 20}
    jax_steps = {k: max(5 if k[0] != "cnn" else 2, int(v * scale)) for k, v in base_steps.items()}
    torch_steps = ({"logistic": 40, "mlp": 10, "cnn": 2} if args.quick
                   else {"logistic": 200, "mlp": 60, "cnn": 8})
    loop_steps = {"logistic": 1, "mlp": 1, "cnn": 1} if args.quick else {"logistic": 2, "mlp": 4, "cnn": 2}

    data = _datasets()
    print(f"DP-SGD step throughput (tabular n={N}, d={D}; images n={N_IMAGES}, {IMAGE_SHAPE}; "
          f"best of {repeats}; GLIBC_TUNABLES={'set' if os.environ.get('GLIBC_TUNABLES') else 'unset'})",
          flush=True)
    import jax

    bf16 = args.bf16 if args.bf16 is not None else jax.default_backend() != "cpu"
    calls = jax_calls(data, jax_steps, bf16=bf16)
    tcalls, skipped = torch_calls(data, torch_steps, loop_steps)
    calls.update(tcalls)
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
                     "unit": "examples/s", "ratio": ratio, "target": target,
                     "met": None if target is None else bool(ratio >= target)})

    if ("cnn", "dpsgd_bf16") in values:
        for variant, base_variant in (("dpsgd_bf16", "dpsgd_ghost"), ("dpsgd_bf16", "dpsgd_vmap"),
                                      ("nonprivate_bf16", "nonprivate_apply")):
            ratio = values[("cnn", variant)] / values[("cnn", base_variant)]
            rows.append({"name": f"cnn/{variant}_vs_{base_variant}", "machine": machine,
                         "baseline": f"cnn/{base_variant}", "value": values[("cnn", variant)],
                         "unit": "examples/s", "ratio": ratio, "target": None, "met": None})
    print()
    print(f"{'name':46s} {'examples/s':>14s} {'ratio':>8s} {'target':>7s} {'met':>5s}")
    for r in rows:
        ratio = "" if r["ratio"] is None else (f"{r['ratio']:,.0f}" if r["ratio"] >= 100 else f"{r['ratio']:.3g}")
        target = "" if r["target"] is None else f">={r['target']:g}"
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        value = "" if r["value"] is None else f"{r['value']:,.0f}"
        print(f"{r['name']:46s} {value:>14s} {ratio:>8s} {target:>7s} {met:>5s}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"\nwrote {out}  ({machine})")
    return rows


if __name__ == "__main__":
    _maybe_reexec(sys.argv)
    main()
