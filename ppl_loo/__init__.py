"""ppl_loo: adaptive importance-sampling LOO-CV for PyMC, Stan and JAX models."""

from ppl_loo import _config  # noqa: F401  (enables float64 in JAX before anything is traced)

__version__ = "0.1.0"
