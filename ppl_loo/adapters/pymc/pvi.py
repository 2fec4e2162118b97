"""PVI terms of a PyMC model: category probabilities and a JAX simulator of the observed variable.

``log p(y_i | theta)`` and the log joint come from :class:`~ppl_loo.models.PyMCModel`; this module
adds what only PVI needs:

- the observed variable's logp at every category (quadratic score), compiled to JAX with
  ``pymc.logprob.basic.logp`` on constant category arrays, exactly as the model defines it;
- a simulator: the distribution parameters of the observed variable as a JAX function of the
  unconstrained draw, fed to PyTensor's JAX sampler of that distribution
  (``pytensor.link.jax.dispatch.random.jax_sample_fn``: ``loc + scale * z`` for the location-scale
  families, ``jax.random.gamma`` with its implicit reparameterization gradient, ...). For a
  continuous observed variable it is pathwise differentiable in ``theta`` (the CRPS gradient of
  Table 1); for a discrete one it still draws predictive outcomes (held-out CRPS) but the CRPS
  objective is refused.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.adapters.pymc.graph import jaxify, value_labels
from ppl_loo.model.build import category_index, pvi_model, simulate_terms
from ppl_loo.numerics.vi.objective import Terms

__all__ = ["pymc_pvi_model", "predictive_simulator"]


def _extra_sampler(op_name):
    """JAX samplers for distributions PyTensor's JAX backend does not dispatch (pathwise)."""
    if op_name == "LogNormalRV":
        def sample(key, size, dtype, mu, sigma):
            return jnp.exp(mu + sigma * jax.random.normal(key, size, dtype))
        return sample
    if op_name == "HalfNormalRV":
        def sample(key, size, dtype, loc, scale):
            return loc + scale * jnp.abs(jax.random.normal(key, size, dtype))
        return sample
    return None


def _sampler(obs_rv):
    """``(sample_fn, reason)``: PyTensor's JAX sampler of the observed distribution, or why there is none."""
    from pytensor.tensor.random.op import RandomVariable

    op = obs_rv.owner.op
    name = type(op).__name__
    if not isinstance(op, RandomVariable):
        return None, (f"the observed variable's distribution ({name}) is not a basic random variable with a "
                      "JAX sampler")
    try:
        from pytensor.link.jax.dispatch.random import jax_sample_fn

        return jax_sample_fn(op, obs_rv.owner), None
    except NotImplementedError:
        fn = _extra_sampler(name)
        if fn is not None:
            return fn, None
        return None, f"PyTensor has no JAX sampler for {name}"


