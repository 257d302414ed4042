"""Audit games for paper 002's private reductions, on the configuration its experiments run.

Both games are :class:`~dpfair_jax.audit.fit_spend.FitSpendGame` games on ``reductions.fit`` /
``reductions.spend`` (``SamplingConfig``: Algorithm 1; ``PrivateCGOOConfig``: Algorithm 2), with
what paper 002's experiments pass them: ``f = sum`` of the itemized group losses, ``g`` =
:func:`~dpfair_jax.studies.bgl.bgl_problem`'s bounded group loss (log-sum-exp temperature 200)
with its thresholds ``eta`` derived from a disjoint PUBLIC split, ``G = penalty_weight(alpha = 0.05, K, sqrt K)``, the private ``n``
public (replace-one), the loss matrix built by :func:`~dpfair_jax.algorithms.reductions.group_losses`
from per-example losses in ``[0, 1]``. Two groups; the canary is one private record of group 1
(the group the public thresholds cap), replaced between ``D0`` (``flag = 0``) and ``D1``.

* ``exponential_sampling``: :func:`~dpfair_jax.algorithms.reductions.exponential_sampling`
  (Alg. 1). Its output law is a softmax over the grid, known exactly, so the attack statistic is
  the exact log-likelihood ratio ``log p1(m) - log p0(m)`` of the sampled index (the optimal
  test), and ``info["exact_epsilon"]`` is the exact privacy loss of the pair,
  ``max_m |log p1(m) - log p0(m)|`` (pure DP: no sampling needed to judge a variant).
  Canary ``"tight"``: a rare candidate ``A`` and a dominant ``B``; the canary's loss is ``(A, B) =
  (0, 1)`` in ``D0`` and ``(1, 0)`` in ``D1``, so ``h`` moves by ``(1 + G)/n`` in opposite
  directions, ``(1 + G) / (sqrt 2 (sqrt 2 + G)) = 0.70`` of ``Delta_h`` (itemized group losses touch
  one coordinate per record; the kit's ``Delta_h`` is the general ``(L_f + G L_g) sqrt(K)/n``).
  Canary ``"threshold"``: three candidates, the private worst group a near tie that the canary
  breaks (its loss under the unconstrained candidate is 0 in ``D0`` and 1 in ``D1``).
* ``private_cgoo``: :func:`~dpfair_jax.algorithms.reductions.private_cgoo` (Alg. 2, grid,
  LOPT_{eps',0}, Laplace-released losses) with ``algorithm2_budget`` at the experiments' ``T = 30``
  rounds, ``delta = 1e-6``, penalty smoothing 5000. The statistic is the exact log-likelihood
  ratio of the whole output (released loss vectors and indices): per round, the Laplace density
  of ``released_t`` around ``L_b[m_{t-1}]`` and the EM's log-softmax of ``m_t`` under the weight
  ``r_t`` recomputed from the released values (post-processing), summed over rounds. Claim:
  ``reductions.spend`` (the :func:`~dpfair_jax.algorithms.reductions.algorithm2_ledger` numbers,
  advanced composition).

Planted bugs (caught: lower bound above the claimed epsilon at 95% confidence):

* ``"sensitivity"``: the public ``n`` passed too large, 10x for ``exponential_sampling`` (its
  scores' sensitivity 10x too small), 20x for ``private_cgoo`` (EM sensitivity and Laplace scale
  20x too small; 10x is on the edge there: lower bounds 0.4-1.0 over split seeds at 20000 trials,
  12x and 15x are caught);
* ``"epsilon_x2"`` (``exponential_sampling``): the mechanism runs at ``2 epsilon`` and claims
  ``epsilon``;
* ``"private_thresholds"``: the thresholds, worst group and group proportions derived from the
  private split itself (the paper-002 experiments before the fix; each world's run gets its own
  ``config.problem``, ``FitSpendGame.world_configs``), claiming the same epsilon;
  with the ``"threshold"`` canary. The corrected default passes on that canary too (tests).

``exponential_sampling``'s ``"epsilon_x2"`` is caught with a small margin (exact loss of the pair
1.32 for a claim of 1, expected lower bound 1.14 at 20000 trials; the smallest factor detected at
that size is about 1.8, see :func:`exact_lower_bound`). For ``private_cgoo`` a 2x budget error is
not detectable at ``T = 30``: advanced composition (Lemma A.4) charges ``~ eps' sqrt(2 T
log(1/delta))``, several times the privacy loss the output shows at the probabilities a
20000-trial game resolves, so that family plants only the larger errors.

Register with ``BUILDERS``, ``FAMILY_BUGS`` and ``SUITE_TRIALS`` (same contract as
:mod:`dpfair_jax.audit.mechanism_audits`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.algorithms import reductions as R
from dpfair_jax.audit.fit_spend import FitSpendGame
from dpfair_jax.audit.games import check_family_bug
from dpfair_jax.audit.lower_bounds import epsilon_lower_bound_from_counts

__all__ = [
    "ALGORITHMS",
    "FAMILY_BUGS",
    "SUITE_TRIALS",
    "BUILDERS",
    "exponential_sampling_game",
    "exponential_sampling_mechanism",
    "private_cgoo_game",
    "private_cgoo_mechanism",
    "exact_lower_bound",
]

FAMILY_BUGS: dict[str, tuple[str, ...]] = {
    "exponential_sampling": ("sensitivity", "epsilon_x2", "private_thresholds"),
    "private_cgoo": ("sensitivity", "private_thresholds"),
}
SUITE_TRIALS = {"quick": {"exponential_sampling": 20000, "private_cgoo": 20000},
                "full": {"exponential_sampling": 100000, "private_cgoo": 100000}}
ALGORITHMS: dict[str, str] = {"exponential_sampling": "reductions", "private_cgoo": "reductions"}

_K = 2
_W = 1  # the group the public thresholds cap; the canary's group
_SENS_BUG = 10  # "sensitivity": n passed 10x too large


_check_bug = functools.partial(check_family_bug, FAMILY_BUGS)


def _rows(values: np.ndarray, counts: tuple[int, int]) -> np.ndarray:
    """Per-example losses ``[M, n]``: candidate ``m`` has loss ``values[m, k]`` on every row of group ``k``."""
    return np.concatenate([np.repeat(values[:, k:k + 1], c, axis=1) for k, c in enumerate(counts)], axis=1)


def _groups(counts: tuple[int, int]) -> np.ndarray:
    return np.concatenate([np.full(c, k, np.int32) for k, c in enumerate(counts)])


def _problem(L: np.ndarray, s: np.ndarray, slack: float, temperature: float):
    """``bgl_problem`` on a loss matrix and its group sizes (as the experiments call it)."""
    from dpfair_jax.studies.bgl import bgl_problem

    sizes = np.bincount(s, minlength=_K).astype(float)
    prob, eta, worst, _ = bgl_problem(np.asarray(L, np.float64), sizes, slack, temperature)
    return prob, eta, worst


def _group_losses(per: np.ndarray, s: np.ndarray) -> np.ndarray:
    return np.asarray(R.group_losses(jnp.asarray(per, jnp.float32), jnp.asarray(s), _K), np.float64)


# ----------------------------------------------------------------------------------------------
# instances
# ----------------------------------------------------------------------------------------------
def _tight_instance(n: int, gap: float):
    """Two candidates ``(A, B)``; groups of ``n/2`` rows; the canary is the last row (group 1).

    Public split (``n/2`` rows, the same proportions): group-1 losses 0.3 lower than the private
    ones, so the threshold it yields (group 1 is its worst group) sits below every private
    candidate's group-1 loss and the bounded-group-loss penalty is active for both (``h`` then
    moves by ``(1 + G)/n``)."""
    n0 = n // 2
    counts = (n0, n - n0)
    vals = np.array([[0.10, 0.50 + gap], [0.10, 0.50]])  # rows A, B: group means (group 0, group 1)
    base = _rows(vals, counts)
    per0, per1 = base.copy(), base.copy()
    per0[:, -1] = (0.0, 1.0)  # canary loss under (A, B)
    per1[:, -1] = (1.0, 0.0)
    pub_counts = (n0 // 2, (n - n0) // 2)
    pub_vals = vals - np.array([[0.0, 0.3], [0.0, 0.3]])
    return per0, per1, _groups(counts), _rows(pub_vals, pub_counts), _groups(pub_counts)


def _threshold_instance(n: int):
    """Three candidates: ``B`` balanced (the unconstrained optimum), ``C`` good for group 0, ``A``
    good for group 1. Under ``B`` the two groups' mean losses tie up to half a record; the canary
    (group 1) has loss 0 under ``B`` in ``D0`` and 1 in ``D1``, so the private worst group flips from
    0 to 1 and a threshold derived from the private split caps the other group."""
    n0 = n // 2
    n1 = n - n0
    counts = (n0, n1)
    vals = np.array([[0.60, 0.20], [0.30 + 0.5 / n1, 0.30], [0.20, 0.60]])  # A, B, C
    base = _rows(vals, counts)
    per0, per1 = base.copy(), base.copy()
    per0[:, -1] = (0.20, 0.0, 0.60)
    per1[:, -1] = (0.20, 1.0, 0.60)
    per0[1, n0:-1] += 0.30 / (n1 - 1)  # group 1's mean under B stays 0.30 with the canary at 0
    per1[1, n0:-1] += 0.30 / (n1 - 1)
    pub_counts = (n0 // 2, n1 // 2)
    pub_vals = np.array([[0.60, 0.20], [0.30, 0.35], [0.20, 0.60]])
    return per0, per1, _groups(counts), _rows(pub_vals, pub_counts), _groups(pub_counts)


def _alpha_G(alpha: float) -> float:
    return R.penalty_weight(alpha, _K, math.sqrt(_K))


def _log_probs_em(L, prob, G, epsilon, n) -> np.ndarray:
    p = R.exponential_sampling_probs(jnp.asarray(L, jnp.float32), prob, G=G, epsilon=epsilon, n=n)
    return np.log(np.maximum(np.asarray(p, np.float64), 1e-300))


def _instance(canary: str, bug: str | None, n: int, gap: float, slack: float, temperature: float) -> tuple:
    """``(per0, per1, s, L0, L1, problem0, problem1)``: the canary's per-example losses in ``D0`` /
    ``D1``, their group losses and each world's ``_problem`` (from the public split; from each
    world's private split under the ``"private_thresholds"`` bug)."""
    if canary == "tight":
        per0, per1, s, per_pub, s_pub = _tight_instance(n, gap)
    else:
        per0, per1, s, per_pub, s_pub = _threshold_instance(n)
    L0, L1 = _group_losses(per0, s), _group_losses(per1, s)
    if bug == "private_thresholds":  # the old experiments: thresholds from each world's private split
        prob0 = _problem(L0, s, slack, temperature)
        prob1 = _problem(L1, s, slack, temperature)
    else:
        prob0 = prob1 = _problem(_group_losses(per_pub, s_pub), s_pub, slack, temperature)
    return per0, per1, s, L0, L1, prob0, prob1


