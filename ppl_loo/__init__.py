"""ppl_loo: adaptive importance-sampling LOO-CV for PyMC, Stan and JAX models.

>>> import ppl_loo as pl
>>> res = pl.loo(data, model)          # doctest: +SKIP
>>> data = pl.add_loo(data, res)       # doctest: +SKIP
"""

from ppl_loo import models
from ppl_loo.io import from_cmdstan
from ppl_loo.model import Model, as_model
from ppl_loo.model.jax.jax_model import JaxModel
from ppl_loo.model.jax.pvi import SimulatorModel
from ppl_loo.stan import StanModel
from ppl_loo.workflow.add_loo import add_loo
from ppl_loo.workflow.compare import compare
from ppl_loo.workflow.expectation import loo_expectation
from ppl_loo.workflow.loo import DEFAULT_HBAR, DEFAULT_TRANSFORMS, loo
from ppl_loo.workflow.subsample import loo_subsample
from ppl_loo.workflow.subsample_result import SubsampleResult
from ppl_loo.workflow.predictive import LooROC, loo_roc
from ppl_loo.workflow.pvi import pvi
from ppl_loo.workflow.pvi_eval import predictive_scores
from ppl_loo.workflow.laplace import laplace
from ppl_loo.workflow.laplace_predictive import laplace_predictive
from ppl_loo.workflow.qnvb import qnvb
from ppl_loo.workflow.report import report
from ppl_loo.workflow.result import LooResult
from ppl_loo.workflow.vouch.loo_mixture import loo_mixture

__version__ = "0.1.0"

__all__ = ["loo", "loo_mixture", "loo_subsample", "SubsampleResult", "add_loo", "loo_expectation", "loo_roc", "LooROC", "LooResult", "JaxModel", "StanModel", "from_cmdstan", "models",
           "DEFAULT_HBAR", "DEFAULT_TRANSFORMS", "pvi", "predictive_scores", "SimulatorModel", "Model", "as_model", "qnvb", "laplace", "laplace_predictive",
           "compare", "report"]
