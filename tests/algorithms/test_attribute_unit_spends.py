"""The sensitive-attribute unit of the example-level runs (fermi.attribute_spend, pfld.attribute_spend,
pfld_epoch.attribute_spend): the sensitivities of the parts that read s for a change of one s_i
(closed forms, vmapped over every record), the curves against an independent composition, DP-SGD's
zero, and the paper's Theorem 3.3 record of DP-FERMI's own attribute unit understating epsilon."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.algorithms import pfld_epoch as PE
from dpfair_jax.fairness import ermi as E
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import attribute as At
from dpfair_jax.privacy import clipping as C
from dpfair_jax.privacy import replace_rdp as R

N = 1000


def test_soft_counts_move_by_sqrt2_times_the_clipped_row_when_one_s_changes():
    """Closed form, every record at once (jit(vmap)): flipping s_i moves record i's clipped
    contribution e_c (x) e_s (x) F between two groups: L2 change sqrt(2) min(|F|_2, clip)."""
    key = jax.random.key(0)
    n, k, l, clip = 40, 3, 2, 0.8
    probs = jax.nn.softmax(jax.random.normal(key, (n, l)) * 3, axis=-1)
    s = jax.random.randint(jax.random.fold_in(key, 1), (n,), 0, k)
    c = jnp.zeros((n,), jnp.int32)
    base = PE.soft_counts(probs, s, c, 1, k, clip)

    @jax.jit
    @jax.vmap
    def change(i):
        s2 = s.at[i].set((s[i] + 1) % k)
        return jnp.linalg.norm(PE.soft_counts(probs, s2, c, 1, k, clip) - base)

    got = change(jnp.arange(n))
    want = math.sqrt(2.0) * jnp.minimum(jnp.linalg.norm(probs, axis=1), clip)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert float(jnp.max(got)) <= At.MOVED_CELL_FACTOR * clip * (1 + 1e-6)


def test_primal_gradient_moves_by_at_most_twice_the_clip_when_one_s_changes():
    """The clipped per-example gradient of loss + mu pen_i (the part of PF-LD's primal that reads s):
    flipping s_i moves it by at most 2 C (vmapped over records); without clipping it does move."""
    key = jax.random.key(1)
    n, d, k, clip = 30, 4, 2, 0.05
    model = M.logistic()
    x = jax.random.normal(key, (n, d)) * 3
    y = jax.random.randint(jax.random.fold_in(key, 1), (n,), 0, 2)
    s = jax.random.randint(jax.random.fold_in(key, 2), (n,), 0, k)
    theta = model.init(jax.random.fold_in(key, 3), d)
    nu = jnp.asarray([[[2.0, -1.0], [-3.0, 1.5]]])
    p_s = jnp.asarray([[0.3, 0.7]])

    def grad_i(xi, yi, si):
        def f(th):
            z = model.apply(th, xi[None])[0]
            return jnp.sum(F.task_loss(model, z[None], yi[None])) + 5.0 * PE.penalty_one(
                E.soft_prediction(z), si, 0, nu, p_s)
        g = jax.grad(f)(theta)
        return jnp.concatenate([jnp.ravel(v) for v in jax.tree_util.tree_leaves(g)])

    grads = jax.jit(jax.vmap(grad_i))
    g0, g1 = grads(x, y, s), grads(x, y, 1 - s)
    moved = jnp.linalg.norm(C.clip_per_example(g0, clip)[0] - C.clip_per_example(g1, clip)[0], axis=1)
    assert float(jnp.max(jnp.linalg.norm(g0 - g1, axis=1))) > 2 * clip  # it reads s
    assert float(jnp.max(moved)) <= At.CLIPPED_SUM_FACTOR * clip * (1 + 1e-5)


def _pe_cfg():
    return PE.PFLDEpochConfig(model=M.logistic(), num_groups=2, epochs=3, batch_size=100, delta=1e-5)


def test_pfld_epoch_attribute_curve_is_the_min_of_the_independent_routes():
    cfg, zt, zv = _pe_cfg(), 1.3, 9.0
    got = PE.attribute_rdp(cfg, N, zt, zv)
    part = At.poisson_participation(cfg.epochs * math.ceil(N / 100), 100 / N)
    a = At.membership_visible_rdp(At.ORDERS, 2.0 / zt, part, extra_mu=math.sqrt(2.0 * cfg.epochs) / zv)
    b = At.replace_rdp_from_add_remove(PE.spend(cfg, N, PE.PFLDEpochHparams(noise_theta=zt, noise_violation=zv)).event,
                                       At.ORDERS)
    o = np.asarray(At.ORDERS)  # (c) composed by hand: T subsampled steps, then epochs unsampled Gaussians
    steps = cfg.epochs * math.ceil(N / 100)
    c = steps * R.subsampled_gaussian_replace_rdp(100 / N, zt, o) + cfg.epochs * o * 2 / zv**2
    want = np.minimum(a, np.minimum(b, c))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    fin = np.isfinite(b)
    assert np.all(c[fin] <= b[fin]) and np.any(c < np.minimum(a, b))  # (c) binds somewhere
    sp = PE.attribute_spend(cfg, N, PE.PFLDEpochHparams(noise_theta=zt, noise_violation=zv))
    assert (sp.unit, sp.relation, sp.accountant) == ("sensitive_attribute", "replace_one", "rdp")
    assert sp.epsilon == pytest.approx(At.attribute_selection_epsilon(want, None, 1e-5), rel=1e-12)
    assert sp.epsilon <= At.attribute_selection_epsilon(np.minimum(a, b), None, 1e-5)


def _fermi_cfg(**kw):
    return F.FermiConfig(model=M.logistic(), num_groups=2, steps=30, batch_size=100, delta=1e-5, **kw)


def test_fermi_and_stochastic_pfld_attribute_spends():
    cfg = _fermi_cfg()
    hp = F.FermiHparams(lam=1.0, noise_theta=1.5, noise_w=6.0)
    part = At.poisson_participation(30, 0.1)
    mu = 2.0 * math.sqrt(1.5**-2 + 6.0**-2)
    a = At.membership_visible_rdp(At.ORDERS, mu, part, extra_mu=math.sqrt(2.0) / cfg.count_noise_multiplier)
    b = At.replace_rdp_from_add_remove(F.spend(cfg, N, hp).event, At.ORDERS)
    o = np.asarray(At.ORDERS)  # (c) by hand: 30 steps of both updates' Gaussians, then the histogram's
    c = 30 * R.subsampled_gaussian_replace_rdp(0.1, (1.5**-2 + 6.0**-2) ** -0.5, o) \
        + o * 2 / cfg.count_noise_multiplier**2
    want = At.attribute_selection_epsilon(np.minimum(a, np.minimum(b, c)), None, 1e-5)
    assert want <= At.attribute_selection_epsilon(np.minimum(a, b), None, 1e-5)
    for mod in (F, pfld):
        sp = mod.attribute_spend(pfld.config(model=M.logistic(), num_groups=2, steps=30, batch_size=100,
                                             delta=1e-5) if mod is pfld else cfg, N, hp)
        assert sp.epsilon == pytest.approx(want, rel=1e-12) and sp.unit == "sensitive_attribute"
    zero = F.attribute_spend(cfg, N, F.FermiHparams(lam=0.0, noise_theta=1.5, noise_w=6.0))
    assert (zero.epsilon, zero.delta) == (0.0, 0.0)
    with pytest.raises(ValueError, match="all-features"):
        F.attribute_change_rdp(_fermi_cfg(privacy_unit="sensitive_attribute"), N, 1.5, 6.0)


def test_theorem33_record_understates_dpfermi_own_attribute_unit():
    """DP-FERMI's sensitive-attribute run (membership visible) at the noise Theorem 3.3's amplified
    record calls epsilon = 1: the exact epsilon is several times larger."""
    common = dict(model=M.logistic(), num_groups=2, steps=200, batch_size=100, delta=1e-5, w_relative=4.0)
    amp = F.calibrate(F.FermiConfig(**common), N, (1.0, 1e-5))
    paper = F.FermiConfig(privacy_unit="sensitive_attribute", **common)
    recorded = A.epsilon_of_event(F.theorem33_attribute_event(paper, N, amp.noise_theta, amp.noise_w), 1e-5)
    assert recorded == pytest.approx(1.0, abs=1e-3)
    assert F.spend(paper, N, amp).epsilon > 2.0 * recorded
