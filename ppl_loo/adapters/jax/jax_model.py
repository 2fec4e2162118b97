"""Models written as plain JAX functions of named, constrained parameters.

:class:`ParameterLayout` maps named constrained parameters to one flat unconstrained vector
``theta`` (the order of the ``params`` dict, each block flattened in C order) and back, vectorized
over draws. :class:`JaxModel` combines a layout with user log-prior and log-likelihood functions
into a :class:`~ppl_loo.adapters.jax.base.PosteriorModel`. The closed-form models
(:class:`~ppl_loo.models.LogisticRegression`, :class:`~ppl_loo.models.ReluNet`) reuse the layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.adapters.jax.base import PosteriorModel
from ppl_loo.adapters.jax.bijectors import Bijector, Identity
from ppl_loo.jax_settings import uses_x64

__all__ = ["JaxModel", "LayoutMixin", "ParameterLayout", "posterior_dataset", "read_draws"]


def _as_shape(shape, name) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"params[{name!r}]: the shape must be an int or a tuple of ints, got {shape!r}."
        ) from err
    if any(s < 0 for s in shape):
        raise ValueError(f"params[{name!r}]: negative size in shape {shape}.")
    return shape


def posterior_dataset(posterior):
    """Return the ``posterior`` group of a DataTree as a Dataset, or the input unchanged.

    Accepts an ``xarray.DataTree`` (its ``posterior`` child when it has one, else the node
    itself), an ``xarray.Dataset``, or a mapping of arrays (returned unchanged).
    """
    if isinstance(posterior, xr.DataTree):
        node = posterior["posterior"] if "posterior" in posterior.children else posterior
        return node.to_dataset()
    return posterior


def read_draws(posterior, shapes: Mapping, param_dims: Mapping, convert: Callable | None = None) -> tuple[list, int]:
    """The draws of every variable, flattened over chains, and their common number of draws.

    Parameters
    ----------
    posterior : xarray.DataTree, xarray.Dataset or mapping
        Constrained draws: the ``posterior`` group of a DataTree, a Dataset (dims ``(chain,
        draw, ...)``, read chain-major) or a mapping of ``(S, *shape)`` or ``(chain, draw,
        *shape)`` arrays by name. Variables not in ``shapes`` are ignored.
    shapes : mapping
        ``name -> shape`` of one draw of each variable to read, in the order of the output.
    param_dims : mapping
        ``name -> dims`` of each variable (without ``chain``/``draw``), the order of the event
        dims of a Dataset variable.
    convert : callable, optional
        ``convert(name, draws, n_draws) -> block``, applied to each variable's draws as soon as
        they are read (checks raise in the order of ``shapes``); default: the draws themselves.

    Returns
    -------
    arrays : list
        ``convert`` of the ``(S, *shape)`` float64 draws of each variable of ``shapes``.
    n_draws : int
        ``S``.

    Raises
    ------
    ValueError
        A variable is missing, has the wrong per-draw shape, or has another number of draws than
        the first.
    """
    post = posterior_dataset(posterior)
    names = list(shapes)
    arrays = []
    n_draws = None
    for name in names:
        vals = _variable_draws(post, name, shapes[name], param_dims[name])
        if n_draws is None:
            n_draws = vals.shape[0]
        elif vals.shape[0] != n_draws:
            raise ValueError(
                f"posterior variable {name!r} has {vals.shape[0]} draws but "
                f"{names[0]!r} has {n_draws}; all variables need the same draws."
            )
        arrays.append(vals if convert is None else convert(name, vals, n_draws))
    return arrays, n_draws


def _variable_draws(post, name: str, shape: tuple, dims: tuple) -> np.ndarray:
    """The draws ``(S, *shape)`` float64 of one variable of a posterior Dataset or mapping.

    Parameters
    ----------
    post : xarray.Dataset or mapping
        A Dataset whose variables have dims ``(chain, draw, ...)`` (flattened chain-major), or a
        mapping ``name -> array`` of shape ``(S, *shape)`` or ``(chain, draw, *shape)``.
    name : str
        The variable.
    shape : tuple
        Its shape in one draw.
    dims : tuple
        Its event dims, the order they are transposed to when a Dataset holds them all.

    Returns
    -------
    numpy.ndarray
        ``(S, *shape)`` float64.

    Raises
    ------
    ValueError
        The variable is missing, lacks the ``chain``/``draw`` dims, or has another shape.
    TypeError
        ``post`` is neither a Dataset nor a mapping.
    """
    if isinstance(post, xr.Dataset):
        return _dataset_draws(post, name, shape, dims)
    if isinstance(post, Mapping):
        if name not in post:
            raise ValueError(
                f"posterior variable {name!r} is missing; got {sorted(map(str, post))}."
            )
        vals = np.asarray(post[name], dtype=np.float64)
        if vals.shape[1:] == shape:
            return vals
        if vals.ndim == len(shape) + 2 and vals.shape[2:] == shape:
            return vals.reshape((-1,) + shape)
        raise ValueError(
            f"posterior variable {name!r} has shape {vals.shape}; expected (S, *{shape}) or "
            f"(chain, draw, *{shape}) as the model declares shape {shape}."
        )
    raise TypeError(
        "posterior must be an xarray.DataTree, an xarray.Dataset or a dict of arrays, got "
        f"{type(post).__name__}."
    )


def _dataset_draws(post, name, shape, dims) -> np.ndarray:
    """:func:`_variable_draws` for an ``xarray.Dataset``."""
    if name not in post.data_vars:
        raise ValueError(
            f"posterior variable {name!r} is missing; the posterior has "
            f"{sorted(map(str, post.data_vars))}. Pass the posterior of this model's fit, with the "
            "model's variable names."
        )
    da = post[name]
    if "chain" not in da.dims or "draw" not in da.dims:
        raise ValueError(
            f"posterior variable {name!r} has dims {da.dims}; expected ('chain', 'draw', "
            "...). Use arviz_base.convert_to_datatree or pass a dict of (S, ...) arrays."
        )
    event = [d for d in da.dims if d not in ("chain", "draw")]
    want = list(dims)
    if set(event) == set(want):
        event = want
    vals = np.asarray(da.transpose("chain", "draw", *event).values, dtype=np.float64)
    if vals.shape[2:] != shape:
        raise ValueError(
            f"posterior variable {name!r} has per-draw shape {vals.shape[2:]} (dims "
            f"{tuple(event)}) but the model declares shape {shape}; build the model with "
            "the same data and dimensions as the fit."
        )
    return vals.reshape((-1,) + shape)


class ParameterLayout:
    """Named constrained parameters <-> one flat unconstrained vector.

    Parameters
    ----------
    params : mapping
        ``name -> (shape, bijector or None)``; ``shape`` is the *constrained* shape of one draw
        (``()`` for a scalar), ``None`` means :class:`~ppl_loo.adapters.jax.bijectors.Identity`.
        ``theta`` holds the blocks in this order, each flattened in C order.
    param_dims : mapping, optional
        ``name -> tuple of dim names`` (without ``chain``/``draw``) used when reading draws from an
        ``xarray.Dataset`` (to transpose the event dims) and when writing a DataTree.
    """

    def __init__(self, params: Mapping, param_dims: Mapping | None = None):
        if not isinstance(params, Mapping) or len(params) == 0:
            raise ValueError("params must be a non-empty dict name -> (shape, bijector or None).")
        self.names = tuple(params)
        self.shapes: dict[str, tuple] = {}
        self.bijectors: dict[str, Bijector] = {}
        self.slices: dict[str, slice] = {}
        self.ushapes: dict[str, tuple] = {}
        start = 0
        for name, spec in params.items():
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise ValueError(
                    f"params[{name!r}] must be a pair (shape, bijector or None), got {spec!r}; "
                    "for example {'sigma': ((), Exp())} or {'beta': ((3,), None)}."
                )
            shape, bij = spec
            shape = _as_shape(shape, name)
            bij = Identity() if bij is None else bij
            if not isinstance(bij, Bijector):
                raise ValueError(
                    f"params[{name!r}]: {bij!r} is not a ppl_loo.adapters.jax.bijectors.Bijector."
                )
            ushape = bij.unconstrained_shape(shape)
            size = prod(ushape)
            self.shapes[name] = shape
            self.bijectors[name] = bij
            self.ushapes[name] = ushape
            self.slices[name] = slice(start, start + size)
            start += size
        self.dim = start
        self.param_dims = {}
        param_dims = dict(param_dims or {})
        for name in self.names:
            shape = self.shapes[name]
            dims = param_dims.get(name)
            if dims is None:
                dims = tuple(f"{name}_dim_{k}" for k in range(len(shape)))
            dims = tuple(dims)
            if len(dims) != len(shape):
                raise ValueError(
                    f"param_dims[{name!r}] = {dims} has {len(dims)} names but the parameter has "
                    f"shape {shape}."
                )
            self.param_dims[name] = dims

    # -------------------------------------------------------------- unconstrained <-> named
    def split(self, theta) -> dict:
        """Unconstrained blocks of ``theta`` (shape ``(..., dim)``), reshaped per parameter."""
        theta = jnp.asarray(theta)
        batch = theta.shape[:-1]
        return {
            n: theta[..., self.slices[n]].reshape(batch + self.ushapes[n]) for n in self.names
        }

    def constrain(self, theta) -> dict:
        """Constrained values, ``name -> (..., *shape)`` for ``theta`` of shape ``(..., dim)``."""
        theta = jnp.asarray(theta)
        self._check_theta(theta)
        return {n: self.bijectors[n].forward(u) for n, u in self.split(theta).items()}

    def constrain_with_logdet(self, theta):
        """``(constrained dict, summed log |Jacobian|)`` of one draw ``theta`` ``(dim,)``."""
        blocks = self.split(theta)
        values, logdet = {}, 0.0
        for n, u in blocks.items():
            bij = self.bijectors[n]
            values[n] = bij.forward(u)
            if not isinstance(bij, Identity):
                logdet = logdet + jnp.sum(bij.log_det_jacobian(u))
        return values, logdet

    def _check_theta(self, theta):
        if theta.ndim < 1 or theta.shape[-1] != self.dim:
            raise ValueError(
                f"theta must have shape (..., {self.dim}) (the unconstrained dimension), "
                f"got {theta.shape}."
            )

    def unconstrain(self, posterior) -> np.ndarray:
        """Flat unconstrained draws ``(S, dim)`` from constrained draws.

        Parameters
        ----------
        posterior : xarray.DataTree, xarray.Dataset or mapping
            A DataTree (its ``posterior`` group) or Dataset whose variables have dims
            ``(chain, draw, ...)``, flattened chain-major; or a mapping ``name -> array`` of shape
            ``(S, *shape)`` or ``(chain, draw, *shape)``. Extra variables are ignored.

        Returns
        -------
        numpy.ndarray
            ``(S, dim)`` float64.

        Raises
        ------
        ValueError
            A variable is missing, has the wrong per-draw shape, has non-finite draws, or has
            draws outside the support of its bijector.
        """
        blocks, _ = read_draws(posterior, self.shapes, self.param_dims, convert=self._unconstrain_block)
        return np.concatenate(blocks, axis=1)

    def _unconstrain_block(self, name, vals, n_draws) -> np.ndarray:
        """Unconstrained ``(S, size)`` block of the draws of one parameter; raises outside its support."""
        finite = np.isfinite(vals)
        if not finite.all():
            bad = int((~finite).reshape(n_draws, -1).any(axis=1).sum())
            raise ValueError(
                f"posterior variable {name!r} has {bad} draw(s) with non-finite values "
                "(NaN or inf); remove those draws (for example a failed chain) first."
            )
        bij = self.bijectors[name]
        inside = np.asarray(bij.in_support(vals))
        u = np.asarray(bij.inverse(vals), dtype=np.float64)
        u_ok = np.isfinite(u).reshape(n_draws, -1).all(axis=1)
        ok = inside.reshape(n_draws, -1).all(axis=1) & u_ok
        if not ok.all():
            raise ValueError(
                f"posterior variable {name!r} has {int((~ok).sum())} draw(s) outside the "
                f"support of its transform {bij!r} (support: {bij.support}); check that the "
                "model declares the same constraint as the fitted model."
            )
        return u.reshape(n_draws, -1)


class LayoutMixin:
    """Dimension, parameter metadata and (un)constraining of a model that owns a layout.

    For the adapters that hold a :class:`ParameterLayout` as ``self.layout``
    (:class:`JaxModel`, :class:`~ppl_loo.models.LogisticRegression`,
    :class:`~ppl_loo.models.ReluNet`, :class:`~ppl_loo.adapters.jax.pvi.SimulatorModel`): every
    name, dim and transform comes from the layout, so it is written once here. List it before
    :class:`~ppl_loo.adapters.jax.base.PosteriorModel` among the bases.
    """

    layout: ParameterLayout

    @property
    def dim(self) -> int:
        """Unconstrained dimension (the length of ``theta``)."""
        return self.layout.dim

    @property
    def param_names(self) -> tuple:
        """Names of the constrained parameters, in the order of ``theta``."""
        return self.layout.names

    @property
    def param_dims(self) -> dict:
        """``name -> dims`` of each constrained parameter (without chain/draw)."""
        return self.layout.param_dims

    @uses_x64
    def constrain(self, theta) -> dict:
        """Constrained values ``name -> (S, *shape)`` of ``theta`` with shape ``(S, dim)``."""
        return self.layout.constrain(theta)

    @uses_x64
    def unconstrain(self, posterior) -> np.ndarray:
        """Unconstrained draws ``(S, dim)``; see :meth:`ParameterLayout.unconstrain`."""
        return self.layout.unconstrain(posterior)


def _what(err) -> str:
    """An exception raised by the user's function, in words (a missing key names itself as a parameter)."""
    if isinstance(err, KeyError):
        return f"it asks for the parameter {err.args[0]!r}, which is not declared in params"
    return f"{type(err).__name__}: {err}"


