"""Discovery of study folders: the experiments directory (:func:`find_experiments_dir`), its study
folders, loading a folder as the package ``dpfair_experiments.<folder>`` (:func:`load_study`), and
:func:`discover`, which loads them and collects their registrations.

Imported through :mod:`dpfair_jax.runner.registry`, which re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import traceback
import types
from collections.abc import Iterable
from pathlib import Path

from dpfair_jax.runner.registry.experiment import STUDY_PACKAGE, _REGISTRY, Experiment, all_experiments

__all__ = ["ENV_EXPERIMENTS", "STUDY_MODULE", "Discovery", "discover", "find_experiments_dir", "load_study",
           "study_folders"]


@dataclasses.dataclass
class Discovery:
    """Result of :func:`discover`: the experiments of the studies found, and the studies that failed
    to import."""

    experiments: list[Experiment]
    errors: dict[str, str]  # module name -> one-line error
    tracebacks: dict[str, str]  # module name -> full traceback


#: Environment variable naming the experiments directory (``--experiments DIR`` takes precedence).
ENV_EXPERIMENTS = "DPFAIR_EXPERIMENTS"

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
