"""Persistent XLA compilation cache and compile accounting.

A study in this kit is one jitted program per shape (grid values, seeds and noise multipliers are
traced), so on a rerun the only repeated cost is compilation: seconds on CPU, tens of seconds for
a large scan on GPU. :func:`enable` turns on JAX's persistent compilation cache in a directory with
thresholds lowered so that small programs are cached too; a second process running the same study
shape then loads the executable instead of compiling it.

:func:`track_compiles` counts backend compilations (``jax.monitoring`` event
``/jax/core/compile/backend_compile_duration``), tracing time and persistent-cache hits inside a
``with`` block, so benchmarks can report compile time apart from run time and tests can assert
"one compile per study shape".

CLI wiring: the ``dpfair`` commands call :func:`configure` before any JAX work: ``--compile-cache
DIR`` wins, then ``$DPFAIR_COMPILE_CACHE`` (``off`` disables the cache), then the user-level default
:func:`default_dir` (``$XDG_CACHE_HOME/dpfair_jax/xla``, else ``~/.cache/dpfair_jax/xla``), so a
second quick reproduction loads its programs instead of compiling them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.monitoring

__all__ = ["ENV_VAR", "enable", "disable", "enable_from_env", "is_enabled", "CompileStats",
           "track_compiles", "default_dir", "configure"]

ENV_VAR = "DPFAIR_COMPILE_CACHE"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

_SETTINGS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
_saved: dict | None = None


def _reset_cache_backend() -> None:
    # The persistent cache object is created on the first compile; re-create it so a directory
    # set after JAX has already compiled something takes effect in this process.
    try:
        from jax._src import compilation_cache as cc

        cc.reset_cache()
    except (ImportError, AttributeError):  # pragma: no cover - older/newer JAX layouts
        pass


def enable(path: str | os.PathLike, *, min_compile_time_secs: float = 0.0,
           min_entry_size_bytes: int = 0) -> Path:
    """Cache compiled XLA executables under ``path`` (created if missing); returns the path.

    ``min_compile_time_secs`` / ``min_entry_size_bytes``: only programs that took at least this
    long to compile / are at least this large are written (JAX's defaults, 1 s and 0 bytes, would
    skip most of this kit's small CPU programs; 0 caches everything). Call before the work to
    cache; :func:`disable` restores the previous settings.
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"path must be a directory path, got {path!r}.")
    if not min_compile_time_secs >= 0:
        raise ValueError(f"min_compile_time_secs must be >= 0, got {min_compile_time_secs!r}.")
    if isinstance(min_entry_size_bytes, bool) or not isinstance(min_entry_size_bytes, int) or min_entry_size_bytes < 0:
        raise ValueError(f"min_entry_size_bytes must be an int >= 0, got {min_entry_size_bytes!r}.")
    p = Path(path).expanduser().resolve()
    if p.exists() and not p.is_dir():
        raise ValueError(f"path {str(p)!r} exists and is not a directory; pass a directory.")
    p.mkdir(parents=True, exist_ok=True)
    global _saved
    if _saved is None:
        _saved = {k: getattr(jax.config, k) for k in _SETTINGS}
    jax.config.update("jax_compilation_cache_dir", str(p))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
    _reset_cache_backend()
    return p


def disable() -> None:
    """Restore the cache settings in force before the first :func:`enable` (no-op if not enabled)."""
    global _saved
    if _saved is None:
        return
    for k, val in _saved.items():
        jax.config.update(k, val)
    _saved = None
    _reset_cache_backend()


def is_enabled() -> bool:
    """Whether a persistent compilation cache directory is set."""
    return bool(jax.config.jax_compilation_cache_dir)


def enable_from_env(var: str = ENV_VAR) -> Path | None:
    """:func:`enable` the directory named by environment variable ``var`` if it is set and non-empty."""
    path = os.environ.get(var, "").strip()
    return enable(path) if path else None


_OFF = ("off", "0", "none", "false", "no")


def default_dir() -> Path:
    """The user-level cache folder: ``$XDG_CACHE_HOME/dpfair_jax/xla`` or ``~/.cache/dpfair_jax/xla``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "dpfair_jax" / "xla"


def configure(path: str | os.PathLike | None = None, var: str = ENV_VAR) -> Path | None:
    """Turn the persistent cache on the way the CLI does: ``path`` if given; else ``$var`` (``off``,
    ``0`` or ``none`` leave it off); else :func:`default_dir`. Returns the folder, or None when off.
    A default folder that cannot be created leaves the cache off (with a warning) instead of failing.
    """
    if path is not None and str(path).strip():
        return enable(path)
    env = os.environ.get(var, "").strip()
    if env.lower() in _OFF:
        return None
    if env:
        return enable(env)
    try:
        return enable(default_dir())
    except OSError as err:
        import warnings

        warnings.warn(f"persistent compilation cache off: cannot use {default_dir()} ({err}); "
                      f"set {var}=DIR or {var}=off.", stacklevel=2)
        return None


@dataclasses.dataclass
class CompileStats:
    """What happened inside :func:`track_compiles`.

    ``programs``: ``(function name, seconds)`` of every executable obtained from the backend
    (compiled, or loaded from the persistent cache: ``cache_hits`` of them); ``compiles`` is the
    number actually compiled; ``compile_seconds`` their total (loads included); ``trace_seconds``
    time spent tracing to jaxprs.
    """

    programs: list = dataclasses.field(default_factory=list)
    compile_seconds: float = 0.0
    trace_seconds: float = 0.0
    cache_hits: int = 0

    @property
    def compiles(self) -> int:
        return len(self.programs) - self.cache_hits

    def count(self, name: str) -> int:
        """Executables obtained for functions whose name contains ``name``."""
        return sum(name in fn for fn, _ in self.programs)

    def to_dict(self) -> dict:
        return {"compiles": self.compiles, "compile_seconds": self.compile_seconds,
                "trace_seconds": self.trace_seconds, "cache_hits": self.cache_hits,
                "programs": [fn for fn, _ in self.programs]}


@contextlib.contextmanager
def track_compiles() -> Iterator[CompileStats]:
    """Count XLA backend compilations (and their seconds) in the ``with`` block.

    Every jitted program compiled in the block counts, eager operations included (each eager op is
    a small program, compiled once per shape and dtype); loaded from the persistent cache counts
    as a cache hit, not a compile. Not thread-safe across concurrent blocks.
    """
    stats = CompileStats()

    def on_duration(event: str, seconds: float, **kw: object) -> None:
        if event == BACKEND_COMPILE_EVENT:
            stats.programs.append((str(kw.get("fun_name", "")), float(seconds)))
            stats.compile_seconds += float(seconds)
        elif event == TRACE_EVENT:
            stats.trace_seconds += float(seconds)

    def on_event(event: str, **_: object) -> None:
        if event == CACHE_HIT_EVENT:
            stats.cache_hits += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    try:
        yield stats
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)
        jax.monitoring.unregister_event_listener(on_event)
