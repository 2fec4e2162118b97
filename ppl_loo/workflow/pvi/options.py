"""The option groups of :func:`ppl_loo.pvi` (and :func:`ppl_loo.predictive_scores`), one frozen dataclass each.

Each is passed as an instance, a dict of some of its fields (checked: an unknown key raises an error naming it) or
None (the defaults): ``pl.pvi(data, model, optimizer={"steps": 500, "learning_rate": 0.05})``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["OptimizerOptions", "ScoreOptions", "OutputOptions", "FlowOptions"]


@dataclass(frozen=True)
class OptimizerOptions:
    """How :func:`ppl_loo.pvi` maximizes its objective: the optimizer, its gradient estimator and its start.

    Parameters
    ----------
    method : {"adam", "rmsprop", "sgd"} or optax.GradientTransformation
        ``"rmsprop"`` is the paper's (App. D). The names are optax's optimizers
        (:func:`ppl_loo.numerics.vi.optim.get_optimizer`); a transformation is used as is (it minimizes ``-J``) and
        ``learning_rate`` is then ignored.
    learning_rate : float or callable, optional
        Default 1e-2 for Adam, 1e-3 otherwise. A number is used for the first half of the steps and multiplied by
        0.1 for the second half (the paper's schedule); a callable ``step -> rate`` (an optax schedule) is used as
        is.
    steps : int
        Optimizer steps.
    draws_per_step : int
        ``M`` draws from ``q`` per step (CRPS: ``M / 2`` independent pairs; must be even).
    average : float
        Fraction of the final steps whose iterates are averaged (Polyak-Ruppert), in [0, 1); 0 keeps the last
        iterate.
    estimator : {"reparam", "rejection"}
        Log-score gradient: estimator (a) of Table 1 or the unbiased rejection-sampling estimator of Appendix B,
        where observations without an acceptance draw fresh batches (up to ``max_rounds``) instead of being dropped.
    max_rounds : int
        Cap on the fresh batches of the rejection estimator.
    log_lik_bound : float or array, optional
        ``log C_i >= log p(y_i | theta)`` for the rejection estimator (a scalar or one per observation); default 0
        for discrete PyMC outcomes (the Poisson maximum for Poisson ones).
    init : array, DataTree or dict, optional
        Initial location in the unconstrained space (an array), the mean of draws (a posterior), or a previous
        ``pl.pvi`` result (its marginal means and sds: a warm start, for example PVI from plain VI); default 0.
    init_scale : float or array, optional
        Initial marginal sd in the unconstrained space; default 0.1 (or the previous result's sds).
    """

    method: Any = "adam"
    learning_rate: Any = None
    steps: int = 2000
    draws_per_step: int = 100
    average: float = 0.4
    estimator: str = "reparam"
    max_rounds: int = 50
    log_lik_bound: Any = None
    init: Any = None
    init_scale: Any = None


@dataclass(frozen=True)
class ScoreOptions:
    """What the score of :func:`ppl_loo.pvi` and :func:`ppl_loo.predictive_scores` reads from the model.

    The backend-specific inputs of :func:`ppl_loo.as_model` (``pvi=True``).

    Parameters
    ----------
    var_name : str, optional
        The observed variable to score (PyMC models with several).
    simulator : callable or str, optional
        CRPS. A JaxModel's ``simulator(values, key)``: a JAX function of the constrained values, reparameterized;
        a Stan program's generated quantity with one ``*_rng`` draw per observation (``"y_rep"``).
    probs : callable, optional
        Quadratic score, JaxModel: ``probs(values) -> (*obs_shape, n_categories)``.
    observed : array or str, optional
        The observed outcomes (JaxModel), or the data entry holding them (Stan); PyMC models carry their own.
    categories : sequence, optional
        Quadratic score: the possible outcomes, sorted (default: derived from the model where it can be).
    """

    var_name: str | None = None
    simulator: Any = None
    probs: Any = None
    observed: Any = None
    categories: Any = None


@dataclass(frozen=True)
class OutputOptions:
    """What :func:`ppl_loo.pvi` writes besides the draws: the comparison with plain VI, and where the draws go.

    Parameters
    ----------
    group : str
        Name of the group for PVI's draws. With ``"posterior"``, ``pl.loo(result, model)`` applies the variational
        correction (Eq. 13) automatically; ``"posterior_pvi"`` keeps an MCMC ``posterior`` of ``data``.
    compare_vi : bool
        Also fit plain VI in the same family (the heterogeneity table, the training-score gap).
    heterogeneity_threshold : float
        A parameter is flagged when ``sd_PVI / sd_VI`` exceeds this (> 1; a heuristic, not a test).
    """

    group: str = "posterior"
    compare_vi: bool = True
    heterogeneity_threshold: float = 2.0


@dataclass(frozen=True)
class FlowOptions:
    """The neural spline flow of :func:`ppl_loo.pvi` (``family=pl.FlowOptions(...)``; ``family="flow"`` is the
    defaults): rational-quadratic spline coupling layers, then a diagonal affine map
    (:func:`ppl_loo.numerics.vi.families.flow`).

    Parameters
    ----------
    n_layers : int
        Coupling layers (>= 1).
    hidden : int
        Hidden units of each layer's conditioner network (>= 1).
    n_bins : int
        Spline bins (>= 2).
    bound : float
        Half-width of the spline interval in the standardized space (> 0).
    """

    n_layers: int = 4
    hidden: int = 16
    n_bins: int = 8
    bound: float = 4.0
