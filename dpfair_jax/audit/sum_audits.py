"""Audits of the Gaussian and Laplace mechanisms on a clipped sum with a canary, and planted bugs.

The neighbouring pair is add/remove of one canary record: ``D0`` is a fixed small data set, ``D1 =
D0 + {canary}``. The mechanism releases the clipped sum plus noise calibrated to the clipped
sum's sensitivity (``clip_norm`` under add/remove: l2 for Gaussian, l1 for Laplace); the attack
statistic is the release projected on the canary's direction (the Neyman-Pearson statistic for
an isotropic Gaussian and for Laplace noise on that coordinate). The canary is huge
(``canary_scale * clip_norm``), so clipping is what keeps it private.

Planted bugs (each must be caught: lower bound > claimed epsilon):
* ``"noise"``: the noise scale is 10x too small (Gaussian std / 10, Laplace scale / 10);
* ``"clipping"``: clipping is disabled, so the huge canary moves the sum far beyond the
  sensitivity the noise was calibrated to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.audit.games import audit_mechanism
from dpfair_jax.privacy import mechanisms
from dpfair_jax.privacy.accounting import analytic_gaussian_sigma

__all__ = ["BUGS", "clipped_sum_mechanism", "audit_clipped_sum", "audit_suite"]

BUGS = ("noise", "clipping")
_KINDS = ("gaussian", "laplace")


def _clip_rows(x: jax.Array, clip_norm: float, ord_: int) -> jax.Array:
    norms = jnp.linalg.norm(x, ord=ord_, axis=-1, keepdims=True)
    return x * jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-30))


def clipped_sum_mechanism(
    kind: str,
    *,
    epsilon: float,
    delta: float = 0.0,
    clip_norm: float = 1.0,
    bug: str | None = None,
    dim: int = 2,
    n: int = 16,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """A ``mechanism_fn(key, flag) -> statistic`` for :func:`dpfair_jax.audit.games.run_game`.

    ``kind="gaussian"``: ``sum_i clip_l2(x_i) + N(0, s^2 I)`` with ``s`` the analytic Gaussian
    calibration (Balle & Wang 2018) of (epsilon, delta) at sensitivity ``clip_norm``.
    ``kind="laplace"``: ``sum_i clip_l1(x_i) + Laplace(clip_norm / epsilon)`` per coordinate
    (delta ignored, pure DP). ``bug`` plants one of :data:`BUGS`. Returns the function and a dict
    describing it (noise scale, sensitivity, claimed epsilon and delta).

    Privacy: the bug-free mechanism is (epsilon, delta)-DP (Gaussian) or epsilon-DP (Laplace)
    under add/remove of one record.
    """
    V.check_choice("kind", kind, _KINDS)
    V.check_epsilon(epsilon)
    V.check_clip_norm(clip_norm)
    if bug is not None:
        V.check_choice("bug", bug, BUGS)
    dim = V.check_int("dim", dim)
    n = V.check_int("n", n)
    V.check_positive("canary_scale", canary_scale)
    if kind == "gaussian":
        V.check_delta(delta)
        ord_, scale = 2, analytic_gaussian_sigma(epsilon, delta, clip_norm)
    else:
        if delta != 0.0:
            raise ValueError("the Laplace mechanism is pure DP: pass delta=0.")
        ord_, scale = 1, float(clip_norm) / float(epsilon)
    if bug == "noise":
        scale = scale / 10.0
    clip = bug != "clipping"
    rng = np.random.default_rng(seed)
    base_rows = rng.normal(size=(n, dim)) * clip_norm  # some rows exceed the clip norm
    direction = np.zeros(dim)
    direction[0] = 1.0
    canary = canary_scale * clip_norm * direction
    if clip:
        base_sum = np.asarray(_clip_rows(jnp.asarray(base_rows), clip_norm, ord_))
        canary = np.asarray(_clip_rows(jnp.asarray(canary[None]), clip_norm, ord_))[0]
        base_sum = base_sum.sum(axis=0)
    else:
        base_sum = base_rows.sum(axis=0)
    base_sum_j = jnp.asarray(base_sum, jnp.float32)
    canary_j = jnp.asarray(canary, jnp.float32)
    u = jnp.asarray(direction, jnp.float32)
    scale_j = jnp.float32(scale)
    c_j = jnp.float32(clip_norm)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        total = base_sum_j + flag.astype(jnp.float32) * canary_j
        if kind == "gaussian":
            out = mechanisms.gaussian_mechanism(key, total, scale_j)
        else:
            out = mechanisms.laplace_mechanism(key, total, scale_j)
        return jnp.dot(out - base_sum_j, u) / c_j

    info = {
        "kind": kind, "bug": bug or "none", "noise_scale": float(scale), "sensitivity": float(clip_norm),
        "claimed_epsilon": float(epsilon), "delta": float(delta) if kind == "gaussian" else 0.0,
    }
    return mechanism_fn, info


def audit_clipped_sum(
    key: jax.Array,
    kind: str,
    *,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    bug: str | None = None,
    num_trials: int = 2000,
    confidence: float = 0.95,
    chunk_size: int | None = 500,
    **mechanism_kwargs: Any,
) -> dict[str, Any]:
    """Audit row (see :func:`dpfair_jax.audit.games.audit_mechanism`) for one clipped-sum mechanism."""
    d = delta if kind == "gaussian" else 0.0
    fn, info = clipped_sum_mechanism(kind, epsilon=epsilon, delta=d, bug=bug, **mechanism_kwargs)
    row = audit_mechanism(
        fn, key, mechanism=f"{kind}_clipped_sum", claimed_epsilon=epsilon, delta=d,
        num_trials=num_trials, planted_bug=bug, confidence=confidence,
        chunk_size=min(chunk_size, num_trials) if chunk_size else None,
    )
    row["noise_scale"] = info["noise_scale"]
    return row


def audit_suite(
    key: jax.Array,
    *,
    num_trials: int = 2000,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    confidence: float = 0.95,
) -> list[dict[str, Any]]:
    """The six standard audits: Gaussian and Laplace, each bug-free and with each planted bug."""
    rows = []
    cases = [(k, b) for k in _KINDS for b in (None,) + BUGS]
    keys = jax.random.split(key, len(cases))
    for (kind, bug), k in zip(cases, keys):
        rows.append(audit_clipped_sum(k, kind, epsilon=epsilon, delta=delta, bug=bug,
                                      num_trials=num_trials, confidence=confidence))
    return rows
