"""The convergence preconditions' library part (``studies.tradeoff.convergence``): the reference optimum
of the ERMI objective against SciPy on a NumPy transcription, the monotonicity check, the edge share."""

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

from dpfair_jax import models as M
from dpfair_jax.studies.tradeoff import convergence as C


def _ermi_np(p: np.ndarray, s: np.ndarray) -> float:
    """Definition 3.1 from the soft joint, written out in NumPy: sum p(j,r)^2 / (p(j) p_S(r)) - 1."""
    F = np.stack([1 - p, p], 1)
    joint = np.stack([F[s == r].sum(0) for r in range(2)]) / len(s)
    return float(np.sum(joint**2 / (joint.sum(1)[:, None] * joint.sum(0)[None])) - 1)


def _objective_np(th, x, y, s, lam, fairness, ridge):
    d = x.shape[1]
    z = x @ th[:d] + th[d]
    p = 1 / (1 + np.exp(-z))
    if fairness == "dp":
        reg = _ermi_np(p, s)
    else:  # Appendix B eq. 5: sum_y p_Y(y) ERMI(Yhat, S | Y = y)
        reg = sum(np.mean(y == c) * _ermi_np(p[y == c], s[y == c]) for c in (0, 1))
    return np.mean(np.logaddexp(0, z) - y * z) + lam * reg + 0.5 * ridge * np.sum(th[:d] ** 2)


def _toy(R=2, n=240, d=3, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, (R, n))
    x = rng.normal(size=(R, n, d)) + 0.8 * s[..., None]
    y = (x[..., 0] + 0.5 * rng.normal(size=(R, n)) > 0.4).astype(int)
    return x, y, s


@pytest.mark.parametrize("fairness", ["dp", pytest.param("eo", marks=pytest.mark.slow)])
def test_reference_optimum_matches_scipy_on_the_numpy_objective(fairness):
    x, y, s = _toy()
    lams, ridge = [0.0, 1.0, 5.0], 1e-3
    ref = C.reference_optimum(M.logistic(), x, y, s, lams, num_groups=2, num_classes=2, fairness=fairness,
                              ridge=ridge)
    assert np.all(ref["grad_norm"] < 1e-7)
    for r in range(x.shape[0]):
        for li, lam in enumerate(lams):
            th = np.r_[np.asarray(ref["params"]["w"][r, li]).ravel(), np.asarray(ref["params"]["b"][r, li])].astype(float)
            # the same objective in NumPy: its value at the kit's optimum, and SciPy's own minimum
            args = (x[r], y[r], s[r], lam, fairness, ridge)
            assert ref["objective"][r, li] == pytest.approx(_objective_np(th, *args), abs=1e-6)
            sp = minimize(_objective_np, np.zeros(th.size), args=args, method="BFGS", options={"gtol": 1e-9})
            assert ref["objective"][r, li] <= sp.fun + 1e-12
            np.testing.assert_allclose(th, sp.x, atol=1e-5)
    # the ERMI term trades error for independence: the objective grows with lambda, ERMI falls
    assert np.all(np.diff(ref["objective"], axis=1) > 0)


def test_reference_optimum_refuses_bad_input():
    x, y, s = _toy()
    with pytest.raises(ValueError, match="lams"):
        C.reference_optimum(M.logistic(), x, y, s, [-1.0], num_groups=2, num_classes=2)
    with pytest.raises(ValueError, match=r"\[R, n, d\]"):
        C.reference_optimum(M.logistic(), x[0], y[0], s[0], [1.0], num_groups=2, num_classes=2)


def _frontier(values: dict, noise: float = 0.0, replicates: int = 6, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"lam": lam, "replicate": r, "violation": v + noise * rng.normal()}
                         for lam, v in values.items() for r in range(replicates)])


def test_monotone_check_flags_a_significant_rise_only():
    falling = C.monotone_check(_frontier({1.0: 0.10, 4.0: 0.06, 16.0: 0.03}, noise=0.002))
    assert falling["monotone"] and len(falling["pairs"]) == 2
    rising = C.monotone_check(_frontier({1.0: 0.10, 4.0: 0.03, 16.0: 0.05}, noise=0.002))
    assert not rising["monotone"]
    assert (rising["worst"]["from"], rising["worst"]["to"]) == (4.0, 16.0)
    assert rising["worst"]["increase"] == pytest.approx(0.02, abs=0.003)
    # a rise within its interval (noise of the splits far larger than the rise) does not fail
    noisy = C.monotone_check(_frontier({1.0: 0.10, 4.0: 0.03, 16.0: 0.032}, noise=0.05, replicates=3))
    assert noisy["monotone"] and noisy["worst"]["lower"] <= 0


