"""DP-FERMI refuses every out-of-range hyperparameter and a model/data shape mismatch on the host,
before any compute, with a ValueError naming the field."""

import math

import jax
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.data import make_dataset


def _data(n=40, d=3):
    rng = np.random.default_rng(0)
    return make_dataset(rng.normal(size=(n, d)), rng.integers(0, 2, n), np.arange(n) % 2, num_groups=2)


@pytest.mark.parametrize("field, value", [
    ("lam", -1.0), ("lam", math.nan), ("lam", math.inf),
    ("lr_theta", math.nan), ("lr_theta", -0.1), ("lr_theta", 0.0), ("lr_w", math.inf),
    ("clip_theta", 0.0), ("clip_w", -1.0), ("clip_theta", math.nan),
    ("radius", 0.0), ("radius", -2.0),
    ("noise_theta", -1.0), ("noise_w", math.inf), ("noise_theta", math.nan),
])
def test_every_hparam_field_is_checked_before_compute(field, value):
    ds = _data()
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=2, batch_size=10)
    hp = F.FermiHparams()._replace(**{field: value})
    for fit in (F.fit, pfld.fit):
        with pytest.raises(ValueError, match=field):
            fit(jax.random.key(0), ds, hp, cfg if fit is F.fit else pfld.config(
                model=M.logistic(), num_groups=2, steps=2, batch_size=10))


def test_infinite_clip_and_radius_are_allowed():
    F.check_hparams(F.FermiHparams(clip_theta=math.inf, clip_w=math.inf, radius=math.inf))


def test_model_input_dim_must_match_the_data():
    ds = _data(d=3)
    cfg = F.FermiConfig(model=M.logistic(input_dim=5), num_groups=2, steps=2, batch_size=10)
    with pytest.raises(ValueError, match="input_dim=3"):
        F.fit(jax.random.key(0), ds, F.FermiHparams(), cfg)
