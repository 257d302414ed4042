"""Shared machinery of the mutation checks (``halve_noise.py``, ``privacy_arithmetic.py``).

A :class:`Mutation` is a one-line textual patch (file, the exact line as it stands, its
replacement) and the default-suite tests that must catch it. :func:`main` copies the working tree
(tracked and untracked, non-ignored files) to a temporary directory, checks that the covering
tests pass there unmutated, then for each mutation patches the copy, runs the covering tests with
``-x -q -p no:cacheprovider`` (the project's ``addopts`` keep ``-m 'not slow'``, so only
default-suite tests count), records whether at least one failed, and restores the file. The
result is a Markdown table; ``--out FILE`` writes it there, or, when FILE holds the script's
begin and end markers, between them. Exit status 0 when every mutation is caught, 1 otherwise, 2
when a patch no longer applies (the line was edited: update the script's list), 3 when the
covering tests fail unmutated.

Not collected by pytest: the file name has no ``test_`` prefix (the default ``python_files``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
END = "<!-- end: table -->"


@dataclass(frozen=True)
class Mutation:
    """``path``: what is mutated (a noise path, or a short name of the edit); ``file``:
    repository-relative; ``old``: the line as it stands (compared after stripping indentation; must
    occur exactly once); ``new``: its replacement (indentation kept); ``tests``: pytest node ids
    (or whole files) that must catch it; ``category``: a group name (``--only`` matches it too)."""

    path: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    category: str = ""


# --------------------------------------------------------------------------------------------
def _copy_tree(dst: Path) -> None:
    """Tracked and untracked (non-ignored) files of the working tree, as they stand (without git:
    every file but hidden folders and caches)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, check=True, capture_output=True).stdout.decode()
        rels = list(filter(None, out.split("\0")))
    except (OSError, subprocess.CalledProcessError):
        rels = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and not any(part.startswith(".") or part == "__pycache__"
                                           for part in p.relative_to(ROOT).parts)]
    for rel in rels:
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def _locate(tree: Path, m: Mutation) -> tuple[list[str], int]:
    lines = (tree / m.file).read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == m.old.strip()]
    if len(hits) != 1:
        raise LookupError(f"{m.file}: expected exactly one line {m.old!r}, found {len(hits)}")
    return lines, hits[0]


def _apply(tree: Path, m: Mutation) -> tuple[str, int]:
    """Patch the copy; returns (original text, 1-based line number)."""
    path = tree / m.file
    original = path.read_text()
    lines, i = _locate(tree, m)
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = indent + m.new.strip() + "\n"
    path.write_text("".join(lines))
    return original, i + 1


def _pythonpath(tree: Path) -> str:
    """The copy first, then whatever ``PYTHONPATH`` already held (packages installed beside)."""
    rest = os.environ.get("PYTHONPATH", "")
    return str(tree) + (os.pathsep + rest if rest else "")


def _pytest(tree: Path, tests: tuple[str, ...], python: str, timeout: float, stop_first: bool = True
            ) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=_pythonpath(tree), PYTHONDONTWRITEBYTECODE="1")
    cmd = [python, "-m", "pytest", *(["-x"] if stop_first else []), "-q", "-p", "no:cacheprovider",
           *tests]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = -1, f"timeout after {timeout:.0f} s\n{(e.stdout or b'')!s}"
    return rc, out, time.perf_counter() - t0


def _first_failure(out: str) -> str:
    """The first failing test's name (with its parameters), from the ``-ra`` summary."""
    for line in out.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ", 1)[0].split("::", 1)[-1]
    return ""


