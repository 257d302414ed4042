"""The experiment spec (:class:`Experiment`), the registry of experiments, paper ids, and the
resolution of an experiment's config (its declared constraints, overrides checked before any compute).

Imported through :mod:`dpfair_jax.runner.registry`, which re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner.registry.config_checks import (
    Constraint,
    _check_type,
    _check_value,
    _fmt_value,
    _has_inf,
    _json_default,
    default_constraint,
)

__all__ = ["PAPERS", "SIZES", "STUDY_PACKAGE", "Experiment", "all_experiments", "check_config", "get",
           "known_papers", "normalize_paper", "register", "resolve_config", "study_constraints", "study_folder",
           "unregister"]

#: Paper identifiers of the kit's studies ("kit" is the kit's own checks). A study folder may name
#: another paper number ("005"); once registered it is valid wherever a paper is named.
PAPERS: tuple[str, ...] = ("000", "001", "002", "003", "004", "kit")

#: Config sizes every experiment offers.
SIZES: tuple[str, ...] = ("quick", "full")


def _canonical_paper(paper: Any) -> str | None:
    """``"kit"`` or a zero-padded paper number (``"4"``, ``4``, ``"paper_004"`` -> ``"004"``); else None."""
    text = str(paper).strip().lower()
    if text.startswith("paper_"):
        text = text[len("paper_"):]
    if text.isdigit():
        return text.zfill(3)
    return text if text == "kit" else None


def known_papers() -> tuple[str, ...]:
    """:data:`PAPERS`, then the other papers named by registered experiments."""
    extra = sorted({e.paper for e in _REGISTRY.values()} - set(PAPERS))
    return PAPERS + tuple(extra)


def normalize_paper(paper: Any, name: str = "paper") -> str:
    """Return the canonical paper id of ``paper`` among :func:`known_papers`.

    Accepts ``"000"``, ``"0"``, ``0``, ``"paper_000"`` and ``"kit"``; raises ``ValueError``
    naming ``name`` and the valid ids otherwise.
    """
    text = _canonical_paper(paper)
    valid = known_papers()
    if text not in valid:
        raise ValueError(f"{name} must be one of {', '.join(valid)}; got {paper!r}.")
    return text


#: Parent package of the loaded study folders: ``experiments/paper_004/`` is ``dpfair_experiments.paper_004``.
STUDY_PACKAGE = "dpfair_experiments"


def study_folder(exp: Experiment) -> Path | None:
    """The study folder ``exp`` was loaded from (``None`` for an experiment registered by a module)."""
    module = exp.module or ""
    if not module.startswith(STUDY_PACKAGE + "."):
        return None
    pkg = sys.modules.get(".".join(module.split(".")[:2]))
    paths = list(getattr(pkg, "__path__", []) or [])
    return Path(paths[0]) if paths else None


def study_constraints(exp: Experiment) -> dict[str, Constraint]:
    """``exp``'s declared constraints: its study folder's ``config.CONSTRAINTS`` (when it has a
    ``config.py``), then ``exp.constraints`` over them. Keys without one fall back to
    :func:`default_constraint`."""
    out: dict[str, Constraint] = {}
    folder = study_folder(exp)
    if folder is not None and (folder / "config.py").is_file():
        pkg = ".".join(exp.module.split(".")[:2])
        mod = importlib.import_module(f"{pkg}.config")
        declared = getattr(mod, "CONSTRAINTS", {}) or {}
        if not isinstance(declared, Mapping) or not all(isinstance(c, Constraint) for c in declared.values()):
            raise ValueError(f"{folder / 'config.py'}: CONSTRAINTS must be a dict {{key: Constraint(...)}}.")
        out.update(declared)
    out.update(exp.constraints)
    return out


def check_config(exp: Experiment, config: Mapping[str, Any], keys: Iterable[str] | None = None, *,
                 prefix: str = "--set ") -> None:
    """Check ``config[key]`` for ``key`` in ``keys`` (default: all) against the type of the
    experiment's default value and its constraint; raise ``ValueError`` naming the key."""
    declared = study_constraints(exp)
    defaults = [cfg for cfg in exp.configs.values() if isinstance(cfg, Mapping)]
    for key in (config if keys is None else keys):
        value = config[key]
        base = next((cfg[key] for cfg in defaults if cfg.get(key) is not None), None)
        rule = declared.get(key, default_constraint(key))
        inf_ok = any(_has_inf(cfg.get(key)) for cfg in defaults)
        try:
            _check_type(key, base, value)
            _check_value(key, value, base, rule, inf_ok)
        except ValueError as err:
            doc = f" ({rule.doc})" if rule is not None and rule.doc else ""
            raise ValueError(f"{prefix}{key}={_fmt_value(value)}: {err}{doc}.") from None


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A registered experiment.

    Attributes:
      name: unique identifier used on the command line (``dpfair run NAME``) and as the
        directory name of its results (``runs/NAME/``): letters, digits, ``_``, ``-`` and ``.``.
      paper: "000".."004" for the papers in ``papers/INDEX.md`` (another paper number for a new
        study), or "kit" for the kit's own checks.
      description: one line shown by ``dpfair list`` and in the report.
      configs: ``{"quick": {...}, "full": {...}}``; JSON-serializable dicts of hyperparameters.
        ``--set key=value`` may only override keys that exist in the chosen config. A ``"seed"``
        key, when present, is the run's seed (``ctx.seed``).
      run: ``run(config: dict, ctx: RunContext) -> None | pandas.DataFrame``. A returned frame
        is saved as the table ``results`` unless the run saved that table itself.
      constraints: ``{key: Constraint}`` for ``--set`` values, over the study folder's
        ``config.CONSTRAINTS`` and the defaults by key name (:func:`study_constraints`).
    """

    name: str
    paper: str
    description: str
    configs: Mapping[str, Mapping[str, Any]]
    run: Callable[..., Any]
    module: str = ""
    constraints: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Experiment name must be a non-empty string.")
        bad = [c for c in self.name if not (c.isalnum() or c in "_-.")]
        if bad or self.name.startswith("."):
            raise ValueError(
                f"Experiment name {self.name!r} may only use letters, digits, '_', '-' and '.' "
                "(it names a directory); rename it."
            )
        paper = _canonical_paper(self.paper)
        if paper is None:
            raise ValueError(f"Experiment {self.name!r} paper must be a paper number like '004' or 'kit'; "
                             f"got {self.paper!r}.")
        object.__setattr__(self, "paper", paper)
        if not isinstance(self.description, str):
            raise ValueError(f"Experiment {self.name!r} description must be a string.")
        if not isinstance(self.configs, Mapping) or not self.configs:
            raise ValueError(
                f"Experiment {self.name!r} configs must be a dict like {{'quick': {{...}}, 'full': {{...}}}}."
            )
        for size, cfg in self.configs.items():
            if size not in SIZES:
                raise ValueError(
                    f"Experiment {self.name!r} configs has key {size!r}; use only {', '.join(SIZES)}."
                )
            if not isinstance(cfg, Mapping):
                raise ValueError(f"Experiment {self.name!r} configs[{size!r}] must be a dict.")
            try:
                json.dumps(dict(cfg), default=_json_default)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"Experiment {self.name!r} configs[{size!r}] must be JSON-serializable: {err}"
                ) from None
        if "quick" not in self.configs:
            raise ValueError(f"Experiment {self.name!r} needs a 'quick' config.")
        if not callable(self.run):
            raise ValueError(f"Experiment {self.name!r} run must be callable as run(config, ctx).")
        if not self.module:
            object.__setattr__(self, "module", getattr(self.run, "__module__", "") or "")
        if not isinstance(self.constraints, Mapping) or not all(
                isinstance(c, Constraint) for c in self.constraints.values()):
            raise ValueError(f"Experiment {self.name!r} constraints must be a dict {{key: Constraint(...)}}.")


_REGISTRY: dict[str, Experiment] = {}


def register(exp: Experiment) -> Experiment:
    """Add ``exp`` to the registry and return it.

    Re-registering the same name from the same module (a module re-import) replaces the entry;
    the same name from a different module raises ``ValueError``.
    """
    if not isinstance(exp, Experiment):
        raise ValueError(f"register expects an Experiment, got {type(exp).__name__}.")
    old = _REGISTRY.get(exp.name)
    if old is not None and old.module and exp.module and old.module != exp.module:
        raise ValueError(
            f"Experiment name {exp.name!r} is registered by both {old.module} and {exp.module}; "
            "rename one of them."
        )
    _REGISTRY[exp.name] = exp
    return exp


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (no error when absent). Mostly for tests."""
    _REGISTRY.pop(name, None)


