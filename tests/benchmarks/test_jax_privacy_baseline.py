"""jax-privacy as a baseline (benchmarks/jax_privacy_baseline.py): same clipped sum, same accounting.

jax-privacy is in the ``bench`` extra, not in ``dev``: these tests skip without it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax_privacy", reason="jax-privacy is not installed (bench extra: pip install jax-privacy)")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from dpfair_jax import models  # noqa: E402
from dpfair_jax.algorithms import dpsgd  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
# The kit clips conservatively (each example scaled to at most C (1 - ~1e-6)); with float32 sums
# of B terms of norm <= C, the two clipped sums may differ by a few 1e-6 C per example.
CLIP_REL_MARGIN = 1e-6


def _baseline():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("jax_privacy_baseline", BENCH / "jax_privacy_baseline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _problem(kind: str):
    rng = np.random.default_rng(0)
    b = 8
    if kind == "cnn":
        model, num_classes = models.cnn(3, channels=(2,), image_shape=(6, 6, 1)), 3
        x = 3.0 * rng.normal(size=(b, 36)).astype(np.float32)
        y = rng.integers(0, 3, size=b).astype(np.int32)
        params = model.init(jax.random.key(0), None)
    else:
        model = models.logistic() if kind == "logistic" else models.mlp((4,))
        num_classes = 2
        x = 3.0 * rng.normal(size=(b, 5)).astype(np.float32)
        y = rng.integers(0, 2, size=b).astype(np.int32)
        params = model.init(jax.random.key(0), 5)
    pad = np.zeros(b, bool)
    pad[-2:] = True  # two padding rows, as a padded Poisson batch has
    return model, num_classes, params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(pad)


@pytest.mark.parametrize("kind", ["logistic", "mlp", "cnn"])
def test_clipped_sums_agree(kind):
    bl = _baseline()
    model, num_classes, params, x, y, pad = _problem(kind)
    out_loss = dpsgd.output_loss_for(model, num_classes)
    from jax_privacy import clipped_grad

    def loss(p, xb, yb):
        return jnp.sum(out_loss(model.apply(p, xb), yb))

    _, aux = clipped_grad(loss, l2_clip_norm=jnp.inf, batch_argnums=(1, 2), return_grad_norms=True)(params, x, y)
    norms = np.asarray(aux.grad_norms)[:-2]
    clip = float(np.median(norms))
    assert np.any(norms > 1.01 * clip) and np.any(norms < 0.99 * clip)  # some clipped, some not
    jp = bl.jax_privacy_clipped_sum(model.apply, out_loss, clip)
    assert jp.sensitivity() == clip
    ours, _, _ = dpsgd.clipped_grad_sum(model, params, x, y, clip_norm=clip, mask=~pad,
                                        num_classes=num_classes)
    theirs = jp(params, x, y, is_padding_example=pad)
    b = int(x.shape[0])
    atol = b * clip * (4 * CLIP_REL_MARGIN + 1e-6)
    for a, t in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(t), rtol=1e-5, atol=atol)


def test_batches_from_jax_privacy_selection():
    bl = _baseline()
    idx = bl.poisson_index_batches(1000, 50, 80, 20, seed=3)
    assert idx.shape == (20, 80) and idx.dtype == np.int32
    for row in idx:
        real = row[row >= 0]
        assert np.all(row[len(real):] == -1)  # padding at the end
        assert len(np.unique(real)) == len(real) and np.all(real < 1000)
    assert 30 < np.mean([np.sum(r >= 0) for r in idx]) < 70


def test_accounting_agrees():
    bl = _baseline()
    rows = bl.accounting_comparison([(10_000, 100, 1.0, 500, 1e-5), (34_000, 256, 0.8, 2_000, 1e-6)])
    for r in rows:
        assert abs(r["kit_rdp"] - r["jaxp_rdp_same_orders"]) <= 1e-6
        assert abs(r["kit_pld"] - r["jaxp_pld"]) <= 1e-6
        # jax-privacy's default RDP orders are another grid: close, not equal in general.
        assert abs(r["kit_rdp"] - r["jaxp_rdp"]) <= 0.01 * r["kit_rdp"]
    bl.print_accounting(rows)  # raises on disagreement beyond 1e-6
