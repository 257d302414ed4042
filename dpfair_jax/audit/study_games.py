"""Audit games of the public tradeoff study under the sensitive-attribute unit.

:func:`tradeoff_attribute_game` runs
:func:`dpfair_jax.studies.tradeoff.tradeoff_frontier_study` with ``privacy_unit=
"sensitive_attribute"`` (every other argument as the caller passes it, the study's defaults
otherwise) on a data set ``D`` and on its neighbour ``D'`` (:func:`attribute_neighbour`: one
record's ``s_i`` changed, nothing else), with the same seed, so both worlds have the same splits
and the same keys. It returns the two results and two checks:

* **zero claims** (:func:`zero_claim_check`): a method whose recorded spend is ``epsilon = 0``
  (DP-SGD: lambda = 0 reads ``s`` nowhere) must release *exactly* the same thing in both worlds:
  the same models (bitwise) and the same training-side columns of its rows
  (:data:`RELEASED_COLUMNS`). The test-split fairness metrics (``violation``, ``dp_violation``,
  ``eo_violation``, ``ermi``) read ``s`` and are evaluation, outside every spend, so they are not
  compared. Any difference contradicts a 0 claim (no noise can cover it).
* **a lower bound** (:func:`attribute_lower_bound`): each replicate is a trial (its own split and
  keys); the statistic is the released model's score on the changed record (its class-1 logit,
  or a caller's ``statistic(model, x_i)``), both orientations with a Bonferroni split of the
  level; Clopper-Pearson threshold bound
  (:func:`~dpfair_jax.audit.lower_bounds.epsilon_lower_bound_from_scores`) at the row's
  ``spend_delta``, against the row's ``spend_epsilon``. Replicates are few (each is a whole tuned
  training), so this bound is weak: it refutes only a gross understatement. The same statistic
  at ``epsilon = inf`` (no noise) shows whether the method reads ``s`` at all (a method that
  reads it releases different models in the two worlds; the zero-claim check of such a method
  must fail, which is what makes that check meaningful).

Privacy: none; an audit of what the study records.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpfair_jax import _validation as V

__all__ = ["RELEASED_COLUMNS", "attribute_neighbour", "tradeoff_attribute_game", "StudyPair", "zero_claim_check",
           "attribute_lower_bound"]

#: the columns of a study row that come from training and selection (not from the test split's
#: sensitive attribute); a method whose spend is 0 must give them bitwise equal in both worlds
RELEASED_COLUMNS = ("error", "val_error_noisy", "spend_epsilon", "spend_delta", "candidate", "noise_theta",
                    "truncated_steps", "degenerate", "constant")
_KEY = ("method", "epsilon", "lam", "replicate")


def attribute_neighbour(data: Any, index: int, group: int) -> Any:
    """``data`` (a :class:`~dpfair_jax.data.Dataset`) with record ``index``'s ``s`` set to ``group``
    (another group than its own); features, labels and every other record unchanged."""
    import jax.numpy as jnp

    from dpfair_jax.data.dataset import Dataset

    if not isinstance(data, Dataset):
        raise ValueError(f"data must be a dpfair_jax Dataset, got {type(data).__name__}.")
    s = np.asarray(data.s).copy()
    index = V.check_int("index", index, minimum=0)
    if index >= s.shape[0]:
        raise ValueError(f"index must be below the {s.shape[0]} records, got {index}.")
    group = V.check_int("group", group, minimum=0)
    if group >= int(data.num_groups) or group == int(s[index]):
        raise ValueError(f"group must be another group of [0, {int(data.num_groups)}) than record {index}'s "
                         f"({int(s[index])}), got {group}.")
    s[index] = group
    return dataclasses.replace(data, s=jnp.asarray(s))


@dataclasses.dataclass(frozen=True)
class StudyPair:
    """The study on ``D`` (``world0``) and on its attribute neighbour (``world1``), same seed; the
    changed record's ``index`` and features ``x_i``."""

    world0: Any
    world1: Any
    index: int
    x_i: np.ndarray


def tradeoff_attribute_game(data: Any, index: int, group: int, **study_kwargs: Any) -> StudyPair:
    """:func:`~dpfair_jax.studies.tradeoff.tradeoff_frontier_study` on ``data`` and on
    :func:`attribute_neighbour` ``(data, index, group)`` with ``privacy_unit="sensitive_attribute"``
    and the same ``study_kwargs`` (seed included; ``progress`` off unless given)."""
    from dpfair_jax.studies.tradeoff import tradeoff_frontier_study

    if study_kwargs.get("privacy_unit", "sensitive_attribute") != "sensitive_attribute":
        raise ValueError("privacy_unit: this game audits the sensitive-attribute unit only.")
    nbr = attribute_neighbour(data, index, group)
    kw = dict(study_kwargs, privacy_unit="sensitive_attribute")
    kw.setdefault("progress", False)
    r0 = tradeoff_frontier_study(data, **kw)
    r1 = tradeoff_frontier_study(nbr, **kw)
    return StudyPair(r0, r1, int(index), np.asarray(data.x, np.float64)[int(index)])


