"""dpfair_jax.algorithms: the five papers' methods, each a composition of ``dpfair_jax.privacy``.

Every module offers one API, ``fit(key, data, hparams, config) -> FitResult``,
``spend(config, sizes, hparams) -> PrivacySpend`` and
``calibrate(config, sizes, target, *, hparams=None) -> hparams`` (``hparams`` a frozen dataclass
registered as a pytree, :func:`hparams_pytree`, that ``montecarlo.sweep(..., hparams=)`` can grid;
``config`` static, including the program's shape), beside the module's lower-level building
blocks (which record no spend of their own). Algorithms draw no noise and compute no sensitivity
themselves (a test scans for it).

====================  =========  ==========================================================
module                paper      composes (dpfair_jax.privacy)
====================  =========  ==========================================================
budget_tailoring      000        relations (clipped sums, Gram, counts), mechanisms.gaussian_noise,
                                 bounding, accounting (zCDP ledger)
output_perturbation   001        mechanisms.gaussian_noise, accounting (analytic Gaussian)
mitigation            001        clipping.clipped_grad_sum, mechanisms, sampling, accounting
reductions            002        mechanisms.exponential_mechanism, relations, bounding,
                                 accounting (advanced composition)
mean_estimation       003        relations, mechanisms (Gaussian/Laplace, noisy counts), accounting
synthesis             003        mechanisms (noisy marginals, counts), accounting (zCDP)
dpsgd                 001, 004   clipping.clipped_grad_sum, mechanisms, sampling, accounting (RDP/PLD)
sgda / fermi / pfld   004        clipping.clip_tree / clip_factors / per_example_path, ghost,
                                 mechanisms.gaussian_mechanism, noisy_histogram, sampling,
                                 accounting (incl. membership-visible)
pfld_epoch            004        the same, plus a per-epoch noisy violation release
jagielski             004 (base) mechanisms.add_laplace (histogram), relations, release_noise
jagielski_in          004 (base) oracle_learner (noisy counts, exponential-mechanism oracle, Laplace
                                 rate differences, basic/advanced/zCDP/PLD composition)
====================  =========  ==========================================================
"""

from ._trio import FitResult, hparams_pytree
from . import (  # noqa: F401
    budget_tailoring,
    dpsgd,
    fermi,
    jagielski,
    jagielski_in,
    mean_estimation,
    mitigation,
    output_perturbation,
    pfld,
    pfld_epoch,
    reductions,
    sgda,
    synthesis,
)

#: the algorithm modules (each offers the trio)
ALGORITHMS: tuple[str, ...] = (
    "budget_tailoring",
    "dpsgd",
    "fermi",
    "jagielski",
    "jagielski_in",
    "mean_estimation",
    "mitigation",
    "output_perturbation",
    "pfld",
    "pfld_epoch",
    "reductions",
    "sgda",
    "synthesis",
)

__all__ = ["ALGORITHMS", "FitResult", "hparams_pytree", *ALGORITHMS]
