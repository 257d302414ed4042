"""Convergence preconditions of the tradeoff study (paper 004): a non-private reference optimum of
the ERMI-regularized objective per lambda, and the checks a tuned frontier must pass before its
claims can be tested.

* :func:`ermi_objective` -- the objective DP-FERMI minimizes (Lowy et al., ICLR 2023, eq. (FERMI)
  with Theorem 3.2's inner maximum in closed form): ``mean_i loss(theta; x_i, y_i) + lam *
  ERMI(F(x; theta), s)`` (``ERMI_EO`` of Appendix B eq. 5 for equalized odds, weighted by
  ``p_Y``), since ``max_W mean_i psi_i(theta, W) = ERMI`` (``fairness.ermi.w_star``); plus an
  optional ridge ``ridge / 2 |w|^2`` (default 1e-6) that keeps the optimum finite on one-hot data
  with separable rare categories.
* :func:`reference_optimum` -- that objective minimized in float64 by damped (saddle-free)
  Newton steps with a backtracking line search, from the methods' zero start, one compiled
  ``vmap`` over replicates x lambdas; returns the parameters, objective and gradient norm. The
  objective is nonconvex in ``theta`` for ``lam > 0``: the reference is the stationary point
  reached from the zero start (the start the methods share), stated as such.
* :func:`monotone_check` -- whether a frontier's violation does not rise in lambda within its
  interval (a significant increase fails it; with ``tol``, an increase not shown to be at most ``tol``).
* :func:`edge_share` -- the share of selected runs whose learning rate is the largest of the grid.
* :func:`lagrangian_objective` -- PF-LD's primal objective at given multipliers (both PF-LDs).
* :func:`relative_stationarity` / :func:`row_stationarity` -- the per-run criterion of the public
  study's ``converged`` column: the gradient norm of the method's own training objective at the
  released parameters over its norm at the methods' start (:data:`STATIONARITY_RTOL`).

Privacy: none of this is private. The reference optimum and the checks read the training and
test splits without noise; they are diagnostics of the method's optimization at ``eps = inf``
(no noise), released in no private row. The public study's ``converged`` flag reads only the test
split (evaluation, as the test metrics; :func:`row_stationarity`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax.flatten_util import ravel_pytree

from dpfair_jax.fairness import ermi as E

__all__ = ["ermi_objective", "reference_optimum", "monotone_check", "edge_share",
           "lagrangian_objective", "relative_stationarity", "row_stationarity", "STATIONARITY_RTOL"]

#: a run counts as converged when the gradient norm of its method's objective at the released
#: parameters is at most this share of the norm at the start. A loose bar on purpose: it catches runs
#: stopped far from a stationary point (too few steps, too small a learning rate: a ratio near 1),
#: it certifies no optimum; at finite epsilon the last iterate's gradient does not vanish (the noise),
#: so a small bar would flag every private run (a small logistic study tuned over 10 epochs, read on
#: its test split: about 0.03-0.3 at eps = inf, 0.2-0.5 at eps = 1; 0.998 at a learning rate of 1e-4)
STATIONARITY_RTOL = 0.5

def _task_loss(logits: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example task loss of the methods (``algorithms.fermi.task_loss``): binary logistic for one
    logit, softmax cross-entropy otherwise."""
    if logits.ndim == 1 or logits.shape[-1] == 1:
        z = logits.reshape(logits.shape[0])
        return jnp.logaddexp(0.0, z) - y.astype(z.dtype) * z
    return jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]


