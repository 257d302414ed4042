"""Budget tailoring (paper 000): configuration, budget split and the data layout the stages share.

:class:`Config` holds the static choices of a run, :class:`Hyperparams` the traced (sweepable)
ones, :class:`Diagnostics` what a run reports besides its parameters. The private helpers split
``rho`` into the noisy counts, stage 1 and stage 2 (``_budget``), form the group-size denominators
(``_denominators``), lay a dataset out as one vector per feature (``_prepare``) and draw a run's
standard normal noise in one call (``_run_draws``).

Privacy: the budget split is what :mod:`.ledger` charges; the draws are scaled by the noise stds
of :mod:`.stage1` and :mod:`.stage2` at each release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax._validation import is_traced
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy.zcdp_noise import gaussian_std_or_zero
from dpfair_jax.privacy.relations import (ADD_REMOVE, REPLACE_ONE_WITHIN_GROUP, as_relation, bounded_sum_sensitivity,
                                          clipped_sum_sensitivity, gram_sensitivity, histogram_sensitivity,
                                          relation_name, within_group)

from .._trio import hparams_pytree

__all__ = ["Config", "Hyperparams", "Diagnostics", "METHODS", "RELATIONS", "num_draws"]

METHODS = ("dpse", "equal", "pooled", "nonprivate")
#: The relations a run covers: replace-one within a group (public sizes) and add/remove (noisy counts).
RELATIONS = (REPLACE_ONE_WITHIN_GROUP, "add_remove")
_F_NAMES = ("sum", "mean", "max")
_G_NAMES = ("bgl", "max")


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Config:
    """Static choices of a budget-tailoring run (shapes and branches; hashable, not traced).

    Attributes:
      method: ``"dpse"`` (stage 1 + stage 2), ``"equal"`` (DPNoSE equal split ``s_k = 1/sqrt K``,
        whole budget to stage 2), ``"pooled"`` (DPNoSE as standard DP-GD with the whole budget on
        the pooled clipped gradient sum; Algorithm 3 only), ``"nonprivate"`` (same descent, no
        noise, equal weights).
      fairness: ``True`` runs Algorithm 2 (Lagrangian with noisy group losses), ``False``
        Algorithm 3.
      steps: number of gradient iterations ``T``.
      loss: ``"squared"`` (OLS, the paper) or ``"logistic"`` (Appendix A; labels in {0, 1}).
      f, g: group-agnostic and group-deviation losses of eq. (1): names (``f`` in
        ``"sum" | "mean" | "max"``, ``g`` in ``"bgl" | "max"``) or callables ``f(l)`` and
        ``g(l, thresholds)`` of the K group losses (differentiated with ``jax.grad``).
      scaling: ``"group_mean"`` (default, noise on clipped sums then divide by ``n_k``) or
        ``"paper"`` (Algorithm 2 lines 10-14 / Algorithm 3 line 8 literally).
      relation: ``"replace_one_within_group"`` (default: public group membership and sizes, one
        record replaced by another of the same group; a record moving to another group changes
        the exact sizes the run divides by, so that pair is not covered) or ``"add_remove"``
        (noisy group counts, charged ``count_fraction * rho``, as denominators); see the module
        docstring. ``"replace_one"`` (any replacement, across groups too) is refused at
        construction, as are ``NeighboringRelation.REPLACE_ONE`` (which cannot say "within a
        group") and the retired ``"swap"``; ``NeighboringRelation.ADD_OR_REMOVE_ONE`` is stored
        by its name.
      stage1_clip: ``"delta_sq"`` (clip squared residuals to ``[0, Delta^2]``, noise for
        ``Delta^2``) or ``"paper"`` (``[0, Delta]``, Algorithm 1 line 17 literally; noise for
        ``max(Delta, Delta^2)``).
      se_denominator: ``"n"`` (Algorithm 1 line 21) or ``"n_minus_d"`` (the text).
      fit_intercept: append a constant feature (it counts in ``||x||`` for clipping).
      box: projection onto ``[-box, box]^P`` (the paper's ``C_P = [-5, 5]^P``); ``inf`` for none.
      delta: the ``delta`` at which :func:`~.ledger.spend` states ``epsilon`` (accounting only: the
        run is ``rho``-zCDP, which holds at every ``delta``; :func:`~.ledger.calibrate` solves
        for a target at this ``delta``).
    """

    method: str = "dpse"
    fairness: bool = False
    steps: int = 50
    loss: str = "squared"
    f: str | Callable = "sum"
    g: str | Callable = "bgl"
    scaling: str = "group_mean"
    relation: str = REPLACE_ONE_WITHIN_GROUP
    stage1_clip: str = "delta_sq"
    se_denominator: str = "n"
    fit_intercept: bool = False
    box: float = 5.0
    delta: float = 1e-5

    def __post_init__(self) -> None:
        # one spelling in records: the relation's name (as_relation refuses "swap" with a pointer)
        relation = relation_name(self.relation)
        if relation not in RELATIONS:
            raise ValueError(
                f"relation={self.relation!r} is not covered by budget tailoring: with public sizes "
                f"the run divides by the exact group sizes, which a record moving to another group "
                f"changes (epsilon = inf for that neighbour). Use relation='{REPLACE_ONE_WITHIN_GROUP}' "
                "(the default: one record replaced by another of the same group) or 'add_remove' "
                "(noisy group counts, charged).")
        object.__setattr__(self, "relation", relation)

    @property
    def noisy_counts(self) -> bool:
        """Whether the group sizes differ between neighbours (``relations.within_group`` is false:
        add/remove), so a run releases them as noisy counts inside its budget."""
        return not within_group(self.relation)

    def validate(self) -> "Config":
        v.check_choice("method", self.method, METHODS)
        v.check_int("steps", self.steps, minimum=1)
        v.check_choice("loss", self.loss, ("squared", "logistic"))
        if not callable(self.f):
            v.check_choice("f", self.f, _F_NAMES)
        if not callable(self.g):
            v.check_choice("g", self.g, _G_NAMES)
        v.check_choice("scaling", self.scaling, ("group_mean", "paper"))
        v.check_choice("stage1_clip", self.stage1_clip, ("delta_sq", "paper"))
        v.check_choice("se_denominator", self.se_denominator, ("n", "n_minus_d"))
        v.check_positive("box", self.box, allow_inf=True)
        v.check_delta(self.delta)
        if self.fairness and self.method == "pooled":
            raise ValueError(
                "method='pooled' has no group losses, so it cannot run the fairness Lagrangian "
                "(fairness=True); use method='equal' as the DPNoSE baseline with fairness."
            )
        return self


@hparams_pytree
class Hyperparams:
    """Traced (sweepable) hyperparameters; every field may be a JAX array under ``vmap``.

    ``rho``: total zCDP budget (``inf`` allowed: no noise). ``tau_fraction``: share of rho spent by
    stage 1 (paper: 0.2). ``learning_rate``: constant step ``eta_t``. ``clip``: ``Delta``, the
    per-example gradient norm bound (losses are clipped to ``[0, Delta^2]``). ``fairness_weight``:
    ``G``. ``thresholds``: BGL thresholds ``eta_k`` (scalar or ``[K]``). ``stats_bound_x`` and
    ``stats_bound_y``: ``U`` of Lemma C.1 for the rows of X and for y. ``count_fraction``: share
    of rho spent on the noisy group counts under ``relation="add_remove"`` (unused, and not
    charged, under ``"replace_one_within_group"``).
    """

    rho: Any = 1.0
    tau_fraction: Any = 0.2
    learning_rate: Any = 0.1
    clip: Any = 2.0
    fairness_weight: Any = 1.0
    thresholds: Any = 0.0
    stats_bound_x: Any = 3.0
    stats_bound_y: Any = 30.0
    count_fraction: Any = 0.05

    def validate(self, config: "Config | None" = None, num_groups: int | None = None) -> "Hyperparams":
        """Check the concrete fields (traced ones are skipped); ``count_fraction`` is checked
        under ``config.relation="add_remove"``, ``thresholds``' shape against ``num_groups``."""
        v.check_rho(self.rho, allow_inf=True)
        if not is_traced(self.tau_fraction):
            tf = np.asarray(self.tau_fraction)
            if np.any(tf <= 0) or np.any(tf >= 1):
                raise ValueError(f"tau_fraction must lie in (0, 1), got {self.tau_fraction!r} "
                                 "(the paper uses 0.2).")
        if config is not None and config.noisy_counts and not is_traced(self.count_fraction):
            cf = np.asarray(self.count_fraction)
            if np.any(cf <= 0) or np.any(cf >= 1):
                raise ValueError(f"count_fraction must lie in (0, 1) under relation='add_remove' (the share "
                                 f"of rho for the noisy group counts), got {self.count_fraction!r}.")
        v.check_positive("learning_rate", self.learning_rate)
        v.check_clip_norm(self.clip, "clip")
        v.check_positive("fairness_weight", self.fairness_weight, allow_zero=True)
        v.check_finite("thresholds", self.thresholds)
        th = np.shape(self.thresholds)
        if num_groups is not None and th not in ((), (num_groups,)):
            raise ValueError(f"thresholds must be a scalar or have shape ({num_groups},), got {th}.")
        v.check_positive("stats_bound_x", self.stats_bound_x)
        v.check_positive("stats_bound_y", self.stats_bound_y)
        return self


class Diagnostics(NamedTuple):
    """What a run reports besides the parameters (all arrays; traced-friendly)."""

    se: jax.Array  # [K] normalised standard errors used for the allocation
    fallback: jax.Array  # bool: stage 1 returned the equal allocation
    beta_stage1: jax.Array  # [P] private pooled OLS of stage 1 (zeros when stage 1 is skipped)
    noise_std: jax.Array  # [K] std of the noise added to each group's gradient sum
    rho_stage1: jax.Array  # zCDP spent by stage 1
    rho_stage2: jax.Array  # zCDP spent by stage 2 (sum of the per-group charges)
    fraction_clipped: jax.Array  # mean fraction of clipped gradients (non-private diagnostic)
    rho_counts: jax.Array  # zCDP spent on the noisy group counts (0 under replace-one)
    counts: jax.Array  # [K] group sizes used as denominators (noisy, clamped >= 1, under add/remove)
    # what the run executed (privacy.sampling.SamplingReport): stage-2 steps run, stage-1 and
    # noisy-count releases; None from fit_many
    report: Any = None


# --------------------------------------------------------------------------------------------
# Pieces shared by the stages
# --------------------------------------------------------------------------------------------


class _Sens(NamedTuple):
    """Sensitivities per unit bound under a relation (from ``dpfair_jax.privacy.relations``); the
    releases multiply them by their (possibly traced) bounds."""

    vector: float  # sum of vectors clipped to norm 1 (gradient sums, X^T y): 1 or 2
    gram: float  # upper triangle of sum_i x_i x_i^T, ||x_i|| <= 1: 1 or sqrt(2)
    bounded: float  # sum of scalars in [0, 1] (clipped losses, squared residuals): 1 under both


def _sens(relation: Any) -> _Sens:
    rel = as_relation(relation)
    return _Sens(clipped_sum_sensitivity(1.0).under(rel), gram_sensitivity(1.0).under(rel),
                 bounded_sum_sensitivity(0.0, 1.0).under(rel))


def _budget(hp: Hyperparams, cfg: Config, dtype=jnp.float32):
    """Split of ``rho`` into (counts, stage 1, stage 2): ``(rho_c, tau, mu)``.

    Under add/remove ``rho_c = count_fraction * rho`` goes to the noisy counts and the rest is
    split as in the paper; under replace-one ``rho_c = 0``. ``tau = tau_fraction * rest`` and
    ``mu = rest - tau`` for DPSE, ``tau = 0`` and ``mu = rest`` for the baselines (written as
    products so that ``rho = inf`` gives ``inf`` everywhere)."""
    rho = jnp.asarray(hp.rho, dtype)
    if cfg.noisy_counts:
        rho_c, rest = rho * hp.count_fraction, rho * (1.0 - hp.count_fraction)
    else:
        rho_c, rest = 0.0 * rho, rho
    if cfg.method == "dpse":
        return rho_c, rest * hp.tau_fraction, rest * (1.0 - hp.tau_fraction)
    return rho_c, 0.0 * rest, rest


def _denominators(zc: jax.Array, n_k: jax.Array, rho_c: Any, cfg: Config) -> jax.Array:
    """Group sizes as used by the method: the public ``n_k`` under replace-one; under add/remove
    the noisy counts ``max(n_k + z / sqrt(2 rho_c), 1)`` (Gaussian mechanism, sensitivity 1 for
    the count vector; exact when ``rho_c = inf`` or for the non-private method)."""
    if not cfg.noisy_counts or cfg.method == "nonprivate":
        return n_k
    rho_c = jnp.asarray(rho_c, n_k.dtype)
    sens = histogram_sensitivity("l2").under(ADD_REMOVE)  # the count vector: one record, one cell
    std = gaussian_std_or_zero(sens, rho_c)
    return jnp.maximum(n_k + std * zc, 1.0)


def _dloss_and_loss(pred: jax.Array, y: jax.Array, loss: str) -> tuple[jax.Array, jax.Array]:
    """Per-example d loss / d prediction and loss (both [n]); gradient wrt theta is dloss * x."""
    if loss == "squared":
        r = pred - y
        return 2.0 * r, r * r
    # logistic with labels in {0, 1}: loss = softplus(pred) - y pred
    return jax.nn.sigmoid(pred) - y, jax.nn.softplus(pred) - y * pred


def _resolve_f(f):
    if callable(f):
        return f
    return {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max}[f]


def _resolve_g(g):
    if callable(g):
        return g
    if g == "max":
        return lambda l, thresholds: jnp.max(l)
    return lambda l, thresholds: jnp.max(l - thresholds)


def _prepare(x: jax.Array, y: jax.Array, s: jax.Array, num_groups: int, weights: jax.Array | None,
             fit_intercept: bool):
    """Structure-of-arrays view: xs [P, n], row norms [n], one-hot [n, K] (masked), n_k [K]."""
    xs = jnp.asarray(x, jnp.float32).T
    if fit_intercept:
        xs = jnp.concatenate([xs, jnp.ones((1, xs.shape[1]), xs.dtype)], axis=0)
    y = jnp.asarray(y, xs.dtype)
    onehot = jax.nn.one_hot(s, num_groups, dtype=xs.dtype)
    if weights is not None:
        onehot = onehot * jnp.asarray(weights, xs.dtype)[:, None]
    n_k = jnp.sum(onehot, axis=0)
    xnorm = jnp.sqrt(jnp.sum(xs * xs, axis=0))
    return xs, y, onehot, n_k, xnorm


def num_draws(steps: int, p: int, k_groups: int) -> int:
    """Standard normal draws one run consumes: stage 1 (``p^2 + p + K``), the group counts
    (``K``, used under add/remove), then T x (``pK + K``)."""
    return p * p + p + 2 * k_groups + steps * (p * k_groups + k_groups)


def _run_draws(key, steps: int, p: int, k_groups: int, dtype):
    """All of a run's standard normal draws, from one draw of
    :func:`dpfair_jax.privacy.mechanisms.gaussian_noise` (std 1; each release scales its slice by
    its noise std).

    Drawing once, outside the scan, keeps the compiled program small (each threefry call costs
    compile time) and lets a Monte Carlo study draw a whole trial's noise at once.
    """
    return _mech.gaussian_noise(key, (num_draws(steps, p, k_groups),), 1.0, dtype)


def _split_draws(z, steps: int, p: int, k_groups: int):
    """(stage-1 draws [p^2 + p + K], count draws [K], descent draws ([T, p, K], [T, K]))."""
    s1 = p * p + p + k_groups
    rest = z[s1 + k_groups:].reshape(steps, p * k_groups + k_groups)
    return z[:s1], z[s1: s1 + k_groups], (rest[:, : p * k_groups].reshape(steps, p, k_groups),
                                           rest[:, p * k_groups:])


def _spent(cfg: Config, rho_c, tau, mu, se):
    """zCDP a run spends: (stage 1, stage 2, counts); zeros for the non-private method."""
    if cfg.method == "nonprivate":
        return 0.0 * tau, 0.0 * mu, 0.0 * rho_c
    r2 = mu * (1.0 if cfg.method == "pooled" else jnp.sum(se**2))
    return tau, r2, rho_c


def _check_inputs(key, data: Dataset, hp: Hyperparams, cfg: Config) -> None:
    cfg.validate()
    v.check_threefry_key(key)
    if not isinstance(data, Dataset):
        raise ValueError("data must be a dpfair_jax.data.Dataset (use make_dataset(x, y, s)).")
    data.validate(min_group_size=1)
    if cfg.loss == "squared" and data.num_classes:
        raise ValueError("loss='squared' needs a regression dataset (num_classes=0); "
                         "build it with make_dataset(..., num_classes=0) or use loss='logistic'.")
    if cfg.loss == "logistic" and data.num_classes not in (0, 2):
        raise ValueError("loss='logistic' needs binary labels in {0, 1}.")
    hp.validate(cfg, data.num_groups)
    if cfg.se_denominator == "n_minus_d" and not cfg.noisy_counts:
        # public sizes only; under add/remove the noisy denominator is clamped (max(n_k - P, 1))
        p = data.d + int(cfg.fit_intercept)
        if np.min(data.group_sizes()) <= p:
            raise ValueError("se_denominator='n_minus_d' needs every group larger than the number "
                             f"of parameters ({p}); use se_denominator='n'.")


def _standalone(key, data: Dataset, hparams: Hyperparams, config: Config, steps: int):
    """Shared set-up of the stage-level entry points: layout, draws, budget split, denominators."""
    xs, y, onehot, n_k, xnorm = _prepare(data.x, data.y, data.s, data.num_groups, data.mask,
                                         config.fit_intercept)
    z1, zc, z2 = _split_draws(_run_draws(key, steps, xs.shape[0], data.num_groups, xs.dtype),
                              steps, xs.shape[0], data.num_groups)
    rho_c, tau, mu = _budget(hparams, dataclasses.replace(config, method="dpse"), xs.dtype)
    if config.method != "dpse":
        mu = _budget(hparams, config, xs.dtype)[2]
    den = _denominators(zc, n_k, rho_c, config)
    return xs, y, onehot, xnorm, z1, z2, tau, mu, den
