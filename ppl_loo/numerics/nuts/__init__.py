"""NUTS, the one sampler of the package, over arrays: two runners behind one import.

- :mod:`.chains` (NumPyro): the chains of one target, a JAX log density of the unconstrained vector
  (:func:`nuts_draws`) or a NumPyro model (:func:`nuts_model_samples`); what a model's own refit of one
  observation and :func:`ppl_loo.sampling.sample_nuts` run.
- :mod:`.batched` (BlackJAX): many targets at once, ``log_density(theta, i)`` for every ``i`` of a batch, all
  lanes in one compiled program (:func:`batched_nuts`); what the batched refits, K-fold and the mixture run use.

Stan programs are sampled by Stan's own NUTS (:mod:`ppl_loo.stan_bridge.sampler`); the entry point for a whole
model, whatever its backend, is :func:`ppl_loo.sampling.sample_nuts`.
"""

from .batched import BatchedTarget, batched_nuts, cpu_workers, lanes_per_batch
from .chains import default_chain_method, nuts_draws, nuts_model_samples

__all__ = ["BatchedTarget", "batched_nuts", "cpu_workers", "lanes_per_batch", "default_chain_method", "nuts_draws",
           "nuts_model_samples"]
