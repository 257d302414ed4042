"""Paper 002: why each claim of the reductions studies does not hold when it does not (recorded
with the claim; shared by the bounded-group-loss and sample-complexity experiments)."""

from __future__ import annotations

#: Why each claim does not hold when it does not (recorded with the claim; see the page).
WHY_NOT = {
    "alg1_em_utility": ("Algorithm 1's exact probability of exceeding Thm 3.6's bound is above rho: a coding "
                        "error in the exponential mechanism or its sensitivity"),
    "alg1_improves_with_epsilon": ("the expected objective does not fall with epsilon: a coding error in the "
                                   "mechanism (the exact expectation of h is non-increasing in epsilon)"),
    "frank_wolfe_cgoo": "Frank-Wolfe did not reach alpha of the LP optimum in fw_steps iterations",
    "alg1_vs_alg2": ("Algorithm 2 beats exponential sampling at most epsilons: the sample complexities of Sec. 5 "
                     "are orders (constants hidden), so at this n the ordering need not show"),
    "lower_bound_instance": ("the fitted slopes are off the rates of Thm 6.1-6.2 by more than 0.1, or the worst "
                             "case sits at the edge of the norm grid (the grid is too narrow)"),
    "cgoo_guarantee": ("the O(.) of Thm 5.2 / Cor. 8.9 hides constants that matter at this n: the guarantee "
                       "holds on Credit at eps = 30 and fails on Adult, whose private split is smaller"),
    "eo_frank_wolfe": "Frank-Wolfe on the smoothed EO problem did not reach alpha in fw_steps iterations",
}
