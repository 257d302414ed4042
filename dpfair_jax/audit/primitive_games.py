"""Audit games of privacy primitives that no algorithm module wraps (beside
:mod:`~dpfair_jax.audit.sum_audits`): each calls the primitive of :mod:`dpfair_jax.privacy`
directly, with the builder contract of :mod:`dpfair_jax.audit.mechanism_audits`.

Canary design as in :mod:`~dpfair_jax.audit.dpsgd_games`: the canary is far beyond the clip norm
``C = 3`` along a direction no other record touches; the statistic is the release's coordinate
along it in units of the accounted shift.

* ``group_weighted``: :func:`dpfair_jax.privacy.aggregation.group_weighted_dp_aggregate` (the optax
  form; one ``update`` from a fresh state, which is
  :func:`~dpfair_jax.privacy.aggregation.group_weighted_private_mean` with the state's noise key),
  two groups, public weights ``(0.9, 0.1)`` and public denominators (the group sizes of ``D0``; the
  transformation requires them).
  Group 0 holds 10 rows ``+100 C e_1`` (clipped mean ``+C e_1``), group 1 40 rows with feature 1
  at 0; the canary ``-100 C e_1`` joins group 0 (add/remove via ``mask``). Group 0's multiplier
  is the analytic Gaussian calibration of ``(epsilon, delta) = (1, 1e-2)`` at sensitivity 1
  (group 1's is twice that), so the claim is ``(1, 1e-2)``. Statistic ``-out[1] n_0 / (w_0 C)``.

Planted bugs: ``"noise"`` / ``"noise_half"`` (multipliers x 1/10 / x 1/2), ``"clip_unscaled"``
(std ``z`` instead of ``z C``), ``"clipping"`` (clip x 1e4 with the nominal std) and
``"realized_denominator"``: the group means divided by the realized (masked) group counts instead
of public sizes, as ``aggregation.group_weighted_dp_aggregate`` did by default before public
denominators were required; the canary opposes its group's mean, so adding it moves the release
by ``~2 C / n_0`` (twice the accounted shift).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.audit.fit_spend import UNCLIPPED
from dpfair_jax.audit.games import check_family_bug

__all__ = ["FAMILY_BUGS", "SUITE_TRIALS", "BUILDERS", "ALGORITHMS", "group_weighted_mechanism"]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "group_weighted": ("noise", "noise_half", "clip_unscaled", "clipping", "realized_denominator"),
}
SUITE_TRIALS = {"quick": {"group_weighted": 100000}, "full": {"group_weighted": 400000}}
ALGORITHMS: dict[str, str | None] = {"group_weighted": None}  # a privacy primitive


def _run_scales(bug: str | None, clip_norm: float, z: Any) -> tuple[float, Any]:
    """``(clip norm, noise multiplier)`` a variant runs with, for a nominal ``(C, z)``."""
    c = float(clip_norm)
    return {"noise": (c, z / 10.0), "noise_half": (c, z / 2.0), "clip_unscaled": (c, z / c),
            "clipping": (c * UNCLIPPED, z / UNCLIPPED)}.get(bug, (c, z))


def group_weighted_mechanism(*, bug: str | None = None, epsilon: float = 1.0, delta: float = 1e-2,
                             clip_norm: float = 3.0, n0: int = 10, n1: int = 40, dim: int = 3,
                             canary_scale: float = 100.0, seed: int = 0):
    """``group_weighted_dp_aggregate`` with a canary opposing its group's mean (module doc).

    Privacy: a member of group ``k`` is protected by the Gaussian mechanism with multiplier
    ``sigma_k`` (add/remove-one, public weights and denominators); group 0's is calibrated to
    ``(epsilon, delta)`` exactly (analytic Gaussian), which is the claim.
    """
    from dpfair_jax.privacy import aggregation as agg
    from dpfair_jax.privacy.accounting import analytic_gaussian_sigma

    check_family_bug(FAMILY_BUGS, "group_weighted", bug)
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_clip_norm(clip_norm)
    V.check_positive("canary_scale", canary_scale)
    n0 = V.check_int("n0", n0, minimum=2)
    n1 = V.check_int("n1", n1, minimum=1)
    dim = V.check_int("dim", dim, minimum=2)
    if bug == "clip_unscaled" and float(clip_norm) == 1.0:
        raise ValueError("bug='clip_unscaled' needs clip_norm != 1.")
    z0 = analytic_gaussian_sigma(float(epsilon), float(delta), 1.0)
    c_run, z_run0 = _run_scales(bug, clip_norm, z0)
    big = float(canary_scale) * float(clip_norm)
    rng = np.random.default_rng(seed)
    n = n0 + n1 + 1
    x = np.zeros((n, dim), np.float32)
    x[:n0, 1] = big  # group 0: clipped to +C e_1
    x[n0:n0 + n1] = rng.normal(size=(n1, dim)) * float(clip_norm)
    x[n0:n0 + n1, 1] = 0.0
    x[-1, 1] = -big  # the canary, group 0: clipped to -C e_1
    s = np.concatenate([np.zeros(n0), np.ones(n1), np.zeros(1)]).astype(np.int32)
    xj, sj = jnp.asarray(x), jnp.asarray(s)
    weights = jnp.asarray([0.9, 0.1], jnp.float32)
    den = jnp.asarray([n0, n1], jnp.float32)  # public sizes
    zj = jnp.asarray([z_run0, 2.0 * z_run0], jnp.float32)
    base_mask = jnp.ones((n,), jnp.float32).at[-1].set(0.0)
    canary_mask = jnp.zeros((n,), jnp.float32).at[-1].set(1.0)
    scale = float(n0) / (0.9 * float(clip_norm))

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        mask = base_mask + flag.astype(jnp.float32) * canary_mask
        d = agg.group_counts(sj, 2, mask) if bug == "realized_denominator" else den
        tx = agg.group_weighted_dp_aggregate(clip_norm=c_run, noise_multipliers=zj, group_weights=weights,
                                             num_groups=2, key=key, denominators=d)
        out, _ = tx.update(xj, tx.init(None), groups=sj, mask=mask)
        return -out[1] * scale

    info = {"claimed_epsilon": float(epsilon), "delta": float(delta), "relation": "add_remove",
            "noise_multiplier": float(z0), "clip_norm": float(clip_norm)}
    return mechanism_fn, info


BUILDERS = {"group_weighted": group_weighted_mechanism}
