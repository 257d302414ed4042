"""DP-FERMI (paper 004, Algorithm 1): exact limits, calibrated noise, variants, sweeps, closed forms."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms.fermi import algorithm as FA
from dpfair_jax.algorithms.fermi import theory as FT
from dpfair_jax.data import make_dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.fairness import evaluate



def _privacy(cfg, n, zt, zw, delta):
    """fermi's spend at these multipliers and delta (the trio's spend with the delta in the config)."""
    return F.spend(dataclasses.replace(cfg, delta=delta), n, F.FermiHparams(noise_theta=zt, noise_w=zw))


def _calibrate_noise(cfg, n, epsilon, delta, w_relative=1.0):
    """``(noise_theta, noise_w)`` of fermi's calibrate for ``(epsilon, delta)`` at ``w_relative``."""
    hp = F.calibrate(dataclasses.replace(cfg, delta=delta, w_relative=w_relative), n, (epsilon, delta))
    return hp.noise_theta, hp.noise_w


def _data(n=120, d=4, k=2, l=2, seed=0, zero_x=False):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, k, n)
    s[:k] = np.arange(k)
    x = rng.normal(size=(n, d)) + 0.8 * s[:, None]
    y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0.5).astype(int) if l == 2 else rng.integers(0, l, n)
    if zero_x:
        x = np.zeros_like(x)
    return make_dataset(x, y, s, num_groups=k, num_classes=l)


def _reference_gda(ds, lam, lr_t, lr_w, T, radius, fairness="dp"):
    """Plain full-batch two-timescale GDA on mean(loss) + lam * mean(psi), by autodiff."""
    x, y, s = ds.x, ds.y, ds.s
    if fairness == "dp":
        P = E.group_frequencies(s, ds.num_groups)[None]
        c = jnp.zeros_like(s)
    else:
        P = E.conditional_group_frequencies(s, y, ds.num_groups, 2)
        c = y

    def obj(theta, W):
        z = x @ theta["w"][:, 0] + theta["b"][0]
        probs = E.soft_predictions(z)
        task = jnp.mean(jnp.logaddexp(0.0, z) - y * z)
        psis = jax.vmap(E.psi)(probs, s, W[c], P[c])
        return task + lam * jnp.mean(psis)

    theta = {"w": jnp.zeros((x.shape[1], 1)), "b": jnp.zeros((1,))}
    W = jnp.zeros((P.shape[0], ds.num_groups, 2))
    grad = jax.jit(jax.grad(obj, argnums=(0, 1)))
    for _ in range(T):
        gt, gw = grad(theta, W)
        theta = jax.tree_util.tree_map(lambda a, g: a - lr_t * g, theta, gt)
        W = W + lr_w * gw
        nrm = jnp.sqrt(jnp.sum(W**2))
        W = W * jnp.minimum(1.0, radius / nrm)
    return theta, W


