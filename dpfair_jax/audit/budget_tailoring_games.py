"""Audit games of budget tailoring (paper 000) on its default path, with its planted bugs.

Three families, each a builder with the contract of :mod:`dpfair_jax.audit.mechanism_audits`
(``builder(*, bug=None, **kw) -> (mechanism_fn(key, flag) -> scalar, info)``, ``info`` with
``claimed_epsilon``, ``delta`` and ``relation``).

* ``budget_tailoring_fit``: the whole run as a :class:`~dpfair_jax.audit.fit_spend.FitSpendGame`
  on ``budget_tailoring.fit`` / ``budget_tailoring.spend`` (``Config(steps=1)``, see
  :func:`budget_tailoring_fit_game`); bugs ``"noise"`` (rho x 100), ``"clipping"`` and
  ``"cross_group"`` (the former label: the within-group spend claimed for a canary that moves to
  the other group; the run reports the exact group sizes, ``diagnostics["counts"]``, so the
  statistic ``-counts[0]`` separates the worlds with certainty. Honestly labelled, the game is
  refused: :meth:`~dpfair_jax.audit.fit_spend.FitSpendGame.spend` with ``relation="replace_one"``
  raises, the spend covering ``"replace_one_within_group"`` only).

The whole run's claim is its total ``rho`` (stage 1, every stage-2 iteration and every group),
several times what one canary can show, so the finer bugs (noise std / 2, the former private
denominator and stage-1 clip) are audited on one release each, against that release's item of
:func:`~dpfair_jax.algorithms.budget_tailoring.budget_ledger` (the charge the ledger gives it, a
part of ``spend``'s total). These two families drive the public sub-release entry points of
:mod:`dpfair_jax.algorithms.budget_tailoring` on ``Config()``, the default configuration
(``method="dpse"``, ``steps=50``, ``relation="replace_one_within_group"``, ``scaling="group_mean"``,
``stage1_clip="delta_sq"``), with the group sizes computed from the data as the default path
does. Both worlds are computed in every trial and selected by ``flag``.

* ``budget_tailoring``: one stage-2 release, :func:`~dpfair_jax.algorithms.budget_tailoring.
  noisy_group_release` (Algorithm 3: per-group clipped gradient sum plus Gaussian noise, divided
  by the group size) at ``theta = 0`` with the public allocation ``se = (sqrt(se_smallest),
  sqrt(1 - se_smallest))``. One feature. Group 0 holds ``n_0`` rows ``x = 100, y = 1`` (clipped
  gradient ``-Delta``: the group mean is ``-Delta``, not 0, so a private denominator shows) and
  the canary row ``x = 100, y = -1`` (clipped gradient ``+Delta``) in ``D1``. Under replace-one
  within a group ``D0`` replaces the canary by another ``y = 1`` row of group 0 (sizes unchanged); under
  add/remove ``D0`` leaves it out. Statistic: the Gaussian log-likelihood ratio of group 0's
  released coordinate, with the two worlds' means and stds as the design and the variant's noise
  calibration give them (a quadratic when the stds differ, as with a private denominator).
  Claim: the ledger's stage-2 charges over ``T`` (one iteration; plus the counts' charge under
  add/remove) converted with :func:`dpfair_jax.privacy.accounting.zcdp_to_dp`.
* ``budget_tailoring_stage1``: stage 1, :func:`~dpfair_jax.algorithms.budget_tailoring.
  stage1_standard_errors` (Algorithm 1) with a clip ``Delta = 0.25 < 1``. Group 0: ``n_0`` rows
  ``x = 0, y = 10`` (squared residual 100, beyond the clip whatever the noisy pooled fit, and
  nothing added to ``X^T X`` or ``X^T y``), plus the canary ``x = 0, y = 10`` in ``D1`` replaced
  by ``x = 0, y = 0`` in ``D0`` (left out under add/remove). Group 1: ``n_1`` rows ``x = +-3, y =
  +-1000`` (``X^T X`` far from its noise, every residual clipped, so ``S_1 / n_1`` is the clip
  bound ``B`` up to ~0.1%). Only group 0's noisy residual sum ``S_0`` differs between the
  worlds. Statistic: ``S_0 / B`` read back from the released allocation, ``(se_0 / se_1)^2
  n_0'`` (``n_0'`` the rows of group 0 in ``D1``), ``-1`` when stage 1 reports its fallback.
  Claim: the ledger's ``stage1/se[0]`` charge ``tau / (K + 1)`` (plus the counts' under
  add/remove) via ``zcdp_to_dp``.

``delta = 0.05`` by default: a rho-zCDP claim implies ``(zcdp_to_dp(rho, delta), delta)``-DP for
every delta, and a sampled audit of a Gaussian release has the most power where that
conversion is tight, i.e. where the rates it can resolve with a few thousand trials live.

Planted bugs (each must be caught: lower bound above the claimed epsilon):

* ``"noise"``: the run uses ``rho x 100`` (noise std / 10) and claims the nominal rho.
* ``"noise_half"``: ``rho x 4`` (noise std / 2), nominal claim.
* ``"private_denominator"`` (stage 2): the old default, add/remove with the exact ``n_k`` as
  denominator and the noise of the clipped-sum sensitivity ``Delta``, claiming the old accounting
  (``mu / T`` per release under add/remove). Built from the public code: ``relation=
  "replace_one_within_group"`` divides by the exact (masked) group size, and ``rho x 4`` turns its ``2 Delta``
  calibration into the old ``Delta`` one; the game is add/remove (``D0`` leaves the canary out).
* ``"stage1_paper_clip"`` (stage 1): ``stage1_clip="paper"`` (squared residuals clipped to
  ``[0, Delta]``) with the old noise for sensitivity ``Delta^2`` (the run uses ``rho /
  Delta^2``, which scales the corrected ``max(Delta, Delta^2) = Delta`` noise down by
  ``Delta``), claiming the nominal ``tau_k``; with ``Delta = 0.25`` the true rho is 16 times the
  claim.

Builder keywords ``relation="add_remove"`` (both families) and ``stage1_clip="paper"`` (stage 1)
audit the corrected non-default options with the same games (add/remove: noisy counts charged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.audit.fit_spend import UNCLIPPED, FitSpendGame, replace_fields
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy.accounting import zcdp_to_dp
from dpfair_jax.privacy.relations import REPLACE_ONE_WITHIN_GROUP, relation_name

__all__ = [
    "ALGORITHMS",
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "budget_tailoring_mechanism",
    "budget_tailoring_stage1_mechanism",
    "budget_tailoring_fit_game",
    "budget_tailoring_fit_mechanism",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "budget_tailoring": ("noise", "noise_half", "private_denominator"),
    "budget_tailoring_stage1": ("noise", "noise_half", "stage1_paper_clip"),
    "budget_tailoring_fit": ("noise", "clipping", "cross_group"),
}
ALGORITHMS: dict[str, str] = {"budget_tailoring": "budget_tailoring", "budget_tailoring_stage1": "budget_tailoring",
                              "budget_tailoring_fit": "budget_tailoring"}

# trials per world (each trial is a few rows and one release, so both sizes are cheap)
SUITE_TRIALS = {
    "quick": {"budget_tailoring": 8000, "budget_tailoring_stage1": 8000, "budget_tailoring_fit": 4000},
    "full": {"budget_tailoring": 100000, "budget_tailoring_stage1": 100000, "budget_tailoring_fit": 50000},
}

_RHO_FACTOR = {"noise": 100.0, "noise_half": 4.0}  # run rho x factor <=> noise std / sqrt(factor)


def _check_common(family: str, bug: str | None, rho_release: float, delta: float,
                  relation: Any) -> str:
    """Checks the arguments the two families share; returns the relation's name."""
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS[family])
    V.check_rho(rho_release, "rho_release")
    V.check_delta(delta)
    relation = relation_name(relation)
    if bug is not None and relation != REPLACE_ONE_WITHIN_GROUP:
        raise ValueError("the planted bugs are defined on the default relation; pass "
                         f"relation='{REPLACE_ONE_WITHIN_GROUP}' (the default) with a bug.")
    return relation