def _check_import(tree: Path, python: str) -> None:
    env = dict(os.environ, PYTHONPATH=_pythonpath(tree))
    got = subprocess.run([python, "-c", "import dpfair_jax, sys; sys.stdout.write(dpfair_jax.__file__)"],
                         cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    if not Path(got).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the copy imports dpfair_jax from {got}, not from {tree}")


def main(mutations: Sequence[Mutation], *, description: str, begin: str, prefix: str,
         first_column: str = "path", show_category: bool = False,
         argv: list[str] | None = None) -> int:
    """Run ``mutations`` as the command line asks (see the module docstring); ``begin``: the marker
    after which ``--out`` writes the table; ``prefix``: of the temporary directory;
    ``first_column``: the table's first header; ``show_category``: add a category column."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--only", nargs="*", help="substrings of path names to run")
    ap.add_argument("--out", help="write the Markdown table here (repository-relative or absolute)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--check", action="store_true", help="only check that every patch applies")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--jobs", type=int, default=1,
                    help="mutations run at once, each in its own copy of the tree (default 1)")
    ap.add_argument("--merge", action="store_true",
                    help="with --out: keep the table's rows of mutations not run this time (run in "
                         "batches with --only), replace those run")
    ap.add_argument("--from-log", nargs="*", metavar="LOG",
                    help="run nothing: build the table from the progress lines of earlier runs' "
                         "output (e.g. batches interrupted before writing it)")
    args = ap.parse_args(argv)

    muts = [m for m in mutations
            if not args.only or any(s in m.path or (m.category and s == m.category) for s in args.only)]
    if args.list:
        for m in muts:
            print(f"{m.path}\t{m.file}\t{' '.join(m.tests)}" if not show_category else
                  f"{m.category}\t{m.path}\t{m.file}\t{' '.join(m.tests)}")
        return 0
    jobs = max(1, int(args.jobs))
    if args.from_log is not None:
        by_path = {m.path: m for m in muts}
        got: dict[str, tuple] = {}
        for log in args.from_log:
            for line in Path(log).read_text().splitlines():
                if not line.startswith("[") or " s  " not in line:
                    continue
                status, rest = line[1:].split("]", 1)
                dt, rest = rest.strip().split(" s  ", 1)
                for path, m in by_path.items():
                    if rest.startswith(path + "  ("):
                        where, first = rest[len(path) + 3:].split(")", 1)
                        got[path] = (m, int(where.rsplit(":", 1)[1]), status.strip(), first.strip(), float(dt))
        rows = [got[m.path] for m in muts if m.path in got]
        return _write_table(rows, mutations, args, begin, first_column, show_category, 0.0, jobs, "from logs")
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        trees = [Path(tmp) / f"repo{j}" for j in range(jobs)]
        tree = trees[0]
        _copy_tree(tree)
        bad = []
        for m in muts:
            try:
                _locate(tree, m)
            except LookupError as e:
                bad.append(str(e))
        if bad:
            print("patches that do not apply:\n  " + "\n  ".join(bad), file=sys.stderr)
            return 2
        if args.check:
            print(f"all {len(muts)} patches apply")
            return 0
        for t in trees[1:]:
            shutil.copytree(tree, t)
        _check_import(tree, args.python)
        t_start = time.perf_counter()
        if not args.no_baseline:  # the covering tests, unmutated, split over the copies
            union = tuple(dict.fromkeys(t for m in muts for t in m.tests))
            parts = [union[j::jobs] for j in range(jobs) if union[j::jobs]]
            with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
                got = list(pool.map(lambda jp: _pytest(trees[jp[0]], jp[1], args.python, args.timeout * 2,
                                                       stop_first=False), enumerate(parts)))
            rc = max(g[0] for g in got) if all(g[0] >= 0 for g in got) else -1
            print(f"baseline (unmutated, {len(union)} node ids, {len(parts)} parts): rc={rc} in "
                  f"{time.perf_counter() - t_start:.0f} s", flush=True)
            if rc != 0:
                print("".join(g[1] for g in got if g[0] != 0)[-4000:], file=sys.stderr)
                print("the covering tests fail without any mutation; fix that first", file=sys.stderr)
                return 3
        free: queue.Queue = queue.Queue()
        for t in trees:
            free.put(t)

        def run_one(m: Mutation) -> tuple:
            t = free.get()
            try:
                original, lineno = _apply(t, m)
                try:
                    rc, out, dt = _pytest(t, m.tests, args.python, args.timeout)
                finally:
                    (t / m.file).write_text(original)
            finally:
                free.put(t)
            status = {0: "no", 1: "yes"}.get(rc, f"error (rc={rc})")
            first = _first_failure(out)
            print(f"[{status:>3}] {dt:6.1f} s  {m.path}  ({m.file}:{lineno})  {first}", flush=True)
            if rc not in (0, 1):
                print(out[-2000:], file=sys.stderr)
            return (m, lineno, status, first, dt)

        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            rows = list(pool.map(run_one, muts))  # in list order, whatever finished first
        total = time.perf_counter() - t_start

    return _write_table(rows, mutations, args, begin, first_column, show_category, total, jobs)


def _write_table(rows: list, mutations: Sequence[Mutation], args: argparse.Namespace, begin: str,
                 first_column: str, show_category: bool, total: float, jobs: int, source: str = "") -> int:
    """Print the Markdown table of ``rows`` ``(mutation, line, status, first failure, seconds)``
    and write it to ``--out`` (``--merge``: keeping the rows of mutations not in ``rows``)."""
    def short(t: str) -> str:
        return t.replace("tests/", "")

    cat_head, cat_rule = ("category | ", "---|") if show_category else ("", "")
    md = [f"| {cat_head}{first_column} | file:line | mutation | covering test | failed |",
          f"|{cat_rule}---|---|---|---|---|"]
    for m, lineno, status, first, dt in rows:
        mut = f"`{m.old.strip()}` -> `{m.new.strip()}`".replace("|", "\\|")
        cov = "<br>".join(short(t) for t in m.tests)
        seen = f"{status}: {first} ({dt:.0f} s)" if first else f"{status} ({dt:.0f} s)"
        cat = f"{m.category} | " if show_category else ""
        md.append(f"| {cat}{m.path} | {m.file.removeprefix('dpfair_jax/')}:{lineno} | {mut} | {cov} | {seen} |")
    caught = sum(r[2] == "yes" for r in rows)
    out_path = None
    if args.out:
        out_path = Path(args.out)
        out_path = out_path if out_path.is_absolute() else ROOT / out_path
    old = out_path.read_text() if out_path is not None and out_path.exists() else ""
    footer = (f"{caught} of {len(rows)} mutations caught; {total:.0f} s in all"
              + (f" ({jobs} at once)." if jobs > 1 else ".")) if not source else \
        f"{caught} of {len(rows)} mutations caught ({source}; seconds per row as run)."
    if args.merge and begin in old and END in old:  # earlier batches' rows for the others
        ncol = 1 if show_category else 0
        prev = {}
        for line in old.split(begin, 1)[1].split(END, 1)[0].splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if line.startswith("| ") and len(cells) > ncol + 1:
                prev[cells[ncol]] = line
        ran = {m.path: line for (m, *_), line in zip(rows, md[2:])}
        merged = [ran.get(m.path) or prev.get(m.path) for m in mutations]
        merged = [line for line in merged if line]
        got = sum(line.rstrip(" |").split(" | ")[-1].startswith("yes") for line in merged)
        md = md[:2] + merged
        footer = (f"{got} of {len(merged)} mutations caught (merged from batches run with --only; "
                  f"this batch: {footer[:-1]}).")
    md.append("")
    md.append(footer)
    text = "\n".join(md) + "\n"
    print(text)
    if out_path is not None:
        if begin in old and END in old:  # replace the generated section of a document in place
            head, rest = old.split(begin, 1)
            text = head + begin + "\n" + text + END + rest.split(END, 1)[1]
        out_path.write_text(text)
    return 0 if caught == len(rows) else 1

