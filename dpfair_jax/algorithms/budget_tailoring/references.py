"""Budget tailoring (paper 000): non-private references and prediction errors.

Privacy: none of these is private; they evaluate fits on data or against known parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset

__all__ = ["least_squares", "population_mspe", "group_mspe"]


def least_squares(data: Dataset, *, weighting: str = "pooled", fit_intercept: bool = False
                  ) -> np.ndarray:
    """Non-private (weighted) least squares, float64 on the host.

    ``weighting="pooled"``: OLS over all rows (what DPNoSE approaches as rho -> inf);
    ``"group_mean"``: weights ``1/n_k`` (minimiser of ``sum_k`` group-mean squared loss, what DPSE
    and the equal split approach with the default scaling when clipping and projection are
    inactive).
    """
    v.check_choice("weighting", weighting, ("pooled", "group_mean"))
    x = np.asarray(data.x, np.float64)
    if fit_intercept:
        x = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    y = np.asarray(data.y, np.float64)
    s = np.asarray(data.s)
    w = np.ones(len(y)) if data.mask is None else np.asarray(data.mask, np.float64)
    if weighting == "group_mean":
        sizes = data.group_sizes()
        w = w / np.maximum(sizes[s], 1.0)
    xw = x * w[:, None]
    return np.linalg.solve(xw.T @ x, xw.T @ y)


def population_mspe(theta: jax.Array, betas: jax.Array, noise_sd: jax.Array) -> jax.Array:
    """Expected MSPE per group on fresh data ``x ~ N(0, I)``, ``y = x^T beta_k + N(0, sd_k^2)``:
    ``||theta - beta_k||^2 + sd_k^2`` (the test protocol of the synthetic studies). ``betas`` is
    ``[K, P]``."""
    diff = theta[None, :] - betas
    return jnp.sum(diff * diff, axis=-1) + noise_sd**2


def group_mspe(theta: jax.Array, x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
               fit_intercept: bool = False) -> jax.Array:
    """Empirical mean squared prediction error per group ([K]; 0 for an empty group)."""
    xs = jnp.asarray(x).T
    if fit_intercept:
        xs = jnp.concatenate([xs, jnp.ones((1, xs.shape[1]), xs.dtype)], axis=0)
    r2 = (theta @ xs - y) ** 2
    onehot = jax.nn.one_hot(s, num_groups, dtype=r2.dtype)
    n_k = jnp.sum(onehot, axis=0)
    return (r2 @ onehot) / jnp.maximum(n_k, 1.0)
