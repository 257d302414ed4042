"""The kit's trio for paper 002's two private algorithms over a public grid:
``fit(key, data, hparams, config) -> FitResult``, ``spend(config, sizes, hparams)`` and
``calibrate(config, sizes, target, *, hparams=None)``.

One config/hparams pair per algorithm; the functions dispatch on the config's type:

* Algorithm 1 (exponential sampling over the grid, :func:`.oracles.exponential_sampling`):
  :class:`SamplingConfig` (the public problem and the sensitivity variant) and
  :class:`SamplingHparams` (penalty weight ``G`` and ``epsilon``). Pure ``epsilon``-DP.
* Algorithm 2 (private CGOO with the exponential-mechanism LOPT and Laplace-privatized weights,
  :func:`.cgoo.private_cgoo`): :class:`PrivateCGOOConfig` (problem, rounds, composition slack
  ``delta``, ...) and :class:`PrivateCGOOHparams` (``G``, the per-round ``oracle_epsilon`` and the
  ``laplace_scale`` of the loss release). ``(epsilon, delta)``-DP by advanced composition.

``data`` is a :class:`GridData`: the itemized loss vectors ``losses [M, K]`` of the public grid on
the private data, and the number of rows ``n`` (public: the neighbouring relation is replace-one).
``sizes`` is that ``n``. ``target`` is ``(epsilon, delta)``.

Privacy: both algorithms hold under replace-one for a public problem (thresholds, normalizers,
``G``); :func:`spend` states the guarantee of a run, :func:`calibrate` returns noise fields whose
spend is within the target (values rounded to float32, the precision the runs use, toward less
spend).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.privacy.accounting import PrivacySpend, calibration_target
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.sampling import SamplingReport

from .._trio import FitResult, hparams_pytree, is_traced
from .cgoo import Algorithm2Budget, algorithm2_budget, algorithm2_ledger
from .cgoo import _private_cgoo
from .oracles import _exponential_sampling
from .problem import CGOO, _check_loss_matrix, loss_sensitivity

__all__ = [
    "GridData", "SamplingConfig", "SamplingHparams", "PrivateCGOOConfig", "PrivateCGOOHparams",
    "fit", "spend", "calibrate",
]

Array = jax.Array


class GridData(NamedTuple):
    """Itemized loss vectors ``losses [M, K]`` (in ``[0, 1]``) of a public candidate grid on a
    private dataset of ``n`` rows (a Python int; public under replace-one), e.g. from
    :func:`~.problem.group_losses`."""

    losses: Array
    n: int


def _check_problem(problem: Any) -> None:
    if not isinstance(problem, CGOO):
        raise ValueError(f"problem must be a reductions.CGOO(f, g, num_groups), got {type(problem).__name__}.")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """Static choices of Algorithm 1: the public ``problem`` (:class:`~.problem.CGOO`) and the
    sensitivity ``variant``: ``"corrected"`` (``(L_f + G L_g) sqrt(K)/n``) or ``"paper"``
    (``sqrt(K)(1 + G)/n``, Alg. 1 line 3; valid only when ``L_f, L_g <= 1``); ``delta``: the delta
    :func:`calibrate` targets are stated at (Algorithm 1 is pure: its spend's delta is 0, within
    any target's)."""

    problem: CGOO
    variant: str = "corrected"
    delta: float = 1e-5

    def validate(self) -> "SamplingConfig":
        _check_problem(self.problem)
        V.check_choice("variant", self.variant, ("corrected", "paper"))
        V.check_delta(self.delta)
        return self


@hparams_pytree
class SamplingHparams:
    """Traced hyperparameters of Algorithm 1: penalty weight ``G`` (Cor. 4.2:
    :func:`~.problem.penalty_weight`) and ``epsilon`` (the noise field :func:`calibrate` sets)."""

    G: Any = 1.0
    epsilon: Any = 1.0

    def validate(self) -> "SamplingHparams":
        if not is_traced(self.epsilon):
            V.check_epsilon(self.epsilon)
        if not is_traced(self.G):
            V.check_positive("G", self.G, allow_zero=True)
        return self


@dataclasses.dataclass(frozen=True)
class PrivateCGOOConfig:
    """Static choices of Algorithm 2 (:func:`~.cgoo.private_cgoo`): the public ``problem``, the
    number of rounds ``steps``, the composition slack ``delta`` (Lemma A.4's ``delta_bar``; the run
    is ``(epsilon, delta)``-DP), the weight ``point`` (``"mixture"`` | ``"last"``), ``variant``
    (``"corrected"``; ``"paper"`` is line 10 literally, not private), ``init_index``, the penalty
    ``smoothing`` and ``weight_fraction``, the share of each round's budget :func:`calibrate`
    gives the Laplace release of the losses."""

    problem: CGOO
    steps: int = 100
    delta: float = 1e-5
    point: str = "mixture"
    variant: str = "corrected"
    init_index: int = 0
    smoothing: float | None = None
    weight_fraction: float = 0.25

    def validate(self) -> "PrivateCGOOConfig":
        _check_problem(self.problem)
        V.check_int("steps", self.steps)
        V.check_delta(self.delta)
        V.check_choice("point", self.point, ("mixture", "last"))
        V.check_choice("variant", self.variant, ("corrected", "paper"))
        V.check_int("init_index", self.init_index, minimum=0)
        if self.smoothing is not None:
            V.check_positive("smoothing", self.smoothing)
        if not 0.0 < float(self.weight_fraction) < 1.0:
            raise ValueError(f"weight_fraction must lie in (0, 1), got {self.weight_fraction!r}.")
        return self


@hparams_pytree
class PrivateCGOOHparams:
    """Traced hyperparameters of Algorithm 2: penalty weight ``G``, the per-round budget of the
    exponential-mechanism oracle ``oracle_epsilon`` and the ``laplace_scale`` of the per-round loss
    release (``(K/n) / weight_epsilon``; 0: weights from unnoised losses, no guarantee). The noise
    fields are what :func:`calibrate` sets (from :func:`~.cgoo.algorithm2_budget`)."""

    G: Any = 1.0
    oracle_epsilon: Any = 1.0
    laplace_scale: Any = 1.0

    def validate(self) -> "PrivateCGOOHparams":
        if not is_traced(self.oracle_epsilon):
            V.check_epsilon(self.oracle_epsilon, "oracle_epsilon")
        if not is_traced(self.laplace_scale):
            V.check_positive("laplace_scale", self.laplace_scale, allow_zero=True)
        if not is_traced(self.G):
            V.check_positive("G", self.G, allow_zero=True)
        return self


_CONFIGS = (SamplingConfig, PrivateCGOOConfig)


def _check_config(config: Any) -> None:
    if not isinstance(config, _CONFIGS):
        raise ValueError("config must be a reductions.SamplingConfig (Algorithm 1) or PrivateCGOOConfig "
                         f"(Algorithm 2), got {type(config).__name__}.")
    config.validate()


def _check_hparams(hparams: Any, config: Any) -> Any:
    want = SamplingHparams if isinstance(config, SamplingConfig) else PrivateCGOOHparams
    if not isinstance(hparams, want):
        raise ValueError(f"hparams must be a reductions.{want.__name__} for a {type(config).__name__}, "
                         f"got {type(hparams).__name__}.")
    return hparams.validate()


def _check_n(sizes: Any) -> int:
    if isinstance(sizes, (bool, np.bool_)) or not isinstance(sizes, (int, np.integer)):
        raise ValueError(f"sizes must be the number of rows n (a public int under replace-one), got {sizes!r}.")
    return V.check_int("sizes", int(sizes))


def _check_data(data: Any, config: Any) -> int:
    if not isinstance(data, GridData):
        raise ValueError("data must be a reductions.GridData(losses [M, K], n).")
    _check_loss_matrix(data.losses, config.problem.num_groups)
    return _check_n(data.n)


def _concrete(name: str, value: Any) -> float:
    if is_traced(value):
        raise ValueError(f"spend needs a concrete hparams.{name} (host-side accounting); call it outside jit.")
    arr = np.asarray(value, np.float64)
    if arr.ndim:
        raise ValueError(f"hparams.{name} must be a scalar for spend, got shape {arr.shape}.")
    return float(arr)


def _spend_or_none(config: Any, n: int, hparams: Any) -> PrivacySpend | None:
    """:func:`spend` when the hparams are concrete scalars, ``None`` when one is traced or an array."""
    if is_traced(hparams) or any(np.ndim(x) for x in jax.tree_util.tree_leaves(hparams)):
        return None
    return spend(config, n, hparams)


@full_precision
def fit(key: Array, data: GridData, hparams: Any, config: Any) -> FitResult:
    """Run Algorithm 1 (``SamplingConfig``) or Algorithm 2 (``PrivateCGOOConfig``) on ``data``.

    Returns :class:`~dpfair_jax.algorithms.FitResult` with ``spend`` = :func:`spend` (``None``
    when an hparams field is traced) and ``report`` the rounds run.

    * Algorithm 1: ``params`` the sampled grid index (int32, the release); ``diagnostics``:
      ``loss [K]``, its loss vector (computed from the private losses: not private, do not publish).
    * Algorithm 2 (:func:`~.cgoo.private_cgoo`): ``params`` the mixture ``(indices [T], weights
      [T])`` (the release; the weights are public, uniform); ``diagnostics``: ``released [T, K]``,
      the Laplace-privatized loss vectors read in each round (released, covered by the spend),
      ``round_epsilon`` (what one round spends, a function of the hparams), and ``loss [K]``,
      ``objective``, ``constraint``, ``trajectory [T]`` (computed from the private losses: not
      private, do not publish).

    ``hparams`` fields may be traced (``vmap`` over a grid of them).

    Privacy: as :func:`spend` states, under replace-one for a public ``config.problem``.
    """
    V.check_threefry_key(key)
    _check_config(config)
    n = _check_data(data, config)
    _check_hparams(hparams, config)
    recorded = _spend_or_none(config, n, hparams)
    if isinstance(config, SamplingConfig):
        index = _exponential_sampling(key, jnp.asarray(data.losses, jnp.float32), jnp.asarray(hparams.G, jnp.float32),
                                      jnp.asarray(hparams.epsilon, jnp.float32), problem=config.problem, n=n,
                                      variant=config.variant)
        return FitResult(index, {"loss": jnp.asarray(data.losses, jnp.float32)[index]}, recorded,
                         SamplingReport(steps=1))
    res = _private_cgoo(key, jnp.asarray(data.losses, jnp.float32), jnp.asarray(hparams.G, jnp.float32),
                        jnp.asarray(hparams.oracle_epsilon, jnp.float32),
                        jnp.asarray(hparams.laplace_scale, jnp.float32), problem=config.problem, steps=config.steps,
                        lsens=loss_sensitivity(n, config.problem.num_groups),
                        l1sens=loss_sensitivity(n, config.problem.num_groups, norm="l1"), point=config.point,
                        variant=config.variant, init_index=int(config.init_index),
                        smoothing=None if config.smoothing is None else float(config.smoothing))
    diagnostics = {"released": res.released, "round_epsilon": res.round_epsilon, "loss": res.loss,
                   "objective": res.objective, "constraint": res.constraint, "trajectory": res.trajectory}
    # rounds run: one privatized loss vector (and one oracle draw) per round
    return FitResult((res.indices, res.weights), diagnostics, recorded,
                     SamplingReport(steps=int(res.released.shape[0])))


def _sampling_epsilon(config: SamplingConfig, hparams: SamplingHparams) -> float:
    """The draw's epsilon: ``epsilon`` when the sensitivity used bounds the true one
    ``(L_f + G L_g) sqrt(K)/n``; ``variant="paper"`` uses ``(1 + G) sqrt(K)/n``, so its epsilon is
    scaled by ``(L_f + G L_g)/(1 + G)`` when that exceeds 1 (exponential mechanism at sensitivity
    ``Delta_used`` on a query of sensitivity ``Delta``: ``epsilon Delta / Delta_used``-DP)."""
    eps, G = _concrete("epsilon", hparams.epsilon), _concrete("G", hparams.G)
    V.check_epsilon(eps)
    V.check_positive("G", G, allow_zero=True)
    if config.variant == "paper":
        f, g = config.problem.f, config.problem.g
        eps *= max(1.0, (f.lipschitz + G * g.lipschitz) / (1.0 + G))
    return eps


def _algorithm2_budget(config: PrivateCGOOConfig, n: int, hparams: PrivateCGOOHparams) -> Algorithm2Budget:
    """The :class:`~.cgoo.Algorithm2Budget` a run with these hparams spends (what
    :func:`~.cgoo.algorithm2_ledger` composes): ``weight_epsilon = (K/n)/laplace_scale`` (0 when
    the scale is 0 or the literal variant releases the losses without noise)."""
    o_eps, scale = _concrete("oracle_epsilon", hparams.oracle_epsilon), _concrete("laplace_scale",
                                                                                   hparams.laplace_scale)
    V.check_epsilon(o_eps, "oracle_epsilon")
    V.check_positive("laplace_scale", scale, allow_zero=True)
    if config.variant == "paper":
        scale = 0.0
    w_eps = _rn.laplace_epsilon(loss_sensitivity(n, config.problem.num_groups, norm="l1"), scale) if scale > 0 else 0.0
    return Algorithm2Budget(o_eps, 0.0, w_eps, scale, o_eps + w_eps, float(config.delta), int(config.steps))


def spend(config: Any, sizes: Any, hparams: Any) -> PrivacySpend:
    """The spend of ``fit(key, GridData(losses, n), hparams, config)`` with ``sizes = n``.

    Algorithm 1: ``(epsilon, 0)``, pure (the paper variant's epsilon scaled up when its
    sensitivity is too small, see :func:`_sampling_epsilon`). Algorithm 2: the numbers of
    :func:`~.cgoo.algorithm2_ledger` for the round budget ``oracle_epsilon + (K/n)/laplace_scale``
    over ``config.steps`` rounds with slack ``config.delta`` (``epsilon = inf`` without Laplace noise
    or for ``variant="paper"``). ``hparams`` must be concrete scalars.

    Privacy: relation replace-one, unit example (one record, including its sensitive attribute;
    a record may move to another group: the losses divide by the total ``n``, no group size).
    """
    _check_config(config)
    n = _check_n(sizes)
    _check_hparams(hparams, config)
    if isinstance(config, SamplingConfig):
        eps = _sampling_epsilon(config, hparams)
        return PrivacySpend(epsilon=eps, delta=0.0, relation="replace_one", unit="example",
                            accountant="closed_form",
                            notes=f"paper 002 Algorithm 1: exponential mechanism over the grid, {config.variant} "
                                  "sensitivity of h (Lemma 5.1), public problem and n")
    budget = _algorithm2_budget(config, n, hparams)
    ledger = algorithm2_ledger(budget)
    notes = (f"paper 002 Algorithm 2 ({config.variant}): {config.steps} rounds of the exponential-mechanism "
             "LOPT and a Laplace release of the loss vector (l1 sensitivity K/n), advanced composition "
             "(Lemma A.4); public problem and n")
    if math.isinf(ledger["epsilon"]):
        notes += "; " + ledger.get("notes", "not private")
    return PrivacySpend(epsilon=float(ledger["epsilon"]), delta=float(ledger["delta"]), relation="replace_one",
                        unit="example", accountant="closed_form", notes=notes)


def _f32_down(x: float) -> float:
    v = np.float32(x)
    return float(np.nextafter(v, np.float32(0.0)) if float(v) > x else v)


def _f32_up(x: float) -> float:
    v = np.float32(x)
    return float(np.nextafter(v, np.float32(np.inf)) if float(v) < x else v)


def calibrate(config: Any, sizes: Any, target: Any, *, hparams: Any = None) -> Any:
    """``hparams`` (default: the config's hparams type with its defaults) with the noise fields set
    so that ``spend(config, sizes, result).epsilon <= target epsilon``.

    Algorithm 1: ``epsilon`` = the target's (the paper variant scales it down by the factor
    :func:`spend` charges; the target's delta is ``config.delta``, the spend's is 0). Algorithm 2: :func:`~.cgoo.algorithm2_budget` with the
    exact per-round budget (the largest one Lemma A.4 allows), ``config.weight_fraction`` of it
    for the loss release; the target's ``delta`` must be ``config.delta`` (the slack the spend
    states). Values are float32, rounded toward less spend.

    Privacy: the returned run is ``(epsilon, delta)``-DP under replace-one.
    """
    _check_config(config)
    n = _check_n(sizes)
    epsilon, delta = calibration_target(target, _stated_delta(config))
    if isinstance(config, SamplingConfig):
        base = _check_hparams(SamplingHparams() if hparams is None else hparams, config)
        # charged epsilon per unit of epsilon
        factor = _sampling_epsilon(config, dataclasses.replace(base, epsilon=1.0))
        eps = _f32_down(epsilon / factor)
        while _sampling_epsilon(config, dataclasses.replace(base, epsilon=eps)) > epsilon:
            eps = float(np.nextafter(np.float32(eps), np.float32(0.0)))
        return dataclasses.replace(base, epsilon=eps)
    base = _check_hparams(PrivateCGOOHparams() if hparams is None else hparams, config)
    if config.variant == "paper":
        raise ValueError("variant='paper' computes the weights from unnoised losses: no budget meets a target.")
    b = algorithm2_budget(epsilon, delta, config.steps, n=n, num_groups=config.problem.num_groups,
                          oracle="pure", privatize_weights=True, weight_fraction=config.weight_fraction,
                          variant="exact")
    out = dataclasses.replace(base, oracle_epsilon=_f32_down(b.oracle_epsilon), laplace_scale=_f32_up(b.laplace_scale))
    while spend(config, n, out).epsilon > epsilon:  # float rounding of eps_o + eps_w: shave the oracle
        out = dataclasses.replace(out, oracle_epsilon=float(np.nextafter(np.float32(out.oracle_epsilon),
                                                                         np.float32(0.0))))
    return out


def _stated_delta(config: Any) -> float:
    """The delta a target is stated at: ``config.delta`` (Algorithm 1: its spend's delta is 0, pure;
    Algorithm 2: the composition slack)."""
    return float(config.delta)
