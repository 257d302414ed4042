"""Your own flax.nnx module, trained with DP-SGD, put back into the module, saved and loaded.

    python examples/nnx_module.py            # about 30 s on two CPU cores

1. a plain ``nnx.Module`` (no BatchNorm, no dropout: per-example clipping needs each example's
   forward pass to see that example alone);
2. ``dpsgd.calibrate`` then ``dpsgd.fit`` with ``config.model=`` the module: the module's
   ``nnx.Param`` state, as a plain dict (``models.from_nnx``), is trained; the module itself is
   not changed by ``fit``;
3. the trained parameters go back into the module (``nnx.replace_by_pure_dict`` + ``nnx.update``);
4. ``save_run`` writes the parameters with the spend; ``load_run`` reads them into a fresh module.

Privacy: Poisson sampling at ``q = batch_size / n``, add/remove one training row; the spend printed
is what ``fit`` recorded (``result.spend``). The test-split numbers are not private (public
evaluation data).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dpfair_jax import models
from dpfair_jax.algorithms import dpsgd
from dpfair_jax.data import make_dataset, train_test_split
from dpfair_jax.fairness import evaluate
from dpfair_jax.serialization import load_run, save_run


class Net(nnx.Module):
    """Two dense layers, one logit per example."""

    def __init__(self, d: int, hidden: int, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(d, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))[:, 0]


def put_back(module: nnx.Module, params: dict) -> nnx.Module:
    """Write a plain params dict (what ``fit`` returns for an nnx module) into ``module``."""
    state = nnx.state(module, nnx.Param)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(module, state)
    return module


def toy_data(n: int, d: int, seed: int = 0):
    """Rows of your own: features x, a 0/1 label y that depends on the group s, label noise."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.3).astype(np.int32)                # group 1 is the smaller one
    x = rng.normal(size=(n, d)).astype(np.float32) + 0.5 * s[:, None]
    y = (x[:, 0] + 0.5 * x[:, 1] * s + 0.7 * rng.normal(size=n) > 0.3).astype(np.int32)
    return make_dataset(x, y, s)


def main(n: int = 8000, d: int = 8, hidden: int = 16, batch_size: int = 256, steps: int = 300,
         epsilon: float = 1.0, delta: float = 1e-5, path: str | Path | None = None) -> dict:
    train, test = train_test_split(toy_data(n, d), test_size=0.25, seed=0, stratify=True)

    # 1-2. calibrate the noise for (epsilon, delta) at this batch size and number of steps, train
    net = Net(d, hidden, nnx.Rngs(0))
    config = dpsgd.DPSGDConfig(model=net, batch_size=batch_size, steps=steps, delta=delta)
    hp = dpsgd.calibrate(config, train.n, (epsilon, delta),
                         hparams=dpsgd.DPSGDHparams(clip_norm=1.0, learning_rate=0.5))
    result = dpsgd.fit(jax.random.key(1), train, hp, config)
    print(result.spend)

    # 3. the module now computes the trained network; the kit's evaluation sees the same function
    put_back(net, result.params)
    model, _ = models.from_nnx(net, (d,))
    metrics = jax.jit(evaluate, static_argnums=0)(model, result.params, test)
    print("held-out", {k: round(float(metrics[k]), 4) for k in ("error", "dp_violation", "eo_violation")})

    # 4. save the parameters with the spend; load them into a freshly built module
    path = Path(tempfile.mkdtemp()) / "nnx_run.msgpack" if path is None else Path(path)
    save_run(path, result.params, result.spend,
             metadata={"noise_multiplier": float(hp.noise_multiplier), "batch_size": batch_size,
                       "steps": steps, "hidden": hidden})
    fresh = Net(d, hidden, nnx.Rngs(1))  # another initialization: loading replaces it
    _, template = models.from_nnx(fresh, (d,))
    run = load_run(path, target=template)
    put_back(fresh, run.params)
    same = bool(np.array_equal(np.asarray(fresh(test.x)), np.asarray(net(test.x))))
    print(f"saved to {path}; reloaded spend epsilon {run.spend.epsilon:.3f}; same outputs: {same}")
    return {"net": net, "fresh": fresh, "result": result, "run": run, "test": test, "path": path}


if __name__ == "__main__":
    main()
