"""Paper 003's Gaussian-mixture study (Fig. 3): one traced trial of COINPRESS vs StratCOINPRESS.

"A Simple and Practical Method for Reducing the Disparate Impact of Differential Privacy", Sec. 5:
``n_tot`` rows in ``k`` groups with Dirichlet(``alpha``) proportions (the reference generator:
``safe_dir_draw``, rounded sizes), group means ``mu_i ~ N(0, 1)`` and unit variance, split at random
into a private and a public half. :func:`mixture_trial` returns the absolute errors against the
private half's mean of COINPRESS, StratCOINPRESS (Alg. 2 with the weights the relation allows),
Pub-StratCOINPRESS (public-half weights), StratCOINPRESS under add/remove with its noisy counts, and
the public code's non-private stratified mean. ``n_tot``, ``k`` and ``alpha`` are traced (rows padded
to ``n_max``, groups to ``k_max``), so a whole grid is one ``montecarlo.sweep`` program.

Privacy: each estimate is one release on the private half, ``sum(rhos)``-zCDP under ``relation``
(the spend of :func:`dpfair_jax.algorithms.mean_estimation.spend` with ``method="coinpress"``; add/remove adds the
noisy counts' share); the estimators are compared, not combined. The reference-code mean is not
private (it is the public code's stored semantics, reported for comparison). The data are simulated.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.privacy.relations import within_group

__all__ = ["mixture_trial"]


def mixture_trial(key: jax.Array, n_tot: Any, k: Any, alpha: Any, *, n_max: int, k_max: int,
                  rhos: Any, center: float = 0.0, radius: float = 3.0,
                  relation: str = "replace_one_within_group") -> dict[str, jax.Array]:
    """One run of the Fig. 3 study at traced ``(n_tot, k, alpha)`` (rows padded to ``n_max``, groups
    to ``k_max``): the reference generator (``safe_dir_draw``, rounded sizes, ``mu_i ~ N(0, 1)``,
    unit variance), a Bernoulli(1/2) private/public split, and the absolute errors against the
    private half's mean of COINPRESS, StratCOINPRESS (exact private-half sizes as weights under
    ``relation="replace_one_within_group"``, where they are public by the relation; the noisy
    counts under ``"add_remove"`` and ``"replace_one"``), Pub-StratCOINPRESS, StratCOINPRESS under add/remove with its default noisy
    counts (``strat_add_remove``, always computed) and the public code's non-private stratified
    mean."""
    kd, km, kx, ks, k1, k2, k3 = jax.random.split(key, 7)
    n_tot = jnp.asarray(n_tot, jnp.float32)
    active = jnp.arange(k_max) < k
    L = jax.random.loggamma(kd, jnp.full((k_max,), alpha, jnp.float32))
    L = jnp.where(active, L, -jnp.inf)
    p = jnp.exp(L - jax.nn.logsumexp(L))
    real = n_tot * p
    small = (real < 1.0) & active
    fixed = real + small - jnp.sum(small) * jax.nn.one_hot(jnp.argmax(real), k_max)
    floors = jnp.floor(fixed)
    frac = jnp.where(active, fixed - floors, -1.0)
    rank = jnp.argsort(jnp.argsort(-frac))
    counts = (floors + (rank < n_tot - jnp.sum(floors))).astype(jnp.int32)
    gid = jnp.searchsorted(jnp.cumsum(counts), jnp.arange(n_max), side="right",
                           method="compare_all").astype(jnp.int32)
    valid = gid < k_max
    means = jax.random.normal(km, (k_max,))
    x = means[jnp.minimum(gid, k_max - 1)] + jax.random.normal(kx, (n_max,))
    priv = valid & ((jax.random.bits(ks, (n_max,), jnp.uint8) & 1) == 1)  # 1/4 of the threefry work
    pub = valid & ~priv
    s_priv = jnp.where(priv, gid, k_max)  # k_max = "not in the private half"
    pad0 = jnp.zeros((1,), jnp.float32)
    c_priv = jax.ops.segment_sum(priv.astype(jnp.float32), s_priv, num_segments=k_max + 1)
    c_pub = jax.ops.segment_sum(pub.astype(jnp.float32), jnp.where(pub, gid, k_max), num_segments=k_max + 1)
    w_exact = jnp.concatenate([c_priv[:k_max], pad0])
    w_pub = jnp.concatenate([c_pub[:k_max], pad0])
    emp = jnp.sum(jnp.where(priv, x, 0.0)) / jnp.maximum(jnp.sum(priv), 1.0)
    opts = dict(center=center, radius=radius, rhos=rhos, relation=relation)
    public_sizes = within_group(relation)  # exact sizes public only within a group
    glob = me.stratified_coinpress(k1, x, jnp.where(priv, 0, 1).astype(jnp.int32), 2,
                                   weights=jnp.array([1.0, 0.0]), **opts).estimate[0]
    # replace-one within a group: the exact private-half sizes are public by the relation (the
    # paper's weights); add/remove and replace-one: the estimator's noisy counts are the weights (exact sizes would be released).
    # Noisy weights are renormalized over the k active strata (k is public; the padding group and
    # the strata beyond k are empty by construction).
    act = jnp.concatenate([active, jnp.zeros((1,), bool)])

    def noisy_weight_estimate(out):
        w = jnp.where(act, out.weights, 0.0)
        return (w / jnp.maximum(jnp.sum(w), 1e-12)) @ out.group_means[:, 0]

    st = me.stratified_coinpress(k2, x, s_priv, k_max + 1,
                                 weights=w_exact if public_sizes else None, **opts)
    st_est = st.estimate[0] if public_sizes else noisy_weight_estimate(st)
    wp = jnp.where(st.present, w_pub, 0.0)
    pub_est = (wp / jnp.maximum(jnp.sum(wp), 1e-12)) @ st.group_means[:, 0]
    # StratCOINPRESS under add/remove on its default path: noisy counts (count_rho = 0.1 sum(rhos))
    # as denominators and weights
    ar = me.stratified_coinpress(jax.random.fold_in(k2, 1), x, s_priv, k_max + 1, center=center,
                                 radius=radius, rhos=rhos, relation="add_remove")
    ar_est = noisy_weight_estimate(ar)
    ref = me.reference_code_stratified_mean(k3, x, s_priv, k_max + 1, center=center, radius=radius,
                                            rhos=rhos, mask=priv)
    min_size = jnp.min(jnp.where(active, c_priv[:k_max], jnp.inf))
    return {"coinpress": jnp.abs(glob - emp), "strat": jnp.abs(st_est - emp),
            "pub_strat": jnp.abs(pub_est - emp), "strat_add_remove": jnp.abs(ar_est - emp),
            "reference_code": jnp.abs(ref - emp),
            "n_private": jnp.sum(priv).astype(jnp.float32), "min_group": min_size}
