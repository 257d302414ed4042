"""``dpfair``: list, run and reproduce experiments, write the report, run benchmarks and audits.

Usage::

    dpfair list [--experiments DIR]
    dpfair run NAME [--quick] [--set key=value ...] [--out DIR] [--fresh] [--experiments DIR] [--processes N]
    dpfair reproduce [--quick] [--only PAPER] [--out DIR] [--fresh] [--experiments DIR] [--processes N]
    dpfair report [--out DIR] [--experiments DIR]
    dpfair bench [--quick] [--dir benchmarks]
    dpfair audit [--quick] [--out DIR]

Studies are found in ``--experiments DIR``, else ``$DPFAIR_EXPERIMENTS``, else ``./experiments``
(or the ``experiments/`` folder of the repository root above the current directory): one folder per
study (see :mod:`dpfair_jax.runner.registry`). Results go to ``--out``, else ``$DPFAIR_RESULTS``,
else ``./results``. An interrupted ``run`` or
``reproduce`` resumes where it stopped when run again (finished sweep chunks are kept); ``--fresh``
discards them. ``--processes N`` runs ``run``/``reproduce`` as N local CPU processes
(``python -m dpfair_jax.launch``, see ``docs/multihost.md``): every process computes, process 0
writes and prints. Bad input exits with status 2 and a one-line message (an unknown experiment or
key, a ``--set`` value of the wrong type or out of range, a given path that does not exist), before
any compute; a failed experiment, benchmark or audit with status 1; Ctrl-C with 130. Claims that do
not hold are results, not errors (status 0). ``run``, ``reproduce`` and ``audit`` keep compiled
programs in the persistent compilation cache (``--compile-cache DIR``, else
``$DPFAIR_COMPILE_CACHE``, ``off`` to disable, else ``~/.cache/dpfair_jax/xla``; see
:func:`dpfair_jax.compile_cache.configure`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "collect_bench_results", "write_bench_table"]

PROG = "dpfair"


class CliError(Exception):
    """A one-line error for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise CliError(f"{message} (see '{self.prog} --help')", 2)


def _add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, metavar="DIR",
                   help="results root (default: $DPFAIR_RESULTS or ./results)")


def _add_processes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="run as N local CPU processes (python -m dpfair_jax.launch; default 1)")
    p.add_argument("--devices-per-process", type=int, default=1, metavar="D",
                   help="host CPU devices per process with --processes (default 1)")


def _add_experiments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiments", default=None, metavar="DIR",
                   help="folder of study folders (default: $DPFAIR_EXPERIMENTS, ./experiments or the "
                        "repository root's experiments/)")


