"""Group-aware privacy budget tailoring: DPSE and DPNoSE (paper 000).

"Privacy Budget Tailoring in Private Data Analysis" splits a total zCDP budget ``rho = tau + mu``:

* **Stage 1** (Algorithm 1, ``tau``-zCDP): a private pooled OLS fit from noisy sufficient statistics
  (Lemma C.1, Analyze-Gauss), then a noisy clipped residual sum per group, giving per-group
  standard errors ``s_k`` normalised to ``sum_k s_k^2 = 1``.
* **Stage 2** (Algorithm 2 with the fairness Lagrangian ``h = f(l) + G max(0, g(l))``, eqs. 1-2, or
  Algorithm 3 without it, ``mu``-zCDP): projected gradient descent on per-group clipped gradient
  (and loss) sums, where group ``k`` gets the share ``mu s_k^2 / T`` of the budget per iteration,
  so groups with larger standard errors receive *less* noise (group-weighted Gaussian noise).

DPSE is stage 1 followed by stage 2. The baselines are DPNoSE, "standard DP gradient descent with
the whole budget rho" (``method="pooled"``: pooled clipped-sum gradient, one noise draw), the equal
split ``s_k = 1/sqrt(K)`` with the whole budget (``method="equal"``) and the same descent without
noise (``method="nonprivate"``), plus closed-form least squares (:func:`least_squares`).

Everything is a pure function of ``(key, data, hyperparameters)``: :class:`Hyperparams` holds the
traced (sweepable) quantities, :class:`Config` the static choices. The hot loop keeps one vector per
feature (``xs: [d, n]``), forms per-example gradients as one scalar per example times ``x``
(squared and logistic loss are generalized linear models), clips with the exact per-example norm
``|dloss| * ||x||`` and forms group sums with one matmul against the one-hot group matrix.

Interface (the kit's trio): ``fit(key, data, hparams, config) -> FitResult`` (``params`` theta,
``diagnostics`` the fields of :class:`Diagnostics` as a dict, ``spend``, ``report``);
``spend(config, sizes, hparams) -> PrivacySpend`` (``sizes``: the per-group sizes ``n_k``; the
spend is ``hparams.rho`` stated at ``config.delta``); ``calibrate(config, sizes, (epsilon,
delta), *, hparams=None) -> hparams`` (the largest float32 ``rho`` that meets the target). The
zCDP arithmetic (conversions, ledger) is :mod:`dpfair_jax.privacy.accounting`'s, the noise scales
:mod:`dpfair_jax.privacy.zcdp_noise`'s.

Modules: :mod:`.core` (configuration, budget split, data layout, draws), :mod:`.stage1`
(Algorithm 1), :mod:`.stage2` (Algorithms 2-3 and the pooled baseline), :mod:`.algorithm`
(:func:`fit`), :mod:`.batched` and :mod:`.tables` (fast paths: several methods in one program, a
dataset prepared once, exact clipped-sum tables; lower level, no spend of their own), :mod:`.ledger`
(spend, calibrate, ledger),
:mod:`.references` (non-private references and errors). Sensitivities come from
``dpfair_jax.privacy.relations``, noise from ``privacy.mechanisms.gaussian_noise``, clipping from
``privacy.bounding``.

Departures from the paper (corrected default, literal behaviour behind an option):

* ``scaling="group_mean"`` (default): noise is calibrated to the *clipped sum* (sensitivity
  ``Delta`` for gradients, ``Delta^2`` for losses) and the noisy sum is then divided by the public
  group size ``n_k`` (post-processing), so ``f = sum_k`` (group-mean loss). ``scaling="paper"``:
  Algorithm 2 lines 10-14 literally (group *mean* gradient plus noise of std ``Delta/sqrt(2 mu_T)``,
  loss ``(1/n) * clipped group sum`` plus noise), and Algorithm 3 line 8-12 literally (noisy sum,
  no normalisation). For ``method="pooled"`` the default divides by ``n`` after noise.
* Algorithm 1 line 17 clips squared residuals to ``[0, Delta]`` but adds noise of variance
  ``Delta^4 / (2 tau_k)``, i.e. calibrated to sensitivity ``Delta^2``: for ``Delta < 1`` the sum
  of values in ``[0, Delta]`` moves by up to ``Delta > Delta^2`` and the true charge is
  ``(Delta / Delta^2)^2`` times the stated one. The default clips to ``[0, Delta^2]``
  (``stage1_clip="delta_sq"``, sensitivity ``Delta^2``, the paper's noise); the literal
  ``[0, Delta]`` is ``stage1_clip="paper"``, whose noise is calibrated to ``max(Delta, Delta^2)``
  (the paper's ``Delta^2`` for ``Delta >= 1``, the true sensitivity ``Delta`` below), so both
  are private for every ``Delta``.
* Standard error denominator: ``n_k`` (Algorithm 1, line 21, default) or ``n_k - d`` (text),
  ``se_denominator="n_minus_d"``.
* Lemma C.1's noise scale ``U^2`` assumes ``||x|| <= U`` and ``|y| <= U``; here the rows of ``X``
  are clipped to norm ``stats_bound_x`` and ``y`` to ``[-stats_bound_y, stats_bound_y]`` before the
  statistics are formed, with sensitivities ``U_x^2`` (``X^T X``) and ``U_x U_y`` (``X^T y``).
* ``g = max_k l_k`` (section 6) is always >= 0 for squared losses, so the indicator in eq. (2) is
  always on. The default ``g="bgl"`` is ``max_k (l_k - eta_k)`` with thresholds ``eta_k``
  (``Hyperparams.thresholds``); with thresholds 0 it is the paper's ``g``.

Neighbouring relation (``Config.relation``, the names of ``dp_accounting.NeighboringRelation`` and
``dpfair_jax.privacy.accounting.RELATIONS``):

* ``"replace_one_within_group"`` (default; the paper's bounded DP with its public group sizes,
  Sec. 2): group membership and the sizes ``n_k`` (so ``n``) are public, and a neighbour replaces
  one record by another record *of the same group*. The sizes are then the same in both worlds and
  dividing by them is post-processing. Sensitivities (``dpfair_jax.privacy.relations``, the
  replace-one column): clipped gradient sums ``2 Delta``, ``X^T y`` ``2 U_x U_y``, the upper
  triangle of ``X^T X`` ``sqrt(2) U_x^2``, sums of values in ``[0, B]`` (clipped losses, squared
  residuals) ``B``. A record that moves to another group is *not* covered: the run divides by the
  exact ``n_k`` and reports them (``Diagnostics.counts``), so that pair is told apart with
  certainty (epsilon = inf; the audit's ``cross_group`` variant). General ``"replace_one"`` is
  therefore refused.
* ``"add_remove"``: one record added or removed. Then ``n_k`` differs between neighbours and
  a release divided by the exact ``n_k`` is not zCDP (the mean moves by up to twice the
  clipped-sum sensitivity and its variance changes). Every run therefore first releases noisy
  group counts ``n_k + N(0, 1 / (2 rho_c))`` (sensitivity 1), ``rho_c = count_fraction * rho``,
  charged to the ledger, and uses ``max(noisy n_k, 1)`` wherever the paper uses ``n_k`` (stage-1
  standard errors, stage-2 normalisation, ``n`` of the pooled baseline); stage 1 and stage 2
  share the remaining ``(1 - count_fraction) rho``. Sensitivities: ``Delta``, ``U_x U_y``,
  ``U_x^2``, ``B``. The spend covers adding or removing one record (of any group) at ``rho``; a
  record moving between groups is a removal and an addition, covered only by group privacy
  (``4 rho``-zCDP for two add/remove steps), and is not what the record claims.

Privacy (whole DPSE run): ``rho``-zCDP, ``rho = rho_c + tau + mu`` by composition (Lemma D.1;
``rho_c = 0`` within a group), under ``Config.relation``. The per-group charges of stage 2
are summed over groups (the paper's accounting, Lemmas B.2-B.3); as the groups are disjoint this
is an upper bound. :func:`budget_ledger` itemises the charges (a ``ZcdpLedger``) and checks they add up to rho;
:func:`spend` states the spend and its relation. ``Diagnostics.fraction_clipped`` is computed
from the data without noise: a diagnostic for the analyst, not covered by the guarantee.
"""

