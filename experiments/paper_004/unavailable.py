"""Paper 004's settings the kit cannot run offline: one note row (a skipped claim) each, with the
reason (``config.UNAVAILABLE``)."""

from __future__ import annotations

from .config import UNAVAILABLE

__all__ = ["run_unavailable"]


def run_unavailable(config: dict, ctx) -> None:
    """Record the setting's claim as skipped with the reason it cannot run (nothing is computed)."""
    reason = UNAVAILABLE[config["dataset"]]
    ctx.log(reason)
    ctx.skip_claim(f"{ctx.name}_lower_violation_vs_pfld_epoch",
                   f"DP-FERMI reaches a lower {config['fairness'].upper()} violation than PF-LD (Tran et al.) at "
                   f"equal test error on {config['label']}", reason, target="effect > 0")
    return None
