"""Process-wide JAX configuration, applied once when ``ppl_loo`` is imported.

- float64: PSIS must agree with ``arviz_stats`` to 1e-8, and log densities of hundreds of nats
  are differenced.
- A persistent XLA compilation cache (``$PPL_LOO_CACHE_DIR``, default ``~/.cache/ppl_loo/xla``)
  so that the adaptive search is compiled once per machine, not once per Python session. It is
  left alone when the user configured one; ``PPL_LOO_CACHE_DIR=off`` disables it.
"""

import os

import jax

jax.config.update("jax_enable_x64", True)

_cache = os.environ.get("PPL_LOO_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "ppl_loo", "xla"))
if _cache.lower() != "off" and not jax.config.jax_compilation_cache_dir:
    try:
        os.makedirs(_cache, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", _cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except OSError:  # read-only home: run without the cache
        pass
