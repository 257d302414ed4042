"""DP-FERMI's default hyperparameters train, and runs that learned nothing are flagged: constant
predictions or an error at the base rate (within one standard error) in ``fairness.evaluate`` and
in ``fermi.fit``'s diagnostics (the flags themselves: tests/fairness/test_evaluation.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.data import synthetic
from dpfair_jax.fairness import evaluate


def test_default_hparams_train_and_a_run_that_learned_nothing_is_flagged():
    """An imbalanced synthetic task (base error 0.25): the defaults at the default 100 steps of
    1024 end well below the base rate (the error sits about 6 standard errors below it); the
    paper's tabular step sizes stay at the base rate with constant predictions, flagged on the
    training data (diagnostics) and the test data (evaluate)."""
    full = synthetic.two_group_classification(jax.random.key(0), n=5000, ratio=0.5, d=8, margins=0.3,
                                              label_noise=0.05, positive_rate=jnp.asarray([0.3, 0.15])).data
    full = full.take(jax.random.permutation(jax.random.key(1), 5000))
    train, test = full.take(jnp.arange(4000)), full.take(jnp.arange(4000, 5000))
    cfg = F.FermiConfig(model=M.logistic(input_dim=train.d), num_groups=2)
    good = F.fit(jax.random.key(2), train, F.FermiHparams(), cfg)
    stuck = F.fit(jax.random.key(2), train, F.FermiHparams(lr_theta=0.005, lr_w=0.01), cfg)
    ev_good, ev_stuck = (evaluate(cfg.model, r.params, test) for r in (good, stuck))
    base = float(ev_good["base_error"])
    se = np.sqrt(base * (1 - base) / test.n)
    assert float(ev_good["error"]) < base - 3 * se
    assert not bool(ev_good["degenerate"]) and not bool(good.diagnostics["degenerate"])
    assert float(good.diagnostics["train_error"]) < float(good.diagnostics["base_error"]) - 0.03
    assert bool(ev_stuck["constant_predictions"]) and bool(ev_stuck["degenerate"])
    assert float(ev_stuck["dp_violation"]) < 1e-6  # "perfectly fair": the flag says why
    assert bool(stuck.diagnostics["at_base_rate"]) and bool(stuck.diagnostics["degenerate"])
    assert float(stuck.diagnostics["majority_share"]) > 0.999
