"""NumPyro's NUTS on a JAX log density or a NumPyro model, returning arrays (no model objects, no xarray).

Used by the refits (exact LOO without one observation) and by :func:`ppl_loo.sampling.sample_nuts`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import prng_key

__all__ = ["nuts_draws", "nuts_model_samples", "default_chain_method"]


def default_chain_method(chain_method=None):
    """``chain_method`` where given, else how NumPyro runs the chains by default here: ``"vectorized"`` on an
    accelerator (many chains at once cost little more than a few there), ``"sequential"`` on a CPU (XLA does not
    spread vectorized chains over the cores, and each would wait for the longest trajectory)."""
    if chain_method is not None:
        return chain_method
    return "sequential" if jax.default_backend() == "cpu" else "vectorized"


@uses_x64
def nuts_draws(log_density, init, *, num_warmup, num_samples, random_seed, target_accept=0.8, max_tree_depth=10,
               chain_method=None):
    """NumPyro's NUTS on a JAX log density of the unconstrained vector; draws ``(chains, draws, dim)``.

    Parameters
    ----------
    log_density : callable
        ``log_density(theta) -> scalar`` (JAX-differentiable), unnormalized.
    init : array, shape (chains, dim)
        One starting point per chain (for refits: draws of the full-data posterior, already in
        the typical set, so warmup adapts the step size and metric instead of searching for it).
    num_warmup, num_samples, random_seed, target_accept, max_tree_depth, chain_method
        As in :func:`ppl_loo.sampling.sample_nuts`.

    Returns
    -------
    (draws, diverging)
        ``(chains, num_samples, dim)`` float64 array and ``(chains, num_samples)`` divergence flags.
    """
    from numpyro.infer import MCMC, NUTS  # NumPyro is imported when a sampler runs

    init = jnp.atleast_2d(jnp.asarray(init, dtype=jnp.float64))
    chains = init.shape[0]
    kernel = NUTS(potential_fn=lambda theta: -log_density(theta), target_accept_prob=float(target_accept),
                  max_tree_depth=int(max_tree_depth))
    mcmc = MCMC(kernel, num_warmup=int(num_warmup), num_samples=int(num_samples), num_chains=chains,
                chain_method=default_chain_method(chain_method), progress_bar=False)
    mcmc.run(prng_key(random_seed), init_params=init if chains > 1 else init[0], extra_fields=("diverging",))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)).reshape(chains, int(num_samples), -1)
    div = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["diverging"]).reshape(chains, -1)
    return draws, div


@uses_x64
def nuts_model_samples(numpyro_model, *, num_chains, num_warmup, num_samples, random_seed, target_accept=0.8,
                       max_tree_depth=10, chain_method=None):
    """NumPyro's NUTS on a NumPyro model: its sites ``{name: (chains, draws, ...)}`` and the divergence
    flags ``(chains, draws)``.

    The random stream is :func:`ppl_loo.sampling.sample_nuts`'s with ``numpyro_model`` (the run key
    is the second half of the seed's split), so both give the same draws for the same seed and ``chain_method``
    (:func:`default_chain_method` when None).
    """
    from numpyro.infer import MCMC, NUTS

    _, key_run = jax.random.split(prng_key(random_seed))
    kernel = NUTS(numpyro_model, target_accept_prob=target_accept, max_tree_depth=max_tree_depth, dense_mass=False)
    mcmc = MCMC(kernel, num_warmup=int(num_warmup), num_samples=int(num_samples), num_chains=int(num_chains),
                chain_method=default_chain_method(chain_method), progress_bar=False)
    mcmc.run(key_run, extra_fields=("diverging",))
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return samples, np.asarray(mcmc.get_extra_fields(group_by_chain=True)["diverging"])
