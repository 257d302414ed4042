"""Trial keys: ``trial_keys`` and the key checks shared by ``run_trials`` and ``sweep``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V


def trial_keys(key: jax.Array, num_trials: int) -> jax.Array:
    """Return ``num_trials`` independent threefry keys split from ``key`` (``jax.random.split``).

    ``run_trials`` and ``sweep`` give trial ``t`` exactly ``trial_keys(key, num_trials)[t]``, so a
    Python loop over these keys reproduces any single trial.
    """
    V.check_threefry_key(key)
    num_trials = V.check_int("num_trials", num_trials, minimum=1)
    return jax.random.split(_as_typed_key(key), num_trials)


def _as_typed_key(key: jax.Array) -> jax.Array:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32), impl="threefry2x32")


def _check_scalar_key(key: Any) -> None:
    V.check_threefry_key(key)
    typed = jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
    shape = tuple(np.shape(key))
    if (typed and shape != ()) or (not typed and shape != (2,)):
        raise ValueError(
            f"key must be a single PRNG key (shape () typed, or (2,) raw), got shape {shape}; "
            "pass jax.random.key(seed), not an array of keys."
        )


def _key_data(key: jax.Array) -> jax.Array:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return jnp.asarray(key, jnp.uint32)

