"""Mechanisms recorded under general ``replace_one`` cover a record that moves to another group.

Under ``replace_one`` a record may change its group id ``s``, so every group size may change by
one in two groups. A release whose sensitivity assumed fixed group sizes would then say more than
it covers (``replace_one_within_group``, :mod:`dpfair_jax.privacy.relations`). These probes move
one adversarial record between groups, with noise off, and check each released quantity against
the sensitivity its spend declares; the last test checks that ``docs/trust.md`` shows the relation
each of these spends records.
"""

from __future__ import annotations

import itertools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import output_perturbation as OP
from dpfair_jax.algorithms import reductions as R
from dpfair_jax.algorithms import synthesis as SY
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy import mechanisms as M
from dpfair_jax.privacy.relations import histogram_sensitivity
from dpfair_jax.runner import report

_N, _M = 9, 4  # rows, grid candidates


def _moved_pairs(K: int):
    """Neighbouring (per-example losses [M, n], s) pairs: the last record moves from group ``a`` to
    ``b`` and its losses go from ``u`` to ``w`` (extremes 0/1 per candidate, every group pair)."""
    rng = np.random.default_rng(0)
    base = rng.uniform(size=(_M, _N - 1))
    s_base = np.arange(_N - 1) % K
    extremes = [np.zeros(_M), np.ones(_M), np.array([1.0, 0.0, 1.0, 0.0]), np.array([0.0, 1.0, 0.0, 1.0])]
    for a, b in itertools.permutations(range(K), 2):
        for u, w in itertools.product(extremes, repeat=2):
            per0 = np.concatenate([base, u[:, None]], axis=1)
            per1 = np.concatenate([base, w[:, None]], axis=1)
            yield (per0, np.r_[s_base, a]), (per1, np.r_[s_base, b])


@pytest.mark.parametrize("K", [2, 3])
def test_reductions_loss_vectors_and_exact_epsilon_cover_a_group_change(K):
    """Itemized group losses divide by the total ``n``: moving a record between groups changes two
    coordinates by at most ``1/n`` each, within ``loss_sensitivity`` (l2 ``sqrt K / n``, l1 ``K/n``;
    Algorithm 2's Laplace release and the LOPT EM), and Algorithm 1's exact privacy loss for the
    pair stays within its spend's epsilon."""
    l2, l1 = R.loss_sensitivity(_N, K), R.loss_sensitivity(_N, K, norm="l1")
    eta = np.full(K, 0.05, np.float32)  # public thresholds: the penalty is active
    problem = R.CGOO(R.sum_objective(K), R.bounded_group_loss(eta), K)
    G, eps = 3.0, 1.0
    claim = R.spend(R.SamplingConfig(problem), _N, R.SamplingHparams(G=G, epsilon=eps)).epsilon
    worst = 0.0
    for (p0, s0), (p1, s1) in _moved_pairs(K):
        L0 = np.asarray(R.group_losses(jnp.asarray(p0, jnp.float32), jnp.asarray(s0), K), np.float64)
        L1 = np.asarray(R.group_losses(jnp.asarray(p1, jnp.float32), jnp.asarray(s1), K), np.float64)
        d = L1 - L0
        assert np.all(np.linalg.norm(d, axis=1) <= l2 * (1 + 1e-5))
        assert np.all(np.abs(d).sum(axis=1) <= l1 * (1 + 1e-5))
        q0 = np.asarray(R.exponential_sampling_probs(L0, problem, G=G, epsilon=eps, n=_N), np.float64)
        q1 = np.asarray(R.exponential_sampling_probs(L1, problem, G=G, epsilon=eps, n=_N), np.float64)
        worst = max(worst, float(np.max(np.abs(np.log(q1) - np.log(q0)))))
    assert 0.0 < worst <= claim * (1 + 1e-4)