def build_parser() -> argparse.ArgumentParser:
    """The ``dpfair`` argument parser."""
    parser = _Parser(prog=PROG, description="dpfair_jax: differentially private and fair ML experiments.")
    parser.add_argument("--compile-cache", metavar="DIR", default=None,
                        help="persistent XLA compilation cache directory (default: $DPFAIR_COMPILE_CACHE, "
                             "'off' to disable, else ~/.cache/dpfair_jax/xla)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("list", help="list experiments with their paper and description")
    _add_experiments(p)

    p = sub.add_parser("run", help="run one experiment")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--quick", action="store_true", help="use the quick config (default: full)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config entry; VALUE is parsed as JSON, else taken as a string")
    p.add_argument("--fresh", action="store_true", help="discard saved chunks of an earlier run")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_out(p)
    _add_experiments(p)
    _add_processes(p)

    p = sub.add_parser("reproduce", help="run every experiment, then write the report")
    p.add_argument("--quick", action="store_true", help="use the quick configs (default: full)")
    p.add_argument("--only", default=None, metavar="PAPER", help="only this paper: 000..004 or kit")
    p.add_argument("--fresh", action="store_true", help="discard saved chunks of earlier runs")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_out(p)
    _add_experiments(p)
    _add_processes(p)

    p = sub.add_parser("report", help="write report/REPORT.md under the results root")
    _add_out(p)
    p.add_argument("--experiments", default=None, metavar="DIR",
                   help="also load the studies of DIR and list those that fail to import in the report")

    p = sub.add_parser("bench", help="run benchmarks/*.py and tabulate benchmarks/results/*.json")
    p.add_argument("--quick", action="store_true", help="pass --quick to every benchmark script")
    p.add_argument("--dir", default="benchmarks", metavar="DIR", help="benchmarks directory (default: ./benchmarks)")

    p = sub.add_parser("audit", help="run the empirical privacy audits (dpfair_jax.audit.run_audit)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sums-only", action="store_true",
                   help="only the clipped-sum Gaussian/Laplace audits (skip DP-SGD, DP-FERMI, "
                        "group-weighted, COINPRESS and exponential-sampling audits)")
    p.add_argument("--family", action="append", default=None, metavar="NAME",
                   help="run only this mechanism family (repeatable; names as in the audit table, "
                        "e.g. fermi, sgda_shuffle); the clipped-sum audits are skipped")
    _add_out(p)
    return parser


# ---------------------------------------------------------------------------------------------


def _study_folders(args: argparse.Namespace) -> list[Path]:
    """The study folders of ``--experiments DIR`` (else the default experiments directory)."""
    from dpfair_jax.runner import registry

    root = registry.find_experiments_dir(getattr(args, "experiments", None))
    if root is None:
        raise CliError("no experiments folder found: run from the repository root (it holds experiments/), "
                       f"pass --experiments DIR or set ${registry.ENV_EXPERIMENTS}", 2)
    try:
        return registry.study_folders(root)
    except ValueError as err:
        raise CliError(str(err), 2) from None


def _discover(args: argparse.Namespace):
    from dpfair_jax.runner import registry

    found = registry.discover(_study_folders(args))
    for mod, err in found.errors.items():
        print(f"{PROG}: warning: could not import {mod}: {err}", file=sys.stderr)
    return found


def _progress(args: argparse.Namespace) -> bool | None:
    return False if getattr(args, "no_progress", False) else None


def _summary(result: Any) -> str:
    """One line per run: claims by status (skipped apart), formula checks apart, chunks reused."""
    from dpfair_jax.runner.report import row_kind, row_status

    claims = [c for c in result.claims if row_kind(c) == "claim"]
    checks = [c for c in result.claims if row_kind(c) == "formula"]
    status = [row_status(c) for c in claims]
    done = len(claims) - status.count("skipped")
    text = f"{status.count('holds')}/{done} claims hold"
    for s in ("untestable", "reconstruction", "skipped"):
        text += f", {status.count(s)} {s}" if status.count(s) else ""
    if checks:
        text += f"; {sum(row_status(c) == 'holds' for c in checks)}/{len(checks)} formula checks hold"
    reused = (result.meta.get("chunks") or {}).get("reused", 0)
    if reused:
        text += f"; {reused} chunks reused from an earlier run (--fresh recomputes them)"
    wall = result.meta.get("wall_seconds", 0.0)
    return f"{result.name}: {result.status} in {wall:.1f} s; {text}; {result.run_dir}"


def cmd_list(args: argparse.Namespace) -> int:
    found = _discover(args)
    exps = found.experiments
    if not exps:
        print("no experiments registered")
        return 0
    width = max(len(e.name) for e in exps)
    for e in exps:
        print(f"{e.name:<{width}}  {e.paper:<4}  {e.description}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from dpfair_jax.runner import context, registry

    try:
        overrides = registry.parse_overrides(args.overrides)
    except ValueError as err:
        raise CliError(str(err)) from None
    found = _discover(args)
    try:
        exp = registry.get(args.name)
    except ValueError as err:
        hint = f" ({len(found.errors)} module(s) failed to import)" if found.errors else ""
        raise CliError(f"{err}{hint}") from None
    size = "quick" if args.quick else "full"
    try:
        registry.resolve_config(exp, size, overrides)
    except ValueError as err:
        raise CliError(str(err)) from None
    try:
        result = context.run_experiment(exp, size=size, overrides=overrides, root=args.out, fresh=args.fresh,
                                        progress=_progress(args), raise_errors=False)
    except ValueError as err:  # e.g. the run directory is locked by another run
        raise CliError(str(err), 1) from None
    if not result.ok:
        raise CliError(f"experiment {exp.name} failed: {result.error} "
                       f"(traceback in {result.run_dir / 'error.txt'})", 1)
    from dpfair_jax import launch
    from dpfair_jax.runner.report import format_measured, row_kind, row_status

    if not launch.is_primary():  # several processes: process 0 prints
        return 0

    for c in result.claims:
        kind = " (formula check)" if row_kind(c) == "formula" else ""
        why = f"; {c['reason']}" if c.get("reason") and row_status(c) != "holds" else ""
        print(f"  {row_status(c).upper():<14} {c['id']}{kind}: measured {format_measured(c['measured'])}, "
              f"target {format_measured(c['target'])}{why}")
    print(_summary(result))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from dpfair_jax.runner import context, registry, report

    found = _discover(args)
    only = None
    if args.only is not None:
        try:  # the papers of the discovered studies are valid here
            only = registry.normalize_paper(args.only, "--only")
        except ValueError as err:
            raise CliError(str(err)) from None
    exps = [e for e in found.experiments if only is None or e.paper == only]
    if not exps:
        raise CliError(f"no experiments registered{'' if only is None else f' for paper {only}'}", 1)
    size = "quick" if args.quick else "full"
    failed = []
    t0 = time.perf_counter()
    from dpfair_jax import launch

    show = launch.is_primary()  # several processes: process 0 prints and writes the report
    for i, exp in enumerate(exps, 1):
        if size not in exp.configs:
            if show:
                print(f"[{i}/{len(exps)}] {exp.name}: skipped (no {size!r} config)", file=sys.stderr)
            continue
        if show:
            print(f"[{i}/{len(exps)}] {exp.name} ...", file=sys.stderr, flush=True)
        try:
            result = context.run_experiment(exp, size=size, root=args.out, fresh=args.fresh,
                                            progress=_progress(args), raise_errors=False)
        except ValueError as err:  # e.g. the run directory is locked by another run
            failed.append(exp.name)
            print(f"{PROG}: error: {exp.name}: {err}", file=sys.stderr)
            continue
        if show:
            print(f"[{i}/{len(exps)}] {_summary(result)}", flush=True)
        if not result.ok:
            failed.append(exp.name)
            print(f"{PROG}: error: {exp.name} failed: {result.error}", file=sys.stderr)
    if show:
        path = report.build_report(args.out, import_errors=found.errors)
        print(f"report: {path} ({time.perf_counter() - t0:.0f} s)")
    if failed or found.errors:
        parts = []
        if failed:
            parts.append(f"{len(failed)} experiment(s) failed: {', '.join(failed)}")
        if found.errors:
            parts.append(f"{len(found.errors)} module(s) failed to import: {', '.join(found.errors)}")
        raise CliError("; ".join(parts), 1)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from dpfair_jax.runner import report, store

    root = store.results_root(args.out)
    if args.out is not None and not root.is_dir():
        raise CliError(f"--out {args.out}: no such directory", 2)
    if not (root / "runs").is_dir():
        raise CliError(f"no runs under {root}; run 'dpfair reproduce --quick' first (or pass --out)", 1)
    errors = _discover(args).errors if args.experiments is not None else None
    print(report.build_report(root, import_errors=errors))
    return 0


# ---------------------------------------------------------------------------------------------
# Benchmarks

BENCH_COLUMNS = ("name", "machine", "baseline", "value", "unit", "ratio", "target", "met")
_NOT_SCRIPTS = {"common.py", "conftest.py", "__init__.py"}


def collect_bench_results(results_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows from every ``*.json`` in ``results_dir``: a list of rows, ``{"rows": [...]}``, or one row."""
    rows: list[dict[str, Any]] = []
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            print(f"{PROG}: warning: skipping unreadable {path}: {err}", file=sys.stderr)
            continue
        if isinstance(data, dict):
            data = data.get("rows", data.get("results", [data]))
        for row in data if isinstance(data, list) else []:
            if isinstance(row, dict):
                rows.append({**row, "_file": path.name})
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        value = json.dumps(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def write_bench_table(rows: list[dict[str, Any]], path: str | os.PathLike, *,
                      source: str = "`dpfair bench` from `benchmarks/results/*.json`") -> str:
    """Write the Markdown table of ``rows`` (columns :data:`BENCH_COLUMNS`) to ``path``; return it."""
    from dpfair_jax.runner import store

    lines = ["# Benchmark results", "",
             f"Collected by {source}. `ratio` compares the kit "
             "with `baseline`; `met` says whether `target` was reached.", "",
             "| " + " | ".join(BENCH_COLUMNS) + " |", "|" + "---|" * len(BENCH_COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in BENCH_COLUMNS) + " |")
    text = "\n".join(lines) + "\n"
    store.atomic_write_text(path, text)
    return text


def cmd_bench(args: argparse.Namespace) -> int:
    bench_dir = Path(args.dir)
    if not bench_dir.is_dir():
        raise CliError(f"no benchmarks directory {bench_dir}; run from the repository root or pass --dir", 2)
    scripts = sorted(p for p in bench_dir.glob("*.py") if p.name not in _NOT_SCRIPTS and not p.name.startswith("_"))
    env = dict(os.environ)
    # Same allocator settings for the kit and its baselines (see notes/performance_cpu.md).
    env.setdefault("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=2147483647:glibc.malloc.trim_threshold=4294967295")
    failed = []
    for script in scripts:
        # From the directory above benchmarks/ (the repository root), as `python benchmarks/x.py`.
        cmd = [sys.executable, str(script.resolve())] + (["--quick"] if args.quick else [])
        print(f"{PROG} bench: {script} {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, cwd=bench_dir.resolve().parent, env=env)
        if proc.returncode != 0:
            failed.append(f"{script.name} (exit {proc.returncode})")
    results = bench_dir / "results"
    rows = collect_bench_results(results)
    print(write_bench_table(rows, results / "README.md"))
    if failed:
        raise CliError(f"{len(failed)} benchmark(s) failed: {', '.join(failed)}", 1)
    if not scripts:
        print(f"{PROG}: warning: no benchmark scripts in {bench_dir}", file=sys.stderr)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from dpfair_jax.runner import store

    try:
        module = importlib.import_module("dpfair_jax.audit")
    except ImportError as err:
        raise CliError(f"audit is not available: dpfair_jax.audit does not import ({err})", 1) from None
    run_audit = getattr(module, "run_audit", None)
    if not callable(run_audit):
        raise CliError("audit is not available: dpfair_jax.audit provides no run_audit(quick=..., out=...)", 1)
    out = store.results_root(args.out) / "audit"
    if args.family:
        if args.sums_only:
            raise CliError("--family and --sums-only exclude each other", 2)
        from dpfair_jax.audit import mechanism_audits

        unknown = sorted(set(args.family) - set(mechanism_audits.FAMILIES))
        if unknown:
            raise CliError(f"unknown audit family {unknown}; choose from {list(mechanism_audits.FAMILIES)}", 2)
        result = run_audit(quick=args.quick, out=out, mechanisms=True, families=tuple(args.family))
    else:
        result = run_audit(quick=args.quick, out=out, mechanisms=not args.sums_only)
    if hasattr(result, "to_string"):  # a DataFrame of audit rows: print it whole
        print(result.to_string(index=False))
    elif result is not None:
        print(result)
    passed = _audit_passed(result)
    if passed is False:
        raise CliError(f"audit found failures; see {out}", 1)
    return 0


def _audit_passed(result: Any) -> bool | None:
    if isinstance(result, bool):
        return result
    try:
        import pandas as pd

        if isinstance(result, pd.DataFrame) and "passed" in result.columns:
            return bool(result["passed"].all())
    except ImportError:  # pragma: no cover
        pass
    if isinstance(result, list) and result and all(isinstance(r, dict) and "passed" in r for r in result):
        return all(bool(r["passed"]) for r in result)
    return None


def _join_processes(args: argparse.Namespace, argv: Sequence[str]) -> int | None:
    """``--processes N`` (N > 1): re-run this command as N processes through
    ``python -m dpfair_jax.launch`` and return their exit status. In a launched process, or a
    cluster job that ``jax.distributed`` recognizes, join it (``launch.initialize``); else None."""
    from dpfair_jax import launch

    for flag, value in (("--processes", args.processes), ("--devices-per-process", args.devices_per_process)):
        if value < 1:
            raise CliError(f"{flag} must be >= 1, got {value}", 2)
    if args.processes > 1 and not launch.is_launched():
        return launch.launch(["-m", "dpfair_jax", *argv], args.processes,
                             devices_per_process=args.devices_per_process)
    launch.initialize()
    return None


#: Commands that compile JAX programs (the others stay free of the jax import).
_COMPILING = ("run", "reproduce", "audit")


def _enable_compile_cache(path: str | None, command: str) -> bool:
    """Persistent XLA compilation cache for the compiling commands: ``--compile-cache DIR``, else
    ``$DPFAIR_COMPILE_CACHE`` (``off`` disables it), else the user-level default folder
    (:func:`dpfair_jax.compile_cache.configure`). True when this call turned it on."""
    if command not in _COMPILING:
        return False
    from dpfair_jax import compile_cache

    if path is None and compile_cache.is_enabled():  # set by the caller: keep it
        return False
    try:
        return compile_cache.configure(path) is not None
    except ValueError as err:
        raise CliError(f"--compile-cache: {err}", 2) from None


_COMMANDS = {"list": cmd_list, "run": cmd_run, "reproduce": cmd_reproduce, "report": cmd_report,
             "bench": cmd_bench, "audit": cmd_audit}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dpfair`` (and ``python -m dpfair_jax``); returns the exit status."""
    parser = build_parser()
    # dp-accounting's RDP code logs one warning per skipped order; keep the console readable.
    logging.getLogger("absl").setLevel(logging.ERROR)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        if args.command in ("run", "reproduce") and (code := _join_processes(args, argv)) is not None:
            return code
        cached = _enable_compile_cache(getattr(args, "compile_cache", None), args.command)
        try:
            return _COMMANDS[args.command](args)
        finally:
            if cached:  # leave the caller's JAX settings as they were (main() called in-process)
                from dpfair_jax import compile_cache

                compile_cache.disable()
    except CliError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; finished chunks are saved, rerun the same command to resume.",
              file=sys.stderr)
        return 130
    except SystemExit as err:  # --help
        return err.code if isinstance(err.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
