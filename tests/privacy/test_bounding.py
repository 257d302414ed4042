"""privacy.bounding: clamped scalars and norm-scaled vectors against NumPy, the sensitivities they
promise by brute force over neighbouring pairs, and inf meaning unchanged."""

import numpy as np
import pytest

from dpfair_jax.privacy import bounding as B
from dpfair_jax.privacy import relations as R


def test_clip_to_norm_against_numpy_and_inf_unchanged():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 4)).astype(np.float32) * rng.uniform(0, 3, (50, 1)).astype(np.float32)
    v[0] = 0.0
    norms = np.linalg.norm(v, axis=1)
    out = np.asarray(B.clip_to_norm(v, norms[:, None], 1.5))
    ref = v * np.minimum(1.0, 1.5 / np.maximum(norms, 1e-30))[:, None]
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    assert np.all(np.linalg.norm(out, axis=1) <= 1.5 * (1 + 1e-6))
    assert np.any(norms > 1.5) and np.any((norms < 1.5) & (norms > 0))  # both branches exercised
    np.testing.assert_array_equal(np.asarray(B.clip_to_norm(v, norms[:, None], np.inf)), v)
    np.testing.assert_array_equal(np.asarray(B.norm_clip_divisor(norms, np.inf)), np.ones(50, np.float32))


@pytest.mark.parametrize("lower, upper", [(0.0, 1.0), (-2.0, 0.5), (0.5, 3.0)])
def test_clip_to_interval_sum_sensitivity_by_brute_force(lower, upper):
    """Sums of clamped values move by at most bounded_sum_sensitivity under each relation, and the
    bound is attained by the extreme neighbours."""
    rng = np.random.default_rng(1)
    x = rng.normal(scale=4.0, size=20).astype(np.float32)
    base = float(np.sum(B.clip_to_interval(x, lower, upper)))
    sens = R.bounded_sum_sensitivity(lower, upper)
    worst_add = worst_rep = 0.0
    for z in np.r_[np.linspace(-10, 10, 41), lower, upper].astype(np.float32):
        added = float(np.sum(B.clip_to_interval(np.r_[x, z], lower, upper)))
        worst_add = max(worst_add, abs(added - base))
        for i in range(len(x)):
            y = x.copy()
            y[i] = z
            worst_rep = max(worst_rep, abs(float(np.sum(B.clip_to_interval(y, lower, upper))) - base))
    assert worst_add <= sens.under("add_remove") + 1e-5
    assert worst_rep <= sens.under("replace_one") + 1e-5
    assert worst_add >= sens.under("add_remove") - 1e-5
    assert worst_rep >= sens.under("replace_one") - 1e-5
