"""``RunContext``: what an experiment's ``run(config, ctx)`` writes through, and ``run_experiment``.

The context owns one run directory (see :mod:`dpfair_jax.runner.store`) and offers:

- :meth:`RunContext.map_chunks` — a resumable sweep: each finished chunk is written at once
  (atomically, with a SHA-256 sidecar); a restart after Ctrl-C or SIGKILL computes only the
  missing chunks and returns the same table (chunks concatenated in the order given);
- :meth:`RunContext.save_table`, :meth:`RunContext.save_figure`;
- :meth:`RunContext.add_claim`, :meth:`RunContext.add_check` (formula checks) and
  :meth:`RunContext.skip_claim` (``claims.json``), :meth:`RunContext.record_privacy`
  (``privacy.json``), :meth:`RunContext.record_compile_time` (``meta.json``).

Every ``claims.json`` row has a ``status`` (:data:`CLAIM_STATUSES`): "holds", "fails",
"untestable", "reconstruction" or "skipped", and for every status but "holds" a ``reason``; a
claim that fails without a reason is an error in the study (``ValueError`` naming the claim).
``passed`` is true only for "holds".

Chunk identities include the code version (:func:`code_version`: SHA-256 of the dpfair_jax package
sources and of the study folder's sources), so a run after an edit of the library or the study
recomputes its chunks instead of reusing results of other code. Without a visible progress bar
(stderr not a terminal, or ``progress=False``) every finished chunk logs one line with an estimate
of the time left; with a bar, log lines are written above it.

Several processes (``jax.distributed``, e.g. ``dpfair run NAME --processes N``): every process runs
the study; ``map_chunks`` deals the missing chunks round-robin to the processes (each chunk is
computed whole on one process's local devices, so its table is the one-process table bitwise) and
exchanges the finished frames after every round, and only process 0 reads and writes the run
directory (chunks, tables, figures, claims, privacy, meta). Chunk identities do not depend on the
process count, so a run interrupted with N processes resumes with any other count. A ``compute``
must not use collectives over all processes (e.g. a ``trial_mesh()`` of every process's devices):
the other processes are computing other chunks.

Parts, re-exported here: ``records`` (claims and privacy records), ``provenance`` (code version,
package versions, devices, compile mode), ``lock`` (the run directory's lock) and ``chunks`` (the
resumable chunked map behind :meth:`RunContext.map_chunks`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpfair_jax import launch
from dpfair_jax.runner import store
from dpfair_jax.runner.context.chunks import _duration, _through_bar, map_chunks  # noqa: F401 - re-exported
from dpfair_jax.runner.context.lock import RunLock, _clear_outputs
from dpfair_jax.runner.context.provenance import (  # noqa: F401 - re-exported: importable from here as before
    FAST_COMPILE_FLAG,
    _compile_tracker,
    _cpu_seconds,
    _utcnow,
    code_version,
    compile_mode,
    device_info,
    package_versions,
    source_commit,
    study_digest,
)
from dpfair_jax.runner.context.records import (  # noqa: F401 - re-exported: importable from here as before
    CLAIM_KINDS,
    CLAIM_STATUSES,
    FORMULA_FAILURE,
    RELATIONS,
    RunRecords,
    _check_name,
    comparison,
)
from dpfair_jax.runner.registry import Experiment, resolve_config, study_folder

__all__ = ["RunContext", "RunResult", "run_experiment", "package_versions", "device_info", "code_version",
           "study_digest", "source_commit", "comparison", "CLAIM_KINDS", "CLAIM_STATUSES"]


class RunContext(RunRecords):
    """Per-run services for an experiment (see module docstring).

    Attributes:
      experiment: the :class:`Experiment` being run (``name``, ``paper``).
      config: the resolved config dict.
      size: "quick" or "full".
      workdir: the run directory ``<root>/runs/<name>/`` (also ``ctx.run_dir``).
      seed: ``config["seed"]`` when present, else 0.
      progress: show tqdm bars (None: only on a terminal).
    """

    def __init__(
        self,
        experiment: Experiment,
        config: Mapping[str, Any],
        workdir: str | os.PathLike,
        *,
        size: str = "quick",
        progress: bool | None = None,
    ):
        self.experiment = experiment
        self.config = dict(config)
        self.size = size
        self.workdir = Path(workdir)
        self.writes = launch.is_primary()  # several processes: only process 0 writes and prints
        if self.writes:
            self.workdir.mkdir(parents=True, exist_ok=True)
        seed = self.config.get("seed", 0)
        self.seed = int(seed) if isinstance(seed, (int, float)) and not isinstance(seed, bool) else 0
        self.progress = progress
        self.claims: list[dict[str, Any]] = []
        self.privacy: dict[str, Any] = {}
        self.tables: list[str] = []
        self.figures: list[str] = []
        self.compile_seconds = 0.0
        self.chunk_stats = {"computed": 0, "reused": 0, "corrupt": 0}
        self.messages: list[str] = []
        self.code = code_version(experiment)
        self._config_hash = store.stable_hash({"experiment": experiment.name, "config": self.config,
                                               "code": self.code})
        self._used_chunks: set[str] = set()
        self._bar: Any = None  # the visible progress bar, if any (log lines are written above it)
        self._told_stale = False

    # ---------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def paper(self) -> str:
        return self.experiment.paper

    @property
    def quick(self) -> bool:
        return self.size == "quick"

    @property
    def run_dir(self) -> Path:
        return self.workdir

    def log(self, message: str) -> None:
        """Print ``message`` to stderr (above a visible progress bar) and keep it for ``meta.json``."""
        self.messages.append(message)
        self._print(message)

    def _print(self, message: str) -> None:
        if not self.writes:
            return
        line = f"[{self.name}] {message}"
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    # ---------------------------------------------------------------------------------------
    def chunk_id(self, chunk: Mapping[str, Any], desc: str = "") -> str:
        """Stable identity of ``chunk``: SHA-256 of its canonical JSON, ``desc``, the run's config and
        the code version (:func:`code_version`)."""
        return store.stable_hash({"config": self._config_hash, "stage": desc, "chunk": dict(chunk)})[:32]

    def map_chunks(
        self,
        chunks: Sequence[Mapping[str, Any]],
        compute: Callable[[dict], Any],
        desc: str = "chunks",
    ) -> Any:
        """Resumable ``pandas.concat([compute(c) for c in chunks])``.

        Each chunk is a JSON-serializable dict (e.g. a slice of a grid and a seed block); its
        identity is the SHA-256 of its canonical JSON together with the experiment's config and
        ``desc`` (which therefore also names the stage: two sweeps over equal chunk dicts in one
        run need different ``desc``). Finished chunks are written at once, atomically, with a
        SHA-256 sidecar; on a restart they are read back (after checking the checksum) and only
        missing chunks are computed (the run says how many it reused and that ``--fresh`` starts
        over). A corrupt or partial chunk file is reported, deleted and recomputed. The result
        concatenates the chunk frames in the order of ``chunks`` with a fresh ``RangeIndex``, so an
        interrupted-then-resumed sweep returns the same table as an uninterrupted one. A tqdm bar
        shows progress on a terminal; otherwise each finished chunk logs one line with the time left.
        The protocol is :mod:`dpfair_jax.runner.context.chunks`.
        """
        return map_chunks(self, chunks, compute, desc)

    # ---------------------------------------------------------------------------------------
    def save_table(self, df: Any, name: str = "results") -> Path:
        """Write ``df`` as ``<name>.csv`` (exact floats) and a lossless copy; return the CSV path."""
        _check_name("table", name)
        if self.writes:
            store.write_table(df, self.workdir, name)
        if name not in self.tables:
            self.tables.append(name)
        return self.workdir / f"{name}.csv"

    def save_figure(self, fig: Any, name: str, *, dpi: int = 150) -> Path:
        """Save a matplotlib figure as ``figures/<name>.png`` (atomically) and close it, in the
        kit's style: one font family, constrained layout (:func:`dpfair_jax.runner.plots.finish`)."""
        _check_name("figure", name)
        import io

        import matplotlib

        from dpfair_jax.runner import plots

        buf = io.BytesIO()
        with matplotlib.rc_context(plots.STYLE):
            had_layout = fig.get_layout_engine() is not None
            plots.finish(fig)
            try:
                fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
            except Exception:  # noqa: BLE001 - e.g. colorbars placed by hand: keep the figure's own layout
                if had_layout:
                    raise
                fig.set_layout_engine("none")
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        path = self.workdir / "figures" / f"{name}.png"
        if self.writes:
            store.atomic_write_bytes(path, buf.getvalue())
        if "matplotlib.pyplot" in sys.modules:  # release figures made through pyplot
            sys.modules["matplotlib.pyplot"].close(fig)
        if name not in self.figures:
            self.figures.append(name)
        return path

    def prune_chunks(self) -> int:
        """Delete saved chunks this run did not use (stale configs); return how many. Called
        by :func:`run_experiment` after a complete run only."""
        directory = self.workdir / "chunks"
        removed = 0
        for path in directory.glob("*") if directory.exists() else ():
            if path.stem not in self._used_chunks or path.name.startswith("."):
                path.unlink()
                removed += 1
        return removed

    def optimized_build(self) -> contextlib.AbstractContextManager:
        """Compile the block's programs with XLA's full optimizations even in a quick run (which
        compiles fast, :func:`compile_mode`): for parts whose run time, not compile time, dominates."""
        return compile_mode(False) if self.size == "quick" else contextlib.nullcontext()

    def record_compile_time(self, seconds: float) -> None:
        """Add ``seconds`` of compilation to ``meta.json``'s ``compile_seconds``."""
        self.compile_seconds += float(seconds)


