"""Progress of the public tradeoff study: a bar on a terminal, a log line per finished block.

What is shown is public by construction: the number of compiled programs ("blocks") and of
replicates, and which block finished. Never the number of random-stopping runs ``K`` (nor the
slots ``L`` of a block, a function of the ``K``'s) and never a timing or rate (a block's time
grows with its runs): the selection's spend covers ``K`` only while it stays hidden.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["LOGGER", "StudyProgress", "check_progress"]

#: the logger of the study's per-block lines (level INFO)
LOGGER = logging.getLogger("dpfair_jax.studies.tradeoff")

_BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} program x replicate blocks |{bar}|"


def _in_notebook() -> bool:
    """A running IPython kernel (not merely an imported ``ipykernel``, which any process may hold)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - an IPython without a shell
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def _interactive() -> bool:
    """A terminal on stderr, or a notebook kernel (tqdm.auto draws a widget there)."""
    try:
        return bool(sys.stderr.isatty()) or _in_notebook()
    except (AttributeError, ValueError):
        return False


def _make_bar(desc: str, total: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # a dependency; a plain line per block without it
        return None
    return tqdm(total=total, desc=desc, bar_format=_BAR_FORMAT, file=sys.stderr, leave=False, mininterval=0.0)


def check_progress(progress) -> None:
    """Refuse anything but ``None``, ``True`` or ``False`` (before any compute)."""
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be None, True or False, got {progress!r}.")


class StudyProgress:
    """``progress``: ``None`` (a bar on an interactive terminal, a log line per finished block),
    ``True`` (a bar always; a plain line on stderr per block where tqdm is missing) or ``False``
    (silent). ``blocks`` programs of ``replicates`` replicates each."""

    def __init__(self, desc: str, blocks: int, replicates: int, progress: bool | None):
        check_progress(progress)
        self.desc, self.blocks, self.replicates, self.done = desc, blocks, replicates, 0
        self.enabled = progress is not False
        want_bar = progress is True or (progress is None and _interactive())
        self.bar = _make_bar(desc, blocks * replicates) if want_bar else None
        self.plain = progress is True and self.bar is None

    def replicate_done(self) -> None:
        """One replicate of the current block finished."""
        if self.bar is not None:
            self.bar.update(1)

    def block_done(self, kind: str) -> None:
        """Program ``kind`` finished on every replicate."""
        self.done += 1
        if not self.enabled:
            return
        line = (f"{self.desc}: program {kind} finished on {self.replicates} replicate(s) "
                f"({self.done}/{self.blocks} programs)")
        LOGGER.info(line)
        if self.plain:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
