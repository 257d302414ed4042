"""Public decision grids for the reductions approach (paper 002) and their per-example losses.

The private reductions (exponential sampling, LOPT oracles, private CGOO, Frank-Wolfe) choose among
a finite, public set of candidate predictors; its itemized loss vectors are the only private input.
These helpers build such grids and the bounded per-example losses that keep each loss vector in
``[0, 1]^K`` (paper 002, Lemma 5.1).

Privacy: the grids depend on public parameters only; :func:`clipped_square_losses` evaluates the
candidates on the rows it is given (pass the private split's rows only to the mechanisms, whose
spend covers them). No noise is drawn here.

Kept in the package, not in ``experiments/paper_002/``: the paper-002 notebook reuses these grids,
and what notebooks reuse lives in the library (``experiments/README.md``).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["candidate_grid", "halfplane_grid", "clipped_square_losses"]


def candidate_grid(dim: int, per_axis: int, radius: float, intercepts: list[float] | None = None) -> np.ndarray:
    """Public decision grid: ``[M, dim + 1]`` rows ``(w, b)``, ``w`` on a ``per_axis``-point grid of
    ``[-radius, radius]^dim`` and ``b`` in ``intercepts`` (default ``[0]``)."""
    axes = [np.linspace(-radius, radius, per_axis)] * dim + [np.asarray(intercepts or [0.0], float)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.float32)


def halfplane_grid(num_angles: int, thresholds: list[float]) -> np.ndarray:
    """Public classifiers ``1[cos(t) x_1 + sin(t) x_2 > b]``: rows ``(cos t, sin t, b)``."""
    t = np.linspace(0.0, 2 * np.pi, num_angles, endpoint=False)
    T, B = np.meshgrid(t, np.asarray(thresholds, float), indexing="ij")
    return np.stack([np.cos(T).ravel(), np.sin(T).ravel(), B.ravel()], axis=1).astype(np.float32)


def clipped_square_losses(cands: np.ndarray, x: Any, y: Any, bound: float) -> Any:
    """Per-example losses ``min(1, (<w, x_i> + b - y_i)^2 / bound)``: ``[M, n]`` (one matmul)."""
    c = jnp.asarray(cands, jnp.float32)
    pred = c[:, :-1] @ jnp.asarray(x, jnp.float32).T + c[:, -1:]
    return jnp.minimum(1.0, jnp.square(pred - jnp.asarray(y, jnp.float32)[None, :]) / bound)
