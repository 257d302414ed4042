"""Trial keys: ``trial_keys``, the key that ``run_trials`` and ``sweep`` give trial ``t``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
