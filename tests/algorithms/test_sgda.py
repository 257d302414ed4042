"""Noisy DP-SGDA (paper 004, Algorithm 2): exact limits, noise scale, sampling, projection, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import sgda as S

D = 3


def _problem(n=40, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    A = rng.normal(size=(D, D)).astype(np.float32)
    return {"x": jnp.asarray(x)}, jnp.asarray(A)


def _loss(A, mu=1.0):
    # f(theta, w; x) = 0.5 |theta - x|^2 + w . (A theta) - 0.5 mu |w|^2   (strongly concave in w)
    def f(theta, w, ex):
        return 0.5 * jnp.sum((theta - ex["x"]) ** 2) + w @ (A @ theta) - 0.5 * mu * jnp.sum(w**2)
    return f


def _numpy_gda(x, A, lr_t, lr_w, T, mu=1.0, radius=np.inf):
    th = np.zeros(D)
    w = np.zeros(D)
    xbar = x.mean(0)
    for _ in range(T):
        gt = (th - xbar) + A.T @ w
        gw = A @ th - mu * w
        th, w = th - lr_t * gt, w + lr_w * gw
        nw = np.linalg.norm(w)
        if nw > radius:
            w = w * radius / nw
    return th, w


def test_noise_free_full_batch_equals_two_timescale_gda(radius=0.05):
    data, A = _problem()
    n = 40
    cfg = S.SGDAConfig(steps=60, batch_size=n, projection="ball")
    hp = S.SGDAHparams(lr_theta=0.05, lr_w=0.2, clip_theta=jnp.inf, clip_w=jnp.inf,
                       noise_theta=0.0, noise_w=0.0, radius=radius)
    res = S.dpsgda(jax.random.key(0), data, jnp.zeros(D), jnp.zeros(D), hp, cfg,
                   private_loss=_loss(A))
    th, w = _numpy_gda(np.asarray(data["x"], np.float64), np.asarray(A, np.float64), 0.05, 0.2, 60,
                       radius=radius)
    np.testing.assert_allclose(res.theta, th, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(res.w, w, rtol=2e-4, atol=2e-5)
    assert float(res.diagnostics["truncated_steps"]) == 0
    # the same split into a public part gives the same iterates
    res2 = S.dpsgda(jax.random.key(0), data, jnp.zeros(D), jnp.zeros(D), hp, cfg,
                    private_loss=lambda t, w, e: 0.0 * jnp.sum(t) + 0.0 * jnp.sum(w),
                    public_loss=_loss(A))
    np.testing.assert_allclose(res2.theta, th, rtol=2e-4, atol=2e-5)


@pytest.mark.slow
def test_gda_converges_to_saddle_point():
    data, A = _problem(seed=3)
    x = np.asarray(data["x"], np.float64)
    An = np.asarray(A, np.float64)
    # saddle: theta - xbar + A^T w = 0, A theta - w = 0 -> (I + A^T A) theta = xbar
    th_star = np.linalg.solve(np.eye(D) + An.T @ An, x.mean(0))
    cfg = S.SGDAConfig(steps=3000, batch_size=40, projection="none")
    hp = S.SGDAHparams(lr_theta=0.01, lr_w=0.1, clip_theta=jnp.inf, clip_w=jnp.inf)
    res = S.dpsgda(jax.random.key(1), data, jnp.zeros(D), jnp.zeros(D), hp, cfg, private_loss=_loss(A))
    np.testing.assert_allclose(res.theta, th_star, atol=1e-3)


@pytest.mark.parametrize("factor,sampling", [(1.0, "poisson"), (2.0, "fixed_size")])
def test_added_noise_has_calibrated_std(factor, sampling):
    """Zero gradients: theta_T = -(lr / m) sum_t N(0, (z C k)^2 I), so each coordinate has std
    lr sqrt(T) z C k / m (k the sensitivity factor), the same in w with its own z and C. With
    D = 20,000 coordinates the sample std has relative standard error 1 / sqrt(2 D) = 0.5%: the
    4-SE window is +-2%, so a noise off by 5% fails. The two updates' noises are independent."""
    n, m, T, dim = 50, 10, 25, 20000
    data = {"x": jnp.zeros((n, 1))}
    zero = lambda t, w, e: 0.0 * (jnp.sum(t) + jnp.sum(w))  # noqa: E731
    cfg = S.SGDAConfig(steps=T, batch_size=m, projection="none", sensitivity_factor=factor, sampling=sampling)
    hp = S.SGDAHparams(lr_theta=1.0, lr_w=1.0, clip_theta=0.5, clip_w=2.0, noise_theta=1.5, noise_w=0.25)
    res = S.dpsgda(jax.random.key(2), data, jnp.zeros(dim), jnp.zeros(dim), hp, cfg, private_loss=zero)
    for got, z, c in ((res.theta, 1.5, 0.5), (res.w, 0.25, 2.0)):
        want = np.sqrt(T) * z * c * factor / m
        x = np.asarray(got, np.float64)
        assert abs(x.std() / want - 1) < 4 / np.sqrt(2 * dim), (x.std(), want)
        assert abs(x.mean()) < 4 * want / np.sqrt(dim)
    corr = np.corrcoef(np.asarray(res.theta), np.asarray(res.w))[0, 1]
    assert abs(corr) < 4 / np.sqrt(dim)