def _gaussian_llr(m0: float, s0: float, m1: float, s1: float) -> Callable[[jax.Array], jax.Array]:
    """log N(v; m1, s1^2) - log N(v; m0, s0^2) (higher = "canary in")."""

    def llr(v: jax.Array) -> jax.Array:
        return (jnp.log(s0 / s1) - 0.5 * ((v - m1) / s1) ** 2 + 0.5 * ((v - m0) / s0) ** 2)

    return llr


def _stage2_neighbours(game: str, n0: int, n1: int, canary_scale: Any, clip: Any, seed: int) -> tuple:
    """``(D0, D1, group-0 sizes, group-0 clipped gradient sums)`` of the stage-2 game: group 0 =
    ``n0`` rows (gradient ``-Delta``) + the canary slot (last row), group 1 = ``n1`` unrelated
    rows; the canary's clipped gradient is ``+Delta`` in ``D1``, and in ``D0`` it is replaced by
    another row of group 0 (``game`` replace-one within a group) or left out (add/remove)."""
    n = n0 + n1 + 1
    rng = np.random.default_rng(seed)
    x = np.empty((n, 1), np.float32)
    y = np.empty((n,), np.float32)
    x[:n0, 0], y[:n0] = canary_scale, 1.0
    x[n0:n0 + n1, 0] = rng.normal(size=n1)
    y[n0:n0 + n1] = rng.normal(size=n1)
    x[-1, 0] = canary_scale
    s = np.r_[np.zeros(n0, np.int32), np.ones(n1, np.int32), np.zeros(1, np.int32)]
    y1 = y.copy()
    y1[-1] = -1.0  # canary: clipped gradient +Delta
    if game == REPLACE_ONE_WITHIN_GROUP:
        y0 = y.copy()
        y0[-1] = 1.0  # replaced by another row of group 0 (gradient -Delta)
        d0 = make_dataset(x, y0, s, num_groups=2, num_classes=0)
        sizes = (n0 + 1, n0 + 1)
        sums = (-(n0 + 1) * clip, -(n0 - 1) * clip)
    else:
        mask0 = np.ones(n, np.float32)
        mask0[-1] = 0.0
        d0 = make_dataset(x, y1, s, num_groups=2, num_classes=0, mask=mask0)
        sizes = (n0, n0 + 1)
        sums = (-n0 * clip, -(n0 - 1) * clip)
    return d0, make_dataset(x, y1, s, num_groups=2, num_classes=0), sizes, sums


