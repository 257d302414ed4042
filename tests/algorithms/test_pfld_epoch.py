"""PF-LD with per-epoch dual updates (Tran, Fioretto, Van Hentenryck): the trio, what fit draws
against what spend states, the dual update, the constraint algebra and a vmap over lambda."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import dp_event as E

from dpfair_jax import models as M
from dpfair_jax.algorithms import pfld
from dpfair_jax.algorithms import pfld_epoch as PE
from dpfair_jax.algorithms import sgda
from dpfair_jax.data import make_dataset
from dpfair_jax.fairness import ermi
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import mechanisms as Mech
from dpfair_jax.privacy import sampling as Smp

N = 400


def _data(n: int = N, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 3)) + 1.2 * s[:, None]
    y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0.9).astype(int)
    return make_dataset(x, y, s)


def _cfg(**kw) -> PE.PFLDEpochConfig:
    base = dict(model=M.logistic(), num_groups=2, epochs=4, batch_size=50, delta=1e-5)
    return PE.PFLDEpochConfig(**{**base, **kw})


def test_calibrate_hits_target_and_spend_is_the_event():
    cfg = _cfg()
    for eps in (2.0,):
        hp = PE.calibrate(cfg, N, (eps, 1e-5), hparams=PE.PFLDEpochHparams(lr_dual=2.0))
        assert hp.lr_dual == 2.0 and hp.noise_violation == pytest.approx(cfg.violation_noise_ratio * hp.noise_theta)
        sp = PE.spend(cfg, N, hp)
        assert 0.99 * eps <= sp.epsilon <= eps
        # an independent composition of the same mechanisms (PLD accountant) agrees
        ev = E.ComposedDpEvent([A.dpsgd_event(hp.noise_theta, 50 / N, 4 * 8),
                                E.SelfComposedDpEvent(E.GaussianDpEvent(hp.noise_violation), 4)])
        assert A.epsilon_of_event(ev, 1e-5, accountant="pld") <= sp.epsilon * 1.01
        assert sp.relation == "add_remove" and sp.unit == "example"
    with pytest.raises(ValueError, match="epsilon"):  # a finite target only
        PE.calibrate(cfg, N, (math.inf, 1e-5))
    with pytest.raises(ValueError, match="config.delta"):
        PE.calibrate(cfg, N, (1.0, 1e-6))


@pytest.mark.parametrize("n, epochs, batch", [(400, 4, 50), (430, 3, 60)])
def test_spend_is_dp_accounting_on_the_run_written_out(n, epochs, batch):
    """The spend against dp-accounting on the run written out here from the config (not through
    the kit's accounting): ``epochs * ceil(n / batch)`` Poisson(batch / n) steps of the theta Gaussian
    and ``epochs`` full-data violation Gaussians, RDP under add/remove at delta minus the padding's
    truncation charge ``(1 + e^eps) T P(Binomial(n + 1, q) > B)`` at the padded width."""
    import dp_accounting
    from scipy import stats

    cfg = _cfg(epochs=epochs, batch_size=batch)
    zt, zv = 1.4, 3.0
    sp = PE.spend(cfg, n, PE.PFLDEpochHparams(noise_theta=zt, noise_violation=zv))
    T = epochs * math.ceil(n / batch)  # an epoch is ceil(n / batch) steps (fit runs that many)
    hand = E.ComposedDpEvent([
        E.SelfComposedDpEvent(E.PoissonSampledDpEvent(batch / n, E.GaussianDpEvent(zt)), T),
        E.SelfComposedDpEvent(E.GaussianDpEvent(zv), epochs)])
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(hand)
    B = cfg.sgda_config(n).padded_batch(n)
    trunc = (1.0 + math.exp(sp.epsilon)) * T * stats.binom.sf(B, n + 1, batch / n) if B < n else 0.0
    # the charge comes out of delta: epsilon is stated at delta - charge, the total is config.delta
    # (a fixed point: the stated epsilon is at least the accountant's at delta - charge(epsilon))
    need = acc.get_epsilon(cfg.delta - trunc)
    assert need <= sp.epsilon <= need * (1 + 1e-6)
    assert sp.delta == cfg.delta


def test_spend_matches_what_fit_draws(monkeypatch):
    """Spies read, while fit traces, the primal DP-SGD's sampling, steps, clip and noise and the
    violation release's noise and clip; the spend's DpEvent must describe exactly those."""
    ds, cfg = _data(), _cfg()
    hp = PE.PFLDEpochHparams(lam=1.0, clip_theta=0.7, clip_violation=0.8, noise_theta=1.3, noise_violation=9.0)
    sgda_calls, noise_calls, clip_calls = [], [], []
    orig_sgda, orig_noise, orig_clip = sgda.dpsgda, Mech.gaussian_noise, PE.C.clip_per_example

    def spy_sgda(key, data, theta0, w0, hparams, config, **kw):
        sgda_calls.append((hparams, config, kw))
        return orig_sgda(key, data, theta0, w0, hparams, config, **kw)

    def spy_noise(key, shape, std, dtype=jnp.float32):
        noise_calls.append((shape, float(std)))
        return orig_noise(key, shape, std, dtype)

    def spy_clip(tree, clip):
        clip_calls.append(float(clip))
        return orig_clip(tree, clip)

    monkeypatch.setattr(sgda, "dpsgda", spy_sgda)
    monkeypatch.setattr(Mech, "gaussian_noise", spy_noise)
    monkeypatch.setattr(PE.C, "clip_per_example", spy_clip)
    res = PE.fit(jax.random.key(0), ds, hp, cfg)
    sp = PE.spend(cfg, N, hp)

    # the run: a scan over epochs (traced once), each one primal DP-SGD and one release
    assert len(sgda_calls) == 1 and len(noise_calls) == 1 and len(clip_calls) == 1
    assert res.diagnostics["violations"].shape[0] == cfg.epochs
    h, sc, kw = sgda_calls[0]
    assert sc.sampling == "poisson" and sc.sensitivity_factor == 1.0 and kw.get("public_loss") is None
    assert float(h.noise_theta) == 1.3 and float(h.clip_theta) == 0.7
    assert float(h.noise_w) == 0.0 and float(h.lr_w) == 0.0  # the ascent variable is frozen: nothing released
    steps_run = cfg.epochs * sc.steps
    # the release: a clipped sum (sensitivity clip under add/remove) plus N(0, std^2)
    shape, std = noise_calls[0]
    assert shape == (1, 2, 2) and clip_calls[0] == pytest.approx(0.8)
    release_multiplier = std / clip_calls[0]

    # the spend's event, walked field by field
    steps_ev, rel_ev = sp.event.events
    assert isinstance(steps_ev, E.SelfComposedDpEvent) and steps_ev.count == steps_run
    assert isinstance(steps_ev.event, E.PoissonSampledDpEvent)
    assert steps_ev.event.sampling_probability == pytest.approx(sc.batch_size / N)
    assert steps_ev.event.event.noise_multiplier == pytest.approx(1.3)  # std / (clip * factor 1)
    assert isinstance(rel_ev, E.SelfComposedDpEvent) and rel_ev.count == cfg.epochs
    assert rel_ev.event.noise_multiplier == pytest.approx(release_multiplier)
    # delta: the Poisson padding the run used, its truncation charged
    B = sc.padded_batch(N)
    trunc = Smp.truncation_delta(N, sc.batch_size / N, B, steps_run, sp.epsilon) if B < N else 0.0
    assert sp.delta == pytest.approx(cfg.delta + trunc, rel=1e-12)
    assert float(res.diagnostics["truncated_steps"]) == 0.0


def test_constraint_algebra_against_independent_references():
    rng = np.random.default_rng(3)
    n, k, l = 300, 3, 2
    logits = jnp.asarray(rng.normal(size=n), jnp.float32)
    s = jnp.asarray(rng.integers(0, k, n))
    y = jnp.asarray(rng.integers(0, l, n))
    nu = jnp.asarray(rng.normal(size=(l, k, l)), jnp.float32)

    @jax.jit
    def parts(logits, s, y, nu):
        probs = ermi.soft_predictions(logits)
        J = PE.soft_counts(probs, s, jnp.zeros(n, jnp.int32), 1, k, jnp.inf)
        Jc = PE.soft_counts(probs, s, y, l, k, jnp.inf)
        hc, pc = PE.violations_from_counts(Jc)
        pen = jax.vmap(PE.penalty_one, in_axes=(0, 0, 0, None, None))(probs, s, y, nu, pc)
        return (PE.violations_from_counts(J), pfld.violations(probs, s, k), Jc, hc, jnp.mean(pen),
                PE.soft_counts(probs, s, y, l, k, 1.0), PE.soft_counts(probs, s, y, l, k, 0.5))

    (h, p), ref, Jc, hc, pen, J1, J05 = parts(logits, s, y, nu)
    # exact counts -> violations equal pfld.violations (P(yhat=j|s=g) - P(yhat=j)), another module's formula
    np.testing.assert_allclose(h[0], ref, atol=1e-6)
    np.testing.assert_allclose(p[0], np.bincount(np.asarray(s), minlength=k) / n, atol=1e-6)
    # the per-example penalty averages to sum_{c,g,j} p(c) nu_{c,g,j} h_{c,g,j} (EO: c = y)
    p_c = np.bincount(np.asarray(y), minlength=l) / n
    np.testing.assert_allclose(float(pen), float(np.sum(p_c[:, None, None] * np.asarray(nu) * np.asarray(hc))),
                               rtol=1e-5)
    # each example's contribution has norm |F|_2 <= 1: clipping at 1 changes nothing, at 0.5 it does
    np.testing.assert_allclose(J1, Jc, rtol=1e-6)
    assert float(jnp.sum(J05)) < float(jnp.sum(Jc)) - 1.0


def test_dual_update_and_vmap_over_lambda_and_fairness_effect():
    """Noise off: multipliers follow clip(lam + lr_dual |h_hat|, 0, radius) epoch by epoch from the
    released violations; a jitted vmap over lambda equals the separate fits; lambda lowers the
    violation."""
    ds, cfg = _data(), _cfg(epochs=10)
    base = PE.PFLDEpochHparams(lr_theta=0.5, lr_dual=2.0, clip_theta=2.0, radius=5.0)
    lams = jnp.asarray([0.0, 1.0], jnp.float32)

    def run(lam):
        r = PE.fit(jax.random.key(1), ds, PE.PFLDEpochHparams(**{**base.__dict__, "lam": lam}), cfg, validate=False)
        probs = ermi.soft_predictions(cfg.model.apply(r.params, ds.x))
        return r, jnp.max(jnp.abs(pfld.violations(probs, ds.s, 2)))

    (res, viol) = jax.jit(jax.vmap(run))(lams)
    one, _ = run(1.0)
    np.testing.assert_allclose(res.params["w"][1], one.params["w"], rtol=1e-5, atol=1e-6)
    lam_mult = np.zeros((1, 2, 2))
    for e in range(cfg.epochs):
        lam_mult = np.clip(lam_mult + 2.0 * np.abs(np.asarray(res.diagnostics["violations"][1, e])), 0.0, 5.0)
    np.testing.assert_allclose(res.diagnostics["multipliers"][1], lam_mult, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(res.diagnostics["multipliers"]) >= 0) and np.all(np.asarray(res.diagnostics["multipliers"]) <= 5.0)
    assert float(viol[1]) < 0.5 * float(viol[0])


def test_bad_inputs_name_the_field():
    ds, cfg = _data(), _cfg()
    for field, value in (("lr_dual", -1.0), ("noise_violation", float("nan")), ("tol", -0.1),
                         ("radius", 0.0), ("clip_violation", 0.0)):
        with pytest.raises(ValueError, match=field):
            PE.fit(jax.random.key(0), ds, PE.PFLDEpochHparams(**{field: value}), cfg)
    with pytest.raises(ValueError, match="num_classes"):
        _cfg(model=M.multinomial_logistic(3)).validate()
    with pytest.raises(ValueError, match="batch_size"):
        PE.fit(jax.random.key(0), ds, PE.PFLDEpochHparams(), _cfg(batch_size=N + 1))
