"""Checks of experiment config values: :class:`Constraint` (what a value may be),
:func:`default_constraint` (the constraint a key's name implies), the type and range checks behind
:func:`dpfair_jax.runner.registry.check_config`, and the parsing of ``--set key=value`` overrides.

Imported through :mod:`dpfair_jax.runner.registry`, which re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["Constraint", "default_constraint", "parse_overrides", "parse_value"]


def _json_default(obj: Any) -> Any:
    # numpy scalars / arrays without importing numpy here.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serializable")


@dataclasses.dataclass(frozen=True)
class Constraint:
    """What a config value may be (numbers are checked elementwise inside lists).

    ``low``/``high``: bounds (``None``: unbounded), inclusive unless ``low_open``/``high_open``;
    ``integer``: whole numbers only; ``allow_inf``: +-infinity accepted (NaN never is);
    ``choices``: the allowed values (strings or numbers); ``path``: a string naming a file or
    folder that must exist when given (``None`` or ``""`` means not given); ``doc``: what the
    value means, quoted in errors. Studies declare theirs in ``CONSTRAINTS`` in their
    ``config.py``, e.g. ``{"public_fraction": Constraint(0, 1, low_open=True, high_open=True)}``.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    allow_inf: bool = False
    choices: tuple | None = None
    path: bool = False
    doc: str = ""

    def describe(self) -> str:
        """The range in words, e.g. ``"> 0"`` or ``"in [0, 1)"``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kind = "a whole number" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            lo, hi = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{kind} in {lo}{self.low:g}, {self.high:g}{hi}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = f"a finite {kind[2:]}" if not self.allow_inf else kind
        if self.allow_inf and (self.low is not None or self.high is not None):
            text += " (inf allowed)"
        return text


def _positive(integer: bool = False, allow_inf: bool = False) -> Constraint:
    return Constraint(low=0, low_open=True, integer=integer, allow_inf=allow_inf)


def _nonnegative(integer: bool = False, allow_inf: bool = False) -> Constraint:
    return Constraint(low=0, integer=integer, allow_inf=allow_inf)


#: Name tokens (the key's last ``_``-separated part, lower case) of counts and sizes: whole numbers > 0.
_COUNT_TOKENS = frozenset({
    "seeds", "trials", "epochs", "steps", "draws", "runs", "samples", "size", "sizes", "trees",
    "angles", "checkpoints", "probes", "hidden", "channels", "block", "chunk", "n", "ns", "k", "ks",
    "d", "dw", "minority", "designs", "axis", "iterations", "iters", "rounds", "width", "depth",
    "replicates", "reps", "repeats", "folds", "bootstrap", "bootstraps", "points", "batches",
})
#: Tokens of learning rates and other positive scales.
_POSITIVE_TOKENS = frozenset({
    "lr", "rate", "radius", "sigma", "sigmas", "sd", "sds", "std", "temperature", "eta", "reg", "smoothing",
    "bound", "alpha", "alphas", "ratios", "ratio", "scale", "r", "tol", "box",
})
#: Tokens of privacy budgets: > 0, infinity (no privacy) allowed.
_BUDGET_TOKENS = frozenset({"epsilon", "epsilons", "eps", "rho", "rhos"})
#: Tokens of non-negative weights and slacks.
_NONNEG_TOKENS = frozenset({"lam", "lams", "lambda", "lambdas", "slack", "gamma", "gammas", "multiplier",
                            "multipliers", "weight", "weights", "var", "noise"})
#: Tokens of probabilities and shares strictly inside (0, 1) (a confidence ``level``, a budget ``split``).
_OPEN_UNIT_TOKENS = frozenset({"level", "split"})


def default_constraint(key: str) -> Constraint | None:
    """The constraint the key's name implies (``None``: only the type and finiteness are checked).

    ``seed``: a whole number >= 0; ``*path``: an existing path when given; ``delta``: in [0, 1);
    ``*fraction``/``*frac``: in (0, 1]; ``relation``: "add_remove", "replace_one" or "replace_one_within_group"; counts and
    sizes (``seeds``, ``trials``, ``epochs``, ``steps``, ``batch_size``, ``n``, ``ks``, ...): whole
    numbers > 0 (a fraction where the default is one, e.g. ``val_size=0.15``); row limits
    (``*rows``): whole numbers >= 0, 0 meaning every row; learning rates (``lr*``,
    ``learning_rate``), radii, standard deviations, temperatures: > 0; ``epsilon(s)``/``rho(s)``:
    > 0 with infinity allowed; clip norms (``clip*``): > 0 with infinity allowed; ``lams``,
    slacks, ``gamma(s)``, noise multipliers and variances: >= 0; replicates, repeats, bootstrap
    draws, grid points: whole numbers > 0; tolerances, boxes: > 0; ``runs_mean`` (the mean number of
    tuning runs): >= 1, ``runs_shape``: >= 0, infinity allowed; a confidence ``level``
    and a ``*split``: in (0, 1); ``*share``: in [0, 1]; ``*_grid``/``*_range``: the stem's
    constraint (``lr_w_grid`` as ``lr_w``); keys naming an epsilon, a clip, a learning rate, a
    radius or a bound anywhere (``penalty_clip_norm``, ``stats_bound_x``): as those.
    """
    name = key.lower()
    tokens = name.split("_")
    last = tokens[-1]
    if name in ("seed", "split_seed") or (last == "seed" and len(tokens) > 1):
        return _nonnegative(integer=True)
    if last == "path" or name.endswith("path"):
        return Constraint(path=True)
    if last == "delta":
        return Constraint(0, 1, high_open=True)
    if last in ("fraction", "frac"):
        return Constraint(0, 1, low_open=True)
    if last == "relation":
        return Constraint(choices=("add_remove", "replace_one", "replace_one_within_group"))
    if tokens[0] in ("n", "num") and len(tokens) > 1:
        return _positive(integer=True)
    if tokens[0] == "clip" or last in ("clip", "clips"):
        return _positive(allow_inf=True)
    if last in _BUDGET_TOKENS:
        return _positive(allow_inf=True)
    if tokens[0] == "lr" or name == "learning_rate" or last in _POSITIVE_TOKENS:
        return _positive()
    if last in _COUNT_TOKENS or last == "per" or (len(tokens) > 1 and tokens[-2] == "per"):
        return _positive(integer=True)
    if last in _NONNEG_TOKENS:
        return _nonnegative()
    if last == "rows":  # row limits: 0 (or None) keeps every row
        return _nonnegative(integer=True)
    if tokens[0] == "runs" and last in ("mean", "shape"):  # the random-stopping law of the tuning runs
        return Constraint(low=1) if last == "mean" else _nonnegative(allow_inf=True)
    if last in _OPEN_UNIT_TOKENS:
        return Constraint(0, 1, low_open=True, high_open=True)
    if last == "share":
        return Constraint(0, 1)
    if last in ("grid", "range") and len(tokens) > 1:  # a grid of the values its stem names
        stem = default_constraint("_".join(tokens[:-1]))
        if stem is not None:
            return stem
    if any(t in _BUDGET_TOKENS for t in tokens):
        return _positive(allow_inf=True)
    if "clip" in tokens:
        return _positive(allow_inf=True)
    if any(t == "lr" or t in ("radius", "bound", "box") for t in tokens):
        return _positive()
    return None


def _has_inf(value: Any) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, (list, tuple)):
        return any(_has_inf(v) for v in value)
    return False


def _fmt_value(value: Any) -> str:
    try:
        return json.dumps(value, default=_json_default)
    except (TypeError, ValueError):
        return repr(value)


def _check_number(where: str, value: Any, rule: Constraint | None, inf_ok: bool, default: Any = None) -> None:
    """``value`` (a number: bools and strings are left to the type check) against ``rule``; a
    ``rule.integer`` from the key's name does not apply where the default is a fraction (e.g.
    ``val_size=0.15``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if math.isnan(value):
        raise ValueError(f"{where} must be a finite number, got NaN")
    allow_inf = inf_ok or (rule is not None and rule.allow_inf)
    if math.isinf(value) and not allow_inf:
        raise ValueError(f"{where} must be finite, got {value}")
    if rule is None:
        return
    if rule.choices is not None:
        if value not in rule.choices:
            raise ValueError(f"{where} must be {rule.describe()}, got {value!r}")
        return
    whole = rule.integer and not (isinstance(default, float) and default != int(default))
    if whole and not math.isinf(value) and value != int(value):
        raise ValueError(f"{where} must be a whole number, got {value!r}")
    low_bad = rule.low is not None and (value <= rule.low if rule.low_open else value < rule.low)
    high_bad = rule.high is not None and (value >= rule.high if rule.high_open else value > rule.high)
    if low_bad or high_bad:
        shown = rule if whole or not rule.integer else dataclasses.replace(rule, integer=False)
        raise ValueError(f"{where} must be {shown.describe()}, got {value!r}")


