"""jax-privacy as a measured baseline: one DP-SGD step in each framework, timed interleaved.

The three models and data of ``dpsgd_step.py`` (logistic regression, batch 1024, and the MLP
102-256-1, batch 256, on Adult-sized synthetic data; the kit's small CNN, batch 256, on synthetic
28x28x1 images), the same clip norm, noise multiplier and learning rate. For each model the same
Poisson batches are drawn once, on the host, by jax-privacy's ``batch_selection``
(``CyclicPoissonSampling`` with rate ``q = batch / n``, truncated at the kit's static maximum batch
``sampling.max_batch_size_for``) and padded to that fixed size with ``-1`` indices
(``split_and_pad_global_batch``), as jax-privacy recommends for compiled steps; padding rows
gather row 0 and are marked as padding. Every row runs the same steps in one jitted ``lax.scan``
over those index batches (gather, gradient, update), and differs only in the gradient:

* ``jax_privacy``: ``jax_privacy.clipped_grad`` (per-example gradients by ``vmap``, clipped and
  summed, padding rows zeroed with ``is_padding_example``), Gaussian noise by
  ``noise_addition.gaussian_privatizer`` with std ``noise_multiplier * sensitivity``, division by
  the expected batch size, ``optax.sgd``; ``jax_privacy_mb``: the same with jax-privacy's
  microbatching (``microbatch_size=--microbatch``, 32 by default: ``vmap`` over 32 examples at a
  time inside a sequential loop, which bounds the per-example gradients held at once; the padded
  batch size is rounded up to a multiple of it for all rows). The target row compares the kit
  with the faster of the two (its ``baseline`` names which);
* ``kit_mb``: the kit's clipped sum over chunks of the same microbatch size, accumulated in a
  sequential ``lax.scan`` (jax-privacy's microbatching applied to the ghost path; reported, not
  the target row);
* ``kit``: ``dpfair_jax.algorithms.dpsgd.clipped_grad_sum`` (the default ``per_example="auto"``
  path: ghost norms for all three models) with the padding mask, ``aggregation.noisy_sum``, the
  same division and update;
* ``nonprivate``: ``jax.grad`` of the masked mean loss, no clipping or noise: the ceiling of both
  (jax-privacy has no non-private step of its own; its models are plain JAX, so this is its
  non-private step too).

All rows use the same forward pass (``model.apply``; for the CNN ``ghost.cnn_forward``, the same
values with the convolution gradient that XLA:CPU runs fast inside ``lax.scan``, see
``dpsgd_step.py``), so the comparison is of the private gradient alone.

Timing (``common.interleaved``): after compilation and a warm-up, rounds of all rows (nonprivate,
kit, jax-privacy, then the microbatched jax-privacy and the chunked kit), each call repeated within a repetition so that it lasts >= ``--min-rep-s`` (0.2 s),
``--repeats`` rounds (at least 5). Each ratio is the median over rounds of the ratio taken within
the round, with its min-max and quartiles; the load average at start is in every row.

Targets (``<model>/kit_vs_jax_privacy``): >= 1.5x on the MLP and CNN (ghost norms against
per-example gradients), >= 1.0x (parity) on logistic. Where jax-privacy is itself within 10% of
the ceiling (and not above it), the target is stated against the ceiling instead: ``<model>/kit_vs_nonprivate`` then
carries the target (the kit at >= 0.9x its non-private step).

Accounting: for a few (q, z, T, delta), epsilon by the kit (``privacy.accounting.dpsgd_epsilon``,
RDP and PLD) and by jax-privacy's ``DpsgdTrainingAccountant`` (its RDP order grid, dp-accounting's
order grid, its PLD), with the differences. Same method and same orders agree to 1e-6 (asserted);
RDP with jax-privacy's default orders differs (another grid: the minimum over orders is taken over
different points), see ``docs/performance.md``.

Skips with a message (exit 0, no rows) when ``jax_privacy`` is not installed (``pip install
jax-privacy``, in the ``bench`` extra).

    python benchmarks/jax_privacy_baseline.py [--quick] [--repeats R] [--min-rep-s S] [--out PATH]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import dpsgd_step as ds  # noqa: E402  (models, data and DP settings shared with dpsgd_step.py)

CEILING_FRACTION = 0.9  # jax-privacy at >= this fraction of the ceiling: parity is stated against it
TARGETS = {"logistic": 1.0, "mlp": 1.5, "cnn": 1.5}
# (n, expected batch, noise multiplier, steps, delta): q = batch / n
ACCOUNTING_EVENTS = [
    (34_000, 1024, 1.0, 1_000, 1e-5),
    (34_000, 256, 0.8, 5_000, 1e-5),
    (60_000, 256, 1.1, 10_000, 1e-5),
    (10_000, 100, 2.0, 2_000, 1e-6),
]


def jax_privacy_missing() -> str | None:
    """``None`` when jax-privacy imports, else the reason it does not."""
    try:
        import jax_privacy  # noqa: F401
        from jax_privacy import batch_selection, noise_addition  # noqa: F401
    except ImportError as err:
        return f"jax_privacy_baseline skipped: {err} (pip install jax-privacy, or the bench extra)"
    return None


# ------------------------------------------------------------------------------------------------
# Batches: jax-privacy's batch selection, padded to a fixed size
# ------------------------------------------------------------------------------------------------
def poisson_index_batches(n: int, batch: int, max_batch: int, steps: int, seed: int = 0):
    """``[steps, max_batch]`` int32 indices from ``CyclicPoissonSampling`` (rate ``batch / n``,
    truncated at ``max_batch``), each batch padded with ``-1`` by ``split_and_pad_global_batch``."""
    import numpy as np
    from jax_privacy import batch_selection

    strategy = batch_selection.CyclicPoissonSampling(sampling_prob=batch / n, iterations=steps,
                                                     truncated_batch_size=max_batch)
    out = np.full((steps, max_batch), -1, dtype=np.int32)
    for t, idx in enumerate(strategy.batch_iterator(n, rng=seed)):
        (padded,) = batch_selection.split_and_pad_global_batch(np.asarray(idx), minibatch_size=max_batch)
        out[t] = padded
    return out


# ------------------------------------------------------------------------------------------------
# The three steps
# ------------------------------------------------------------------------------------------------
def jax_privacy_clipped_sum(forward, out_loss, clip_norm: float, microbatch_size: int | None = None):
    """jax-privacy's per-example clipped sum of gradients of ``sum(out_loss(forward(p, x), y))``:
    ``fn(params, xb, yb, is_padding_example=pad) -> sum`` (a ``BoundedSensitivityCallable``)."""
    import jax.numpy as jnp
    from jax_privacy import clipped_grad

    def loss(p, xb, yb):  # xb [1, ...]: one example with its batch axis (keep_batch_dim=True)
        return jnp.sum(out_loss(forward(p, xb), yb))

    return clipped_grad(loss, l2_clip_norm=clip_norm, batch_argnums=(1, 2), microbatch_size=microbatch_size)


def make_steps(model, forward, out_loss, num_classes, bsz: int, clip: float, sigma: float, lr: float,
               microbatch_size: int | None = None):
    """Jitted runs ``run(key, params, x, y, batches) -> params`` for the rows (with
    ``microbatch_size``, also ``jax_privacy_mb``: the same step with jax-privacy's microbatching)."""
    import jax
    import jax.numpy as jnp
    import optax

    from dpfair_jax.algorithms import dpsgd
    from dpfair_jax.privacy import aggregation

    def scan_steps(grad_of, key, params, x, y, batches, noise=None):
        opt = optax.sgd(lr)

        def step(carry, inp):
            p, s, ns = carry
            idx, k = inp
            pad = idx < 0
            safe = jnp.where(pad, 0, idx)  # padding rows read row 0 and are marked as padding
            g, ns = grad_of(p, x[safe], y[safe], pad, k, ns)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s, ns), None

        keys = jax.random.split(key, batches.shape[0])
        ns0 = None if noise is None else noise.init(params)
        (p, _, _), _ = jax.lax.scan(step, (params, opt.init(params), ns0), (batches, keys))
        return p

    @jax.jit
    def nonprivate(key, params, x, y, batches):
        def grad_of(p, xb, yb, pad, k, ns):
            w = (~pad).astype(xb.dtype)
            return jax.grad(lambda pp: jnp.sum(w * out_loss(forward(pp, xb), yb)) / bsz)(p), ns

        return scan_steps(grad_of, key, params, x, y, batches)

    @jax.jit
    def kit(key, params, x, y, batches):
        def grad_of(p, xb, yb, pad, k, ns):
            sums, _, _ = dpsgd.clipped_grad_sum(model, p, xb, yb, clip_norm=clip, mask=~pad,
                                                num_classes=num_classes)
            noisy = aggregation.noisy_sum(k, sums, sigma * clip)
            return jax.tree_util.tree_map(lambda a: a / bsz, noisy), ns

        return scan_steps(grad_of, key, params, x, y, batches)

    @jax.jit
    def kit_mb(key, params, x, y, batches):
        # The kit's clipped sum over consecutive chunks of ``microbatch_size`` rows, accumulated in
        # a sequential lax.scan (jax-privacy's microbatching applied to the ghost path; per-example
        # clipping makes the chunked sum equal the whole-batch sum).
        def grad_of(p, xb, yb, pad, k, ns):
            m = microbatch_size
            chunks = (xb.reshape(-1, m, *xb.shape[1:]), yb.reshape(-1, m, *yb.shape[1:]),
                      (~pad).reshape(-1, m))

            def body(acc, inp):
                xc, yc, mc = inp
                sc, _, _ = dpsgd.clipped_grad_sum(model, p, xc, yc, clip_norm=clip, mask=mc,
                                                  num_classes=num_classes)
                return jax.tree_util.tree_map(jnp.add, acc, sc), None

            sums, _ = jax.lax.scan(body, jax.tree_util.tree_map(jnp.zeros_like, p), chunks)
            noisy = aggregation.noisy_sum(k, sums, sigma * clip)
            return jax.tree_util.tree_map(lambda a: a / bsz, noisy), ns

        return scan_steps(grad_of, key, params, x, y, batches)

    def jax_privacy_run(mb):
        clipped = jax_privacy_clipped_sum(forward, out_loss, clip, mb)

        @jax.jit
        def jax_privacy(key, params, x, y, batches):
            from jax_privacy import noise_addition

            privatizer = noise_addition.gaussian_privatizer(stddev=sigma * clipped.sensitivity(),
                                                            prng_key=jax.random.fold_in(key, 1))

            def grad_of(p, xb, yb, pad, k, ns):
                sums = clipped(p, xb, yb, is_padding_example=pad)
                noisy, ns = privatizer.update(sums, ns)
                return jax.tree_util.tree_map(lambda a: a / bsz, noisy), ns

            return scan_steps(grad_of, key, params, x, y, batches, noise=privatizer)

        return jax_privacy

    out = {"nonprivate": nonprivate, "kit": kit, "jax_privacy": jax_privacy_run(None)}
    if microbatch_size:
        out["jax_privacy_mb"] = jax_privacy_run(microbatch_size)
        out["kit_mb"] = kit_mb
    return out