class JaxModel(LayoutMixin, PosteriorModel):
    """A posterior model from JAX functions of named, constrained parameters.

    Parameters
    ----------
    params : dict
        ``name -> (shape, bijector or None)``: the constrained shape of one draw and the
        bijector from the unconstrained space (:mod:`ppl_loo.adapters.jax.bijectors`; ``None`` is the
        identity). ``theta`` is the concatenation of the unconstrained blocks in this order, each
        flattened in C order.
    log_prior : callable
        ``log_prior(values) -> scalar``: log prior density on the *constrained* values (a dict of
        arrays of the declared shapes). The log-Jacobian is added by the model.
    log_lik : callable
        ``log_lik(values) -> array``: pointwise log-likelihood, any shape (``obs_shape``).
    var_name : str, default "y"
        Name of the log-likelihood variable (as in the DataTree's ``log_likelihood`` group).
    obs_dims : tuple of str, optional
        Dims of the log-likelihood variable; default ``(f"{var_name}_dim_0", ...)`` (ArviZ's).
    loo_log_density : callable, optional
        ``loo_log_density(values, i) -> scalar``: log prior plus log-likelihood of all data but
        observation ``i`` (flat index into ``log_lik``'s output, a traced integer), on
        constrained values, for models whose likelihood does not factorize. The log-Jacobian is
        added by the model. Default: ``log_prior + sum(log_lik) - log_lik[i]``.
    log_var_target : callable, optional
        ``log_var_target(values, i) -> scalar``: log of the variance-descent target ``f_i``
        (Eq. 19); default ``f = 1``.
    structure : GLMStructure or ReluStructure, optional
    adapt_index : array of int, optional
        Indices of ``theta`` the transformations act on (default all).
    param_dims : dict, optional
        ``name -> dims`` of each parameter (without ``chain``, ``draw``).
    coords : dict, optional
        Coordinate values for parameter and observation dims.
    observed : array, optional
        Observed data of shape ``obs_shape``, written to ``observed_data`` by
        :func:`ppl_loo.sampling.sample_nuts`.
    output : ppl_loo.model.Output, optional
        The per-observation output the likelihood is a function of, for the Gauss-Newton curvature
        of :func:`ppl_loo.laplace` and :func:`ppl_loo.laplace_predictive`: ``Output(fn, likelihood,
        sigma)`` with ``fn(values, X=None) -> (n, C)`` on constrained values (``X``: new inputs),
        ``likelihood`` ``"gaussian"`` (``sigma``: the noise sd), ``"bernoulli"`` or ``"categorical"``.

    Notes
    -----
    ``logp(theta) = log_prior(c(theta)) + sum(log_lik(c(theta))) + sum log|c'(theta)|`` with
    ``c`` the constraining map. ``n_obs`` and ``obs_shape`` come from one abstract evaluation of
    ``log_lik`` (:func:`jax.eval_shape`).

    Examples
    --------
    >>> from ppl_loo.models import JaxModel
    >>> from ppl_loo.adapters.jax.bijectors import Exp
    >>> import jax.numpy as jnp, jax.scipy.stats as st
    >>> y = jnp.array([0.3, -1.2, 0.8])
    >>> m = JaxModel({"mu": ((), None), "sigma": ((), Exp())},
    ...              lambda v: st.norm.logpdf(v["mu"], 0, 10) + st.expon.logpdf(v["sigma"]),
    ...              lambda v: st.norm.logpdf(y, v["mu"], v["sigma"]))
    >>> m.dim, m.n_obs
    (2, 3)
    """

    @uses_x64
    def __init__(
        self,
        params: Mapping,
        log_prior: Callable,
        log_lik: Callable,
        *,
        var_name: str = "y",
        obs_dims: tuple | None = None,
        loo_log_density: Callable | None = None,
        log_var_target: Callable | None = None,
        structure=None,
        adapt_index=None,
        param_dims: Mapping | None = None,
        coords: Mapping | None = None,
        observed=None,
        output=None,
    ):
        self.layout = ParameterLayout(params, param_dims)
        self.output = None if output is None else output._replace(fn=self._output_on_theta(output.fn))
        self._output_values_fn = None if output is None else output.fn  # on constrained values (pit_cdf)
        self._log_prior = log_prior
        self._log_lik = log_lik
        self._loo_log_density = loo_log_density
        self._log_var_target = log_var_target
        if log_var_target is not None:
            self.var_target_fn = self._var_target_on_theta
        if not isinstance(var_name, str) or not var_name.isidentifier():
            raise TypeError(f"JaxModel: var_name={var_name!r} must be the name (a non-empty string such as 'y') of "
                            "the log-likelihood variable, as in the DataTree's log_likelihood group")
        self.var_name = var_name
        self.structure = structure
        self.adapt_index = None if adapt_index is None else np.asarray(adapt_index, dtype=int)
        self.factorizes = loo_log_density is None
        self.coords = dict(coords or {})

        for fname, fn in (("log_prior", log_prior), ("log_lik", log_lik)):
            if not callable(fn):
                raise TypeError(f"JaxModel: {fname} must be a function of the dict of constrained parameter values "
                                f"(names {list(self.layout.names)}), got {type(fn).__name__}")
        abstract = {
            n: jax.ShapeDtypeStruct(self.layout.shapes[n], jnp.float64) for n in self.layout.names
        }
        out = _eval_shape(log_lik, "log_lik", abstract, self.layout.shapes)
        prior_out = _eval_shape(log_prior, "log_prior", abstract, self.layout.shapes)
        if tuple(getattr(prior_out, "shape", ())) != ():
            raise ValueError(f"log_prior must return one number (the joint log prior density); it returns shape "
                             f"{tuple(prior_out.shape)}: sum it, e.g. jnp.sum(jst.norm.logpdf(v['beta'], 0, 1)).")
        self.obs_shape = tuple(out.shape)
        self.n_obs = int(prod(self.obs_shape))
        if obs_dims is None:
            obs_dims = tuple(f"{self.var_name}_dim_{k}" for k in range(len(self.obs_shape)))
        self.obs_dims = tuple(obs_dims)
        if len(self.obs_dims) != len(self.obs_shape):
            raise ValueError(
                f"obs_dims {self.obs_dims} has {len(self.obs_dims)} names but log_lik returns "
                f"shape {self.obs_shape}."
            )
        self.observed = None if observed is None else np.asarray(observed)
        if self.observed is not None and self.observed.shape != self.obs_shape:
            raise ValueError(
                f"observed has shape {self.observed.shape} but log_lik returns {self.obs_shape}."
            )

    @property
    def pit_cdf(self):
        """The predictive CDF at the observed values, for :func:`ppl_loo.loo_pit`, from the declared ``output``:
        ``"gaussian"``, ``P(y_rep_i <= y_i | theta) = Phi((y_i - f_i) / sigma)``; ``"bernoulli"`` (a discrete
        outcome), the tuple ``(P(y_rep_i <= y_i | theta), P(y_rep_i < y_i | theta))`` with
        ``P(y_rep_i = 1) = expit(f_i)``. None without ``output`` and ``observed``, or for another likelihood."""
        if self.output is None or self.observed is None or self.output.likelihood not in ("gaussian", "bernoulli"):
            return None
        return self._output_cdf

    @uses_x64
    def _output_cdf(self, params):
        """:attr:`pit_cdf` at the points ``params`` (``{name: (M, *shape)}``, constrained): ``(M, *obs_shape)``."""
        from scipy import special, stats

        fn = self._output_values_fn
        f = np.asarray(jax.vmap(lambda v: jnp.reshape(fn(v), (-1,)))({k: jnp.asarray(v) for k, v in params.items()}))
        y = np.asarray(self.observed, dtype=np.float64).reshape(1, -1)
        if f.shape[1] != y.shape[1]:
            raise ValueError(f"output.fn gives {f.shape[1]} values per draw for {y.shape[1]} observations: pit_cdf "
                             "needs one output per observation (C = 1); pass pl.loo_pit cdf= instead.")
        shape = (f.shape[0],) + tuple(self.obs_shape)
        if self.output.likelihood == "gaussian":
            return stats.norm.cdf(y, f, self.output.sigma).reshape(shape)
        p1 = special.expit(f)
        return (np.where(y >= 1, 1.0, 1.0 - p1).reshape(shape), np.where(y >= 1, 1.0 - p1, 0.0).reshape(shape))

    def _output_on_theta(self, fn):
        def on_theta(theta, X=None):
            values, _ = self.layout.constrain_with_logdet(theta)
            out = fn(values) if X is None else fn(values, X)
            return jnp.reshape(out, (out.shape[0], -1))

        return on_theta

    # ------------------------------------------------------------------ per-draw
    def logp(self, theta):
        values, logdet = self.layout.constrain_with_logdet(theta)
        return self._log_prior(values) + jnp.sum(self._log_lik(values)) + logdet

    def log_prior(self, theta):
        """Log prior at one unconstrained draw, log-Jacobian included (the user's ``log_prior``)."""
        values, logdet = self.layout.constrain_with_logdet(theta)
        return self._log_prior(values) + logdet

    def loglik(self, theta):
        values = self.layout.constrain(theta)
        return jnp.ravel(self._log_lik(values))

    def loo_logp(self, theta, i):
        if self._loo_log_density is None:
            return super().loo_logp(theta, i)
        values, logdet = self.layout.constrain_with_logdet(theta)
        return self._loo_log_density(values, i) + logdet

    def _var_target_on_theta(self, theta, i):
        """The user's ``log_var_target`` at one unconstrained draw (the ``var_target_fn``)."""
        return self._log_var_target(self.layout.constrain(theta), i)


def _eval_shape(fn, fname, abstract, shapes):
    """``jax.eval_shape(fn, abstract)``, or a ValueError naming ``fname`` and the declared shapes."""
    try:
        return jax.eval_shape(fn, abstract)
    except Exception as err:  # noqa: BLE001 - rethrown with context
        raise ValueError(f"{fname} could not be evaluated on parameters of the declared shapes {shapes}: "
                         f"{_what(err)}") from err
