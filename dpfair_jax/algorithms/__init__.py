"""dpfair_jax.algorithms."""
