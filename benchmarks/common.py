"""Shared helpers for the benchmark scripts: timing, machine description, result rows.

Every benchmark prints a Markdown table and writes JSON rows with the keys
``name, machine, baseline, value, unit, ratio, target, met`` to ``benchmarks/results/<bench>.json``:

* ``value``: the measured quantity of row ``name`` (seconds, or examples/s, ... per ``unit``);
* ``baseline``: the name of the row it is compared with (``None`` for plain measurements);
* ``ratio``: speed-up over the baseline (``baseline time / value`` for times, ``value / baseline``
  for rates), ``target``: the ratio the project asks for, ``met``: ``ratio >= target``.

Timing: ``timed(fn, *args)`` calls ``fn`` once as warm-up (for jitted functions this is where
compilation happens, reported apart as ``first_s``), then ``repeats`` times, blocking on JAX outputs;
``best_s`` and ``median_s`` summarize the repeats, ``best_cpu_s`` the process CPU time (all threads),
which other jobs on a shared machine disturb less than wall time. ``compile_seconds(jitted, *args)``
measures lowering + compilation alone. ``interleaved(calls)`` times several warmed-up calls in
alternation (A, B, A, B, ...), each repetition long enough to be measurable, and
``paired_ratio(...)`` summarizes the per-repetition ratios of two of them (median and spread);
``load_at_start()`` is the one-minute load average to print beside them.

Large temporaries make glibc return memory to the OS after every call, which slows loops of jitted
calls 2-4x on CPU; ``maybe_reexec()`` restarts the script once with ``GLIBC_TUNABLES`` set (see
``notes/performance_cpu.md``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

TUNABLES = "glibc.malloc.mmap_threshold=2147483647:glibc.malloc.trim_threshold=4294967295"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
KEYS = ("name", "machine", "baseline", "value", "unit", "ratio", "target", "met")


def maybe_reexec(argv: Sequence[str] | None = None) -> None:
    """Re-execute this Python script once with ``GLIBC_TUNABLES`` set (no-op if set or ``--no-reexec``)."""
    argv = list(sys.argv if argv is None else argv)
    if "--no-reexec" in argv or os.environ.get("GLIBC_TUNABLES") == TUNABLES or sys.platform != "linux":
        return
    env = dict(os.environ, GLIBC_TUNABLES=TUNABLES)
    os.execve(sys.executable, [sys.executable, *argv], env)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(note: str = "") -> str:
    """One line: CPU model and cores, JAX backend and accelerator name(s), versions, an optional note."""
    import jax

    devs = jax.devices()
    accel = ""
    if jax.default_backend() != "cpu":
        kinds = sorted({d.device_kind for d in devs})
        accel = f", {len(devs)}x {'/'.join(kinds)}"
    text = (f"{_cpu_model()} ({os.cpu_count()} cores, {platform.machine()}){accel}; "
            f"jax {jax.__version__} {jax.default_backend()}; numpy {_np_version()}; "
            f"GLIBC_TUNABLES {'set' if os.environ.get('GLIBC_TUNABLES') == TUNABLES else 'unset'}")
    return f"{text}; {note}" if note else text


def _np_version() -> str:
    import numpy as np

    return np.__version__


def block(tree: Any) -> Any:
    """Wait for every JAX array in ``tree`` (no-op for NumPy outputs)."""
    try:
        import jax

        return jax.block_until_ready(tree)
    except ImportError:  # pragma: no cover
        return tree


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock seconds: the warm-up call (``first_s``, compile included) and the repeats."""

    first_s: float
    times_s: tuple[float, ...]
    cpu_times_s: tuple[float, ...] = ()  # process CPU time of each repeat (all threads)

    @property
    def best_s(self) -> float:
        return min(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def best_cpu_s(self) -> float:
        """CPU time of the repeat with the least CPU time: less sensitive to other jobs than wall time."""
        return min(self.cpu_times_s) if self.cpu_times_s else float("nan")

    @property
    def compile_s(self) -> float:
        """First call minus the best repeat: compilation (and first-touch) time, estimated."""
        return max(self.first_s - self.best_s, 0.0)


def timed(fn: Callable[..., Any], *args: Any, repeats: int = 3, warmup: bool = True, **kwargs: Any) -> Timing:
    """Time ``fn(*args, **kwargs)``: one warm-up call (reported as ``first_s``), then ``repeats``."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    first = float("nan")
    if warmup:
        t0 = time.perf_counter()
        block(fn(*args, **kwargs))
        first = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        block(fn(*args, **kwargs))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return Timing(first, tuple(times), tuple(cpu))


def load_at_start() -> float | None:
    """The one-minute load average (``os.getloadavg()[0]``), ``None`` where it is unavailable."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # pragma: no cover - non-Unix
        return None


@dataclasses.dataclass(frozen=True)
class Interleaved:
    """Seconds per call of each named call, one entry per repetition (all in the same rounds)."""

    seconds: dict[str, tuple[float, ...]]
    inner: dict[str, int]  # calls per repetition (each repetition lasts >= min_rep_s)
    load_at_start: float | None

    def median_s(self, name: str) -> float:
        return statistics.median(self.seconds[name])


def interleaved(calls: dict[str, Callable[[], Any]], *, repeats: int = 5, min_rep_s: float = 0.2,
                max_inner: int = 10_000) -> Interleaved:
    """Time already warmed-up ``calls`` interleaved: rounds of A, B, C, ..., ``repeats`` rounds.

    Each call is first timed once to choose how many times it runs per repetition (``inner``), so
    that a repetition lasts at least ``min_rep_s`` seconds; each round then runs every call for one
    repetition, in the given order, so all calls see the same spells of machine load. JAX outputs
    are blocked on after every call. Returns seconds per call for each repetition.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    load = load_at_start()
    inner = {}
    for name, call in calls.items():
        t0 = time.perf_counter()
        block(call())
        dt = time.perf_counter() - t0
        inner[name] = max(1, min(max_inner, math.ceil(min_rep_s / max(dt, 1e-9))))
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                block(call())
            seconds[name].append((time.perf_counter() - t0) / inner[name])
    return Interleaved({k: tuple(v) for k, v in seconds.items()}, inner, load)


def paired_ratio(timing: Interleaved, fast: str, slow: str) -> dict[str, float]:
    """Speed-up of ``fast`` over ``slow`` (``t_slow / t_fast``) per repetition, summarized.

    The ratio of each round is taken within that round (paired), then summarized over rounds:
    ``ratio`` (median), ``ratio_min``/``ratio_max`` and the quartiles ``ratio_q1``/``ratio_q3``.
    """
    r = sorted(s / f for f, s in zip(timing.seconds[fast], timing.seconds[slow]))
    q = statistics.quantiles(r, n=4, method="inclusive") if len(r) > 1 else [r[0], r[0], r[0]]
    return {"ratio": statistics.median(r), "ratio_min": r[0], "ratio_max": r[-1],
            "ratio_q1": q[0], "ratio_q3": q[2], "repeats": len(r)}


def compile_seconds(jitted: Any, *args: Any, **kwargs: Any) -> float:
    """Seconds to lower and compile a ``jax.jit`` function for these arguments."""
    t0 = time.perf_counter()
    jitted.lower(*args, **kwargs).compile()
    return time.perf_counter() - t0


def row(name: str, value: float, unit: str, *, machine_desc: str, baseline: str | None = None,
        baseline_value: float | None = None, target: float | None = None, higher_is_better: bool = False,
        **extra: Any) -> dict[str, Any]:
    """A result row; with a baseline, ``ratio`` is the speed-up over it and ``met = ratio >= target``."""
    ratio = None
    if baseline_value is not None and value > 0:
        ratio = value / baseline_value if higher_is_better else baseline_value / value
    met = None if (target is None or ratio is None) else bool(ratio >= target)
    out = {"name": name, "machine": machine_desc, "baseline": baseline, "value": float(value), "unit": unit,
           "ratio": None if ratio is None else float(ratio), "target": target, "met": met}
    out.update(extra)
    return out


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as a Markdown table (the ``machine`` column is left out; print it once above)."""
    cols = [k for k in KEYS if k != "machine"]
    extra = sorted({k for r in rows for k in r} - set(KEYS))
    cols += extra

    def fmt(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_results(bench: str, rows: Sequence[dict[str, Any]], out: str | Path | None = None) -> Path:
    """Write ``rows`` as a JSON list to ``out`` (default ``benchmarks/results/<bench>.json``), atomically."""
    for r in rows:
        missing = [k for k in KEYS if k not in r]
        if missing:
            raise ValueError(f"result row {r.get('name')!r} lacks keys {missing}.")
    path = Path(out) if out is not None else RESULTS_DIR / f"{bench}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(list(rows), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def report(bench: str, rows: Sequence[dict[str, Any]], out: str | Path | None = None) -> Path:
    """Print the machine line and the Markdown table, then write the JSON rows."""
    if rows:
        print(f"machine: {rows[0]['machine']}\n")
    print(markdown_table(rows))
    path = write_results(bench, rows, out)
    print(f"\nwrote {path}")
    return path
