"""Stan in ppl_loo: an in-process bridge, CmdStan / PyStan output in, adaptive LOO out.

>>> import ppl_loo as pl
>>> data = pl.from_cmdstan(["output_1.csv", "output_2.csv"])            # doctest: +SKIP
>>> res = pl.loo(data, model=pl.StanModel("model.stan", "model.data.R"))  # doctest: +SKIP

* :class:`StanModel` (:mod:`.model`): the program is translated with httpstan's ``stanc``,
  compiled together with a small C ABI bridge (``bridge.cpp``) against the Stan headers shipped
  in the ``httpstan`` wheel, cached (:mod:`.compile`), and exposes batched ``log_density``,
  ``log_density_gradient``, ``param_constrain`` and ``param_unconstrain`` over ``(S, d)`` arrays
  of unconstrained draws (one C++ call per batch, optionally threaded). Passed to
  :func:`ppl_loo.loo`, it becomes a :class:`ppl_loo.adapters.stan.posterior.StanPosterior`
  (:func:`ppl_loo.adapters.stan.posterior.loo_adapter`): exact LOO by data deletion through ``jax.pure_callback``.
* Readers of CmdStan / PyStan output and of ``.data.R`` files live in :mod:`ppl_loo.io`
  (:func:`ppl_loo.from_cmdstan`, :func:`ppl_loo.io.read_rdump`).
* :mod:`.programs`: data of the ``stan_models/`` programs (:func:`horseshoe_data`,
  :func:`relu_data`); :mod:`.sampler`: Stan's NUTS in-process, writing CmdStan-format CSV.
"""

from .compile import StanCacheError, StanCompileError, build_library, cache_dir
from .model import (
    StanDataError,
    StanEvaluationError,
    StanModel,
    as_data_dict,
    data_to_json,
    default_threads,
)
from .programs import horseshoe_data, relu_data

__all__ = [
    "StanCacheError",
    "StanCompileError",
    "StanDataError",
    "StanEvaluationError",
    "StanModel",
    "as_data_dict",
    "build_library",
    "cache_dir",
    "data_to_json",
    "default_threads",
    "horseshoe_data",
    "relu_data",
]
