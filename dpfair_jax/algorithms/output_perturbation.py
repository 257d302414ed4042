"""Output perturbation for L2-regularized ERM (paper 001, Section 4 / App. C.1, Theorem 1).

``theta_tilde = theta* + N(0, (Delta sigma)^2 I)`` where ``theta*`` minimizes
``(1/n) sum_i l(theta; x_i, y_i) + (reg/2) ||theta||^2`` and ``Delta = 2 L / (n reg)`` is the
L2 sensitivity of the minimizer of an L-Lipschitz loss with a ``reg``-strongly convex regularizer
(Chaudhuri, Monteleoni, Sarwate 2011, Corollary 8). The noise std ``Delta sigma`` is calibrated by
the analytic Gaussian mechanism (Balle & Wang 2018), as in the paper.

Losses and their Lipschitz constants, for rows with ``||x_i|| <= radius`` (the paper standardizes
features but never bounds the norms; here the bound is a declared, checked precondition, see
``preprocessing.bound_row_norms``). With ``fit_intercept=True`` a constant feature 1 is appended
(and regularized, which keeps the objective strongly convex), so the bound is ``sqrt(radius^2+1)``:

* ``"logistic"``: ``l = log(1 + e^{z}) - y z``, ``z = theta^T x``; ``||grad|| <= ||x||``, ``L = R``.
* ``"squared"`` (Corollary 1): ``l = (theta^T x - y)^2`` with ``|y| <= label_bound``. Not globally
  Lipschitz; both neighbouring minimizers lie in the ball ``||theta|| <= Theta = label_bound
  sqrt(2 / reg)`` (since ``(reg/2)||theta*||^2 <= objective(0) <= label_bound^2``), on which
  ``||grad|| <= L = 2 R (R Theta + label_bound)``.

The algorithm (the kit's trio): :func:`fit` ``(key, data, hparams, config)`` with
:class:`OutputPerturbationHparams` (the noise multiplier ``z``, so ``std = z Delta``, the
regularization and the public radius; all traceable) and :class:`OutputPerturbationConfig`
(loss, intercept, Newton steps, label bound, the delta of the spend) returns a
:class:`~dpfair_jax.algorithms.FitResult` whose ``params`` is the released ``theta``; :func:`spend`
(the epsilon the analytic Gaussian mechanism with multiplier ``z`` has at that delta) and
:func:`calibrate` (``z`` for a target (epsilon, delta)). The sensitivity and the noise are
:mod:`dpfair_jax.privacy.release_noise`'s.

Public names: :func:`fit`, :func:`spend`, :func:`calibrate`, :func:`minimize`,
:func:`lipschitz_constant`, :func:`sensitivity`, :func:`noise_std` (lower level),
:func:`group_losses`, :func:`excessive_risk_mc`, :func:`theorem1_prediction`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import release_noise as _rn
from dpfair_jax.privacy import sampling as _smp
from dpfair_jax.privacy.mechanisms import gaussian_noise
from dpfair_jax.privacy.precision import full_precision

from ._trio import FitResult, hparams_pytree, is_traced

__all__ = ["OutputPerturbationConfig", "OutputPerturbationHparams", "LOSSES", "augment", "minimize",
           "lipschitz_constant", "sensitivity", "noise_std", "fit", "spend", "calibrate", "example_loss",
           "group_losses", "excessive_risk_mc", "theorem1_prediction"]

LOSSES = ("logistic", "squared")


def augment(x: jax.Array, fit_intercept: bool = True) -> jax.Array:
    """Append a constant column 1 (the regularized intercept) when ``fit_intercept``."""
    x = jnp.asarray(x)
    if not fit_intercept:
        return x
    return jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), x.dtype)], axis=-1)


def example_loss(theta: jax.Array, x: jax.Array, y: jax.Array, loss: str = "logistic") -> jax.Array:
    """Per-example loss of the linear model ``z = x theta`` (``x`` already augmented); ``[n]``."""
    z = x @ theta
    y = jnp.asarray(y, z.dtype)
    if loss == "logistic":
        return jnp.logaddexp(0.0, z) - y * z
    return (z - y) ** 2


def _objective(theta, x, y, reg, loss):
    return jnp.mean(example_loss(theta, x, y, loss)) + 0.5 * reg * jnp.sum(theta * theta)


def _minimize_core(x, y, reg, *, loss: str, iters: int):
    d = x.shape[1]
    dt = x.dtype
    reg = jnp.asarray(reg, dt)
    if loss == "squared":
        n = x.shape[0]
        a = 2.0 * (x.T @ x) / n + reg * jnp.eye(d, dtype=dt)
        return jnp.linalg.solve(a, 2.0 * (y.astype(dt) @ x) / n)

    def newton(_, theta):
        g = jax.grad(_objective)(theta, x, y, reg, loss)
        h = jax.hessian(_objective)(theta, x, y, reg, loss)
        return theta - jnp.linalg.solve(h, g)

    return jax.lax.fori_loop(0, iters, newton, jnp.zeros((d,), dt))


_minimize_jit = jax.jit(_minimize_core, static_argnames=("loss", "iters"))


@full_precision
def minimize(x: jax.Array, y: jax.Array, *, reg: Any = 1.0, loss: str = "logistic",
             fit_intercept: bool = True, iters: int = 30) -> jax.Array:
    """The regularized minimizer ``theta*`` (Newton's method for logistic, closed form for squared).

    Jit-able in ``reg`` (traced); ``iters`` Newton steps from 0 (the objective is ``reg``-strongly
    convex and smooth, so 30 steps reach float32 precision for ``reg`` around 1e-3 or more).
    """
    v.check_choice("loss", loss, LOSSES)
    v.check_shape("x", x, ndim=2)
    v.check_finite("x", x)
    v.check_finite("y", y)
    v.check_same_length(x=x, y=y)
    v.check_positive("reg", reg)
    iters = v.check_int("iters", iters, minimum=1)
    return _minimize_jit(augment(x, fit_intercept), jnp.asarray(y), reg, loss=loss, iters=iters)


def lipschitz_constant(radius: float, *, loss: str = "logistic", reg: float = 1.0,
                       label_bound: float = 1.0, fit_intercept: bool = True) -> float:
    """``L`` of the loss over the relevant domain for rows with ``||x|| <= radius`` (see module doc)."""
    v.check_choice("loss", loss, LOSSES)
    v.check_positive("radius", radius)
    v.check_positive("reg", reg)
    v.check_positive("label_bound", label_bound)
    r = math.sqrt(float(radius) ** 2 + (1.0 if fit_intercept else 0.0))
    if loss == "logistic":
        return r
    theta_max = float(label_bound) * math.sqrt(2.0 / float(reg))
    return 2.0 * r * (r * theta_max + float(label_bound))


def sensitivity(n: int, reg: float, lipschitz: float) -> float:
    """``Delta = 2 L / (n reg)``: L2 sensitivity of the regularized minimizer (Chaudhuri et al. 2011;
    :func:`dpfair_jax.privacy.release_noise.minimizer_sensitivity`). Lower level: use fit.

    Privacy: holds under replace-one neighbours for an L-Lipschitz convex loss and
    ``(reg/2)||theta||^2`` (add/remove-one changes ``n`` as well; we use replace-one, as they do).
    """
    n = v.check_int("n", n, minimum=1)
    v.check_positive("reg", reg)
    v.check_positive("lipschitz", lipschitz)
    return _rn.minimizer_sensitivity(n, float(reg), float(lipschitz))


def noise_std(epsilon: float, delta: float, sens: float) -> float:
    """Per-coordinate noise std of the analytic Gaussian mechanism at sensitivity ``sens``
    (:func:`dpfair_jax.privacy.accounting.analytic_gaussian_sigma`). Lower level: use fit.

    ``= Delta sigma`` in the paper's notation (``sigma`` the unit-sensitivity multiplier).
    """
    return _acc.analytic_gaussian_sigma(epsilon, delta, sens)


def _check_rows(x, radius):
    norms = np.linalg.norm(np.asarray(x, np.float64), axis=1)
    if norms.size and norms.max() > float(radius) * (1 + 1e-5):
        raise ValueError(
            f"rows of x have L2 norm up to {norms.max():.4g} > radius={radius}; bound them first "
            "(preprocessing.bound_row_norms(x, radius)) or pass a larger radius.")


# ------------------------------------------------------------------------------------------------
# fit / spend / calibrate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OutputPerturbationConfig:
    """Static choices: ``loss`` (``"logistic"`` or ``"squared"``), ``fit_intercept``, ``iters``
    (Newton steps), ``label_bound`` (``|y| <=`` it, squared loss), ``delta`` (the spend's delta)."""

    loss: str = "logistic"
    fit_intercept: bool = True
    iters: int = 30
    label_bound: float = 1.0
    delta: float = 1e-5

    def validate(self) -> "OutputPerturbationConfig":
        v.check_choice("loss", self.loss, LOSSES)
        v.check_int("iters", self.iters, minimum=1)
        v.check_positive("label_bound", self.label_bound)
        v.check_delta(self.delta, "delta")
        return self


@hparams_pytree
class OutputPerturbationHparams:
    """Traced hyperparameters: ``noise_multiplier`` ``z`` (the noise std is ``z Delta``),
    ``reg`` (the L2 regularization), ``radius`` (a public bound on ``||x_i||`` fixed without looking
    at the data; default 1, the unit ball of ``preprocessing.bound_row_norms(x, 1.0)``; :func:`fit`
    refuses rows above it)."""

    noise_multiplier: Any = 1.0
    reg: Any = 1.0
    radius: Any = 1.0

    def validate(self) -> "OutputPerturbationHparams":
        if self.radius is None:
            raise ValueError("hparams.radius is required: a public bound on the row norms ||x_i|| fixed "
                             "without looking at the data (preprocessing.bound_row_norms(x, radius)).")
        v.check_positive("hparams.radius", self.radius)
        v.check_positive("hparams.reg", self.reg)
        v.check_noise_multiplier(self.noise_multiplier, "hparams.noise_multiplier")
        return self


def _sensitivity_of(n: int, hparams: OutputPerturbationHparams, config: OutputPerturbationConfig):
    """``Delta = 2 L / (n reg)`` (:func:`~dpfair_jax.privacy.release_noise.minimizer_sensitivity`):
    on the host in float64 for concrete hparams, in float32 for traced ones."""
    reg, radius = hparams.reg, hparams.radius
    if not is_traced(reg, radius):
        lip = lipschitz_constant(float(radius), loss=config.loss, reg=float(reg),
                                 label_bound=config.label_bound, fit_intercept=config.fit_intercept)
        return _rn.minimizer_sensitivity(n, float(reg), lip)
    r = jnp.sqrt(jnp.square(jnp.asarray(radius, jnp.float32)) + (1.0 if config.fit_intercept else 0.0))
    reg = jnp.asarray(reg, jnp.float32)
    if config.loss == "logistic":
        lip = r
    else:
        lip = 2.0 * r * (r * config.label_bound * jnp.sqrt(2.0 / reg) + config.label_bound)
    return _rn.minimizer_sensitivity(n, reg, lip)


def _spend_or_none(config: OutputPerturbationConfig, n: int, hparams: OutputPerturbationHparams):
    z = hparams.noise_multiplier
    return None if is_traced(z) or np.ndim(z) != 0 else _spend(config, hparams)


@full_precision
def fit(key: jax.Array, data: Any, hparams: OutputPerturbationHparams,
        config: OutputPerturbationConfig) -> FitResult:
    """Output perturbation ``theta* + N(0, (z Delta)^2 I)`` of the regularized minimizer.

    ``data``: a ``Dataset`` or ``(x, y)`` with rows within the public ``hparams.radius``
    (checked when it is concrete). Pure in ``key`` and the traced fields of ``hparams``
    (``reg``, ``radius``, ``noise_multiplier``; ``jit``/``vmap`` over them).

    Returns :class:`~dpfair_jax.algorithms.FitResult`: ``params`` the released ``theta`` (``[d]``,
    or ``[d + 1]`` with the intercept last); ``diagnostics``: ``theta_star`` (the non-private
    minimizer: computed from the data, do not publish it), ``std`` (``z Delta``) and
    ``sensitivity`` (``Delta = 2 L / (n reg)``; both functions of public quantities);
    ``spend`` = :func:`spend` (``None`` for a traced multiplier); ``report``: one release.

    Privacy: (epsilon, delta)-DP under replace-one with epsilon = :func:`spend`'s: the Gaussian
    mechanism with noise multiplier ``z`` on a query of sensitivity ``Delta`` (Chaudhuri et al.
    2011), for rows within ``radius``.
    """
    v.check_threefry_key(key)
    config = config.validate()
    hparams.validate()
    if isinstance(data, Dataset) and data.mask is not None:
        raise ValueError("data.mask is set: the minimizer uses every row (n is the sensitivity's); "
                         "drop padded rows first.")
    x, y = (data.x, data.y) if isinstance(data, Dataset) else (data[0], data[1])
    v.check_shape("x", x, ndim=2)
    n = v.check_same_length(x=x, y=y)
    v.check_finite("x", x)
    v.check_finite("y", y)
    if config.loss == "logistic":
        v.check_labels(y, 2)
    if not is_traced(hparams.radius):
        _check_rows(x, hparams.radius)
    if config.loss == "squared" and not is_traced(y) and float(np.max(np.abs(np.asarray(
            y, np.float64)))) > float(config.label_bound) * (1 + 1e-6):
        raise ValueError(f"|y| exceeds label_bound={config.label_bound}; clip labels or raise it.")
    theta_star = _minimize_jit(augment(x, config.fit_intercept), jnp.asarray(y), hparams.reg, loss=config.loss,
                               iters=config.iters)
    sens = _sensitivity_of(n, hparams, config)
    released, std = _rn.gaussian_release(key, theta_star, sens, hparams.noise_multiplier)
    diagnostics = {"theta_star": theta_star, "std": jnp.asarray(std, theta_star.dtype),
                   "sensitivity": jnp.asarray(sens, theta_star.dtype)}
    return FitResult(released, diagnostics, _spend_or_none(config, n, hparams), _smp.SamplingReport(steps=1))


def _spend(config: OutputPerturbationConfig, hparams: OutputPerturbationHparams) -> _acc.PrivacySpend:
    z = hparams.noise_multiplier
    # z = 0: no noise, no guarantee (epsilon = inf)
    eps = _acc.analytic_gaussian_epsilon(float(z), config.delta) if float(z) > 0 else math.inf
    return _acc.PrivacySpend(epsilon=eps, delta=float(config.delta), relation="replace_one",
                             unit="example", accountant="closed_form",
                             notes="output perturbation of the L2-regularized minimizer, analytic Gaussian "
                                   f"with noise multiplier {float(z):.6g} (Chaudhuri et al. 2011 "
                                   "sensitivity, Balle-Wang calibration)")


def spend(config: OutputPerturbationConfig, sizes: Any,
          hparams: OutputPerturbationHparams) -> _acc.PrivacySpend:
    """The spend of :func:`fit`: ``(epsilon, config.delta)``-DP under replace-one, epsilon the
    analytic Gaussian mechanism's at noise multiplier ``z`` (Balle & Wang 2018; it does not
    depend on ``n``, ``reg`` or ``radius``, which set the sensitivity the noise scales with).
    ``sizes``: the number of rows ``n``. The minimizer never reads the group ids ``s``: a record
    moving to another group is covered."""
    config = config.validate()
    v.check_int("sizes", sizes, minimum=1)
    z = hparams.noise_multiplier
    if is_traced(z) or np.ndim(z) != 0:
        raise ValueError("hparams.noise_multiplier must be one host number for spend (one spend per "
                         f"grid point), got shape {np.shape(z)}.")
    v.check_noise_multiplier(z, "hparams.noise_multiplier")
    return _spend(config, hparams)


def calibrate(config: OutputPerturbationConfig, sizes: Any, target: tuple[float, float], *,
              hparams: OutputPerturbationHparams | None = None) -> OutputPerturbationHparams:
    """``hparams`` (default ``OutputPerturbationHparams()``) with ``noise_multiplier =
    analytic_gaussian_sigma(epsilon, delta)`` (unit sensitivity) for ``target = (epsilon,
    delta)``, so that ``spend(...).epsilon <= epsilon``; ``delta`` must equal ``config.delta``
    (:func:`~dpfair_jax.privacy.accounting.calibration_target`)."""
    config = config.validate()
    v.check_int("sizes", sizes, minimum=1)
    eps, delta = _acc.calibration_target(target, config.delta)
    hparams = OutputPerturbationHparams() if hparams is None else hparams
    z = _acc.analytic_gaussian_sigma(eps, delta)
    out = dataclasses.replace(hparams, noise_multiplier=z)
    while _spend(config, out).epsilon > eps:  # root-finding rounding: step up
        z *= 1.0 + 1e-12
        out = dataclasses.replace(hparams, noise_multiplier=z)
    return out


def group_losses(theta: jax.Array, x_aug: jax.Array, y: jax.Array, s: jax.Array, num_groups: int,
                 loss: str = "logistic") -> tuple[jax.Array, jax.Array]:
    """Per-group mean losses ``[K]`` and the population mean loss (unregularized group risks)."""
    ell = example_loss(theta, x_aug, y, loss)
    oh = jax.nn.one_hot(s, num_groups, dtype=ell.dtype)
    cnt = jnp.sum(oh, axis=0)
    return (ell @ oh) / jnp.maximum(cnt, 1.0), jnp.mean(ell)


def _loss_increase(z, delta, y, loss):
    """``l(z + delta) - l(z)`` per example, accurate for small ``delta`` (no cancellation).

    Logistic: ``softplus(z + d) - softplus(z) = log1p(sigmoid(z) expm1(d))``; squared:
    ``d (2 (z - y) + d)``. Subtracting two float32 losses instead loses the ~1e-7 excessive risks
    of large-n, large-epsilon releases in rounding.
    """
    y = jnp.asarray(y, z.dtype)
    if loss == "logistic":
        return jnp.log1p(jax.nn.sigmoid(z) * jnp.expm1(delta)) - y * delta
    return delta * (2.0 * (z - y) + delta)


def _mc_core(key, theta_star, std, x_aug, y, s, *, num_groups, loss, num_draws, antithetic, chunk):
    oh = jax.nn.one_hot(s, num_groups, dtype=x_aug.dtype)
    wg = oh / jnp.maximum(jnp.sum(oh, axis=0), 1.0)  # [n, K] group-mean weights
    z = x_aug @ theta_star

    def one(k):
        noise = gaussian_noise(k, theta_star.shape, std, theta_star.dtype)
        delta = x_aug @ noise
        inc = _loss_increase(z, delta, y, loss)
        if antithetic:
            inc = 0.5 * (inc + _loss_increase(z, -delta, y, loss))
        return inc @ wg, jnp.mean(inc)

    keys = jax.random.split(key, num_draws)
    rg, rp = jax.lax.map(one, keys, batch_size=min(chunk, num_draws))
    return {"group": jnp.mean(rg, 0), "population": jnp.mean(rp),
            "group_se": jnp.std(rg, 0, ddof=1) / jnp.sqrt(num_draws),
            "population_se": jnp.std(rp, ddof=1) / jnp.sqrt(num_draws),
            "gap": jnp.max(jnp.abs(jnp.mean(rg, 0) - jnp.mean(rp)))}


_mc_jit = jax.jit(_mc_core, static_argnames=("num_groups", "loss", "num_draws", "antithetic", "chunk"))


def excessive_risk_mc(key: jax.Array, theta_star: jax.Array, std: Any, data: Dataset, *,
                      loss: str = "logistic", num_draws: int = 4000, antithetic: bool = True,
                      fit_intercept: bool = True, chunk: int = 512) -> dict[str, jax.Array]:
    """Monte Carlo group excessive risks ``R_a`` (eq. 9), ``R`` (eq. 10) and the gap (eq. 2).

    ``R_a = E_psi[L(theta* + psi; D_a)] - L(theta*; D_a)`` with ``psi ~ N(0, std^2 I)``, averaged
    over ``num_draws`` keys in one program (``lax.map`` in chunks). ``antithetic=True`` pairs each
    draw with ``-psi`` (same law), which cancels the zero-mean linear term of eq. (7) exactly, so
    the estimate converges fast even at small noise. ``std`` is traced (vmap over an epsilon
    grid). Returns ``group [K]``, ``population``, their standard errors and ``gap``.
    """
    v.check_threefry_key(key)
    if not isinstance(data, Dataset):
        raise ValueError("data must be a Dataset (group ids s are needed); build one with data.make_dataset.")
    v.check_choice("loss", loss, LOSSES)
    num_draws = v.check_int("num_draws", num_draws, minimum=2)
    v.check_positive("std", std, allow_zero=True)
    return _mc_jit(key, jnp.asarray(theta_star), std, augment(data.x, fit_intercept), data.y, data.s,
                   num_groups=data.num_groups, loss=loss, num_draws=num_draws,
                   antithetic=bool(antithetic), chunk=v.check_int("chunk", chunk))


def theorem1_prediction(std: Any, group_traces: Any, population_trace: Any) -> dict[str, jax.Array]:
    """Theorem 1: ``R_a ~ 1/2 std^2 Tr(H_a)``, ``R ~ 1/2 std^2 Tr(H)``, ``xi_a ~ |R_a - R|`` (eqs. 9, 10, 3).

    ``std = Delta sigma``; traces of the per-sample **mean** Hessians of the group losses.
    """
    s2 = 0.5 * jnp.asarray(std) ** 2
    g = s2 * jnp.asarray(group_traces)
    p = s2 * jnp.asarray(population_trace)
    return {"group": g, "population": p, "group_gap": jnp.abs(g - p)}
