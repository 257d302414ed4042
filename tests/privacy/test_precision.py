"""Privacy-critical arithmetic runs at full float32 precision on every backend.

On GPUs JAX's default float32 matrix products are TF32 (10 mantissa bits), which would let one
example's clipped contribution exceed the clip norm by ~1e-3 relative (see
``dpfair_jax.privacy.precision``). These tests check the lowered programs (every matrix product
and convolution in a privacy primitive carries ``Precision.HIGHEST`` even when the caller asked
for TF32), that every public private-data entry point is decorated, and, on any backend, that
each example's contribution to a clipped sum has norm at most the clip norm.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import dpsgd as D
from dpfair_jax.privacy import aggregation as agg
from dpfair_jax.privacy.precision import full_precision

HIGHEST = jax.lax.Precision.HIGHEST
PRECISION_PRIMITIVES = ("dot_general", "conv_general_dilated")

DECORATED = {
    "dpfair_jax.privacy.clipping": "per_example_grads per_example_norms clip_per_example clip_per_layer weighted_sum "
                                   "clipped_grad_sum glm_per_example_norms glm_clipped_grad_sum dense_ghost_norm_sq "
                                   "mlp_clipped_grad_sum cnn_clipped_grad_sum",
    "dpfair_jax.privacy.ghost": "gram_norm_sq dense_norm_sq embedding_norm_sq conv2d_norm_sq dense_weighted_grad "
                                "embedding_weighted_grad conv2d_weighted_grad cnn_ghost_backward cnn_weighted_grad",
    "dpfair_jax.privacy.aggregation": "private_sum private_mean group_clipped_sums combine_group_means "
                                      "group_weighted_private_mean",
    "dpfair_jax.privacy.mechanisms": "noisy_sufficient_statistics",
    "dpfair_jax.algorithms.dpsgd": "fit clipped_grad_sum",
    "dpfair_jax.algorithms.fermi": "fit",
    "dpfair_jax.algorithms.sgda": "dpsgda",
    "dpfair_jax.algorithms.budget_tailoring": "fit fit_arrays fit_many fit_many_from_draws fit_many_prepared prepare "
                                             "clipped_sum_table table_group_sums stage1_standard_errors "
                                             "stage2_descent noisy_group_release",
    "dpfair_jax.algorithms.mean_estimation": "laplace_mean gaussian_mean stratified_laplace_mean "
                                             "stratified_gaussian_mean coinpress_mean stratified_coinpress noisy_counts",
    "dpfair_jax.algorithms.mitigation": "fit",
    "dpfair_jax.algorithms.output_perturbation": "minimize fit",
    "dpfair_jax.algorithms.pfld": "fit",
    "dpfair_jax.algorithms.reductions": "lopt_grid_private dp_weighted_least_squares weighted_least_squares "
                                        "frank_wolfe private_cgoo private_cgoo_regression clipped_group_losses "
                                        "group_losses",
}


def _precisions(jaxpr) -> list[tuple[str, object]]:
    """(primitive name, precision) of every matmul/convolution in ``jaxpr`` and its sub-jaxprs."""
    found = []

    def walk(jp):
        jp = getattr(jp, "jaxpr", jp)
        for eqn in jp.eqns:
            if eqn.primitive.name in PRECISION_PRIMITIVES:
                found.append((eqn.primitive.name, eqn.params.get("precision")))
            for val in eqn.params.values():
                for sub in (val if isinstance(val, (tuple, list)) else (val,)):
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        walk(sub)

    walk(jaxpr)
    return found


def _assert_all_highest(fn, *args):
    with jax.default_matmul_precision("tensorfloat32"):  # what a GPU user's default amounts to
        jaxpr = jax.make_jaxpr(fn)(*args)
    found = _precisions(jaxpr)
    assert found, "expected at least one matrix product or convolution"
    bad = [(name, p) for name, p in found if p is None or any(q != HIGHEST for q in p)]
    assert not bad, f"{len(bad)} of {len(found)} products not at HIGHEST precision: {bad[:3]}"


def test_decorator_sets_highest_and_restores():
    a = jnp.ones((3, 4))

    @full_precision
    def f(u):
        return u @ u.T

    with jax.default_matmul_precision("tensorfloat32"):
        inner = _precisions(jax.make_jaxpr(f)(a))
        outer = _precisions(jax.make_jaxpr(lambda u: u @ u.T)(a))
    assert inner and all(q == HIGHEST for q in inner[0][1])
    assert outer and all(q != HIGHEST for q in outer[0][1])  # the caller's setting is left alone


@pytest.mark.parametrize("module_name", sorted(DECORATED))
def test_private_entry_points_are_decorated(module_name):
    module = importlib.import_module(module_name)
    missing = [n for n in DECORATED[module_name].split() if not getattr(getattr(module, n), "__full_precision__", False)]
    assert not missing, f"{module_name}: not run at full precision: {missing}"


def _data(b=24, d=7, seed=0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(b, d)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 2, size=b), jnp.float32)
    return x, y


@pytest.mark.parametrize("name", ["logistic", "mlp", "cnn"])
def test_clipped_grad_sum_lowers_every_product_at_highest(name):
    if name == "cnn":
        model, k = M.cnn(3, channels=(2, 3), image_shape=(6, 6, 1)), 3
        params = model.init(jax.random.key(0), None)
        rng = np.random.default_rng(1)
        x = jnp.asarray(rng.normal(size=(5, 36)), jnp.float32)
        y = jnp.asarray(rng.integers(0, 3, size=5), jnp.int32)
    else:
        model, k = (M.logistic(), 2) if name == "logistic" else (M.mlp((5,)), 2)
        params = model.init(jax.random.key(0), 7)
        x, y = _data()
    _assert_all_highest(lambda p: D.clipped_grad_sum(model, p, x, y, clip_norm=0.5, num_classes=k), params)


def test_private_mean_lowers_every_product_at_highest():
    x, _ = _data()
    _assert_all_highest(lambda t: agg.private_mean(jax.random.key(0), {"w": t}, clip_norm=0.5,
                                                   noise_multiplier=1.0, denominator=24.0), x)


@pytest.mark.parametrize("name", ["logistic", "mlp", "cnn"])
def test_each_contribution_within_clip_norm_under_tf32_default(name):
    """One example at a time (mask), the clipped sum's norm is at most C: float32 rounding only."""
    clip = 0.3
    if name == "cnn":
        model, k = M.cnn(3, channels=(2, 3), image_shape=(6, 6, 1)), 3
        params = model.init(jax.random.key(0), None)
        rng = np.random.default_rng(2)
        x = jnp.asarray(3.0 * rng.normal(size=(12, 36)), jnp.float32)
        y = jnp.asarray(rng.integers(0, 3, size=12), jnp.int32)
    else:
        model, k = (M.logistic(), 2) if name == "logistic" else (M.mlp((16,)), 2)
        params = model.init(jax.random.key(0), 7)
        x, y = _data(b=12)
        x = 3.0 * x  # large gradients: every example is clipped
    n = x.shape[0]

    def one(i):
        mask = (jnp.arange(n) == i).astype(jnp.float32)
        sums, norms, _ = D.clipped_grad_sum(model, params, x, y, clip_norm=clip, mask=mask, num_classes=k)
        flat = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(sums)])
        return jnp.linalg.norm(flat), norms[i]

    with jax.default_matmul_precision("tensorfloat32"):
        contrib, norms = jax.jit(jax.vmap(one))(jnp.arange(n))
    contrib, norms = np.asarray(contrib, np.float64), np.asarray(norms)
    assert np.all(norms > clip), "test data should clip every example"
    assert np.all(contrib <= clip * (1 + 1e-5)), f"max contribution {contrib.max():.8f} > clip {clip}"
    np.testing.assert_allclose(contrib, clip, rtol=1e-5)
