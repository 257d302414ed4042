"""Audits of the kit's training mechanisms: group-weighted aggregation, DP-SGD, DP-FERMI,
StratCOINPRESS, exponential sampling, budget tailoring's stages 1 and 2 and output perturbation.

Each builder returns ``(mechanism_fn(key, flag) -> scalar, info)`` for
:func:`dpfair_jax.audit.games.run_game`: ``flag = 0`` runs the real public code on ``D0``,
``flag = 1`` on its neighbour ``D1``, and the scalar is a white-box attack statistic (higher =
"``D1``"). ``info["claimed_epsilon"]``/``info["delta"]`` are what the kit's own accountant says the
run spends for that neighbouring relation. Trials are cheap (a few rows, a few steps), so tens of
thousands of trials per world run as one vmapped program.

Games ("gradient canary": the canary's gradient is a fixed, huge vector orthogonal to every other
example's, so the statistic is the canary direction's projection of the release):

* ``group_weighted``: :func:`dpfair_jax.privacy.aggregation.group_weighted_private_mean`;
  add/remove of a canary (through ``mask``) in the group with the smallest noise multiplier.
* ``dpsgd``: :func:`dpfair_jax.algorithms.dpsgd.train` with the per-example loss
  ``-<theta, x_i>`` (gradient ``-x_i`` whatever ``theta``), Poisson sampling at ``q = 1/2``, SGD at
  learning rate 1; add/remove of the canary row (``mask``). Statistic: ``theta_T[0]``.
* ``dpsgd_replace``: the same with ``sampling="fixed_size"`` (uniform batches without
  replacement), accounted under replace-one (sensitivity ``2C``): the canary row ``+s e_0`` is
  replaced by ``-s e_0``. Statistic: ``-theta_T[0]``.
* ``fermi_sensitive``: :func:`dpfair_jax.algorithms.fermi.fit`, ``privacy_unit=
  "sensitive_attribute"``: the canary's ``s`` flips from 0 to 1 (Definition 2.2). One full-batch
  step from ``W_0 = 0`` with public group frequencies; statistic ``W_1[0, 1, 1] - W_1[0, 0, 1]``
  (the canary alone moves the second column of ``W``; see :func:`fermi_mechanism`).
* ``stratified_coinpress``: :func:`dpfair_jax.algorithms.mean_estimation.stratified_coinpress`
  (two groups, two steps, public sizes): the canary row is replaced by its mirror image within
  its stratum (replace-one, the paper's relation). Statistic: the recombined estimate's first
  coordinate. The ``"noise"`` bug runs with ``rho`` x 100 (noise std / 10) and claims the nominal
  ``rho``.
* ``exponential_sampling``: :func:`dpfair_jax.algorithms.reductions.exponential_sampling`
  (paper 002, Alg. 1) on two candidates; one record is replaced (its loss moves from candidate 0
  to candidate 1). Statistic: whether candidate 0 was sampled. The ``"sensitivity"`` bug passes a
  10x larger public ``n`` (sensitivity 10x too small, i.e. the scores' noise 10x too small).
* ``fermi_all``: ``privacy_unit="all_features"``: add/remove of one example (``D1`` has one more
  row; both worlds are computed and selected by ``flag``, full batches so ``q = 1`` in both).
  Statistic: ``W_1[0, 0, 1]``.
* ``budget_tailoring``: one stage-2 noisy group release of paper 000
  (:func:`dpfair_jax.algorithms.budget_tailoring.noisy_group_release`, Algorithm 3, squared loss,
  ``T = 1``) at ``theta = 0`` with a public allocation that gives the smallest group the least
  noise; add/remove of a canary row in that group (its ``mask``; both worlds computed and selected
  by ``flag``). Statistic: the canary direction's coordinate of that group's released gradient.
  Claim: the stage-2 charges of :func:`~dpfair_jax.algorithms.budget_tailoring.budget_ledger`
  (per iteration) converted with ``accounting.zcdp_to_dp``. The ``"noise"`` bug runs with ``rho``
  x 100 (noise std / 10) and claims the nominal ``rho``.
* ``budget_tailoring_stage1``: stage 1 of paper 000
  (:func:`dpfair_jax.algorithms.budget_tailoring.stage1_standard_errors`, Algorithm 1, two groups,
  one feature); add/remove of a canary row ``x = 0``, ``|y| > Delta`` in group 0 (its squared
  residual sits at the clip bound ``Delta^2`` whatever the noisy OLS fit, and it adds nothing to
  ``X^T X`` or ``X^T y``, so only group 0's noisy residual sum ``S_0`` tells the worlds apart).
  Statistic: ``S_0 / Delta^2`` recovered from the released allocation, ``(se_0 / se_1)^2 (n_0 + 1)``
  (group 1's residuals are all clipped and it has many rows, so ``S_1 / n_1 ~ Delta^2``);
  ``-1`` when stage 1 reports its fallback (``S_0 <= 0``). Claim: the ledger's ``stage1/se[0]``
  charge (``tau / (K + 1)``) via ``accounting.zcdp_to_dp``. ``"noise"`` bug: ``rho`` x 100.
* ``output_perturbation``: paper 001's release
  (:func:`dpfair_jax.algorithms.output_perturbation.fit`, logistic, no intercept): replace-one,
  the canary's label flips; statistic: the released parameters' projection on
  ``theta*(D1) - theta*(D0)``. The ``"noise"`` bug perturbs with std / 10.

Planted bugs (the audit must report a lower bound above the claimed epsilon):

* ``"noise"``: noise multiplier 10x smaller than the one accounted for;
* ``"clipping"``: clipping disabled (clip norm x 1e4) while the noise std stays that of the
  nominal clip norm;
* ``"paper_w_noise"`` (DP-FERMI only): ``variant="paper"`` at ``lam = 4``, the W-noise of
  Algorithm 1 line 6 not scaled with ``lam`` (paper 004; notes II.5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.audit.games import audit_mechanism

__all__ = [
    "FAMILIES",
    "FAMILY_BUGS",
    "group_weighted_mechanism",
    "dpsgd_mechanism",
    "fermi_mechanism",
    "coinpress_mechanism",
    "exponential_sampling_mechanism",
    "budget_tailoring_mechanism",
    "budget_tailoring_stage1_mechanism",
    "output_perturbation_mechanism",
    "audit_family",
    "audit_family_variants",
    "mechanism_audit_suite",
    "SUITE_TRIALS",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "group_weighted": ("noise", "clipping"),
    "dpsgd": ("noise", "clipping"),
    "dpsgd_replace": ("noise",),
    "fermi_sensitive": ("noise",),
    "fermi_all": ("noise", "paper_w_noise"),
    "stratified_coinpress": ("noise",),
    "exponential_sampling": ("sensitivity",),
    "budget_tailoring": ("noise",),
    "budget_tailoring_stage1": ("noise",),
    "output_perturbation": ("noise",),
}
FAMILIES = tuple(FAMILY_BUGS)
_UNCLIPPED = 1e4  # clip-norm multiplier of the "clipping" bug


def _check_bug(family: str, bug: str | None) -> None:
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS[family])


def group_weighted_mechanism(
    *,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    bug: str | None = None,
    clip_norm: float = 1.0,
    n: int = 12,
    dim: int = 3,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """Group-weighted private mean with a canary in group 0 (two groups).

    Group 0's noise multiplier is the analytic Gaussian calibration (Balle & Wang 2018) of
    ``(epsilon, delta)`` at sensitivity 1; group 1 gets twice as much noise. Weights and
    denominators are public constants.

    Privacy: a member of group ``k`` is protected by the Gaussian mechanism with multiplier
    ``sigma_k`` (add/remove-one): here ``(epsilon, delta)``-DP for the canary.
    """
    from dpfair_jax.privacy import aggregation as agg
    from dpfair_jax.privacy.accounting import analytic_gaussian_sigma

    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_clip_norm(clip_norm)
    _check_bug("group_weighted", bug)
    n = V.check_int("n", n, minimum=2)
    dim = V.check_int("dim", dim, minimum=2)
    z0 = analytic_gaussian_sigma(epsilon, delta, 1.0)
    z = np.array([z0, 2.0 * z0])
    c = float(clip_norm)
    if bug == "noise":
        z = z / 10.0
    elif bug == "clipping":
        c, z = c * _UNCLIPPED, z / _UNCLIPPED
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)) * clip_norm
    x[:, 0] = 0.0
    x[-1] = 0.0
    x[-1, 0] = canary_scale * clip_norm  # the canary: last row, group 0
    s = np.arange(n) % 2
    s[-1] = 0
    s = jnp.asarray(s, jnp.int32)
    x = jnp.asarray(x, jnp.float32)
    weights = jnp.asarray([0.9, 0.1], jnp.float32)  # little of group 1's (larger) noise in the release
    den = jnp.asarray([n / 2.0, n / 2.0], jnp.float32)
    zj = jnp.asarray(z, jnp.float32)
    base_mask = jnp.ones((n,), jnp.float32).at[-1].set(0.0)
    canary_mask = jnp.zeros((n,), jnp.float32).at[-1].set(1.0)
    scale = float(den[0] / (weights[0] * clip_norm))

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        mask = base_mask + flag.astype(jnp.float32) * canary_mask
        out = agg.group_weighted_private_mean(
            key, x, s, 2, clip_norm=c, noise_multipliers=zj, group_weights=weights,
            denominators=den, mask=mask,
        )
        return out[0] * scale

    info = {"claimed_epsilon": float(epsilon), "delta": float(delta), "noise_multiplier": float(z0),
            "relation": "add_remove"}
    return mechanism_fn, info


def dpsgd_mechanism(
    *,
    noise_multiplier: float = 2.0,
    steps: int = 4,
    n: int = 64,
    batch_size: int = 32,
    delta: float = 1e-5,
    bug: str | None = None,
    clip_norm: float = 1.0,
    canary_scale: float = 100.0,
    sampling: str = "poisson",
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """DP-SGD (:func:`dpfair_jax.algorithms.dpsgd.train`) with a gradient canary.

    ``sampling="poisson"``: add/remove of the canary row (its mask). ``sampling="fixed_size"``:
    replace-one, the canary ``+s e_0`` becomes ``-s e_0`` (``dpsgd.privacy`` accounts sampling
    without replacement with sensitivity ``2C``).

    The per-example loss is ``-<theta, x_i>``; the canary row is ``canary_scale * C * e_0`` and the
    other rows are zero in coordinate 0. ``claimed_epsilon`` is ``dpsgd.privacy`` of the bug-free
    run (Poisson, ``q = batch_size / n``, RDP accountant; ``delta`` includes the charge for the
    padded batch's overflow, which is why ``n`` is not tiny: at ``n = 8`` it is 0.14).

    Privacy: Poisson-subsampled Gaussian mechanism, add/remove-one (the canary row's mask).
    """
    from dpfair_jax.algorithms import dpsgd

    V.check_noise_multiplier(noise_multiplier)
    V.check_delta(delta)
    V.check_clip_norm(clip_norm)
    V.check_choice("sampling", sampling, ("poisson", "fixed_size"))
    _check_bug("dpsgd" if sampling == "poisson" else "dpsgd_replace", bug)
    n = V.check_int("n", n, minimum=2)
    steps = V.check_int("steps", steps)
    batch_size = V.check_int("batch_size", batch_size)
    spend = dpsgd.privacy(float(noise_multiplier), n=n, batch_size=batch_size, delta=delta, steps=steps,
                          sampling=sampling)
    replace = sampling == "fixed_size"
    z, c = float(noise_multiplier), float(clip_norm)
    if bug == "noise":
        z = z / 10.0
    elif bug == "clipping":
        c, z = c * _UNCLIPPED, z / _UNCLIPPED
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)) * clip_norm
    x[:, 0] = 0.0
    x[-1] = 0.0
    x[-1, 0] = canary_scale * clip_norm
    x = jnp.asarray(x, jnp.float32)
    y = jnp.zeros((n,), jnp.float32)
    base_mask = jnp.ones((n,), jnp.float32).at[-1].set(0.0)
    canary_mask = jnp.zeros((n,), jnp.float32).at[-1].set(1.0)
    flip = jnp.zeros((n, 3), jnp.float32).at[-1, 0].set(-2.0 * canary_scale * clip_norm)
    params0 = {"w": jnp.zeros((3,), jnp.float32)}

    def loss(params, xi, yi):
        del yi
        return -jnp.dot(params["w"], xi)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        f = flag.astype(jnp.float32)
        if replace:
            data = (x + f * flip, y)
        else:
            data = (x, y, base_mask + f * canary_mask)
        params, _ = dpsgd.train(
            key, loss, params0, data, clip_norm=c, noise_multiplier=z, learning_rate=1.0,
            batch_size=batch_size, steps=steps, sampling=sampling, per_example="vmap",
            diagnostics=False,
        )
        stat = params["w"][0] * batch_size / clip_norm
        return -stat if replace else stat

    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(spend.delta),
            "noise_multiplier": float(noise_multiplier), "relation": spend.relation}
    return mechanism_fn, info


def fermi_mechanism(
    unit: str = "sensitive_attribute",
    *,
    noise_multiplier: float = 2.0,
    delta: float = 1e-5,
    lam: float = 1.0,
    bug: str | None = None,
    n: int = 32,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """One full-batch step of DP-FERMI (:func:`dpfair_jax.algorithms.fermi.fit`) as a game.

    ``unit="sensitive_attribute"``: ``D0``/``D1`` differ in the canary's ``s`` (0 vs 1).
    ``unit="all_features"``: ``D1`` has one more example (the canary). Logistic model without
    intercept from a fixed ``theta_0`` under which the canary is predicted positive with
    certainty (``F = [0, 1]``) and every other example negative (``F = [1, 0]``), so only the
    canary moves the ``W[:, :, 1]`` column; ``W_0 = 0``, public ``p_s``, ``lam`` as given (4 for ``bug="paper_w_noise"``, which runs ``variant="paper"``).
    ``claimed_epsilon`` is ``fermi.privacy`` of the run (both noisy updates composed, RDP).

    Privacy: sensitive-attribute DP (substitution of one ``s_i``) or add/remove-one DP
    (all features), as configured.
    """
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import fermi
    from dpfair_jax.data.dataset import Dataset

    family = "fermi_sensitive" if unit == "sensitive_attribute" else "fermi_all"
    V.check_choice("unit", unit, ("sensitive_attribute", "all_features"))
    V.check_noise_multiplier(noise_multiplier)
    V.check_delta(delta)
    V.check_positive("lam", lam)
    _check_bug(family, bug)
    n = V.check_int("n", n, minimum=4)
    if bug == "paper_w_noise":
        lam = 4.0
    variant = "paper" if bug == "paper_w_noise" else "corrected"
    model = M.logistic(fit_intercept=False, input_dim=2)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    x[:, 0] = -5.0
    x[-1, 0] = 5.0  # the canary
    y = (np.arange(n) % 2).astype(np.int32)
    s = (np.arange(n) // 2 % 2).astype(np.int32)
    s[-1] = 0
    p_s = jnp.asarray([0.5, 0.5], jnp.float32)
    z = float(noise_multiplier) / (10.0 if bug == "noise" else 1.0)
    hp = fermi.FermiHparams(lam=float(lam), lr_theta=0.01, lr_w=0.01, clip_theta=1.0, clip_w=1.0,
                            noise_theta=z, noise_w=z, radius=1e6)

    def config(rows: int) -> Any:
        return fermi.FermiConfig(model=model, num_groups=2, steps=1, batch_size=rows, fairness="dp",
                                 privacy_unit=unit, variant=variant, projection="none")

    theta0 = {"w": jnp.asarray([[10.0], [0.0]], jnp.float32)}
    if unit == "sensitive_attribute":
        cfg = config(n)
        spend = fermi.privacy(cfg, n, float(noise_multiplier), float(noise_multiplier), delta)
        xj, yj = jnp.asarray(x), jnp.asarray(y)
        s0 = jnp.asarray(s)
        onehot = jnp.zeros((n,), jnp.int32).at[-1].set(1)

        def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
            data = Dataset(xj, yj, s0 + flag.astype(jnp.int32) * onehot, 2)
            res = fermi.fit(key, data, hp, cfg, p_s=p_s, params0=theta0)
            return res.W[0, 1, 1] - res.W[0, 0, 1]
    else:
        cfg0, cfg1 = config(n - 1), config(n)
        spend = fermi.privacy(cfg0, n - 1, float(noise_multiplier), float(noise_multiplier), delta)
        d0 = Dataset(jnp.asarray(x[:-1]), jnp.asarray(y[:-1]), jnp.asarray(s[:-1]), 2)
        d1 = Dataset(jnp.asarray(x), jnp.asarray(y), jnp.asarray(s), 2)

        def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
            w0 = fermi.fit(key, d0, hp, cfg0, p_s=p_s, params0=theta0).W
            w1 = fermi.fit(key, d1, hp, cfg1, p_s=p_s, params0=theta0).W
            return jnp.where(flag == 1, w1[0, 0, 1], w0[0, 0, 1])

    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(spend.delta),
            "noise_multiplier": float(noise_multiplier), "relation": spend.relation,
            "unit": spend.unit, "lam": float(lam)}
    return mechanism_fn, info


def coinpress_mechanism(
    *,
    rhos: tuple[float, ...] = (0.0125, 0.0375),
    delta: float = 1e-5,
    bug: str | None = None,
    n: int = 20,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """StratCOINPRESS with a canary replaced by its mirror image in the same stratum.

    ``claimed_epsilon`` is ``mean_estimation.stratified_privacy(rhos, 2, delta)`` (zCDP total
    ``sum(rhos)`` by parallel composition over the strata, converted with CKS).

    Privacy: ``sum(rhos)``-zCDP under replace-one within a stratum (public group sizes).
    """
    from dpfair_jax.algorithms import mean_estimation as me

    V.check_delta(delta)
    _check_bug("stratified_coinpress", bug)
    n = V.check_int("n", n, minimum=4)
    r = np.asarray(rhos, np.float64)
    if r.ndim != 1 or r.size == 0 or not np.all(r > 0):
        raise ValueError(f"rhos must be a non-empty list of positive zCDP budgets, got {rhos!r}.")
    spend = me.stratified_privacy(tuple(float(v) for v in r), 2, delta)
    run_rhos = jnp.asarray(r * (100.0 if bug == "noise" else 1.0), jnp.float32)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    x[-1] = 0.0
    x[-1, 0] = canary_scale
    s = jnp.asarray(np.arange(n) % 2, jnp.int32)
    xj = jnp.asarray(x)
    flip = jnp.zeros((n, 2), jnp.float32).at[-1, 0].set(-2.0 * canary_scale)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        # flag 0: canary at +scale e_0; flag 1: at -scale e_0 (same stratum); higher = flag 1
        xs = xj + flag.astype(jnp.float32) * flip
        est = me.stratified_coinpress(key, xs, s, 2, center=0.0, radius=3.0, rhos=run_rhos)
        return -est.estimate[0]

    info = {"claimed_epsilon": float(spend.epsilon), "delta": float(delta), "rho": float(r.sum()),
            "relation": "replace_one"}
    return mechanism_fn, info


def exponential_sampling_mechanism(
    *,
    epsilon: float = 1.0,
    bug: str | None = None,
    n: int = 20,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """Exponential sampling over two candidates whose group losses one replaced record swaps.

    One group, ``f = max`` (1-Lipschitz), an inactive bounded-group-loss constraint and ``G = 0``,
    so the corrected sensitivity is ``1/n``. The other records' losses are equal for both
    candidates; the canary's loss is ``(1, 0)`` in ``D0`` and ``(0, 1)`` in ``D1``.

    Privacy: ``epsilon``-DP (pure) under replace-one.
    """
    from dpfair_jax.algorithms import reductions as R

    V.check_epsilon(epsilon)
    _check_bug("exponential_sampling", bug)
    n = V.check_int("n", n, minimum=2)
    problem = R.CGOO(R.max_objective(), R.bounded_group_loss(jnp.asarray([1.0])), 1)
    rng = np.random.default_rng(seed)
    base = rng.random(n).astype(np.float32)
    per_ex = np.stack([base, base])  # [2 candidates, n]
    per_ex[:, -1] = (1.0, 0.0)
    per_ex_j = jnp.asarray(per_ex)
    swap = jnp.zeros((2, n), jnp.float32).at[:, -1].set(jnp.asarray([-1.0, 1.0]))
    s = jnp.zeros((n,), jnp.int32)
    n_public = n * (10 if bug == "sensitivity" else 1)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        losses = R.group_losses(per_ex_j + flag.astype(jnp.float32) * swap, s, 1, n=n)  # [2, 1]
        idx = R.exponential_sampling(key, losses, problem, G=0.0, epsilon=float(epsilon), n=n_public)
        return (idx == 0).astype(jnp.float32)

    info = {"claimed_epsilon": float(epsilon), "delta": 0.0, "relation": "replace_one"}
    return mechanism_fn, info


def budget_tailoring_mechanism(
    *,
    rho: float = 0.0625,
    tau_fraction: float = 0.2,
    delta: float = 1e-5,
    bug: str | None = None,
    group_sizes: tuple[int, int] = (6, 12),
    se_smallest: float = 0.9,
    clip: float = 1.0,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """One stage-2 noisy group release of budget tailoring (paper 000) with a gradient canary.

    :func:`~dpfair_jax.algorithms.budget_tailoring.noisy_group_release` with ``Config(method=
    "dpse", steps=1, loss="squared")`` at ``theta = 0`` and the public allocation ``se =
    (sqrt(se_smallest), sqrt(1 - se_smallest))``: group 0 (the smaller one) gets the share
    ``se_smallest`` of the release's ``mu / T``. The canary (last row, group 0) is
    ``x = canary_scale * e_0, y = -1`` (gradient ``2 canary_scale e_0``, clipped to ``clip e_0``);
    every other row is 0 in coordinate 0. ``D0`` masks it out, ``D1`` keeps it (add/remove; the
    release divides by the group size, so the two worlds' scales differ by ``n_0 / (n_0 + 1)``,
    which only weakens the attack). ``claimed_epsilon``: the stage-2 charges of
    :func:`~dpfair_jax.algorithms.budget_tailoring.budget_ledger` divided by ``T`` (``= mu``),
    converted with :func:`dpfair_jax.privacy.accounting.zcdp_to_dp`.

    Privacy: ``mu / T``-zCDP under add/remove-one (group sizes public).
    """
    from dpfair_jax.algorithms import budget_tailoring as bt
    from dpfair_jax.data.dataset import make_dataset
    from dpfair_jax.privacy.accounting import zcdp_to_dp

    V.check_rho(rho)
    V.check_delta(delta)
    V.check_clip_norm(clip, "clip")
    _check_bug("budget_tailoring", bug)
    if not 0.0 < float(tau_fraction) < 1.0:
        raise ValueError(f"tau_fraction must lie in (0, 1), got {tau_fraction!r}.")
    if not 0.0 < float(se_smallest) < 1.0:
        raise ValueError(f"se_smallest must lie in (0, 1), got {se_smallest!r}.")
    n0, n1 = (V.check_int("group_sizes", g, minimum=2) for g in group_sizes)
    cfg = bt.Config(method="dpse", steps=1, loss="squared", fit_intercept=False)
    se = np.sqrt(np.array([se_smallest, 1.0 - se_smallest]))
    ledger = bt.budget_ledger(float(rho), se, config=cfg, tau_fraction=float(tau_fraction))
    rho_release = sum(float(v) for k, v in ledger.charges.items() if k.startswith("stage2/")) / cfg.steps
    claimed = zcdp_to_dp(rho_release, delta)
    run_rho = float(rho) * (100.0 if bug == "noise" else 1.0)
    hp = bt.Hyperparams(rho=run_rho, tau_fraction=float(tau_fraction), clip=float(clip))
    n = n0 + n1 + 1
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    x[:, 0] = 0.0
    y = rng.normal(size=(n,)).astype(np.float32)
    s = np.concatenate([np.zeros(n0, np.int32), np.ones(n1, np.int32), np.zeros(1, np.int32)])
    x[-1] = (canary_scale, 0.0)
    y[-1] = -1.0
    mask0 = np.ones(n, np.float32)
    mask0[-1] = 0.0
    d0 = make_dataset(x, y, s, num_groups=2, num_classes=0, mask=mask0)
    d1 = make_dataset(x, y, s, num_groups=2, num_classes=0)
    theta = jnp.zeros((2,), jnp.float32)
    sej = jnp.asarray(se, jnp.float32)
    scale = float(n0 + 1) / float(clip)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        m0, _ = bt.noisy_group_release(key, d0, theta, sej, hp, cfg)
        m1, _ = bt.noisy_group_release(key, d1, theta, sej, hp, cfg)
        return jnp.where(flag == 1, m1[0, 0], m0[0, 0]) * scale

    info = {"claimed_epsilon": float(claimed), "delta": float(delta), "rho": float(rho_release),
            "relation": bt.privacy(cfg, rho_release, delta).relation}
    return mechanism_fn, info


def budget_tailoring_stage1_mechanism(
    *,
    rho: float = 0.75,
    tau_fraction: float = 0.2,
    delta: float = 1e-5,
    bug: str | None = None,
    group_sizes: tuple[int, int] = (50, 500),
    clip: float = 2.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """Stage 1 of budget tailoring (paper 000, Algorithm 1) with a residual canary in group 0.

    :func:`~dpfair_jax.algorithms.budget_tailoring.stage1_standard_errors` with ``Config(method=
    "dpse", steps=1, fit_intercept=False)``, one feature, two groups. Group 0: ``n_0`` rows
    ``x = 0, y = 0`` (residual exactly 0) plus the canary ``x = 0, y = 10 clip`` (squared residual
    ``100 clip^2``, clipped to the bound ``clip^2``; it adds nothing to ``X^T X`` or ``X^T y``).
    Group 1: ``n_1`` rows ``x = +-3``, ``y = +-1000`` (``X^T X`` far from its noise; every squared
    residual clipped, so ``S_1 = n_1 clip^2`` plus noise of relative size ``~1%``). ``D0`` masks the
    canary out, ``D1`` keeps it (add/remove; both worlds computed, selected by ``flag``).

    The worlds differ only in group 0's noisy clipped residual sum ``S_0`` (the other releases are
    independent and identically distributed), so the claim is that release's charge: the
    ``stage1/se[0]`` entry of :func:`~dpfair_jax.algorithms.budget_tailoring.budget_ledger`
    (``tau_k = tau / (K + 1) = 0.05`` at the defaults), converted with
    :func:`dpfair_jax.privacy.accounting.zcdp_to_dp`. Statistic (from the public output):
    ``(se_0 / se_1)^2 (n_0 + 1)``, i.e. about ``S_0 / clip^2`` in ``D1`` (``D0``'s
    is scaled by ``(n_0 + 1) / n_0``, which only weakens the attack); ``-1`` when stage 1 returns
    its fallback (some ``S_k <= 0``).

    Privacy: the whole stage 1 is ``tau``-zCDP under add/remove-one (group sizes public); this
    pair of neighbours is distinguished by one ``tau_k``-zCDP release.
    """
    from dpfair_jax.algorithms import budget_tailoring as bt
    from dpfair_jax.data.dataset import make_dataset
    from dpfair_jax.privacy.accounting import zcdp_to_dp

    V.check_rho(rho)
    V.check_delta(delta)
    V.check_clip_norm(clip, "clip")
    _check_bug("budget_tailoring_stage1", bug)
    if not 0.0 < float(tau_fraction) < 1.0:
        raise ValueError(f"tau_fraction must lie in (0, 1), got {tau_fraction!r}.")
    n0, n1 = (V.check_int("group_sizes", g, minimum=2) for g in group_sizes)
    cfg = bt.Config(method="dpse", steps=1, loss="squared", fit_intercept=False)
    ledger = bt.budget_ledger(float(rho), np.full((2,), np.sqrt(0.5)), config=cfg,
                              tau_fraction=float(tau_fraction))
    rho_release = float(ledger.charges["stage1/se[0]"])
    claimed = zcdp_to_dp(rho_release, delta)
    run_rho = float(rho) * (100.0 if bug == "noise" else 1.0)
    hp = bt.Hyperparams(rho=run_rho, tau_fraction=float(tau_fraction), clip=float(clip))
    n = n0 + n1 + 1
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1), np.float32)
    y = np.zeros((n,), np.float32)
    x[n0:n0 + n1, 0] = 3.0 * rng.choice([-1.0, 1.0], size=n1)
    y[n0:n0 + n1] = 1000.0 * rng.choice([-1.0, 1.0], size=n1)
    s = np.concatenate([np.zeros(n0, np.int32), np.ones(n1, np.int32), np.zeros(1, np.int32)])
    y[-1] = 10.0 * float(clip)  # the canary: x = 0, residual^2 clipped to clip^2
    mask0 = np.ones(n, np.float32)
    mask0[-1] = 0.0
    d0 = make_dataset(x, y, s, num_groups=2, num_classes=0, mask=mask0)
    d1 = make_dataset(x, y, s, num_groups=2, num_classes=0)
    scale = float(n0 + 1)  # (se_0/se_1)^2 = (S_0/n_0')/(S_1/n_1) and S_1/n_1 ~ clip^2

    def stat(key: jax.Array, data: Any) -> jax.Array:
        se, fallback, _ = bt.stage1_standard_errors(key, data, hp, cfg)
        return jnp.where(fallback, -1.0, (se[0] / se[1]) ** 2 * scale)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        return jnp.where(flag == 1, stat(key, d1), stat(key, d0))

    info = {"claimed_epsilon": float(claimed), "delta": float(delta), "rho": rho_release,
            "relation": bt.privacy(cfg, rho_release, delta).relation}
    return mechanism_fn, info


def output_perturbation_mechanism(
    *,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    bug: str | None = None,
    n: int = 10,
    reg: float = 1.0,
    radius: float = 1.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """Output perturbation (paper 001) of L2-regularized logistic regression, replace-one.

    Two features, no intercept, rows of norm ``<= radius`` (the public bound). The canary (last
    row) is ``radius * e_0`` with label 1 in ``D0`` and 0 in ``D1``; every other row is 0 in
    coordinate 0, so only ``theta*_0`` moves. With ``n reg >> radius^2`` the minimizer sits near 0,
    where the canary's gradient changes by ``radius`` (a logistic gradient's change is at most
    ``radius`` at a fixed ``theta``): the move is close to half the worst-case sensitivity
    ``2 L / (n reg)``. The two non-private minimizers are computed once (deterministic); each
    trial draws the release's noise with
    :func:`~dpfair_jax.algorithms.output_perturbation.perturb` at the std that
    :func:`~dpfair_jax.algorithms.output_perturbation.fit` uses (``/ 10`` for ``bug="noise"``).
    ``claimed_epsilon``: ``fit``'s spend (the analytic Gaussian's ``(epsilon, delta)``).

    Privacy: ``(epsilon, delta)``-DP under replace-one.
    """
    from dpfair_jax.algorithms import output_perturbation as op

    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_positive("reg", reg)
    V.check_positive("radius", radius)
    _check_bug("output_perturbation", bug)
    n = V.check_int("n", n, minimum=2)
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 2), np.float32)
    x[:, 1] = rng.uniform(-1.0, 1.0, size=n) * radius
    y = (np.arange(n) % 2).astype(np.int32)
    x[-1] = (radius, 0.0)
    y0, y1 = y.copy(), y.copy()
    y0[-1], y1[-1] = 1, 0
    kw = dict(epsilon=float(epsilon), delta=float(delta), reg=float(reg), radius=float(radius),
              loss="logistic", fit_intercept=False)
    r0 = op.fit(jax.random.key(seed), (jnp.asarray(x), jnp.asarray(y0)), **kw)
    r1 = op.fit(jax.random.key(seed), (jnp.asarray(x), jnp.asarray(y1)), **kw)
    std = r0.std / (10.0 if bug == "noise" else 1.0)
    t0, t1 = r0.theta_star, r1.theta_star
    direction = (t1 - t0) / jnp.linalg.norm(t1 - t0)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        theta = op.perturb(key, jnp.where(flag == 1, t1, t0), std)
        return jnp.dot(theta, direction)

    info = {"claimed_epsilon": float(r0.spend.epsilon), "delta": float(r0.spend.delta),
            "sensitivity": float(r0.sensitivity), "std": float(r0.std),
            "shift": float(jnp.linalg.norm(t1 - t0)), "relation": r0.spend.relation}
    return mechanism_fn, info


def _build(family: str, bug: str | None, **kwargs: Any):
    if family == "budget_tailoring_stage1":
        return budget_tailoring_stage1_mechanism(bug=bug, **kwargs)
    if family == "budget_tailoring":
        return budget_tailoring_mechanism(bug=bug, **kwargs)
    if family == "output_perturbation":
        return output_perturbation_mechanism(bug=bug, **kwargs)
    if family == "exponential_sampling":
        return exponential_sampling_mechanism(bug=bug, **kwargs)
    if family == "stratified_coinpress":
        return coinpress_mechanism(bug=bug, **kwargs)
    if family == "group_weighted":
        return group_weighted_mechanism(bug=bug, **kwargs)
    if family == "dpsgd":
        return dpsgd_mechanism(bug=bug, **kwargs)
    if family == "dpsgd_replace":
        kwargs.setdefault("noise_multiplier", 6.0)  # replace-one halves the accounted multiplier
        return dpsgd_mechanism(bug=bug, sampling="fixed_size", **kwargs)
    if family == "fermi_sensitive":
        return fermi_mechanism("sensitive_attribute", bug=bug, **kwargs)
    return fermi_mechanism("all_features", bug=bug, **kwargs)


def _variants_trial(fns: tuple) -> Callable[[jax.Array], jax.Array]:
    """One trial of every variant and both worlds: ``[num_variants, 2]`` statistics."""

    def trial(k: jax.Array) -> jax.Array:
        flags = jnp.array([0, 1], dtype=jnp.int32)
        keys = jax.random.split(k, len(fns))
        return jnp.stack([jnp.reshape(jax.vmap(fn)(jax.random.split(kk, 2), flags), (2,))
                          for fn, kk in zip(fns, keys)])

    return trial


def audit_family_variants(
    key: jax.Array,
    family: str,
    bugs: tuple[str | None, ...] | None = None,
    *,
    num_trials: int = 4000,
    confidence: float = 0.95,
    chunk_size: int | None = 2000,
    mesh: Any = None,
    **mechanism_kwargs: Any,
) -> list[dict[str, Any]]:
    """Audit rows for several variants of one family (``None`` = bug-free; default: bug-free and
    every bug of ``FAMILY_BUGS[family]``), all trials of all variants and both worlds in ONE
    compiled program (:func:`dpfair_jax.montecarlo.run_trials`).

    Each row has the :data:`~dpfair_jax.audit.games.AUDIT_COLUMNS` plus ``threshold``,
    ``selection`` and ``relation``. ``passed``: lower bound <= claimed epsilon for the bug-free
    variant, > claimed epsilon for a planted bug (see :func:`~dpfair_jax.audit.games.audit_mechanism`).
    """
    from dpfair_jax import montecarlo
    from dpfair_jax.audit.lower_bounds import epsilon_lower_bound_from_scores

    V.check_choice("family", family, FAMILIES)
    V.check_threefry_key(key)
    bugs = (None,) + FAMILY_BUGS[family] if bugs is None else tuple(bugs)
    if not bugs:
        raise ValueError("bugs must name at least one variant (None = bug-free).")
    for b in bugs:
        _check_bug(family, b)
    num_trials = V.check_int("num_trials", num_trials, minimum=4)
    c = V.as_float("confidence", confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
    built = [_build(family, b, **mechanism_kwargs) for b in bugs]
    trial = _variants_trial(tuple(fn for fn, _ in built))
    chunk = min(chunk_size, num_trials) if chunk_size else None
    out = np.asarray(montecarlo.run_trials(trial, key, num_trials, chunk_size=chunk, mesh=mesh),
                     dtype=np.float64)  # [T, V, 2]
    rows = []
    for j, (b, (_, info)) in enumerate(zip(bugs, built)):
        bound = epsilon_lower_bound_from_scores(out[:, j, 1], out[:, j, 0], info["delta"], c)
        lb, eps = float(bound.epsilon_lower_bound), float(info["claimed_epsilon"])
        rows.append({
            "mechanism": family, "planted_bug": b or "none", "claimed_epsilon": eps,
            "delta": float(info["delta"]), "epsilon_lower_bound": lb, "confidence": c,
            "trials": num_trials, "passed": bool(lb > eps if b else lb <= eps),
            "threshold": float(bound.threshold), "selection": bound.selection,
            "relation": info["relation"],
        })
    return rows


def audit_family(
    key: jax.Array,
    family: str,
    *,
    bug: str | None = None,
    num_trials: int = 4000,
    confidence: float = 0.95,
    chunk_size: int | None = 2000,
    **mechanism_kwargs: Any,
) -> dict[str, Any]:
    """Audit row (:func:`dpfair_jax.audit.games.audit_mechanism` columns, plus ``relation``) for one
    mechanism family of :data:`FAMILIES`, bug-free or with one of ``FAMILY_BUGS[family]``."""
    V.check_choice("family", family, FAMILIES)
    _check_bug(family, bug)
    num_trials = V.check_int("num_trials", num_trials, minimum=4)
    fn, info = _build(family, bug, **mechanism_kwargs)
    row = audit_mechanism(
        fn, key, mechanism=family, claimed_epsilon=info["claimed_epsilon"], delta=info["delta"],
        num_trials=num_trials, planted_bug=bug, confidence=confidence,
        chunk_size=min(chunk_size, num_trials) if chunk_size else None,
    )
    row["relation"] = info["relation"]
    return row


# trials per world: the DP-FERMI games need more (their power check compares with an RDP bound of
# two composed Gaussians); every trial is a few rows and one to four steps, so this is cheap.
SUITE_TRIALS = {"quick": {"group_weighted": 4000, "dpsgd": 4000, "dpsgd_replace": 4000, "fermi_sensitive": 20000,
                          "fermi_all": 20000, "stratified_coinpress": 20000, "exponential_sampling": 20000,
                          "budget_tailoring": 4000, "budget_tailoring_stage1": 4000,
                          "output_perturbation": 20000},
                "full": {"group_weighted": 50000, "dpsgd": 50000, "dpsgd_replace": 50000, "fermi_sensitive": 100000,
                         "fermi_all": 100000, "stratified_coinpress": 100000, "exponential_sampling": 100000,
                         "budget_tailoring": 50000, "budget_tailoring_stage1": 50000,
                         "output_perturbation": 100000}}


def mechanism_audit_suite(
    key: jax.Array, *, quick: bool = True, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """Every family of :data:`FAMILIES`, bug-free and with each of its planted bugs (one compiled
    program per family), at the :data:`SUITE_TRIALS` sizes."""
    import zlib

    trials = SUITE_TRIALS["quick" if quick else "full"]
    rows: list[dict[str, Any]] = []
    for fam in FAMILIES:  # each family's key depends on its name only (stable when families are added)
        k = jax.random.fold_in(key, zlib.crc32(fam.encode()) & 0x7FFFFFFF)
        rows += audit_family_variants(k, fam, num_trials=trials[fam], confidence=confidence)
    return rows