def budget_tailoring_mechanism(
    *,
    bug: str | None = None,
    rho_release: float = 0.5,
    delta: float = 0.05,
    relation: Any = REPLACE_ONE_WITHIN_GROUP,
    group_sizes: tuple[int, int] = (1, 8),
    se_smallest: float = 0.99,
    clip: float = 1.0,
    canary_scale: float = 100.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """One stage-2 release of budget tailoring on the default configuration (see the module).

    ``rho_release``: the per-iteration stage-2 charge ``mu / T`` the run is configured for (the
    whole-run ``rho`` is derived from it). ``group_sizes = (n_0, n_1)``: group 0 has ``n_0`` rows
    besides the canary (``n_0 >= 1``; 1 makes a private denominator halve the std), group 1
    ``n_1`` unrelated rows.

    Privacy: ``mu / T``-zCDP per release under ``relation`` (public sizes under replace-one;
    noisy counts, charged, under add/remove).
    """
    relation = _check_common("budget_tailoring", bug, rho_release, delta, relation)
    V.check_clip_norm(clip, "clip")
    if not 0.0 < float(se_smallest) < 1.0:
        raise ValueError(f"se_smallest must lie in (0, 1), got {se_smallest!r}.")
    n0, n1 = (V.check_int("group_sizes", g, minimum=1) for g in group_sizes)
    game = "add_remove" if (bug == "private_denominator" or relation == "add_remove") else relation
    cfg = bt.Config(relation=relation)  # default configuration (private_denominator: see module)
    defaults = bt.Hyperparams()
    tf, cf = float(defaults.tau_fraction), float(defaults.count_fraction)
    steps = cfg.steps
    kept = (1.0 - tf) * ((1.0 - cf) if relation == "add_remove" else 1.0)  # mu / rho
    rho = float(rho_release) * steps / kept
    se = np.sqrt(np.array([se_smallest, 1.0 - se_smallest]))
    ledger = bt.budget_ledger(rho, se, config=cfg, tau_fraction=tf, count_fraction=cf)
    claimed_rho = (sum(float(v) for k, v in ledger.charges.items() if k.startswith("stage2/")) / steps
                   + float(ledger.charges.get("counts", 0.0)))
    claimed = zcdp_to_dp(claimed_rho, delta)
    factor = 4.0 if bug == "private_denominator" else _RHO_FACTOR.get(bug, 1.0)
    run_rho = rho * factor
    hp = bt.Hyperparams(rho=run_rho, tau_fraction=tf, clip=float(clip), count_fraction=cf)

    d0, d1, sizes, sums = _stage2_neighbours(game, n0, n1, canary_scale, clip, seed)
    mu_run = run_rho * kept
    sigma_sum = float(bt.group_noise_stds(se, mu_run, steps, clip, relation=cfg.relation)[0][0])
    llr = _gaussian_llr(sums[0] / sizes[0], sigma_sum / sizes[0], sums[1] / sizes[1],
                        sigma_sum / sizes[1])
    theta = jnp.zeros((1,), jnp.float32)
    sej = jnp.asarray(se, jnp.float32)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        m0, _ = bt.noisy_group_release(key, d0, theta, sej, hp, cfg)
        m1, _ = bt.noisy_group_release(key, d1, theta, sej, hp, cfg)
        return llr(jnp.where(flag == 1, m1[0, 0], m0[0, 0]))

    info = {"claimed_epsilon": float(claimed), "delta": float(delta), "rho": claimed_rho,
            "relation": game, "run_rho": run_rho}
    return mechanism_fn, info


def budget_tailoring_stage1_mechanism(
    *,
    bug: str | None = None,
    rho_release: float = 0.5,
    delta: float = 0.05,
    relation: Any = REPLACE_ONE_WITHIN_GROUP,
    stage1_clip: str = "delta_sq",
    group_sizes: tuple[int, int] = (5, 500),
    clip: float = 0.25,
    residual: float = 10.0,
    seed: int = 0,
) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """Stage 1 of budget tailoring on the default configuration with a residual canary beyond a
    clip ``Delta < 1`` in group 0 (see the module).

    ``rho_release``: the charge ``tau_k = tau / (K + 1)`` of group 0's residual sum (the
    whole-run ``rho`` is derived from it). ``stage1_clip``: the bug-free variant's option
    (``"delta_sq"``, the default, or the corrected ``"paper"``).

    Privacy: stage 1 is ``tau``-zCDP under ``relation``; this pair of neighbours differs in one
    ``tau_k``-zCDP release (plus the noisy counts under add/remove).
    """
    relation = _check_common("budget_tailoring_stage1", bug, rho_release, delta, relation)
    V.check_clip_norm(clip, "clip")
    V.check_choice("stage1_clip", stage1_clip, ("delta_sq", "paper"))
    if bug == "stage1_paper_clip":
        if not clip < 1.0:
            raise ValueError(f"the stage1_paper_clip bug shows only for clip < 1, got {clip!r}.")
        stage1_clip = "paper"
    if not abs(float(residual)) > max(clip, clip**2) ** 0.5:
        raise ValueError(f"residual must exceed the clip (|residual|^2 > bound), got {residual!r}.")
    n0, n1 = (V.check_int("group_sizes", g, minimum=2) for g in group_sizes)
    cfg = bt.Config(relation=relation, stage1_clip=stage1_clip)
    defaults = bt.Hyperparams()
    tf, cf = float(defaults.tau_fraction), float(defaults.count_fraction)
    k = 2
    kept = (1.0 - cf) if relation == "add_remove" else 1.0
    rho = float(rho_release) * (k + 1) / (tf * kept)
    ledger = bt.budget_ledger(rho, np.full((k,), np.sqrt(0.5)), config=cfg, tau_fraction=tf,
                              count_fraction=cf)
    claimed_rho = float(ledger.charges["stage1/se[0]"]) + float(ledger.charges.get("counts", 0.0))
    claimed = zcdp_to_dp(claimed_rho, delta)
    factor = 1.0 / clip**2 if bug == "stage1_paper_clip" else _RHO_FACTOR.get(bug, 1.0)
    hp = bt.Hyperparams(rho=rho * factor, tau_fraction=tf, clip=float(clip), count_fraction=cf)

    n = n0 + n1 + 1
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1), np.float32)
    y = np.zeros((n,), np.float32)
    y[:n0] = residual
    x[n0:n0 + n1, 0] = 3.0 * rng.choice([-1.0, 1.0], size=n1)
    y[n0:n0 + n1] = 1000.0 * rng.choice([-1.0, 1.0], size=n1)
    s = np.r_[np.zeros(n0, np.int32), np.ones(n1, np.int32), np.zeros(1, np.int32)]
    y1 = y.copy()
    y1[-1] = residual  # the canary: x = 0, squared residual beyond the clip
    d1 = make_dataset(x, y1, s, num_groups=2, num_classes=0)
    if relation == REPLACE_ONE_WITHIN_GROUP:
        d0 = make_dataset(x, y, s, num_groups=2, num_classes=0)  # canary replaced by x = 0, y = 0
    else:
        mask0 = np.ones(n, np.float32)
        mask0[-1] = 0.0
        d0 = make_dataset(x, y1, s, num_groups=2, num_classes=0, mask=mask0)
    scale = float(n0 + 1)  # (se_0/se_1)^2 = (S_0/n_0')/(S_1/n_1) and S_1/n_1 ~ B

    def stat(key: jax.Array, data: Any) -> jax.Array:
        se, fallback, _ = bt.stage1_standard_errors(key, data, hp, cfg)
        return jnp.where(fallback, -1.0, (se[0] / se[1]) ** 2 * scale)

    def mechanism_fn(key: jax.Array, flag: jax.Array) -> jax.Array:
        return jnp.where(flag == 1, stat(key, d1), stat(key, d0))

    info = {"claimed_epsilon": float(claimed), "delta": float(delta), "rho": claimed_rho,
            "relation": relation, "run_rho": rho * factor}
    return mechanism_fn, info



