"""Adaptive LOO for a model written as a pl.JaxModel: a normal mean with unknown scale and an outlier.

    .venv/bin/python examples/quickstart.py
"""

import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np

import ppl_loo as pl
from ppl_loo.adapters.jax.bijectors import Exp
from ppl_loo.sampling import sample_nuts

y = np.r_[np.random.default_rng(0).normal(size=11), 7.5]


def log_prior(p):
    # the second term is a half-normal up to a constant (sigma > 0)
    return jst.norm.logpdf(p["mu"], 0, 10) + jst.norm.logpdf(p["sigma"], 0, 5)


def log_lik(p):
    return jst.norm.logpdf(jnp.asarray(y), p["mu"], p["sigma"])


model = pl.JaxModel({"mu": ((), None), "sigma": ((), Exp())}, log_prior, log_lik, obs_dims=("obs",))
data = sample_nuts(model, num_chains=4, num_warmup=500, num_samples=500, random_seed=1)
res = pl.loo(data, model)
print(res)
print(res.summary_table())
data = pl.add_loo(data, res)
print(data["loo"])