def _check_value(where: str, value: Any, default: Any, rule: Constraint | None, inf_ok: bool) -> None:
    """Recursive check of ``value`` (named ``where``) against the type of ``default`` and ``rule``."""
    if value is None:
        return
    if rule is not None and rule.path:
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"{where} must be a path (a string), got {_fmt_value(value)}")
        if str(value) and not Path(value).expanduser().exists():
            raise ValueError(f"{where}: {str(value)!r} does not exist; give an existing file or leave it "
                             "unset")
        return
    if isinstance(value, dict):
        sub_defaults = default if isinstance(default, dict) else {}
        for k, v in value.items():
            sub = sub_defaults.get(k)
            _check_value_typed(f"{where}.{k}", v, sub, default_constraint(str(k)),
                               inf_ok=_has_inf(sub))
        return
    if isinstance(value, (list, tuple)):
        elem_default = _element_default(default)
        for i, v in enumerate(value):
            _check_value_typed(f"{where}[{i}]", v, elem_default, rule, inf_ok)
        return
    if rule is not None and rule.choices is not None and isinstance(value, str):
        if value not in rule.choices:
            raise ValueError(f"{where} must be {rule.describe()}, got {value!r}")
        return
    _check_number(where, value, rule, inf_ok, default)


def _element_default(default: Any) -> Any:
    """A representative element of a list default (the first non-None), else None."""
    if isinstance(default, (list, tuple)):
        for d in default:
            if d is not None:
                return d
    return None


