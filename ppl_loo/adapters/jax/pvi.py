"""PVI terms of JAX models (:class:`~ppl_loo.JaxModel` and the closed-form models: the log prior and the
log-likelihood are given separately; a simulator ``simulator(values, key)`` and category probabilities
``probs(values)`` are JAX functions of the constrained values the user passes) and the likelihood-free
:class:`SimulatorModel` (a differentiable JAX simulator and an optional prior).

All functions work on a batch of unconstrained draws ``(M, d)`` (the draw axis is vectorized).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.adapters.jax.jax_model import LayoutMixin, ParameterLayout
from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.build import batch, category_index, coordinate_labels, pvi_model, simulate_terms
from ppl_loo.numerics.vi.objective import Terms

__all__ = ["SimulatorModel", "jax_pvi_model", "simulator_pvi_model", "layout_labels", "no_user_fns"]

_TAGS = {"Exp": "log", "LowerBound": "lowerbound", "UpperBound": "upperbound", "Interval": "interval",
         "Sigmoid": "logodds", "SimplexStickBreaking": "simplex"}


# ----------------------------------------------------------------------------- likelihood-free
class SimulatorModel(LayoutMixin):
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



# ----------------------------------------------------------------------------- helpers
def layout_labels(layout: ParameterLayout) -> list:
    """One label per unconstrained coordinate of a layout (``"sigma_log__"``, ``"beta[0,1]"``)."""
    return coordinate_labels((_block_label(layout, name), layout.ushapes[name]) for name in layout.names)


def _block_label(layout, name) -> str:
    bij = type(layout.bijectors[name]).__name__
    return name if bij == "Identity" else f"{name}_{_TAGS.get(bij, bij.lower())}__"


def no_user_fns(simulator, probs, kind, why):
    """Refuse ``simulator=`` and ``probs=`` for a kind of model that brings its own (``why`` says how)."""
    if simulator is not None or probs is not None:
        raise ValueError(f"simulator= and probs= are not used with {kind} models: {why}.")


def jax_pvi_model(model, *, simulator, probs, observed, categories):
    """JaxModel and other JAX PosteriorModels (closed-form logistic regression, ReLU net)."""
    if not getattr(model, "factorizes", True):
        raise ValueError(
            "the model's likelihood does not factorize into one term per observation (it has a "
            "loo_log_density), so the per-observation predictive score of PVI is not defined for it."
        )
    layout = getattr(model, "layout", None)
    if layout is None:
        raise TypeError(f"{type(model).__name__} has no ParameterLayout; wrap the model as a pl.JaxModel for PVI.")
    labels = layout_labels(layout)
    loglik = batch(model.loglik)
    logp = batch(model.logp)
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

        sim = simulate_terms(sim_one, vector)
    if probs is not None:
        if not callable(probs):
            raise TypeError("probs must be a JAX function probs(values) -> (*obs_shape, n_categories).")

        def probs_one(theta):
            p = jnp.asarray(probs(values_of(theta)))
            return p.reshape(-1, p.shape[-1])

        prob_fn = batch(probs_one)
        n_cat = int(jax.eval_shape(probs_one, jnp.zeros(model.dim)).shape[-1])
        cats = np.arange(n_cat) if categories is None else np.asarray(categories)
        if len(cats) != n_cat:
            raise ValueError(f"categories has {len(cats)} entries but probs returns {n_cat} columns.")
        if y is None:
            raise ValueError("the quadratic score needs the observed outcomes: pass observed=.")
        y_index = category_index(y, cats, "observed")
    terms = Terms(model.n_obs, loglik=loglik, logp=logp, log_prior=batch(model.log_prior), probs=prob_fn,
                  simulate=sim, y=None if y is None else jnp.asarray(y.reshape((model.n_obs, -1) if vector else -1)),
                  y_index=None if y_index is None else jnp.asarray(y_index), vector=bool(vector))
    predict = None
    if sim is not None:
        predict = jax.jit(sim)
    notes = {"crps": "pass simulator=fn(values, key) -> outcomes, a JAX function differentiable in the values",
             "quadratic": "pass probs=fn(values) -> (*obs_shape, n_categories) and the observed category indices"}
    return pvi_model(
        kind="JAX", loo_adapter=model, dim=model.dim, n_obs=model.n_obs, labels=labels, terms=terms,
        constrain=model.constrain, unconstrain=model.unconstrain, param_names=tuple(layout.names),
        param_dims=dict(layout.param_dims), coords=dict(getattr(model, "coords", None) or {}),
        var_name=model.var_name, obs_dims=tuple(model.obs_dims), obs_shape=tuple(model.obs_shape),
        y=y, observed=getattr(model, "observed", None), categories=cats, eval_loglik=jax.jit(loglik),
        eval_probs=None if prob_fn is None else jax.jit(prob_fn), eval_predict=predict, notes=notes,
    )


def simulator_pvi_model(model: SimulatorModel):
    """The PVI terms of a :class:`SimulatorModel`, from its simulator of one replicate per draw."""
    layout = model.layout

    def sim_one(theta, key):
        return jnp.asarray(model.simulate(layout.constrain(theta), key), dtype=jnp.float64)

    sim = simulate_terms(sim_one, model.vector)
    log_prior = None
    if model.log_prior is not None:
        def log_prior_one(theta):
            values, logdet = layout.constrain_with_logdet(theta)
            return model.log_prior(values) + logdet

        log_prior = batch(log_prior_one)
    y = model.observed
    terms = Terms(model.n_obs, log_prior=log_prior, simulate=sim,
                  y=jnp.asarray(y.reshape((model.n_obs, -1) if model.vector else -1)), vector=model.vector)
    return pvi_model(
        kind="likelihood-free", dim=model.dim, n_obs=model.n_obs, labels=layout_labels(layout),
        terms=terms, constrain=model.constrain, unconstrain=model.unconstrain, param_names=tuple(layout.names),
        param_dims=dict(layout.param_dims), coords=model.coords, var_name=model.var_name,
        obs_dims=model.obs_dims, obs_shape=model.obs_shape, y=y, eval_predict=jax.jit(sim),
        notes={"log": "a likelihood-free SimulatorModel has no likelihood; use score='crps'",
               "quadratic": "a likelihood-free SimulatorModel has no likelihood; use score='crps'"},
    )
