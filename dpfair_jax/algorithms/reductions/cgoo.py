"""Mixtures over a grid, Frank-Wolfe (paper 002, Algorithms 3-4) and the private CGOO of
Algorithm 2 (over a grid with the exponential-mechanism oracle, or for linear regression with the
DP gradient-descent oracle), with its per-round budgets and ledger.

Privacy: :func:`private_cgoo` and :func:`private_cgoo_regression` are ``(epsilon, delta)``-DP under
replace-one with the budgets of :func:`algorithm2_budget` (:func:`algorithm2_ledger` states the
total); :func:`frank_wolfe` is not private.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax import _validation as V
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.algorithms.reductions import theory as _pf
from dpfair_jax.privacy.bounding import clip_to_interval
from dpfair_jax.privacy.precision import full_precision

from .oracles import LinearParams, dp_weighted_least_squares, lopt_grid, lopt_grid_private
from .problem import CGOO, _check_loss_matrix, group_losses, loss_sensitivity, penalized, penalized_grad

__all__ = [
    "MixtureResult", "mixture_loss", "frank_wolfe", "Algorithm2Budget", "algorithm2_budget",
    "algorithm2_ledger", "private_cgoo", "RegressionMixture", "clipped_group_losses", "private_cgoo_regression",
]

Array = jax.Array


# =============================================================================================
# Mixtures, Frank-Wolfe (Algorithms 3-4) and Algorithm 2
# =============================================================================================


class MixtureResult(NamedTuple):
    """A randomized decision: grid ``indices [T]`` with mixture ``weights [T]`` (sum 1), its loss
    vector ``loss [K]``, ``objective = f(loss)``, ``constraint = g(loss)`` and ``h`` trajectory
    ``[T]`` of the iterate (diagnostic; computed on the private losses, do not release it).
    ``released [T, K]``: the Laplace-privatized loss vectors :func:`private_cgoo` read in each round
    (part of its private output; ``None`` for the non-private :func:`frank_wolfe`).
    ``round_epsilon``: what one round of :func:`private_cgoo` spent, ``oracle_epsilon + (K/n) /
    laplace_scale`` (``inf`` without Laplace noise or with ``variant="paper"``); the rounds compose
    by :func:`algorithm2_ledger`. ``None`` for :func:`frank_wolfe`."""

    indices: Array
    weights: Array
    loss: Array
    objective: Array
    constraint: Array
    trajectory: Array
    released: Array | None = None
    round_epsilon: Array | None = None


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

    The per-round budget ``eps'`` is :func:`reductions.theory.cgoo_per_step_privacy` (``variant``
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
        scale = _rn.laplace_scale(loss_sensitivity(n, K, norm="l1"), w_eps)  # K/n: l1 sensitivity
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
                         l1sens=loss_sensitivity(n, problem.num_groups, norm="l1"), point=point,
                         variant=variant, init_index=int(init_index),
                         smoothing=None if smoothing is None else float(smoothing))


@partial(jax.jit, static_argnames=("problem", "steps", "lsens", "l1sens", "point", "variant", "init_index",
                                   "smoothing"))
def _private_cgoo(key, L, G, oracle_epsilon, laplace_scale, *, problem, steps, lsens, l1sens, point, variant,
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
    round_epsilon = oracle_epsilon + _rn.laplace_epsilon(l1sens, scale)
    return _finish(problem, L, idx, wts, traj, released)._replace(round_epsilon=round_epsilon)


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
    per = clip_to_interval(jnp.square(pred - jnp.asarray(y, jnp.float32)) / jnp.asarray(loss_bound, jnp.float32),
                           0.0, 1.0)
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