def _check_value_typed(where: str, value: Any, default: Any, rule: Constraint | None, inf_ok: bool) -> None:
    _check_type(where, default, value)
    _check_value(where, value, default, rule, inf_ok)


def _check_type(where: str, base: Any, value: Any) -> None:
    """Refuse ``value`` whose type cannot stand in for the default ``base`` (see :func:`resolve_config`)."""
    if base is None or isinstance(base, str) or value is None:
        return
    if isinstance(base, bool):
        ok, want = isinstance(value, bool), "true or false"
    elif isinstance(base, int):
        ok, want = isinstance(value, int) and not isinstance(value, bool), "a whole number"
    elif isinstance(base, float):
        ok, want = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(base, (list, tuple)):
        ok, want = isinstance(value, (list, tuple)), "a JSON list, e.g. [1, 2]"
    elif isinstance(base, dict):
        ok, want = isinstance(value, dict), "a JSON object"
    else:
        return
    if not ok:
        raise ValueError(f"{where} must be {want} (default {_fmt_value(base)}), got {_fmt_value(value)}")


def parse_value(text: str) -> Any:
    """A ``--set`` value: a JSON literal (``3``, ``0.5``, ``true``, ``[1, 2]``, ``null``) else the string."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def parse_overrides(items: Iterable[str] | None) -> dict[str, Any]:
    """Parse ``["key=value", ...]`` into a dict (values via :func:`parse_value`).

    Raises ``ValueError`` for an item without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {item!r}.")
        out[key] = parse_value(value)
    return out
