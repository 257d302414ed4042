"""Experiment specs, the registry, and discovery of study folders.

An experiment is a named config (``"quick"`` and ``"full"`` sizes) plus a function
``run(config, ctx)`` that runs a sweep and writes (or returns) a tidy table, figures and claims
through its :class:`~dpfair_jax.runner.context.RunContext`.

Studies live outside the package, one folder per study under an experiments directory
(``experiments/paper_004/``, ``experiments/kit/``, ...). A folder's ``study.py`` registers its
experiments at import time::

    from dpfair_jax.runner import Experiment, register

    register(Experiment(
        name="p000_ols", paper="000", description="DPSE vs DPNoSE on OLS mixtures",
        configs={"quick": {...}, "full": {...}}, run=run))

The experiments directory is ``--experiments DIR`` on the command line, else
``$DPFAIR_EXPERIMENTS``, else ``./experiments``, else the ``experiments/`` folder of the nearest
parent directory that also holds a ``pyproject.toml`` (a repository root); see
:func:`find_experiments_dir`. :func:`discover` loads every study folder (kit first), one at a
time, as the package ``dpfair_experiments.<folder>`` (by file path: nothing is added to
``sys.path``), so a study may split its code over several modules (``config.py``, ``study.py``,
``figures.py``) and import them relatively. A folder that fails to import is reported in
:attr:`Discovery.errors` and does not stop the others. A researcher adds a study by adding a
folder; the package is not edited. This module imports neither JAX nor any study at import time,
so listing experiments stays cheap until one is discovered.

``--set key=value`` overrides are checked before any compute (:func:`resolve_config`): the type
comes from the config's default value, numbers must be finite (NaN never; infinity only where the
key allows it, e.g. ``epsilons``), and ranges come from the key's name (counts, sizes, epochs,
batch sizes, learning rates, epsilons: positive; ``delta`` in [0, 1); see
:func:`default_constraint`) unless the study declares its own in a ``CONSTRAINTS`` dict in its
``config.py`` (``{key: Constraint(...)}``) or in ``Experiment(constraints=...)``. Lists are checked
elementwise, dicts key by key; a path that is given must exist. Each error names the key given.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import traceback
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "Constraint",
    "ENV_EXPERIMENTS",
    "PAPERS",
    "STUDY_PACKAGE",
    "Discovery",
    "Experiment",
    "all_experiments",
    "check_config",
    "default_constraint",
    "discover",
    "find_experiments_dir",
    "get",
    "known_papers",
    "load_study",
    "normalize_paper",
    "parse_overrides",
    "register",
    "resolve_config",
    "study_constraints",
    "study_folder",
    "study_folders",
    "unregister",
]

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
})
#: Tokens of learning rates and other positive scales.
_POSITIVE_TOKENS = frozenset({
    "lr", "rate", "radius", "sigma", "sigmas", "sd", "sds", "std", "temperature", "eta", "reg", "smoothing",
    "bound", "alpha", "alphas", "ratios", "ratio", "scale", "r",
})
#: Tokens of privacy budgets: > 0, infinity (no privacy) allowed.
_BUDGET_TOKENS = frozenset({"epsilon", "epsilons", "eps", "rho", "rhos"})
#: Tokens of non-negative weights and slacks.
_NONNEG_TOKENS = frozenset({"lam", "lams", "lambda", "lambdas", "slack", "gamma", "gammas", "multiplier",
                            "multipliers", "weight", "weights"})


def default_constraint(key: str) -> Constraint | None:
    """The constraint the key's name implies (``None``: only the type and finiteness are checked).

    ``seed``: a whole number >= 0; ``*path``: an existing path when given; ``delta``: in [0, 1);
    ``*fraction``/``*frac``: in (0, 1]; ``relation``: "add_remove", "replace_one" or "replace_one_within_group"; counts and
    sizes (``seeds``, ``trials``, ``epochs``, ``steps``, ``batch_size``, ``n``, ``ks``, ...): whole
    numbers > 0 (a fraction where the default is one, e.g. ``val_size=0.15``); row limits
    (``*rows``): whole numbers >= 0, 0 meaning every row; learning rates (``lr*``,
    ``learning_rate``), radii, standard deviations, temperatures: > 0; ``epsilon(s)``/``rho(s)``:
    > 0 with infinity allowed; clip norms (``clip*``): > 0 with infinity allowed; ``lams``,
    slacks, ``gamma(s)``, noise multipliers: >= 0.
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
    """Result of :func:`discover`: the experiments of the studies found, and the studies that failed
    to import."""

    experiments: list[Experiment]
    errors: dict[str, str]  # module name -> one-line error
    tracebacks: dict[str, str]  # module name -> full traceback