def pymc_pvi_model(base, *, categories=None):
    """The :class:`~ppl_loo.model.Model` of a :class:`~ppl_loo.models.PyMCModel` with its PVI terms.

    Parameters
    ----------
    base : PyMCModel
        The LOO adapter of the model (its likelihood must factorize).
    categories : array-like, optional
        Every possible outcome of a discrete observed variable (quadratic score); default: from
        the distribution (Bernoulli, categorical, binomial).

    Returns
    -------
    Model
        The LOO fields of ``base`` and the PVI terms; ``notes`` says why a score is unavailable.

    Raises
    ------
    ValueError
        The likelihood does not factorize, or the categories do not cover the outcomes.
    """
    from pytensor.tensor.type import discrete_dtypes

    if not base.factorizes:
        raise ValueError(
            f"the likelihood of {base.var_name!r} does not factorize into one term per observation, so the "
            "per-observation predictive score of PVI is not defined for it."
        )
    obs_rv = base.model[base.var_name]
    discrete = obs_rv.type.dtype in discrete_dtypes
    y = None if base.observed is None else np.asarray(base.observed)
    rv_shape = tuple(y.shape) if y is not None else tuple(base.obs_shape)
    vector = rv_shape != tuple(base.obs_shape)
    notes = {}
    params_fn = _distribution_params(base, obs_rv, notes)
    sim, predict = _simulator(base, obs_rv, params_fn, rv_shape, vector, discrete, notes)
    probs = cats = None
    if discrete and not vector:
        probs, cats = _category_probs(base, obs_rv, params_fn, rv_shape, categories, notes)
    elif not discrete:
        notes["quadratic"] = (f"the quadratic score is for categorical outcomes; {base.var_name!r} is continuous "
                              f"({type(obs_rv.owner.op).__name__}). Use score='crps' or 'log'")
    y_index = None
    if probs is not None and y is not None:
        y_index = category_index(y, cats, f"observed variable {base.var_name!r}")
    n = base.n_obs
    y_flat = None if y is None else y.astype(np.float64).reshape((n, -1) if vector else (n,))
    loglik = jax.vmap(base.loglik)
    logp = jax.vmap(base.logp)
    terms = Terms(n, loglik=loglik, logp=logp, log_prior=partial(_log_prior, logp, loglik), probs=probs,
                  simulate=sim, y=None if y_flat is None else jnp.asarray(y_flat),
                  y_index=None if y_index is None else jnp.asarray(y_index), vector=vector)
    return pvi_model(
        kind="PyMC", loo_adapter=base, dim=base.dim, n_obs=n, labels=value_labels(base), terms=terms,
        constrain=base.constrain, unconstrain=base.unconstrain, param_names=tuple(base.param_names),
        param_dims=dict(base.param_dims), coords=dict(base.coords), var_name=base.var_name,
        obs_dims=tuple(base.obs_dims), obs_shape=tuple(base.obs_shape), y=y_flat, observed=y, categories=cats,
        eval_loglik=jax.jit(loglik), eval_probs=None if probs is None else jax.jit(probs),
        eval_predict=predict, notes=notes, log_lik_bound=_log_lik_bound(obs_rv, discrete, y_flat, n),
    )


def _log_lik_bound(obs_rv, discrete, y, n):
    """``log C_i >= log p(y_i | theta)`` for every ``theta`` where the distribution gives one: 0 for a discrete
    outcome (a pmf is <= 1), ``sup_lambda log Poisson(y_i | lambda)`` for a Poisson one; None otherwise."""
    if not discrete:
        return None
    if type(obs_rv.owner.op).__name__ == "PoissonRV" and y is not None:
        from scipy.special import gammaln

        y = np.asarray(y, dtype=np.float64)
        ylog = np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0)), 0.0)
        return ylog - y - gammaln(y + 1.0)
    return np.zeros(n)


def predictive_simulator(base):
    """``simulate(theta (M, d), key) -> (M, n)``, jit-compiled: one replicated data set of the observed variable per
    unconstrained draw, from PyTensor's JAX sampler of its distribution (the simulator of :func:`pymc_pvi_model`'s
    predictive draws); None where there is none (no JAX sampler, a multivariate observed variable)."""
    obs_rv = base.model[base.var_name]
    y = None if base.observed is None else np.asarray(base.observed)
    rv_shape = tuple(y.shape) if y is not None else tuple(base.obs_shape)
    if rv_shape != tuple(base.obs_shape) or not base.factorizes:
        return None
    notes = {}
    params_fn = _distribution_params(base, obs_rv, notes)
    _, predict = _simulator(base, obs_rv, params_fn, rv_shape, False, True, notes)
    return predict


def _log_prior(logp, loglik, theta):
    """Log prior ``(M,)`` of draws ``theta`` ``(M, d)``: the batched log density minus the log-likelihood."""
    return logp(theta) - jnp.sum(loglik(theta), axis=1)


def _distribution_params(base, obs_rv, notes):
    """The observed variable's distribution parameters as a JAX function of the value variables, or None
    (the reason goes to ``notes["params"]``)."""
    model = base.model
    try:
        dist_params = list(obs_rv.owner.op.dist_params(obs_rv.owner))
        return jaxify(base.value_vars, model.replace_rvs_by_values(dist_params))
    except Exception as err:  # noqa: BLE001 - reported when a score needs it
        notes["params"] = f"its distribution parameters could not be compiled to JAX ({err})"
        return None


