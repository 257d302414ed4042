"""Paper 002 (Alabi): the cost of a reductions approach to private fair optimization.

The paper has no experiments; these studies check its algorithms and bounds numerically.

Registered experiments (``dpfair run NAME [--quick]``):

* ``reductions_synthetic_bgl``: private fair regression with a bounded group loss constraint on two
  synthetic groups (a small group with a different slope). Decisions are a public grid of linear
  predictors ``(w, b)``; per-example losses are clipped squared errors ``min(1, (pred - y)^2 / B)``
  (so loss vectors lie in ``[0,1]^K``, Lemma 5.1). ``f`` = population loss (sum of itemized group
  losses), ``g`` = bounded group loss with the worst-off group's mean loss capped halfway between
  its unconstrained value and its best value on the grid. Methods: Algorithm 1 (exponential
  sampling, pure eps), Algorithm 2 with the exponential-mechanism LOPT and privatized weights
  ((eps, delta)), non-private Frank-Wolfe (Alg. 3-4), and fairlearn's ExponentiatedGradient
  (non-private reference; skipped with a note when fairlearn is missing). Objective excess over
  the exact CGOO optimum (an LP over grid mixtures, SciPy) and constraint violation vs epsilon,
  all seeds x epsilons in one compiled program per method.
* ``reductions_law_bgl``: the same on Law school (race: white vs black; target zfya), decisions
  a grid over the LSAT and UGPA coefficients and the intercept.
* ``reductions_sample_complexity``: sample-complexity crossover (Cor. 8.9 reduction vs Jagielski
  et al.'s Cor. C.2) over alpha, |A| and r; and an empirical check of the lower-bound instance
  (Lemmas 6.3-6.4): the excess risk of the Gaussian (Laplace) mechanism on the hard instance scales
  as ``sqrt(K)/(eps n)`` (``K/(eps n)``). It also records the paper's findings as rows: Lemma 5.8
  audited on the printed Algorithm 2 (:func:`lemma58_audit`), Fig. 2's G-/H-mean formulas
  (:func:`figure2_check`) and Cor. B.5's round count (:func:`corollary_b5_check`).

* ``reductions_adult_eo`` / ``reductions_credit_eo``: equalized odds through the reduction
  (Cor. 8.9) over a grid of half-planes in two features: Algorithm 1 vs epsilon, non-private
  Frank-Wolfe, the exact LP optimum, and (``dpfermi=true``) DP-FERMI's EO variant.

Modules: :mod:`.bgl` (the two bounded-group-loss studies), :mod:`.sample_complexity` (crossover and
lower-bound instance), :mod:`.findings` (Lemma 5.8, Fig. 2, Cor. B.5), :mod:`.exponents`
(``reductions_scaling``), :mod:`.eo` (equalized odds), :mod:`.claims` (the reasons they share);
this module registers the experiments.

Privacy: neighbouring datasets differ in one record (replace-one), which covers Def. 1.1
(changing one sensitive attribute). Every study first splits its (training) data at random into a
public split (``public_fraction`` of the rows, default 0.2) and a private split (the rest): the
split depends on the row count only, so the private ``n`` is public by construction (and fixed
under replace-one). Everything the private algorithms take besides the private loss matrix is
computed from the public split only: the bounded-group-loss thresholds ``eta``, the worst-group
index and the group proportions behind them (:func:`bgl_problem`), and, for equalized odds, the
cell proportions ``q_{a,y}`` that turn itemized counts into rates (and set the constraint's
Lipschitz constant). The private split never enters them, so the recorded epsilon is the
mechanism's own; ``privacy.json`` says so in its ``notes``. Diagnostics (objective excess over the
exact optimum, worst-group loss, the non-private references) read the private split and are not
released by the mechanisms.
"""


from __future__ import annotations

from dpfair_jax.runner import Experiment, register

from .bgl import alg2_ledger_check, bgl_study, run_bgl
from .config import CONFIGS
from .eo import eo_exact_frame, eo_loss_vectors, run_eo
from .exponents import run_scaling, scaling_table
from .findings import corollary_b5_check, figure2_check, lemma58_audit
from .sample_complexity import crossover_check, run_sample_complexity

__all__ = ["bgl_study", "run_bgl", "run_sample_complexity", "scaling_table", "run_scaling", "eo_loss_vectors",
           "eo_exact_frame", "run_eo", "lemma58_audit", "figure2_check", "corollary_b5_check", "alg2_ledger_check",
           "crossover_check", "EXPERIMENTS"]

EXPERIMENTS = [
    register(Experiment("reductions_synthetic_bgl", "002",
                        "Private fair regression (bounded group loss), synthetic groups: Alg. 1 vs Alg. 2 vs "
                        "Frank-Wolfe vs fairlearn EG, objective and violation vs epsilon",
                        CONFIGS["reductions_synthetic_bgl"], run_bgl)),
    register(Experiment("reductions_law_bgl", "002",
                        "Private fair regression (bounded group loss) on Law school (race)",
                        CONFIGS["reductions_law_bgl"], run_bgl)),
    register(Experiment("reductions_sample_complexity", "002",
                        "Sample-complexity crossover (reduction vs Jagielski et al.) and the lower-bound instance",
                        CONFIGS["reductions_sample_complexity"], run_sample_complexity)),
    register(Experiment("reductions_scaling", "002",
                        "Sample complexities: Algorithm 1's exact n0 (Thm 5.2) vs Algorithm 2's analysis (Cor. 5.11) "
                        "over alpha and K, fitted exponents",
                        CONFIGS["reductions_scaling"], run_scaling)),
    register(Experiment("reductions_adult_eo", "002",
                        "Equalized odds via the reduction (Alg. 1, Frank-Wolfe) on Adult (sex), vs DP-FERMI EO",
                        CONFIGS["reductions_adult_eo"], run_eo)),
    register(Experiment("reductions_credit_eo", "002",
                        "Equalized odds via the reduction (Alg. 1, Frank-Wolfe) on Credit (sex), vs DP-FERMI EO",
                        CONFIGS["reductions_credit_eo"], run_eo)),
]
