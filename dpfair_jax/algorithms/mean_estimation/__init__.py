"""Private mean estimation: clipped Laplace/Gaussian means, COINPRESS, and their stratified forms.

Paper 003 (Rosenblatt, Stoyanovich, Musco, AAAI 2024), "Stratified Private Mean Estimation"
(eqs. 1-4) and Sec. 5 (COINPRESS vs StratCOINPRESS); COINPRESS is Biswas, Dong, Kamath and
Ullman (NeurIPS 2020), with the constants of its reference code (``twistedcubic/coin-press``).

One facade over modules by concern: :mod:`.groups` (group sizes, noisy counts, recombination
weights), :mod:`.clipped` (the clipped Laplace and Gaussian means), :mod:`.coinpress`
(COINPRESS and StratCOINPRESS), :mod:`.ledger` (their zCDP ledgers) and :mod:`.estimator` (the
three as one algorithm, the API: :func:`fit` returning a ``FitResult``, :func:`spend`,
:func:`calibrate` with :class:`MeanConfig` and :class:`MeanHparams`). The estimator functions
(``coinpress_mean``, ``stratified_gaussian_mean``, ...) are lower level: they record no spend;
use :func:`fit`.

Everything here is a pure function of ``(key, data, hyperparameters)``; ``num_groups`` and the
number of COINPRESS steps are static, privacy budgets, radii, ranges and weights are traced, so a
Monte Carlo study is ``vmap`` over keys and budgets inside one ``jit``. Group statistics are
``jax.ops.segment_sum`` over integer group ids; a global estimator is the one-group case of the
stratified one (``s = 0``), so both share one code path.

Empty groups get the prior centre (COINPRESS) or 0 (clipped means) as their estimate, weight 0
in the recombination and a ``present = False`` flag; they never produce NaN.

Neighbouring relations (``relation=``, a name or :class:`dp_accounting.NeighboringRelation`):

- ``"replace_one_within_group"`` (default; the paper's and the reference code's sensitivity
  ``2 range / n``): one record is replaced by another **in the same stratum**, so group sizes are
  identical in neighbouring data sets and are public by construction of the relation (the paper:
  "access to public weights"). The exact sizes are then used as denominators and weights (eqs.
  2-3 as printed), and the spend is the estimator's own budget. A record moving to another
  stratum is **not** covered: the released exact ``sizes`` tell such neighbours apart with
  certainty (epsilon = inf; the audit's ``cross_group`` variant). For one group it is replace-one
  with ``n`` public.
- ``"replace_one"``: one record is replaced by any other, possibly of another stratum, so two
  group sizes may change by one. The sizes are then released as noisy counts (sensitivity
  ``sqrt 2``), as under add/remove below, charged on top of the budget; each group's sum is noised
  for the replace-one sensitivity ``2 range``, which covers the removal from one stratum plus the
  addition to another (``range`` each).
- ``"add_remove"``: one record is added or removed, so one group size changes by 1 and exact
  sizes would tell the neighbours apart with certainty (released in ``sizes`` and ``radius``, and
  through every clip width, noise scale and denominator that depends on them). Under add/remove
  the sizes are **always** released as Gaussian noisy counts ``n~_g = n_g + N(0, 1/(2 count_rho))``
  (sensitivity 1), and ``n~_g`` replaces ``|G_g|`` everywhere: denominators, clip widths, Laplace
  scales, COINPRESS radii, recombination weights and the returned ``sizes``. This departs from
  eq. (2) (``p_i = sum clip(x) / |G_i| + Lap(...)`` with the exact ``|G_i|``). ``count_rho`` defaults
  to :data:`DEFAULT_COUNT_FRACTION` x the estimator's own zCDP budget (``sum(rhos)``, ``rho`` or
  ``epsilon^2/2``; :func:`resolve_count_rho`), charged **on top** of it: the run is
  ``(budget + count_rho)``-zCDP, which :func:`spend` reports. The clipped sum of centred values has sensitivity ``C`` (half of
  replace-one).

``count_rho`` may also be passed under either replace-one relation (counts noised with
sensitivity ``sqrt 2``, so that a record may move between strata); ``weights=`` takes public recombination weights (e.g.
:func:`public_weights` of a disjoint public half, the paper's Pub-StratCOINPRESS).

Privacy: every estimator draws its noise through :mod:`dpfair_jax.privacy.mechanisms` and takes
its relation factors from :mod:`dpfair_jax.privacy.relations`; each docstring states its spend.
"""

from .clipped import (clip_halfwidth, gaussian_mean, laplace_mean, stratified_gaussian_mean,
                      stratified_laplace_mean)
from .coinpress import (REFERENCE_BETA, REFERENCE_LOG_TERM, coinpress_clip_radius, coinpress_mean,
                        coinpress_rhos, gaussian_tailbound, reference_code_stratified_mean,
                        stratified_coinpress)
from .estimator import COUNTS, METHODS, MeanConfig, MeanHparams, calibrate, fit, spend
from .groups import (DEFAULT_COUNT_FRACTION, RELATIONS, StratifiedEstimate, noisy_counts,
                     public_weights, resolve_count_rho)

__all__ = [
    "RELATIONS",
    "DEFAULT_COUNT_FRACTION",
    "REFERENCE_BETA",
    "REFERENCE_LOG_TERM",
    "StratifiedEstimate",
    "clip_halfwidth",
    "laplace_mean",
    "gaussian_mean",
    "stratified_laplace_mean",
    "stratified_gaussian_mean",
    "gaussian_tailbound",
    "coinpress_clip_radius",
    "coinpress_mean",
    "stratified_coinpress",
    "coinpress_rhos",
    "public_weights",
    "noisy_counts",
    "resolve_count_rho",
    "reference_code_stratified_mean",
    "METHODS",
    "COUNTS",
    "MeanConfig",
    "MeanHparams",
    "fit",
    "spend",
    "calibrate",
]