@pytest.mark.parametrize("unit,fairness", [("sensitive_attribute", "dp"), ("all_features", "eo")])
def test_eps_inf_equals_nonprivate_two_timescale_gda(unit, fairness):
    ds = _data()
    n = ds.n
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=25, batch_size=n,
                        privacy_unit=unit, fairness=fairness, group_frequencies="public")
    hp = F.FermiHparams(lam=2.0, lr_theta=0.3, lr_w=0.5, clip_theta=jnp.inf, clip_w=jnp.inf,
                        noise_theta=0.0, noise_w=0.0, radius=0.4)
    p_s = (E.group_frequencies(ds.s, 2) if fairness == "dp"
           else E.conditional_group_frequencies(ds.s, ds.y, 2, 2))  # the exact ones, as public values
    res = jax.jit(lambda k: F.fit(k, ds, hp, cfg, validate=False, p_s=p_s))(jax.random.key(0))
    th, W = _reference_gda(ds, 2.0, 0.3, 0.5, 25, 0.4, fairness)
    np.testing.assert_allclose(res.params["w"], th["w"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res.diagnostics["W"], W, rtol=1e-4, atol=1e-5)
    assert float(jnp.sqrt(jnp.sum(W**2))) == pytest.approx(0.4, rel=1e-4)  # projection was active


def _np_clip(g, c):
    nrm = math.sqrt(float(np.sum(g * g)))
    return (g, 0.0) if nrm <= c else (g * (c / nrm), 1.0)


def _np_fermi(x, y, s, P, c, theta0, lam, lr_t, lr_w, clip_t, clip_w, radius, steps, unit):
    """Full-batch, noise-free DP-FERMI (corrected variant) for a one-logit logistic model in
    float64 NumPy, one example at a time. Gradients by hand: with p = sigmoid(z), F = [1-p, p],
    dF/dz = p(1-p) [-1, 1]; task d/dz = p - y; quad = -sum_j (sum_r W_rj^2) F_j - 1 and
    lin = 2 sum_j W_{s j} F_j / sqrt(P_s) (the s-dependent part), so d quad/dW_rj = -2 W_rj F_j
    and d lin/dW_{s j} = 2 F_j / sqrt(P_s). All features: clip(grad of task + lam psi, C_t) in
    theta and clip(lam grad_W psi, lam C_w); sensitive attribute: only lam lin is clipped (to
    lam C_t, lam C_w), the task and lam quad enter exactly. Then theta -= lr_t / n sum,
    W += lr_w / n sum, W projected on the Frobenius ball. Returns (theta [d + 1] with the
    intercept last, W, clipped indicators [steps, n, 2])."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    th = np.asarray(theta0, np.float64).copy()
    W = np.zeros((P.shape[0], P.shape[1], 2))
    clipped = np.zeros((steps, n, 2))
    for t in range(steps):
        g_th, g_W = np.zeros_like(th), np.zeros_like(W)
        for i in range(n):
            xa = np.r_[x[i], 1.0]
            p = 1.0 / (1.0 + math.exp(-float(xa @ th)))
            Fv, dF = np.array([1.0 - p, p]), p * (1.0 - p) * np.array([-1.0, 1.0])
            Wc, inv = W[c[i]], 1.0 / math.sqrt(P[c[i], s[i]])
            dquad_z, dlin_z = -(Wc**2).sum(0) @ dF, 2.0 * inv * Wc[s[i]] @ dF
            dquad_W, dlin_W = np.zeros_like(W), np.zeros_like(W)
            dquad_W[c[i]] = -2.0 * Wc * Fv[None]
            dlin_W[c[i], s[i]] = 2.0 * inv * Fv
            dtask_z = p - y[i]
            if unit == "all_features":
                a, clipped[t, i, 0] = _np_clip((dtask_z + lam * (dquad_z + dlin_z)) * xa, clip_t)
                b, clipped[t, i, 1] = _np_clip(lam * (dquad_W + dlin_W), lam * clip_w)
            else:
                a, clipped[t, i, 0] = _np_clip(lam * dlin_z * xa, lam * clip_t)
                b, clipped[t, i, 1] = _np_clip(lam * dlin_W, lam * clip_w)
                a, b = a + (dtask_z + lam * dquad_z) * xa, b + lam * dquad_W
            g_th, g_W = g_th + a, g_W + b
        th = th - lr_t * g_th / n
        W = W + lr_w * g_W / n
        W = W * min(1.0, radius / math.sqrt(float(np.sum(W**2))))
    return th, W, clipped


def _clip_data(n=24, d=3, k=3, seed=21):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, k, n)
    s[:k] = np.arange(k)
    x = rng.normal(size=(n, d)) + 0.8 * s[:, None]
    y = (x[:, 0] + 0.5 * rng.normal(size=n) > 0.8).astype(int)
    return make_dataset(x, y, s, num_groups=k, num_classes=2)


_THETA0 = np.array([0.4, -0.3, 0.2, -0.1])  # w (d = 3), then b


def _fit_against_numpy(ds, cfg, clip_t, clip_w, P, p_s=None, steps=3):
    """Run fit (full Poisson batch: q = 1, zero noise, finite clips) and the NumPy loop; compare."""
    lam, lr_t, lr_w, radius = 2.0, 0.5, 0.8, 0.8
    hp = F.FermiHparams(lam=lam, lr_theta=lr_t, lr_w=lr_w, clip_theta=clip_t, clip_w=clip_w,
                        noise_theta=0.0, noise_w=0.0, radius=radius)
    params0 = {"w": jnp.asarray(_THETA0[:-1, None], jnp.float32), "b": jnp.asarray(_THETA0[-1:], jnp.float32)}
    res = F.fit(jax.random.key(4), ds, hp, cfg, params0=params0, p_s=p_s)
    x, y, s = (np.asarray(a) for a in (ds.x, ds.y, ds.s))
    c = y if cfg.fairness == "eo" else np.zeros_like(s)
    th, W, clipped = _np_fermi(x, y, s, P, c, _THETA0, lam, lr_t, lr_w, clip_t, clip_w, radius, steps,
                               cfg.privacy_unit)
    got = np.r_[np.asarray(res.params["w"]).ravel(), np.asarray(res.params["b"])]
    np.testing.assert_allclose(got, th, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(res.diagnostics["W"]), W, rtol=1e-5, atol=1e-6)
    # the reference exercised both sides of each clip, and the projection
    assert 0.1 < clipped[..., 0].mean() < 0.9 and 0.1 < clipped[..., 1].mean() < 0.9, clipped.mean((0, 1))
    assert float(np.sqrt(np.sum(W**2))) == pytest.approx(radius)
    # the run's clipped fractions (mean over steps of the batch fraction) are the reference's
    assert float(res.diagnostics["clipped_frac_theta"]) == pytest.approx(clipped[..., 0].mean(), abs=1e-6)
    assert float(res.diagnostics["clipped_frac_w"]) == pytest.approx(clipped[..., 1].mean(), abs=1e-6)
    return res


@pytest.mark.parametrize("unit,fairness,clip_t,clip_w", [("all_features", "eo", 1.0, 2.0),
                                                         ("sensitive_attribute", "dp", 0.1, 2.5)])
def test_noise_free_steps_with_finite_clips_match_numpy_per_example_loop(unit, fairness, clip_t, clip_w):
    """Three noise-free full-batch steps with finite clips (some examples clipped, some not, in
    theta and in W; the W projection active) against a per-example NumPy loop with gradients
    written by hand, under both units; exact frequencies passed as public values."""
    ds = _clip_data()
    k, n = ds.num_groups, ds.n
    s, y = np.asarray(ds.s), np.asarray(ds.y)
    if fairness == "dp":
        P = (np.bincount(s, minlength=k) / n)[None]
    else:
        P = np.stack([np.bincount(s[y == j], minlength=k) / np.sum(y == j) for j in range(2)])
    cfg = F.FermiConfig(model=M.logistic(), num_groups=k, steps=3, batch_size=n, privacy_unit=unit,
                        fairness=fairness, group_frequencies="public")
    _fit_against_numpy(ds, cfg, clip_t, clip_w, P, p_s=jnp.asarray(P[0] if fairness == "dp" else P, jnp.float32))


def test_noise_free_steps_on_the_default_noisy_frequencies_match_numpy():
    """The default configuration (all features, Poisson, noisy frequencies): the run draws its
    [labels x groups] histogram with the key folded with the count tag; the same draw, scaled by
    hand (noise multiplier z times the add/remove sensitivity 1), clamped at 1 count and
    normalized in NumPy gives the P of the NumPy loop, which must reproduce the run."""
    ds = _clip_data()
    k, n, z = ds.num_groups, ds.n, 2.0
    cfg = F.FermiConfig(model=M.logistic(), num_groups=k, steps=3, batch_size=n, count_noise_multiplier=z)
    assert cfg.group_frequencies == "noisy" and cfg.relation() == "add_remove"
    s, y = np.asarray(ds.s), np.asarray(ds.y)
    exact = np.bincount(y * k + s, minlength=2 * k).astype(np.float64)
    draw = np.asarray(jax.random.normal(jax.random.fold_in(jax.random.key(4), FA._COUNT_KEY), (2 * k,)), np.float64)
    counts = np.maximum(exact + z * 1.0 * draw, 1.0).reshape(2, k)
    P = (counts.sum(0) / counts.sum())[None]
    assert np.max(np.abs(P[0] - np.bincount(s, minlength=k) / n)) > 0.02  # the noise matters here
    _fit_against_numpy(ds, cfg, 1.0, 2.0, P)


@pytest.mark.slow
@pytest.mark.parametrize("fairness", ["dp", "eo"])
def test_ascent_alone_reaches_w_star_dp_and_eo(fairness):
    """With theta frozen and exact public frequencies, full-batch ascent with step 1 on the
    quadratic psi reaches the closed-form maximizer W* (DP: Lemma D.1; EO: one W* per label) and
    psi at W* is the ERMI (the closed forms are pinned in test_ermi)."""
    ds = _data(n=90, k=3, seed=1)
    p_s = (E.group_frequencies(ds.s, 3) if fairness == "dp"
           else E.conditional_group_frequencies(ds.s, ds.y, 3, 2))
    cfg = F.FermiConfig(model=M.logistic(init="lecun_normal"), num_groups=3, steps=50,
                        batch_size=ds.n, fairness=fairness, projection="none", group_frequencies="public")
    hp = F.FermiHparams(lam=1.0, lr_theta=1e-30, lr_w=1.0, clip_theta=jnp.inf, clip_w=jnp.inf)
    res = F.fit(jax.random.key(2), ds, hp, cfg, p_s=p_s)
    probs = E.soft_predictions(cfg.model.apply(res.params, ds.x))
    if fairness == "dp":
        want = E.w_star(probs, ds.s, 3)[None]
        target = E.ermi(probs, ds.s, 3)
        P = p_s[None]
        c = jnp.zeros_like(ds.s)
    else:
        want = E.w_star_eo(probs, ds.s, ds.y, 3, 2)
        target = E.ermi_eo(probs, ds.s, ds.y, 3, 2)
        P = p_s
        c = ds.y
    assert float(jnp.max(jnp.abs(want))) > 0.1  # a non-trivial maximizer
    np.testing.assert_allclose(res.diagnostics["W"], want, atol=1e-4)
    val = jnp.mean(jax.vmap(E.psi)(probs, ds.s, res.diagnostics["W"][c], P[c]))
    assert float(val) == pytest.approx(float(target), abs=1e-5)


def _one_step_noise(cfg, lam, z_t, z_w, c_t=0.7, c_w=1.3, lr_t=1.0, lr_w=1.0, reps=600):
    ds = _data(n=60, zero_x=True)  # zero features: theta gradients vanish exactly
    hp = F.FermiHparams(lam=lam, lr_theta=lr_t, lr_w=lr_w, clip_theta=c_t, clip_w=c_w,
                        noise_theta=z_t, noise_w=z_w, radius=jnp.inf)
    hp0 = dataclasses.replace(hp, noise_theta=0.0, noise_w=0.0)

    def diff(k):
        a = F.fit(k, ds, hp, cfg, validate=False)
        b = F.fit(k, ds, hp0, cfg, validate=False)  # same key: same batch and init
        return a.params["w"].ravel() - b.params["w"].ravel(), (a.diagnostics["W"] - b.diagnostics["W"]).ravel()

    dt, dw = jax.jit(jax.vmap(diff))(jax.random.split(jax.random.key(3), reps))
    return np.asarray(dt).ravel(), np.asarray(dw).ravel()


def _check_std(sample, want):
    sd = float(np.std(sample))
    assert abs(sd - want) < 5 * want / math.sqrt(2 * sample.size), (sd, want)


@pytest.mark.parametrize("variant", ["corrected", "paper"])
def test_added_noise_has_calibrated_std_scaled_by_lambda(variant):
    """Zero gradients, one step, sensitive-attribute unit (substitution: sensitivity 2C): the
    measured noise std in theta is lam z_t C_t 2 / m, in W lam z_w C_w 2 / m (corrected) or
    z_w C_w 2 / m (literal Alg. 1). The literal run also uses the code's batch clipping
    (threshold m C), which must leave the noise unchanged."""
    m = 20
    clip_mode = "per_example" if variant == "corrected" else "official_batch"
    cfg = F.FermiConfig(model=M.logistic(fit_intercept=False), num_groups=2, steps=1, batch_size=m,
                        variant=variant, projection="none", clip_mode=clip_mode,
                        privacy_unit="sensitive_attribute")
    lam, z_t, z_w, c_t, c_w = 2.5, 0.8, 1.7, 0.7, 1.3
    dt, dw = _one_step_noise(cfg, lam, z_t, z_w, c_t, c_w)
    _check_std(dt, lam * z_t * c_t * 2.0 / m)  # theta noise: lam * u_t (Alg. 1 line 5)
    want_w = (lam if variant == "corrected" else 1.0) * z_w * c_w * 2.0 / m
    _check_std(dw, want_w)


@pytest.mark.parametrize("sampling,factor", [("poisson", 1.0), ("fixed_size", 2.0)])
def test_all_features_noise_std(sampling, factor):
    """All features (the default unit): the whole gradient is clipped to C_t (not scaled by lam) in
    theta and lam C_w in W; Poisson sampling is add/remove (sensitivity C), fixed-size batches
    replace-one (2C). Written out: std_theta = z_t C_t f / m, std_W = lam z_w C_w f / m."""
    m = 20
    cfg = F.FermiConfig(model=M.logistic(fit_intercept=False), num_groups=2, steps=1, batch_size=m,
                        projection="none", sampling=sampling)
    lam, z_t, z_w, c_t, c_w = 2.5, 0.8, 1.7, 0.7, 1.3
    dt, dw = _one_step_noise(cfg, lam, z_t, z_w, c_t, c_w)
    _check_std(dt, z_t * c_t * factor / m)
    _check_std(dw, lam * z_w * c_w * factor / m)


@pytest.mark.slow
def test_one_compiled_sweep_equals_single_runs():
    ds = _data(n=100, k=3, l=3, seed=4)  # multi-class target, three groups
    cfg = F.FermiConfig(model=M.multinomial_logistic(3), num_groups=3, num_classes=3, steps=15,
                        batch_size=25)
    lams = jnp.asarray([0.0, 0.5, 2.0, 1.0])
    zs = jnp.asarray([0.0, 1.0, 3.0, 0.5])

    def run(key, lam, z):
        hp = F.FermiHparams(lam=lam, lr_theta=0.2, lr_w=0.3, noise_theta=z, noise_w=z)
        r = F.fit(key, ds, hp, cfg, validate=False)
        return r.params["w"], r.diagnostics["W"]

    keys = jax.random.split(jax.random.key(5), 4)
    gw, gW = jax.jit(jax.vmap(run))(keys, lams, zs)
    single = jax.jit(run)
    for i in range(4):
        w1, W1 = single(keys[i], lams[i], zs[i])
        np.testing.assert_allclose(gw[i], w1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gW[i], W1, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_mlp_equalized_odds_multiclass_runs():
    ds = _data(n=60, k=3, l=3, seed=6)
    cfg = F.FermiConfig(model=M.mlp(hidden=(8,), out=3), num_groups=3, num_classes=3, steps=2,
                        batch_size=20, fairness="eo")
    res = F.fit(jax.random.key(7), ds, F.FermiHparams(noise_theta=1.0, noise_w=1.0), cfg)
    assert res.diagnostics["W"].shape == (3, 3, 3)
    assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree_util.tree_leaves(res))


@pytest.mark.slow
def test_cnn_runs():
    rng = np.random.default_rng(0)
    imgs = make_dataset(rng.normal(size=(16, 64)), rng.integers(0, 3, 16), rng.integers(0, 2, 16),
                        num_groups=2, num_classes=3)
    imgs = imgs.replace(x=imgs.x.reshape(16, 8, 8, 1))
    cnn = M.cnn(num_classes=3, channels=(4,), image_shape=(8, 8, 1))
    cfg = F.FermiConfig(model=cnn, num_groups=2, num_classes=3, steps=2, batch_size=8)
    res = F.fit(jax.random.key(8), imgs, F.FermiHparams(noise_theta=0.5, noise_w=0.5), cfg,
                validate=False)
    assert np.isfinite(float(evaluate(cnn, res.params, imgs, 3)["error"]))


@pytest.mark.parametrize("unit", ["all_features", "sensitive_attribute"])
def test_calibrate_and_privacy_round_trip(unit):
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=200, batch_size=100, privacy_unit=unit)
    zt, zw = _calibrate_noise(cfg, 2000, 1.0, 1e-5, w_relative=2.0)
    assert zw == pytest.approx(2 * zt)
    spend = _privacy(cfg, 2000, zt, zw, 1e-5)
    assert spend.epsilon == pytest.approx(1.0, rel=1e-4)
    assert spend.unit == ("example" if unit == "all_features" else "sensitive_attribute")
    assert spend.relation == ("add_remove" if unit == "all_features" else "replace_one")
    assert spend.delta < 1.1e-5
    # both updates are composed: one Gaussian at z alone would be cheaper
    from dpfair_jax.privacy import accounting as A
    assert A.dpsgd_epsilon(zt, 0.05, 200, 1e-5) < 1.0
    for bad in (math.inf, -1.0):  # a finite, positive target only
        with pytest.raises(ValueError, match="epsilon"):
            _calibrate_noise(cfg, 2000, bad, 1e-5)


def test_all_features_epsilon_matches_dp_accounting_called_directly():
    """The default unit's spend against dp-accounting's own events: each of T steps is a
    PoissonSampledDpEvent(q) of a ComposedDpEvent of the two Gaussians (z_theta, z_w) released on
    that batch, composed T times and (default, noisy frequencies) with the GaussianDpEvent of the
    histogram; RDP under add/remove. calibrate's multipliers spend the target on the same events."""
    import dp_accounting as dpa
    from dp_accounting import rdp

    n, m, T, zt, zw, delta = 5000, 100, 300, 1.1, 1.7, 1e-5

    def direct(z_theta, z_w, histogram, at=delta):
        step = dpa.PoissonSampledDpEvent(m / n, dpa.ComposedDpEvent([dpa.GaussianDpEvent(z_theta),
                                                                     dpa.GaussianDpEvent(z_w)]))
        events = [dpa.SelfComposedDpEvent(step, T)] + ([dpa.GaussianDpEvent(histogram)] if histogram else [])
        acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
        return acc.compose(dpa.ComposedDpEvent(events)).get_epsilon(at)

    eps = {}
    for freq in ("noisy", "public"):
        cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=T, batch_size=m, group_frequencies=freq)
        assert cfg.privacy_unit == "all_features" and cfg.sampling == "poisson"
        hist = cfg.count_noise_multiplier if freq == "noisy" else None
        spend = _privacy(cfg, n, zt, zw, delta)
        eps[freq] = spend.epsilon
        assert spend.relation == "add_remove" and spend.unit == "example"
        assert spend.delta == delta  # the padding's truncation charge is taken out of delta
        from scipy import stats

        B = cfg.sgda_config().padded_batch(n)  # (1 + e^eps) T P(Binomial(n + 1, q) > B), written out
        trunc = (1 + math.exp(spend.epsilon)) * T * stats.binom.sf(B, n + 1, m / n) if B < n else 0.0
        assert trunc < 1e-10
        # the mechanism is accounted at delta - trunc (within the 1e-9 relative step of the fixed point)
        assert spend.epsilon == pytest.approx(direct(zt, zw, hist, delta - trunc), rel=2e-9)
    assert eps["noisy"] > eps["public"]
    # both Gaussians count: the theta update alone (w noise -> huge) would claim much less
    assert eps["public"] > 1.2 * direct(zt, 1e6, None)
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=T, batch_size=m)
    zt2, zw2 = _calibrate_noise(cfg, n, 2.0, delta, w_relative=1.5)
    assert zw2 == pytest.approx(1.5 * zt2)
    assert direct(zt2, zw2, cfg.count_noise_multiplier) == pytest.approx(2.0, rel=1e-3)
    assert direct(zt2, zw2, cfg.count_noise_multiplier) <= 2.0 * (1 + 1e-6)


