"""dpfair_jax.experiments."""
