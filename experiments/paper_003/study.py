"""Paper 003, "A Simple and Practical Method for Reducing the Disparate Impact of Differential
Privacy" (Rosenblatt, Stoyanovich, Musco, AAAI 2024): stratified private estimation.

One registered experiment, ``paper_003``, with quick and full configs and four parts:

* **theory** (Sec. 4): Monte Carlo checks of Theorem 9's Dirichlet identity
  ``E sum log(n g_i) = k (psi(alpha) - psi(k alpha) + log n)`` (equality, within 3 SE), the Laplace
  tail ``P(|Y| >= a b) = e^-a`` (Def. 5), the stratified Laplace and Gaussian noise variances
  against their closed forms (notes A2, A3), the stratified/global Laplace noise variance ratio
  by Monte Carlo of both estimators (<= k, equal to ``sum (R+s_i)^2/(R+s)^2``), and Proposition
  8's shape (the (1 - gamma)-quantile of the stratified error over ``log(1/gamma) (2/(n eps))
  sqrt(sum (R+s_i)^2)`` is O(1) in k and gamma; the stratified/global quantile ratio is <= sqrt k).
  Theorem 9's closed form against SciPy, its monotonicity in alpha and Jensen's bound
  ``k log(n/k)`` are a formula check (deterministic), not a claim.
* **mixture** (Fig. 3 and the k / alpha sweeps): Gaussian mixture with Dirichlet(alpha) group
  sizes, ``n_tot`` rows split at random into a private and a public half; COINPRESS on the
  private half, private StratCOINPRESS (exact private sizes as weights, as the paper),
  Pub-StratCOINPRESS (public-half weights), and the public code's non-private "StratCOINPRESS"
  (``reference_code``) for comparison. Error ``|estimate - mean(private half)|``. COINPRESS's
  scale is checked on unit Gaussian data against its last step's noise std written out from
  Biswas et al. (:func:`coinpress_noise_std`; window derived in :func:`_coinpress_calibration`:
  4 standard errors at the grid's trial count, narrow enough that a 2x noise error fails). The whole grid
  (n x k x alpha x runs) is ONE compiled program: rows are padded to ``max(n)`` and groups to
  ``max(k)`` (padding rows sit in an extra group with weight 0), so ``n``, ``k`` and ``alpha`` are
  traced.
* **strata** (Fig. 2): Adult's hours-per-week, education-num and age, strata from every non-empty
  subset of the configured categorical columns (the combinations seen in the public half,
  :func:`public_strata_ids`; age buckets over Adult's public age range) (the folktables ACS CSV works the same way through
  ``acs_path``); global error and parity error vs number of strata, all combinations x variables
  x runs in one program (groups padded to the largest k). "Stratification can sometimes improve
  the global mean" is tested per cell with a one-sided paired t test, Bonferroni over the cells
  (:func:`strata_improvement_test`).

A claim whose part is left out of ``parts``, whose data are missing or whose grid cell is absent
is recorded as skipped with the reason (never left out of ``claims.json``).
* **synthesis** (Figs. 4, 5, 7): vanilla vs stratified (by sex, race, both) private synthetic
  data from :mod:`dpfair_jax.algorithms.synthesis` (the kit's **MST-like** JAX marginal
  synthesizer: all one- and two-way marginals at once, no exponential-mechanism tree selection, no
  inference, so not MST; smartnoise-synth's MST with ``synthesizer="mst"``), downstream classifier
  accuracy, parity error of column means (Def. 10) and demographic parity of the classifier. The
  paper's Fig. 5 rests on GEM and AIM: GEM is recorded as untestable (no port), AIM runs through
  smartnoise-synth where the ``synth`` extra is installed (:mod:`dpfair_jax.studies.aim`; skipped
  with the reason otherwise).

Modules: :mod:`.theory`, :mod:`.mixture`, :mod:`.strata` and :mod:`.synthesis` (one per part),
:mod:`.claims` (the texts they share and each part's claim list); this module registers the
experiment and runs the parts named in ``parts``.

Departures (see ``README.md`` in this folder): results are private (the public code stores non-private
group means as StratCOINPRESS results); the private half is a Bernoulli(1/2) split (size
Binomial(n, 1/2)) rather than an exact half; strata dropped for being small (<= 0.001 n) are
decided on the public half, not the private one; COINPRESS on real variables runs on values
divided by a public scale (``variable_scale``; the paper's code uses raw units while assuming unit
variance: ``scale_mode="paper"`` keeps that).
"""


from __future__ import annotations

from typing import Any

from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.runner import Experiment, register

from .claims import part_claims, skip_part, strata_source
from .config import FULL, QUICK
from .mixture import coinpress_noise_std, ratio_trend, run_mixture
from .strata import public_strata_ids, run_strata, strata_improvement_test
from .synthesis import run_synthesis
from .synthesis_aim import aim_skip_reason
from .theory import run_theory

__all__ = ["run_theory", "run_mixture", "run_strata", "run_synthesis", "run", "public_strata_ids", "ratio_trend",
           "strata_source", "aim_skip_reason",
           "coinpress_noise_std", "strata_improvement_test", "part_claims", "EXPERIMENT", "QUICK", "FULL"]


def run(config: dict, ctx: Any):
    """Run the parts named in ``config["parts"]`` (theory, mixture, strata, synthesis); a part left out
    records its claims as skipped. Returns the mixture table (``None`` without that part)."""
    parts = list(config["parts"])
    unknown = set(parts) - {"theory", "mixture", "strata", "synthesis"}
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from theory, mixture, strata, synthesis.")
    if config["relation"] not in me.RELATIONS:
        raise ValueError(f"relation must be one of {me.RELATIONS}, got {config['relation']!r}.")
    out = None
    for part, fn in (("theory", run_theory), ("mixture", run_mixture), ("strata", run_strata),
                     ("synthesis", run_synthesis)):
        if part not in parts:
            skip_part(ctx, part, config, f"part {part!r} not in this config's parts {parts}")
            continue
        # quick runs compile fast (the runner's compile_mode); theory (the loggamma sampler) and
        # strata (393 strata x 48,842 rows per trial) are run-bound: measured faster optimized
        if part in ("mixture", "synthesis"):
            res = fn(config, ctx)
        else:
            with ctx.optimized_build():
                res = fn(config, ctx)
        if part == "mixture":
            out = res
    return out


EXPERIMENT = register(Experiment(
    name="paper_003",
    paper="003",
    description="Stratified private estimation: Thm 9 / Prop 8 checks, COINPRESS vs StratCOINPRESS "
                "on the Gaussian mixture (Fig 3), Adult strata (Fig 2), stratified synthesis (Figs 4-5)",
    configs={"quick": QUICK, "full": FULL},
    run=run,
))