LD = {"lipschitz_theta": 5.0, "w_bound": 5.0}  # L = D = 5, the paper's and the code's values


def test_theorem33_noise_matches_hand_computation():
    # Parkinsons (notes II.6): n = 4406, T = 1000, delta = 1/n^2, rho = 0.318, L = D = 5
    n, T, rho = 4406, 1000, 0.318
    for eps, sw_note, st_note in [(0.5, 0.417, 10.43), (1, 0.209, 5.22), (3, 0.070, 1.74), (9, 0.023, 0.58)]:
        st, sw = FT.dpfermi_noise(eps, 1 / n**2, n, T, rho, composition="paper", check_assumptions=False, **LD)
        hand_w = math.sqrt(16 * T * 2 * math.log(n) / (eps**2 * n**2 * rho))
        assert sw == pytest.approx(hand_w, rel=1e-12)
        assert st == pytest.approx(25 * hand_w, rel=1e-12)
        assert sw == pytest.approx(sw_note, abs=0.0015) and st == pytest.approx(st_note, abs=0.015)
    # Adult: n = 33916, T = 200 * 34 = 6800, rho ~ 0.325
    out = FT.official_dpfermi_calibration(33916, int(0.325 * 33916) + 1, 200, 1024, 0.5)
    assert out.steps == 6800 and out.delta == pytest.approx(1 / 33916**2)
    assert out.std_w == pytest.approx(0.156, abs=0.001)
    assert out.std_theta == pytest.approx(3.90, abs=0.01)
    # all features: the theorem's statement is more conservative than its proof
    for rho in (0.1, 0.3):
        p, s = (FT.dpfermi_noise(1.0, 1e-6, 1000, 100, rho, privacy="all_features", theta_formula=form,
                                 composition="paper", check_assumptions=False, **LD)
                for form in ("proof", "statement"))
        assert s[0] >= p[0] and s[1] == p[1]
    # the joint correction: both updates together (eps, delta) -> stds times sqrt 2
    j = FT.dpfermi_noise(1.0, 1 / n**2, n, T, 0.318, composition="joint", check_assumptions=False, **LD)
    paper = FT.dpfermi_noise(1.0, 1 / n**2, n, T, 0.318, composition="paper", check_assumptions=False, **LD)
    assert j[1] == pytest.approx(math.sqrt(2) * paper[1])
    assert FT.dpfermi_min_steps(4406, 1024, 1.0) == math.ceil((4406 / 2048) ** 2)
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, batch_size=1024, privacy_unit="sensitive_attribute")
    zt, zw = F.theorem33_multipliers(cfg, 2.0, 0.1, clip_theta=5.0, clip_w=1.0)
    assert zt * 5.0 * 2 / 1024 == pytest.approx(2.0) and zw * 2 / 1024 == pytest.approx(0.1)


