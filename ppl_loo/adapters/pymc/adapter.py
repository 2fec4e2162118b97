"""PyMC adapter: a ``pymc.Model`` as a :class:`~ppl_loo.adapters.jax.base.PosteriorModel`.

The model's PyTensor graphs (joint log density with the log-Jacobians of the value transforms,
the elementwise log-likelihood of one observed variable, and the forward / backward value
transforms) are compiled once to JAX functions with
:func:`pymc.sampling.jax.get_jaxified_graph`; shared variables (``pm.Data``) become constants at
their current values. The unconstrained vector ``theta`` is the concatenation of
``model.value_vars`` (for example ``sigma_log__``), each flattened in C order, in that order.
Conversions between constrained draws and ``theta`` are vectorized over draws with
:func:`jax.vmap` (no Python loop over draws).

A Bernoulli observation whose logit is affine in the parameters is recognized in the graph
(:mod:`ppl_loo.adapters.pymc.structure`) and handed to the engine as the GLM structure of the closed-form
models, so a logistic regression written in PyMC runs on the same fast path as
:class:`~ppl_loo.models.LogisticRegression`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import warnings
from collections.abc import Callable
from functools import cached_property
from math import prod

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.adapters.jax.base import PosteriorModel
from ppl_loo.adapters.jax.jax_model import read_draws
from ppl_loo.adapters.pymc.graph import jaxify
from ppl_loo.adapters.pymc.pvi import predictive_simulator
from ppl_loo.adapters.pymc.structure import detect_bernoulli_glm, prior_cache, prior_line
from ppl_loo.adapters.pymc.variables import (
    bernoulli_var_target,
    constrained_placeholders,
    forward_transforms,
    free_variables,
    glm_note,
    observation_layout,
    observed_variable_name,
)
from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.protocol import GLMStructure
from ppl_loo.numerics.glm_lines import blocked_softplus_sum, cache_logits, line_block_rows
from ppl_loo.numerics.special import softplus

__all__ = ["PyMCModel", "quiet_pymc_log"]


class PyMCModel(PosteriorModel):
    """A ``pymc.Model`` seen through the posterior-model protocol (DESIGN.md, layer 2).

    Parameters
    ----------
    model : pymc.Model
        The model that produced the posterior draws, built with the same data. All free
        random variables must be continuous.
    var_name : str, optional
        The observed variable whose pointwise log-likelihood is used. Required when the model
        has several observed variables (as in ``arviz_stats.loo``).
    loo_log_density : callable, optional
        ``loo_log_density(values, i) -> scalar``: the log prior plus the log-likelihood of all data
        but observation ``i`` (a traced integer, flat index along the observations), as a JAX
        function of the *constrained* values (``values``: dict ``free RV name -> array``). Needed
        for exact LOO when the observed variable's likelihood does not factorize into one term
        per observation (for example one ``pm.MvNormal`` over all observations). The log-Jacobian
        of the value transforms is added by the adapter.
    structure : bool, default True
        Look for a Bernoulli observation whose logit is affine in a block of the unconstrained
        parameters (:mod:`ppl_loo.adapters.pymc.structure`). When found (and proved), the adapter
        declares a :class:`~ppl_loo.model.GLMStructure` with ``adapt_index`` = that block,
        so the engine uses the exact closed-form Jacobians (Eq. 28) and evaluates lines through
        the linear predictor; the other parameters (for example a hierarchical scale) are held
        fixed by the transformations. ``False`` keeps the generic path (every parameter moves,
        autodiff Jacobians).

    Attributes
    ----------
    dim : int
        Size of the unconstrained vector ``theta``.
    n_obs : int
        Number of observations of ``var_name``.
    obs_dims, obs_shape : tuple
        Dims (from the model's ``dims``; fallback ``{var_name}_dim_k``) and shape of the pointwise
        log-likelihood.
    param_names : tuple of str
        Names of the free random variables, in the order of ``model.value_vars``.
    value_names : tuple of str
        Names of the value variables (``sigma_log__`` ...), the blocks of ``theta``.
    free_rvs, value_vars : list of TensorVariable
        The free random variables and their value variables, in the order of ``theta``.
    shapes, ushapes : dict
        Constrained shape of each free variable (by name) and unconstrained shape of each value
        variable (by value name).
    slices : dict
        ``value name -> slice`` of its block of ``theta``.
    structure, adapt_index :
        The detected :class:`~ppl_loo.model.GLMStructure` and its block, or None.
    glm : BernoulliGLM or None
        The detected Bernoulli-logit linear predictor (:mod:`ppl_loo.adapters.pymc.structure`).
    structure_note : str
        What was detected, or why nothing was (for example "the logit is not affine ...").

    Raises
    ------
    ValueError
        A free random variable is discrete; ``var_name`` is missing, unknown or not observed; the
        observed variable's log-likelihood does not factorize and no ``loo_log_density`` is given.

    Notes
    -----
    ``logp(theta)`` is ``model.logp(jacobian=True, sum=True)`` (Potentials included) and
    ``loglik(theta)`` is ``model.logp(vars=[obs], sum=False, jacobian=False)`` flattened in C
    order; a multivariate observed variable observed with shape ``(n, k)`` (``pm.MvNormal`` rows)
    has one log-likelihood term per row, so its observations are the rows. For a non-factorizing likelihood with
    ``loo_log_density``, ``loglik`` is the pointwise ``logp - loo_logp`` (the log of ``p(y_i | y_-i, theta)`` up to the
    normalization the user's function implies), as the engine expects (``factorizes = False``).

    Examples
    --------
    >>> import pymc as pm, numpy as np
    >>> with pm.Model() as m:
    ...     mu = pm.Normal("mu")
    ...     sigma = pm.HalfNormal("sigma")
    ...     _ = pm.Normal("y", mu, sigma, observed=np.array([0.1, -0.3, 0.4]))
    >>> model = PyMCModel(m)
    >>> model.dim, model.n_obs, model.value_names
    (2, 3, ('mu', 'sigma_log__'))
    """

    @uses_x64
    def __init__(self, model, var_name: str | None = None, *, loo_log_density: Callable | None = None,
                 structure: bool = True):
        import pymc as pm

        if not isinstance(model, pm.Model):
            raise TypeError(f"model must be a pymc.Model, got {type(model).__name__}.")
        self.model = model
        self._init_args = (var_name, loo_log_density, bool(structure))  # for pickling (__reduce__)
        self.free_rvs, self.value_vars = free_variables(model)
        self._init_layout(model)
        self.var_name = observed_variable_name(model, var_name)
        self._obs_rv = model[self.var_name]
        self._compile_graphs(model)
        self._init_observations(model, loo_log_density)
        self.glm = None
        self.structure_note = "structure detection off" if not structure else ""
        if structure and self.factorizes:
            self._init_structure(model)

    def __reduce__(self):
        """Pickled as the ``pymc.Model`` and the constructor's arguments (cloudpickle: dask workers): the
        unpickled adapter compiles its JAX functions again from the model's graph, as this one did."""
        var_name, loo_log_density, structure = self._init_args
        return _rebuild_pymc_model, (self.model, var_name, loo_log_density, structure)

    def _init_layout(self, model):
        """Names, shapes, dims and blocks of ``theta`` of the free variables (``dim``, ``slices`` ...)."""
        shapes = model.eval_rv_shapes()
        self.param_names = tuple(rv.name for rv in self.free_rvs)
        self.value_names = tuple(v.name for v in self.value_vars)
        self.shapes = {rv.name: tuple(int(s) for s in shapes[rv.name]) for rv in self.free_rvs}
        self.ushapes = {}
        for rv, v in zip(self.free_rvs, self.value_vars):
            self.ushapes[v.name] = tuple(int(s) for s in shapes.get(v.name, shapes[rv.name]))
        self.slices = {}
        start = 0
        for v in self.value_vars:
            size = prod(self.ushapes[v.name])
            self.slices[v.name] = slice(start, start + size)
            start += size
        self.dim = start
        self.coords = {k: np.asarray(c) for k, c in model.coords.items() if c is not None}
        self.param_dims = {
            name: tuple(model.named_vars_to_dims.get(name, ()))
            or tuple(f"{name}_dim_{k}" for k in range(len(self.shapes[name])))
            for name in self.param_names
        }

    def _compile_graphs(self, model):
        """JAX functions of the value variables: log density, log-likelihood, log-Jacobian, constraining
        and forward transforms, and the variance-descent target of a Bernoulli observation."""
        logp_graph = model.logp(jacobian=True, sum=True)
        ll_graph = model.logp(vars=[self._obs_rv], sum=False, jacobian=False)[0]
        jac_graph = logp_graph - model.logp(jacobian=False, sum=True)
        constrained = model.replace_rvs_by_values(self.free_rvs)
        self._logp_fn = jaxify(self.value_vars, [logp_graph])
        self._ll_fn = jaxify(self.value_vars, [ll_graph])
        self._jac_fn = jaxify(self.value_vars, [jac_graph])
        self._constrain_fn = jaxify(self.value_vars, constrained)
        self._forward_fn = forward_transforms(model, self.free_rvs, self.shapes)
        self._lt_fn = bernoulli_var_target(model, self._obs_rv, self.value_vars)

    def _init_observations(self, model, loo_log_density):
        """``observed``, ``factorizes``, ``obs_shape``, ``obs_dims`` and ``n_obs`` of ``var_name``."""
        try:
            self.observed = np.asarray(model.rvs_to_values[self._obs_rv].eval())
        except Exception:  # noqa: BLE001 - metadata only
            self.observed = None
        zero = self.split(jnp.zeros(self.dim))
        ll_shape = tuple(jax.eval_shape(lambda *a: self._ll_fn(*a)[0], *zero).shape)
        data_shape = None if self.observed is None else tuple(self.observed.shape)
        dims = tuple(model.named_vars_to_dims.get(self.var_name, ()) or ())
        self._loo_log_density = loo_log_density
        self.factorizes, self.obs_shape, self.obs_dims = observation_layout(
            self.var_name, ll_shape, data_shape, dims, loo_log_density
        )
        self.n_obs = int(prod(self.obs_shape))

    def _init_structure(self, model):
        """Detect a Bernoulli-logit linear predictor; set ``glm``, ``structure``, ``adapt_index`` and
        ``structure_note``."""
        self.glm, self.structure_note = detect_bernoulli_glm(self, model, self._obs_rv)
        if self.glm is None:
            return
        g = self.glm
        self.structure = GLMStructure(X=g.X, y=g.y, beta_index=g.block, offset=g.offset)
        self.adapt_index = b = g.block
        contiguous = np.array_equal(b, np.arange(b[0], b[0] + b.size))
        self._bsel = slice(int(b[0]), int(b[0]) + b.size) if contiguous else b
        self.structure_note = glm_note(g, self.dim)

    # ------------------------------------------------------------------ layout
    def split(self, theta) -> list:
        """Value-variable blocks of ``theta`` (shape ``(..., dim)``), reshaped per block."""
        theta = jnp.asarray(theta)
        batch = theta.shape[:-1]
        return [
            theta[..., self.slices[v.name]].reshape(batch + self.ushapes[v.name])
            for v in self.value_vars
        ]

    def _values(self, theta) -> dict:
        outs = self._constrain_fn(*self.split(theta))
        return {n: o for n, o in zip(self.param_names, outs)}

    # ------------------------------------------------------------------ per-draw
    def logp(self, theta):
        """Unnormalized log posterior of one draw ``theta`` (``(dim,)``), log-Jacobian included."""
        return self._logp_fn(*self.split(theta))[0]

    def loglik(self, theta):
        """Pointwise log-likelihood ``(n_obs,)`` of ``var_name`` at one draw."""
        if self.factorizes or self._loo_log_density is None:
            return jnp.ravel(self._ll_fn(*self.split(theta))[0])
        lp = self.logp(theta)
        return jax.vmap(lambda i: lp - self.loo_logp(theta, i))(jnp.arange(self.n_obs))

    def log_var_target(self, theta, i):
        """Log complement probability of a Bernoulli observation (paper S.9); else ``None``."""
        if self._lt_fn is None:
            return None
        return jnp.ravel(self._lt_fn(*self.split(theta))[0])[i]

    @property
    def has_var_target(self):
        return self._lt_fn is not None

    def loo_logp(self, theta, i):
        """Log posterior without observation ``i``; uses ``loo_log_density`` when given."""
        if self._loo_log_density is None:
            return super().loo_logp(theta, i)
        parts = self.split(theta)
        jac = self._jac_fn(*parts)[0]
        return self._loo_log_density(self._values(theta), i) + jac

    @cached_property
    def _jitted(self):
        """Batched conversions, jit-compiled once per adapter (not once per call)."""
        return {
            "constrain": jax.jit(jax.vmap(self._values)),
            "unconstrain": jax.jit(jax.vmap(lambda *a: tuple(self._forward_fn(*a)))),
        }

    # ------------------------------------------------------------------ predictions
    def _at_points(self, graphs):
        """``graphs`` (of the observed variable's parameters, each broadcast to the observations' shape) as one
        function of the constrained free variables, jit-compiled and batched over points: ``params -> list of
        (M, *obs_shape)`` arrays, ``params`` as :meth:`constrain` gives them."""
        import pytensor.tensor as pt
        from pytensor.graph.replace import graph_replace

        holders = constrained_placeholders(self.free_rvs, self.shapes, "_value")
        graphs = graph_replace([pt.broadcast_to(g, self.obs_shape) for g in graphs], dict(holders), strict=False)
        fn = jaxify([holders[rv] for rv in self.free_rvs], graphs)
        batched = jax.jit(jax.vmap(lambda *a: tuple(fn(*a))))

        def at(params):
            arrays = [jnp.asarray(params[n], dtype=jnp.float64) for n in self.param_names]
            return [np.asarray(v, dtype=np.float64) for v in batched(*arrays)]

        return at

    @cached_property
    def _prob_fn(self):
        """``p`` of a Bernoulli ``var_name`` at points (:meth:`_at_points`); None for another distribution."""
        if not self.has_predicted_probability:
            return None
        return self._at_points([self._obs_rv.owner.inputs[-1]])

    @property
    def has_predicted_probability(self) -> bool:
        """Whether the observed variable is Bernoulli (:meth:`predicted_probability` is defined)."""
        return type(self._obs_rv.owner.op).__name__ == "BernoulliRV"

    def predicted_probability(self, params) -> np.ndarray:
        """``p(y_i = 1 | theta)`` of a Bernoulli observed variable, shape ``(M, *obs_shape)``.

        ``params`` maps the free variables' names to constrained values of shape ``(M, *shape)``
        (the output of :meth:`constrain`); for :func:`ppl_loo.loo_expectations` and
        :func:`ppl_loo.loo_roc`.
        """
        if self._prob_fn is None:
            raise ValueError(
                f"observed variable {self.var_name!r} is not Bernoulli; pass your own probability function."
            )
        return self._prob_fn(params)[0]

    @cached_property
    def _mean_fn(self):
        """``E[y_rep | theta]`` of the observed variable (PyMC's ``moments.mean`` of its distribution) at points
        (:meth:`_at_points`); None where PyMC has no mean for it."""
        from pymc.distributions.moments import mean

        try:
            graph = mean(self._obs_rv)
        except NotImplementedError:
            return None
        return self._at_points([graph])

    def predicted_mean(self, params) -> np.ndarray:
        """``E[y_rep_i | theta]``, shape ``(M, *obs_shape)``; ``params`` as in :meth:`predicted_probability`. For
        :func:`ppl_loo.loo_r2` and :func:`ppl_loo.loo_metrics`."""
        if self._mean_fn is None:
            raise ValueError(f"PyMC has no mean for the distribution of {self.var_name!r}; pass your own "
                             "mean=callable(params) -> E[y_rep_i | theta].")
        return self._mean_fn(params)[0]

    @cached_property
    def _cdf_fn(self):
        """``log P(y_rep <= y | theta)`` at the observed ``y`` (and, for a discrete outcome, ``log P(y_rep <= y - 1
        | theta)``) at points (:meth:`_at_points`), from PyMC's ``logcdf`` of the observed distribution; None where
        PyMC has none for it."""
        import pymc as pm

        y = self.model.rvs_to_values[self._obs_rv]
        try:
            graphs = [pm.logcdf(self._obs_rv, y)]
            if self.discrete_outcome:
                graphs.append(pm.logcdf(self._obs_rv, y - 1))
        except NotImplementedError:
            return None
        return self._at_points(graphs)

    @property
    def discrete_outcome(self) -> bool:
        """Whether the observed variable is discrete (integer-valued)."""
        return str(self._obs_rv.type.dtype).startswith(("int", "uint", "bool"))

    def pit_cdf(self, params):
        """The predictive CDF at the observed value, ``P(y_rep_i <= y_i | theta)``, shape ``(M, *obs_shape)``, and
        for a discrete outcome the tuple ``(P(y_rep_i <= y_i | theta), P(y_rep_i < y_i | theta))``; ``params`` as
        in :meth:`predicted_probability`. For :func:`ppl_loo.loo_pit`."""
        if self._cdf_fn is None:
            raise ValueError(f"PyMC has no logcdf for the distribution of {self.var_name!r}; pass loo_pit your own "
                             "cdf=callable(params) -> P(y_rep_i <= y_i | theta).")
        out = [np.exp(v) for v in self._cdf_fn(params)]
        return (out[0], out[1]) if self.discrete_outcome else out[0]

    @cached_property
    def _predictive_fn(self):
        """The jit-compiled simulator of :meth:`predictive_draws` (None without a JAX sampler of the distribution)."""
        return predictive_simulator(self)

    @property
    def has_predictive_draws(self) -> bool:
        """Whether :meth:`predictive_draws` can simulate the observed variable (PyTensor has a JAX sampler of it)."""
        return self._predictive_fn is not None

    @property
    def discrete_data(self) -> tuple:
        """``(var_name,)`` where the observed variable is discrete (integer-valued), else ``()``."""
        rv = getattr(self, "_obs_rv", None)
        return (self.var_name,) if str(getattr(rv, "dtype", "")).startswith(("int", "uint", "bool")) else ()

    def replicated_data(self, theta, rng) -> np.ndarray:
        """One replicated data set ``y_rep`` of the observed variable per unconstrained point, ``(M, n)`` from
        ``theta`` ``(M, dim)`` and a NumPy generator ``rng`` (the protocol's ``Model.simulate``, for
        :func:`ppl_loo.loo_score` at the adapted proposals' points): PyTensor's JAX sampler of the observed
        distribution (:meth:`predictive_draws`), else ``pm.sample_posterior_predictive`` of the observed
        variable on a one-chain trace of the points (every free variable given, so only it is drawn)."""
        if self._predictive_fn is not None:
            key = jax.random.key(int(rng.integers(2**62)))
            return self.predictive_draws(theta, key).reshape(np.shape(theta)[0], -1)
        import pymc as pm
        import xarray as xr

        params = self.constrain(np.asarray(theta, dtype=np.float64))
        trace = xr.Dataset({name: (("chain", "draw") + tuple(f"{name}_dim_{k}" for k in range(np.ndim(v) - 1)),
                                   np.asarray(v)[None]) for name, v in params.items()})
        with warnings.catch_warnings(), quiet_pymc_log():  # "Potentials are ignored": here the points are given
            warnings.simplefilter("ignore", UserWarning)
            pp = pm.sample_posterior_predictive(trace, model=self.model, var_names=[self.var_name], random_seed=rng,
                                                progressbar=False)
        y = np.asarray(pp["posterior_predictive"][self.var_name].values, dtype=np.float64)[0]
        return y.reshape(y.shape[0], -1)

    def predictive_draws(self, theta, key) -> np.ndarray:
        """One replicated data set ``y_rep`` of the observed variable per unconstrained point: ``(M, n)`` from
        ``theta`` ``(M, dim)`` and a JAX key (PyTensor's JAX sampler of the observed distribution; compiled once per
        shape of ``theta``). For :func:`ppl_loo.loo_score` at the adapted proposals' points."""
        if self._predictive_fn is None:
            raise ValueError(f"PyTensor has no JAX sampler of the distribution of {self.var_name!r}.")
        return np.asarray(self._predictive_fn(jnp.asarray(theta, dtype=jnp.float64), key), dtype=np.float64)

    # ------------------------------------------------------------------ line evaluations
    #: rows of ``X`` per block of the GLM line evaluations: None decides by memory
    #: (:func:`ppl_loo.numerics.glm_lines.line_block_rows`), 0 never blocks, a positive int forces blocks
    line_block_rows = None

    @cached_property
    def _glm_cache_fn(self):

        g = self.glm

        def cache(theta, Xt, offset):
            return theta[:, self._bsel] @ Xt.T + offset, prior_cache(g, theta, self._bsel)

        return jax.jit(cache)

    @cached_property
    def _glm_prior_cache_fn(self):
        g = self.glm
        return jax.jit(lambda theta: prior_cache(g, theta, self._bsel))

    def line_cache(self, theta):
        """For a detected Bernoulli-logit linear predictor: the logit ``(S, n)``, the prior part's
        per-run quantities (:func:`ppl_loo.adapters.pymc.structure.prior_cache`) and the data; else None."""
        if self.glm is None:
            return None
        g = self.glm
        Xt = jnp.asarray(g.X)
        offset = jnp.zeros(g.y.shape) if g.offset is None else jnp.asarray(g.offset)
        theta = jnp.asarray(theta)
        if cache_logits(theta.shape[0], Xt.shape[0], self.line_block_rows):
            mu0, pcache = self._glm_cache_fn(theta, Xt, offset)
        else:  # the (S, n) logit is recomputed block by block in line_eval
            mu0, pcache = offset, self._glm_prior_cache_fn(theta)
        return mu0, pcache, Xt, jnp.asarray(2.0 * g.y - 1.0)

    def line_eval(self, cache, theta, delta, ts, i):
        """Fast :meth:`PosteriorModel.line_eval` of a Bernoulli-logit linear predictor.

        Along ``theta + t delta`` the logit is ``mu0 + t X delta_block`` (one ``O(S n q)`` product, or
        ``O(S n r)`` for a rank-``r`` displacement, serves every ``t``) and the log-likelihood is
        ``-softplus(-(2y - 1) mu)``; the prior part comes from the PyMC graph
        (:func:`ppl_loo.adapters.pymc.structure.prior_line`). Models without that structure use the
        generic evaluation of the full model.
        """
        if self.glm is None:
            return super().line_eval(cache, theta, delta, ts, i)

        mu0, pcache, Xt, sign = cache
        b = self._bsel
        if mu0.ndim == 1:  # blocked: mu0 holds the offset (n,), the (S, n) logit was not cached
            return self._line_eval_blocked(cache, theta, delta, ts, i)
        if hasattr(delta, "slope"):  # DiagAffine: delta = shift + slope * theta
            shift, slope = delta.shift, delta.slope
            dmu = (shift[b] @ Xt.T)[None, :] + theta[:, b] @ (slope[b][:, None] * Xt.T)
        elif hasattr(delta, "coef"):  # LowRank: delta = coef @ basis, O(S n r)
            dmu = delta.coef @ (delta.basis[:, b] @ Xt.T)
        else:
            dmu = jnp.broadcast_to(delta, theta.shape)[:, b] @ Xt.T
        ts = jnp.asarray(ts)
        prior = prior_line(self.glm, pcache, theta, delta, ts, b)
        t = ts[:, None]
        mu = mu0[None] + t[..., None] * dmu[None]  # (T, S, n), reduced without being stored
        logp = prior - jnp.sum(softplus(-sign * mu), axis=-1)
        # observation i on its own (slicing the (T, S, n) array would make XLA store it)
        ll_i = -softplus(-sign[i] * (mu0[:, i][None] + t * dmu[:, i][None]))
        return logp, ll_i

    # generic where the model has no structure (``glm`` None), the only case ppl_loo.model.fingerprint accepts
    line_eval.generic_line_eval = True

    def _line_eval_blocked(self, cache, theta, delta, ts, i):
        """:meth:`line_eval` without the ``(S, n)`` logit: the block displacement as an ``(S, q)`` array
        and the likelihood sum over blocks of rows (:func:`~ppl_loo.numerics.glm_lines.blocked_softplus_sum`)."""
        offset, pcache, Xt, sign = cache
        b = self._bsel
        coef = theta[:, b]
        if hasattr(delta, "slope"):  # DiagAffine
            db = delta.shift[b][None] + coef * delta.slope[b][None]
        elif hasattr(delta, "coef"):  # LowRank
            db = delta.coef @ delta.basis[:, b]
        else:
            db = jnp.broadcast_to(delta, theta.shape)[:, b]
        ts = jnp.asarray(ts)
        rows = line_block_rows(theta.shape[0], Xt.shape[0], ts.shape[0], self.line_block_rows) or Xt.shape[0]
        prior = prior_line(self.glm, pcache, theta, delta, ts, b)
        logp = prior - blocked_softplus_sum(coef, db, ts, Xt, sign, rows, offset)
        t = ts[:, None]
        ll_i = -softplus(-sign[i] * ((coef @ Xt[i] + offset[i])[None] + t * (db @ Xt[i])[None]))
        return logp, ll_i

    # ------------------------------------------------------------------ constrained space
    def constrain(self, theta) -> dict:
        """Constrained draws ``name -> (S, *shape)`` of the free variables from ``(S, dim)``."""
        theta = jnp.asarray(theta, dtype=jnp.float64)
        if theta.ndim != 2 or theta.shape[1] != self.dim:
            raise ValueError(f"theta must have shape (S, {self.dim}), got {theta.shape}.")
        out = self._jitted["constrain"](theta)
        return {n: np.asarray(v) for n, v in out.items()}

    def refit_draws(self, i, *, chains, warmup, draws, random_seed, init, target_accept=0.8, max_tree_depth=10):
        """Draws without observation ``i`` from ``pm.sample`` (PyMC's NUTS) on a clone of the model
        with a ``pm.Potential`` that subtracts the observation's log-likelihood term.

        Every other part of the model (priors, Potentials, latent variables indexed by observation,
        whose prior then stays) is the user's own. A likelihood that does not factorize falls back to
        NUTS on ``loo_log_density`` (:meth:`PosteriorModel.refit_draws`).
        """
        if not self.factorizes:
            return super().refit_draws(i, chains=chains, warmup=warmup, draws=draws, random_seed=random_seed,
                                       init=init, target_accept=target_accept, max_tree_depth=max_tree_depth)
        import pymc as pm
        from pymc.model.fgraph import clone_model

        clone = clone_model(self.model)
        with clone:
            terms = clone.logp(vars=[clone[self.var_name]], sum=False, jacobian=False)[0]
            pm.Potential("ppl_loo_refit_without_observation", -terms.flatten()[int(i)])
            with warnings.catch_warnings(), _noticing_sigint() as interrupted, quiet_pymc_log():
                warnings.simplefilter("ignore")
                try:
                    idata = pm.sample(draws=int(draws), tune=int(warmup), chains=int(chains), cores=1,
                                      random_seed=int(np.random.default_rng(random_seed).integers(2**31)),
                                      target_accept=float(target_accept), progressbar=False,
                                      compute_convergence_checks=False, nuts={"max_treedepth": int(max_tree_depth)})
                except Exception as err:
                    if interrupted:  # nutpie turns a Ctrl-C before its first draw into "no results to take"
                        raise KeyboardInterrupt(f"pm.sample was interrupted (Ctrl-C) while refitting without "
                                                f"observation {int(i)}") from err
                    raise
        got = (idata["posterior"].sizes.get("chain", 0), idata["posterior"].sizes.get("draw", 0))
        if interrupted or got != (int(chains), int(draws)):
            # pm.sample (nutpie) catches Ctrl-C and returns what it has, sometimes in arrays of the full size that
            # were never filled: a refit from those would be a wrong number
            raise KeyboardInterrupt(f"pm.sample was interrupted (Ctrl-C) while refitting without observation {int(i)} "
                                    f"(it returned {got[0]} chain(s) x {got[1]} draws of the {int(chains)} x "
                                    f"{int(draws)} asked for, not all of them sampled)")
        theta = np.asarray(self.unconstrain(idata["posterior"]))
        div = int(np.asarray(idata["sample_stats"]["diverging"].values).sum())
        return theta.reshape(int(chains), int(draws), self.dim), {"sampler": "pm.sample without the observation",
                                                                  "divergences": div}

    def _check_variables(self, posterior):
        """Refuse draws with variables this model does not have: the draws of another model of the same data
        would otherwise be read for the variables the two share, and the rest silently dropped."""
        names = getattr(posterior, "data_vars", None)
        if names is None:
            return
        extra = sorted(str(n) for n in names if str(n) not in self.model.named_vars)
        if extra:
            own = ", ".join(sorted(str(v.name) for v in self.model.free_RVs + self.model.deterministics))
            raise ValueError(f"the posterior has variable(s) {', '.join(map(repr, extra))} that the PyMC model "
                             f"does not have (its variables: {own}): the draws are of another model. Pass the "
                             "model that was fitted, or drop those variables from the posterior group.")

    def unconstrain(self, posterior) -> np.ndarray:
        """Unconstrained draws ``(S, dim)`` from the constrained posterior draws.

        Parameters
        ----------
        posterior : xarray.DataTree, xarray.Dataset or mapping
            The ``posterior`` group as ``pm.sample`` writes it (dims ``(chain, draw, ...)``,
            flattened chain-major), or a mapping ``name -> (S, *shape)`` /
            ``(chain, draw, *shape)`` arrays. Its variables must be the model's (free, deterministic):
            one the model does not have means draws of another model.

        Returns
        -------
        numpy.ndarray
            ``(S, dim)`` float64, the value transforms applied draw by draw (vectorized); a
            transform whose parameters depend on other variables uses each draw's values of them.

        Raises
        ------
        ValueError
            A free variable is missing, has the wrong shape, or has draws outside its support; or the
            posterior has variables the model does not.
        """
        draws, n_draws = read_draws(posterior, self.shapes, self.param_dims, convert=_finite_draws)
        self._check_variables(posterior)
        arrays = [jnp.asarray(vals) for vals in draws]
        outs = self._jitted["unconstrain"](*arrays)
        blocks = []
        for name, v, u in zip(self.param_names, self.value_vars, outs):
            u = np.asarray(u, dtype=np.float64).reshape(n_draws, -1)
            if not np.isfinite(u).all():
                bad = int((~np.isfinite(u)).any(axis=1).sum())
                raise ValueError(
                    f"posterior variable {name!r} has {bad} draw(s) outside the support of its "
                    f"transform ({v.name}); check that the model is the one that was fitted."
                )
            if u.shape[1] != prod(self.ushapes[v.name]):
                raise ValueError(f"value variable {v.name!r}: unexpected transformed size {u.shape}.")
            blocks.append(u)
        return np.concatenate(blocks, axis=1)


def _finite_draws(name, vals, n_draws) -> np.ndarray:
    """The draws of one free variable, checked to be finite (:func:`read_draws`'s ``convert``)."""
    if not np.isfinite(vals).all():
        raise ValueError(f"posterior variable {name!r} has non-finite draws (NaN or inf).")
    return vals


@contextlib.contextmanager
def _noticing_sigint():
    """Record a Ctrl-C (SIGINT) during the block, then raise KeyboardInterrupt as Python would.

    ``pm.sample`` (and nutpie under it) catch KeyboardInterrupt and return the draws they have; the list this
    yields is non-empty after a Ctrl-C, so that the caller does not take those draws for a finished run.
    Only in the main thread (where Python runs signal handlers); elsewhere the list stays empty.
    """
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, old)


def _rebuild_pymc_model(model, var_name, loo_log_density, structure):
    """:class:`PyMCModel` of an unpickled ``pymc.Model`` (:meth:`PyMCModel.__reduce__`)."""
    return PyMCModel(model, var_name, loo_log_density=loo_log_density, structure=structure)


@contextlib.contextmanager
def quiet_pymc_log():
    """PyMC's informational log lines ("Sampling: [y]", "Auto-assigning NUTS sampler...") silenced for the
    duration: ppl_loo calls PyMC once per block of points or per refit, hundreds of times in one user call, and
    each line would say nothing the user asked for. Warnings and errors still show."""
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
