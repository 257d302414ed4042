"""The results store: atomic, checksummed files under ``<root>/runs/<experiment>/``.

Layout of one run directory::

    runs/<experiment>/
      config.json     the resolved config, its size ("quick"/"full") and the overrides
      <table>.csv     each saved table; floats written with 17 significant digits (exact round trip)
      <table>.pkl     the same table, lossless (dtypes and all); .parquet instead when pyarrow is present
      figures/*.png   figures
      claims.json     [{"id", "paper", "statement", "measured", "target", "passed",
                        "kind", "status", "reason", "target_met"}, ...]; kind "claim" or "formula"
                        (a formula-consistency check); status "holds", "fails", "untestable",
                        "reconstruction" or "skipped", with a reason for every status but "holds";
                        passed is true only for "holds"
      privacy.json    {name: {"epsilon", "delta", "rho", "relation", "unit", ...}}
      meta.json       seed, package versions, devices, start/end/wall/compile time, status, chunks
                      computed/reused, code version (SHA-256 of the package and study sources)
      manifest.json   SHA-256 of every file above
      chunks/         resumable sweep chunks: <id>.pkl + <id>.json (sidecar holding its SHA-256)

Every file is written atomically (temporary file in the same directory, ``fsync``,
``os.replace``), so a reader sees either the old or the new file, never a partial one.
The results root is ``--out``, else ``$DPFAIR_RESULTS``, else ``./results``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import io
import json
import math
import os
import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_RESULTS",
    "ChunkCache",
    "ChunkStatus",
    "atomic_write_bytes",
    "csv_read_options",
    "atomic_write_json",
    "atomic_write_text",
    "read_json",
    "read_table",
    "results_root",
    "run_dir",
    "sha256_bytes",
    "sha256_file",
    "stable_hash",
    "to_jsonable",
    "write_manifest",
    "write_table",
]

ENV_RESULTS = "DPFAIR_RESULTS"


def results_root(out: str | os.PathLike | None = None) -> Path:
    """``out`` if given, else ``$DPFAIR_RESULTS``, else ``./results`` (not created here)."""
    if out is not None and str(out) != "":
        return Path(out)
    env = os.environ.get(ENV_RESULTS)
    return Path(env) if env else Path("results")


def run_dir(root: str | os.PathLike, experiment: str) -> Path:
    """Directory of ``experiment``'s run under the results root."""
    return Path(root) / "runs" / experiment


# --------------------------------------------------------------------------------------------
# Atomic writes and checksums


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, sync_dir: bool = True) -> str:
    """Write ``data`` to ``path`` atomically and durably; return its SHA-256 (hex).

    The bytes go to a temporary file in the same directory, are flushed and ``fsync``-ed, then
    ``os.replace`` moves them over ``path`` (atomic on POSIX and Windows) and the directory is
    synced (skip with ``sync_dir=False`` when a later write to the same directory syncs it). A
    crash at any point leaves either the old file or the new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        _fsync_dir(path.parent)
    return sha256_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> str:
    """:func:`atomic_write_bytes` of UTF-8 ``text``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# JSON


