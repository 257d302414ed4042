"""dpfair_jax.analysis: the papers' analytical tools (host or jitted; no privacy release).

- ``decomposition``: paper 001's Theorem 2 decomposition and Theorem 3 condition (group gradient
  norms, one-step change by Monte Carlo);
- ``hessian``: Hutchinson traces per group and per example (paper 001 Appendix D);
- ``sample_complexity``: paper 002's bounds (Thm 5.2, Cor 5.11, lower bounds, Frank-Wolfe);
- ``stratification_theory``: paper 003's noise variances and Dirichlet size laws.
"""

from . import decomposition, hessian, sample_complexity, stratification_theory  # noqa: F401

__all__ = ["decomposition", "hessian", "sample_complexity", "stratification_theory"]
