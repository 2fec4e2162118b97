"""ppl_loo: adaptive importance-sampling LOO-CV for PyMC, Stan and JAX models.

>>> import ppl_loo as pl
>>> res = pl.loo(data, model)          # doctest: +SKIP
>>> data = pl.add_loo(data, res)       # doctest: +SKIP
"""

from ppl_loo import models
from ppl_loo.adapters.as_model import as_model
from ppl_loo.adapters.jax.jax_model import JaxModel
from ppl_loo.adapters.jax.pvi import SimulatorModel
from ppl_loo.io import from_cmdstan
from ppl_loo.model import Model
from ppl_loo.stan_bridge import StanModel
from ppl_loo.workflow.approx.laplace import LaplaceOptions, laplace
from ppl_loo.workflow.approx.laplace_predictive import laplace_predictive
from ppl_loo.workflow.approx.qnvb import QNVBOptions, qnvb
from ppl_loo.workflow.arrays.elpd import elpd
from ppl_loo.workflow.arrays.gpdfit import gpdfit
from ppl_loo.workflow.arrays.loo_approximate_posterior import loo_approximate_posterior
from ppl_loo.workflow.arrays.loo_function import loo_function
from ppl_loo.workflow.arrays.pointwise import pointwise
from ppl_loo.workflow.arrays.psis import psis
from ppl_loo.workflow.arrays.psis_n_eff_values import psis_n_eff_values
from ppl_loo.workflow.arrays.psis_result import PsisResult
from ppl_loo.workflow.arrays.result import ElpdResult, WaicResult
from ppl_loo.workflow.arrays.sis import sis
from ppl_loo.workflow.arrays.tis import tis
from ppl_loo.workflow.arrays.waic import waic
from ppl_loo.workflow.downstream.compare import compare
from ppl_loo.workflow.downstream.crps import crps, loo_crps, loo_scrps, scrps
from ppl_loo.workflow.downstream.loo_expectations import loo_expectations
from ppl_loo.workflow.downstream.loo_metrics import LooMetric, loo_metrics
from ppl_loo.workflow.downstream.loo_pit import loo_pit, plot_loo_pit
from ppl_loo.workflow.downstream.loo_r2 import loo_r2
from ppl_loo.workflow.downstream.loo_roc import LooROC, loo_roc
from ppl_loo.workflow.downstream.loo_score import loo_score
from ppl_loo.workflow.downstream.model_weights import loo_model_weights, pseudobma_weights, stacking_weights
from ppl_loo.workflow.exact.kfold_split import kfold_split_grouped, kfold_split_random, kfold_split_stratified
from ppl_loo.workflow.exact.loo_kfold import KFoldResult, loo_kfold
from ppl_loo.workflow.loo.add_loo import add_loo
from ppl_loo.workflow.loo.loo import DEFAULT_HBAR, DEFAULT_TRANSFORMS, loo
from ppl_loo.workflow.loo.options import ComputeOptions, SearchOptions, SecondOpinions
from ppl_loo.workflow.loo.plain import relative_eff
from ppl_loo.workflow.loo.result import LooResult
from ppl_loo.workflow.loo.vouch.loo_mixture import loo_mixture
from ppl_loo.workflow.pvi.options import FlowOptions, OptimizerOptions, OutputOptions, ScoreOptions
from ppl_loo.workflow.pvi.predictive_scores import predictive_scores
from ppl_loo.workflow.pvi.pvi import pvi
from ppl_loo.workflow.report.report import report
from ppl_loo.workflow.subsample.loo_subsample import loo_subsample
from ppl_loo.workflow.subsample.result import SubsampleResult

__version__ = "0.1.0"

__all__ = ["loo", "SearchOptions", "SecondOpinions", "ComputeOptions", "loo_mixture", "loo_subsample",
           "SubsampleResult", "add_loo", "loo_expectations", "loo_pit", "plot_loo_pit", "loo_r2", "loo_metrics",
           "LooMetric", "loo_score", "loo_roc", "LooROC", "LooResult", "JaxModel", "StanModel", "from_cmdstan",
           "models",
           "DEFAULT_HBAR", "DEFAULT_TRANSFORMS", "pvi", "predictive_scores", "SimulatorModel", "Model", "as_model",
           "qnvb", "laplace", "laplace_predictive", "OptimizerOptions", "ScoreOptions", "OutputOptions", "FlowOptions",
           "QNVBOptions", "LaplaceOptions", "compare", "report", "loo_kfold", "KFoldResult",
           "relative_eff", "loo_function", "loo_approximate_posterior", "waic", "WaicResult", "elpd", "ElpdResult",
           "pointwise", "psis", "sis", "tis", "PsisResult", "psis_n_eff_values", "gpdfit",
           "crps", "scrps", "loo_crps", "loo_scrps", "stacking_weights", "pseudobma_weights",
           "loo_model_weights", "kfold_split_random", "kfold_split_stratified", "kfold_split_grouped"]
