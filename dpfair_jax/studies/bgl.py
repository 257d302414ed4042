"""The bounded-group-loss instance of the reductions approach (paper 002), built from a public split.

- :func:`public_private_split`: a random split of the row indices into a private part and a held-out
  public part (depends on the row count and seed only, so the private ``n`` is public).
- :func:`bgl_problem`: the CGOO instance ``f = sum`` of the itemized group losses and
  ``g = max_k (l_k - eta_k)`` with itemized thresholds ``eta_k = pi_k tau_k`` (paper 002, Sec. 3,
  bounded group loss).

Privacy: :func:`bgl_problem`'s thresholds, worst group and proportions are functions of the loss
matrix and sizes it is given; pass those of the PUBLIC split, never the private ones (module
docstring of :func:`bgl_problem`). Nothing here draws noise or spends budget.
"""

from __future__ import annotations

import numpy as np

from dpfair_jax.algorithms import reductions as R
from dpfair_jax.data.preprocessing import split_indices

__all__ = ["public_private_split", "bgl_problem"]


def public_private_split(n: int, public_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(private, public)`` of a random split with ``ceil(public_fraction n)`` public rows.

    The permutation depends on ``(n, seed)`` only, never on the rows' values, so the private row
    count ``n - ceil(public_fraction n)`` is public by construction. The public split is held out:
    the private algorithms never see it, and the thresholds / proportions they use come from it."""
    f = float(public_fraction)
    if not 0.0 < f < 1.0:
        raise ValueError(f"public_fraction must lie in (0, 1), got {public_fraction!r}.")
    return split_indices(int(n), test_size=f, seed=int(seed))


def bgl_problem(L: np.ndarray, group_sizes: np.ndarray, slack: float, temperature: float | None = None):
    """The CGOO instance: ``f = sum``, ``g = max_k (l_k - eta_k)`` with itemized thresholds
    ``eta_k = pi_k tau_k``; ``tau`` caps the worst-off group's mean loss at ``unconstrained - slack
    x (unconstrained - best)`` and leaves the others unconstrained (cap 1).
    ``temperature`` smooths the max (log-sum-exp, an upper bound of it) for Frank-Wolfe.
    Returns ``(problem, eta, worst, tau)``.

    Privacy: ``eta``, the worst group and ``pi`` are functions of ``L`` and ``group_sizes``; pass
    the loss matrix and sizes of a PUBLIC split (:func:`public_private_split`), never the private
    ones (one record can flip the worst group and move every threshold: Algorithm 1 would then not
    be epsilon-DP). On the private split the constraint caps the itemized loss at ``pi^pub tau^pub``."""
    K = L.shape[1]
    pi = group_sizes / group_sizes.sum()
    m0 = int(np.argmin(L.sum(1)))
    mean0 = L[m0] / pi
    worst = int(np.argmax(mean0))
    best = float(L[:, worst].min() / pi[worst])
    tau = np.ones(K)  # mean losses are <= 1: the other groups are unconstrained
    tau[worst] = mean0[worst] - slack * (mean0[worst] - best)
    eta = (pi * tau).astype(np.float32)
    return R.CGOO(R.sum_objective(K), R.bounded_group_loss(eta, temperature), K), eta, worst, tau
