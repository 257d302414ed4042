"""Output perturbation (paper 001, Thm 1): minimizer, sensitivity, calibration, Monte Carlo vs Thm 1."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from dpfair_jax.algorithms import output_perturbation as OP
from dpfair_jax.analysis import hessian as H
from dpfair_jax.data import synthetic
from dpfair_jax.data.preprocessing import bound_row_norms
from dpfair_jax.privacy import accounting


@pytest.fixture(scope="module")
def data():
    d = synthetic.two_group_classification(jax.random.key(0), 600, ratio=0.5, d=4, norms=[0.6, 1.6],
                                           margins=[1.0, 0.3]).data
    return d.replace(x=bound_row_norms(d.x, 2.0))


def _np_objective(th, x, y, reg):
    z = x @ th
    return np.mean(np.logaddexp(0, z) - y * z) + 0.5 * reg * th @ th


def test_minimizer_matches_scipy_and_closed_form(data):
    x = np.asarray(OP.augment(data.x), np.float64)
    y = np.asarray(data.y, np.float64)
    th = np.asarray(OP.minimize(data.x, data.y, reg=0.1))
    ref = optimize.minimize(_np_objective, np.zeros(x.shape[1]), args=(x, y, 0.1), method="BFGS",
                            options={"gtol": 1e-10}).x
    np.testing.assert_allclose(th, ref, atol=2e-4)
    # squared loss: (2/n X^T X + reg I) theta = 2/n X^T y
    th2 = np.asarray(OP.minimize(data.x, data.y, reg=0.1, loss="squared"))
    ref2 = np.linalg.solve(2 * x.T @ x / len(y) + 0.1 * np.eye(x.shape[1]), 2 * x.T @ y / len(y))
    np.testing.assert_allclose(th2, ref2, atol=1e-4)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_sensitivity_bounds_replace_one(data, loss):
    n, reg, radius = data.n, 0.05, 2.0
    lip = OP.lipschitz_constant(radius, loss=loss, reg=reg)
    sens = OP.sensitivity(n, reg, lip)
    assert sens == pytest.approx(2 * lip / (n * reg))
    x, y = np.asarray(data.x), np.asarray(data.y, np.float32)
    th = np.asarray(OP.minimize(x, y, reg=reg, loss=loss))
    worst = 0.0
    for i, (row, lab) in enumerate([(np.r_[radius, 0, 0, 0], 0.0), (np.r_[0, -radius, 0, 0], 1.0)]):
        x2, y2 = x.copy(), y.copy()
        j = int(np.argmax(np.linalg.norm(x, axis=1))) + i
        x2[j], y2[j] = row, lab
        th2 = np.asarray(OP.minimize(x2, y2, reg=reg, loss=loss))
        worst = max(worst, np.linalg.norm(th - th2))
    assert 0 < worst <= sens


def test_fit_calibrates_analytic_gaussian(data):
    cfg = OP.OutputPerturbationConfig(delta=1e-5)
    hp = OP.calibrate(cfg, data.n, (1.0, 1e-5), hparams=OP.OutputPerturbationHparams(reg=1.0, radius=2.0))
    res = OP.fit(jax.random.key(1), data, hp, cfg)
    sens = 2 * np.sqrt(2.0 ** 2 + 1) / (data.n * 1.0)
    assert float(res.diagnostics["sensitivity"]) == pytest.approx(sens)
    assert float(res.diagnostics["std"]) == pytest.approx(accounting.analytic_gaussian_sigma(1.0, 1e-5, sens),
                                                          rel=1e-6)
    assert res.spend.relation == "replace_one" and res.spend.epsilon == pytest.approx(1.0, rel=1e-9)
    assert res.spend.epsilon <= 1.0
    # the noise is theta - theta*, with the right scale (chi-square bound on ||psi||^2 / std^2)
    psi = np.asarray(res.params - res.diagnostics["theta_star"]) / float(res.diagnostics["std"])
    assert psi.shape == (5,) and np.sum(psi ** 2) < 30


def test_theorem1_matches_monte_carlo_with_exact_traces(data):
    reg = 1e-2
    th = OP.minimize(data.x, data.y, reg=reg)
    xa = OP.augment(data.x)

    def loss(theta, xi, yi):
        return OP.example_loss(theta, xi, yi)

    g, pop = H.group_hessian_traces(loss, th, xa, data.y.astype(jnp.float32), data.s, 2)
    std = 0.05  # small noise: second-order Taylor is accurate
    mc = OP.excessive_risk_mc(jax.random.key(7), th, std, data, num_draws=4000)
    pred = OP.theorem1_prediction(std, g.trace, pop.trace)
    for a in range(2):
        tol = 0.03 * float(pred["group"][a]) + 4 * float(mc["group_se"][a])
        assert abs(float(mc["group"][a]) - float(pred["group"][a])) < tol
    assert abs(float(mc["population"]) - float(pred["population"])) < 0.03 * float(pred["population"]) + 4 * float(mc["population_se"])
    # larger trace -> larger excessive risk (Fig 8's claim)
    order = np.argsort(np.asarray(g.trace))
    assert np.all(np.argsort(np.asarray(mc["group"])) == order)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_loss_increase_is_the_loss_difference_in_float64(loss):
    rng = np.random.default_rng(1)
    z = rng.normal(size=50) * 4
    d = rng.normal(size=50) * 1e-4
    y = (rng.random(50) < 0.5).astype(float)
    ref = (np.logaddexp(0, z + d) - y * (z + d)) - (np.logaddexp(0, z) - y * z) if loss == "logistic" \
        else (z + d - y) ** 2 - (z - y) ** 2
    got = np.asarray(OP._loss_increase(jnp.asarray(z, jnp.float32), jnp.asarray(d, jnp.float32),
                                       jnp.asarray(y, jnp.float32), loss))
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-10)


def test_monte_carlo_jitted_vmap_over_std_grid(data):
    th = OP.minimize(data.x, data.y, reg=1.0)
    xa = OP.augment(data.x)

    def risks(std):
        return OP._mc_core(jax.random.key(2), th, std, xa, data.y, data.s, num_groups=2, loss="logistic",
                           num_draws=256, antithetic=True, chunk=256)["group"]

    grid = jnp.array([0.01, 0.1, 0.5])
    batched = np.asarray(jax.jit(jax.vmap(risks))(grid))
    single = np.asarray(OP.excessive_risk_mc(jax.random.key(2), th, 0.1, data, num_draws=256, chunk=256)["group"])
    np.testing.assert_allclose(batched[1], single, rtol=1e-4, atol=1e-7)
    assert np.all(np.diff(batched[:, 0]) > 0)  # more noise, more risk


@pytest.mark.slow
def test_antithetic_and_plain_agree(data):
    th = OP.minimize(data.x, data.y, reg=1.0)
    a = OP.excessive_risk_mc(jax.random.key(3), th, 0.3, data, num_draws=800)
    b = OP.excessive_risk_mc(jax.random.key(4), th, 0.3, data, num_draws=800, antithetic=False)
    z = np.abs(np.asarray(a["group"] - b["group"])) / np.sqrt(np.asarray(a["group_se"] ** 2 + b["group_se"] ** 2))
    assert np.all(z < 4)


def test_validation(data):
    cfg = OP.OutputPerturbationConfig()
    with pytest.raises(ValueError, match="radius"):
        OP.fit(jax.random.key(0), data, OP.OutputPerturbationHparams(radius=0.1), cfg)
    with pytest.raises(ValueError, match="epsilon"):
        OP.calibrate(cfg, data.n, (0.0, cfg.delta))
    with pytest.raises(ValueError, match="loss"):
        OP.minimize(data.x, data.y, loss="hinge")
    with pytest.raises(ValueError, match="Dataset"):
        OP.excessive_risk_mc(jax.random.key(0), jnp.zeros(5), 0.1, (data.x, data.y))
    with pytest.raises(ValueError, match="label_bound"):
        OP.fit(jax.random.key(0), (data.x, data.y * 3.0), OP.OutputPerturbationHparams(radius=2.0),
               OP.OutputPerturbationConfig(loss="squared"))


# --- fit / spend / calibrate ------------------------------------------------------------------

@pytest.mark.parametrize("eps,delta", [(0.3, 1e-5), (1.0, 1e-5), (8.0, 1e-9)])
def test_spend_of_calibrate_hits_the_target(data, eps, delta):
    cfg = OP.OutputPerturbationConfig(delta=delta)
    hp = OP.calibrate(cfg, data.n, (eps, delta), hparams=OP.OutputPerturbationHparams(radius=2.0))
    sp = OP.spend(cfg, data.n, hp)
    assert sp.epsilon <= eps and sp.epsilon >= 0.99 * eps
    assert (sp.delta, sp.relation, sp.unit) == (delta, "replace_one", "example")
    # an independent reference: Balle & Wang's delta at the calibrated multiplier is the target's
    assert accounting.analytic_gaussian_delta(hp.noise_multiplier, sp.epsilon) == pytest.approx(delta, rel=1e-6)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_fit_adds_the_noise_its_spend_accounts(data, loss):
    """fit at calibrate's multiplier adds the analytic Gaussian noise of the target at the
    sensitivity (up to the calibration's rounding), and its std is z times the sensitivity written
    out by hand."""
    y = data.y if loss == "logistic" else data.y.astype(jnp.float32)
    cfg = OP.OutputPerturbationConfig(loss=loss, delta=1e-5)
    hp = OP.calibrate(cfg, data.n, (1.0, 1e-5), hparams=OP.OutputPerturbationHparams(reg=0.5, radius=2.0))
    res = OP.fit(jax.random.key(4), (data.x, y), hp, cfg)
    r = np.sqrt(2.0 ** 2 + 1)
    lip = r if loss == "logistic" else 2 * r * (r * np.sqrt(2 / 0.5) + 1.0)
    sens = 2 * lip / (data.n * 0.5)
    assert float(res.diagnostics["sensitivity"]) == pytest.approx(sens, rel=1e-6)
    assert float(res.diagnostics["std"]) == pytest.approx(hp.noise_multiplier * sens, rel=1e-6)
    assert float(res.diagnostics["std"]) == pytest.approx(accounting.analytic_gaussian_sigma(1.0, 1e-5, sens), rel=1e-6)
    assert res.spend == OP.spend(cfg, data.n, hp) and res.spend.epsilon == pytest.approx(1.0, rel=1e-9)


def test_fit_sweeps_multiplier_and_reg_under_jit_and_vmap(data):
    cfg = OP.OutputPerturbationConfig()

    @jax.jit
    def one(z, reg):
        return OP.fit(jax.random.key(5), data, OP.OutputPerturbationHparams(z, reg, 2.0), cfg)

    zs, regs = jnp.asarray([0.5, 2.0]), jnp.asarray([0.1, 1.0])
    out = jax.vmap(one)(zs, regs)
    for i in range(2):
        single = OP.fit(jax.random.key(5), data, OP.OutputPerturbationHparams(float(zs[i]), float(regs[i]), 2.0), cfg)
        np.testing.assert_allclose(out.params[i], single.params, rtol=1e-4, atol=1e-6)
        assert float(out.diagnostics["std"][i]) == pytest.approx(float(single.diagnostics["std"]), rel=1e-5)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_traced_sensitivity_is_the_hand_formula(data, loss):
    """With reg and radius traced (a jitted, vmapped grid), the sensitivity fit scales its noise to
    is ``2 L / (n reg)`` with the Lipschitz constant written out here: ``r`` (logistic),
    ``2 r (r B sqrt(2 / reg) + B)`` (squared, label bound ``B = 1``), ``r = sqrt(radius^2 + 1)``."""
    y = data.y if loss == "logistic" else data.y.astype(jnp.float32)
    cfg = OP.OutputPerturbationConfig(loss=loss)
    regs, radii = jnp.asarray([0.3, 1.5]), jnp.asarray([2.0, 2.5])
    out = jax.jit(jax.vmap(lambda reg, rad: OP.fit(jax.random.key(6), (data.x, y),
                                                   OP.OutputPerturbationHparams(1.0, reg, rad), cfg)))(regs, radii)
    for i in range(2):
        reg, rad = float(regs[i]), float(radii[i])
        r = math.sqrt(rad**2 + 1.0)
        lip = r if loss == "logistic" else 2 * r * (r * math.sqrt(2 / reg) + 1.0)
        assert float(out.diagnostics["sensitivity"][i]) == pytest.approx(2 * lip / (data.n * reg), rel=1e-5)
        assert float(out.diagnostics["std"][i]) == pytest.approx(2 * lip / (data.n * reg), rel=1e-5)


def test_trio_bad_input_names_the_field(data):
    cfg = OP.OutputPerturbationConfig()
    with pytest.raises(ValueError, match="radius"):
        OP.fit(jax.random.key(0), data, OP.OutputPerturbationHparams(radius=None), cfg)
    with pytest.raises(ValueError, match="radius"):  # rows above the public bound (default 1)
        OP.fit(jax.random.key(0), data, OP.OutputPerturbationHparams(), cfg)
    with pytest.raises(ValueError, match="radius"):  # rows above the public bound
        OP.fit(jax.random.key(0), data, OP.OutputPerturbationHparams(radius=0.1), cfg)
    with pytest.raises(ValueError, match="noise_multiplier"):
        OP.fit(jax.random.key(0), data, OP.OutputPerturbationHparams(-1.0, radius=2.0), cfg)
    with pytest.raises(ValueError, match="loss"):
        OP.OutputPerturbationConfig(loss="hinge").validate()
    with pytest.raises(ValueError, match="config.delta"):
        OP.calibrate(cfg, 10, (1.0, 1e-6))
    with pytest.raises(ValueError, match="sizes"):
        OP.spend(cfg, 0, OP.OutputPerturbationHparams(1.0))
    assert OP.spend(cfg, 10, OP.OutputPerturbationHparams(0.0)).epsilon == float("inf")


def test_fit_refuses_a_padding_mask(data):
    masked = data.replace(mask=np.ones(data.n, bool))
    with pytest.raises(ValueError, match="mask"):
        OP.fit(jax.random.key(0), masked, OP.OutputPerturbationHparams(radius=2.0), OP.OutputPerturbationConfig())
