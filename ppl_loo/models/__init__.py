"""The public namespace of the model adapters (``pl.models.LogisticRegression``, ...).

They live in :mod:`ppl_loo.adapters` (one package per backend); :func:`ppl_loo.as_model` turns any of
them into the :class:`~ppl_loo.model.Model` the algorithms run on.
"""

from ppl_loo.adapters.jax import bijectors
from ppl_loo.adapters.jax.base import PosteriorModel
from ppl_loo.adapters.jax.jax_model import JaxModel, ParameterLayout
from ppl_loo.adapters.jax.logistic import LogisticRegression
from ppl_loo.adapters.jax.pvi import SimulatorModel
from ppl_loo.adapters.jax.relu import ReluNet
from ppl_loo.adapters.pymc.adapter import PyMCModel
from ppl_loo.model.protocol import GLMStructure, ReluStructure

__all__ = [
    "PosteriorModel",
    "GLMStructure",
    "ReluStructure",
    "JaxModel",
    "ParameterLayout",
    "LogisticRegression",
    "ReluNet",
    "PyMCModel",
    "SimulatorModel",
    "bijectors",
]