def _membership_visible_eps_reference(mu_step, T, q, delta, extra_mu=0.0):
    """Independent evaluation of sum_k Bin(k; T, q) delta_G(eps; sqrt(k mu^2 + c^2)) with
    scipy.stats (norm.cdf, binom.pmf), solved for epsilon by bisection."""
    from scipy.stats import binom, norm

    ks = np.arange(T + 1)
    pk = binom.pmf(ks, T, q)
    mus = np.sqrt(ks * mu_step**2 + extra_mu**2)

    def d(e):
        with np.errstate(divide="ignore", invalid="ignore"):
            dg = norm.cdf(mus / 2 - e / mus) - np.exp(e) * norm.cdf(-mus / 2 - e / mus)
        return float(np.sum(pk * np.where(mus > 0, np.maximum(dg, 0.0), 0.0)))

    lo, hi = 0.0, 200.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


def test_sensitive_attribute_spend_is_membership_visible_not_subsampled():
    """Issue: the sensitive-attribute unit was accounted as a Poisson-subsampled Gaussian, but the
    unnoised task gradient reveals batch membership. At q = 0.01, z_theta = z_w = 1, T = 1000 the
    exact epsilon of the membership-visible mechanism is several times the subsampled one; the
    recorded spend must be the former (checked against an independent scipy evaluation)."""
    from dpfair_jax.privacy import accounting as A

    n, m, T = 10000, 100, 1000
    for freq in ("public", "noisy"):
        cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=T, batch_size=m,
                            privacy_unit="sensitive_attribute", group_frequencies=freq)
        spend = _privacy(cfg, n, 1.0, 1.0, 1e-5)
        extra = 1.0 / cfg.count_noise_multiplier if freq == "noisy" else 0.0
        ref = _membership_visible_eps_reference(math.sqrt(2.0), T, m / n, 1e-5, extra)
        assert spend.epsilon == pytest.approx(ref, rel=1e-6)
        assert spend.relation == "replace_one" and spend.accountant == "exact"
    old = A.dpsgd_epsilon(1.0, m / n, T, 1e-5, relative_noise=(1.0, 1.0))  # the old (wrong) record
    assert spend.epsilon > 5 * old