def ermi_objective(params, model, x, y, s, lam, *, num_groups: int, num_classes: int, fairness: str = "dp",
                   ridge: float = 0.0) -> jax.Array:
    """``mean_i loss_i + lam * ERMI + ridge / 2 * |w|^2`` at ``params`` of ``model`` (module docstring);
    ``fairness="eo"``: the ``p_Y``-weighted ERMI of Appendix B eq. 5 (DP-FERMI's default,
    ``FermiConfig.eo_weighted=True``). jit/vmap-able; the dtype follows ``x``."""
    logits = model.apply(params, x)
    probs = E.soft_predictions(logits)
    if fairness == "dp":
        reg = E.ermi(probs, s, num_groups)
    else:
        reg = E.ermi_eo(probs, s, y, num_groups, max(num_classes, 2), weighted=True)
    w = params["w"] if isinstance(params, dict) and "w" in params else ravel_pytree(params)[0]
    return jnp.mean(_task_loss(logits, y)) + lam * reg + 0.5 * ridge * jnp.sum(w**2)


def _newton_solve(f, theta0, iters: int, gtol: float = 1e-10):
    """Minimize ``f`` from ``theta0`` by at most ``iters`` saddle-free Newton steps (the Hessian's
    eigenvalues taken in absolute value, floored relative to the largest), stopping once the gradient
    norm is at most ``gtol``; each step is halved from 1 until ``f`` decreases by Armijo's rule
    (c = 1e-4; no step after 40 halvings). Returns ``(theta, f, |grad|)``."""
    vg, hess = jax.value_and_grad(f), jax.hessian(f)

    def step(_, theta):
        f0, g = vg(theta)
        lam_, V = jnp.linalg.eigh(hess(theta))
        a = jnp.abs(lam_)
        a = jnp.maximum(a, 1e-10 * jnp.maximum(jnp.max(a), 1e-30) + 1e-14)
        d = -(V @ ((V.T @ g) / a))
        slope = g @ d

        def more(c):
            t, val, k = c
            return (k < 40) & ~(jnp.isfinite(val) & (val <= f0 + 1e-4 * t * slope))

        def halve(c):
            t, _, k = c
            return t / 2, f(theta + (t / 2) * d), k + 1

        t, val, _ = jax.lax.while_loop(more, halve, (jnp.ones_like(f0), f(theta + d), 0))
        ok = jnp.isfinite(val) & (val <= f0 + 1e-4 * t * slope)
        return theta + jnp.where(ok, t, 0.0) * d

    def go(c):
        return (c[1] < iters) & (c[2] > gtol)

    def body(c):
        theta = step(c[1], c[0])
        return theta, c[1] + 1, jnp.linalg.norm(vg(theta)[1])

    theta, _, gnorm = jax.lax.while_loop(go, body, (theta0, 0, jnp.linalg.norm(vg(theta0)[1])))
    return theta, f(theta), gnorm


def reference_optimum(model, x, y, s, lams, *, num_groups: int, num_classes: int, fairness: str = "dp",
                      ridge: float = 1e-6, iters: int = 40) -> dict:
    """The non-private reference optimum of :func:`ermi_objective` per replicate and lambda, in float64.

    ``x [R, n, d]``, ``y [R, n]``, ``s [R, n]``: the training splits of ``R`` replicates (one shape);
    ``lams [L]``. One compiled ``vmap`` over replicates x lambdas of :func:`_newton_solve` from
    ``model``'s zero start (the methods' start), at most ``iters`` steps, stopping when every
    gradient norm is at most 1e-10. Returns ``{"params": model params [R, L, ...]
    (float32), "objective" [R, L], "grad_norm" [R, L]}`` (float64 arrays as NumPy): a gradient norm
    near 1e-8 or below marks a stationary point to float64 precision.

    Privacy: none (non-private reference on the training data, a diagnostic; module docstring).
    """
    x, y, s = np.asarray(x), np.asarray(y), np.asarray(s)
    if x.ndim != 3 or y.shape != x.shape[:2] or s.shape != x.shape[:2]:
        raise ValueError(f"x must be [R, n, d] with y, s [R, n]; got {x.shape}, {y.shape}, {s.shape}.")
    lams = np.asarray(lams, np.float64)
    if lams.ndim != 1 or lams.size == 0 or not np.all(np.isfinite(lams)) or np.any(lams < 0):
        raise ValueError(f"lams must be a non-empty 1-d array of finite numbers >= 0, got {lams!r}.")
    if fairness not in ("dp", "eo"):
        raise ValueError(f"fairness must be 'dp' or 'eo', got {fairness!r}.")
    p32 = model.init(jax.random.key(0), x.shape[2])
    with jax.enable_x64(True):
        flat0, unravel = ravel_pytree(jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, jnp.float64), p32))

        def solve(xr, yr, sr, lam):
            def f(theta):
                return ermi_objective(unravel(theta), model, xr, yr, sr, lam, num_groups=num_groups,
                                      num_classes=num_classes, fairness=fairness, ridge=ridge)
            return _newton_solve(f, flat0, iters)

        prog = jax.jit(jax.vmap(jax.vmap(solve, in_axes=(None, None, None, 0)), in_axes=(0, 0, 0, None)))
        theta, obj, gn = prog(jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.int32), jnp.asarray(s, jnp.int32),
                              jnp.asarray(lams))
        theta, obj, gn = np.asarray(theta), np.asarray(obj), np.asarray(gn)
    params = jax.vmap(jax.vmap(unravel))(jnp.asarray(theta, jnp.float32))
    return {"params": params, "objective": obj, "grad_norm": gn}