def budget_tailoring_fit_game(
    *,
    bug: str | None = None,
    rho: float = 0.5,
    delta: float = 0.05,
    steps: int = 1,
    group_sizes: tuple[int, int] = (2, 50),
    clip: float = 1.0,
    canary_scale: float = 10.0,
    seed: int = 0,
) -> FitSpendGame:
    """The whole run, ``budget_tailoring.fit`` on ``Config(steps=steps)`` (DPSE, replace-one within
    a group, every other field at its default), with the canary of ``budget_tailoring`` (module
    doc) in group 0.

    Statistic: ``-theta_T[0]`` (the canary's clipped gradient ``+Delta`` in ``D1`` against
    ``-Delta`` in ``D0`` lowers ``theta``). ``canary_scale = 10`` keeps the unclipped gradients of
    the ``"clipping"`` bug (``~10`` per row) inside the default box ``[-5, 5]``. Claim: ``budget_tailoring.spend`` (the whole run's
    ``rho``). Bugs: ``"noise"`` runs ``rho x 100`` (every std / 10); ``"clipping"`` runs
    ``clip x 1e4`` with ``rho x 1e8`` (the nominal stds, no clipping in effect); ``"cross_group"``
    keeps the canary's row and moves it to group 1 in ``D1`` (group sizes ``(n0 + 1, n1)``
    against ``(n0, n1 + 1)``), statistic ``-counts[0]`` (the released sizes), claim the
    within-group spend.

    Privacy: ``rho``-zCDP under replace-one within a group, stated at ``delta``; a record moving
    between groups is not covered.
    """
    if bug is not None:
        V.check_choice("bug", bug, FAMILY_BUGS["budget_tailoring_fit"])
    V.check_rho(rho)
    V.check_delta(delta)
    V.check_clip_norm(clip, "clip")
    steps = V.check_int("steps", steps, minimum=1)
    n0, n1 = (V.check_int("group_sizes", g, minimum=1) for g in group_sizes)
    config = bt.Config(steps=steps, delta=float(delta))
    hp = bt.Hyperparams(rho=float(rho), clip=float(clip))
    n = n0 + n1 + 1
    rng = np.random.default_rng(seed)
    x = np.empty((n, 1), np.float32)
    y = np.empty((n,), np.float32)
    x[:n0, 0], y[:n0] = canary_scale, 1.0  # group 0: clipped gradient -Delta at theta = 0
    x[n0:n0 + n1, 0] = rng.normal(size=n1)
    y[n0:n0 + n1] = rng.normal(size=n1)
    x[-1, 0] = canary_scale
    s = np.r_[np.zeros(n0, np.int32), np.ones(n1, np.int32), np.zeros(1, np.int32)]
    y0, y1 = y.copy(), y.copy()
    y0[-1], y1[-1] = 1.0, -1.0  # the canary: -Delta in D0 (another row like group 0's), +Delta in D1
    pair = tuple(make_dataset(x, yy, s, num_groups=2, num_classes=0) for yy in (y0, y1))

    def stat(res) -> jax.Array:
        return -res.params[0]

    run = {"noise": replace_fields(hp, rho=hp.rho * 100.0),
           "clipping": replace_fields(hp, rho=hp.rho * UNCLIPPED**2, clip=hp.clip * UNCLIPPED)}.get(bug)
    sizes = (n0 + 1, n1)
    if bug == "cross_group":
        s1 = s.copy()
        s1[-1] = 1  # the canary (y = 1, like group 0's rows) moved to group 1
        moved = (pair[0], make_dataset(x, y0, s1, num_groups=2, num_classes=0))

        def released_sizes(res) -> jax.Array:
            return -res.diagnostics["counts"][0]

        return FitSpendGame(algorithm=bt, config=config, hparams=hp, neighbours=moved,
                            statistic=released_sizes, sizes=(sizes, (n0, n1 + 1)),
                            info={"relation": "replace_one"})  # the pair's; the claim: within-group
    return FitSpendGame(algorithm=bt, config=config, hparams=hp, neighbours=pair, statistic=stat,
                        sizes=(sizes, sizes), relation=REPLACE_ONE_WITHIN_GROUP, run_hparams=run)


def budget_tailoring_fit_mechanism(*, bug: str | None = None, **kw: Any
                                   ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`budget_tailoring_fit_game`. Privacy: as the game's."""
    return budget_tailoring_fit_game(bug=bug, **kw).build()

BUILDERS: dict[str, Callable[..., tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]]] = {
    "budget_tailoring": budget_tailoring_mechanism,
    "budget_tailoring_stage1": budget_tailoring_stage1_mechanism,
    "budget_tailoring_fit": budget_tailoring_fit_mechanism,
}