def _neighbours(per0: np.ndarray, per1: np.ndarray, s: np.ndarray, n_run: int, bug: str | None,
                configs: tuple) -> tuple[Any, dict[str, Any]]:
    """The game's neighbours, ``flag -> GridData`` (the loss matrix as the experiments build it,
    with the public ``n_run``), and its ``world_configs`` (both worlds' configs under the
    ``"private_thresholds"`` bug: ``configs``, else none)."""
    per0_j, dper = jnp.asarray(per0, jnp.float32), jnp.asarray(per1 - per0, jnp.float32)
    s_j = jnp.asarray(s)

    def grid(flag: jax.Array) -> R.GridData:
        return R.GridData(R.group_losses(per0_j + flag.astype(jnp.float32) * dper, s_j, _K), n_run)

    if bug == "private_thresholds":
        return (grid(jnp.int32(0)), grid(jnp.int32(1))), {"world_configs": configs}
    return grid, {}


# ----------------------------------------------------------------------------------------------
# Algorithm 1
# ----------------------------------------------------------------------------------------------
def _rare_gap(n: int, bug: str | None, slack: float, temperature: float, G: float, eps_run: float, n_run: int,
              rare_probability: float) -> float:
    """The gap of ``A``'s group-1 loss in the tight instance at which ``p0(A) = rare_probability``
    under the run's mechanism (``brentq``; ``p0(A)`` falls with the gap), 0 when already below."""
    from scipy import optimize

    def excess(gap):
        _, _, _, L0, _, (pr, _, _), _ = _instance("tight", bug, n, gap, slack, temperature)
        return _log_probs_em(L0, pr, G, eps_run, n_run)[0] - math.log(rare_probability)

    if excess(0.0) > 0.0:
        return optimize.brentq(excess, 0.0, 0.5, xtol=1e-9)
    return 0.0