def model_setup(name: str):
    """``(model, forward, out_loss, num_classes, params)`` of one of dpsgd_step's models."""
    import jax

    from dpfair_jax.algorithms import dpsgd

    model, num_classes = ds._kit_model(name)
    out_loss = dpsgd.output_loss_for(model, num_classes)
    params = model.init(jax.random.key(0), None if name == "cnn" else ds.D)
    if name == "cnn":
        from dpfair_jax.privacy import ghost

        def forward(pp, xb, model=model):
            return ghost.cnn_forward(model, pp, xb)[0]
    else:
        forward = model.apply
    return model, forward, out_loss, num_classes, params


# ------------------------------------------------------------------------------------------------
# Accounting
# ------------------------------------------------------------------------------------------------
def accounting_comparison(events=ACCOUNTING_EVENTS) -> list[dict]:
    """Epsilon of each ``(n, batch, z, steps, delta)`` by the kit and by jax-privacy.

    Keys: ``kit_rdp``, ``kit_pld`` (``dpfair_jax.privacy.accounting.dpsgd_epsilon``, Poisson,
    add/remove); ``jaxp_rdp`` (jax-privacy's ``RdpAccountantConfig()``: its own order grid),
    ``jaxp_rdp_same_orders`` (``RdpAccountantConfig(orders=dp_accounting's DEFAULT_RDP_ORDERS)``,
    the grid the kit uses), ``jaxp_pld`` (``PldAccountantConfig()``, discretization 1e-4 like the
    kit's), each through ``DpsgdTrainingAccountant.compute_epsilon``.
    """
    from dp_accounting.rdp import rdp_privacy_accountant
    from jax_privacy import accounting as jpa

    from dpfair_jax.privacy import accounting

    out = []
    for n, b, z, steps, delta in events:
        q = b / n
        params = jpa.DpParams(noise_multipliers=z, num_samples=n, batch_size=b, delta=delta)

        def jaxp(cfg):
            return float(jpa.DpsgdTrainingAccountant(cfg).compute_epsilon(steps, params))

        r = {"n": n, "batch": b, "q": q, "z": z, "steps": steps, "delta": delta,
             "kit_rdp": accounting.dpsgd_epsilon(z, q, steps, delta, accountant="rdp"),
             "kit_pld": accounting.dpsgd_epsilon(z, q, steps, delta, accountant="pld"),
             "jaxp_rdp": jaxp(jpa.RdpAccountantConfig()),
             "jaxp_rdp_same_orders": jaxp(jpa.RdpAccountantConfig(
                 orders=list(rdp_privacy_accountant.DEFAULT_RDP_ORDERS))),
             "jaxp_pld": jaxp(jpa.PldAccountantConfig())}
        r["diff_rdp_same_orders"] = r["kit_rdp"] - r["jaxp_rdp_same_orders"]
        r["diff_pld"] = r["kit_pld"] - r["jaxp_pld"]
        r["diff_rdp_default_orders"] = r["kit_rdp"] - r["jaxp_rdp"]
        out.append(r)
    return out


