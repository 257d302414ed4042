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

The code is in three parts, re-exported here: ``experiment`` (the spec, the registry, paper ids and
config resolution), ``config_checks`` (the checks of config values) and ``discovery`` (study folders).
"""

from __future__ import annotations

from dpfair_jax.runner.registry.config_checks import (  # noqa: F401 - parse_value: importable from here as before
    Constraint,
    default_constraint,
    parse_overrides,
    parse_value,
)
from dpfair_jax.runner.registry.discovery import (  # noqa: F401 - STUDY_MODULE: importable from here as before
    ENV_EXPERIMENTS,
    STUDY_MODULE,
    Discovery,
    discover,
    find_experiments_dir,
    load_study,
    study_folders,
)
from dpfair_jax.runner.registry.experiment import (  # noqa: F401 - SIZES: importable from here as before
    PAPERS,
    SIZES,
    STUDY_PACKAGE,
    Experiment,
    all_experiments,
    check_config,
    get,
    known_papers,
    normalize_paper,
    register,
    resolve_config,
    study_constraints,
    study_folder,
    unregister,
)

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