def test_noisy_group_frequencies_are_charged_and_exclusive():
    """Item 5: P_S / P_{S|Y} come from a noisy histogram charged to the spend by default; public
    values only with group_frequencies='public'."""
    ds = _data(n=200)
    base = dict(model=M.logistic(), num_groups=2, steps=20, batch_size=50)
    noisy, public = F.FermiConfig(**base), F.FermiConfig(**base, group_frequencies="public")
    e_noisy = _privacy(noisy, ds.n, 2.0, 2.0, 1e-5).epsilon
    e_public = _privacy(public, ds.n, 2.0, 2.0, 1e-5).epsilon
    assert e_noisy > e_public
    import dp_accounting

    ev = _privacy(noisy, ds.n, 2.0, 2.0, 1e-5).event
    assert isinstance(ev, dp_accounting.ComposedDpEvent)
    assert dp_accounting.GaussianDpEvent(noisy.count_noise_multiplier) in ev.events
    hp = F.FermiHparams(lam=1.0, noise_theta=1.0, noise_w=1.0)
    with pytest.raises(ValueError, match="group_frequencies"):
        F.fit(jax.random.key(0), ds, hp, noisy, p_s=jnp.asarray([0.5, 0.5]))
    with pytest.raises(ValueError, match="p_s"):
        F.fit(jax.random.key(0), ds, hp, public)
    with pytest.raises(ValueError, match="p_y"):
        F.fit(jax.random.key(0), ds, hp, F.FermiConfig(**base, fairness="eo", eo_weighted=False,
                                                       group_frequencies="public"),
              p_s=jnp.full((2, 2), 0.5))


