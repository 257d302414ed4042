"""dpfair_jax: differentially private and fair machine learning in JAX.

Layers (see docs/INTERFACES.md): ``data``, ``privacy``, ``fairness``, ``models``, ``algorithms``,
``analysis``, ``montecarlo``, ``experiments``.
"""

__version__ = "0.1.0"
