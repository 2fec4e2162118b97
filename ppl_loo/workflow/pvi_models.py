"""What predictive VI needs from a model, for each backend: :class:`PVIModel` and :func:`as_pvi_model`.

PVI scores the posterior predictive of every observation, so besides the log joint it needs the
data-dependent part ``log p(y_i | theta)`` per observation and the prior separately, and, for the
CRPS, a simulator of ``y`` that is differentiable in ``theta`` (notes, section 4). How each backend
provides them:

- **PyMC** (a ``pymc.Model`` or :class:`~ppl_loo.models.PyMCModel`): ``log p(y_i|theta)`` is the
  observed variable's elementwise logp graph, the prior is the log joint minus its sum (the free
  variables' logp with the Jacobians, potentials and other observed variables included); category
  probabilities for the quadratic score are the observed variable's logp at every category;
  the simulator is PyTensor's own JAX sampler of the observed distribution
  (``pytensor.link.jax.dispatch.jax_sample_fn``) with the distribution parameters compiled to JAX,
  which is a reparameterized (pathwise differentiable) draw for continuous distributions.
- **JaxModel**: the log prior and the log-likelihood are given separately; a simulator
  (``simulator(values, key)``) and category probabilities (``probs(values)``) are JAX functions of
  the constrained values the user passes.
- **Stan** (:mod:`ppl_loo.workflow.pvi_stan`).
- **Likelihood-free**: :class:`SimulatorModel`, a differentiable JAX simulator and an optional prior.

All functions work on a batch of unconstrained draws ``(M, d)`` (the draw axis is vectorized).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from math import prod

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.models.base import PosteriorModel
from ppl_loo.models.jax_model import JaxModel, ParameterLayout
from ppl_loo.numerics.pvi import Terms
from ppl_loo.jax_settings import uses_x64

__all__ = ["PVIModel", "SimulatorModel", "as_pvi_model"]

_TAGS = {"Exp": "log", "LowerBound": "lowerbound", "UpperBound": "upperbound", "Interval": "interval",
         "Sigmoid": "logodds", "SimplexStickBreaking": "simplex"}


@dataclass
class PVIModel:
    """A model as PVI sees it (built by :func:`as_pvi_model`).

    ``terms`` are the differentiable training quantities (:class:`~ppl_loo.numerics.pvi.Terms`);
    ``eval_*`` evaluate draws for outputs and held-out scores (they need not be differentiable:
    ``eval_predict`` may draw discrete outcomes). ``base`` is the adapter ``pl.loo`` uses.
    """

    kind: str
    base: object
    dim: int
    n_obs: int
    labels: list
    terms: Terms
    constrain: Callable
    unconstrain: Callable
    param_names: tuple
    param_dims: dict
    coords: dict
    var_name: str
    obs_dims: tuple
    obs_shape: tuple
    y: np.ndarray | None = None
    categories: np.ndarray | None = None
    eval_loglik: Callable | None = None
    eval_probs: Callable | None = None
    eval_predict: Callable | None = None
    notes: dict = field(default_factory=dict)

    def missing(self, what: str, fix: str):
        return ValueError(f"{what} is not available for this {self.kind} model. {fix}")


# ----------------------------------------------------------------------------- likelihood-free
class SimulatorModel:
    """A likelihood-free model: a differentiable JAX simulator and, optionally, a log prior.

    Parameters
    ----------
    params : dict
        ``name -> (shape, bijector or None)`` as for :class:`~ppl_loo.JaxModel`.
    simulate : callable
        ``simulate(values, key) -> y``: one draw of all outcomes given the constrained values
        (a dict), shape ``obs_shape`` or ``(*obs_shape, k)`` for vector outcomes; pathwise
        differentiable in ``values`` (noise from ``key`` only).
    observed : array
        The observed outcomes, the shape of one simulation.
    log_prior : callable, optional
        ``log_prior(values) -> scalar`` on the constrained values (for ``reg="prior"``).
    vector : bool
        Each observation is a vector along the last axis (energy score with the L2 norm).
    var_name, obs_dims, param_dims, coords
        Names for the DataTree.

    Notes
    -----
    Only the CRPS (energy score) is available: the log and quadratic scores and the posterior
    regularizer need the likelihood (notes, section 4).
    """

    @uses_x64
    def __init__(self, params: Mapping, simulate: Callable, observed, *, log_prior: Callable | None = None,
                 vector: bool = False, var_name: str = "y", obs_dims: tuple | None = None,
                 param_dims: Mapping | None = None, coords: Mapping | None = None):
        self.layout = ParameterLayout(params, param_dims)
        self.dim = self.layout.dim
        self.simulate = simulate
        self.log_prior = log_prior
        self.observed = np.asarray(observed, dtype=np.float64)
        self.vector = bool(vector)
        shape = self.observed.shape[:-1] if self.vector else self.observed.shape
        if len(shape) == 0:
            raise ValueError("observed must have at least one observation axis.")
        self.obs_shape = tuple(shape)
        self.n_obs = int(prod(shape))
        self.var_name = str(var_name)
        self.obs_dims = tuple(obs_dims) if obs_dims else tuple(f"{var_name}_dim_{k}" for k in range(len(shape)))
        self.coords = dict(coords or {})
        key = jax.random.PRNGKey(0)
        abstract = {n: jax.ShapeDtypeStruct(self.layout.shapes[n], jnp.float64) for n in self.layout.names}
        try:
            out = jax.eval_shape(simulate, abstract, key)
        except Exception as err:
            raise ValueError(f"simulate could not be evaluated on parameters of the declared shapes: {err}") from err
        if tuple(out.shape) != self.observed.shape:
            raise ValueError(f"simulate returns shape {tuple(out.shape)} but observed has shape {self.observed.shape}.")

    @property
    def param_names(self):
        return self.layout.names

    @property
    def param_dims(self):
        return self.layout.param_dims

    def constrain(self, theta):
        return self.layout.constrain(theta)

    def unconstrain(self, posterior):
        return self.layout.unconstrain(posterior)


# ----------------------------------------------------------------------------- helpers
def _layout_labels(layout: ParameterLayout) -> list:
    out = []
    for name in layout.names:
        bij = type(layout.bijectors[name]).__name__
        base = name if bij == "Identity" else f"{name}_{_TAGS.get(bij, bij.lower())}__"
        ushape = layout.ushapes[name]
        if ushape == ():
            out.append(base)
        else:
            out.extend(f"{base}[{','.join(map(str, idx))}]" for idx in np.ndindex(*ushape))
    return out


def _batch(fn):
    """``f(theta (d,)) -> x`` to ``(M, d) -> (M, ...)``."""
    return jax.vmap(fn)


def _simulate_terms(sim_one, vector):
    """``(theta (M, d), key) -> (M, n[, k])`` from a per-draw simulator ``sim_one(theta, key)``."""

    def simulate(theta, key):
        keys = jax.random.split(key, theta.shape[0])
        out = jax.vmap(sim_one)(theta, keys)
        return out.reshape((theta.shape[0], -1, out.shape[-1]) if vector else (theta.shape[0], -1))

    return simulate


def _category_index(y, categories, what):
    cats = np.asarray(categories)
    y = np.asarray(y).reshape(-1)
    idx = np.searchsorted(cats, y)
    idx = np.clip(idx, 0, len(cats) - 1)
    bad = cats[idx] != y
    if bad.any():
        raise ValueError(
            f"{what}: {int(bad.sum())} observation(s) take values outside the categories {cats.tolist()} "
            f"(for example {y[bad][:3].tolist()}); pass categories= with every possible outcome."
        )
    return idx


# ----------------------------------------------------------------------------- entry point
def as_pvi_model(model, *, var_name=None, simulator=None, probs=None, observed=None, categories=None) -> PVIModel:
    """Wrap a PyMC / Stan / JAX model (or a :class:`SimulatorModel`) for :func:`ppl_loo.pvi`.

    Parameters
    ----------
    model
        ``pymc.Model``, :class:`~ppl_loo.models.PyMCModel`, :class:`~ppl_loo.JaxModel` (or another
        JAX :class:`~ppl_loo.models.base.PosteriorModel`), a Stan model
        (:class:`~ppl_loo.stan.posterior.StanPosterior`), a :class:`SimulatorModel`, or a
        :class:`PVIModel` (returned unchanged).
    var_name : str, optional
        The observed variable to score (PyMC models with several).
    simulator
        JAX models: ``simulator(values, key) -> outcomes`` (reparameterized). Stan: the name of
        a generated quantity with one ``*_rng`` draw per observation.
    probs
        JAX models: ``probs(values) -> (*obs_shape, n_categories)`` for the quadratic score.
    observed
        The observed outcomes (JAX models without ``observed``); Stan: the data entry holding them.
    categories
        The possible outcomes, sorted (quadratic score); default from the distribution (PyMC) or
        ``0 .. n_categories - 1``.
    """
    if isinstance(model, PVIModel):
        return model
    if type(model).__module__.startswith("pymc"):
        import pymc as pm

        if isinstance(model, pm.Model):
            from ppl_loo.models.pymc_model import PyMCModel

            model = PyMCModel(model, var_name=var_name)
    from ppl_loo.models.pymc_model import PyMCModel

    if isinstance(model, PyMCModel):
        from ppl_loo.workflow.pvi_pymc import pymc_pvi_model

        _no_user_fns(simulator, probs, "PyMC", "they are derived from the observed variable")
        if observed is not None:
            raise ValueError("observed= is not used with PyMC models: the observed data are in the model "
                             "(pm.set_data to change them).")
        return pymc_pvi_model(model, categories=categories)
    if isinstance(model, SimulatorModel):
        return _simulator_pvi_model(model)
    from ppl_loo.workflow.pvi_stan import is_stan_model, stan_pvi_model

    if is_stan_model(model):
        return stan_pvi_model(model, simulator=simulator, observed=observed, categories=categories)
    if isinstance(model, PosteriorModel) and getattr(model, "is_jax", False):
        return _jax_pvi_model(model, simulator=simulator, probs=probs, observed=observed, categories=categories)
    raise TypeError(
        f"model of type {type(model).__name__} is not supported by pl.pvi: pass a pymc.Model, a "
        "pl.StanModel / StanPosterior, a pl.JaxModel (or another JAX PosteriorModel), or a pl.SimulatorModel."
    )


def _no_user_fns(simulator, probs, kind, why):
    if simulator is not None or probs is not None:
        raise ValueError(f"simulator= and probs= are not used with {kind} models: {why}.")


def _jax_pvi_model(model, *, simulator, probs, observed, categories) -> PVIModel:
    """JaxModel and other JAX PosteriorModels (closed-form logistic regression, ReLU net)."""
    if not getattr(model, "factorizes", True):
        raise ValueError(
            "the model's likelihood does not factorize into one term per observation (it has a "
            "loo_log_density), so the per-observation predictive score of PVI is not defined for it."
        )
    layout = getattr(model, "layout", None)
    if layout is None:
        raise TypeError(f"{type(model).__name__} has no ParameterLayout; wrap the model as a pl.JaxModel for PVI.")
    labels = _layout_labels(layout)
    loglik = _batch(model.loglik)
    logp = _batch(model.logp)
    if isinstance(model, JaxModel):
        def log_prior_one(theta):
            values, logdet = layout.constrain_with_logdet(theta)
            return model._log_prior(values) + logdet
    else:
        def log_prior_one(theta):
            return model.logp(theta) - jnp.sum(model.loglik(theta))
    y = observed if observed is not None else getattr(model, "observed", None)
    if y is None and hasattr(model, "y"):
        y = model.y
    y = None if y is None else np.asarray(y, dtype=np.float64)
    vector = y is not None and y.ndim == len(model.obs_shape) + 1
    if y is not None and y.shape[: len(model.obs_shape)] != tuple(model.obs_shape):
        raise ValueError(f"observed has shape {y.shape} but the log-likelihood has shape {model.obs_shape}.")
    sim = prob_fn = y_index = cats = None
    values_of = layout.constrain
    if simulator is not None:
        if not callable(simulator):
            raise TypeError("simulator must be a JAX function simulator(values, key) -> outcomes.")

        def sim_one(theta, key):
            return jnp.asarray(simulator(values_of(theta), key), dtype=jnp.float64)

        sim = _simulate_terms(sim_one, vector)
    if probs is not None:
        if not callable(probs):
            raise TypeError("probs must be a JAX function probs(values) -> (*obs_shape, n_categories).")

        def probs_one(theta):
            p = jnp.asarray(probs(values_of(theta)))
            return p.reshape(-1, p.shape[-1])

        prob_fn = _batch(probs_one)
        n_cat = int(jax.eval_shape(probs_one, jnp.zeros(model.dim)).shape[-1])
        cats = np.arange(n_cat) if categories is None else np.asarray(categories)
        if len(cats) != n_cat:
            raise ValueError(f"categories has {len(cats)} entries but probs returns {n_cat} columns.")
        if y is None:
            raise ValueError("the quadratic score needs the observed outcomes: pass observed=.")
        y_index = _category_index(y, cats, "observed")
    terms = Terms(model.n_obs, loglik=loglik, logp=logp, log_prior=_batch(log_prior_one), probs=prob_fn,
                  simulate=sim, y=None if y is None else jnp.asarray(y.reshape((model.n_obs, -1) if vector else -1)),
                  y_index=None if y_index is None else jnp.asarray(y_index), vector=bool(vector))
    predict = None
    if sim is not None:
        predict = jax.jit(sim)
    notes = {"crps": "pass simulator=fn(values, key) -> outcomes, a JAX function differentiable in the values",
             "quadratic": "pass probs=fn(values) -> (*obs_shape, n_categories) and the observed category indices"}
    return PVIModel(
        kind="JAX", base=model, dim=model.dim, n_obs=model.n_obs, labels=labels, terms=terms,
        constrain=model.constrain, unconstrain=model.unconstrain, param_names=tuple(layout.names),
        param_dims=dict(layout.param_dims), coords=dict(getattr(model, "coords", None) or {}),
        var_name=model.var_name, obs_dims=tuple(model.obs_dims), obs_shape=tuple(model.obs_shape),
        y=y, categories=cats, eval_loglik=jax.jit(loglik), eval_probs=None if prob_fn is None else jax.jit(prob_fn),
        eval_predict=predict, notes=notes,
    )


def _simulator_pvi_model(model: SimulatorModel) -> PVIModel:
    layout = model.layout

    def sim_one(theta, key):
        return jnp.asarray(model.simulate(layout.constrain(theta), key), dtype=jnp.float64)

    sim = _simulate_terms(sim_one, model.vector)
    log_prior = None
    if model.log_prior is not None:
        def log_prior_one(theta):
            values, logdet = layout.constrain_with_logdet(theta)
            return model.log_prior(values) + logdet

        log_prior = _batch(log_prior_one)
    y = model.observed
    terms = Terms(model.n_obs, log_prior=log_prior, simulate=sim,
                  y=jnp.asarray(y.reshape((model.n_obs, -1) if model.vector else -1)), vector=model.vector)
    return PVIModel(
        kind="likelihood-free", base=model, dim=model.dim, n_obs=model.n_obs, labels=_layout_labels(layout),
        terms=terms, constrain=model.constrain, unconstrain=model.unconstrain, param_names=tuple(layout.names),
        param_dims=dict(layout.param_dims), coords=model.coords, var_name=model.var_name,
        obs_dims=model.obs_dims, obs_shape=model.obs_shape, y=y, eval_predict=jax.jit(sim),
        notes={"log": "a likelihood-free SimulatorModel has no likelihood; use score='crps'",
               "quadratic": "a likelihood-free SimulatorModel has no likelihood; use score='crps'"},
    )
