"""The one result type of every algorithm's ``fit`` and the hyperparameter pytree decorator.

Every module of :mod:`dpfair_jax.algorithms` offers the trio

* ``fit(key, data, hparams, config) -> FitResult``,
* ``spend(config, sizes, hparams) -> PrivacySpend``,
* ``calibrate(config, sizes, target, *, hparams=None) -> hparams``,

where ``config`` holds the static choices (model, sampling, relation, delta, and the program's
shape: ``steps``/``epochs``, ``batch_size``, ``max_batch_size``) and ``hparams`` is a frozen
dataclass registered as a pytree (:func:`hparams_pytree`) whose fields may be traced arrays, so
``montecarlo.sweep(..., hparams=)`` and ``vmap`` grid them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax

from .._validation import is_traced

__all__ = ["FitResult", "hparams_pytree", "is_traced"]


class FitResult(NamedTuple):
    """What every algorithm's ``fit`` returns (a pytree; passes through ``jit`` and ``vmap``).

    ``params``: the release (model parameters, an estimate, a fitted synthesizer, a decision),
    everything in it is covered by ``spend``; ``diagnostics``: a dict of arrays about the run (its
    module's ``fit`` docstring says which entries are released, hence covered by ``spend``, and which
    are computed from the private data and must not be published); ``spend``: the
    :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of the run, equal to the module's
    ``spend(config, n, hparams)`` (``None`` when a hyperparameter that enters the spend is traced,
    e.g. inside ``montecarlo.sweep``: call ``spend`` with the grid's values); ``report``: the
    :class:`~dpfair_jax.privacy.sampling.SamplingReport` of the program that ran.
    """

    params: Any
    diagnostics: Any
    spend: Any
    report: Any = None


def hparams_pytree(cls: type) -> type:
    """Make ``cls`` a frozen dataclass registered as a pytree whose every field is a leaf (a float,
    an array, or a tracer under ``jit``/``vmap``): the one kind of hyperparameter container of the
    kit. Static, shape-determining choices belong in the config instead."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    return jax.tree_util.register_dataclass(cls)
