"""Process-wide numerical configuration: JAX in float64 (PSIS must agree with arviz_stats to 1e-8)."""

import jax

jax.config.update("jax_enable_x64", True)