@pytest.mark.slow
def test_noisy_frequencies_change_the_run_and_public_ones_do_not():
    """The default run uses noisy frequencies (differs from the exact-public run with the same key),
    and its histogram noise has the std written out by hand: z sqrt(2) under the substitution
    relation, z under add/remove (checked on the released histogram itself)."""
    from dpfair_jax.privacy import mechanisms as Mech

    ds = _data(n=200)
    base = dict(model=M.logistic(), num_groups=2, steps=5, batch_size=50)
    hp = F.FermiHparams(lam=2.0, lr_theta=0.3, lr_w=0.5)
    exact = E.group_frequencies(ds.s, 2)
    a = F.fit(jax.random.key(1), ds, hp, F.FermiConfig(**base))
    b = F.fit(jax.random.key(1), ds, hp, F.FermiConfig(**base, group_frequencies="public"), p_s=exact)
    assert not np.allclose(np.asarray(a.diagnostics["W"]), np.asarray(b.diagnostics["W"]))
    cells = jnp.asarray(np.arange(300) % 3, jnp.int32)
    for relation, want in (("replace_one", 7.0 * math.sqrt(2.0)), ("add_remove", 7.0)):
        draws = jax.vmap(lambda k: Mech.noisy_histogram(k, cells, 3, noise_multiplier=7.0, relation=relation))(
            jax.random.split(jax.random.key(2), 4000))
        dev = np.asarray(draws) - 100.0
        assert abs(dev.mean()) < 4 * want / math.sqrt(dev.size)
        _check_std(dev.ravel(), want)


