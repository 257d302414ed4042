"""Test-split evaluation of a trained classifier: hard predictions, paper 004's violations and the
flags of a run that learned nothing.

:func:`predict` turns a model's outputs into hard labels (``sigmoid > 0.5`` for one logit, argmax
otherwise, as paper 004 evaluates), :func:`degeneracy` flags constant predictions and errors at
the base rate, and :func:`evaluate` gathers the misclassification error, the demographic-parity
violation (eq. 10, :func:`~dpfair_jax.fairness.metrics.demographic_parity_pairwise`), the
equalized-odds violation (eq. 11, :func:`~dpfair_jax.fairness.metrics.equalized_odds_violation`),
the soft ERMI (:func:`dpfair_jax.fairness.ermi.ermi`) and those flags in one jit/vmap-able dict (:class:`Metrics`, printed as numbers).

Privacy: none of these is differentially private; they read labels and sensitive attributes
directly and are meant for test splits. Computed on private training data (as
``fermi.fit``'s diagnostics are) they flag runs and must not be released.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpfair_jax.data.dataset import Dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.fairness.metrics import demographic_parity_pairwise, equalized_odds_violation

__all__ = ["Metrics", "predict", "degeneracy", "evaluate"]


class Metrics(dict):
    """The dict :func:`evaluate` returns, with a readable form: ``print(evaluate(...))`` shows
    ``error=0.1523, dp_violation=0.0312, ...`` (0-d arrays as numbers; a vmapped batch as its mean
    and range). A registered pytree, so it passes through ``jit`` and ``vmap`` like a dict."""

    def __repr__(self) -> str:
        if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(dict(self))):
            return "Metrics(" + dict.__repr__(self) + ")"  # printed inside jit: no values yet
        parts = []
        for key, value in self.items():
            arr = jnp.asarray(value) if not isinstance(value, dict) else None
            if arr is None:
                parts.append(f"{key}={value!r}")
            elif arr.ndim == 0:
                parts.append(f"{key}={arr.item():.4g}" if arr.dtype != jnp.bool_ else f"{key}={bool(arr)}")
            else:
                a = arr.astype(jnp.float32)
                parts.append(f"{key}=mean {float(a.mean()):.4g} [{float(a.min()):.4g}, {float(a.max()):.4g}] "
                             f"over {arr.shape}")
        return "Metrics(" + ", ".join(parts) + ")"

    __str__ = __repr__


jax.tree_util.register_pytree_node(
    Metrics,
    lambda m: (tuple(m.values()), tuple(m.keys())),
    lambda keys, values: Metrics(zip(keys, values)),
)


def predict(model: Any, params: Any, x: jax.Array) -> jax.Array:
    """Hard labels ``int32 [n]`` of ``model.apply(params, x)``: ``sigmoid > 0.5`` (logit ``> 0``)
    for one-logit models, argmax otherwise.

    Privacy: none (a function of the model and ``x``)."""
    out = model.apply(params, x)
    if model.num_outputs == 1:
        return (out > 0).astype(jnp.int32)
    return jnp.argmax(out, axis=-1).astype(jnp.int32)


def degeneracy(yhat: jax.Array, y: jax.Array, num_classes: int) -> dict:
    """Flags of a degenerate classifier on labels ``y`` (jit/vmap-able):

    * ``majority_share``: the share of the most frequent predicted label (1: constant predictions);
    * ``constant_predictions``: every prediction is the same label (its DP and EO violations are 0
      whatever the data: a "perfectly fair" model that learned nothing);
    * ``base_error``: the error of the best constant predictor, ``1 - max_c P(y = c)``;
    * ``at_base_rate``: ``error >= base_error - se`` with ``se = sqrt(b (1 - b) / n)`` the standard
      error of an error rate at ``b = base_error`` on ``n`` rows (no better than predicting the
      majority label, within one standard error);
    * ``degenerate``: either of the two.

    Privacy: none (reads ``y`` directly).
    """
    n = yhat.shape[0]
    share = jnp.max(jnp.mean(jax.nn.one_hot(yhat, num_classes), axis=0))
    base = 1.0 - jnp.max(jnp.mean(jax.nn.one_hot(y, num_classes), axis=0))
    error = jnp.mean((yhat != y).astype(jnp.float32))
    at_base = error >= base - jnp.sqrt(base * (1.0 - base) / n)
    constant = share >= 1.0
    return {"majority_share": share, "constant_predictions": constant, "base_error": base,
            "at_base_rate": at_base, "degenerate": constant | at_base}


def evaluate(model: Any, params: Any, data: Dataset, num_classes: int = 2) -> dict:
    """Test metrics of ``model`` at ``params`` on ``data``: misclassification ``error``,
    ``dp_violation`` (paper 004 eq. 10), ``eo_violation`` (eq. 11), the soft ``ermi``, and the
    :func:`degeneracy` flags (``constant_predictions``, ``at_base_rate``, ``degenerate``,
    ``majority_share``, ``base_error``): a model at the base rate or with constant predictions has
    small violations because it learned nothing. jit/vmap-able over ``params``; ``num_classes``
    is the number of target classes (2 for a one-logit model).

    Privacy: none (evaluation on a test split; see the module docstring).
    """
    yhat = predict(model, params, data.x)
    probs = E.soft_predictions(model.apply(params, data.x))
    return Metrics({
        "error": jnp.mean((yhat != data.y).astype(jnp.float32)),
        "dp_violation": demographic_parity_pairwise(yhat, data.s, data.num_groups, num_classes=num_classes),
        "eo_violation": equalized_odds_violation(yhat, data.y, data.s, data.num_groups,
                                                 num_classes=num_classes),
        "ermi": E.ermi(probs, data.s, data.num_groups),
        **degeneracy(yhat, data.y, num_classes),
    })