# ---------------------------------------------------------------------------------------------


class RunResult:
    """Outcome of :func:`run_experiment`."""

    def __init__(self, name: str, run_dir: Path, status: str, claims: list[dict], meta: dict,
                 error: str | None = None):
        self.name, self.run_dir, self.status = name, run_dir, status
        self.claims, self.meta, self.error = claims, meta, error

    @property
    def ok(self) -> bool:
        return self.status == "complete"

    def __repr__(self) -> str:
        return f"RunResult(name={self.name!r}, status={self.status!r}, claims={len(self.claims)})"


def run_experiment(
    exp: Experiment,
    *,
    size: str = "quick",
    overrides: Mapping[str, Any] | None = None,
    root: str | os.PathLike | None = None,
    fresh: bool = False,
    progress: bool | None = None,
    raise_errors: bool = True,
) -> RunResult:
    """Run ``exp`` at ``size`` with ``overrides`` into ``<root>/runs/<exp.name>/``.

    Finished sweep chunks of an earlier, interrupted run with the same config are reused unless
    ``fresh``. Other outputs of the earlier run are replaced. ``meta.json`` records the status
    ("complete", "failed" or "interrupted"); on failure the traceback goes to ``error.txt`` and the
    exception is re-raised when ``raise_errors`` (KeyboardInterrupt always is).
    """
    config = resolve_config(exp, size, overrides)
    directory = store.run_dir(store.results_root(root), exp.name)
    if not launch.is_primary():  # several processes: the others compute and write nothing
        return _run_locked(exp, size, config, overrides, directory, progress, raise_errors)
    directory.mkdir(parents=True, exist_ok=True)
    with RunLock(directory):
        if fresh:
            for entry in directory.iterdir():
                if entry.name != ".lock":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        return _run_locked(exp, size, config, overrides, directory, progress, raise_errors)