def test_poisson_draws_distribution():
    """The batches DP-SGDA draws (``_draw_fn``, the kit's one sampler ``privacy.sampling``)."""
    n, q, B = 200, 0.1, 60
    keys = jax.random.split(jax.random.key(3), 4000)
    cfg = S.SGDAConfig(steps=1, batch_size=20, max_batch_size=B)
    idx, mask, trunc = jax.vmap(lambda k: S.steps._draw_fn(k, n, cfg)(0))(keys)
    counts = np.asarray(mask.sum(1))
    assert abs(counts.mean() - n * q) < 4 * np.sqrt(n * q * (1 - q) / 4000)
    assert abs(counts.var() - n * q * (1 - q)) < 0.15 * n * q * (1 - q)
    incl = np.zeros(n)
    for i, mk in zip(np.asarray(idx), np.asarray(mask)):
        incl[i[mk > 0]] += 1
    freq = incl / 4000
    assert np.all(np.abs(freq - q) < 5 * np.sqrt(q * (1 - q) / 4000))
    # no repeated index inside a sample, padding rows masked
    for i, mk in zip(np.asarray(idx)[:50], np.asarray(mask)[:50]):
        sel = i[mk > 0]
        assert len(set(sel.tolist())) == len(sel)
    assert not bool(trunc.any())


