"""The workflow's handle on the adaptive search: the compiled engine of a model, kept among its
compiled programs, the search's settings as plain values, and the weighted points of a chosen proposal
rebuilt from a stored result."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.model.fingerprint import model_fingerprint
from ppl_loo.numerics.loo import EngineConfig, EngineData, build_engine, mapped_search
from ppl_loo.program_cache import exported_jit

__all__ = ["compiled_engine", "config_to_plain", "config_from_plain", "engine_data", "proposal_points", "draws_array",
           "adapted_weights_array"]

def compiled_engine(model, cfg, posterior_draws, batch_size, log_q_fn=None):
    """Build (or reuse) the jit-compiled search for this model and configuration.

    Kept among the model's compiled programs (``Model.compiled``, which the model's adapter keeps,
    :func:`ppl_loo.model.build.from_adapter`; nothing is stored on a PyMC or other third-party
    object), so that repeated LOO runs on new draws of the same shape (resamplings, refits,
    benchmarks) compile once, and the programs go with the model.

    Parameters
    ----------
    model : Model or adapter
        The model (through :func:`ppl_loo.adapters.as_model.as_model`).
    cfg : EngineConfig
    posterior_draws : bool
        False for draws of an approximation.
    batch_size : int
        Observations per vectorized call of the mapped search.
    log_q_fn : callable, optional
        The approximation's log density of one unconstrained draw.

    Returns
    -------
    tuple
        ``(search, points, mapped, prepare)``: :func:`~ppl_loo.numerics.loo.build_engine`'s two
        functions, the search mapped over observations and the jitted per-run statistics.
    """
    model = as_model(model)

    def build():
        search, points = build_engine(model, cfg, posterior_draws=posterior_draws, log_q_fn=log_q_fn)
        # the traced programs kept on disk for a model its fingerprint determines (not for an approximation's draws)
        fp = model_fingerprint(model) if log_q_fn is None else None
        key = None if fp is None else (fp, tuple(cfg), bool(posterior_draws), int(batch_size))
        mapped = mapped_search(search, batch_size)
        return (search, points, exported_jit(mapped, "search", key),
                exported_jit(search.prepare, "search.prepare", key))

    return model.compiled("engines", (cfg, bool(posterior_draws), int(batch_size), log_q_fn), build)


def config_to_plain(cfg, posterior_draws):
    """The search's settings as a JSON-able dict (tuples as lists) with ``posterior_draws``."""
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg._asdict().items()}
    out["posterior_draws"] = bool(posterior_draws)
    return out


def config_from_plain(plain):
    """The inverse of :func:`config_to_plain`: ``(EngineConfig, posterior_draws)``."""
    plain = dict(plain)
    posterior_draws = bool(plain.pop("posterior_draws", True))
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in plain.items() if k in EngineConfig._fields}
    return EngineConfig(**fields), posterior_draws


def proposal_points(model, theta, config, log_q=None, gauss=None, log_q_fn=None):
    """``points(i, ll_i, transform, hbar) -> (2 S, d)``: the pooled points ``[draws; images]`` of a
    candidate proposal of observation ``i``, matching the stored ``adapted_log_weights``.

    Parameters
    ----------
    model : Model
        The model the result was computed with (:func:`ppl_loo.adapters.as_model.as_model`).
    theta : array (S, d)
        Its unconstrained draws, chain-major.
    config : dict
        ``LooResult.engine_config``.
    log_q : array (S,), optional
        The approximation's log density at the draws (``LooResult.log_q``).
    gauss : SubspaceGaussian or MeanField, optional
        The Gaussian ``q`` of a ``pl.laplace`` / ``pl.qnvb`` fit (its cavity proposals need it).
    log_q_fn : callable, optional
        ``log q`` of one unconstrained draw (a ``pl.pvi`` fit's, :func:`~ppl_loo.workflow.approx.stored_q.pvi_log_q`):
        the proposals that move draws away from the draws (``mm_iter``, the mixtures) need ``q`` there, as the
        search had it.
    """
    cfg, posterior_draws = config_from_plain(config)
    _, points, _, _ = compiled_engine(model, cfg, posterior_draws, 1, log_q_fn)
    edata = engine_data(model, theta, config, log_q, gauss)

    def at(i, ll_i, transform, hbar):
        return np.asarray(points(edata, int(i), jnp.asarray(ll_i), str(transform), float(hbar)))

    return at


def engine_data(model, theta, config, log_q=None, gauss=None):
    """The draws as the search sees them (:class:`~ppl_loo.numerics.loo.EngineData`, with its
    per-run statistics), from the model, its unconstrained draws ``theta`` ``(S, d)``,
    ``LooResult.engine_config`` and, for draws of an approximation, ``LooResult.log_q``."""
    cfg, posterior_draws = config_from_plain(config)
    model = as_model(model)
    theta_j = jnp.asarray(np.asarray(theta, dtype=np.float64))
    logp0, grad = model.log_density_and_grad(theta_j)
    log_q0 = logp0 if log_q is None else jnp.asarray(np.asarray(log_q, dtype=np.float64).reshape(-1))
    _, _, _, prepare = compiled_engine(model, cfg, posterior_draws, 1)
    return prepare(EngineData(theta_j, logp0, log_q0, grad, model.line_cache(theta_j), gauss=gauss))


def draws_array(data, values, template=None, name=None):
    """``values`` of shape ``(S, *template.shape)`` (chain-major draws) as a DataArray over
    ``(chain, draw, *template.dims)`` with the posterior's and ``template``'s coordinates."""
    post = data["posterior"]
    values = np.asarray(values)
    chains = int(post.sizes.get("chain", 1))
    draws = values.shape[0] // chains
    dims, shape, coords = ("chain", "draw"), (chains, draws), {}
    for dim, size in zip(dims, shape):
        if dim in post.coords and post.sizes.get(dim) == size:
            coords[dim] = post.coords[dim].values
    if template is not None:
        dims, shape = dims + template.dims, shape + template.shape
        coords.update({k: v for k, v in template.coords.items()})
    return xr.DataArray(values.reshape(shape), dims=dims, coords=coords, name=name)


def adapted_weights_array(index, labels, log_weights):
    """The smoothed log weights ``(a, 2 S)`` of the adapted observations ``index`` (flat), with
    their proposals ``labels`` (``(transform, hbar)`` each) as coordinates."""
    index = np.asarray(index, dtype=np.int64).reshape(-1)
    lw = np.asarray(log_weights, dtype=np.float64)
    return xr.DataArray(
        lw, dims=("adapted", "adapted_point"), name="adapted_log_weights",
        coords={"adapted": index,
                "adapted_transform": ("adapted", np.asarray([str(t) for t, _ in labels], dtype=str)),
                "adapted_hbar": ("adapted", np.asarray([float(h) for _, h in labels], dtype=float))})