#: Environment variable naming the experiments directory (``--experiments DIR`` takes precedence).
ENV_EXPERIMENTS = "DPFAIR_EXPERIMENTS"

#: Parent package of the loaded study folders: ``experiments/paper_004/`` is ``dpfair_experiments.paper_004``.
STUDY_PACKAGE = "dpfair_experiments"

#: The module of a study folder that registers its experiments.
STUDY_MODULE = "study"


def find_experiments_dir(path: str | os.PathLike | None = None, *, start: str | os.PathLike | None = None
                         ) -> Path | None:
    """The experiments directory: ``path`` when given, else ``$DPFAIR_EXPERIMENTS``, else
    ``<start>/experiments`` (``start`` defaults to the current directory), else ``experiments/`` of
    the nearest parent of ``start`` that also holds a ``pyproject.toml``; ``None`` when none is found.

    The directory named by ``path`` or the environment is returned as given (not checked here;
    :func:`study_folders` refuses one that does not exist).
    """
    if path is not None:
        return Path(path)
    env = os.environ.get(ENV_EXPERIMENTS)
    if env:
        return Path(env)
    here = Path.cwd() if start is None else Path(start)
    here = here.resolve()
    if (here / "experiments").is_dir():
        return here / "experiments"
    for parent in here.parents:
        if (parent / "experiments").is_dir() and (parent / "pyproject.toml").is_file():
            return parent / "experiments"
    return None


def study_folders(root: str | os.PathLike | None = None) -> list[Path]:
    """The study folders under ``root`` (default :func:`find_experiments_dir`): its subdirectories
    that hold a ``study.py``, ``kit`` first, then by name; names starting with ``_`` or ``.`` are
    skipped. No directory found: ``[]``. Raises ``ValueError`` when ``root`` is not a directory."""
    if root is None:
        root = find_experiments_dir()
        if root is None:
            return []
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"experiments directory {str(root)!r} does not exist; pass --experiments DIR "
                         f"(a folder of study folders) or set ${ENV_EXPERIMENTS}.")
    folders = [p for p in root.iterdir()
               if p.is_dir() and not p.name.startswith(("_", ".")) and (p / f"{STUDY_MODULE}.py").is_file()]
    return sorted(folders, key=lambda p: (p.name != "kit", p.name))


def _study_package_name(folder: Path) -> str:
    if not folder.name.isidentifier():
        raise ValueError(f"study folder name {folder.name!r} must be a Python identifier "
                         "(letters, digits and '_', not starting with a digit); rename the folder.")
    return f"{STUDY_PACKAGE}.{folder.name}"


def _forget_package(name: str) -> None:
    """Drop ``name`` and its submodules from ``sys.modules``, and their registrations."""
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        sys.modules.pop(mod, None)
    for exp_name in [n for n, e in _REGISTRY.items() if e.module == name or e.module.startswith(name + ".")]:
        del _REGISTRY[exp_name]


