"""dpfair_jax.fairness."""