def monotone_check(table: pd.DataFrame, *, lam: str = "lam", value: str = "violation",
                   replicate: str = "replicate", alpha: float = 0.05, tol: float | None = None) -> dict:
    """Whether ``value`` does not rise in ``lam``: for each pair of adjacent lambdas, the paired
    per-replicate increase's mean and its one-sided ``1 - alpha / pairs`` t-bounds ``lower`` and
    ``upper`` (Bonferroni over the pairs).

    * ``tol=None`` (no significant rise): a pair passes when ``lower <= 0``.
    * ``tol`` given (shown not to rise): a pair passes when ``upper <= tol``, so one outlier
      replicate widens the interval and fails the pair instead of passing it for want of power.

    With one replicate the point increase decides (``<= 0``). Returns ``{"monotone", "pairs":
    [{"from", "to", "increase", "lower", "upper", "max_split_increase", "replicates", "ok"}],
    "worst"}`` (``worst``: the pair with the largest ``lower``, or ``upper`` when ``tol`` is given)."""
    from scipy import stats

    wide = table.pivot_table(index=replicate, columns=lam, values=value, aggfunc="mean").sort_index(axis=1)
    lams_ = list(wide.columns)
    pairs = max(len(lams_) - 1, 1)
    rows = []
    for a, b in zip(lams_[:-1], lams_[1:]):
        d = (wide[b] - wide[a]).dropna().to_numpy(float)
        if d.size == 0:
            continue
        mean = float(np.mean(d))
        half = (float(stats.t.ppf(1 - alpha / pairs, d.size - 1)) * float(np.std(d, ddof=1)) / math.sqrt(d.size)
                if d.size >= 2 else 0.0)
        if d.size < 2:
            ok = mean <= 0.0
        else:
            ok = (mean - half <= 0.0) if tol is None else (mean + half <= float(tol))
        rows.append({"from": float(a), "to": float(b), "increase": mean, "lower": mean - half, "upper": mean + half,
                     "max_split_increase": float(np.max(d)), "replicates": int(d.size), "ok": bool(ok)})
    side = "lower" if tol is None else "upper"
    worst = max(rows, key=lambda r: r[side]) if rows else None
    return {"monotone": all(r["ok"] for r in rows), "pairs": rows, "worst": worst}


def edge_share(values, grid) -> float:
    """The share of ``values`` (the selected learning rates) equal to the largest value of ``grid``."""
    values = np.asarray(values, float)
    if values.size == 0:
        return float("nan")
    top = float(np.max(np.asarray(grid, float)))
    return float(np.mean(np.isclose(values, top, rtol=1e-6, atol=0.0)))