def _rows(res: Any, method: str):
    t = res.table
    return t[t["method"] == method].sort_values(list(_KEY)).reset_index(drop=True)


def zero_claim_check(pair: StudyPair, method: str = "dpsgd", epsilon: float | None = None) -> dict[str, Any]:
    """Whether ``method``'s releases (at ``epsilon``; default every epsilon of the study) are
    identical in the two worlds.

    Returns ``{"method", "claimed_epsilon" (the largest recorded spend), "identical", "differing"}``
    (``differing``: the columns of :data:`RELEASED_COLUMNS` and ``"params"`` that differ). A
    method with a 0 claim passes only with ``identical``.
    """
    a, b = _rows(pair.world0, method), _rows(pair.world1, method)
    if epsilon is not None:
        a, b = a[a["epsilon"] == float(epsilon)], b[b["epsilon"] == float(epsilon)]
    if a.empty or len(a) != len(b):
        raise ValueError(f"method {method!r} has no rows (or different rows) in the two worlds.")
    differing = [c for c in RELEASED_COLUMNS if c in a and not np.array_equal(a[c].to_numpy(), b[c].to_numpy())]
    differing += sorted({c for c in a if c.startswith("hp_") and not np.array_equal(a[c].to_numpy(), b[c].to_numpy())})
    for key in a[list(_KEY)].itertuples(index=False, name=None):
        k = (str(key[0]), float(key[1]), float(key[2]), int(key[3]))
        la = [np.asarray(v) for v in _leaves(pair.world0.models[k].params)]
        lb = [np.asarray(v) for v in _leaves(pair.world1.models[k].params)]
        if len(la) != len(lb) or any(x.shape != y.shape or x.tobytes() != y.tobytes() for x, y in zip(la, lb)):
            differing.append("params")
            break
    eps = float(max(a["spend_epsilon"].max(), b["spend_epsilon"].max()))
    return {"method": method, "claimed_epsilon": eps, "identical": not differing, "differing": differing}


def _leaves(tree: Any) -> list:
    import jax

    return jax.tree_util.tree_leaves(tree)


def _class1_logit(model: Any, x_i: np.ndarray) -> float:
    """The released linear model's class-1 logit on ``x_i`` (``{"w": [d, k], "b": [k]}``)."""
    p = model.params
    w, b = np.asarray(p["w"], np.float64), np.asarray(p["b"], np.float64)
    out = x_i @ w + b
    return float(out[-1] - (out[0] if out.shape[-1] > 1 else 0.0))


def attribute_lower_bound(pair: StudyPair, method: str, epsilon: float, *, lam: float | None = None,
                          statistic: Callable[[Any, np.ndarray], float] | None = None,
                          confidence: float = 0.95) -> dict[str, Any]:
    """An audit row (:data:`~dpfair_jax.audit.games.AUDIT_COLUMNS`) for ``method`` at ``epsilon``
    (and ``lam``: the method's first lambda by default): one trial per replicate, the statistic
    in both orientations (level ``(1 - confidence) / 2`` each), claim = the rows' spend."""
    from dpfair_jax.audit.lower_bounds import epsilon_lower_bound_from_scores

    a, b = _rows(pair.world0, method), _rows(pair.world1, method)
    a, b = a[a["epsilon"] == float(epsilon)], b[b["epsilon"] == float(epsilon)]
    if a.empty:
        raise ValueError(f"method {method!r} has no rows at epsilon={epsilon!r}.")
    lam = float(a["lam"].iloc[0]) if lam is None else float(lam)
    a, b = a[a["lam"] == lam], b[b["lam"] == lam]
    stat = _class1_logit if statistic is None else statistic

    def scores(res, rows) -> np.ndarray:
        return np.asarray([stat(res.model(method, float(epsilon), lam, int(r)), pair.x_i) for r in rows["replicate"]])

    s0, s1 = scores(pair.world0, a), scores(pair.world1, b)
    claim = float(max(a["spend_epsilon"].max(), b["spend_epsilon"].max()))
    delta = float(max(a["spend_delta"].max(), b["spend_delta"].max()))
    c = 1.0 - (1.0 - float(confidence)) / 2.0
    bounds = [epsilon_lower_bound_from_scores(s1, s0, delta, c), epsilon_lower_bound_from_scores(-s1, -s0, delta, c)]
    lb = max(0.0, max(float(x.epsilon_lower_bound) for x in bounds))
    return {"mechanism": f"tradeoff[{method}, sensitive_attribute]", "planted_bug": "none",
            "claimed_epsilon": claim, "delta": delta, "epsilon_lower_bound": lb, "confidence": float(confidence),
            "trials": int(len(s0)), "passed": bool(lb <= claim or math.isinf(claim)), "relation": "replace_one",
            "moved": bool(not np.array_equal(s0, s1))}
