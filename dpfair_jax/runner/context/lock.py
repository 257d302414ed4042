"""The run directory's lock (:class:`RunLock`: one run writes there at a time) and the clearing of
a previous run's outputs (the ``chunks/`` resume cache is kept)."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from typing import Any

__all__ = ["RunLock"]


_OUTPUTS = ("claims.json", "privacy.json", "meta.json", "manifest.json", "error.txt")


def _clear_outputs(directory: Path) -> None:
    """Remove a previous run's outputs but keep ``chunks/`` (the resume cache)."""
    for entry in directory.iterdir() if directory.exists() else ():
        if entry.name in ("chunks", ".lock"):
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        elif entry.suffix in (".csv", ".pkl", ".parquet") or entry.name in _OUTPUTS or entry.name == "config.json":
            entry.unlink()


class RunLock:
    """``<run_dir>/.lock`` (host and pid) held while a run writes there.

    A second run of the same experiment into the same results root is refused with a
    ``ValueError``; a lock left by a killed process on this host (its pid is gone) is taken over.
    """

    def __init__(self, directory: Path):
        self.path = directory / ".lock"
        self.token = f"{platform.node()} {os.getpid()}"

    def _stale(self) -> bool:
        try:
            host, pid = self.path.read_text().split()
        except (OSError, ValueError):
            return True
        if host != platform.node():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError):
            return False
        return False

    def __enter__(self) -> "RunLock":
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if self._stale():
                    self.path.unlink(missing_ok=True)
                    continue
                raise ValueError(
                    f"{self.path.parent} is in use by another run ({self.path.read_text().strip()}); "
                    f"wait for it, or delete {self.path} if that process is gone."
                ) from None
            with os.fdopen(fd, "w") as fh:
                fh.write(self.token)
            return self
        raise ValueError(f"could not take the run lock {self.path}; delete it and retry.")

    def __exit__(self, *exc: Any) -> None:
        self.path.unlink(missing_ok=True)
