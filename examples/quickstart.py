"""Quickstart: private training, a fair private learner, and a Monte Carlo sweep as one program.

Runs on CPU in well under a minute: ``python examples/quickstart.py``.
"""

import jax
import jax.numpy as jnp

from dpfair_jax import models, montecarlo
from dpfair_jax.algorithms import dpsgd, fermi
from dpfair_jax.data import synthetic, train_test_split
from dpfair_jax.fairness import evaluate
from dpfair_jax.privacy import mechanisms

# Two groups with different base rates and 10% label noise: not separable, a real tradeoff.
data = synthetic.two_group_classification(jax.random.key(0), n=8000, ratio=0.5, d=8, margins=[1.0, 0.5],
                                          label_noise=0.1, positive_rate=[0.6, 0.3]).data
train, test = train_test_split(data, test_size=0.25, seed=0)
model, target = models.logistic(input_dim=data.d), (1.0, 1e-5)  # (epsilon, delta)

# Every algorithm: config (static choices) -> calibrate -> fit -> FitResult(params, diagnostics, spend, report).
# 1. DP-SGD (Poisson sampling at q = batch / n, add/remove; delta includes the padding's truncation charge).
config = dpsgd.DPSGDConfig(model=model, batch_size=256, steps=300, delta=target[1])
hp = dpsgd.calibrate(config, train.n, target, hparams=dpsgd.DPSGDHparams(clip_norm=1.0, learning_rate=0.5))
plain = dpsgd.fit(jax.random.key(1), train, hp, config)

# 2. DP-FERMI (paper 004), fairness weight lam = 2, on the default unit: every feature of a record is
#    protected, and the group frequencies come from a noisy histogram whose cost is part of the spend.
config = fermi.FermiConfig(model=model, num_groups=2, batch_size=256, steps=300, delta=target[1])
hp = fermi.calibrate(config, train.n, target, hparams=fermi.FermiHparams(lam=2.0))
fair = fermi.fit(jax.random.key(2), train, hp, config)

for name, res in (("DP-SGD", plain), ("DP-FERMI", fair)):
    m = evaluate(model, res.params, test)  # held-out error, DP and EO violations, degenerate-run flags
    print(f"{name:8s} test error {float(m['error']):.3f}  DP violation {float(m['dp_violation']):.3f}  "
          f"epsilon {res.spend.epsilon:.2f} ({res.spend.relation}, unit {res.spend.unit})")


# 3. A Monte Carlo sweep: 200 trials x 4 noise scales of a Gaussian mean, one compiled program
#    (noise multiplier sigma on a clipped sum of sensitivity 1 under add/remove, divided by n = 1000).
def trial(key, sigma):
    x = jax.random.normal(key, (1000,))
    noisy_sum = mechanisms.gaussian_mechanism(jax.random.fold_in(key, 1), jnp.sum(jnp.clip(x, -1, 1)), sigma)
    return {"abs_error": jnp.abs(noisy_sum / 1000)}


res = montecarlo.sweep(trial, jax.random.key(4), {"sigma": jnp.array([0.5, 1.0, 2.0, 4.0])}, 200,
                       chunk_size=50)
print(res.summary())
