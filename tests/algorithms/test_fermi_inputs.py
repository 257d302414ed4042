"""DP-FERMI refuses every out-of-range hyperparameter and a model/data shape mismatch on the host,
before any compute, with a ValueError naming the field."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import compile_cache as cc
from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import pfld
from dpfair_jax.algorithms import sgda as S
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
    hp = dataclasses.replace(F.FermiHparams(), **{field: value})
    key = jax.random.key(0)
    for fit in (F.fit, pfld.fit):
        c = cfg if fit is F.fit else pfld.config(model=M.logistic(), num_groups=2, steps=2, batch_size=10)
        with cc.track_compiles() as st, pytest.raises(ValueError, match=field):
            fit(key, ds, hp, c)
        assert st.compiles == 0, st.programs


def test_infinite_clip_and_radius_are_allowed():
    F.check_hparams(F.FermiHparams(clip_theta=math.inf, clip_w=math.inf, radius=math.inf))


def test_model_input_dim_must_match_the_data():
    ds = _data(d=3)
    cfg = F.FermiConfig(model=M.logistic(input_dim=5), num_groups=2, steps=2, batch_size=10)
    with pytest.raises(ValueError, match="input_dim=3"):
        F.fit(jax.random.key(0), ds, F.FermiHparams(), cfg)


def test_infinite_clip_with_noise_is_refused():
    ds = _data()
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=2, batch_size=10)
    for clip, noise in (("clip_theta", "noise_theta"), ("clip_w", "noise_w")):
        hp = dataclasses.replace(F.FermiHparams(), **{clip: math.inf, noise: 1.0})
        with pytest.raises(ValueError, match=f"{clip}=inf"):
            F.fit(jax.random.key(0), ds, hp, cfg)


def test_shuffled_steps_must_fill_whole_epochs():
    """A shuffled run whose steps are not whole epochs would run fewer steps than it accounts."""
    ds = _data(n=40)
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=5, batch_size=10, sampling="shuffle")
    with pytest.raises(ValueError, match="steps"):
        F.fit(jax.random.key(0), ds, F.FermiHparams(), cfg)
    F.FermiConfig(model=M.logistic(), num_groups=2, steps=8, batch_size=10, sampling="shuffle").validate(40)


def test_hparams_of_the_wrong_type_are_refused():
    with pytest.raises(ValueError, match="FermiHparams"):
        F.check_hparams({"lam": 1.0})
    with pytest.raises(ValueError, match="SGDAHparams"):
        S.check_hparams(F.FermiHparams())


@pytest.mark.parametrize("field, value", [
    ("lr_theta", math.nan), ("lr_w", -0.1), ("lr_w", math.inf),
    ("clip_theta", 0.0), ("clip_w", -1.0), ("radius", 0.0),
    ("noise_theta", -1.0), ("noise_w", math.inf), ("noise_w", math.nan),
])
def test_every_sgda_hparam_field_is_checked_before_compute(field, value):
    x = {"x": np.zeros((20, 2), np.float32)}
    hp = dataclasses.replace(S.SGDAHparams(), **{field: value})
    loss = lambda t, w, e: jnp.sum(t * e["x"]) + jnp.sum(w)  # noqa: E731
    args = (jax.random.key(0), x, jnp.zeros(2), jnp.zeros(1), hp, S.SGDAConfig(steps=2, batch_size=5))
    with cc.track_compiles() as st, pytest.raises(ValueError, match=field):
        S.dpsgda(*args, private_loss=loss)
    assert st.compiles == 0, st.programs


@pytest.mark.parametrize("field, value", [("steps", 0), ("batch_size", 0), ("batch_size", 50),
                                          ("max_batch_size", 3), ("sampling", "swap")])
def test_every_sgda_config_field_is_checked(field, value):
    cfg = dict(steps=2, batch_size=5)
    cfg[field] = value
    with pytest.raises(ValueError, match=field):
        S.SGDAConfig(**cfg).validate(20)
