"""The tradeoff study's sensitive-attribute unit audited from its public entry point
(dpfair_jax.audit.study_games): neighbours differ in one record's s_i; DP-SGD's recorded 0 must
mean bitwise identical releases, DP-FERMI (which reads s) must release different models and its
empirical lower bound must stay at or below its recorded spend."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpfair_jax.audit import study_games as SG
from dpfair_jax.data import make_dataset
from dpfair_jax.privacy.selection import RandomStopping


def _data(n: int = 60):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    x[0] = (3.0, 3.0, 3.0)  # the record whose s changes: far out, so its own score moves most
    y = (rng.random(n) < 0.5).astype(np.int32)
    s = (np.arange(n) % 2).astype(np.int32)
    return make_dataset(x, y, s, num_groups=2, num_classes=2)


def test_attribute_neighbour_changes_only_one_s():
    d = _data()
    nb = SG.attribute_neighbour(d, 0, 1)
    assert np.array_equal(np.asarray(nb.x), np.asarray(d.x)) and np.array_equal(np.asarray(nb.y), np.asarray(d.y))
    diff = np.flatnonzero(np.asarray(nb.s) != np.asarray(d.s))
    assert diff.tolist() == [0] and int(np.asarray(nb.s)[0]) == 1


@pytest.mark.parametrize("call, field", [
    (lambda: SG.attribute_neighbour(_data(), 0, 0), "group"),  # its own group
    (lambda: SG.attribute_neighbour(_data(), 0, 2), "group"),
    (lambda: SG.attribute_neighbour(_data(), 60, 1), "index"),
    (lambda: SG.attribute_neighbour((1, 2, 3), 0, 1), "data"),
    (lambda: SG.tradeoff_attribute_game(_data(), 0, 1, privacy_unit="example"), "privacy_unit"),
])
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


@pytest.mark.slow
def test_study_attribute_unit_dpsgd_zero_and_dpfermi_bound():
    """The public study (default configuration apart from a small grid, one epoch, 8 replicates):
    DP-SGD records 0 and its models and training-side columns are bitwise identical under a
    change of s_0 (same seed); DP-FERMI's models move (it reads s: at epsilon = inf the check
    sees the difference, so identity is not vacuous) and its lower bound at epsilon = 1 is at
    most its recorded spend."""
    one = {"lr_theta": (1.0,), "clip_theta": (1.0,)}
    pair = SG.tradeoff_attribute_game(
        _data(), 0, 1, methods=("dpfermi", "dpsgd"), lams=(4.0,), epsilons=(1.0, math.inf), replicates=8,
        epochs=1, batch_size=30, runs=RandomStopping(1.0, 1.0),
        search={"dpsgd": one, "dpfermi": dict(one, lr_w=(0.5,), radius=(5.0,))})
    for eps in (1.0, math.inf):
        z = SG.zero_claim_check(pair, "dpsgd", eps)
        assert z["identical"], z
    assert SG.zero_claim_check(pair, "dpsgd", 1.0)["claimed_epsilon"] == 0.0
    for eps in (1.0, math.inf):  # the same check sees DP-FERMI's s-reading: identity is not vacuous
        moved = SG.zero_claim_check(pair, "dpfermi", eps)
        assert not moved["identical"] and "params" in moved["differing"]
    row = SG.attribute_lower_bound(pair, "dpfermi", 1.0)
    assert 0.0 < row["claimed_epsilon"] <= 1.0 and row["relation"] == "replace_one"
    assert row["passed"] and row["epsilon_lower_bound"] <= row["claimed_epsilon"] and row["moved"]
    assert row["trials"] == 8
