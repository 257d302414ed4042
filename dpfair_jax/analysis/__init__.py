"""dpfair_jax.analysis."""
