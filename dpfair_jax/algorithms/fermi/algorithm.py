"""DP-FERMI's training run (paper 004, Algorithm 1): :func:`fit` on noisy DP-SGDA.

The ERMI terms of each example are split into the task loss, the part of ``psi_i`` that does not
depend on ``s_i`` and the part that does (:func:`dpfair_jax.fairness.ermi.psi_parts`); which of them
is clipped and noised follows ``config.privacy_unit`` (see :mod:`dpfair_jax.algorithms.fermi`). The
group frequencies come from one noisy histogram (``privacy.mechanisms.noisy_histogram``) or from
the caller.

Privacy: (epsilon, delta)-DP for ``config.privacy_unit`` with the multipliers of
:func:`dpfair_jax.algorithms.fermi.calibrate` (accounted by :mod:`.ledger`); every clip and noise
draw is DP-SGDA's (:mod:`dpfair_jax.algorithms.sgda`) or the histogram's.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax import models as M
from dpfair_jax.algorithms import sgda
from dpfair_jax.algorithms._trio import FitResult
from dpfair_jax.algorithms.fermi.config import FermiConfig, FermiHparams, check_hparams
from dpfair_jax.algorithms.fermi.ledger import _spend
from dpfair_jax.data.dataset import Dataset
from dpfair_jax.fairness import ermi as E
from dpfair_jax.fairness.evaluation import degeneracy, predict
from dpfair_jax.privacy import clipping, ghost
from dpfair_jax.privacy import mechanisms as Mech
from dpfair_jax.privacy.precision import full_precision

__all__ = ["fit", "init_w", "task_loss"]

_COUNT_KEY = 0x636F756E  # fold_in tag of the noisy-histogram key (keeps the other keys unchanged)


def init_w(key: jax.Array, config: FermiConfig) -> jax.Array:
    """``W_0``: zeros (Algorithm 1) or standard normal (``w_init="randn"``, the authors' code)."""
    shape = (config.num_conditions, config.num_groups, config.num_classes)
    if config.w_init == "zeros":
        return jnp.zeros(shape, jnp.float32)
    return jax.random.normal(key, shape, jnp.float32)


def task_loss(model, logits: jax.Array, y) -> jax.Array:
    """The task loss of ONE example from its logits (as ``model.apply`` returns them for one
    example): binary logistic loss for a one-logit model, softmax cross-entropy otherwise. The
    loss DP-FERMI and PF-LD minimize besides their fairness term."""
    if model.num_outputs == 1:
        return M.binary_logistic_loss(logits, y)
    return M.softmax_cross_entropy(logits, y)


def _frequencies(config: FermiConfig, data: dict, key: jax.Array, p_s=None, p_y=None, seen: dict | None = None):
    """``(P [C, k], example weights [n])`` from ``data = {"x", "y", "s"}``: the group frequencies
    of each condition (``P_S`` for DP, ``P_{S|Y}`` for EO) and the per-example weights
    (``1 / p_Y(y_i)`` for unweighted EO, else 1).

    ``group_frequencies="noisy"``: from one noisy ``[l, k]`` histogram of ``(y, s)``
    (:func:`dpfair_jax.privacy.mechanisms.noisy_histogram`, charged by :func:`spend`), cells
    clamped at 1. ``"public"``: ``p_s`` (``[k]`` or ``[l, k]``) and, for unweighted EO under the
    all-features unit, ``p_y`` are the caller's public values (under the sensitive-attribute unit
    ``y`` is public, so ``p_Y`` may come from the data). Each histogram released is counted in
    ``seen["noisy_histogram"]`` (for the run's report).
    """
    k, l = config.num_groups, config.num_classes
    n = data["x"].shape[0]
    unweighted_eo = config.fairness == "eo" and not config.eo_weighted
    if config.group_frequencies == "noisy":
        counts = Mech.noisy_histogram(
            key, data["y"] * k + data["s"], l * k, noise_multiplier=config.count_noise_multiplier,
            relation=config.relation(),
        ).reshape(l, k)
        if seen is not None:
            seen["noisy_histogram"] = seen.get("noisy_histogram", 0) + 1
        counts = jnp.maximum(counts, 1.0)
        if config.fairness == "eo":
            P = counts / jnp.sum(counts, axis=1, keepdims=True)
        else:
            P = (jnp.sum(counts, axis=0) / jnp.sum(counts))[None]
        p_y_hat = jnp.sum(counts, axis=1) / jnp.sum(counts)
    else:
        P = jnp.asarray(p_s, jnp.float32)
        P = P[None] if P.ndim == 1 else P
        p_y_hat = None if p_y is None else jnp.asarray(p_y, jnp.float32)
        if unweighted_eo and p_y_hat is None:  # y is public under the sensitive-attribute unit
            p_y_hat = jnp.mean(jax.nn.one_hot(data["y"], l), axis=0)
    if not unweighted_eo:
        return P, jnp.ones((n,), jnp.float32)
    return P, 1.0 / jnp.maximum(p_y_hat[data["y"]], 1e-12)


def _check_frequencies(config: FermiConfig, p_s, p_y) -> None:
    """The frequencies' source must match the config (so :func:`spend` charges what :func:`fit` does)."""
    if config.group_frequencies == "noisy":
        if p_s is not None or p_y is not None:
            raise ValueError("p_s/p_y given but config.group_frequencies='noisy' (the default releases "
                             "them privately); set group_frequencies='public' to use public values.")
        return
    if p_s is None:
        raise ValueError("config.group_frequencies='public' needs public group frequencies: pass p_s "
                         "([k] for DP, [num_classes, k] for EO) to fit, or use group_frequencies='noisy'.")
    if v.is_traced(p_s):
        return
    arr = np.asarray(p_s, np.float64)
    ok = {(config.num_groups,), (1, config.num_groups)} if config.fairness == "dp" else {
        (config.num_classes, config.num_groups)}
    if arr.shape not in ok:
        raise ValueError(f"p_s must have shape {sorted(ok)[0]}, got {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("p_s must hold positive, finite group frequencies.")
    if (config.fairness == "eo" and not config.eo_weighted and p_y is None
            and config.privacy_unit == "all_features"):
        raise ValueError("unweighted EO under privacy_unit='all_features' with public frequencies needs "
                         "public label frequencies: pass p_y ([num_classes]) to fit.")


def _fermi_parts(config: FermiConfig, P: jax.Array):
    """``parts(logits, W, ex) -> (task loss, s-free part, s-dependent part)`` of one example
    (:func:`task_loss` and :func:`dpfair_jax.fairness.ermi.psi_parts`; rows of ``W`` taken with
    :func:`~dpfair_jax.fairness.ermi.select_row`, whose per-example gradient is not a scatter)."""
    model = config.model
    cell = E.one_cell_mask(config.num_groups, config.num_classes) if config.ermi_form == "one_cell" else 1.0

    def parts(logits, W, ex):
        probs = E.soft_prediction(logits)
        Wc = E.select_row(W, ex["c"]) * cell
        pub, sens = E.psi_parts(probs, ex["s"], Wc, P[ex["c"]], masked_row=True)
        return task_loss(model, logits, ex["y"]), ex["wt"] * pub, ex["wt"] * sens

    return parts


def _grad_path(config: FermiConfig, x: jax.Array, theta0: Any) -> str:
    """``"linear"`` (GLM ghost norms), ``"mlp"`` (dense-stack ghost norms), ``"cnn"`` (CNN ghost
    norms) or ``"generic"`` (vmap), from what the model declares
    (:func:`dpfair_jax.privacy.clipping.per_example_path`: ``Model.layers``) for features ``x`` and
    parameters shaped like ``theta0``. MLPs take the dispatcher's dense ghost path through
    ``sgda.dpsgda(model=)``: the same clipped sums as ``vmap(grad)`` up to float32 rounding (the
    norms come from ``||a_i||^2 ||g_i||^2`` instead of the materialized gradients)."""
    kind = clipping.per_example_path(config.model, "vmap" if config.grad_path == "generic" else "auto")
    if kind == "glm" and x.ndim == 2:
        return "linear"
    if kind == "mlp" and x.ndim == 2:
        return "mlp"
    if kind == "cnn" and ghost.cnn_matches_apply(config.model, theta0):
        return "cnn"
    return "generic"


def _losses(config: FermiConfig, parts_z, lam, linear: bool):
    """``(private_loss, public_loss)`` per example for the configured privacy unit; functions of
    the logits (``linear``: the GLM and CNN ghost paths) or of the model parameters."""
    if linear:
        parts = parts_z
    else:
        def parts(theta, W, ex):
            return parts_z(config.model.apply(theta, ex["x"]), W, ex)
    if config.privacy_unit == "sensitive_attribute":
        def private(theta, W, ex):
            return lam * parts(theta, W, ex)[2]

        def public(theta, W, ex):
            task, pub, _ = parts(theta, W, ex)
            return task + lam * pub

        return private, public

    def private_all(theta, W, ex):
        task, pub, sens = parts(theta, W, ex)
        return task + lam * (pub + sens)

    return private_all, None


def _check_data(data: Dataset, config: FermiConfig) -> None:
    if not isinstance(data, Dataset):
        raise ValueError("data must be a dpfair_jax.data.Dataset (x, y, s, num_groups).")
    if data.num_groups != config.num_groups:
        raise ValueError(f"data.num_groups={data.num_groups} but config.num_groups="
                         f"{config.num_groups}; make them equal.")
    shape = getattr(config.model, "input_shape", None)
    if shape is not None and tuple(shape) != tuple(data.x.shape[1:]):
        raise ValueError(f"the model expects examples of shape {tuple(shape)} but data.x has "
                         f"{tuple(data.x.shape[1:])}; build the model with input_dim={data.x.shape[1]} "
                         "(or the data's image shape).")
    if v.is_traced(data.x):
        return
    v.check_finite("x", data.x)
    v.check_group_ids(data.s, config.num_groups, "s", min_size=1)
    v.check_labels(data.y, config.num_classes, "y")


def _as_float32(hparams: FermiHparams) -> FermiHparams:
    """Every field as a float32 array, so Python floats, NumPy scalars and arrays of one shape all
    reach the compiled program with one signature (the values are those the run uses anyway)."""
    return jax.tree_util.tree_map(lambda f: jnp.asarray(f, jnp.float32), hparams)


@full_precision
def fit(
    key: jax.Array,
    data: Dataset,
    hparams: FermiHparams,
    config: FermiConfig,
    *,
    batch_key: jax.Array | None = None,
    params0: Any = None,
    p_s: Any = None,
    p_y: Any = None,
    validate: bool = True,
    parts_builder: Any = None,
) -> FitResult:
    """Train with DP-FERMI (Algorithm 1); pure in ``(key, data, hparams)``, jit/vmap-able.

    ``hparams`` fields are traced (vmap over ``lam`` and the noise multipliers to sweep a grid).
    ``batch_key`` (optional) draws the batches, so runs vmapped over hyperparameters can share
    them. ``params0`` overrides ``config.model.init``. ``p_s`` (``[k]`` or ``[l, k]`` for EO) and
    ``p_y`` (``[l]``): public frequencies, only with ``config.group_frequencies="public"`` (the
    default draws them from a noisy histogram charged by :func:`spend`). ``parts_builder(config,
    P) -> parts`` replaces the ERMI terms by another regularizer split the same way (used by
    :mod:`.pfld`). ``validate=False`` skips the host checks (after checking once, e.g. under
    ``vmap``).

    Returns :class:`~dpfair_jax.algorithms.FitResult`: ``params`` the model parameters (released,
    covered by ``spend``); ``diagnostics``: ``W`` (the ascent variable ``[C, k, l]``, post-processing
    of the noisy updates: released, covered), ``truncated_steps`` (depends on the sampling only),
    and, computed from the private training data and NOT to be published,
    ``clipped_frac_theta``, ``clipped_frac_w``, the final model's ``train_error`` and its
    :func:`~dpfair_jax.fairness.degeneracy` flags (``constant_predictions``, ``at_base_rate``,
    ``degenerate``, ``majority_share``, ``base_error``): use them to flag runs; ``spend`` =
    :func:`spend` ``(config, n, hparams)`` (``None`` when a noise multiplier is traced);
    ``report``: the SamplingReport (DP-SGDA's steps, sampler, rate and width, plus
    ``("noisy_histogram", 1)`` when the frequencies were released).

    Called eagerly, it runs one compiled program per ``(config, parts_builder)`` and argument
    shapes: the key, the data, every ``hparams`` field (as float32), ``p_s``/``p_y``, ``params0``
    and ``batch_key`` are its traced arguments, so a Python loop over lambdas, noise multipliers,
    step sizes or seeds compiles once (build the config, and its model, once outside the loop: a new
    model object is a new program). Called inside a ``jit``/``vmap`` (any argument traced), it is
    traced into the caller's program.

    Privacy: (epsilon, delta)-DP for the unit ``config.privacy_unit`` when the noise multipliers
    come from :func:`calibrate` with the same config and data size (see the module docstring for
    the relation and accounting); ``variant="paper"`` with ``lam > 1`` and
    ``clip_mode="official_batch"`` void that guarantee.
    """
    if validate:
        config.validate(data.x.shape[0])
        _check_data(data, config)
        v.check_threefry_key(key)
        check_hparams(hparams)
        _check_frequencies(config, p_s, p_y)
    if data.mask is not None:
        raise ValueError("fit does not take padded datasets (mask); drop the padding rows first.")
    examples = {"x": data.x, "y": data.y, "s": data.s}
    args = (key, examples, hparams, batch_key, params0, p_s, p_y)
    builder = parts_builder or _fermi_parts
    if v.is_traced(*args):
        res = _fit_impl(config, builder, *args)  # inside the caller's jit/vmap: its program
    else:
        res = _fit_program(config, builder, key, examples, _as_float32(hparams), *args[3:])
    if v.is_traced(hparams.noise_theta, hparams.noise_w):
        return res
    n = int(data.x.shape[0])
    return res._replace(spend=_spend(config, n, v.host_float("noise_theta", hparams.noise_theta),
                                     v.host_float("noise_w", hparams.noise_w)))


def _fit_impl(config: FermiConfig, parts_builder: Any, key: jax.Array, data: dict, hparams: FermiHparams,
              batch_key: Any, params0: Any, p_s: Any, p_y: Any) -> FitResult:
    """The body of :func:`fit` on checked inputs (``data``: ``{"x", "y", "s"}``)."""
    k_init, k_w, k_run = jax.random.split(key, 3)
    model = config.model
    x = data["x"]
    theta0 = model.init(k_init, x.shape[1:] if x.ndim > 2 else x.shape[1]) if params0 is None else params0
    W0 = init_w(k_w, config)
    seen: dict = {}
    P, weights = _frequencies(config, data, jax.random.fold_in(key, _COUNT_KEY), p_s, p_y, seen)
    lam = jnp.asarray(hparams.lam, jnp.float32)
    examples = {
        "x": x,
        "y": data["y"],
        "s": data["s"],
        "c": data["y"] if config.fairness == "eo" else jnp.zeros_like(data["s"]),
        "wt": weights,
    }
    m = config.batch_size
    official = config.clip_mode == "official_batch"
    batch_scale = float(m) if official else 1.0
    if config.privacy_unit == "sensitive_attribute":
        clip_theta = lam * hparams.clip_theta
    else:
        clip_theta = jnp.asarray(hparams.clip_theta, jnp.float32)
    clip_w = lam * hparams.clip_w
    noise_theta = jnp.asarray(hparams.noise_theta, jnp.float32) / batch_scale
    noise_w = jnp.asarray(hparams.noise_w, jnp.float32) / batch_scale
    if config.variant == "paper":  # V_t not scaled by lam (Alg. 1 line 6 as printed)
        noise_w = jnp.where(lam > 0, noise_w / jnp.maximum(lam, 1e-30), 0.0)
    hp = sgda.SGDAHparams(
        lr_theta=hparams.lr_theta, lr_w=hparams.lr_w, clip_theta=clip_theta * batch_scale,
        clip_w=clip_w * batch_scale, noise_theta=noise_theta, noise_w=noise_w, radius=hparams.radius,
    )
    parts = parts_builder(config, P)
    path = _grad_path(config, x, theta0)
    private, public = _losses(config, parts, lam, path != "generic")
    res = sgda.dpsgda(
        k_run, examples, theta0, W0, hp, config.sgda_config(), private_loss=private,
        public_loss=public, batch_key=batch_key, validate=False, linear=path == "linear",
        cnn_model=config.model if path == "cnn" else None, model=config.model if path == "mlp" else None,
    )
    yhat = predict(model, res.theta, x)
    train = {"train_error": jnp.mean((yhat != data["y"]).astype(jnp.float32)),
             **degeneracy(yhat, data["y"], config.num_classes)}
    report = res.report.with_releases(*seen.items())
    return FitResult(res.theta, {"W": res.w, **res.diagnostics, **train}, None, report)


_fit_program = jax.jit(_fit_impl, static_argnums=(0, 1))
