"""Experiment specs, the registry, and auto-discovery of experiment modules.

An experiment is a named config (``"quick"`` and ``"full"`` sizes) plus a function
``run(config, ctx)`` that runs a sweep and writes (or returns) a tidy table, figures and claims
through its :class:`~dpfair_jax.experiments.context.RunContext`.

Paper modules register at import time::

    from dpfair_jax.experiments.registry import Experiment, register

    register(Experiment(
        name="p000_ols", paper="000", description="DPSE vs DPNoSE on OLS mixtures",
        configs={"quick": {...}, "full": {...}}, run=run))

:func:`discover` imports ``dpfair_jax/experiments/kit.py`` and every ``paper_*.py`` in this
package, one at a time; a module that fails to import is reported in
:attr:`Discovery.errors` and does not stop the others. This module imports neither JAX nor any
experiment module at import time, so listing experiments stays cheap until one is discovered.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "PAPERS",
    "Discovery",
    "Experiment",
    "all_experiments",
    "discover",
    "get",
    "normalize_paper",
    "parse_overrides",
    "register",
    "resolve_config",
    "unregister",
]

#: Paper identifiers a claim or an experiment may name ("kit" is the kit's own checks).
PAPERS: tuple[str, ...] = ("000", "001", "002", "003", "004", "kit")

#: Config sizes every experiment offers.
SIZES: tuple[str, ...] = ("quick", "full")


def normalize_paper(paper: Any, name: str = "paper") -> str:
    """Return the canonical paper id ("000".."004" or "kit") for ``paper``.

    Accepts ``"000"``, ``"0"``, ``0``, ``"paper_000"`` and ``"kit"``; raises ``ValueError``
    naming ``name`` and the valid ids otherwise.
    """
    text = str(paper).strip().lower()
    if text.startswith("paper_"):
        text = text[len("paper_"):]
    if text.isdigit():
        text = text.zfill(3)
    if text not in PAPERS:
        raise ValueError(f"{name} must be one of {', '.join(PAPERS)}; got {paper!r}.")
    return text


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A registered experiment.

    Attributes:
      name: unique identifier used on the command line (``dpfair run NAME``) and as the
        directory name of its results (``runs/NAME/``): letters, digits, ``_``, ``-`` and ``.``.
      paper: "000".."004" for the papers in ``papers/INDEX.md``, or "kit" for the kit's own checks.
      description: one line shown by ``dpfair list`` and in the report.
      configs: ``{"quick": {...}, "full": {...}}``; JSON-serializable dicts of hyperparameters.
        ``--set key=value`` may only override keys that exist in the chosen config. A ``"seed"``
        key, when present, is the run's seed (``ctx.seed``).
      run: ``run(config: dict, ctx: RunContext) -> None | pandas.DataFrame``. A returned frame
        is saved as the table ``results`` unless the run saved that table itself.
    """

    name: str
    paper: str
    description: str
    configs: Mapping[str, Mapping[str, Any]]
    run: Callable[..., Any]
    module: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Experiment name must be a non-empty string.")
        bad = [c for c in self.name if not (c.isalnum() or c in "_-.")]
        if bad or self.name.startswith("."):
            raise ValueError(
                f"Experiment name {self.name!r} may only use letters, digits, '_', '-' and '.' "
                "(it names a directory); rename it."
            )
        object.__setattr__(self, "paper", normalize_paper(self.paper, f"Experiment {self.name!r} paper"))
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


def _json_default(obj: Any) -> Any:
    # numpy scalars / arrays without importing numpy here.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serializable")


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


@dataclasses.dataclass
class Discovery:
    """Result of :func:`discover`: the experiments found and the modules that failed to import."""

    experiments: list[Experiment]
    errors: dict[str, str]  # module name -> one-line error
    tracebacks: dict[str, str]  # module name -> full traceback


def experiment_modules() -> list[str]:
    """Fully qualified names of the modules :func:`discover` imports (kit first, then papers)."""
    from dpfair_jax import experiments as pkg

    names = sorted(
        m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("paper_") and not m.ispkg
    )
    found = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    mods = (["kit"] if "kit" in found else []) + names
    return [f"{pkg.__name__}.{m}" for m in mods]


def discover(modules: Iterable[str] | None = None) -> Discovery:
    """Import the experiment modules (default: :func:`experiment_modules`) and collect registrations.

    A module raising at import time is recorded in ``errors`` (``"ExcType: message"``) and
    ``tracebacks``, and whatever it registered before failing is dropped. Already-imported modules
    are not re-imported.
    """
    errors: dict[str, str] = {}
    tbs: dict[str, str] = {}
    for mod in experiment_modules() if modules is None else modules:
        if mod in sys.modules:
            continue
        try:
            importlib.import_module(mod)
        except Exception as err:  # noqa: BLE001 - a broken module must not stop the others
            sys.modules.pop(mod, None)
            for name in [n for n, e in _REGISTRY.items() if e.module == mod]:
                del _REGISTRY[name]  # registrations of a half-imported module are not trusted
            errors[mod] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
            tbs[mod] = traceback.format_exc()
    return Discovery(all_experiments(), errors, tbs)


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


def _check_override_type(key: str, base: Any, value: Any) -> None:
    """Refuse an override whose type cannot stand in for the config's default (before any compute).

    Numbers must stay numbers (int for int entries), booleans booleans, lists lists; a ``None``
    default accepts anything, and a string default accepts any value.
    """
    if base is None or isinstance(base, str) or value is None:
        return
    if isinstance(base, bool):
        ok = isinstance(value, bool)
        want = "true or false"
    elif isinstance(base, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "an integer"
    elif isinstance(base, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        want = "a number"
    elif isinstance(base, (list, tuple)):
        ok = isinstance(value, (list, tuple))
        want = "a JSON list, e.g. [1, 2]"
    elif isinstance(base, dict):
        ok = isinstance(value, dict)
        want = "a JSON object"
    else:
        return
    if not ok:
        raise ValueError(f"--set {key}={value!r}: {key} must be {want} (its default is {base!r}).")


def resolve_config(exp: Experiment, size: str = "quick", overrides: Mapping[str, Any] | None = None) -> dict:
    """The config of ``exp`` at ``size`` ("quick"/"full") with ``overrides`` applied.

    Unknown override keys raise ``ValueError`` listing the valid ones. An int given for a float
    entry is converted to float so that ``--set lr=1`` keeps the config's type.
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
        _check_override_type(key, base, value)
        config[key] = value
    return config