def to_jsonable(obj: Any, *, strict: bool = False) -> Any:
    """Convert ``obj`` to strict JSON values.

    numpy/JAX scalars and arrays become Python numbers/lists, NaN becomes ``null``, +-inf the
    strings ``"inf"``/``"-inf"``; objects with ``to_dict()`` (e.g. ``PrivacySpend``) or dataclasses
    become dicts; ``Path`` and datetimes become strings; anything else its ``repr`` (e.g. a
    ``dp_accounting.DpEvent``), or a ``TypeError`` when ``strict``.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v, strict=strict) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        return [to_jsonable(v, strict=strict) for v in items]
    if isinstance(obj, (Path, _dt.datetime, _dt.date)):
        return str(obj)
    # numpy / JAX: bool_, integer, floating, ndarray, jax.Array
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and hasattr(obj, "tolist"):
        try:
            return to_jsonable(obj.tolist(), strict=strict)
        except Exception:  # noqa: BLE001 - e.g. a tracer; fall through to repr
            pass
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return to_jsonable(obj.item(), strict=strict)
        except Exception:  # noqa: BLE001
            pass
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        try:
            return to_jsonable(to_dict(), strict=strict)
        except Exception:  # noqa: BLE001
            pass
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, strict=strict)
    if strict:
        raise TypeError(f"{type(obj).__name__} is not JSON-serializable")
    return repr(obj)


def dumps(obj: Any) -> str:
    """Strict, pretty, key-sorted JSON of :func:`to_jsonable` ``(obj)``."""
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any) -> str:
    """Atomically write ``obj`` as strict JSON; return the file's SHA-256."""
    return atomic_write_text(path, dumps(obj))


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    """Read JSON from ``path``; ``default`` when the file is missing."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default


def stable_hash(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys, no whitespace, numpy -> Python).

    Equal dicts give equal hashes across processes and Python versions; ``1`` and ``1.0`` differ.
    Values without a canonical JSON form raise ``TypeError`` (a ``repr`` may hold a memory address).
    """
    canon = json.dumps(to_jsonable(obj, strict=True), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Tables


def _have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _pickle_bytes(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def write_table(df: Any, directory: str | os.PathLike, name: str) -> dict[str, str]:
    """Write ``df`` as ``<name>.csv`` (floats as ``%.17g``: exact round trip) and a lossless copy.

    The lossless copy is ``<name>.parquet`` when pyarrow is installed and the frame converts,
    else ``<name>.pkl``. Returns ``{filename: sha256}``.
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"table {name!r} must be a pandas.DataFrame, got {type(df).__name__}.")
    directory = Path(directory)
    out: dict[str, str] = {}
    csv = df.to_csv(index=False, float_format="%.17g")
    out[f"{name}.csv"] = atomic_write_text(directory / f"{name}.csv", csv)
    stale = [directory / f"{name}.parquet", directory / f"{name}.pkl"]
    written = None
    if _have_pyarrow():
        try:
            buf = io.BytesIO()
            df.to_parquet(buf, index=False)
            out[f"{name}.parquet"] = atomic_write_bytes(directory / f"{name}.parquet", buf.getvalue())
            written = directory / f"{name}.parquet"
        except Exception:  # noqa: BLE001 - e.g. mixed object columns: fall back to pickle
            written = None
    if written is None:
        out[f"{name}.pkl"] = atomic_write_bytes(directory / f"{name}.pkl", _pickle_bytes(df))
        written = directory / f"{name}.pkl"
    for path in stale:
        if path != written and path.exists():
            path.unlink()
    return out


def read_table(directory: str | os.PathLike, name: str) -> Any:
    """Read table ``name`` from ``directory``: the lossless copy if present, else the CSV (parsed
    exactly: :func:`csv_read_options`)."""
    import pandas as pd

    directory = Path(directory)
    if (directory / f"{name}.parquet").exists():
        return pd.read_parquet(directory / f"{name}.parquet")
    if (directory / f"{name}.pkl").exists():
        return pd.read_pickle(directory / f"{name}.pkl")
    return pd.read_csv(directory / f"{name}.csv", **csv_read_options())


def csv_read_options() -> dict[str, Any]:
    """``pandas.read_csv`` options that read the tables' floats back exactly: pandas 2 needs
    ``float_precision="round_trip"`` (its default parser can lose the last digit); pandas 3 parses
    exactly by default and deprecates the option."""
    import pandas as pd

    return {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def write_manifest(directory: str | os.PathLike) -> dict[str, str]:
    """Write ``manifest.json``: SHA-256 of every file under ``directory`` except ``chunks/``."""
    directory = Path(directory)
    files: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if not path.is_file() or rel.parts[0] == "chunks" or rel.name == "manifest.json":
            continue
        if rel.name.startswith("."):
            continue
        files[rel.as_posix()] = sha256_file(path)
    atomic_write_json(directory / "manifest.json", {"sha256": files})
    return files


# --------------------------------------------------------------------------------------------
# Resumable chunk cache


@dataclasses.dataclass(frozen=True)
class ChunkStatus:
    """What :meth:`ChunkCache.load` found for one chunk id."""

    state: str  # "missing", "ok" or "corrupt"
    reason: str = ""


class ChunkCache:
    """Finished sweep chunks of one run, stored as ``<id>.pkl`` plus a ``<id>.json`` sidecar.

    The data file is written first, then the sidecar holding its SHA-256, both atomically; a chunk
    counts as finished only when the sidecar exists and the data file's SHA-256 matches it. A data
    file without a sidecar (a kill between the two writes), a checksum mismatch or an unreadable
    file is *corrupt*: reported, deleted and recomputed, never read.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def paths(self, chunk_id: str) -> tuple[Path, Path]:
        return self.directory / f"{chunk_id}.pkl", self.directory / f"{chunk_id}.json"

    def status(self, chunk_id: str) -> ChunkStatus:
        data, side = self.paths(chunk_id)
        if not data.exists() and not side.exists():
            return ChunkStatus("missing")
        if not side.exists():
            return ChunkStatus("corrupt", "data file without checksum sidecar (interrupted write)")
        if not data.exists():
            return ChunkStatus("corrupt", "checksum sidecar without data file")
        try:
            meta = read_json(side)
            expected = meta["sha256"]
        except Exception as err:  # noqa: BLE001
            return ChunkStatus("corrupt", f"unreadable sidecar ({type(err).__name__})")
        actual = sha256_file(data)
        if actual != expected:
            return ChunkStatus("corrupt", f"SHA-256 mismatch (expected {expected[:12]}, found {actual[:12]})")
        return ChunkStatus("ok")

    def load(self, chunk_id: str) -> Any:
        """Read a chunk whose :meth:`status` is "ok" (verifies the checksum again on the bytes read)."""
        data, side = self.paths(chunk_id)
        raw = data.read_bytes()
        if sha256_bytes(raw) != read_json(side)["sha256"]:
            raise ValueError(f"chunk {chunk_id} changed on disk while reading; rerun to recompute it.")
        return pickle.loads(raw)

    def save(self, chunk_id: str, frame: Any, info: Mapping[str, Any]) -> str:
        """Atomically write ``frame`` then its sidecar (``info`` plus ``sha256``); return the hash."""
        data, side = self.paths(chunk_id)
        # The sidecar's directory sync also makes the data file's rename durable.
        digest = atomic_write_bytes(data, _pickle_bytes(frame), sync_dir=False)
        atomic_write_json(side, {**dict(info), "sha256": digest})
        return digest

    def discard(self, chunk_id: str) -> None:
        for path in self.paths(chunk_id):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
