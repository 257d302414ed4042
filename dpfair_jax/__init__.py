"""dpfair_jax: differentially private and fair machine learning in JAX.

Layers (see docs/INTERFACES.md): ``data``, ``privacy``, ``fairness``, ``models``, ``algorithms``,
``analysis``, ``montecarlo``, ``studies`` (the reusable parts of the papers' studies), ``runner``
(experiment registry, results store, report; the studies themselves live in the repository's
``experiments/`` folder).
"""

__version__ = "0.1.0"
