"""Quickstart: private training, a fair private learner, and a Monte Carlo sweep as one program.

Runs on CPU in well under a minute: ``python examples/quickstart.py``.
"""

import jax
import jax.numpy as jnp

from dpfair_jax import models, montecarlo
from dpfair_jax.algorithms import dpsgd, fermi
from dpfair_jax.data import synthetic
from dpfair_jax.fairness import evaluate, metrics
from dpfair_jax.privacy import mechanisms

key = jax.random.key(0)
data = synthetic.two_group_classification(key, n=4000, d=8).data  # a Dataset: x, y, s

# 1. DP-SGD: calibrate the noise for (epsilon, delta) = (1, 1e-5), train, state the spend
#    (Poisson sampling at q = batch / n, add/remove; delta includes the padding's truncation charge).
n, batch, steps, delta = data.n, 256, 200, 1e-5
model = models.logistic(input_dim=data.d)
config = dpsgd.DPSGDConfig(model=model, batch_size=batch, steps=steps, delta=delta)
hp = dpsgd.calibrate(config, n, (1.0, delta), hparams=dpsgd.DPSGDHparams(clip_norm=1.0, learning_rate=0.5))
result = dpsgd.fit(jax.random.key(1), data, hp, config)
print(result.spend)
params = result.params
pred = models.predict_label(model, params, data.x)
print("accuracy", float(metrics.accuracy(pred, data.y)),
      "DP violation (eq. 10)", float(metrics.demographic_parity_pairwise(pred, data.s, 2)))

# 2. DP-FERMI (paper 004), fairness weight lam = 1, on the default unit: every feature of a record
#    is protected (Poisson sampling, add/remove), and the group frequencies come from a noisy
#    histogram whose cost is part of the spend.
config = fermi.FermiConfig(model=model, num_groups=2, steps=steps, batch_size=batch, delta=delta)
hp = fermi.calibrate(config, n, (1.0, delta), hparams=fermi.FermiHparams(lam=1.0))  # both updates composed
result = fermi.fit(jax.random.key(3), data, hp, config)
print(fermi.spend(config, n, hp))
print(evaluate(model, result.params, data))  # error, violations, degenerate-run flags


# 3. A Monte Carlo sweep: 200 trials x 4 noise scales of a Gaussian mean, one compiled program
#    (noise multiplier sigma on a clipped sum of sensitivity 1 under add/remove, divided by n = 1000).
def trial(key, sigma):
    x = jax.random.normal(key, (1000,))
    noisy_sum = mechanisms.gaussian_mechanism(jax.random.fold_in(key, 1), jnp.sum(jnp.clip(x, -1, 1)), sigma)
    return {"abs_error": jnp.abs(noisy_sum / 1000)}


res = montecarlo.sweep(trial, jax.random.key(4), {"sigma": jnp.array([0.5, 1.0, 2.0, 4.0])}, 200,
                       chunk_size=50)
print(res.summary())
