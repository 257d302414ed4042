"""Provenance of a run: the code version, package versions and devices it ran with, the CPU time
it took, and how its programs were compiled (:func:`compile_mode`, the compile tracker).

:mod:`dpfair_jax.runner.context` records these in ``config.json`` and ``meta.json`` (and re-exports
the public names).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dpfair_jax.runner.registry import Experiment

__all__ = ["code_version", "study_digest", "source_commit", "package_versions", "device_info", "compile_mode",
           "FAST_COMPILE_FLAG"]


def _tree_digest(h: Any, root: Path, pattern: str) -> None:
    for path in sorted(root.rglob(pattern)):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or any(part.startswith(".") for part in rel.parts):
            continue
        h.update(rel.as_posix().encode("utf-8") + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())


def _sources_digest(root: str) -> str:
    h = hashlib.sha256()
    _tree_digest(h, Path(root), "*.py")
    return h.hexdigest()


def study_digest(folder: str | os.PathLike) -> str:
    """SHA-256 of a study folder's own ``*.py`` sources (relative paths and contents, sorted;
    ``__pycache__`` and dot-folders skipped): the ``study`` entry of :func:`code_version`. The
    library's sources are not part of it, so an unrelated library edit does not change it."""
    return _sources_digest(str(Path(folder).resolve()))


def _git(folder: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def source_commit(folder: str | os.PathLike | None) -> dict[str, Any]:
    """The git commit the code in ``folder`` (a study folder) was checked out at: ``{"commit": the
    HEAD sha, "dirty": whether the folder's ``*.py`` files (what :func:`study_digest` hashes)
    differ from it}``; both ``None`` outside a git work tree or without ``git`` (never raises:
    provenance must not fail a run)."""
    if folder is None or not Path(folder).is_dir():
        return {"commit": None, "dirty": None}
    folder = Path(folder).resolve()
    commit = _git(folder, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", "*.py")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


_PACKAGE_DIGEST: dict[str, str] = {}


def code_version(exp: Experiment | None = None) -> dict[str, str | None]:
    """SHA-256 of the ``dpfair_jax`` package's ``*.py`` sources and of ``exp``'s study folder's
    (for an experiment not loaded from a folder: its module file when it has one, else ``None``).
    The package digest is taken once per process (the sources this process imported); the study's
    when a run's context is made."""
    import dpfair_jax

    root = str(Path(dpfair_jax.__file__).resolve().parent)
    if root not in _PACKAGE_DIGEST:
        _PACKAGE_DIGEST[root] = _sources_digest(root)
    package = _PACKAGE_DIGEST[root]
    study = None
    if exp is not None:
        from dpfair_jax.runner.registry import study_folder

        folder = study_folder(exp)
        if folder is not None:
            study = study_digest(folder)
        else:
            module = sys.modules.get(exp.module or "")
            file = getattr(module, "__file__", None)
            if file and Path(file).is_file():
                study = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    return {"package": package, "study": study}


def _utcnow() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages results depend on (None when absent)."""
    out: dict[str, str | None] = {}
    for dist in ("dpfair_jax", "jax", "jaxlib", "numpy", "dp-accounting", "flax", "optax", "scipy", "pandas"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def device_info() -> dict[str, Any]:
    """JAX backend, device kind and count (imports JAX)."""
    try:
        import jax

        devices = jax.devices()
        return {
            "backend": jax.default_backend(),
            "device_kind": devices[0].device_kind if devices else None,
            "device_count": len(devices),
            "process_count": jax.process_count(),
        }
    except Exception as err:  # noqa: BLE001 - meta must not fail a run
        return {"backend": None, "device_kind": None, "device_count": 0, "error": repr(err)}


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    t = os.times()
    return t.user + t.system


#: JAX's flag that turns off XLA's expensive backend (LLVM) optimizations.
FAST_COMPILE_FLAG = "jax_disable_most_optimizations"


@contextlib.contextmanager
def compile_mode(fast: bool) -> Any:
    """Compile with XLA's expensive backend optimizations off (``fast``) or on inside the block.

    Quick runs are smoke checks whose time is mostly compilation (programs that run for
    milliseconds to seconds), so :func:`run_experiment` runs them with ``fast``: without the LLVM
    optimization passes a program compiles about a third faster and runs slower (up to ~3x for
    arithmetic-heavy samplers: a study wraps such parts in :meth:`RunContext.optimized_build`).
    The HLO passes (fusion, simplification) still run, so results equal the optimized build's up to
    float rounding. Full-size runs keep the optimized build. The setting is part of JAX's compile
    options, so the persistent cache keeps the two builds apart; the previous value is restored.
    """
    import jax

    old = jax.config.read(FAST_COMPILE_FLAG)
    jax.config.update(FAST_COMPILE_FLAG, bool(fast))
    try:
        yield
    finally:
        jax.config.update(FAST_COMPILE_FLAG, old)


def _compile_tracker() -> contextlib.AbstractContextManager:
    """:func:`dpfair_jax.compile_cache.track_compiles` (XLA compiles and persistent-cache hits of the
    run), or a null context yielding None where JAX cannot be imported."""
    try:
        from dpfair_jax import compile_cache
    except ImportError:  # pragma: no cover - JAX is a dependency
        return contextlib.nullcontext(None)
    return compile_cache.track_compiles()