def all_experiments() -> list[Experiment]:
    """Registered experiments sorted by (paper, name), kit last."""
    return sorted(_REGISTRY.values(), key=lambda e: (e.paper == "kit", e.paper, e.name))


def get(name: str) -> Experiment:
    """Return the registered experiment ``name`` or raise ``ValueError`` listing valid names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        names = ", ".join(e.name for e in all_experiments()) or "(none registered)"
        raise ValueError(f"unknown experiment {name!r}; valid names: {names}") from None


def resolve_config(exp: Experiment, size: str = "quick", overrides: Mapping[str, Any] | None = None) -> dict:
    """The config of ``exp`` at ``size`` ("quick"/"full") with ``overrides`` applied.

    Unknown override keys raise ``ValueError`` listing the valid ones. An int given for a float
    entry is converted to float so that ``--set lr=1`` keeps the config's type. Every override is
    checked before any compute (:func:`check_config`: type of the default, finite, in range,
    elementwise in lists), and every path the config gives must exist; errors name the key.
    """
    if size not in exp.configs:
        raise ValueError(
            f"experiment {exp.name!r} has no {size!r} config; available: {', '.join(exp.configs)}."
        )
    config = json.loads(json.dumps(dict(exp.configs[size]), default=_json_default))
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(config))
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(unknown)} for {exp.name!r}; "
            f"valid keys: {', '.join(sorted(config)) or '(none)'}"
        )
    for key, value in overrides.items():
        base = config[key]
        if isinstance(base, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        config[key] = value
    check_config(exp, config, list(overrides))
    paths = [k for k in config if k not in overrides and (default_constraint(k) or Constraint()).path]
    check_config(exp, config, paths, prefix="config ")
    return config