from __future__ import annotations

from .algorithm import fit, fit_arrays
from .batched import Prepared, fit_many, fit_many_from_draws, fit_many_prepared, prepare
from .core import METHODS, Config, Diagnostics, Hyperparams, num_draws
from .ledger import budget_ledger, calibrate, spend
from .references import group_mspe, least_squares, population_mspe
from .stage1 import Stage1Release, stage1_noise_stds, stage1_release, stage1_standard_errors
from .stage2 import group_noise_stds, noisy_group_release, stage2_descent
from .tables import ClippedSumTable, clipped_sum_table, table_group_sums

__all__ = [
    "Config",
    "Hyperparams",
    "Diagnostics",
    "METHODS",
    "fit",
    "fit_arrays",
    "fit_many",
    "fit_many_from_draws",
    "fit_many_prepared",
    "prepare",
    "Prepared",
    "ClippedSumTable",
    "clipped_sum_table",
    "table_group_sums",
    "num_draws",
    "stage1_standard_errors",
    "stage1_release",
    "Stage1Release",
    "stage1_noise_stds",
    "stage2_descent",
    "group_noise_stds",
    "noisy_group_release",
    "least_squares",
    "population_mspe",
    "group_mspe",
    "budget_ledger",
    "spend",
    "calibrate",
]
