"""dpfair_jax.privacy."""