def exponential_sampling_game(
    *,
    epsilon: float = 1.0,
    bug: str | None = None,
    n: int = 200,
    alpha: float = 0.05,
    slack: float = 0.5,
    temperature: float = 200.0,
    canary: str | None = None,
    rare_probability: float = 0.1,
) -> FitSpendGame:
    """Game on ``reductions.fit`` with a ``SamplingConfig`` (Algorithm 1) as paper 002 runs it.

    ``canary``: ``"tight"`` (default; ``"threshold"`` for the ``"private_thresholds"`` bug), see the
    module docstring. ``rare_probability``: ``p0(A)`` of the tight instance under the mechanism
    being audited (the group-1 loss gap of ``A`` is solved for it; 0.1 maximizes the power against
    ``"epsilon_x2"``). Statistic: the exact log-likelihood ratio of the sampled index.
    ``info``: ``exact_epsilon`` (the pair's exact privacy loss), ``p_out``/``p_in`` (exact output
    laws of ``D0``/``D1``), ``eta``, ``G``, ``n``.

    Privacy: the claim is ``reductions.spend`` (``epsilon``-DP, pure, under replace-one for public
    thresholds).
    """
    V.check_epsilon(epsilon)
    _check_bug("exponential_sampling", bug)
    n = V.check_int("n", n, minimum=8)
    canary = canary or ("threshold" if bug == "private_thresholds" else "tight")
    V.check_choice("canary", canary, ("tight", "threshold"))
    if not 0.0 < float(rare_probability) < 0.5:
        raise ValueError(f"rare_probability must lie in (0, 0.5), got {rare_probability!r}.")
    G = _alpha_G(alpha)
    eps = float(epsilon)
    eps_run = 2.0 * eps if bug == "epsilon_x2" else eps
    n_run = n * _SENS_BUG if bug == "sensitivity" else n

    gap = 0.0
    if canary == "tight":  # solve the gap of A's group-1 loss for p0(A) = rare_probability (monotone)
        gap = _rare_gap(n, bug, slack, temperature, G, eps_run, n_run, rare_probability)
    per0, per1, s, L0, L1, (prob0, eta0, _), (prob1, eta1, _) = _instance(canary, bug, n, gap, slack, temperature)
    lp0 = _log_probs_em(L0, prob0, G, eps_run, n_run)
    lp1 = _log_probs_em(L1, prob1, G, eps_run, n_run)
    llr = jnp.asarray(lp1 - lp0, jnp.float32)
    config = R.SamplingConfig(problem=prob0)
    hp = R.calibrate(config, n, (eps, config.delta), hparams=R.SamplingHparams(G=G))

    def stat(res) -> jax.Array:
        return llr[res.params]

    neighbours, worlds = _neighbours(per0, per1, s, n_run, bug, (config, R.SamplingConfig(problem=prob1)))
    return FitSpendGame(
        algorithm=R, config=config, hparams=hp, neighbours=neighbours, statistic=stat, sizes=(n, n),
        relation="replace_one", run_hparams=dataclasses.replace(hp, epsilon=2.0 * hp.epsilon) if bug == "epsilon_x2" else None,
        info={"canary": canary, "exact_epsilon": float(np.max(np.abs(lp1 - lp0))), "p_out": np.exp(lp0),
              "p_in": np.exp(lp1), "llr": np.asarray(lp1 - lp0),
              "eta": (np.asarray(eta0).tolist(), np.asarray(eta1).tolist()), "G": G, "n": n},
        **worlds,
    )