def test_validation_errors():
    ds = _data()
    with pytest.raises(ValueError, match="variant"):
        F.FermiConfig(model=M.logistic(), num_groups=2, variant="x").validate()
    with pytest.raises(ValueError, match="num_classes"):
        F.FermiConfig(model=M.multinomial_logistic(3), num_groups=2).validate()
    with pytest.raises(ValueError, match="num_groups"):
        F.fit(jax.random.key(0), ds, F.FermiHparams(), F.FermiConfig(model=M.logistic(), num_groups=3,
                                                                       batch_size=10))
    with pytest.raises(ValueError, match="lam"):
        F.fit(jax.random.key(0), ds, F.FermiHparams(lam=-1.0),
              F.FermiConfig(model=M.logistic(), num_groups=2, batch_size=10))


def test_linear_ghost_path_equals_generic_vmap_path_with_clipping_and_noise():
    ds = _data(n=80, seed=11)
    for unit in ("sensitive_attribute",):  # private and public parts both on the GLM path
        hp = F.FermiHparams(lam=1.5, lr_theta=0.3, lr_w=0.4, clip_theta=0.05, clip_w=0.3,
                            noise_theta=0.7, noise_w=0.9, radius=3.0)
        outs = []
        for path in ("auto", "generic"):
            cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=6, batch_size=20,
                                privacy_unit=unit, grad_path=path)
            r = F.fit(jax.random.key(12), ds, hp, cfg)
            outs.append((r.params["w"], r.diagnostics["W"], r.diagnostics["clipped_frac_theta"]))
        np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-4, atol=1e-6)
        assert float(outs[0][2]) == pytest.approx(float(outs[1][2])) and float(outs[0][2]) > 0


