"""Where the MLP DP-SGD step spends its time against the non-private step (CPU profile).

The MLP row of ``dpsgd_step.py`` (102-256-1 tanh, expected batch 256, Poisson batches padded) split
into its parts, each one jitted ``lax.scan`` of the same padded Poisson batches and SGD update:
the non-private gradient; the same plus the Gaussian noise draw (``aggregation.noised_mean``); the
ghost clipped sum (``privacy.clipping.clipped_grad_sum``, path "mlp") without and with the noise;
and ``dpsgd.fit(per_example="ghost")`` itself; and, as what a cheaper generator would give, the
non-private step + noise and the ghost + noise scan with the noise drawn here from ``rbg`` keys
(``jax.random.normal`` on keys split from ``jax.random.key(2, impl="rbg")``: XLA's RngBitGenerator
draws the bits; the same distribution as threefry's, other values). Only the noise draw changes;
the kit's samplers and noise functions, and every trio ``fit``, refuse rbg keys (also traced), so
these rows are a measurement of the generator, not a path the kit offers (docs/performance.md).
Timed interleaved (``common.interleaved``); each ratio to the non-private step is the median of
the within-round ratios, with its range.

    python benchmarks/mlp_step_profile.py [--steps 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

N, D, BSZ, H, LR, CLIP, SIGMA = 34_000, 102, 256, 256, 0.1, 1.0, 1.0


def calls(steps: int) -> dict:
    """Warmed-up calls ``{variant: call}`` (each call runs ``steps`` steps)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from dpfair_jax import models
    from dpfair_jax.algorithms import dpsgd
    from dpfair_jax.privacy import aggregation, clipping, sampling

    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = (x @ (rng.normal(size=D) / np.sqrt(D)) + 0.5 * rng.normal(size=N) > 0).astype(np.int32)
    x, y = jnp.asarray(x), jnp.asarray(y)
    model = models.mlp((H,))
    out_loss = dpsgd.output_loss_for(model, 2)
    params = model.init(jax.random.key(0), D)
    max_b = sampling.max_batch_size_for(N, BSZ / N, 10_000)

    def scan_with(grad_fn, rbg_noise=False):
        @jax.jit
        def run(key, p):
            opt = optax.sgd(LR)

            def step(c, ks):
                p, s = c
                k, k_rbg = ks
                k1, k2 = jax.random.split(k)
                k2 = k_rbg if rbg_noise else k2
                smp = sampling.poisson_sample(k1, N, BSZ / N, max_b)
                g = grad_fn(k2, p, x[smp.indices], y[smp.indices], smp.mask.astype(jnp.float32))
                u, s = opt.update(g, s, p)
                return (optax.apply_updates(p, u), s), None

            keys = jax.random.split(key, steps)
            rbg_keys = jax.random.split(jax.random.key(2, impl="rbg"), steps) if rbg_noise else keys
            (p, _), _ = jax.lax.scan(step, (p, opt.init(p)), (keys, rbg_keys))
            return p
        return run

    def nonprivate(k, p, xb, yb, m):
        return jax.grad(lambda pp: jnp.sum(m * out_loss(model.apply(pp, xb), yb)) / BSZ)(p)

    def noisy(k, g):
        return aggregation.noised_mean(k, g, sensitivity=CLIP, noise_multiplier=SIGMA, denominator=BSZ)

    def noisy_rbg(k, g):
        # The same arithmetic as noised_mean ((S + sigma C N(0, I)) / B, one key per leaf), drawn
        # from an rbg key, which the kit's noise functions refuse.
        leaves, treedef = jax.tree_util.tree_flatten(g)
        keys = jax.random.split(k, len(leaves))
        return treedef.unflatten([(t + SIGMA * CLIP * jax.random.normal(kk, t.shape, t.dtype)) / BSZ
                                  for kk, t in zip(keys, leaves)])

    def ghost_sum(p, xb, yb, m):
        return clipping.clipped_grad_sum(model, p, (xb, yb), clip_norm=CLIP, weights=m, path="ghost",
                                         loss=out_loss).sums

    @jax.jit
    def fit(key, p):
        cfg = dpsgd.DPSGDConfig(model=model, batch_size=BSZ, steps=steps, sampling="poisson",
                                max_batch_size=max_b, per_example="ghost", diagnostics=False)
        hp = dpsgd.DPSGDHparams(learning_rate=LR, clip_norm=CLIP, noise_multiplier=SIGMA)
        return dpsgd.fit(key, (x, y), hp, cfg, params=p).params

    fns = {
        "nonprivate": scan_with(nonprivate),
        "nonprivate+noise": scan_with(lambda k, p, xb, yb, m: noisy(k, nonprivate(k, p, xb, yb, m))),
        "ghost_no_noise": scan_with(lambda k, p, xb, yb, m: jax.tree_util.tree_map(
            lambda t: t / BSZ, ghost_sum(p, xb, yb, m))),
        "ghost+noise": scan_with(lambda k, p, xb, yb, m: noisy(k, ghost_sum(p, xb, yb, m))),
        "dpsgd.fit": fit,
        "nonprivate+noise rbg": scan_with(lambda k, p, xb, yb, m: noisy_rbg(k, nonprivate(k, p, xb, yb, m)),
                                          rbg_noise=True),
        "ghost+noise rbg": scan_with(lambda k, p, xb, yb, m: noisy_rbg(k, ghost_sum(p, xb, yb, m)),
                                     rbg_noise=True),
    }
    key = jax.random.key(1)
    out = {}
    for name, fn in fns.items():
        common.block(fn(key, params))  # compile + warm-up
        out[name] = functools.partial(fn, key, params)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    timing = common.interleaved(calls(args.steps), repeats=args.repeats, min_rep_s=0.0)
    print(f"load average at start: {timing.load_at_start}")
    for name in timing.seconds:
        r = common.paired_ratio(timing, name, "nonprivate")
        ms = sorted(timing.seconds[name])[len(timing.seconds[name]) // 2] * 1e3 / args.steps
        print(f"{name:21s} {ms:.3f} ms/step; speed vs non-private {r['ratio']:.3f}x "
              f"({r['ratio_min']:.3f}-{r['ratio_max']:.3f})")


if __name__ == "__main__":
    main()