def lagrangian_objective(params, model, x, y, s, lam, nu, *, num_groups: int, num_classes: int,
                         fairness: str = "dp") -> jax.Array:
    """PF-LD's primal objective at the multipliers ``nu [C, k, l]``: ``mean_i loss_i + lam *
    sum_c p(c) sum_{g,j} nu_{c,g,j} h_{c,g,j}(theta)`` with ``h_{c,g,j} = P(yhat = j | s = g, c) -
    P(yhat = j | c)`` of the soft predictions (:mod:`dpfair_jax.algorithms.pfld_epoch`'s Lagrangian;
    demographic parity: one condition, ``p(c) = 1``; equalized odds: ``c = y``). The frequencies are
    the exact ones of ``(x, y, s)``. jit/vmap-able."""
    from dpfair_jax.algorithms.pfld import violations

    logits = model.apply(params, x)
    probs = E.soft_predictions(logits)
    if fairness == "dp":
        h = violations(probs, s, num_groups)[None]
        pc = jnp.ones((1,), probs.dtype)
    else:
        onehot = jax.nn.one_hot(y, max(num_classes, 2), dtype=probs.dtype)  # [n, C]
        h = jax.vmap(lambda w: violations(probs, s, num_groups, w), in_axes=1)(onehot)  # [C, k, l]
        pc = jnp.mean(onehot, axis=0)
    pen = jnp.sum(pc[:, None, None] * jnp.reshape(nu, h.shape) * h)
    return jnp.mean(_task_loss(logits, y)) + lam * pen


def relative_stationarity(objective, params, params0) -> jax.Array:
    """``|grad objective(params)| / |grad objective(params0)|`` (the norms over every parameter; the
    start's norm floored at 1e-12): how far the gradient has fallen from the start."""
    g = ravel_pytree(jax.grad(objective)(params))[0]
    g0 = ravel_pytree(jax.grad(objective)(params0))[0]
    return jnp.linalg.norm(g) / jnp.maximum(jnp.linalg.norm(g0), 1e-12)


def row_stationarity(method: str, model, params, data, lam, *, num_classes: int, fairness: str,
                     multipliers=None) -> jax.Array:
    """The public study's per-run criterion (:func:`relative_stationarity` on ``data``, the study's
    held-out test split, from the model's zero start ``model.init(key(0))``, the methods' start),
    each method on its own objective at the released ``params``:

    * ``"dpfermi"``: :func:`ermi_objective` at ``lam`` (eq. (FERMI), W's maximum in closed form);
      ``"dpsgd"`` and ``"jagielski_post"``'s base classifier: the same at ``lam = 0`` (the task
      loss; the post-processing is an exact linear program on released counts: converged by
      construction, so the row's flag is its base classifier's);
    * ``"pfld_stochastic"``, ``"pfld_epoch"``: :func:`lagrangian_objective` at the run's final
      multipliers (``multipliers``: the stochastic variant's ``W``, the per-epoch variant's
      ``multipliers * signs``).

    The objective is read on held-out data, not on the training split, so the released flag adds
    nothing about the training data to what the spend covers: like the test metrics, it is
    evaluation (not covered). Near a stationary point of the training objective the held-out
    gradient is small too (the sampling gap ~ 1 / sqrt(n_test)); a run stopped short keeps a ratio
    near 1. Cost: two full-batch gradients per run, no training."""
    x, y, s = data.x, data.y, data.s
    k = data.num_groups
    if method in ("pfld_stochastic", "pfld_epoch"):
        def f(p):
            return lagrangian_objective(p, model, x, y, s, lam, multipliers, num_groups=k,
                                        num_classes=num_classes, fairness=fairness)
    elif method in ("dpfermi", "dpsgd", "jagielski_post"):
        lam_ = lam if method == "dpfermi" else 0.0

        def f(p):
            return ermi_objective(p, model, x, y, s, lam_, num_groups=k, num_classes=num_classes,
                                  fairness=fairness)
    else:
        raise ValueError(f"no convergence criterion for method {method!r}.")
    params0 = model.init(jax.random.key(0), x.shape[1:] if x.ndim > 2 else x.shape[1])
    return relative_stationarity(f, params, params0)
