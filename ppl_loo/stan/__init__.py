"""In-process Stan bridge (issue 4).

``StanModel(stan_file_or_code, data)`` translates the program with httpstan's ``stanc``, compiles
it together with a small C ABI bridge (``bridge.cpp``) against the Stan headers shipped in the
``httpstan`` wheel, caches the shared library, and exposes batched ``log_density``,
``log_density_gradient``, ``param_constrain`` and ``param_unconstrain`` over ``(S, d)`` arrays of
unconstrained draws. See :mod:`ppl_loo.stan.compile` for flags and the cache.
"""

from .cmdstan_csv import from_cmdstan, read_cmdstan_csv, read_rdump
from .compile import StanCompileError, build_library, cache_dir
from .model import StanDataError, StanEvaluationError, StanModel, as_data_dict, data_to_json, default_threads
from .programs import horseshoe_data, relu_data

__all__ = [
    "StanCompileError",
    "StanDataError",
    "StanEvaluationError",
    "StanModel",
    "as_data_dict",
    "build_library",
    "cache_dir",
    "data_to_json",
    "default_threads",
    "from_cmdstan",
    "horseshoe_data",
    "read_cmdstan_csv",
    "read_rdump",
    "relu_data",
]
