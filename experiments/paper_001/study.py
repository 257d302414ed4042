"""Paper 001 (Tran, Dinh, Fioretto, NeurIPS 2021): why differential privacy hurts some groups.

Registered experiments (``dpfair run NAME [--quick]``), one module each:

* ``lens_output_perturbation`` (:mod:`.lens_output_perturbation`; Fig 8, Thm 1, Cor 1/2): output
  perturbation of L2-regularized logistic regression, Monte Carlo group risks against Theorem 1;
  squared loss with global vs per-group standardization (Corollary 2).
* ``lens_dpsgd`` (:mod:`.lens_dpsgd`; Figs 10, 11, App. C.2 and C.3): DP-SGD on a tanh MLP, seeds x
  clip norms in one program per checkpoint; Theorem 2's R_clip vs psi_a; group-size ratios by
  subsampling; per-example Hessian traces vs distance to the decision boundary.
* ``lens_fig9`` (:mod:`.lens_fig9`; Fig 9): DP-SGD on globally vs per-group standardized
  features, per data set, in a trained regime, along the epsilon path.
* ``lens_mitigation`` (:mod:`.lens_mitigation`; Fig 12): the (gamma1, gamma2) penalty grid, an
  untested reconstruction (see ``algorithms.mitigation``).

Shared pieces: :mod:`.common` (claims, reasons, helpers), :mod:`.training` (DP-SGD checkpoints and
their spends), :mod:`.datasets` (the named data sets with the paper's group attributes),
:mod:`.figures`, :mod:`.config`.

Datasets: "synthetic" (``synthetic.two_group_classification``, two groups with different norms
and margins), or a tabular loader name with the paper's group attribute ("adult" race_binary,
"credit" sex, "german" sex, "parkinsons" sex with ``path``/``$DPFAIR_PARKINSONS_CSV``), all
features standardized (``standardize="all"``).

When a data set is missing, every claim of the experiment is recorded as skipped with the reason
(:data:`CLAIMS` lists them); none is left out of ``claims.json``.
"""

from __future__ import annotations

from dpfair_jax.runner import Experiment, register

from .common import CLAIMS, PARKINSONS_ENV
from .config import CONFIGS
from .lens_dpsgd import run_dpsgd
from .lens_fig9 import fig9_claim, fig9_path, run_fig9
from .lens_mitigation import run_mitigation
from .lens_output_perturbation import _op_dataset, run_output_perturbation  # noqa: F401 - tests use _op_dataset
from .training import checkpoint_spend as _checkpoint_spend  # noqa: F401 - the tests' names
from .training import padded_width as _padded_width  # noqa: F401

__all__ = ["run_output_perturbation", "run_dpsgd", "run_fig9", "fig9_path", "run_mitigation", "fig9_claim",
           "CLAIMS", "PARKINSONS_ENV", "EXPERIMENTS"]

EXPERIMENTS = [
    register(Experiment("lens_output_perturbation", "001",
                        "Output perturbation: group excessive risk vs epsilon, Theorem 1, Corollary 2 (Fig 8)",
                        CONFIGS["lens_output_perturbation"], run_output_perturbation)),
    register(Experiment("lens_dpsgd", "001",
                        "DP-SGD in a trained regime: gradient norms vs C (App. C.2), R_clip vs psi (Fig 10), "
                        "group size (Fig 11), trace vs boundary (App. C.3)", CONFIGS["lens_dpsgd"], run_dpsgd)),
    register(Experiment("lens_fig9", "001", "DP-SGD with global vs per-group normalization along the epsilon path, "
                        "trained regime, real data sets (Fig 9)", CONFIGS["lens_fig9"], run_fig9)),
    register(Experiment("lens_mitigation", "001", "gamma1/gamma2 mitigation grid (Fig 12, reconstruction)",
                        CONFIGS["lens_mitigation"], run_mitigation)),
]
