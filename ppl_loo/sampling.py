"""Fit a model with NUTS and return a DataTree: the one entry point to the package's samplers.

A Stan program (``pl.StanModel(..., sampler=True)``) runs Stan's own NUTS in-process
(:mod:`ppl_loo.stan_bridge.sampler`, CmdStan-format CSV read back with :func:`ppl_loo.from_cmdstan`); any other
model (:func:`ppl_loo.as_model`: PyMC, JAX) runs NumPyro's NUTS (:mod:`ppl_loo.numerics.nuts`). The many-target
runs of the refits and the mixture use :func:`ppl_loo.numerics.nuts.batched_nuts` behind ``pl.loo``.

The result has the groups the LOO workflow reads: ``posterior`` (named constrained variables,
dims ``chain, draw, ...``), ``log_likelihood`` (the model's ``var_name`` over its observation
dims), ``observed_data`` (when the model carries its data) and ``sample_stats``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.io import from_cmdstan
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.nuts import default_chain_method
from ppl_loo.numerics.random import prng_key
from ppl_loo.stan_bridge.model import StanModel
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

__all__ = ["sample_nuts"]

_EXTRA_FIELDS = (
    "diverging",
    "num_steps",
    "energy",
    "accept_prob",
    "potential_energy",
    "adapt_state.step_size",
)


def _param_names_and_dims(model) -> tuple[tuple, dict]:
    names = model.layout.names or None
    dims = dict(model.layout.dims or {})
    if names is None:
        values = model.constrain(np.zeros((1, model.dim)))
        names = tuple(values)
        for n, v in values.items():
            dims.setdefault(n, tuple(f"{n}_dim_{k}" for k in range(np.ndim(v) - 1)))
    return tuple(names), dims


def _initial_params(model, init, num_chains, key):
    d = model.dim
    if init is None or isinstance(init, (int, float)):
        radius = 2.0 if init is None else float(init)
        theta0 = jax.random.uniform(key, (num_chains, d), minval=-radius, maxval=radius)
    elif isinstance(init, (Mapping, xr.Dataset, xr.DataTree)):
        theta0 = jnp.asarray(model.unconstrain(init))
    else:
        theta0 = jnp.asarray(init, dtype=jnp.float64)
    theta0 = jnp.atleast_2d(theta0)
    if theta0.shape[-1] != d:
        raise ValueError(
            f"init has {theta0.shape[-1]} unconstrained coordinates but the model has dim={d}."
        )
    if theta0.shape[0] == 1:
        theta0 = jnp.broadcast_to(theta0, (num_chains, d))
    if theta0.shape[0] != num_chains:
        raise ValueError(f"init has {theta0.shape[0]} rows; pass 1 or num_chains={num_chains}.")
    if not bool(jnp.all(jnp.isfinite(jax.vmap(model.logp)(theta0)))):
        raise ValueError(
            "the model's log density is not finite at the initial point(s); pass init."
        )
    return theta0 if num_chains > 1 else theta0[0]


def _dataset(arrays: Mapping, dims: Mapping, coords: Mapping, sample_dims=("chain", "draw")):
    data_vars = {}
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        vdims = tuple(sample_dims) + tuple(dims.get(name, ()))
        if len(vdims) != arr.ndim:
            vdims = tuple(sample_dims) + tuple(
                f"{name}_dim_{k}" for k in range(arr.ndim - len(sample_dims))
            )
        data_vars[name] = (vdims, arr)
    ds = xr.Dataset(data_vars)
    cvals = {}
    for dim, size in ds.sizes.items():
        c = coords.get(dim)
        cvals[dim] = np.asarray(c) if c is not None and len(c) == size else np.arange(size)
    return ds.assign_coords(cvals)


@uses_x64
def sample_nuts(model, *, num_chains: int = 2, num_warmup: int = 500, num_samples: int = 500, random_seed,
                target_accept: float = 0.8, max_tree_depth: int = 10, init=None, progressbar: bool = False,
                numpyro_model: Callable | None = None, chain_method: str | None = None,
                dense_mass: bool = False) -> xr.DataTree:
    """Sample a model's posterior with NUTS: Stan's own for a Stan program, NumPyro's for the others.

    Parameters
    ----------
    model : StanModel, PosteriorModel or Model
        A ``pl.StanModel`` built with ``sampler=True`` (Stan's NUTS, in-process; ``init``, ``numpyro_model``,
        ``chain_method`` and ``dense_mass`` do not apply), or a JAX-traceable model (``JaxModel``,
        ``LogisticRegression``, ``ReluNet``, a PyMC model's adapter, ...), through :func:`ppl_loo.as_model`.
    num_chains, num_warmup, num_samples : int
    random_seed : int, numpy.random.Generator or JAX key
        Required: the only source of randomness (initial points and NUTS).
    target_accept : float, default 0.8
        NUTS target acceptance probability (Stan's ``adapt_delta``).
    max_tree_depth : int, default 10
    init : None, float, array or draws, optional
        Initial points for the ``logp`` sampler: ``None`` draws uniform(-2, 2) in the
        unconstrained space (Stan's default); a float sets that radius; an array ``(dim,)`` or
        ``(num_chains, dim)`` gives ``theta``; a dict / Dataset of constrained values (one row or
        one per chain) is passed through ``model.unconstrain``. With ``numpyro_model``, ``init`` is
        a NumPyro init strategy (default ``init_to_uniform``).
    progressbar : bool, default False
    numpyro_model : callable, optional
        A NumPyro model of the same posterior in a better parameterization (for example
        ``LogisticRegression.numpyro_model()``, non-centered). Its sample or deterministic sites
        must include the model's constrained variables (``model.param_names``); the draws are
        mapped to the model's unconstrained space with ``model.unconstrain``. Default: sample
        ``potential_fn = -model.logp`` in the model's own unconstrained space.
    chain_method : {"sequential", "vectorized", "parallel"}, optional
        How NumPyro runs the chains; ``"parallel"`` needs one JAX device per chain. Default: ``"vectorized"`` on an
        accelerator (64 chains cost little more than 4 there: ``docs/scale.md``), ``"sequential"`` on a CPU.
    dense_mass : bool, default False
        Adapt a dense mass matrix (only sensible for small ``dim``).

    Returns
    -------
    xarray.DataTree
        Groups ``posterior``, ``log_likelihood``, ``observed_data`` (if ``model.observed`` is
        set) and ``sample_stats`` (``diverging``, ``tree_depth``, ``n_steps``, ``energy``,
        ``acceptance_rate``, ``step_size``, ``lp`` = log density of the sampler's
        parameterization). ``posterior.attrs["sampling_time"]`` is the wall time in seconds.
    """
    num_chains, num_warmup, num_samples = int(num_chains), int(num_warmup), int(num_samples)
    if num_chains < 1 or num_samples < 1 or num_warmup < 0:
        raise ValueError("num_chains and num_samples must be >= 1 and num_warmup >= 0.")
    if isinstance(model, StanModel):
        return _stan_nuts(model, num_chains, num_warmup, num_samples, random_seed, target_accept, max_tree_depth)
    model = as_model(model)
    key_init, key_run = jax.random.split(prng_key(random_seed))
    names, param_dims = _param_names_and_dims(model)
    kernel, run_kwargs = _nuts_kernel(model, numpyro_model, init, num_chains, key_init, target_accept,
                                      max_tree_depth, dense_mass)
    chain_method = default_chain_method(chain_method)
    mcmc = _mcmc(kernel, num_chains, num_warmup, num_samples, chain_method, progressbar)
    t0 = time.perf_counter()
    mcmc.run(key_run, extra_fields=_EXTRA_FIELDS, **run_kwargs)
    samples = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(samples)
    sampling_time = time.perf_counter() - t0
    posterior, theta = _posterior_and_theta(model, names, samples, numpyro_model, num_chains, num_samples)
    attrs = _attrs(sampling_time, num_warmup, target_accept, max_tree_depth, numpyro_model)
    stats = _sample_stats(mcmc.get_extra_fields(group_by_chain=True))
    return _datatree(model, posterior, param_dims, theta, stats, attrs)


def _nuts_kernel(model, numpyro_model, init, num_chains, key_init, target_accept, max_tree_depth, dense_mass):
    """NumPyro's NUTS on ``-model.logp`` (``potential_fn``, unconstrained space) with initial points,
    or on ``numpyro_model`` with ``init`` as its init strategy; returns ``(kernel, run kwargs)``."""
    from numpyro.infer import NUTS

    options = {"target_accept_prob": target_accept, "max_tree_depth": max_tree_depth, "dense_mass": dense_mass}
    if numpyro_model is None:
        init_params = _initial_params(model, init, num_chains, key_init)
        kernel = NUTS(potential_fn=lambda theta: -model.logp(theta), **options)
        return kernel, {"init_params": init_params}
    if init is not None:
        options["init_strategy"] = init
    return NUTS(numpyro_model, **options), {}


def _mcmc(kernel, num_chains, num_warmup, num_samples, chain_method, progress_bar):
    from numpyro.infer import MCMC

    return MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method=chain_method, progress_bar=progress_bar)


def _posterior_and_theta(model, names, samples, numpyro_model, C, D):
    """The named constrained draws ``(C, D, ...)`` and the unconstrained draws ``(C * D, dim)``.

    Without ``numpyro_model`` NUTS ran on ``theta`` and ``model.constrain`` names the draws; with
    it, the model's variables are read from the NumPyro sites and mapped back with
    ``model.unconstrain``.
    """
    if numpyro_model is None:
        theta = np.asarray(samples).reshape(C * D, model.dim)
        constrained = model.constrain(theta)
        posterior = {n: np.asarray(constrained[n]).reshape((C, D) + constrained[n].shape[1:]) for n in names}
        return posterior, theta
    missing = [n for n in names if n not in samples]
    if missing:
        raise ValueError(
            f"numpyro_model has no sample or deterministic site named {missing}; it must "
            f"produce the model's constrained variables {list(names)}."
        )
    posterior = {n: np.asarray(samples[n]) for n in names}
    return posterior, model.unconstrain(posterior)


def _attrs(sampling_time, num_warmup, target_accept, max_tree_depth, numpyro_model) -> dict:
    import numpyro

    return {
        "created_at": datetime.now(UTC).isoformat(),
        "inference_library": "numpyro",
        "creation_library": "ppl_loo",
        "sampling_time": sampling_time,
        "num_warmup": num_warmup,
        "target_accept": float(target_accept),
        "max_tree_depth": int(max_tree_depth),
        "parameterization": "model.logp" if numpyro_model is None else "numpyro_model",
        "inference_library_version": numpyro.__version__,
    }


def _sample_stats(extra) -> dict:
    """Stan-named sampler statistics from NumPyro's extra fields (``lp`` = minus the potential)."""
    num_steps = np.asarray(extra["num_steps"]).astype(np.int64)
    # a tree of depth j has at most 2^j - 1 leapfrog steps (Stan's treedepth__)
    depth = np.floor(np.log2(np.maximum(num_steps, 1))) + 1
    stats = {
        "diverging": np.asarray(extra["diverging"]).astype(bool),
        "n_steps": num_steps,
        "tree_depth": np.where(num_steps > 0, depth, 0).astype(np.int64),
        "energy": np.asarray(extra["energy"]),
        "acceptance_rate": np.asarray(extra["accept_prob"]),
        "lp": -np.asarray(extra["potential_energy"]),
    }
    if "adapt_state.step_size" in extra:
        stats["step_size"] = np.asarray(extra["adapt_state.step_size"])
    return stats


def _datatree(model, posterior, param_dims, theta, stats, attrs) -> xr.DataTree:
    """``posterior``, ``log_likelihood`` (``model.log_lik`` at ``theta``), ``observed_data`` and
    ``sample_stats``, each with ``attrs``.

    Assembled here rather than by ``arviz_base.from_numpyro``: in the default parameterization NUTS
    samples a bare ``potential_fn`` (no NumPyro model to trace), the posterior comes from
    ``model.constrain`` and the pointwise log-likelihood from ``model.log_lik`` under the model's
    ``var_name`` and observation dims, none of which ``from_numpyro`` can see.
    """
    C, D = next(iter(posterior.values())).shape[:2]
    loglik = np.asarray(model.log_lik(theta)).reshape((C, D) + tuple(model.obs_shape))
    coords = dict(model.coords or {})
    obs_dims = {model.var_name: tuple(model.obs_dims)}
    groups = {
        "posterior": _dataset(posterior, param_dims, coords),
        "log_likelihood": _dataset({model.var_name: loglik}, obs_dims, coords),
    }
    observed = model.obs.observed
    if observed is not None:
        groups["observed_data"] = _dataset({model.var_name: np.asarray(observed)}, obs_dims, coords, ())
    groups["sample_stats"] = _dataset(stats, {}, {})
    for ds in groups.values():
        ds.attrs.update(attrs)
    return xr.DataTree.from_dict(groups)


def _stan_nuts(model, chains, warmup, draws, random_seed, target_accept, max_tree_depth) -> xr.DataTree:
    """Stan's NUTS on ``model`` (built with ``sampler=True``), its CSV files read back into a DataTree."""
    if isinstance(random_seed, np.random.Generator):
        random_seed = int(random_seed.integers(2**31))
    if not isinstance(random_seed, (int, np.integer)):
        raise TypeError(f"random_seed must be an int or a numpy.random.Generator for a Stan program, got "
                        f"{type(random_seed).__name__}.")
    with tempfile.TemporaryDirectory(prefix="ppl_loo_nuts_") as tmp:
        paths, _ = sample_cmdstan_csv(model, tmp, chains=chains, random_seed=int(random_seed), num_warmup=warmup,
                                      num_samples=draws, adapt_delta=float(target_accept),
                                      max_depth=int(max_tree_depth))
        tree = from_cmdstan([str(p) for p in paths], log_likelihood=model.loo_options["log_likelihood"])
        return tree.load()