def test_projection_helper():
    w = jnp.asarray([3.0, 4.0])
    np.testing.assert_allclose(S.project(w, 1.0, "ball"), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(S.project(w, 3.5, "box"), [3.0, 3.5])
    np.testing.assert_allclose(S.project(w, 1.0, "none"), w)


def test_vmapped_grid_equals_single_runs_and_shuffle_runs():
    data, A = _problem(n=30, seed=4)
    cfg = S.SGDAConfig(steps=20, batch_size=10, projection="ball")
    f = _loss(A)

    def run(lr_t, z):
        hp = S.SGDAHparams(lr_theta=lr_t, lr_w=0.1, clip_theta=1.0, clip_w=1.0,
                           noise_theta=z, noise_w=z, radius=2.0)
        return S.dpsgda(jax.random.key(5), data, jnp.zeros(D), jnp.zeros(D), hp, cfg,
                        private_loss=f, validate=False).theta

    lrs = jnp.asarray([0.01, 0.05, 0.1])
    zs = jnp.asarray([0.0, 0.5, 2.0])
    grid = jax.jit(jax.vmap(run))(lrs, zs)
    single = jax.jit(run)
    for i in range(3):
        np.testing.assert_allclose(grid[i], single(lrs[i], zs[i]), rtol=1e-5, atol=1e-6)
    cfg_s = S.SGDAConfig(steps=9, batch_size=10, sampling="shuffle", iterate="random")
    hp = S.SGDAHparams(lr_theta=0.05, lr_w=0.1)
    res = S.dpsgda(jax.random.key(6), data, jnp.zeros(D), jnp.zeros(D), hp, cfg_s, private_loss=f)
    assert np.all(np.isfinite(np.asarray(res.theta)))
    with pytest.raises(ValueError, match="steps"):
        S.dpsgda(jax.random.key(6), data, jnp.zeros(D), jnp.zeros(D), hp,
                 S.SGDAConfig(steps=10, batch_size=10, sampling="shuffle"), private_loss=f)


def test_validation_errors():
    data, A = _problem(n=10)
    f = _loss(A)
    with pytest.raises(ValueError, match="batch_size"):
        S.dpsgda(jax.random.key(0), data, jnp.zeros(D), jnp.zeros(D), S.SGDAHparams(),
                 S.SGDAConfig(steps=2, batch_size=20), private_loss=f)
    with pytest.raises(ValueError, match="noise_theta"):
        S.dpsgda(jax.random.key(0), data, jnp.zeros(D), jnp.zeros(D), S.SGDAHparams(noise_theta=-1.0),
                 S.SGDAConfig(steps=2, batch_size=5), private_loss=f)
    with pytest.raises(ValueError, match="sampling"):
        S.SGDAConfig(steps=2, batch_size=5, sampling="bogus").validate(10)


def _model_losses(model):
    """A min-max loss of the model's outputs (private) and a public part; and the same two as
    functions of the parameters (the generic vmap path)."""
    def priv(out, w, ex):
        o = jnp.atleast_1d(out)
        return jnp.logaddexp(0.0, o[0]) - ex["y"] * o[0] + w @ jnp.tanh(o[:1] * ex["x"][:2])

    def pub(out, w, ex):
        return 0.3 * jnp.sum(jnp.atleast_1d(out) ** 2) + 0.1 * jnp.sum(w) * ex["y"]

    def of_params(f):
        return lambda th, w, ex: f(model.apply(th, ex["x"]), w, ex)

    return priv, pub, of_params(priv), of_params(pub)


@pytest.mark.parametrize("kind", ["mlp", "logistic"])
@pytest.mark.parametrize("sampling", ["poisson", "fixed_size"])
def test_model_ghost_path_equals_generic_vmap_path(kind, sampling):
    """``model=``: the theta sums from the dispatcher's ghost path for the model (dense stack,
    GLM), the w sums by vmap(grad) at the batch's outputs, public parts exact; the same run as the
    generic path on the same losses of the parameters (clipping active, noise on, Poisson
    padding with masked rows), to float32 rounding."""
    from dpfair_jax import models as M

    rng = np.random.default_rng(7)
    n, d = 50, 4
    x = rng.normal(size=(n, d)).astype(np.float32) * rng.uniform(0.3, 3.0, size=(n, 1)).astype(np.float32)
    data = {"x": jnp.asarray(x), "y": jnp.asarray((x[:, 0] > 0).astype(np.float32))}
    model = M.mlp((6,)) if kind == "mlp" else M.logistic(init="lecun_normal")
    theta0 = model.init(jax.random.key(1), d)
    priv, pub, priv_t, pub_t = _model_losses(model)
    hp = S.SGDAHparams(lr_theta=0.3, lr_w=0.2, clip_theta=0.2, clip_w=0.15, noise_theta=0.7, noise_w=0.9,
                       radius=2.0)
    cfg = S.SGDAConfig(steps=6, batch_size=10, sampling=sampling)
    ghost = S.dpsgda(jax.random.key(2), data, theta0, jnp.zeros(2), hp, cfg, private_loss=priv,
                     public_loss=pub, model=model)
    generic = S.dpsgda(jax.random.key(2), data, theta0, jnp.zeros(2), hp, cfg, private_loss=priv_t,
                       public_loss=pub_t)
    for a, b in zip(jax.tree_util.tree_leaves((ghost.theta, ghost.w)),
                    jax.tree_util.tree_leaves((generic.theta, generic.w))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    for k in ("clipped_frac_theta", "clipped_frac_w"):
        assert float(ghost.diagnostics[k]) == pytest.approx(float(generic.diagnostics[k]))
    assert float(ghost.diagnostics["clipped_frac_theta"]) > 0.3  # clipping active
    moved = [float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree_util.tree_leaves(ghost.theta),
                                                          jax.tree_util.tree_leaves(theta0))]
    assert max(moved) > 1e-2
    with pytest.raises(ValueError, match="at most one"):
        S.dpsgda(jax.random.key(2), data, theta0, jnp.zeros(2), hp, cfg, private_loss=priv, model=model,
                 cnn_model=model)