def _package(name: str, folder: Path | None) -> types.ModuleType:
    """Create and register the package ``name`` whose submodules are found in ``folder`` (or an
    empty parent package), executing the folder's ``__init__.py`` when it has one."""
    init = None if folder is None else folder / "__init__.py"
    if init is not None and init.is_file():
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
    else:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [] if folder is None else [str(folder)]
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if spec.loader is not None:
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return module


def load_study(folder: str | os.PathLike) -> types.ModuleType:
    """Import the study folder ``folder`` as the package ``dpfair_experiments.<folder name>`` and
    return its ``study`` module (which registers the study's experiments).

    The folder is loaded by file path (``sys.path`` is left alone), so its modules import each other
    relatively (``from .config import QUICK``). A folder already loaded from the same path is not
    re-imported; a folder of the same name from another path replaces it (and its registrations).
    """
    folder = Path(folder).resolve()
    if not (folder / f"{STUDY_MODULE}.py").is_file():
        raise ValueError(f"{str(folder)!r} is not a study folder: it has no {STUDY_MODULE}.py.")
    name = _study_package_name(folder)
    if STUDY_PACKAGE not in sys.modules:
        _package(STUDY_PACKAGE, None)
    pkg = sys.modules.get(name)
    if pkg is not None and list(getattr(pkg, "__path__", [])) != [str(folder)]:
        _forget_package(name)
        pkg = None
    if pkg is None:
        _package(name, folder)
    return importlib.import_module(f"{name}.{STUDY_MODULE}")


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")


def discover(studies: Iterable[str | os.PathLike] | None = None) -> Discovery:
    """Load the study folders (default: :func:`study_folders` of :func:`find_experiments_dir`) and
    collect their registrations.

    ``studies`` items are study folders (a ``Path``, or a string naming an existing directory) or
    dotted names of importable modules. A study raising at import time is recorded in ``errors``
    (module name -> ``"ExcType: message"``) and ``tracebacks``, and whatever it registered before
    failing is dropped. Studies already loaded from the same place are not re-imported.
    ``experiments`` lists the experiments registered by the given studies only (sorted as
    :func:`all_experiments`). Without ``studies``, when no experiments directory is found,
    ``errors`` says so under the key ``"experiments"``.
    """
    errors: dict[str, str] = {}
    tbs: dict[str, str] = {}
    modules: list[str] = []  # the module (or package) names whose registrations are returned
    if studies is None:
        root = find_experiments_dir()
        if root is None:
            errors["experiments"] = (f"no experiments directory found from {os.getcwd()!r} (looked for "
                                     f"./experiments and a repository root above); pass --experiments DIR "
                                     f"or set ${ENV_EXPERIMENTS}")
            return Discovery([], errors, tbs)
        studies = study_folders(root)
    for item in studies:
        if isinstance(item, os.PathLike) or os.path.isdir(str(item)):
            folder = Path(item).resolve()
            key = f"{STUDY_PACKAGE}.{folder.name}.{STUDY_MODULE}"
            modules.append(f"{STUDY_PACKAGE}.{folder.name}")
            try:
                load_study(folder)
            except Exception as err:  # noqa: BLE001 - a broken study must not stop the others
                _forget_package(f"{STUDY_PACKAGE}.{folder.name}")
                errors[key] = _one_line(err)
                tbs[key] = traceback.format_exc()
            continue
        mod = str(item)
        modules.append(mod)
        if mod in sys.modules:
            continue
        try:
            importlib.import_module(mod)
        except Exception as err:  # noqa: BLE001 - a broken module must not stop the others
            sys.modules.pop(mod, None)
            for name in [n for n, e in _REGISTRY.items() if e.module == mod]:
                del _REGISTRY[name]  # registrations of a half-imported module are not trusted
            errors[mod] = _one_line(err)
            tbs[mod] = traceback.format_exc()
    found = [e for e in all_experiments() if any(e.module == m or e.module.startswith(m + ".") for m in modules)]
    return Discovery(found, errors, tbs)


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