def exponential_sampling_mechanism(*, bug: str | None = None, **kw: Any
                                   ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`exponential_sampling_game`. Privacy: as the game's."""
    return exponential_sampling_game(bug=bug, **kw).build()


def exact_lower_bound(p_in: Any, p_out: Any, llr: Any, trials: int, *, delta: float = 0.0,
                      confidence: float = 0.95) -> float:
    """The lower bound a sampled audit of ``trials`` trials per world would report at its expected
    counts, for a discrete output with exact laws ``p_in`` (``D1``) / ``p_out`` (``D0``) and the
    likelihood-ratio threshold tests (half the trials measure, as ``selection="split"``); the best
    threshold is picked here from the exact laws. Deterministic: used to size games and to find
    the smallest detectable factor."""
    p_in, p_out, llr = (np.asarray(a, np.float64).ravel() for a in (p_in, p_out, llr))
    m = V.check_int("trials", trials, minimum=4) // 2
    order = np.argsort(-llr)
    tp = np.rint(np.cumsum(p_in[order]) * m)
    fp = np.rint(np.cumsum(p_out[order]) * m)
    eps = epsilon_lower_bound_from_counts(tp, m - tp, fp, m - fp, delta=delta, confidence=confidence)
    return float(np.max(eps))


# ----------------------------------------------------------------------------------------------
# Algorithm 2
# ----------------------------------------------------------------------------------------------
def _cgoo_statistic(problems: tuple, losses: tuple, steps: int, G: float, smoothing: float, o_eps: float,
                    scale: float, lsens: float) -> Callable[[Any], jax.Array]:
    """The exact log-likelihood ratio ``log p1(output) - log p0(output)`` of Algorithm 2's whole
    output (module docstring), for the run's ``o_eps``, Laplace ``scale`` and EM sensitivity."""
    Ls = tuple(jnp.asarray(L, jnp.float32) for L in losses)

    def log_lik(res, L, prob):
        """Log-density of the output (indices, released) under world ``(L, prob)``, up to a constant."""
        indices, released = res.params[0], res.diagnostics["released"]
        prev = jnp.concatenate([jnp.zeros((1,), jnp.int32), indices[:-1]])
        lap = -jnp.sum(jnp.abs(released - L[prev])) / scale
        t = jnp.arange(1, steps + 1, dtype=jnp.float32)[:, None]
        at = jnp.cumsum(released, axis=0) / t
        r = jax.vmap(lambda l: R.penalized_grad(prob, l, G, smoothing=smoothing))(at)  # [T, K]
        w = r / jnp.maximum(jnp.linalg.norm(r, axis=1, keepdims=True), 1e-30)
        logits = -o_eps * (w @ L.T) / (2.0 * lsens)  # [T, M]
        em = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=1), indices[:, None], axis=1)
        return lap + jnp.sum(em)

    def stat(res) -> jax.Array:
        return log_lik(res, Ls[1], problems[1]) - log_lik(res, Ls[0], problems[0])

    return stat


