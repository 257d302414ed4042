"""reductions' fit/spend/calibrate for Algorithm 1 (exponential sampling) and Algorithm 2 (private
CGOO): calibrate hits an (epsilon, delta) target, spend equals Lemma A.4 written out here, fit is
the algorithm it names (same draws) and records what its rounds spent; the paper variant of
Algorithm 1 is charged for its too-small sensitivity (a brute-force neighbour shows the charge is
needed)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import reductions as R

K, M, N = 3, 30, 200


def _data(seed=0):
    L = np.random.default_rng(seed).uniform(0.1, 0.6, size=(M, K)).astype(np.float32)
    return R.GridData(L, N)


def _problem():
    return R.CGOO(R.sum_objective(K), R.bounded_group_loss(np.full(K, 0.3)), K)


def _lemma_a4(eps_round: float, steps: int, delta_bar: float) -> float:
    """Advanced composition (paper 002 Lemma A.4; Dwork, Rothblum, Vadhan 2010), written out."""
    return eps_round * math.sqrt(2.0 * steps * math.log(1.0 / delta_bar)) + steps * eps_round * math.expm1(eps_round)


# ------------------------------------------------------------------------------------ Algorithm 1
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0])
def test_sampling_calibrate_and_spend(epsilon):
    cfg = R.SamplingConfig(_problem())
    hp = R.calibrate(cfg, N, (epsilon, cfg.delta), hparams=R.SamplingHparams(G=2.0))
    sp = R.spend(cfg, N, hp)
    assert hp.G == 2.0 and float(np.float32(hp.epsilon)) == hp.epsilon
    assert 0.99 * epsilon <= sp.epsilon <= epsilon
    assert (sp.delta, sp.relation, sp.unit) == (0.0, "replace_one", "example")


def test_sampling_fit_is_exponential_sampling_and_records_epsilon():
    data, cfg = _data(), R.SamplingConfig(_problem())
    hp = R.SamplingHparams(G=2.0, epsilon=1.5)
    keys = jax.random.split(jax.random.key(0), 8)
    for k in keys:
        res = R.fit(k, data, hp, cfg)
        want = R.exponential_sampling(k, data.losses, cfg.problem, G=2.0, epsilon=1.5, n=N)
        assert int(res.params) == int(want)
        np.testing.assert_array_equal(np.asarray(res.diagnostics["loss"]), data.losses[int(want)])
        assert res.spend == R.spend(cfg, N, hp)
    # traced epsilon: a vmapped grid is one program, entry by entry equal to the single runs
    eps = jnp.asarray([0.5, 5.0])
    idx = jax.vmap(lambda e: R.fit(keys[0], data, R.SamplingHparams(2.0, e), cfg).params)(eps)
    assert [int(i) for i in idx] == [int(R.fit(keys[0], data, R.SamplingHparams(2.0, float(e)), cfg).params)
                                     for e in eps]


def test_sampling_paper_variant_is_charged_for_its_sensitivity():
    """Alg. 1 as printed calibrates to ``(1 + G) sqrt(K)/n``; with ``f = sum`` (``L_f = sqrt K``) a
    neighbour moves ``h`` by more. Brute force: the log-probability ratio of a neighbouring pair
    exceeds the epsilon passed, and stays within the epsilon spend states."""
    G, eps_run = 0.5, 1.0
    L = np.full((M, K), 0.5, np.float32)  # every candidate over its threshold: the penalty is active
    L[0] = 0.45
    L1 = L - 1.0 / N  # replace one record: every candidate but 0 loses 1/n on every coordinate
    L1[0] = L[0] + 1.0 / N  # candidate 0 gains it
    cfg = R.SamplingConfig(_problem(), variant="paper")
    lp0 = np.log(np.asarray(R.exponential_sampling_probs(L, cfg.problem, G=G, epsilon=eps_run, n=N,
                                                         variant="paper"), np.float64))
    lp1 = np.log(np.asarray(R.exponential_sampling_probs(L1, cfg.problem, G=G, epsilon=eps_run, n=N,
                                                         variant="paper"), np.float64))
    ratio = float(np.max(np.abs(lp1 - lp0)))
    sp = R.spend(cfg, N, R.SamplingHparams(G=G, epsilon=eps_run))
    factor = (math.sqrt(K) + G * 1.0) / (1.0 + G)  # (L_f + G L_g)/(1 + G), L_g = 1 for the max
    assert sp.epsilon == pytest.approx(eps_run * factor, rel=1e-12)
    assert eps_run * 1.1 < ratio <= sp.epsilon + 1e-4
    back = R.calibrate(cfg, N, (eps_run, cfg.delta), hparams=R.SamplingHparams(G=G))
    assert 0.99 * eps_run <= R.spend(cfg, N, back).epsilon <= eps_run
    # the corrected variant is charged the epsilon it runs at
    assert R.spend(R.SamplingConfig(_problem()), N, R.SamplingHparams(G=G, epsilon=eps_run)).epsilon == eps_run


# ------------------------------------------------------------------------------------ Algorithm 2
@pytest.mark.parametrize("epsilon, delta, steps", [(1.0, 1e-5, 20), (4.0, 1e-6, 300), (0.2, 1e-8, 5)])
def test_private_cgoo_calibrate_and_spend(epsilon, delta, steps):
    cfg = R.PrivateCGOOConfig(_problem(), steps=steps, delta=delta)
    hp = R.calibrate(cfg, N, (epsilon, delta), hparams=R.PrivateCGOOHparams(G=3.0))
    sp = R.spend(cfg, N, hp)
    e_round = hp.oracle_epsilon + (K / N) / hp.laplace_scale  # l1 sensitivity of the loss vector: K/n
    assert sp.epsilon == pytest.approx(_lemma_a4(e_round, steps, delta), rel=1e-12)
    assert 0.99 * epsilon <= sp.epsilon <= epsilon
    assert sp.delta == pytest.approx(delta, rel=1e-15)  # pure rounds: T * 0 + delta_bar
    assert (K / N) / hp.laplace_scale == pytest.approx(0.25 * e_round, rel=1e-5)  # weight_fraction
    ledger = R.algorithm2_ledger(R.algorithm2_budget(epsilon, delta, steps, n=N, num_groups=K))
    assert sp.epsilon == pytest.approx(ledger["epsilon"], rel=1e-5)  # the module's ledger at the target


def test_private_cgoo_fit_is_private_cgoo_and_records_its_rounds():
    data = _data(1)
    cfg = R.PrivateCGOOConfig(_problem(), steps=40, smoothing=50.0)
    hp = R.calibrate(cfg, N, (2.0, cfg.delta), hparams=R.PrivateCGOOHparams(G=3.0))
    res = R.fit(jax.random.key(3), data, hp, cfg)
    want = R.private_cgoo(jax.random.key(3), data.losses, cfg.problem, G=3.0, steps=40,
                          oracle_epsilon=hp.oracle_epsilon, laplace_scale=hp.laplace_scale, n=N, smoothing=50.0)
    np.testing.assert_array_equal(np.asarray(res.params[0]), np.asarray(want.indices))
    np.testing.assert_array_equal(np.asarray(res.params[1]), np.asarray(want.weights))
    np.testing.assert_array_equal(np.asarray(res.diagnostics["released"]), np.asarray(want.released))
    sp = R.spend(cfg, N, hp)
    assert res.spend == sp
    assert _lemma_a4(float(res.diagnostics["round_epsilon"]), cfg.steps, cfg.delta) == pytest.approx(sp.epsilon, rel=1e-5)
    # the run's Laplace noise is at the recorded scale (released minus the previous decision's loss)
    prev = np.concatenate([[cfg.init_index], np.asarray(res.params[0])[:-1]])
    noise = np.asarray(res.diagnostics["released"], np.float64) - data.losses[prev].astype(np.float64)
    assert float(np.mean(np.abs(noise))) == pytest.approx(hp.laplace_scale, rel=5.0 / math.sqrt(noise.size))


def test_private_cgoo_without_noise_has_no_guarantee():
    data = _data()
    cfg = R.PrivateCGOOConfig(_problem(), steps=5)
    hp = R.PrivateCGOOHparams(G=3.0, oracle_epsilon=0.1, laplace_scale=0.0)
    assert math.isinf(R.spend(cfg, N, hp).epsilon)
    assert math.isinf(float(R.fit(jax.random.key(0), data, hp, cfg).diagnostics["round_epsilon"]))
    paper = R.PrivateCGOOConfig(_problem(), steps=5, variant="paper")
    noisy = dataclasses.replace(hp, laplace_scale=0.5)
    assert math.isinf(R.spend(paper, N, noisy).epsilon)  # line 10 reads the losses unnoised
    assert math.isinf(float(R.fit(jax.random.key(0), data, noisy, paper).diagnostics["round_epsilon"]))
    with pytest.raises(ValueError, match="variant='paper'"):
        R.calibrate(paper, N, (1.0, paper.delta))


@pytest.mark.parametrize("call, match", [
    (lambda: R.spend("exp", N, R.SamplingHparams()), "config"),
    (lambda: R.spend(R.SamplingConfig(_problem()), 200.5, R.SamplingHparams()), "sizes"),
    (lambda: R.calibrate(R.PrivateCGOOConfig(_problem()), N, (1.0, 1e-6)), "config.delta"),
    (lambda: R.calibrate(R.SamplingConfig(_problem()), N, (0.0, 1e-5)), "epsilon"),
    (lambda: R.fit(jax.random.key(0), _data().losses, R.SamplingHparams(), R.SamplingConfig(_problem())), "data"),
    (lambda: R.fit(jax.random.key(0), _data(), R.PrivateCGOOHparams(), R.SamplingConfig(_problem())), "hparams"),
    (lambda: R.spend(R.SamplingConfig(_problem()), N, R.PrivateCGOOHparams()), "hparams"),
    (lambda: R.calibrate(R.PrivateCGOOConfig(_problem()), N, (1.0, 1e-5), hparams=R.SamplingHparams()), "hparams"),
    (lambda: R.PrivateCGOOConfig(_problem(), weight_fraction=1.0).validate(), "weight_fraction"),
    (lambda: R.SamplingConfig(_problem(), variant="x").validate(), "variant"),
])
def test_interface_refuses_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
