"""The DataTree of draws from an approximation (``pl.pvi``, ``pl.laplace``, ``pl.qnvb``): constrained
``posterior`` draws named like the model's variables, their ``log_likelihood``, the ``observed_data``,
and the fit's own group, added to the user's tree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.numerics import gaussian
from ppl_loo.numerics.random import prng_key, seed_from

__all__ = ["posterior_dataset", "log_likelihood_dataset", "observed_dataset", "obs_coords", "approximation_tree",
           "check_input_tree", "check_draws", "fit_key", "gaussian_draws", "initial_point"]


def initial_point(init, dim, key, method):
    """The starting point in the unconstrained space: ``init`` (checked: ``dim`` finite values) or small
    random values (zero is a saddle point of a ReLU network)."""
    if init is None:
        return 0.1 * jax.random.normal(key, (int(dim),))
    x = np.asarray(init, dtype=np.float64)
    if x.size != int(dim) or not np.all(np.isfinite(x)):
        raise ValueError(f"pl.{method}: optimizer.init must be {dim} finite values (a point in the model's "
                         f"unconstrained space, ppl_loo.as_model(model).layout.labels); got shape {x.shape}"
                         + ("" if x.size != int(dim) else " with non-finite values") + ".")
    return jnp.asarray(x.reshape(int(dim)))


def check_draws(draws):
    """``draws >= 10`` (pl.loo needs at least 10)."""
    if int(draws) < 10:
        raise ValueError(f"draws={draws} must be >= 10 (pl.loo needs at least 10; use hundreds).")


def fit_key(random_seed, pm):
    """The raw JAX key of a fit: from ``random_seed``, or for None from a seed derived from the model's observed
    data (:func:`~ppl_loo.numerics.random.seed_from`: a rerun on the same input reproduces)."""
    observed = [] if pm.obs.observed is None else [pm.obs.observed]
    return prng_key(seed_from(random_seed, *observed))


def gaussian_draws(q, draws, dim, key):
    """``draws`` draws of the Gaussian ``q`` (:mod:`ppl_loo.numerics.gaussian`) and their ``log q``."""
    theta = np.asarray(gaussian.sample(q, jax.random.normal(key, (int(draws), int(dim)))))
    return theta, np.asarray(jax.vmap(lambda th: gaussian.log_q(q, th))(jnp.asarray(theta)))


def check_input_tree(data, method):
    """``data`` is None or a DataTree without a ``posterior`` group (the fit writes its draws there)."""
    if data is None:
        return None
    if not isinstance(data, xr.DataTree):
        raise TypeError(f"data must be an xarray.DataTree or None, got {type(data).__name__}.")
    if "posterior" in data.children:
        raise ValueError(f"data already has a posterior group: pl.{method} writes its draws there; pass data "
                         "without it (its other groups are kept).")
    return data


def posterior_dataset(pm, theta):
    """The constrained draws ``theta`` (one chain) as a posterior dataset with the model's dims and coords."""
    values = pm.constrain(theta)
    data_vars, coords = {}, {}
    for name, arr in values.items():
        arr = np.asarray(arr)[None]
        dims = tuple(pm.layout.dims.get(name, ()))
        if len(dims) != arr.ndim - 2:
            dims = tuple(f"{name}_dim_{k}" for k in range(arr.ndim - 2))
        data_vars[name] = (("chain", "draw") + dims, arr)
        for dim, size in zip(dims, arr.shape[2:]):
            c = pm.coords.get(dim)
            coords[dim] = np.asarray(c) if c is not None and len(c) == size else np.arange(size)
    coords.update(chain=[0], draw=np.arange(theta.shape[0]))
    return xr.Dataset(data_vars, coords=coords)


def obs_coords(pm):
    """The coordinates of the observation dims (the model's own where their length matches, else ranges)."""
    coords = {}
    for dim, size in zip(pm.obs_dims, pm.obs_shape):
        c = pm.coords.get(dim)
        coords[dim] = np.asarray(c) if c is not None and len(c) == size else np.arange(size)
    return coords


def log_likelihood_dataset(pm, ll):
    """The pointwise log-likelihood ``ll`` (draws x observations) as a one-chain log_likelihood dataset."""
    S = ll.shape[0]
    return xr.Dataset({pm.var_name: (("chain", "draw") + tuple(pm.obs_dims), ll.reshape((1, S) + tuple(pm.obs_shape)))},
                      coords={"chain": [0], "draw": np.arange(S), **obs_coords(pm)})


def observed_dataset(pm):
    """The observed outcomes over the observation dims (and event dims of vector outcomes), or None."""
    yv = np.asarray(pm.obs.observed)
    shape = tuple(pm.obs_shape)
    if not (yv.size == pm.n_obs or yv.shape[: len(shape)] == shape):
        return None
    yv = yv.reshape(shape + yv.shape[len(shape):] if yv.size != pm.n_obs else shape)
    dims = tuple(pm.obs_dims) + tuple(f"{pm.var_name}_event_{k}" for k in range(yv.ndim - len(pm.obs_dims)))
    return xr.Dataset({pm.notes.get("observed", pm.var_name): (dims, yv)}, coords=obs_coords(pm))


def approximation_tree(pm, data, theta, group_name, group, method):
    """``data``'s groups plus ``posterior`` (the draws ``theta`` of ``q``, constrained), their
    ``log_likelihood`` and the ``observed_data`` where missing, and the fit's ``group``."""
    children = {} if data is None else {name: node.to_dataset() for name, node in data.children.items()}
    post = posterior_dataset(pm, theta)
    post.attrs.update(inference_library=f"ppl_loo.{method}", method=method)
    children["posterior"] = post
    if "log_likelihood" not in children and pm.log_lik is not None:
        ll = np.asarray(pm.log_lik(jnp.asarray(theta)))
        children["log_likelihood"] = log_likelihood_dataset(pm, ll)
    if "observed_data" not in children and pm.obs.observed is not None:
        observed = observed_dataset(pm)
        if observed is not None:
            children["observed_data"] = observed
    children[group_name] = group
    return xr.DataTree.from_dict(children)