def private_cgoo_game(
    *,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    steps: int = 30,
    bug: str | None = None,
    n: int = 2000,
    alpha: float = 0.05,
    slack: float = 0.5,
    temperature: float = 200.0,
    smoothing: float = 5000.0,
    canary: str | None = None,
    sensitivity_factor: float = 20.0,
) -> FitSpendGame:
    """Game on ``reductions.fit`` with a ``PrivateCGOOConfig`` (Algorithm 2) as paper 002 runs it.

    Hparams: the noise fields of ``algorithm2_budget(epsilon, delta, steps, n, K)`` (pure LOPT,
    privatized weights; ``reductions.calibrate`` gives the same up to float32 rounding toward less
    spend). Statistic: the exact log-likelihood ratio of the whole output (module
    docstring). ``canary`` as in :func:`exponential_sampling_game` (tight instance at a balanced
    gap). ``sensitivity_factor``: how much too large the ``"sensitivity"`` bug passes ``n`` (the
    run's hparams calibrated at that ``n``).

    Privacy: the claim is ``reductions.spend`` (``(epsilon, delta)``-DP under replace-one, advanced
    composition of ``steps`` rounds).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    _check_bug("private_cgoo", bug)
    n = V.check_int("n", n, minimum=8)
    steps = V.check_int("steps", steps)
    canary = canary or ("threshold" if bug == "private_thresholds" else "tight")
    V.check_choice("canary", canary, ("tight", "threshold"))
    G = _alpha_G(alpha)
    n_run = int(round(n * sensitivity_factor)) if bug == "sensitivity" else n
    per0, per1, s, L0, L1, (prob0, eta0, _), (prob1, eta1, _) = _instance(canary, bug, n, 0.0, slack, temperature)
    config = R.PrivateCGOOConfig(problem=prob0, steps=steps, delta=float(delta), smoothing=float(smoothing))

    def hparams_at(rows: int) -> R.PrivateCGOOHparams:  # the exact per-round budget (Lemma A.4)
        b = R.algorithm2_budget(epsilon, delta, steps, n=rows, num_groups=_K)
        return R.PrivateCGOOHparams(G=G, oracle_epsilon=b.oracle_epsilon, laplace_scale=b.laplace_scale)

    hp, run = hparams_at(n), hparams_at(n_run)
    o_eps, scale = float(run.oracle_epsilon), float(run.laplace_scale)
    lsens = R.loss_sensitivity(n_run, _K)
    stat = _cgoo_statistic((prob0, prob1), (L0, L1), steps, G, smoothing, o_eps, scale, lsens)
    neighbours, worlds = _neighbours(per0, per1, s, n_run, bug, (config, dataclasses.replace(config, problem=prob1)))
    return FitSpendGame(
        algorithm=R, config=config, hparams=hp, neighbours=neighbours, statistic=stat, sizes=(n, n),
        relation="replace_one", run_hparams=run,
        info={"canary": canary, "oracle_epsilon": o_eps, "laplace_scale": scale,
              "eta": (np.asarray(eta0).tolist(), np.asarray(eta1).tolist()), "G": G, "n": n, "steps": steps},
        **worlds,
    )


def private_cgoo_mechanism(*, bug: str | None = None, **kw: Any
                           ) -> tuple[Callable[[jax.Array, jax.Array], jax.Array], dict[str, Any]]:
    """``(mechanism_fn, info)`` of :func:`private_cgoo_game`. Privacy: as the game's."""
    return private_cgoo_game(bug=bug, **kw).build()


BUILDERS = {"exponential_sampling": exponential_sampling_mechanism, "private_cgoo": private_cgoo_mechanism}
