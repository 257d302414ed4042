"""privacy.accounting.calibration_target and step_up_until: the checked (epsilon, delta) target and
the final nudge that DP-SGD's and the mitigation's ``calibrate`` share (same numbers as the loops
they replace: the multiplier sequence is written out here independently)."""

import math

import pytest

from dpfair_jax.privacy import accounting as A


def test_calibration_target_returns_floats_and_refuses_bad_targets():
    assert A.calibration_target((1, 1e-5), 1e-5) == (1.0, 1e-5)
    assert A.calibration_target([0.5, 1e-6], 1e-6) == (0.5, 1e-6)
    with pytest.raises(ValueError, match="differs from config.delta"):
        A.calibration_target((1.0, 1e-6), 1e-5)
    with pytest.raises(ValueError, match=r"\(epsilon, delta\) pair"):
        A.calibration_target(1.0, 1e-5)
    with pytest.raises(ValueError, match=r"\(epsilon, delta\) pair"):
        A.calibration_target((1.0, 1e-5, 0.0), 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        A.calibration_target((0.0, 1e-5), 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        A.calibration_target((math.inf, 1e-5), 1e-5)
    with pytest.raises(ValueError, match="delta"):
        A.calibration_target((1.0, 1.5), 1.5)


def test_step_up_until_is_the_first_multiplier_of_the_sequence_that_meets_the_target():
    target = 2.0

    def eps_of(z):  # decreasing; 2.0 is reached at z = 0.5
        return 1.0 / z

    z0 = 0.5 * (1.0 - 3.5e-9)  # three or four steps of 1e-9 below
    want, z = None, z0
    for _ in range(100):
        if 1.0 / z <= target:
            want = z
            break
        z = z * (1.0 + 1e-9)
    got = A.step_up_until(eps_of, z0, target)
    assert got == want and got > z0 and eps_of(got) <= target
    assert A.step_up_until(eps_of, 0.7, target) == 0.7  # already meets it: unchanged
    with pytest.raises(ValueError, match="did not reach"):
        A.step_up_until(eps_of, 0.1, target)  # 1e-7 relative steps cannot reach 0.5
    with pytest.raises(ValueError, match="max_steps"):
        A.step_up_until(eps_of, 0.7, target, max_steps=0)


def test_dpsgd_and_mitigation_calibrate_refuse_a_target_delta_other_than_config_delta():
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import dpsgd, mitigation

    model = M.logistic(input_dim=3)
    with pytest.raises(ValueError, match="differs from config.delta"):
        dpsgd.calibrate(dpsgd.DPSGDConfig(model=model, delta=1e-5), 1000, (1.0, 1e-6))
    with pytest.raises(ValueError, match="differs from config.delta"):
        mitigation.calibrate(mitigation.MitigationConfig(model=model, delta=1e-5), 1000, (1.0, 1e-6))


def test_step_up_until_scales_tuples_together_and_brackets_with_a_ceiling():
    def eps_of_pair(zs):  # the pair is scaled as one: only the product matters here
        return 1.0 / (zs[0] * zs[1])

    z0 = (0.5, 2.0 * (1.0 - 2.5e-9))
    got = A.step_up_until(eps_of_pair, z0, 1.0)
    want = z0
    while 1.0 / (want[0] * want[1]) > 1.0:
        want = (want[0] * (1.0 + 1e-9), want[1] * (1.0 + 1e-9))
    assert got == want and isinstance(got, tuple)
    # a coarse bracket from below: 1, 1.5, 2.25 (first with 1/z <= 0.5)
    assert A.step_up_until(lambda z: 1.0 / z, 1.0, 0.5, growth=1.5, max_steps=10**6, ceiling=1e6) == 2.25
    with pytest.raises(ValueError, match="raise epsilon"):
        A.step_up_until(lambda z: 1.0 / z, 1.0, 1e-9, growth=1.5, max_steps=10**6, ceiling=1e6)


def test_truncated_spend_takes_the_charge_out_of_delta():
    """epsilon_at(d) = log(1/d) (decreasing in d), charge_at(e) = 1e-8 (1 + e^e): the statement is
    (eps, delta) with epsilon_at(delta - charge_at(eps)) <= eps; a charge over delta falls back to
    (epsilon_at(delta), delta + charge)."""
    def eps_at(d):
        return math.log(1.0 / d)

    def charge_at(e):
        return 1e-8 * (1.0 + math.exp(e))

    delta = 1e-3
    eps, total, charge = A.truncated_spend(eps_at, delta, charge_at)
    assert total == delta and charge == charge_at(eps) and eps_at(delta - charge) <= eps
    assert eps_at(delta) < eps < eps_at(delta - charge) * (1 + 1e-6)
    eps, total, charge = A.truncated_spend(eps_at, 1e-9, lambda e: 2e-9)  # the charge alone exceeds delta
    assert eps == eps_at(1e-9) and total == 1e-9 + 2e-9 and charge == 2e-9
    assert A.truncated_spend(eps_at, delta, lambda e: 0.0) == (eps_at(delta), delta, 0.0)


def test_calibration_delta_refuses_a_charge_that_fills_the_target():
    assert A.calibration_delta(1.0, 1e-5, 2e-9) == 1e-5 - 2e-9
    with pytest.raises(ValueError, match="alone reaches the target delta.*max_batch_size"):
        A.calibration_delta(1.0, 1e-5, 1e-5)