def _simulator(base, obs_rv, params_fn, rv_shape, vector, discrete, notes):
    """``(simulate, predict)``: the pathwise simulator of the CRPS (None for a discrete observed variable)
    and the jitted simulator of predictive draws (None without a JAX sampler); reasons go to ``notes``."""
    sample_fn, reason = _sampler(obs_rv)
    if sample_fn is None or params_fn is None:
        notes["crps"] = (f"no differentiable simulator of {base.var_name!r}: {reason or notes.get('params')}. "
                         "Write the model as a pl.JaxModel and pass simulator=")
        return None, None
    sim_one = partial(_simulate_one, params_fn, base.split, sample_fn, rv_shape, obs_rv.type.dtype)
    simulate = simulate_terms(sim_one, vector)
    predict = jax.jit(simulate)
    if not discrete:
        return simulate, predict
    notes["crps"] = (f"the observed variable {base.var_name!r} is discrete ({type(obs_rv.owner.op).__name__}); its "
                     "draws are not pathwise differentiable in the parameters, so the CRPS gradient of the paper "
                     "does not apply (notes, section 4). Use score='log' (or 'quadratic' for categorical outcomes)")
    return None, predict


def _simulate_one(params_fn, split, sample_fn, rv_shape, dtype, theta, key):
    """One draw of all outcomes at one unconstrained draw ``theta``."""
    p = params_fn(*split(theta))
    return jnp.asarray(sample_fn(key, rv_shape, dtype, *p), dtype=jnp.float64)


def _category_probs(base, obs_rv, params_fn, rv_shape, categories, notes):
    """``(probs, categories)`` of a discrete observed variable: ``probs(theta (M, d)) -> (M, n, n_cat)`` from
    the model's logp at every category; ``(None, None)`` when the categories are unknown (reason in
    ``notes["quadratic"]``).

    Raises
    ------
    ValueError
        The probabilities of the categories do not sum to one.
    """
    import pytensor.tensor as pt
    from pymc.logprob.basic import logp as rv_logp

    try:
        cats = _categories(type(obs_rv.owner.op).__name__, params_fn, base, categories)
    except ValueError as err:
        notes["quadratic"] = str(err)
        return None, None
    graphs = [rv_logp(obs_rv, pt.as_tensor(np.full(rv_shape, c, dtype=obs_rv.type.dtype))) for c in cats]
    cat_fn = jaxify(base.value_vars, base.model.replace_rvs_by_values(graphs))
    probs = jax.vmap(partial(_probs_one, cat_fn, base.split))
    total = np.asarray(probs(jnp.zeros((1, base.dim)))).sum(axis=-1)
    if not np.allclose(total, 1.0, atol=1e-6):
        raise ValueError(f"the categories {cats.tolist()} do not cover the outcomes of {base.var_name!r}: "
                         f"their probabilities sum to {total.min():.4g}..{total.max():.4g}, not 1. Pass "
                         "every possible outcome as categories=.")
    return probs, cats


def _probs_one(cat_fn, split, theta):
    """Probabilities ``(n, n_cat)`` of every category at one unconstrained draw ``theta``."""
    lps = cat_fn(*split(theta))
    return jnp.exp(jnp.stack([jnp.ravel(lp) for lp in lps], axis=-1))


def _categories(op_name, params_fn, base, categories):
    """Sorted possible outcomes of a discrete observed variable (quadratic score)."""
    if categories is not None:
        cats = np.unique(np.asarray(categories))
        if len(cats) < 2:
            raise ValueError("categories must list at least two outcomes.")
        return cats
    if op_name == "BernoulliRV":
        return np.array([0, 1])
    if params_fn is None:
        raise ValueError("the categories of the observed variable are unknown; pass categories=")
    vals = params_fn(*base.split(jnp.zeros(base.dim)))
    if op_name == "CategoricalRV":
        return np.arange(int(np.shape(vals[-1])[-1]))
    if op_name in ("BinomialRV", "BetaBinomialRV"):
        n_max = int(np.max(np.asarray(vals[0])))
        return np.arange(n_max + 1)
    raise ValueError(
        f"the quadratic score needs a finite set of outcomes; for {op_name} pass categories= (every "
        "possible outcome, sorted)"
    )
