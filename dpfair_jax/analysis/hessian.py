"""Hessian traces of group losses (paper 001, Theorems 1, 4, 5 and Appendix D).

Paper 001 defines ``H_l^a`` as the Hessian of the *sum* of losses over ``D_a`` but expands the
*mean* loss ``L(theta; D_a)`` (eq. 7). Everything here uses the **per-sample mean** Hessian
``H_a = (1/|D_a|) sum_{i in D_a} nabla^2 l_i`` so that groups of different sizes compare
(Corollary 1 writes ``Tr(H_a)`` as an expectation over ``D_a``).

* :func:`hessian_trace` / :func:`group_hessian_traces`: exact (full Hessian of the flattened
  parameters; small models) or Hutchinson (Rademacher probes, ``E[v^T H v] = Tr H``, with its
  standard error; any model, forward-over-reverse Hessian-vector products).
* :func:`per_example_hessian_traces`: ``Tr nabla^2 l_i`` for every example (Thm 5, App. C.3).
* :func:`prediction_uncertainty`: ``1 - sum_k f_k(x)^2`` (Thm 5; the printed "1 - sum(1 - f^2)"
  is a typo).
* :func:`appendix_d_traces`: the closed forms of Appendix D for a one-hidden-layer network
  (eqs. 35-37), corrected: the printed list swaps theta_1/theta_2, Gamma_j uses theta_2 where the
  output weights theta_1 are meant, writes ``(Y - f)`` where the gradient of cross-entropy is
  ``(f - Y)`` (the sign matters in the sigma'' term), and keeps only the diagonal
  ``f_k (1 - f_k)`` of the softmax Hessian ``diag(f) - f f^T``; ``variant="paper"`` gives the
  printed Gamma_j.

Losses are per-example functions ``loss_fn(params, x_i, y_i) -> scalar`` over any pytree.
All functions are pure and jit-able; group weights are arrays (no loops over groups).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from dpfair_jax import _validation as v

__all__ = [
    "TraceEstimate",
    "weighted_mean_loss",
    "hvp",
    "hessian_trace",
    "hutchinson_trace",
    "group_hessian_traces",
    "per_example_hessian_traces",
    "prediction_uncertainty",
    "appendix_d_traces",
]

PyTree = Any
LossFn = Callable[..., jax.Array]
METHODS = ("exact", "hutchinson")


class TraceEstimate(NamedTuple):
    """A trace and its standard error (0 for exact traces)."""

    trace: jax.Array
    se: jax.Array


def weighted_mean_loss(loss_fn: LossFn, params: PyTree, x: jax.Array, y: jax.Array,
                       weights: jax.Array | None = None) -> jax.Array:
    """``sum_i w_i l_i(params) / sum_i w_i`` (a group's mean loss with ``w`` = group indicator)."""
    losses = jax.vmap(loss_fn, in_axes=(None, 0, 0))(params, x, y)
    if weights is None:
        return jnp.mean(losses)
    w = jnp.asarray(weights, losses.dtype)
    return jnp.sum(w * losses) / jnp.maximum(jnp.sum(w), 1e-30)


def hvp(f: Callable[[PyTree], jax.Array], params: PyTree, vec: PyTree) -> PyTree:
    """Hessian-vector product ``nabla^2 f(params) vec`` (forward-over-reverse)."""
    return jax.jvp(jax.grad(f), (params,), (vec,))[1]


def _exact_trace_flat(f: Callable[[PyTree], jax.Array], params: PyTree) -> jax.Array:
    flat, unravel = ravel_pytree(params)
    h = jax.hessian(lambda p: f(unravel(p)))(flat)
    return jnp.trace(h)


def _tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def _rademacher_like(key: jax.Array, params: PyTree) -> PyTree:
    flat, unravel = ravel_pytree(params)
    return unravel(jax.random.rademacher(key, flat.shape, flat.dtype))


def _check_common(loss_fn, x, y, weights=None) -> None:
    if not callable(loss_fn):
        raise ValueError("loss_fn must be a per-example loss loss_fn(params, x_i, y_i) -> scalar.")
    v.check_finite("x", x)
    v.check_finite("y", y)
    v.check_same_length(x=x, y=y, weights=weights)


def hutchinson_trace(key: jax.Array, f: Callable[[PyTree], jax.Array], params: PyTree,
                     num_probes: int) -> TraceEstimate:
    """Hutchinson's estimate of ``Tr nabla^2 f(params)`` with ``num_probes`` Rademacher probes.

    Unbiased; ``se`` is the sample standard deviation of ``v^T H v`` over probes / sqrt(probes).
    Jit-able (``num_probes`` static).
    """
    keys = jax.random.split(key, num_probes)

    def one(k):
        vec = _rademacher_like(k, params)
        return _tree_vdot(vec, hvp(f, params, vec))

    vals = jax.vmap(one)(keys)
    se = jnp.std(vals, ddof=1) / jnp.sqrt(num_probes) if num_probes > 1 else jnp.asarray(jnp.inf, vals.dtype)
    return TraceEstimate(jnp.mean(vals), se)


def hessian_trace(loss_fn: LossFn, params: PyTree, x: jax.Array, y: jax.Array, *,
                  weights: jax.Array | None = None, method: str = "exact",
                  key: jax.Array | None = None, num_probes: int = 100) -> TraceEstimate:
    """``Tr H`` of the weighted mean loss ``sum_i w_i l_i / sum_i w_i`` (paper 001, eq. 7-9).

    ``method="exact"`` builds the full Hessian of the flattened parameters (P x P; small models);
    ``"hutchinson"`` needs ``key`` and uses ``num_probes`` Rademacher probes.
    """
    _check_common(loss_fn, x, y, weights)
    v.check_choice("method", method, METHODS)
    if method == "hutchinson":
        if key is None:
            raise ValueError("method='hutchinson' needs key= (a threefry PRNG key).")
        v.check_threefry_key(key)
        num_probes = v.check_int("num_probes", num_probes, minimum=2)
    return _single_trace(loss_fn, params, x, y, weights, key, method=method, num_probes=num_probes)


@functools.partial(jax.jit, static_argnames=("loss_fn", "method", "num_probes"))
def _single_trace(loss_fn, params, x, y, weights, key, *, method, num_probes):
    f = lambda p: weighted_mean_loss(loss_fn, p, x, y, weights)  # noqa: E731
    if method == "exact":
        t = _exact_trace_flat(f, params)
        return TraceEstimate(t, jnp.zeros_like(t))
    return hutchinson_trace(key, f, params, num_probes)


def group_hessian_traces(loss_fn: LossFn, params: PyTree, x: jax.Array, y: jax.Array,
                         s: jax.Array, num_groups: int, *, mask: jax.Array | None = None,
                         method: str = "exact", key: jax.Array | None = None,
                         num_probes: int = 100) -> tuple[TraceEstimate, TraceEstimate]:
    """Per-group traces ``Tr H_a`` ``[K]`` and the population trace ``Tr H`` (per-sample means).

    Returns ``(groups, population)``, each a :class:`TraceEstimate`. One program: the K group
    weight vectors are vmapped (Hutchinson probes are shared across groups, common random numbers).
    An empty group gets trace 0.
    """
    _check_common(loss_fn, x, y, mask)
    v.check_choice("method", method, METHODS)
    num_groups = v.check_int("num_groups", num_groups, minimum=1)
    v.check_group_ids(s, num_groups)
    if method == "hutchinson":
        if key is None:
            raise ValueError("method='hutchinson' needs key= (a threefry PRNG key).")
        v.check_threefry_key(key)
        num_probes = v.check_int("num_probes", num_probes, minimum=2)
    return _group_traces(loss_fn, params, x, y, s, mask, key, num_groups=num_groups,
                         method=method, num_probes=num_probes)


@functools.partial(jax.jit, static_argnames=("loss_fn", "num_groups", "method", "num_probes"))
def _group_traces(loss_fn, params, x, y, s, mask, key, *, num_groups, method, num_probes):
    dt = jnp.result_type(x)
    base = jnp.ones(x.shape[0], dt) if mask is None else jnp.asarray(mask, dt)
    w = jnp.concatenate([jax.nn.one_hot(s, num_groups, dtype=dt).T * base, base[None]], axis=0)

    def one(wk):
        f = lambda p: weighted_mean_loss(loss_fn, p, x, y, wk)  # noqa: E731
        if method == "exact":
            t = _exact_trace_flat(f, params)
            return TraceEstimate(t, jnp.zeros_like(t))
        return hutchinson_trace(key, f, params, num_probes)

    est = jax.lax.map(one, w)
    present = jnp.sum(w, axis=1) > 0
    est = TraceEstimate(jnp.where(present, est.trace, 0.0), jnp.where(present, est.se, 0.0))
    return (TraceEstimate(est.trace[:-1], est.se[:-1]), TraceEstimate(est.trace[-1], est.se[-1]))


def per_example_hessian_traces(loss_fn: LossFn, params: PyTree, x: jax.Array, y: jax.Array, *,
                               chunk_size: int = 64) -> jax.Array:
    """Exact ``Tr nabla^2_theta l(f_theta(x_i), y_i)`` for every example ``[n]`` (Thm 5, App. C.3).

    Full per-example Hessians of the flattened parameters, ``chunk_size`` examples at a time
    (``lax.map``), so memory is ``chunk_size * P^2``. For small models only.
    """
    _check_common(loss_fn, x, y)
    chunk_size = v.check_int("chunk_size", chunk_size, minimum=1)
    return _per_example_core(loss_fn, params, x, y, chunk_size=chunk_size)


@functools.partial(jax.jit, static_argnames=("loss_fn", "chunk_size"))
def _per_example_core(loss_fn, params, x, y, *, chunk_size):
    flat, unravel = ravel_pytree(params)

    def one(xy):
        xi, yi = xy
        return jnp.trace(jax.hessian(lambda p: loss_fn(unravel(p), xi, yi))(flat))

    return jax.lax.map(one, (x, y), batch_size=min(chunk_size, x.shape[0]))


def prediction_uncertainty(probs: jax.Array) -> jax.Array:
    """``1 - sum_k f_k(x)^2`` (paper 001, Thm 5): 0 for one-hot predictions, ``1 - 1/K`` at uniform.

    ``probs``: ``[n, K]`` class probabilities, or ``[n]`` = P(y = 1) of a binary model.
    """
    p = jnp.asarray(probs)
    if p.ndim == 1:
        return 2.0 * p * (1.0 - p)
    return 1.0 - jnp.sum(p * p, axis=-1)


_ACT_DERIVS = {
    # activation -> (a(h), a'(h), a''(h))
    "tanh": lambda h: (jnp.tanh(h), 1 - jnp.tanh(h) ** 2, -2 * jnp.tanh(h) * (1 - jnp.tanh(h) ** 2)),
    "sigmoid": lambda h: (jax.nn.sigmoid(h), jax.nn.sigmoid(h) * (1 - jax.nn.sigmoid(h)),
                          jax.nn.sigmoid(h) * (1 - jax.nn.sigmoid(h)) * (1 - 2 * jax.nn.sigmoid(h))),
}


def appendix_d_traces(params: PyTree, x: jax.Array, y: jax.Array, *, activation: str = "tanh",
                      variant: str = "corrected") -> dict[str, jax.Array]:
    """Closed-form per-example Hessian traces of a one-hidden-layer network (paper 001, App. D).

    ``params``: a ``models.mlp(hidden=(H,), out=K)`` layout ``{"layers": {0: {"kernel" [d, H] =
    theta_2, "bias"}, 1: {"kernel" [H, K] = theta_1, "bias"}}}``; ``K = 1`` is a single logit with
    the logistic loss, ``K >= 2`` softmax cross-entropy with integer labels ``y``. With ``O`` the
    hidden outputs, ``h`` the pre-activations, ``r = dl/dz = f - Y`` and ``S = d^2 l / dz^2``
    (``diag(f) - f f^T``; ``f (1 - f)`` for one logit)::

        Tr nabla^2_{theta_1} l = Tr(S) sum_j O_j^2          (eq. 36; Tr S = 1 - sum_k f_k^2)
        Tr nabla^2_{b_1} l     = Tr(S)
        Tr nabla^2_{theta_2} l = ||x||^2 sum_j Gamma_j      (eq. 37)
        Tr nabla^2_{b_2} l     = sum_j Gamma_j
        Gamma_j = a''(h_j) (theta_1 r)_j + a'(h_j)^2 (theta_1 S theta_1^T)_jj

    ``variant="paper"`` uses the printed ``Gamma_j = a''(h_j) sum_k theta_{1,jk} (Y_k - f_k) +
    a'(h_j)^2 sum_k theta_{1,jk}^2 f_k (1 - f_k)`` (with theta_1 for the printed theta_2); it
    differs from the true trace. Returns per-example arrays ``[n]``: ``output`` (theta_1 and its
    bias), ``hidden`` (theta_2 and its bias), ``total``, and ``uncertainty = 1 - sum_k f_k^2``.
    """
    v.check_choice("activation", activation, _ACT_DERIVS)
    v.check_choice("variant", variant, ("corrected", "paper"))
    v.check_finite("x", x)
    layers = params["layers"]
    if sorted(layers) != [0, 1]:
        raise ValueError("appendix_d_traces needs a one-hidden-layer models.mlp (layers 0 and 1).")
    w2, b2 = layers[0]["kernel"], layers[0]["bias"]
    w1, b1 = layers[1]["kernel"], layers[1]["bias"]
    k = w1.shape[1]
    h = x @ w2 + b2  # [n, H]
    o, d1, d2 = _ACT_DERIVS[activation](h)
    z = o @ w1 + b1  # [n, K]
    if k == 1:
        p = jax.nn.sigmoid(z[:, 0])
        f = jnp.stack([1 - p, p], axis=-1)
        r = (p - jnp.asarray(y, p.dtype))[:, None]  # [n, 1]
        s_tr = p * (1 - p)
        w1s = w1[:, 0] ** 2 * s_tr[:, None]  # (theta_1 S theta_1^T)_jj  [n, H]
        w1r = r @ w1.T
        y_minus_f = -r
        paper_quad = w1s
    else:
        f = jax.nn.softmax(z, axis=-1)
        yoh = jax.nn.one_hot(y, k, dtype=f.dtype)
        r = f - yoh
        s_tr = 1 - jnp.sum(f * f, axis=-1)
        w1r = r @ w1.T  # [n, H]
        w1f = f @ w1.T  # sum_k theta_{1,jk} f_k
        w1s = (f @ (w1 ** 2).T) - w1f ** 2
        y_minus_f = -r
        paper_quad = (f * (1 - f)) @ (w1 ** 2).T
    if variant == "corrected":
        gamma = d2 * w1r + d1 ** 2 * w1s
    else:
        gamma = d2 * (y_minus_f @ w1.T) + d1 ** 2 * paper_quad
    gsum = jnp.sum(gamma, axis=-1)
    output = s_tr * (jnp.sum(o * o, axis=-1) + 1.0)
    hidden = gsum * (jnp.sum(x * x, axis=-1) + 1.0)
    return {"output": output, "hidden": hidden, "total": output + hidden,
            "uncertainty": 1 - jnp.sum(f * f, axis=-1)}