def print_accounting(rows: list[dict], tol: float = 1e-6) -> None:
    print("\nAccounting, Poisson-subsampled Gaussian, add/remove-one (epsilon at delta):")
    print(f"{'q':>9s} {'z':>5s} {'T':>6s} {'delta':>7s} | {'kit RDP':>10s} {'jaxp RDP*':>10s} {'diff':>9s}"
          f" | {'kit PLD':>10s} {'jaxp PLD':>10s} {'diff':>9s} | {'jaxp RDP':>10s} {'kit - it':>9s}")
    for r in rows:
        print(f"{r['q']:9.5f} {r['z']:5.2f} {r['steps']:6d} {r['delta']:7.0e} | {r['kit_rdp']:10.6f} "
              f"{r['jaxp_rdp_same_orders']:10.6f} {r['diff_rdp_same_orders']:9.1e} | {r['kit_pld']:10.6f} "
              f"{r['jaxp_pld']:10.6f} {r['diff_pld']:9.1e} | {r['jaxp_rdp']:10.6f} "
              f"{r['diff_rdp_default_orders']:9.1e}")
    print("  jaxp RDP* = jax-privacy's RDP accountant given dp-accounting's default orders (the kit's);"
          " same event, same orders, same PLD discretization (1e-4): agreement asserted to "
          f"{tol:g}.\n  jaxp RDP = jax-privacy's default order grid (1.01-8 in 50 steps, 8-63, 10 "
          "orders 65-512; dp-accounting's, the kit's: 1.1-11 by 0.1, 12-63, 128-1024): the minimum"
          " over orders is taken over other points, so epsilon differs;"
          " a negative 'kit - it' means the kit's grid gives the smaller (still valid) bound.")
    for r in rows:
        for key in ("diff_rdp_same_orders", "diff_pld"):
            if abs(r[key]) > tol:
                raise AssertionError(f"accounting disagrees beyond {tol:g}: {key} = {r[key]:.3g} in {r}")


# ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps per call")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (>= 5 for a ratio)")
    parser.add_argument("--min-rep-s", type=float, default=0.2, help="minimum seconds per repetition")
    parser.add_argument("--models", default="logistic,mlp,cnn")
    parser.add_argument("--microbatch", type=int, default=32,
                        help="also time jax-privacy with this microbatch_size (0: not)")
    parser.add_argument("--out", default=str(common.RESULTS_DIR / "jax_privacy_baseline.json"))
    parser.add_argument("--no-reexec", action="store_true", help="do not re-exec with GLIBC_TUNABLES")
    args = parser.parse_args(argv)
    if args.repeats < 5:
        parser.error("--repeats must be >= 5 (each ratio is a median over >= 5 interleaved rounds)")
    missing = jax_privacy_missing()
    if missing:
        print(missing)
        return []
    load = common.load_at_start()
    import jax
    import jax.numpy as jnp
    import jax_privacy

    from dpfair_jax.privacy import sampling

    acc_rows = accounting_comparison()
    print_accounting(acc_rows)

    data = ds._datasets()
    steps_of = ({"logistic": 40, "mlp": 20, "cnn": 2} if args.quick
                else {"logistic": 200, "mlp": 100, "cnn": 10})
    machine = common.machine(f"jax-privacy {jax_privacy.__version__}; load average {load:.2f} at start"
                             if load is not None else f"jax-privacy {jax_privacy.__version__}")
    print(f"\njax-privacy {jax_privacy.__version__} vs the kit, DP-SGD step (clip {ds.CLIP}, noise "
          f"multiplier {ds.SIGMA}); {args.repeats} interleaved rounds, >= {args.min_rep_s} s each; "
          f"load average {load} at start", flush=True)
    rows = []
    for name in args.models.split(","):
        bsz = ds.CONFIGS[name]["batch"]
        x_np, y_np = data[name]
        x, y = jnp.asarray(x_np), jnp.asarray(y_np)
        n = x.shape[0]
        max_b = sampling.max_batch_size_for(n, bsz / n, 10_000)
        if args.microbatch:  # a multiple of the microbatch size (the same padded shape for all rows)
            max_b = -(-max_b // args.microbatch) * args.microbatch
        steps = steps_of[name]
        batches = jnp.asarray(poisson_index_batches(n, bsz, max_b, steps))
        model, forward, out_loss, num_classes, params = model_setup(name)
        runs = make_steps(model, forward, out_loss, num_classes, bsz, ds.CLIP, ds.SIGMA, ds.LR,
                          microbatch_size=args.microbatch or None)
        key = jax.random.key(1)
        calls = {}
        for variant, fn in runs.items():
            jax.block_until_ready(fn(key, params, x, y, batches))  # compile + warm-up
            calls[variant] = functools.partial(fn, key, params, x, y, batches)
        print(f"  {name}: batch {bsz}, padded Poisson batch {max_b}, {steps} steps per call", flush=True)
        t = common.interleaved(calls, repeats=args.repeats, min_rep_s=args.min_rep_s)
        per_call = steps * bsz
        rate = {v: per_call / t.median_s(v) for v in calls}
        extra = {"load_at_start": t.load_at_start, "min_rep_s": args.min_rep_s}
        for v in calls:
            rows.append(common.row(f"{name}/{v}", rate[v], "examples/s", machine_desc=machine,
                                   inner=t.inner[v], **extra))
        # The baseline is jax-privacy's faster configuration (with or without microbatching).
        jaxp = max((v for v in calls if v.startswith("jax_privacy")), key=lambda v: rate[v])
        jaxp_ceiling = common.paired_ratio(t, jaxp, "nonprivate")
        # At the ceiling: jax-privacy within 10% of the non-private step but not above it (a peer
        # faster than the non-private step shows that step is no ceiling: the target stays).
        at_ceiling = CEILING_FRACTION <= jaxp_ceiling["ratio"] <= 1.0
        for fast, slow, target in (
                ("kit", jaxp, None if at_ceiling else TARGETS[name]),
                ("kit", "nonprivate", CEILING_FRACTION if at_ceiling else None),
                *((v, "nonprivate", None) for v in calls if v.startswith("jax_privacy")),
                *(("kit_mb", s_, None) for s_ in ("kit", jaxp) if "kit_mb" in calls)):
            pr = common.paired_ratio(t, fast, slow)
            met = None if target is None else bool(pr["ratio"] >= target)
            label = "jax_privacy" if slow == jaxp else slow  # the target row's name is fixed
            r = {"name": f"{name}/{fast}_vs_{label}", "machine": machine, "baseline": f"{name}/{slow}",
                 "value": rate[fast], "unit": "examples/s", "ratio": pr["ratio"], "target": target,
                 "met": met, **{k: v for k, v in pr.items() if k != "ratio"}, **extra}
            if fast == "kit" and slow == jaxp and at_ceiling:
                r["note"] = (f"jax-privacy at {jaxp_ceiling['ratio']:.2f}x the ceiling: the "
                             f"{TARGETS[name]:g}x target is stated against the ceiling")
            rows.append(r)
    for r in acc_rows:
        rows.append(common.row(f"accounting/q={r['q']:.4g},z={r['z']},T={r['steps']}", r["kit_rdp"],
                               "epsilon (kit RDP)", machine_desc=machine, **{k: v for k, v in r.items()
                                                                            if k not in ("q", "z", "steps")}))
    print()
    common.report("jax_privacy_baseline", rows, args.out)
    print("\nratio = median over rounds of the within-round ratio (ratio_min..ratio_max, quartiles "
          "ratio_q1..ratio_q3); figures measured under the load average shown.")
    return rows


if __name__ == "__main__":
    common.maybe_reexec()
    main()
