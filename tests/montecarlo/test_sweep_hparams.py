"""montecarlo.sweep over an algorithm's hparams pytree (fields named in the grid)."""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import montecarlo as MC
from dpfair_jax.algorithms import mean_estimation as ME
from dpfair_jax.data import make_dataset


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HP:
    scale: float = 1.0
    shift: float = 0.0
    clip: float = float("inf")


class NT(NamedTuple):
    scale: float = 1.0
    shift: float = 0.0


def _metric(key, hp):
    z = jax.random.normal(key)
    return {"value": hp.scale * z + hp.shift + jnp.minimum(hp.clip, 100.0)}


def _metric_nt(key, hp):
    return {"value": hp.scale * jax.random.normal(key) + hp.shift}


@pytest.mark.parametrize("base", [HP(shift=0.5), NT(shift=0.5)], ids=["dataclass", "namedtuple"])
def test_sweep_replaces_named_fields(base):
    key = jax.random.key(0)
    fn = _metric if isinstance(base, HP) else _metric_nt
    res = MC.sweep(fn, key, {"scale": [1.0, 2.0, 3.0]}, 4, hparams=base)
    z = jax.vmap(jax.random.normal)(MC.trial_keys(key, 4))
    extra = 100.0 if isinstance(base, HP) else 0.0
    want = np.array([s * np.asarray(z) + 0.5 + extra for s in (1.0, 2.0, 3.0)])
    np.testing.assert_allclose(res.values["value"], want, rtol=1e-6)


def test_one_compile_for_new_grid_values():
    from dpfair_jax.compile_cache import track_compiles

    key = jax.random.key(1)
    MC.sweep(_metric, key, {"scale": [1.0, 2.0]}, 3, hparams=HP())
    with track_compiles() as stats:
        MC.sweep(_metric, key, {"scale": [5.0, 7.0]}, 3, hparams=HP(shift=2.0))
    assert stats.count("_engine") == 0


def test_unknown_field_and_nan_refused():
    with pytest.raises(ValueError, match="not fields of HP"):
        MC.sweep(_metric, jax.random.key(0), {"lam": [1.0]}, 2, hparams=HP())
    with pytest.raises(ValueError, match="NaN"):
        MC.sweep(_metric, jax.random.key(0), {"scale": [1.0]}, 2, hparams=HP(shift=float("nan")))


def test_sweep_an_algorithms_fit_over_its_hparams():
    """A real algorithm's trio: mean_estimation.fit over a budget grid equals calling fit per point."""
    rng = np.random.default_rng(0)
    data = make_dataset(rng.uniform(0, 1, (60, 1)), rng.uniform(0, 1, 60), rng.integers(0, 2, 60))
    config = ME.MeanConfig(method="gaussian", num_groups=2)
    base = ME.MeanHparams(center=0.5, clip=1.0)
    budget = "rho"
    values = [0.5, 2.0]

    def fn(key, d, hp):
        return {"estimate": jnp.ravel(ME.fit(key, d, hp, config).params.estimate)[0]}

    key = jax.random.key(2)
    res = MC.sweep(fn, key, {budget: values}, 3, data=data, hparams=base)
    keys = MC.trial_keys(key, 3)
    for i, v in enumerate(values):
        hp = dataclasses.replace(base, **{budget: v})
        want = [float(jnp.ravel(ME.fit(k, data, hp, config).params.estimate)[0]) for k in keys]
        np.testing.assert_allclose(res.values["estimate"][i], want, rtol=1e-5, atol=1e-6)
