"""Methods, candidate grids and labels of the public tradeoff study (:mod:`dpfair_jax.studies.tradeoff`)."""

from __future__ import annotations

METHODS = ("dpfermi", "pfld_stochastic", "pfld_epoch", "dpsgd")
#: the paper's other baselines (not in the default method list; :mod:`.baselines`): Tran et al.
#: 2021a's (gamma1, gamma2) mitigation (paper 001) and Jagielski et al. 2019's DP post-processing
#: (equalized odds only)
BASELINE_METHODS = ("mitigation", "jagielski_post")
#: Jagielski et al. 2019's DP-oracle-learner (in-processing, equalized odds only; :mod:`.oracle`):
#: not in the default method list, and run under both units (the baselines: the example unit only)
ORACLE_METHODS = ("jagielski_in",)
#: the methods outside :data:`METHODS`, each run by :mod:`.baselines`
EXTRA_METHODS = BASELINE_METHODS + ORACLE_METHODS
#: every method a study accepts
ALL_METHODS = METHODS + EXTRA_METHODS
METHOD_LABELS = {"dpfermi": "DP-FERMI", "pfld_stochastic": "PF-LD, stochastic variant",
                 "pfld_epoch": "PF-LD (Tran et al.)", "dpsgd": "DP-SGD (lambda = 0)",
                 "mitigation": "Tran et al. 2021a", "jagielski_post": "Jagielski et al. 2019 (post-processing)",
                 "jagielski_in": "Jagielski et al. 2019 (in-processing)"}
#: lambda grid of the fair methods: log-spaced up to 40 (the full ERMI needs larger lambdas than the
#: one-cell regularizer of the paper's public code).
DEFAULT_LAMS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 40.0)
_LR = (0.1, 0.3, 1.0, 3.0)
_CLIP = (1.0, 4.0)
#: candidate grids per method (the Cartesian product of the listed values). ``lr_w`` is the step of
#: the W (multiplier) ascent per unit of the regularizer's gradient: the fit gets ``lr_w / lam``
#: (its W update is ``lr_w * lam * (clipped gradient + noise) / m``), so the ascent's step and its
#: noise do not grow with lambda. ``radius``: DP-FERMI's W ball, the stochastic PF-LD's multiplier
#: box, PF-LD's (per-epoch) multiplier bound.
DEFAULT_SEARCH: dict[str, dict[str, tuple[float, ...]]] = {
    "dpsgd": {"lr_theta": _LR, "clip_theta": _CLIP},
    "dpfermi": {"lr_theta": _LR, "clip_theta": _CLIP, "lr_w": (0.05, 0.5), "radius": (1.0, 5.0)},
    "pfld_stochastic": {"lr_theta": _LR, "clip_theta": _CLIP, "lr_w": (0.05, 0.5), "radius": (0.5, 2.0)},
    "pfld_epoch": {"lr_theta": _LR, "clip_theta": _CLIP, "lr_dual": (1.0, 10.0), "radius": (1.0, 5.0)},
    "mitigation": {"lr_theta": _LR, "clip_theta": _CLIP},
    "jagielski_post": {"lr_theta": _LR, "clip_theta": _CLIP},
    "jagielski_in": {"eta": (0.25, 1.0, 4.0)},  # the Auditor's step (the multiplier bound B is lambda)
}
_BASE = {"lr_theta": 1.0, "clip_theta": 1.0}
_FIXED: dict[str, dict[str, float]] = {  # fields a grid does not set
    "dpsgd": dict(_BASE, lr_w=0.05, clip_w=3.0, radius=5.0),
    "dpfermi": dict(_BASE, lr_w=0.05, clip_w=3.0, radius=5.0),
    "pfld_stochastic": dict(_BASE, lr_w=0.05, clip_w=3.0, radius=1.0),
    "pfld_epoch": dict(_BASE, lr_dual=1.0, clip_violation=1.0, radius=5.0, tol=0.0),
    "mitigation": dict(_BASE),
    "jagielski_post": dict(_BASE),
    "jagielski_in": {"eta": 1.0, "gamma": 0.0},
}
_FIELDS = {"fermi": ("lr_theta", "lr_w", "clip_theta", "clip_w", "radius"),
           "pfld_epoch": ("lr_theta", "lr_dual", "clip_theta", "clip_violation", "radius", "tol"),
           "mitigation": ("lr_theta", "clip_theta"), "jagielski_post": ("lr_theta", "clip_theta"),
           "jagielski_in": ("eta", "gamma")}
_PROGRAM = {"dpfermi": "fermi", "dpsgd": "fermi", "pfld_stochastic": "pfld_stochastic",
            "pfld_epoch": "pfld_epoch", "mitigation": "mitigation", "jagielski_post": "jagielski_post",
            "jagielski_in": "jagielski_in"}
#: the compiled programs, in the order that fixes each one's run keys (existing indices unchanged)
PROGRAMS = ("fermi", "pfld_stochastic", "pfld_epoch", "mitigation", "jagielski_post", "jagielski_in")


def _field_set(name: str) -> tuple[str, ...]:
    """The candidate fields of a method or program (DP-FERMI's for the stochastic PF-LD and DP-SGD)."""
    return _FIELDS.get(name, _FIELDS.get(_PROGRAM.get(name, ""), _FIELDS["fermi"]))
#: DP-SGD runs DP-FERMI's program at lam = 0, where the W update is exactly zero (clip lam C_w = 0);
#: its charged noise share is then made negligible.
_DPSGD_W_RATIO = 1000.0
_SCORE_TAG = 0x73636F72
UNIT_LABEL = "example-level"