def _run_locked(exp: Experiment, size: str, config: dict, overrides: Mapping[str, Any] | None,
                directory: Path, progress: bool | None, raise_errors: bool) -> RunResult:
    ctx = RunContext(exp, config, directory, size=size, progress=progress)
    if ctx.writes:
        _clear_outputs(directory)
        folder = study_folder(exp)
        store.atomic_write_json(directory / "config.json", {
            "experiment": exp.name, "paper": exp.paper, "description": exp.description,
            "size": size, "overrides": dict(overrides or {}), "config": config,
            "study": None if folder is None else str(Path(folder).resolve()), "code_version": ctx.code,
        })
        store.atomic_write_json(directory / "claims.json", [])
        store.atomic_write_json(directory / "privacy.json", {})
    start = _utcnow()
    source = source_commit(study_folder(exp))  # the commit the run starts from (the tree may move during it)
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    status, error, exc = "complete", None, None
    compiles = _compile_tracker()
    try:
        with compiles as tracked, (compile_mode(True) if size == "quick" else contextlib.nullcontext()):
            returned = exp.run(config, ctx)
        try:
            import pandas as pd

            if isinstance(returned, pd.DataFrame) and "results" not in ctx.tables:
                ctx.save_table(returned, "results")
        except ImportError:  # pragma: no cover - pandas is a dependency
            pass
    except KeyboardInterrupt as err:
        status, error, exc = "interrupted", "KeyboardInterrupt", err
    except Exception as err:  # noqa: BLE001
        status, error, exc = "failed", f"{type(err).__name__}: {err}", err
        if ctx.writes:
            store.atomic_write_text(directory / "error.txt", traceback.format_exc())
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    if status == "complete" and ctx.writes:
        ctx.prune_chunks()
    meta = {
        "experiment": exp.name,
        "paper": exp.paper,
        "size": size,
        "seed": ctx.seed,
        "status": status,
        "error": error,
        "start_time": start,
        "end_time": _utcnow(),
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "compile_seconds": ctx.compile_seconds or (tracked.compile_seconds if tracked else None) or None,
        "compiles": tracked.compiles if tracked else None,
        "compile_cache_hits": tracked.cache_hits if tracked else None,
        "chunks": ctx.chunk_stats,
        "code_version": ctx.code,
        "source": source,
        "tables": ctx.tables,
        "figures": ctx.figures,
        "versions": package_versions(),
        "devices": device_info(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "messages": ctx.messages,
    }
    if ctx.writes:
        store.atomic_write_json(directory / "meta.json", meta)
        store.write_manifest(directory)
    result = RunResult(exp.name, directory, status, ctx.claims, meta, error)
    if exc is not None and (raise_errors or isinstance(exc, KeyboardInterrupt)):
        raise exc
    return result
