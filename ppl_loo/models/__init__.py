"""The public namespace of the model adapters (``pl.models.LogisticRegression``, ...).

They live in :mod:`ppl_loo.model` (one package per backend); :func:`ppl_loo.model.as_model` turns any of
them into the :class:`~ppl_loo.model.Model` the algorithms run on.
"""

from ppl_loo.model.jax import bijectors
from ppl_loo.model.jax.base import PosteriorModel
from ppl_loo.model.jax.jax_model import JaxModel, ParameterLayout
from ppl_loo.model.jax.logistic import LogisticRegression
from ppl_loo.model.jax.pvi import SimulatorModel
from ppl_loo.model.jax.relu import ReluNet
from ppl_loo.model.protocol import GLMStructure, ReluStructure
from ppl_loo.model.pymc.adapter import PyMCModel

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
