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
  :func:`algorithm2_ledger`, :func:`private_cgoo`; :class:`MixtureResult`, :func:`mixture_loss`;
  the kit's trio (:mod:`.interface`): :func:`fit` (returns a ``FitResult``), :func:`spend`,
  :func:`calibrate` over :class:`GridData` with a config/hparams pair per algorithm (:class:`SamplingConfig` /
  :class:`SamplingHparams` for Algorithm 1, :class:`PrivateCGOOConfig` / :class:`PrivateCGOOHparams`
  for Algorithm 2; the functions dispatch on the config's type).

Modules: :mod:`.objectives` (group functions, EO layout, confusion means), :mod:`.problem` (CGOO,
penalty, loss vectors, sensitivities), :mod:`.oracles` (Algorithm 1, LOPT oracles), :mod:`.cgoo`
(Frank-Wolfe, Algorithm 2 and its budgets), :mod:`.interface`. Sensitivities and scales come from
``dpfair_jax.privacy.release_noise``/``relations``, noise and the exponential mechanism from
``privacy.mechanisms``, clipping from ``privacy.clipping``/``privacy.bounding``.
:func:`exponential_sampling`, :func:`private_cgoo` and :func:`private_cgoo_regression` are lower
level (no spend of their own): use fit.

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

from .cgoo import (Algorithm2Budget, MixtureResult, RegressionMixture, algorithm2_budget, algorithm2_ledger,
                   clipped_group_losses, frank_wolfe, mixture_loss, private_cgoo, private_cgoo_regression)
from .interface import (GridData, PrivateCGOOConfig, PrivateCGOOHparams, SamplingConfig, SamplingHparams, calibrate,
                        fit, spend)
from .objectives import (GroupFunction, bounded_group_loss, confusion_index, equalized_odds_constraint,
                         equalized_odds_loss_layout, equalized_odds_objective, figure2_means, g_mean, gini_constraint,
                         h_mean, linear_objective, max_objective, smax, smooth_abs, sum_objective)
from .oracles import (LinearParams, dp_gd_noise_std, dp_weighted_least_squares, exponential_sampling,
                      exponential_sampling_logits, exponential_sampling_probs, lopt_grid, lopt_grid_private,
                      weighted_least_squares)
from .problem import CGOO, group_losses, h_sensitivity, loss_sensitivity, penalized, penalized_grad, penalty_weight

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
    "GridData", "SamplingConfig", "SamplingHparams", "PrivateCGOOConfig", "PrivateCGOOHparams",
    "fit", "spend", "calibrate",
]