@pytest.mark.parametrize("unit", ["sensitive_attribute", pytest.param("all_features", marks=pytest.mark.slow)])
def test_mlp_dense_ghost_path_equals_generic_vmap_path_with_clipping_and_noise(unit):
    """MLPs take the dense ghost path (``_grad_path == "mlp"``); on the same key its run equals the
    ``vmap(grad)`` run up to float32 rounding: the ghost norms ``sqrt(sum_l (|a_l|^2 + 1) |g_l|^2)``
    and the contractions ``(c g_l)^T a_l`` round differently from the materialized per-example
    gradients (relative 1e-6 per step; 1e-4 over 6 noisy steps, as for the GLM path)."""
    ds = _data(n=80, seed=11)
    mlp = M.mlp((8, 4))
    hp = F.FermiHparams(lam=1.5, lr_theta=0.3, lr_w=0.4, clip_theta=0.05, clip_w=0.3,
                        noise_theta=0.7, noise_w=0.9, radius=3.0)
    outs = []
    for path in ("auto", "generic"):
        cfg = F.FermiConfig(model=mlp, num_groups=2, steps=6, batch_size=20, privacy_unit=unit,
                            grad_path=path)
        theta0 = mlp.init(jax.random.key(0), ds.x.shape[1])
        assert FA._grad_path(cfg, ds.x, theta0) == ("mlp" if path == "auto" else "generic")
        outs.append(F.fit(jax.random.key(12), ds, hp, cfg, params0=theta0))
    for a, b in zip(jax.tree_util.tree_leaves((outs[0].params, outs[0].diagnostics["W"])),
                    jax.tree_util.tree_leaves((outs[1].params, outs[1].diagnostics["W"]))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    c0, c1 = (float(o.diagnostics["clipped_frac_theta"]) for o in outs)
    assert c0 == pytest.approx(c1) and 0 < c0


@pytest.mark.slow
def test_cnn_ghost_path_equals_generic_vmap_path_with_clipping_and_noise():
    rng = np.random.default_rng(1)
    n = 48
    ds = make_dataset(rng.normal(size=(n, 64)).astype(np.float32), rng.integers(0, 3, n),
                      rng.integers(0, 2, n), num_groups=2, num_classes=3)
    ds = ds.replace(x=ds.x.reshape(n, 8, 8, 1))
    cnn = M.cnn(num_classes=3, channels=(8, 3), image_shape=(8, 8, 1), activation="tanh")
    hp = F.FermiHparams(lam=1.5, lr_theta=0.3, lr_w=0.4, clip_theta=0.05, clip_w=0.3,
                        noise_theta=0.7, noise_w=0.9, radius=3.0)
    outs = []
    for path in ("auto", "generic"):
        cfg = F.FermiConfig(model=cnn, num_groups=2, num_classes=3, steps=3, batch_size=12, grad_path=path)
        theta0 = cnn.init(jax.random.key(0))
        assert FA._grad_path(cfg, ds.x, theta0) == ("cnn" if path == "auto" else "generic")
        outs.append(F.fit(jax.random.key(8), ds, hp, cfg, params0=theta0, validate=False))
    for a, b in zip(jax.tree_util.tree_leaves((outs[0].params, outs[0].diagnostics["W"])),
                    jax.tree_util.tree_leaves((outs[1].params, outs[1].diagnostics["W"]))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    c0, c1 = (float(o.diagnostics["clipped_frac_theta"]) for o in outs)
    assert c0 == pytest.approx(c1) and 0 < c0
    bf16 = M.cnn(num_classes=3, channels=(8, 3), image_shape=(8, 8, 1), compute_dtype=jnp.bfloat16)
    assert FA._grad_path(F.FermiConfig(model=bf16, num_groups=2, num_classes=3), ds.x, theta0) == "generic"