def test_edge_share():
    assert C.edge_share([3.0, 1.0, 3.0, 0.1], [0.1, 1.0, 3.0]) == pytest.approx(0.5)
    assert C.edge_share([0.1], [0.1, 1.0]) == 0.0
    assert np.isnan(C.edge_share([], [1.0]))


def _lagrangian_np(th, x, y, s, lam, nu, fairness):
    """PF-LD's Lagrangian written out: mean loss + lam sum_c p(c) sum_{g,j} nu_{c,g,j} (P(j | g, c) - P(j | c))."""
    d = x.shape[1]
    z = x @ th[:d] + th[d]
    p = 1 / (1 + np.exp(-z))
    F = np.stack([1 - p, p], 1)
    conds = [np.ones_like(y, bool)] if fairness == "dp" else [y == c for c in (0, 1)]
    pen = 0.0
    for c, inc in enumerate(conds):
        h = np.stack([F[inc & (s == g)].mean(0) - F[inc].mean(0) for g in range(2)])  # [k, l]
        pen += inc.mean() * np.sum(nu[c] * h)
    return np.mean(np.logaddexp(0, z) - y * z) + lam * pen


def _as_params(th, d):
    import jax.numpy as jnp

    return {"w": jnp.asarray(th[:d, None], jnp.float32), "b": jnp.asarray(th[d:], jnp.float32)}


@pytest.mark.parametrize("fairness", ["dp", "eo"])
def test_lagrangian_objective_matches_numpy(fairness):
    x, y, s = (a[0] for a in _toy())
    rng = np.random.default_rng(3)
    th = rng.normal(size=4) * 0.5
    nu = rng.normal(size=(1 if fairness == "dp" else 2, 2, 2))
    got = C.lagrangian_objective(_as_params(th, 3), M.logistic(), np.float32(x), y, s, 2.5, np.float32(nu),
                                 num_groups=2, num_classes=2, fairness=fairness)
    np.testing.assert_allclose(float(got), _lagrangian_np(th, x, y, s, 2.5, nu, fairness), rtol=2e-5)


@pytest.mark.parametrize("method", ["dpfermi", "dpsgd", "pfld_epoch"])
def test_row_stationarity_is_small_at_the_optimum_and_one_at_the_start(method):
    """At SciPy's minimizer of the method's own NumPy objective the ratio is far below the tolerance;
    at the zero start it is 1; a few tiny gradient steps from the start stay above the tolerance."""
    from types import SimpleNamespace

    import jax

    x, y, s = (a[0] for a in _toy(n=400))
    lam, nu = 1.5, np.array([[[0.3, -0.3], [-0.2, 0.2]]])
    if method == "pfld_epoch":
        f = lambda th: _lagrangian_np(th, x, y, s, lam, nu, "dp")  # noqa: E731
    else:
        f = lambda th: _objective_np(th, x, y, s, lam if method == "dpfermi" else 0.0, "dp", 0.0)  # noqa: E731
    opt = minimize(f, np.zeros(4), method="BFGS", options={"gtol": 1e-9}).x
    train = SimpleNamespace(x=np.float32(x), y=y, s=s, num_groups=2)  # the split the objective is read on
    model = M.logistic()

    def ratio(th):
        return float(C.row_stationarity(method, model, _as_params(th, 3), train, lam, num_classes=2, fairness="dp",
                                        multipliers=np.float32(nu)))

    assert ratio(opt) < 0.01 * C.STATIONARITY_RTOL
    assert ratio(np.zeros(4)) == pytest.approx(1.0)
    g = jax.grad(lambda p: C.ermi_objective(p, model, np.float32(x), y, s, 0.0, num_groups=2, num_classes=2))(
        _as_params(np.zeros(4), 3))
    tiny = -1e-3 * np.r_[np.asarray(g["w"])[:, 0], np.asarray(g["b"])]  # one step of lr 1e-3: far from stationary
    assert ratio(tiny) > C.STATIONARITY_RTOL
    with pytest.raises(ValueError, match="no convergence criterion"):
        C.row_stationarity("mitigation", model, _as_params(opt, 3), train, lam, num_classes=2, fairness="dp")
