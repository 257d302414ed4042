"""The resumable chunked map behind :meth:`RunContext.map_chunks
<dpfair_jax.runner.context.RunContext.map_chunks>`, and its checkpoint protocol.

1. :func:`_chunk_ids`: every chunk is a JSON-serializable dict; its identity hashes it with the
   stage ``desc``, the run's config and the code version (``RunContext.chunk_id``).
2. :func:`_read_back` (process 0): finished chunks are read from the run's ``chunks/`` cache after
   their SHA-256 check; corrupt or unreadable ones are reported, deleted and recomputed.
3. :func:`_compute_missing`: the missing chunks are computed in rounds (one chunk per process per
   round, :func:`_compute_round`), each written at once, atomically, with its sidecar; progress is
   a tqdm bar on a terminal, else one log line per round with the time left.
4. The frames are concatenated in the order of the chunks, so a resumed run returns the table of an
   uninterrupted one.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dpfair_jax import launch
from dpfair_jax.runner import store
from dpfair_jax.runner.context.provenance import _utcnow

__all__ = ["map_chunks"]


def map_chunks(ctx: Any, chunks: Sequence[Mapping[str, Any]], compute: Callable[[dict], Any],
               desc: str = "chunks") -> Any:
    """Resumable ``pandas.concat([compute(c) for c in chunks])`` through the run context ``ctx``
    (see :meth:`RunContext.map_chunks <dpfair_jax.runner.context.RunContext.map_chunks>`)."""
    import pandas as pd

    ids = _chunk_ids(ctx, chunks, compute, desc)
    ctx._used_chunks.update(ids)
    cache = store.ChunkCache(ctx.workdir / "chunks")
    frames: list[Any] = [None] * len(chunks)
    todo: list[int] = []
    if ctx.writes:  # process 0 reads the cache and hands the frames to the others
        todo = _read_back(ctx, cache, ids, frames, desc)
    procs = launch.process_count()
    if procs > 1:
        frames, todo, ctx.chunk_stats = launch.broadcast_object((frames, todo, ctx.chunk_stats))
    _compute_missing(ctx, cache, ids, chunks, compute, desc, frames, todo, procs)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def _chunk_ids(ctx: Any, chunks: Any, compute: Any, desc: str) -> list[str]:
    """The identity of every chunk, after checking ``chunks`` (distinct JSON dicts) and ``compute``."""
    if isinstance(chunks, Mapping) or not isinstance(chunks, Sequence):
        raise ValueError("chunks must be a list of dicts (one per chunk).")
    if not callable(compute):
        raise ValueError("compute must be callable as compute(chunk: dict) -> pandas.DataFrame.")
    ids: list[str] = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, Mapping):
            raise ValueError(f"chunks[{i}] must be a dict, got {type(chunk).__name__}.")
        try:
            ids.append(ctx.chunk_id(chunk, desc))
        except (TypeError, ValueError) as err:
            raise ValueError(f"chunks[{i}] must be JSON-serializable: {err}") from None
    if len(set(ids)) != len(ids):
        raise ValueError("chunks contains duplicate entries; make each chunk dict distinct.")
    return ids


def _read_back(ctx: Any, cache: store.ChunkCache, ids: list[str], frames: list[Any], desc: str) -> list[int]:
    """Fill ``frames`` with the chunks finished by an earlier run (checksum checked; corrupt ones
    are reported and deleted) and return the indices still to compute."""
    todo: list[int] = []
    for i, cid in enumerate(ids):
        status = cache.status(cid)
        if status.state == "ok":
            try:
                frames[i] = cache.load(cid)
                ctx.chunk_stats["reused"] += 1
                continue
            except Exception as err:  # noqa: BLE001 - unreadable: recompute
                status = store.ChunkStatus("corrupt", f"unreadable ({type(err).__name__}: {err})")
        if status.state == "corrupt":
            ctx.chunk_stats["corrupt"] += 1
            ctx.log(f"{desc}: chunk {i} ({cid[:12]}) is corrupt: {status.reason}; recomputing it.")
            cache.discard(cid)
        todo.append(i)
    reused = len(ids) - len(todo)
    if reused:
        ctx.log(f"{desc}: reusing {reused} of {len(ids)} finished chunks of an earlier run with the "
                "same config and code (rerun with --fresh to recompute them).")
    elif not ctx._told_stale:
        stale = {p.stem for p in cache.directory.glob("*.json")} - ctx._used_chunks
        if stale:
            ctx.log(f"{desc}: {len(stale)} saved chunk(s) belong to another config or code version "
                    "(the config, the study or the dpfair_jax sources changed); computing afresh.")
    ctx._told_stale = True
    return todo


def _compute_missing(ctx: Any, cache: store.ChunkCache, ids: list[str], chunks: Sequence[Mapping[str, Any]],
                     compute: Callable[[dict], Any], desc: str, frames: list[Any], todo: list[int],
                     procs: int) -> None:
    """Compute the chunks ``todo`` in rounds of one per process, save each at once (process 0) and
    put it in ``frames``; show progress; on Ctrl-C say how many chunks are saved and re-raise."""
    from tqdm.auto import tqdm

    disable = None if ctx.progress is None else not ctx.progress
    bar = tqdm(total=len(chunks), initial=len(chunks) - len(todo), desc=f"{ctx.name}: {desc}",
               unit="chunk", disable=True if not ctx.writes else disable, leave=False)
    ctx._bar = None if bar.disable else bar
    t_start, done = time.perf_counter(), 0
    try:
        with _through_bar(ctx._bar):
            # several processes: round r computes todo[r*P + p] on process p, then all exchange
            for start in range(0, len(todo), procs):
                batch = todo[start:start + procs]
                results = _compute_round(batch, chunks, compute, procs)
                for i, (frame, seconds) in zip(batch, results):
                    if ctx.writes:
                        cache.save(ids[i], frame, {"index": i, "stage": desc, "chunk": chunks[i],
                                                   "rows": len(frame), "seconds": seconds,
                                                   "written": _utcnow()})
                    frames[i] = frame
                    ctx.chunk_stats["computed"] += 1
                    bar.update(1)
                done += len(batch)
                if ctx._bar is None:
                    elapsed = time.perf_counter() - t_start
                    left = elapsed / done * (len(todo) - done)
                    finished = len(chunks) - len(todo) + done
                    ctx._print(f"{desc}: chunk {finished}/{len(chunks)} done ({_duration(elapsed)} so far); "
                               f"about {_duration(left)} left")
    except KeyboardInterrupt:
        done = sum(f is not None for f in frames)
        ctx._bar = None
        ctx.log(f"{desc}: interrupted; {done}/{len(chunks)} chunks saved, rerun to resume.")
        raise
    finally:
        ctx._bar = None
        bar.close()


def _compute_round(batch: list[int], chunks: Sequence[Mapping[str, Any]], compute: Callable[[dict], Any],
                   procs: int) -> list[tuple[Any, float]]:
    """``(frame, seconds)`` of each chunk in ``batch``: chunk ``batch[p]`` is computed by process
    ``p`` and every process receives all of them (an error on one process is raised on all)."""
    import pandas as pd

    def one(i: int) -> tuple[Any, float]:
        t0 = time.perf_counter()
        frame = compute(dict(chunks[i]))
        if isinstance(frame, Mapping):
            frame = pd.DataFrame(frame)
        if not isinstance(frame, pd.DataFrame):
            raise ValueError(
                f"compute returned {type(frame).__name__} for chunks[{i}]; return a pandas.DataFrame."
            )
        return frame, time.perf_counter() - t0

    if procs == 1:
        return [one(i) for i in batch]
    rank = launch.process_index()
    mine: Any = None
    if rank < len(batch):
        try:
            mine = ("ok", one(batch[rank]))
        except Exception as err:  # noqa: BLE001 - sent to every process, raised below
            mine = ("error", f"{type(err).__name__}: {err}", err)
    got = launch.allgather_object(None if mine is None else mine[:2])
    for p, res in enumerate(got[: len(batch)]):
        if res[0] == "error":
            if p == rank:
                raise mine[2]
            raise RuntimeError(f"chunks[{batch[p]}] failed on process {p}: {res[1]}")
    return [res[1] for res in got[: len(batch)]]


def _duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


@contextlib.contextmanager
def _through_bar(bar: Any):
    """While ``bar`` (a visible tqdm bar, or None) runs, write warnings and log records above it
    instead of over it."""
    if bar is None:
        yield
        return
    import logging
    import warnings

    from tqdm.contrib.logging import logging_redirect_tqdm

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        bar.write(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"),
                  file=sys.stderr)

    class _AboveBar(logging.Handler):  # what logging's last-resort handler would print, above the bar
        def emit(self, record: logging.LogRecord) -> None:
            bar.write(self.format(record), file=sys.stderr)

    saved = warnings.showwarning
    warnings.showwarning = show
    spare = None if logging.root.handlers else _AboveBar(logging.WARNING)
    try:
        if spare is not None:
            logging.root.addHandler(spare)
        with logging_redirect_tqdm(loggers=[logging.root], tqdm_class=type(bar)):
            yield
    finally:
        if spare is not None:
            logging.root.removeHandler(spare)
        warnings.showwarning = saved