def test_dp_gd_oracle_clipped_sum_covers_a_group_change():
    """The DP-GD oracle's per-example gradient carries the record's group weight, which changes
    with its group; with noise off the released sum (recovered from one step from 0 with no
    projection) still moves by at most ``2 C``, the sensitivity of ``dp_gd_noise_std``."""
    C, n = 1.0, 6
    x = np.zeros((n, 2), np.float32)
    x[:-1] = np.random.default_rng(1).normal(size=(n - 1, 2))
    y = np.zeros(n, np.float32)
    s0 = np.r_[np.arange(n - 1) % 2, 0].astype(np.int32)
    s1 = s0.copy()
    s1[-1] = 1
    weights = jnp.asarray([0.05, 1.0], jnp.float32)

    @jax.jit
    def one_step(xx, yy, ss):
        return R.dp_weighted_least_squares(jax.random.key(0), xx, yy, ss, weights, num_groups=2, noise_std=0.0,
                                           steps=1, clip_norm=C, learning_rate=1.0, radius=jnp.inf)

    def released_sum(xx, yy, ss):
        p = one_step(jnp.asarray(xx), jnp.asarray(yy), jnp.asarray(ss))
        return -n * np.r_[np.asarray(p.w, np.float64), np.asarray(p.b, np.float64)]

    worst = 0.0
    for big, lab0, lab1 in [(1e4, 1e4, -1e4), (1e-3, 0.0, 5.0), (30.0, -30.0, 30.0)]:
        x[-1] = (big, -big)
        y0, y1 = y.copy(), y.copy()
        y0[-1], y1[-1] = lab0, lab1
        d = released_sum(x, y1, s1) - released_sum(x, y0, s0)
        worst = max(worst, float(np.linalg.norm(d)))
    assert 0.0 < worst <= 2.0 * C * (1 + 1e-5)
    assert R.dp_gd_noise_std(1.0, 1e-5, 1, C) == pytest.approx(
        R.dp_gd_noise_std(1.0, 1e-5, 1, 2.0 * C) / 2.0)  # the std scales with the 2C sensitivity


def test_output_perturbation_does_not_read_the_group():
    """Moving every record to another group leaves the release bit for bit unchanged."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 2)).astype(np.float32) * 0.4
    y = (rng.uniform(size=8) < 0.5).astype(np.float32)
    s = np.arange(8) % 2
    hp = OP.OutputPerturbationHparams(noise_multiplier=1.0, reg=1.0, radius=2.0)
    cfg = OP.OutputPerturbationConfig()
    a = OP.fit(jax.random.key(3), make_dataset(x, y, s, num_groups=2), hp, cfg)
    b = OP.fit(jax.random.key(3), make_dataset(x, y, 1 - s, num_groups=2), hp, cfg)
    np.testing.assert_array_equal(np.asarray(a.params), np.asarray(b.params))


def test_fermi_frequency_histogram_covers_a_group_change():
    """DP-FERMI's group frequencies (replace-one runs): a record changing group moves two cells of
    the noiseless histogram by 1, i.e. ``sqrt 2`` in l2, the sensitivity the noise is scaled to."""
    cells0 = jnp.asarray([0, 1, 2, 3, 1, 0])
    cells1 = cells0.at[-1].set(3)
    h0 = M.noisy_histogram(jax.random.key(0), cells0, 4, noise_multiplier=0.0, relation="replace_one")
    h1 = M.noisy_histogram(jax.random.key(0), cells1, 4, noise_multiplier=0.0, relation="replace_one")
    assert float(jnp.linalg.norm(h1 - h0)) <= histogram_sensitivity("l2").under("replace_one") * (1 + 1e-6)
    assert histogram_sensitivity("l2").under("replace_one") == pytest.approx(math.sqrt(2.0))


def _trust_relation(entry: str) -> str:
    """The relation column of the docs/trust.md table row that starts with ``entry``."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "trust.md").read_text()
    rows = [r for r in text.splitlines() if r.startswith(f"| {entry}")]
    assert len(rows) == 1, (entry, rows)
    return rows[0].split(" | ")[2]


def test_trust_table_shows_the_relation_each_spend_records():
    """docs/trust.md names the relation the spend records (the synthesizer's is add/remove)."""
    K = 2
    problem = R.CGOO(R.sum_objective(K), R.bounded_group_loss(np.full(K, 0.1, np.float32)), K)
    spends = {
        "`synthesis` stratified": SY.spend(SY.SynthesisConfig(domains=(2, 3), num_groups=2), 10, SY.SynthesisHparams()),
        "`reductions` exponential": R.spend(R.SamplingConfig(problem), 10, R.SamplingHparams(G=1.0, epsilon=1.0)),
        "`output_perturbation.fit`": OP.spend(OP.OutputPerturbationConfig(), 10, OP.OutputPerturbationHparams()),
    }
    for entry, sp in spends.items():
        shown = _trust_relation(entry)
        label = report._RELATIONS[sp.relation]
        assert shown.startswith(label), (entry, sp.relation, shown)
        others = [v for k, v in report._RELATIONS.items() if k != sp.relation and not label.startswith(v)]
        assert not any(shown.startswith(o) for o in others), (entry, shown)
