"""Private reductions for constrained group-objective optimization (paper 002, Alabi).

The CGOO problem (Def. 1.2 / Section 4): given a group loss vector ``l = ell(c, D) in [0,1]^K``
(itemized: ``l = (1/n) sum_i ell(c, D_i)``), an objective ``f`` and a constraint ``g`` over it, find
``c`` with ``f(l) <= min_{g <= 0} f + alpha`` and ``g(l) <= alpha``. The weighting reduction
(Lemma 4.1 / Cor. 4.2) minimizes ``h(l) = f(l) + G max(0, g(l))`` with ``G = (alpha + L_f sqrt K)/alpha``.

Decision sets here are finite public grids: a loss matrix ``L: [M, K]`` holds ``ell(c_m, D)`` for
every candidate ``m`` (build it with :func:`group_losses` from per-example losses ``[M, n]``).
Randomized decisions are mixtures over candidates; a mixture's loss vector is the weighted mean of
its members' rows (the paper's Sec. 4 "closed under randomization").

Public names
  group functions (``GroupFunction(fn, lipschitz, smoothness, name)``): :func:`linear_objective`,
  :func:`sum_objective`, :func:`max_objective`, :func:`bounded_group_loss`, :func:`smax`,
  :func:`smooth_abs`, :func:`equalized_odds_loss_layout`, :func:`equalized_odds_objective`,
  :func:`equalized_odds_constraint`, :func:`gini_constraint`, confusion measures :func:`g_mean`,
  :func:`h_mean`, :func:`confusion_index`, :func:`figure2_means`;
  problem: :class:`CGOO`, :func:`penalty_weight`, :func:`penalized`, :func:`penalized_grad`,
  :func:`loss_sensitivity`, :func:`h_sensitivity`, :func:`group_losses`;
  Algorithm 1: :func:`exponential_sampling_logits`, :func:`exponential_sampling_probs`,
  :func:`exponential_sampling`;
  LOPT oracles: :func:`lopt_grid`, :func:`lopt_grid_private`, :func:`weighted_least_squares`,
  :func:`dp_weighted_least_squares`, :func:`dp_gd_noise_std`;
  Algorithm 4 (Frank-Wolfe): :func:`frank_wolfe`; Algorithm 2: :func:`algorithm2_budget`,
  :func:`algorithm2_ledger`, :func:`private_cgoo`; :class:`MixtureResult`, :func:`mixture_loss`.

Neighbouring relation: replace one record (which covers Def. 1.1, changing one sensitive
attribute). For itemized loss vectors with per-example vectors in ``[0,1]^K`` the loss vector
moves by at most ``sqrt(K)/n`` in l2 and ``K/n`` in l1 (Lemma 5.1).

Departures from the paper (corrected by default, literal behind ``variant="paper"``):
  * Alg. 1 sensitivity: ``(L_f + G L_g) sqrt(K)/n`` from the declared Lipschitz constants (the
    paper's ``sqrt(K)(1+G)/n`` assumes ``L_f = L_g = 1``; wrong for e.g. ``f = sum``).
  * Alg. 2 line 10: the weight ``r_t`` is computed from the private losses without noise and without
    the factor ``G``. Default: ``r_t = grad f + G 1[g >= 0] grad g`` at a Laplace-privatized loss
    vector (charged to the budget), evaluated at the running mixture (follow-the-mixture-gradient).
  * Alg. 4: default is Jaggi's Frank-Wolfe (gradient at the mixture iterate, step ``2/(t+2)`` from
    ``t = 0``, FW mixture weights); ``variant="paper"`` evaluates the gradient at ``ell(c_t)`` and
    returns the uniform mixture.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import paper_formulas as _pf
from dpfair_jax.privacy.precision import full_precision

__all__ = [
    "GroupFunction", "CGOO", "MixtureResult", "Algorithm2Budget",
    "linear_objective", "sum_objective", "max_objective", "bounded_group_loss", "smax", "smooth_abs",
    "equalized_odds_loss_layout", "equalized_odds_objective", "equalized_odds_constraint",
    "gini_constraint", "g_mean", "h_mean", "confusion_index", "figure2_means",
    "penalty_weight", "penalized", "penalized_grad", "loss_sensitivity", "h_sensitivity", "group_losses",
    "exponential_sampling_logits", "exponential_sampling_probs", "exponential_sampling",
    "lopt_grid", "lopt_grid_private", "weighted_least_squares", "dp_weighted_least_squares",
    "dp_gd_noise_std", "frank_wolfe", "algorithm2_budget", "algorithm2_ledger", "private_cgoo",
    "mixture_loss", "LinearParams", "RegressionMixture", "clipped_group_losses", "private_cgoo_regression",
]

Array = jax.Array


# =============================================================================================
# Group functions f, g over the loss vector
# =============================================================================================


class GroupFunction(NamedTuple):
    """A function of the group loss vector ``l: [K] -> scalar`` with its l2 Lipschitz constant and
    smoothness ``beta`` on ``[0,1]^K`` (``inf``: not smooth). Constants enter sensitivities
    (Lemma 5.1), so they must be valid upper bounds."""

    fn: Callable[[Array], Array]
    lipschitz: float
    smoothness: float
    name: str

    def __call__(self, l: Array) -> Array:
        return self.fn(l)


def linear_objective(weights: Any, name: str = "linear") -> GroupFunction:
    """``f(l) = w . l`` (Lipschitz ``||w||``, smoothness 0). ``weights`` are concrete (public)."""
    w = np.asarray(weights, np.float64)
    V.check_shape("weights", w, ndim=1)
    V.check_finite("weights", w)
    wj = jnp.asarray(w, jnp.float32)
    return GroupFunction(lambda l: jnp.dot(l, wj), float(np.linalg.norm(w)), 0.0, name)


def sum_objective(num_groups: int) -> GroupFunction:
    """``f(l) = sum_k l_k`` (the population loss for itemized losses; Lipschitz ``sqrt K``)."""
    K = V.check_int("num_groups", num_groups)
    return GroupFunction(lambda l: jnp.sum(l, axis=-1), math.sqrt(K), 0.0, "sum")


def _max_fn(temperature: float | None):
    if temperature is None:
        return lambda z: jnp.max(z, axis=-1)
    t = float(temperature)
    return lambda z: jax.nn.logsumexp(t * z, axis=-1) / t


def max_objective(temperature: float | None = None) -> GroupFunction:
    """``f(l) = max_k l_k``; with ``temperature`` the log-sum-exp smoothing ``logsumexp(t l)/t``
    (1-Lipschitz, ``t``-smooth, within ``log(K)/t`` of the max)."""
    if temperature is not None:
        V.check_positive("temperature", temperature)
    beta = math.inf if temperature is None else float(temperature)
    return GroupFunction(_max_fn(temperature), 1.0, beta, "max")


def bounded_group_loss(thresholds: Any, temperature: float | None = None) -> GroupFunction:
    """Bounded group loss constraint ``g(l) = max_k (l_k - eta_k) <= 0`` (paper 002 Sec. 1.3,
    Agarwal et al. 2019). ``thresholds`` ``eta: [K]`` are on the loss vector's (itemized) scale and
    may be traced. ``temperature`` smooths the max as in :func:`max_objective`."""
    if temperature is not None:
        V.check_positive("temperature", temperature)
    V.check_finite("thresholds", thresholds)
    eta = jnp.asarray(thresholds, jnp.float32)
    mx = _max_fn(temperature)
    beta = math.inf if temperature is None else float(temperature)
    return GroupFunction(lambda l: mx(l - eta), 1.0, beta, "bounded_group_loss")


def smax(y: Array, eta: Any) -> Array:
    """Smoothed max ``smax^eta(y) = sum_i y_i e^{eta y_i} / sum_i e^{eta y_i}`` (paper 002 Eq. 2/13);
    tends to ``max`` as ``eta -> inf``. Its gradient is ``softmax_i(eta y) (1 + eta (y_i - smax))``."""
    y = jnp.asarray(y)
    p = jax.nn.softmax(jnp.asarray(eta, y.dtype) * y, axis=-1)
    return jnp.sum(p * y, axis=-1)


def smooth_abs(x: Array, mu: Any) -> Array:
    """``sqrt(x^2 + mu^2) - mu``: a 1-Lipschitz, ``1/mu``-smooth surrogate of ``|x|`` (the paper
    leaves the smoothing of the absolute value unspecified, Sec. 8)."""
    mu = jnp.asarray(mu, jnp.result_type(x, jnp.float32))
    return jnp.sqrt(jnp.square(x) + jnp.square(mu)) - mu


def equalized_odds_loss_layout(num_groups: int) -> dict[str, np.ndarray]:
    """Indices of the loss vector of Cor. 8.9 (``K = 3|A|``): ``(FP_1..FP_A, TP_1..TP_A, FN_1..FN_A)``."""
    A = V.check_int("num_groups", num_groups)
    return {"fp": np.arange(A), "tp": np.arange(A, 2 * A), "fn": np.arange(2 * A, 3 * A)}


def equalized_odds_objective(num_groups: int) -> GroupFunction:
    """``f(l) = sum_a (FP_a + FN_a)`` (Cor. 8.9): the error of itemized confusion counts."""
    lay = equalized_odds_loss_layout(num_groups)
    idx = jnp.asarray(np.concatenate([lay["fp"], lay["fn"]]))
    return GroupFunction(lambda l: jnp.sum(l[..., idx], axis=-1), math.sqrt(2 * num_groups), 0.0,
                         "eo_error")


def equalized_odds_constraint(num_groups: int, alpha: Any, *, eta: float | None = 50.0, mu: float = 0.01,
                              normalizers: Any = None) -> GroupFunction:
    """Smoothed equalized odds (Def. 8.8, Eq. 13): ``g(l) = smax^eta_{a<a'} { sabs(FP_a - FP_a'),
    sabs(TP_a - TP_a') } - alpha`` with ``sabs`` = :func:`smooth_abs` (``mu``).

    ``eta=None``: the unsmoothed alpha-EO constraint (Def. 8.7, Eq. 12: max and absolute value;
    Lipschitz, not smooth: enough for Algorithm 1). ``normalizers``: public ``[A, 2]`` proportions
    ``q_{a,y} = P(s = a, y = y)`` turning the itemized ``FP_a, TP_a`` into the rates ``P(yhat = 1 | s =
    a, y)`` of Def. 1.13 (the paper's Cor. 8.9 writes rates; itemized losses need this division).

    Lipschitz bound (l2): with ``r = 1/min q`` (1 without normalizers), a pairwise difference has
    gradient norm ``<= sqrt(2) r``, so the hard max is ``sqrt(2) r``-Lipschitz; the pairwise map has
    operator norm ``sqrt(A) r`` and ``smax^eta`` of arguments in ``[0, 1]`` has gradient l1 norm
    ``<= 1 + eta``, so the smoothed one is ``sqrt(A) r (1 + eta)``-Lipschitz.
    """
    A = V.check_int("num_groups", num_groups, minimum=2)
    if eta is not None:
        V.check_positive("eta", eta)
    V.check_positive("mu", mu)
    lay = equalized_odds_loss_layout(A)
    if normalizers is None:
        q = np.ones((A, 2))
    else:
        q = np.asarray(normalizers, np.float64)
        V.check_shape("normalizers", q, shape=(A, 2))
        V.check_positive("normalizers", q)
    r = float(1.0 / q.min())
    inv_fp, inv_tp = jnp.asarray(1.0 / q[:, 0], jnp.float32), jnp.asarray(1.0 / q[:, 1], jnp.float32)
    ii, jj = np.triu_indices(A, k=1)
    fp, tp = jnp.asarray(lay["fp"]), jnp.asarray(lay["tp"])
    a = jnp.asarray(alpha, jnp.float32)

    def diffs(l):
        rf, rt = l[..., fp] * inv_fp, l[..., tp] * inv_tp
        return jnp.concatenate([rf[..., ii] - rf[..., jj], rt[..., ii] - rt[..., jj]], axis=-1)

    if eta is None:
        return GroupFunction(lambda l: jnp.max(jnp.abs(diffs(l)), axis=-1) - a, math.sqrt(2.0) * r, math.inf,
                             "eo")
    return GroupFunction(lambda l: smax(smooth_abs(diffs(l), mu), eta) - a,
                         math.sqrt(A) * r * (1.0 + float(eta)), math.inf, "smoothed_eo")


def gini_constraint(theta: Any, num_groups: int, *, variant: str = "corrected", n: int | None = None
                    ) -> GroupFunction:
    """Gini-index level set (Def. 8.6): ``g(l) = sum_{i,j} |l_i - l_j| - 2 K theta sum_i l_i <= 0``.

    The paper writes ``2n`` where the index is normalized by the number of subgroups ``K``;
    ``variant="paper"`` uses ``2n`` (pass ``n``). Lipschitz ``sqrt(K) (2(K-1) + 2 c theta)`` with
    ``c = K`` (or ``n``), valid for ``theta`` up to its concrete value."""
    K = V.check_int("num_groups", num_groups)
    V.check_choice("variant", variant, ("corrected", "paper"))
    if variant == "paper":
        if n is None:
            raise ValueError("variant='paper' needs n (the Gini index of Def. 8.6 uses 2n).")
        c = float(V.check_int("n", n))
    else:
        c = float(K)
    th = jnp.asarray(theta, jnp.float32)

    def g(l):
        diff = jnp.abs(l[..., :, None] - l[..., None, :])
        return jnp.sum(diff, axis=(-2, -1)) - 2.0 * c * th * jnp.sum(l, axis=-1)

    tb = float(np.max(np.abs(np.asarray(theta)))) if not V._is_tracer(theta) else 1.0
    return GroupFunction(g, math.sqrt(K) * (2.0 * (K - 1) + 2.0 * c * tb), math.inf, "gini")


def confusion_index(p: int, q: int, num_classes: int) -> int:
    """Loss-vector coordinate of confusion entry ``C_pq`` (Sec. 8.1, ``k = L(p-1) + q``, 1-based
    classes; returned 0-based)."""
    L = V.check_int("num_classes", num_classes)
    if not (1 <= p <= L and 1 <= q <= L):
        raise ValueError(f"p and q must lie in 1..{L}, got p={p}, q={q}.")
    return L * (p - 1) + q - 1


def g_mean(C: Array) -> Array:
    """G-mean ``(prod_i C_ii / sum_j C_ij)^{1/L}`` (per-class recall; Sec. 8.1). ``C: [..., L, L]``."""
    C = jnp.asarray(C)
    rec = jnp.diagonal(C, axis1=-2, axis2=-1) / jnp.sum(C, axis=-1)
    return jnp.exp(jnp.mean(jnp.log(rec), axis=-1))


def h_mean(C: Array, *, variant: str = "paper") -> Array:
    """H-mean ``L (sum_i sum_j C_ji / C_ii)^{-1}`` (Sec. 8.1; column sums as printed, i.e. the
    harmonic mean of per-class precision). ``variant="recall"`` uses row sums (harmonic mean of
    recalls, the usual definition)."""
    V.check_choice("variant", variant, ("paper", "recall"))
    C = jnp.asarray(C)
    L = C.shape[-1]
    diag = jnp.diagonal(C, axis1=-2, axis2=-1)
    tot = jnp.sum(C, axis=-2) if variant == "paper" else jnp.sum(C, axis=-1)
    return L / jnp.sum(tot / diag, axis=-1)


def figure2_means(num_classes: int, weights: str = "uniform", ratio: float = 1.0 / 3.0
                  ) -> dict[str, float]:
    """G-mean and H-mean of the confusion matrices of Figure 2: ``"uniform"`` (all entries 1/L^2)
    or ``"geometric"`` (row-major entries decreasing by ``ratio``, normalized to sum 1)."""
    L = V.check_int("num_classes", num_classes, minimum=2)
    V.check_choice("weights", weights, ("uniform", "geometric"))
    if weights == "uniform":
        C = np.full((L, L), 1.0 / L**2)
    else:
        e = ratio ** np.arange(L * L, dtype=np.float64)
        C = (e / e.sum()).reshape(L, L)
    return {"g_mean": float(g_mean(jnp.asarray(C))), "h_mean": float(h_mean(jnp.asarray(C)))}


# =============================================================================================
# The problem, the weighting reduction and its sensitivities
# =============================================================================================


class CGOO(NamedTuple):
    """Constrained group-objective optimization (Def. 1.2): objective ``f``, constraint ``g <= 0``
    over a ``num_groups``-dimensional loss vector."""

    f: GroupFunction
    g: GroupFunction
    num_groups: int


def penalty_weight(alpha: float, num_groups: int, lipschitz_f: float = 1.0) -> float:
    """``G = (alpha + L_f sqrt(K)) / alpha`` (Cor. 4.2): minimizing ``h`` to within ``alpha`` then
    gives ``f <= f* + alpha`` and ``g <= alpha``."""
    V.check_positive("alpha", alpha)
    K = V.check_int("num_groups", num_groups)
    V.check_positive("lipschitz_f", lipschitz_f)
    return (float(alpha) + float(lipschitz_f) * math.sqrt(K)) / float(alpha)


def _penalty(gval: Array, smoothing: Any) -> Array:
    if smoothing is None:
        return jax.nn.relu(gval)
    t = jnp.asarray(smoothing, gval.dtype)
    return jax.nn.softplus(t * gval) / t


def penalized(problem: CGOO, l: Array, G: Any, *, smoothing: float | None = None) -> Array:
    """``h(l) = f(l) + G max(0, g(l))`` (Lemma 4.1). ``l: [..., K]``; ``G`` may be traced.

    ``smoothing=t`` replaces the hinge by ``softplus(t g)/t`` (an upper bound within ``log(2)/t``,
    ``G t L_g^2``-smooth): Frank-Wolfe's rate (Lemma B.2/B.4) needs a smooth ``h``, which the
    hinge is not (the paper assumes smooth ``f, g`` but not a smooth penalty)."""
    return problem.f(l) + jnp.asarray(G, jnp.float32) * _penalty(problem.g(l), smoothing)


def penalized_grad(problem: CGOO, l: Array, G: Any, *, variant: str = "corrected",
                   smoothing: float | None = None) -> Array:
    """The weight vector of Alg. 2 line 10 / Alg. 4: ``grad f(l) + G 1[g(l) >= 0] grad g(l)``
    (with ``smoothing=t`` the indicator becomes ``sigmoid(t g)``, the gradient of the smoothed
    penalty). ``variant="paper"`` drops ``G`` (line 10 as printed). ``l: [K]``."""
    V.check_choice("variant", variant, ("corrected", "paper"))
    gf = jax.grad(lambda z: problem.f(z))(l)
    gg = jax.grad(lambda z: problem.g(z))(l)
    gv = problem.g(l)
    if smoothing is None:
        on = (gv >= 0).astype(l.dtype)
    else:
        on = jax.nn.sigmoid(jnp.asarray(smoothing, l.dtype) * gv)
    scale = 1.0 if variant == "paper" else jnp.asarray(G, l.dtype)
    return gf + scale * on * gg


def loss_sensitivity(n: int, num_groups: int, *, norm: str = "l2") -> float:
    """Sensitivity of the itemized loss vector ``(1/n) sum_i ell(c, D_i)`` with per-example vectors in
    ``[0,1]^K`` under replace-one (``n`` is fixed, hence public): ``sqrt(K)/n`` (l2, Lemma 5.1) or
    ``K/n`` (l1)."""
    n = V.check_int("n", n)
    K = V.check_int("num_groups", num_groups)
    V.check_choice("norm", norm, ("l2", "l1"))
    return (math.sqrt(K) if norm == "l2" else float(K)) / n


def h_sensitivity(problem: CGOO, n: int, G: Any, *, variant: str = "corrected") -> Any:
    """Sensitivity of ``h(ell(c, D))`` for a fixed ``c`` (Lemma 5.1): ``(L_f + G L_g) sqrt(K)/n``;
    ``variant="paper"``: ``sqrt(K)(1 + G)/n`` (Alg. 1 line 3, valid only when ``L_f, L_g <= 1``).
    ``G`` may be traced (then the result is an array)."""
    V.check_choice("variant", variant, ("corrected", "paper"))
    V.check_positive("G", G, allow_zero=True)
    s = loss_sensitivity(n, problem.num_groups)
    if variant == "paper":
        return s * (1.0 + G)
    return s * (problem.f.lipschitz + G * problem.g.lipschitz)


@full_precision
def group_losses(per_example_losses: Array, s: Array, num_groups: int, *, mask: Array | None = None,
                 n: int | None = None) -> Array:
    """Itemized group loss vectors ``l_k = (1/n) sum_i 1[s_i = k] loss_i`` (Def. 1.2's ``ell``).

    ``per_example_losses: [..., n]`` in ``[0, 1]`` (e.g. one row per grid candidate), ``s: int[n]``.
    Returns ``[..., K]``. ``n`` defaults to the number of (unmasked) rows; the sensitivities of
    Lemma 5.1 need it public (replace-one: fixed; with a data-dependent ``mask`` pass ``n``).
    One matmul with the one-hot group matrix, no loop over groups."""
    V.check_group_ids(s, num_groups)
    V.check_finite("per_example_losses", per_example_losses)
    onehot = jax.nn.one_hot(jnp.asarray(s), num_groups, dtype=jnp.float32)
    if mask is not None:
        onehot = onehot * jnp.asarray(mask, jnp.float32)[:, None]
    denom = jnp.sum(onehot) if n is None else jnp.asarray(float(n), jnp.float32)
    return (jnp.asarray(per_example_losses, jnp.float32) @ onehot) / denom


def _check_loss_matrix(L: Any, num_groups: int | None = None) -> None:
    V.check_shape("losses", L, ndim=2)
    V.check_finite("losses", L)
    if num_groups is not None and np.shape(L)[1] != num_groups:
        raise ValueError(f"losses must have num_groups={num_groups} columns, got shape {np.shape(L)}.")
    if not V._is_tracer(L):
        arr = np.asarray(L)
        if arr.size and (arr.min() < -1e-6 or arr.max() > 1 + 1e-6):
            raise ValueError("losses must lie in [0, 1] (the sensitivities of Lemma 5.1 assume it); "
                             "clip or rescale the per-example losses.")


# =============================================================================================
# Algorithm 1: exponential sampling
# =============================================================================================


def exponential_sampling_logits(losses: Array, problem: CGOO, *, G: Any, epsilon: Any, sensitivity: Any
                                ) -> Array:
    """Logits ``-epsilon h(ell(c_m, D)) / (2 Delta_h)`` of Alg. 1 line 3 over the grid (``[M]``)."""
    h = jax.vmap(lambda l: penalized(problem, l, G))(jnp.asarray(losses, jnp.float32))
    return _mech.exponential_mechanism_logits(h, epsilon=epsilon, sensitivity=sensitivity)


def exponential_sampling_probs(losses: Array, problem: CGOO, *, G: Any, epsilon: Any, n: int,
                               variant: str = "corrected") -> Array:
    """Output distribution of :func:`exponential_sampling` (softmax of the logits)."""
    _check_loss_matrix(losses, problem.num_groups)
    V.check_epsilon(epsilon)
    sens = h_sensitivity(problem, n, G, variant=variant)
    return jax.nn.softmax(exponential_sampling_logits(losses, problem, G=G, epsilon=epsilon,
                                                      sensitivity=sens))


def exponential_sampling(key: Array, losses: Array, problem: CGOO, *, G: Any, epsilon: Any, n: int,
                         variant: str = "corrected") -> Array:
    """Algorithm 1 (paper 002): sample grid index ``m`` with probability
    ``prop. exp(-epsilon h(ell(c_m, D)) / (2 Delta_h))``, ``h = f + G max(0, g)``.

    ``losses: [M, K]`` are the itemized loss vectors of a public candidate grid; ``G`` and
    ``epsilon`` may be traced (a vmapped epsilon grid is one program). Returns an ``int32`` index.
    Utility: with probability ``1 - rho`` the excess ``h`` is at most ``2 Delta_h log(M/rho)/epsilon``
    (Thm. 3.6).

    Privacy: ``epsilon``-DP (pure) under replace-one of a record (so also of a sensitive
    attribute, Def. 1.1): ``h`` moves by at most ``Delta_h`` = :func:`h_sensitivity` per candidate.
    This holds for a public ``problem`` and ``G``: thresholds, normalizers and group proportions
    inside ``f``/``g`` must not be computed from the private data (derive them from a disjoint
    public split, as the paper-002 experiments do, or release them with noise and charge it).
    """
    V.check_threefry_key(key)
    _check_loss_matrix(losses, problem.num_groups)
    V.check_epsilon(epsilon)
    V.check_choice("variant", variant, ("corrected", "paper"))
    V.check_positive("G", G, allow_zero=True)
    return _exponential_sampling(key, jnp.asarray(losses, jnp.float32), jnp.asarray(G, jnp.float32),
                                 jnp.asarray(epsilon, jnp.float32), problem=problem, n=int(n), variant=variant)


@partial(jax.jit, static_argnames=("problem", "n", "variant"))
def _exponential_sampling(key, losses, G, epsilon, *, problem, n, variant):
    sens = h_sensitivity(problem, n, G, variant=variant)
    logits = exponential_sampling_logits(losses, problem, G=G, epsilon=epsilon, sensitivity=sens)
    return jax.random.categorical(key, logits).astype(jnp.int32)


# =============================================================================================
# Linear optimization oracles
# =============================================================================================


def lopt_grid(losses: Array, weights: Array) -> Array:
    """Exact LOPT over a grid (Def. 1.3 with ``tau = 0``): ``argmin_m w . ell(c_m, D)``."""
    return jnp.argmin(jnp.asarray(losses) @ jnp.asarray(weights, jnp.float32)).astype(jnp.int32)


def _lopt_em_logits(losses, weights, epsilon, loss_sens):
    w = jnp.asarray(weights, jnp.float32)
    norm = jnp.linalg.norm(w)
    score = jnp.asarray(losses, jnp.float32) @ (w / jnp.maximum(norm, 1e-30))
    return -jnp.asarray(epsilon, jnp.float32) * score / (2.0 * jnp.asarray(loss_sens, jnp.float32))


@full_precision
def lopt_grid_private(key: Array, losses: Array, weights: Array, *, epsilon: Any, loss_sens: Any
                      ) -> Array:
    """LOPT_{eps,0} by the exponential mechanism (Thm. 5.10): sample ``m`` with probability
    ``prop. exp(-epsilon w.ell(c_m,D) / (2 ||w|| Delta_l))``, ``Delta_l = sqrt(K)/n``.

    Privacy: ``epsilon``-DP (replace-one) for a data-independent (or already privatized) ``w``:
    ``|w.(l - l')| <= ||w|| Delta_l`` by Cauchy-Schwarz. A zero ``w`` gives the uniform draw."""
    V.check_threefry_key(key)
    V.check_epsilon(epsilon)
    V.check_positive("loss_sens", loss_sens)
    return jax.random.categorical(key, _lopt_em_logits(losses, weights, epsilon, loss_sens)).astype(jnp.int32)


class LinearParams(NamedTuple):
    w: Array
    b: Array


def _design(x, fit_intercept):
    x = jnp.asarray(x, jnp.float32)
    if fit_intercept:
        return jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], axis=1)
    return x


@full_precision
def weighted_least_squares(x: Array, y: Array, s: Array, group_weights: Array, *, num_groups: int,
                           ridge: Any = 0.0, fit_intercept: bool = True) -> LinearParams:
    """Exact LOPT for squared loss (Sec. 1.3.1): ``argmin_c (1/n) sum_i w_{s_i} (<c, x_i> - y_i)^2 +
    ridge ||c||^2`` in closed form (non-negative group weights ``w``; not private)."""
    V.check_shape("x", x, ndim=2)
    V.check_same_length(x=x, y=y, s=s)
    V.check_group_ids(s, num_groups)
    V.check_shape("group_weights", group_weights, shape=(num_groups,))
    if not V._is_tracer(group_weights) and np.any(np.asarray(group_weights) < 0):
        raise ValueError("group_weights must be >= 0 (the weighted least-squares LOPT needs W in R^K_{>=0}).")
    X = _design(x, fit_intercept)
    n = X.shape[0]
    a = jnp.asarray(group_weights, jnp.float32)[jnp.asarray(s)] / n
    A = (a * X.T) @ X + jnp.asarray(ridge, jnp.float32) * jnp.eye(X.shape[1]) + 1e-9 * jnp.eye(X.shape[1])
    beta = jnp.linalg.solve(A, (a * jnp.asarray(y, jnp.float32)) @ X)
    if fit_intercept:
        return LinearParams(beta[:-1], beta[-1])
    return LinearParams(beta, jnp.zeros((), jnp.float32))


def dp_gd_noise_std(epsilon: float, delta: float, steps: int, clip_norm: float, *,
                    relation: str = "replace_one") -> float:
    """Per-step Gaussian std on the clipped gradient sum so that ``steps`` full-batch steps are
    ``(epsilon, delta)``-DP: ``rho = dp_to_rho(eps, delta)`` (CKS), ``rho/steps`` per step, l2
    sensitivity ``2 C`` under replace-one.

    Privacy: replace-one only. :func:`dp_weighted_least_squares` divides the noisy sum by the
    number of rows ``n``, which add/remove changes (a private count), so ``relation="add_remove"``
    is refused."""
    from dpfair_jax.privacy import accounting as acc

    steps = V.check_int("steps", steps)
    V.check_clip_norm(clip_norm)
    V.check_choice("relation", relation, ("replace_one", "add_remove"))
    if relation == "add_remove":
        raise ValueError("dp_gd_noise_std: relation='add_remove' is not supported: the DP-GD oracle "
                         "divides the noisy gradient sum by the private row count n; use 'replace_one' "
                         "(n fixed and public).")
    rho = acc.dp_to_rho(epsilon, delta)
    sens = (2.0 if relation == "replace_one" else 1.0) * float(clip_norm)
    return acc.gaussian_sigma_for_rho(sens, rho / steps)


@full_precision
def dp_weighted_least_squares(key: Array, x: Array, y: Array, s: Array, group_weights: Array, *,
                              num_groups: int, noise_std: Any, steps: int, clip_norm: Any,
                              learning_rate: Any, radius: Any = 1.0, fit_intercept: bool = True
                              ) -> LinearParams:
    """LOPT_{eps,delta} by a DP gradient method (Bassily et al. 2014; Sec. 1.3.1): full-batch
    projected noisy GD on ``(1/n) sum_i w_{s_i} (<c, x_i> + b - y_i)^2`` with per-example clipping
    (ghost norms), Gaussian noise on the clipped sum, then division by ``n``, and projection onto the
    l2 ball of ``radius`` (the paper's footnote 8 projects onto the sphere; the ball is the convex
    set the analysis needs).

    Privacy: with ``noise_std = dp_gd_noise_std(eps, delta, steps, clip_norm)`` the ``steps``
    releases are ``(eps, delta)``-DP under replace-one (zCDP composition, CKS conversion), for a
    data-independent ``group_weights`` (privatize it first, as :func:`private_cgoo` does).
    """
    from dpfair_jax.privacy.clipping import glm_clipped_grad_sum

    V.check_threefry_key(key)
    V.check_shape("x", x, ndim=2)
    V.check_same_length(x=x, y=y, s=s)
    V.check_group_ids(s, num_groups)
    steps = V.check_int("steps", steps)
    V.check_clip_norm(clip_norm)
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    n, d = x.shape
    a = jnp.asarray(group_weights, jnp.float32)[jnp.asarray(s)]
    std = jnp.asarray(noise_std, jnp.float32)
    lr = jnp.asarray(learning_rate, jnp.float32)
    R = jnp.asarray(radius, jnp.float32)

    def project(p):
        norm = jnp.sqrt(jnp.sum(p.w**2) + p.b**2)
        f = 1.0 / jnp.maximum(1.0, norm / R)
        return LinearParams(p.w * f, p.b * f)

    def step(p, k):
        resid = x @ p.w + p.b - y
        grads, _ = glm_clipped_grad_sum(x, 2.0 * a * resid, clip_norm, fit_intercept=fit_intercept)
        if not fit_intercept:
            grads = {"w": grads["w"]}
        noisy = _mech.gaussian_mechanism(k, grads, std)  # l2 sensitivity 2C (replace-one)
        gw = noisy["w"] / n
        gb = noisy["b"] / n if fit_intercept else 0.0 * p.b
        return project(LinearParams(p.w - lr * gw, p.b - lr * gb)), None

    p0 = LinearParams(jnp.zeros((d,), jnp.float32), jnp.zeros((), jnp.float32))
    p, _ = jax.lax.scan(step, p0, jax.random.split(key, steps))
    return p


# =============================================================================================
# Mixtures, Frank-Wolfe (Algorithms 3-4) and Algorithm 2
# =============================================================================================


class MixtureResult(NamedTuple):
    """A randomized decision: grid ``indices [T]`` with mixture ``weights [T]`` (sum 1), its loss
    vector ``loss [K]``, ``objective = f(loss)``, ``constraint = g(loss)`` and ``h`` trajectory
    ``[T]`` of the iterate (diagnostic; computed on the private losses, do not release it).
    ``released [T, K]``: the Laplace-privatized loss vectors :func:`private_cgoo` read in each round
    (part of its private output; ``None`` for the non-private :func:`frank_wolfe`)."""

    indices: Array
    weights: Array
    loss: Array
    objective: Array
    constraint: Array
    trajectory: Array
    released: Array | None = None


def mixture_loss(losses: Array, indices: Array, weights: Array) -> Array:
    """Loss vector of the mixture: ``sum_t weights_t ell(c_{indices_t}, D)``."""
    return jnp.asarray(weights, jnp.float32) @ jnp.asarray(losses, jnp.float32)[indices]


def _finish(problem, losses, idx, wts, traj, released=None):
    l = mixture_loss(losses, idx, wts)
    return MixtureResult(idx, wts, l, problem.f(l), problem.g(l), traj, released)


@full_precision
def frank_wolfe(losses: Array, problem: CGOO, *, G: Any, steps: int, init_index: int = 0,
                variant: str = "jaggi", grad_variant: str = "corrected", smoothing: float | None = None
                ) -> MixtureResult:
    """Frank-Wolfe for CGOO over a grid's loss vectors (Algorithms 3-4, App. B), non-private.

    ``variant="jaggi"`` (default): Algorithm 3 in loss space, ``gamma_t = 2/(t+2)`` for
    ``t = 0..T-1`` (so the init is discarded), gradient of ``h`` at the mixture iterate ``l_t``,
    output the mixture with the FW weights; ``h(l_T) - h* <= 2 C_h/(T+2)`` (Lemma B.2) for smooth
    ``h``, ``C_h <= diam^2 beta_h`` (Lemma B.3).
    ``variant="paper"``: Algorithm 4 as printed: ``c_1 = init``, gradient at ``ell(c_t, D)``,
    output ``Unif(c_1..c_T)``.
    The gradient is :func:`penalized_grad` (``grad_variant``, ``smoothing``); the oracle is
    :func:`lopt_grid`. With the hinge penalty (``smoothing=None``) ``h`` is not smooth and
    Frank-Wolfe can stall at the constraint's kink; pass ``smoothing`` for the rate of Lemma B.2.
    """
    _check_loss_matrix(losses, problem.num_groups)
    steps = V.check_int("steps", steps)
    V.check_choice("variant", variant, ("jaggi", "paper"))
    V.check_choice("grad_variant", grad_variant, ("corrected", "paper"))
    return _frank_wolfe(jnp.asarray(losses, jnp.float32), jnp.asarray(G, jnp.float32), problem=problem,
                        steps=steps, init_index=int(init_index), variant=variant, grad_variant=grad_variant,
                        smoothing=None if smoothing is None else float(smoothing))


@partial(jax.jit, static_argnames=("problem", "steps", "init_index", "variant", "grad_variant", "smoothing"))
def _frank_wolfe(L, G, *, problem, steps, init_index, variant, grad_variant, smoothing):
    T = steps

    if variant == "jaggi":
        def body(carry, t):
            l, wts, _ = carry
            r = penalized_grad(problem, l, G, variant=grad_variant, smoothing=smoothing)
            m = lopt_grid(L, r)
            gam = 2.0 / (t + 2.0)
            l = (1.0 - gam) * l + gam * L[m]
            wts = (1.0 - gam) * wts
            wts = wts.at[t].set(gam)
            return (l, wts, m), (m, penalized(problem, l, G, smoothing=smoothing))

        init = (L[init_index], jnp.zeros((T,), jnp.float32), jnp.int32(init_index))
        (_, wts, _), (idx, traj) = jax.lax.scan(body, init, jnp.arange(T))
        return _finish(problem, L, idx, wts, traj)

    def body_p(carry, t):
        l, m_prev = carry
        r = penalized_grad(problem, L[m_prev], G, variant=grad_variant, smoothing=smoothing)
        m = lopt_grid(L, r)
        gam = 2.0 / (t + 2.0)
        l = (1.0 - gam) * l + gam * L[m]
        return (l, m), (m, penalized(problem, l, G, smoothing=smoothing))

    m0 = jnp.int32(init_index)
    (_, _), (idx, traj) = jax.lax.scan(body_p, (L[m0], m0), jnp.arange(1, T, dtype=jnp.float32))
    idx = jnp.concatenate([m0[None], idx])
    traj = jnp.concatenate([penalized(problem, L[m0], G, smoothing=smoothing)[None], traj])
    return _finish(problem, L, idx, jnp.full((T,), 1.0 / T, jnp.float32), traj)


class Algorithm2Budget(NamedTuple):
    """Per-round budgets of :func:`private_cgoo`: the oracle's ``(oracle_epsilon, oracle_delta)``,
    the weight release's ``weight_epsilon`` (Laplace, pure; 0 when weights are not privatized) and
    ``laplace_scale = (K/n) / weight_epsilon``; one round is ``(round_epsilon, oracle_delta)``-DP
    by basic composition; ``steps`` rounds compose by advanced composition (Lemma A.4) with slack
    ``delta_bar``."""

    oracle_epsilon: float
    oracle_delta: float
    weight_epsilon: float
    laplace_scale: float
    round_epsilon: float
    delta_bar: float
    steps: int


def algorithm2_budget(epsilon: float, delta: float, steps: int, *, n: int, num_groups: int,
                      oracle: str = "pure", privatize_weights: bool = True, weight_fraction: float = 0.25,
                      variant: str = "exact") -> Algorithm2Budget:
    """Host-side budgets of Algorithm 2 (lines 4-7) for a target ``(epsilon, delta)``.

    The per-round budget ``eps'`` is :func:`paper_formulas.cgoo_per_step_privacy` (``variant``
    "exact" | "closed_form" | "paper"); with ``privatize_weights`` a fraction ``weight_fraction``
    of it pays for the Laplace release of the loss vector that line 10 reads (l1 sensitivity
    ``K/n``), the rest for the oracle."""
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    steps = V.check_int("steps", steps)
    n = V.check_int("n", n)
    K = V.check_int("num_groups", num_groups)
    V.check_choice("oracle", oracle, ("pure", "approximate"))
    if privatize_weights and not 0.0 < float(weight_fraction) < 1.0:
        raise ValueError(f"weight_fraction must lie in (0, 1), got {weight_fraction!r}.")
    eps_round, delta_round = _pf.cgoo_per_step_privacy(epsilon, delta, steps, oracle=oracle, variant=variant)
    if oracle == "pure":
        delta_bar = float(delta)
    elif variant == "paper":
        delta_bar = delta_round / 2.0
    else:
        delta_bar = float(delta) / 2.0
    if privatize_weights:
        w_eps = eps_round * float(weight_fraction)
        o_eps = eps_round - w_eps
        scale = (K / n) / w_eps
    else:
        w_eps, o_eps, scale = 0.0, eps_round, 0.0
    return Algorithm2Budget(o_eps, delta_round, w_eps, scale, eps_round, delta_bar, steps)


def algorithm2_ledger(budget: Algorithm2Budget) -> dict[str, Any]:
    """What Algorithm 2 spends: each mechanism per round, and the total by Lemma A.4 over
    ``steps`` rounds (``(eps_bar, steps delta' + delta_bar)``).

    A budget without privatized weights (``algorithm2_budget(privatize_weights=False)``, the
    accounting of Alg. 2 as printed, Lemma 5.8) leaves line 10's weight a function of the private
    losses released to the next oracle without noise: no finite epsilon holds, so ``epsilon`` is
    ``inf``; the paper's figure is kept as ``paper_epsilon`` (oracle calls only) with a note."""
    eps_total, delta_total = _pf.advanced_composition(budget.round_epsilon, budget.oracle_delta,
                                                      budget.steps, budget.delta_bar)
    out = {
        "per_round": {"oracle": (budget.oracle_epsilon, budget.oracle_delta),
                      "weights": (budget.weight_epsilon, 0.0)},
        "rounds": budget.steps,
        "epsilon": eps_total,
        "delta": delta_total,
    }
    if budget.weight_epsilon <= 0.0:
        out.update(epsilon=math.inf, paper_epsilon=eps_total,
                   notes="weights of Alg. 2 line 10 computed from the private losses without noise: "
                         "no finite guarantee (paper_epsilon charges the oracle calls only, Lemma 5.8)")
    return out


@full_precision
def private_cgoo(key: Array, losses: Array, problem: CGOO, *, G: Any, steps: int, oracle_epsilon: Any,
                 laplace_scale: Any, n: int, point: str = "mixture", variant: str = "corrected",
                 init_index: int = 0, smoothing: float | None = None) -> MixtureResult:
    """Algorithm 2 (paper 002) over a grid with the pure LOPT_{eps',0} of :func:`lopt_grid_private`.

    Each of ``steps`` rounds: (1) release ``l~ = ell(c~_{t-1}, D) + Laplace(laplace_scale)`` (the
    previous decision's loss; ``c~_0 = init_index`` is data-independent); (2) the weight
    ``r_t = grad f + G 1[g >= 0] grad g`` at ``point``: ``"mixture"`` (default, the mean of the
    released losses so far, i.e. the uniform mixture's loss) or ``"last"`` (``l~`` itself, line 10);
    (3) ``c~_t = LOPT_{eps',0}(r_t)`` (``smoothing`` as in :func:`penalized_grad`). Output: the uniform mixture of ``c~_1..c~_T`` (line 13).
    ``variant="paper"``: line 10 literally (no noise, no ``G``, ``point="last"``), leaving the
    privacy gap of notes B.5 open. Budgets come from :func:`algorithm2_budget`; ``oracle_epsilon``
    and ``laplace_scale`` may be traced.

    Privacy (``variant="corrected"``): each round is ``(eps_o + eps_w)``-DP under replace-one
    (Laplace on the l1-sensitivity-``K/n`` loss vector, then the EM with a post-processed weight);
    ``steps`` adaptive rounds are ``(epsilon, delta)``-DP by advanced composition (Lemma A.4,
    :func:`algorithm2_ledger`). The mixture weights are public (uniform); the released loss
    vectors are returned as ``released [T, K]``. ``problem`` (thresholds) must be public, as for
    :func:`exponential_sampling`; ``laplace_scale = 0`` or ``variant="paper"`` is not private.
    """
    V.check_threefry_key(key)
    _check_loss_matrix(losses, problem.num_groups)
    steps = V.check_int("steps", steps)
    V.check_choice("point", point, ("mixture", "last"))
    V.check_choice("variant", variant, ("corrected", "paper"))
    V.check_epsilon(oracle_epsilon)
    V.check_positive("laplace_scale", laplace_scale, allow_zero=True)
    return _private_cgoo(key, jnp.asarray(losses, jnp.float32), jnp.asarray(G, jnp.float32),
                         jnp.asarray(oracle_epsilon, jnp.float32), jnp.asarray(laplace_scale, jnp.float32),
                         problem=problem, steps=steps, lsens=loss_sensitivity(n, problem.num_groups),
                         point=point, variant=variant, init_index=int(init_index),
                         smoothing=None if smoothing is None else float(smoothing))


@partial(jax.jit, static_argnames=("problem", "steps", "lsens", "point", "variant", "init_index", "smoothing"))
def _private_cgoo(key, L, G, oracle_epsilon, laplace_scale, *, problem, steps, lsens, point, variant,
                  init_index, smoothing):
    K = problem.num_groups
    literal = variant == "paper"
    if literal:
        point = "last"
    scale = jnp.zeros((), jnp.float32) if literal else laplace_scale

    def body(carry, xs):
        m_prev, total = carry
        t, k = xs
        k_noise, k_em = jax.random.split(k)
        released = _mech.laplace_mechanism(k_noise, L[m_prev], scale)  # l1 sensitivity K/n
        total = total + released
        at = total / (t + 1.0) if point == "mixture" else released
        r = penalized_grad(problem, at, G, variant="paper" if literal else "corrected",
                           smoothing=None if literal else smoothing)
        m = lopt_grid_private(k_em, L, r, epsilon=oracle_epsilon, loss_sens=lsens)
        return (m, total), (m, released)

    init = (jnp.int32(init_index), jnp.zeros((K,), jnp.float32))
    xs = (jnp.arange(steps, dtype=jnp.float32), jax.random.split(key, steps))
    _, (idx, released) = jax.lax.scan(body, init, xs)
    wts = jnp.full((steps,), 1.0 / steps, jnp.float32)
    lm = jnp.cumsum(L[idx], axis=0) / jnp.arange(1, steps + 1, dtype=jnp.float32)[:, None]
    traj = jax.vmap(lambda l: penalized(problem, l, G, smoothing=smoothing))(lm)
    return _finish(problem, L, idx, wts, traj, released)


class RegressionMixture(NamedTuple):
    """Uniform mixture of ``T`` linear predictors (``params`` with a leading ``[T]`` axis) and its
    itemized clipped group losses on the training data ``loss [K]`` (diagnostic; not private).
    ``released [T, K]``: the Laplace-privatized loss vectors read in each round (private output)."""

    params: LinearParams
    weights: Array
    loss: Array
    released: Array | None = None


@full_precision
def clipped_group_losses(params: LinearParams, x: Array, y: Array, s: Array, num_groups: int,
                         loss_bound: Any) -> Array:
    """Itemized group losses of a linear predictor with per-example losses
    ``min(1, (<w, x> + b - y)^2 / loss_bound)`` in ``[0, 1]``: ``[K]``."""
    pred = jnp.asarray(x, jnp.float32) @ params.w + params.b
    per = jnp.minimum(1.0, jnp.square(pred - jnp.asarray(y, jnp.float32)) / jnp.asarray(loss_bound, jnp.float32))
    return group_losses(per, s, num_groups)


@full_precision
def private_cgoo_regression(key: Array, x: Array, y: Array, s: Array, problem: CGOO, *, G: Any, steps: int,
                            loss_bound: float, oracle_noise_std: Any, oracle_steps: int, clip_norm: Any,
                            learning_rate: Any, radius: Any, laplace_scale: Any, smoothing: float | None = None
                            ) -> RegressionMixture:
    """Algorithm 2 with LOPT_{eps,delta} = :func:`dp_weighted_least_squares` (Sec. 1.3.1, Cor. 1.12).

    Each round releases the previous predictor's itemized clipped group losses with Laplace noise
    (``laplace_scale = (K/n)/eps_w``), forms ``r_t`` = :func:`penalized_grad` at the running mean of
    the released losses, clips it at 0 and rescales it to max 1 (the oracle needs ``W in R^K_{>=0}``;
    the argmin is scale-free), and calls the DP-GD oracle with those group weights. The oracle
    minimizes the (unclipped) weighted squared loss, a convex surrogate of the clipped losses the
    CGOO is stated in. Output: the uniform mixture of the ``steps`` oracle outputs.

    Privacy: with ``algorithm2_budget(..., oracle="approximate")``, ``oracle_noise_std =
    dp_gd_noise_std(oracle_epsilon, oracle_delta, oracle_steps, clip_norm)`` and its
    ``laplace_scale``, each round is ``(round_epsilon, oracle_delta)``-DP (replace-one) and the
    ``steps`` rounds compose to the target by Lemma A.4 (:func:`algorithm2_ledger`).
    """
    V.check_threefry_key(key)
    V.check_shape("x", x, ndim=2)
    V.check_same_length(x=x, y=y, s=s)
    V.check_group_ids(s, problem.num_groups)
    steps = V.check_int("steps", steps)
    oracle_steps = V.check_int("oracle_steps", oracle_steps)
    V.check_positive("loss_bound", loss_bound)
    V.check_positive("laplace_scale", laplace_scale, allow_zero=True)
    V.check_positive("oracle_noise_std", oracle_noise_std, allow_zero=True)
    K = problem.num_groups
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    s = jnp.asarray(s, jnp.int32)
    d = x.shape[1]
    scale = jnp.asarray(laplace_scale, jnp.float32)

    def body(carry, xs):
        prev, total = carry
        t, k = xs
        k_noise, k_or = jax.random.split(k)
        released = _mech.laplace_mechanism(k_noise, clipped_group_losses(prev, x, y, s, K, loss_bound), scale)
        total = total + released
        r = jax.nn.relu(penalized_grad(problem, total / (t + 1.0), G, smoothing=smoothing))
        r = r / jnp.maximum(jnp.max(r), 1e-12)
        p = dp_weighted_least_squares(k_or, x, y, s, r, num_groups=K, noise_std=oracle_noise_std,
                                      steps=oracle_steps, clip_norm=clip_norm, learning_rate=learning_rate,
                                      radius=radius)
        return (p, total), (p, released)

    p0 = LinearParams(jnp.zeros((d,), jnp.float32), jnp.zeros((), jnp.float32))
    xs = (jnp.arange(steps, dtype=jnp.float32), jax.random.split(key, steps))
    _, (ps, released) = jax.lax.scan(body, (p0, jnp.zeros((K,), jnp.float32)), xs)
    losses = jax.vmap(lambda p: clipped_group_losses(p, x, y, s, K, loss_bound))(ps)
    return RegressionMixture(ps, jnp.full((steps,), 1.0 / steps, jnp.float32), jnp.mean(losses, axis=0),
                             released)
