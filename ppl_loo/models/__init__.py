"""Posterior-model adapters (DESIGN.md, layer 2)."""

from ppl_loo.models import bijectors
from ppl_loo.models.base import GLMStructure, PosteriorModel, ReluStructure
from ppl_loo.models.jax_model import JaxModel, ParameterLayout
from ppl_loo.models.logistic import LogisticRegression
from ppl_loo.models.pymc_model import PyMCModel
from ppl_loo.models.relu import ReluNet

__all__ = [
    "PosteriorModel",
    "GLMStructure",
    "ReluStructure",
    "JaxModel",
    "ParameterLayout",
    "LogisticRegression",
    "ReluNet",
    "PyMCModel",
    "bijectors",
]
